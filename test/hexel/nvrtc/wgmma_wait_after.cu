// wait_group_after: the wait for a group comes after the arithmetic that feeds its arguments in
// the SASS, not only in the PTX (ptxas otherwise schedules a wait as early as its block allows).
// RUN: %hexel-nvrtc --arch=compute_90a %s -o %t.ptx
// RUN: %ptxas -arch=sm_90a %t.ptx -o %t.cubin
// RUN: %python %S/../sass_waits.py %t.cubin | FileCheck %s
#include "hexel/wgmma.cuh"

using namespace hexel;

__device__ float ex2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// Two groups in flight: s, then o. The 64 exponentials of s (complete after the wait for one
// group left) are computed while o's group runs; the wait for o comes after all of them.
extern "C" __global__ void __launch_bounds__(128, 1) wait_after_kernel(float* out) {
  extern __shared__ __align__(1024) unsigned char smem[];
  const auto a = wgmma::kmajor_desc(smem_addr(smem), Swizzle::B128);
  const auto b = wgmma::kmajor_desc(smem_addr(smem + 16384), Swizzle::B128);
  float s[64], o[64];
  wgmma::fence();
  wgmma::mma_ss<128>(s, a, b, false);
  wgmma::commit_group();
  wgmma::mma_ss<128>(o, a, b.advanced(32), false);
  wgmma::commit_group();
  wgmma::wait_group<1>();
  wgmma::fence_operand(s);
  float x = 0.f, y = 0.f;
  for (int i = 0; i < 32; ++i) s[i] = ex2(s[i]), x += s[i];
  for (int i = 32; i < 64; ++i) s[i] = ex2(s[i]), y += s[i];
  wgmma::wait_group_after<0>(x, y);
  wgmma::fence_operand(o);
  for (int i = 0; i < 64; ++i) out[128 * i + threadIdx.x] = o[i] * s[i];
}
// CHECK: wait_after_kernel: wait 1 after 0 MUFU
// CHECK-NEXT: wait_after_kernel: wait 0 after 64 MUFU
