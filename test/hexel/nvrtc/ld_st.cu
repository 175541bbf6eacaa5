// Shared-memory stores by 32-bit address (ordered and unordered 128-bit, 64-bit f32, 32-bit), the
// 64-bit f32 shared load, and the non-allocating global load, for Hopper and Blackwell.
// RUN: %hexel-nvrtc --arch=compute_90a %s -o %t.90.ptx
// RUN: %ptxas -arch=sm_90a %t.90.ptx -o %t.90.cubin
// RUN: FileCheck %s < %t.90.ptx
// RUN: %hexel-nvrtc --arch=compute_100a %s -o %t.100.ptx
// RUN: %ptxas -arch=sm_100a %t.100.ptx -o %t.100.cubin
// RUN: FileCheck %s < %t.100.ptx
#include "hexel/ld_st.cuh"

extern "C" __global__ void ld_st_kernel(const uint4* in, unsigned* out) {
  __shared__ alignas(16) unsigned buf[4 * 4 * 128];
  using namespace hexel;
  const uint4 v = ld_nc_no_allocate_v4(in + threadIdx.x);
  const uint32_t at = smem_addr(buf) + 16 * threadIdx.x;
  st_shared_v4(at, v.x, v.y, v.z, v.w);
  st_shared_v4_unordered(at + 16 * 128, v.w, v.z, v.y, v.x);
  st_shared_v2_f32(at + 32 * 128, 1.f, 2.f);
  st_shared_b32(at + 48 * 128, v.x);
  __syncthreads();
  const float2 f = ld_shared_v2_f32(smem_addr(buf) + 8 * ((threadIdx.x * 3) % 256));
  out[threadIdx.x] = buf[(threadIdx.x * 7) % (4 * 4 * 128)] + __float_as_uint(f.x + f.y);
}
// CHECK-LABEL: .entry ld_st_kernel
// CHECK: ld.global.nc.L1::no_allocate.v4.u32
// CHECK: st.shared.v4.b32 [{{%r[0-9]+}}], {{{%r[0-9]+}}, {{%r[0-9]+}}, {{%r[0-9]+}}, {{%r[0-9]+}}};
// CHECK: st.shared.v4.u32 [{{%r[0-9]+}}],
// CHECK: st.shared.v2.f32 [{{%r[0-9]+}}], {{{%f[0-9]+}}, {{%f[0-9]+}}};
// CHECK: st.shared.b32 [{{%r[0-9]+}}], {{%r[0-9]+}};
// CHECK: ld.shared.v2.f32 {{{%f[0-9]+}}, {{%f[0-9]+}}}, [{{%r[0-9]+}}];
