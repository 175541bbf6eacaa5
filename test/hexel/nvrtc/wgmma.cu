// wgmma: every N from 8 to 256 for bf16 SS and RS, plus f16 with transposes and fp8 (sm_90a).
// RUN: %hexel-nvrtc --arch=compute_90a %s -o %t.ptx
// RUN: %ptxas -arch=sm_90a %t.ptx -o %t.cubin
// RUN: FileCheck %s < %t.ptx
#include "hexel/wgmma.cuh"

using namespace hexel;

template <int N>
__device__ void one_n(float* out, wgmma::SmemDesc a, wgmma::SmemDesc b, const uint32_t (&ar)[4]) {
  float d[N / 2];
  for (int i = 0; i < N / 2; ++i) d[i] = 0.f;
  wgmma::fence();
  wgmma::mma_ss<N>(d, a, b, false);
  wgmma::mma_rs<N>(d, ar, b, true);
  wgmma::commit_group();
  wgmma::wait_group<0>();
  wgmma::fence_operand(d);
  float s = 0.f;
  for (int i = 0; i < N / 2; ++i) s += d[i];
  out[N] = s;
}

template <int... Ns>
__device__ void all_n(float* out, wgmma::SmemDesc a, wgmma::SmemDesc b, const uint32_t (&ar)[4]) {
  (one_n<Ns>(out, a, b, ar), ...);
}

extern "C" __global__ void wgmma_kernel(float* out, const uint32_t* regs) {
  extern __shared__ __align__(1024) unsigned char smem[];
  const auto a = wgmma::kmajor_desc(smem_addr(smem), Swizzle::B128);
  const auto b = wgmma::kmajor_desc(smem_addr(smem + 16384), Swizzle::B128);
  const uint32_t ar[4] = {regs[0], regs[1], regs[2], regs[3]};
  all_n<8, 16, 24, 32, 40, 48, 56, 64, 72, 80, 88, 96, 104, 112, 120, 128, 136, 144, 152, 160,
        168, 176, 184, 192, 200, 208, 216, 224, 232, 240, 248, 256>(out, a, b, ar);

  float h[64];
  wgmma::fence();
  wgmma::mma_ss<128, wgmma::AbType::F16, wgmma::Major::MN, wgmma::Major::MN>(h, a, b, false);
  wgmma::mma_ss<128, wgmma::AbType::E4M3>(h, a, b.advanced(32), true);
  wgmma::mma_ss<128, wgmma::AbType::E5M2>(h, a, b, true);
  wgmma::mma_rs<128, wgmma::AbType::E4M3>(h, ar, b, true);
  wgmma::mma_rs<128, wgmma::AbType::F16, wgmma::Major::MN>(h, ar, b, true);
  wgmma::commit_group();
  wgmma::wait_group<0>();
  for (int i = 0; i < 64; ++i) out[300 + i] = h[i];
}
// CHECK-LABEL: .entry wgmma_kernel
// CHECK: wgmma.fence.sync.aligned
// CHECK: wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 {{{.*}}}, %rd{{[0-9]+}}, %rd{{[0-9]+}}, p, 1, 1, 0, 0;
// CHECK: wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 {{{.*}}}, {%r{{[0-9]+}}, %r{{[0-9]+}}, %r{{[0-9]+}}, %r{{[0-9]+}}}, %rd{{[0-9]+}}, p, 1, 1, 0;
// CHECK: wgmma.commit_group.sync.aligned
// CHECK: wgmma.wait_group.sync.aligned 0
// CHECK: wgmma.mma_async.sync.aligned.m64n136k16.f32.bf16.bf16
// CHECK: wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16
// CHECK: wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {{{.*}}}, {%r
// CHECK: wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 {{.*}}, p, 1, 1, 1, 1;
// CHECK: wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 {{.*}}, p, 1, 1;
// CHECK: wgmma.mma_async.sync.aligned.m64n128k32.f32.e5m2.e5m2
// CHECK: wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 {{{.*}}}, {%r
// CHECK: wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 {{.*}}, p, 1, 1, 1;
