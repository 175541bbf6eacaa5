// Loads and stores in the forms kernels need and C++ does not spell: 128-, 64- and 32-bit stores to
// shared memory by 32-bit shared address, and a global load that does not allocate in L1
// (PTX ISA, "Data Movement and Conversion Instructions: ld, st").
#pragma once
#include "hexel/config.cuh"

#if defined(__CUDACC__)
namespace hexel {

// Thread: 16 bytes (four words) to shared memory at `addr` (16-byte aligned). PTX: st
// (.shared.v4.b32).
HEXEL_DEVICE void st_shared_v4(uint32_t addr, uint32_t a, uint32_t b, uint32_t c, uint32_t d) {
  asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};" ::"r"(addr), "r"(a), "r"(b), "r"(c),
               "r"(d)
               : "memory");
}

// The same store without the "memory" clobber: the compiler may move the thread's other memory
// accesses across it (its global loads for later stores above it, so their round trips overlap),
// which is right only for shared memory that nothing reads before a later fence and barrier (a
// volatile asm keeps its order against those). PTX: st (.shared.v4.u32).
HEXEL_DEVICE void st_shared_v4_unordered(uint32_t addr, uint32_t a, uint32_t b, uint32_t c,
                                         uint32_t d) {
  asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};" ::"r"(addr), "r"(a), "r"(b), "r"(c),
               "r"(d));
}

// Thread: 16 bytes (four words) from shared memory at `addr` (16-byte aligned), ordered after the
// thread's earlier barrier waits and before its later fences ("memory" clobber). PTX: ld
// (.shared.v4.b32).
HEXEL_DEVICE uint4 ld_shared_v4(uint32_t addr) {
  uint4 v;
  asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "r"(addr)
               : "memory");
  return v;
}

// Thread: one word to shared memory at `addr` (4-byte aligned). PTX: st (.shared.b32).
HEXEL_DEVICE void st_shared_b32(uint32_t addr, uint32_t a) {
  asm volatile("st.shared.b32 [%0], %1;" ::"r"(addr), "r"(a) : "memory");
}

// Thread: two f32 to shared memory at `addr` (8-byte aligned). PTX: st (.shared.v2.f32).
HEXEL_DEVICE void st_shared_v2_f32(uint32_t addr, float a, float b) {
  asm volatile("st.shared.v2.f32 [%0], {%1, %2};" ::"r"(addr), "f"(a), "f"(b) : "memory");
}

// Thread: two f32 from shared memory at `addr` (8-byte aligned), ordered as ld_shared_v4.
// PTX: ld (.shared.v2.f32).
HEXEL_DEVICE float2 ld_shared_v2_f32(uint32_t addr) {
  float2 v;
  asm volatile("ld.shared.v2.f32 {%0, %1}, [%2];" : "=f"(v.x), "=f"(v.y) : "r"(addr) : "memory");
  return v;
}

// Thread: 16 bytes of global memory through the non-coherent path without allocating in L1 (data
// read once, never written during the kernel). PTX: ld (.global.nc.L1::no_allocate.v4.u32).
HEXEL_DEVICE uint4 ld_nc_no_allocate_v4(const void* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

}  // namespace hexel
#endif
