// The warp-level bf16 and f16 (m16n8k16) and e4m3 (m16n8k32) mma, f32 accumulators, for Hopper and
// Blackwell.
// RUN: %hexel-nvrtc --arch=compute_90a %s -o %t.90.ptx
// RUN: %ptxas -arch=sm_90a %t.90.ptx -o %t.90.cubin
// RUN: FileCheck %s < %t.90.ptx
// RUN: %hexel-nvrtc --arch=compute_100a %s -o %t.100.ptx
// RUN: %ptxas -arch=sm_100a %t.100.ptx -o %t.100.cubin
// RUN: FileCheck %s < %t.100.ptx
#include "hexel/mma.cuh"

extern "C" __global__ void mma_kernel(const unsigned* a, const unsigned* b, float* d) {
  using namespace hexel;
  const uint32_t frag[4] = {a[4 * threadIdx.x], a[4 * threadIdx.x + 1], a[4 * threadIdx.x + 2],
                            a[4 * threadIdx.x + 3]};
  float acc[4] = {0.f, 0.f, 0.f, 0.f};
  mma_m16n8k16_bf16(acc, frag, b[2 * threadIdx.x], b[2 * threadIdx.x + 1]);
  mma_m16n8k16_bf16(acc, frag, b[2 * threadIdx.x + 1], b[2 * threadIdx.x]);
  mma_m16n8k32_e4m3(acc, frag, b[2 * threadIdx.x], b[2 * threadIdx.x + 1]);
  mma_m16n8k16_f16(acc, frag, b[2 * threadIdx.x], b[2 * threadIdx.x + 1]);
  for (int i = 0; i < 4; ++i) d[4 * threadIdx.x + i] = acc[i];
}
// CHECK-LABEL: .entry mma_kernel
// CHECK-COUNT-2: mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32
// CHECK: mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32
// CHECK: mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32
