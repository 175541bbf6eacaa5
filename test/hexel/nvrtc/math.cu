// bf16x2 packing and the special-function-unit ex2 / rcp, for Hopper and Blackwell; the packing
// puts `lo` in the low half (cvt's second source).
// RUN: %hexel-nvrtc --arch=compute_90a %s -o %t.90.ptx
// RUN: %ptxas -arch=sm_90a %t.90.ptx -o %t.90.cubin
// RUN: FileCheck %s < %t.90.ptx
// RUN: %hexel-nvrtc --arch=compute_100a %s -o %t.100.ptx
// RUN: %ptxas -arch=sm_100a %t.100.ptx -o %t.100.cubin
// RUN: FileCheck %s < %t.100.ptx
#include "hexel/math.cuh"

extern "C" __global__ void math_kernel(const float* in, unsigned* packed, float* out) {
  using namespace hexel;
  const float lo = in[2 * threadIdx.x], hi = in[2 * threadIdx.x + 1];
  packed[threadIdx.x] = pack_bf16x2(lo, hi);
  out[threadIdx.x] = rcp_approx(1.f + ex2_approx(lo));
}
// CHECK-LABEL: .entry math_kernel
// CHECK: ld.global.f32 [[LO:%f[0-9]+]], [{{%rd[0-9]+}}];
// CHECK: ld.global.f32 [[HI:%f[0-9]+]], [{{%rd[0-9]+}}+4];
// CHECK: cvt.rn.bf16x2.f32 {{%r[0-9]+}}, [[HI]], [[LO]];
// CHECK: ex2.approx.ftz.f32
// CHECK: rcp.approx.ftz.f32
