// bf16x2 and f16x2 packing, the e4m3 pair conversions and the special-function-unit ex2 / rcp, for
// Hopper and Blackwell; the packings put `lo` in the low half (cvt's second source).
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
  packed[blockDim.x + threadIdx.x] = pack_f16x2_satfinite(lo, hi);
  out[threadIdx.x] = rcp_approx(1.f + ex2_approx(lo));
}
// CHECK-LABEL: .entry math_kernel
// CHECK: ld.global.f32 [[LO:%f[0-9]+]], [{{%rd[0-9]+}}];
// CHECK: ld.global.f32 [[HI:%f[0-9]+]], [{{%rd[0-9]+}}+4];
// CHECK: cvt.rn.bf16x2.f32 {{%r[0-9]+}}, [[HI]], [[LO]];
// CHECK: cvt.rn.satfinite.f16x2.f32 {{%r[0-9]+}}, [[HI]], [[LO]];
// CHECK: ex2.approx.ftz.f32
// CHECK: rcp.approx.ftz.f32

extern "C" __global__ void e4m3_kernel(const float* in, unsigned* pair, float* back) {
  using namespace hexel;
  const float lo = in[2 * threadIdx.x], hi = in[2 * threadIdx.x + 1];
  const unsigned q = cvt_e4m3x2_f32(lo, hi);
  pair[threadIdx.x] = q;
  back[threadIdx.x] = cvt_f32_f16(cvt_f16x2_e4m3x2(q));
}
// CHECK-LABEL: .entry e4m3_kernel
// CHECK: ld.global.f32 [[LO8:%f[0-9]+]], [{{%rd[0-9]+}}];
// CHECK: ld.global.f32 [[HI8:%f[0-9]+]], [{{%rd[0-9]+}}+4];
// CHECK: cvt.rn.satfinite.e4m3x2.f32 p, [[HI8]], [[LO8]];
// CHECK: cvt.rn.f16x2.e4m3x2
