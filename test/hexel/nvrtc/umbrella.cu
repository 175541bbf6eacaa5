// The umbrella header compiles under NVRTC for both targets (no host headers leak into device
// code), and its constexpr descriptor builders work in device code.
// RUN: %hexel-nvrtc --arch=compute_90a %s -o %t.90.ptx
// RUN: %ptxas -arch=sm_90a %t.90.ptx -o %t.90.cubin
// RUN: FileCheck %s < %t.90.ptx
// RUN: %hexel-nvrtc --arch=compute_100a %s -o %t.100.ptx
// RUN: %ptxas -arch=sm_100a %t.100.ptx -o %t.100.cubin
// RUN: FileCheck %s < %t.100.ptx
#include "hexel/hexel.cuh"

extern "C" __global__ void umbrella_kernel(unsigned long long* out) {
  using namespace hexel;
  constexpr auto h = wgmma::kmajor_desc(0x400, Swizzle::B128);
  constexpr auto b = tcgen05::kmajor_desc(0x400, Swizzle::B128);
  static_assert(h.bits == 0x4000004000010040ull && b.bits == 0x4000404000010040ull);
  out[threadIdx.x] = h.bits + b.bits + swizzled_offset(threadIdx.x * 16, Swizzle::B128) +
                     tcgen05::tmem_addr(threadIdx.x, 0) + tma::tile_bytes<uint16_t>(64, 128);
}
// CHECK-LABEL: .entry umbrella_kernel
// CHECK: st.global.u64
