// Global memory accessed with an explicit memory-model order and scope: the loads, stores and
// reductions other CTAs of the same launch poll or count, and the fence of a release pattern
// (PTX ISA, "Memory Consistency Model" for the orders and scopes; "Data Movement and Conversion
// Instructions: ld, st"; "Parallel Synchronization and Communication Instructions: red,
// membar/fence"). Each access is one thread's; every function carries a "memory" clobber.
#pragma once
#include "hexel/config.cuh"

#if defined(__CUDACC__)
namespace hexel {

// Thread: a gpu-scope acquire-release fence. Followed by a relaxed write (red_add_relaxed_gpu) it
// is a release pattern: everything that precedes the fence in causality order (this thread's
// accesses, and those of the threads that met it at a barrier before) precedes the write for a
// reader that acquires it. PTX: fence (.acq_rel.gpu).
HEXEL_DEVICE void fence_acq_rel_gpu() {
  asm volatile("fence.acq_rel.gpu;" ::: "memory");
}

// Thread: *p with acquire semantics at gpu scope (the reader's half of a release pattern).
// PTX: ld (.acquire.gpu.global.u32).
HEXEL_DEVICE uint32_t ld_acquire_gpu(const uint32_t* p) {
  uint32_t v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

// Thread: the 16 bytes at p (16-byte aligned), relaxed at gpu scope: four 32-bit elements, each
// single-copy atomic, so a word other CTAs write once is either the old or the new value.
// PTX: ld (.relaxed.gpu.global.v4.b32).
HEXEL_DEVICE uint4 ld_relaxed_gpu_v4(const void* p) {
  uint4 v;
  asm volatile("ld.relaxed.gpu.global.v4.b32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p)
               : "memory");
  return v;
}

// Thread: the 8 bytes at p (8-byte aligned), relaxed at gpu scope: two 32-bit elements, each
// single-copy atomic. PTX: ld (.relaxed.gpu.global.v2.b32).
HEXEL_DEVICE uint2 ld_relaxed_gpu_v2(const void* p) {
  uint2 v;
  asm volatile("ld.relaxed.gpu.global.v2.b32 {%0, %1}, [%2];" : "=r"(v.x), "=r"(v.y) : "l"(p) : "memory");
  return v;
}

// Thread: *p = v, relaxed at gpu scope (a word that other CTAs poll). PTX: st
// (.relaxed.gpu.global.b32).
HEXEL_DEVICE void st_relaxed_gpu(uint32_t* p, uint32_t v) {
  asm volatile("st.relaxed.gpu.global.b32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

// Thread: p[0] += a, p[1] += b in L2 (8-byte aligned), relaxed at gpu scope, nothing returned to
// wait for. f32: rounded to nearest even, subnormal inputs and results flushed to sign-preserving
// zero on global memory (the add of a TMA f32 reduction, cp.reduce.async.bulk .add.f32).
// PTX: red (.relaxed.gpu.global.add.v2.f32, sm_90).
HEXEL_DEVICE void red_add_relaxed_gpu(float* p, float a, float b) {
  asm volatile("red.relaxed.gpu.global.add.v2.f32 [%0], {%1, %2};" ::"l"(p), "f"(a), "f"(b)
               : "memory");
}

// Thread: *p += V (an immediate), relaxed at gpu scope. PTX: red (.relaxed.gpu.global.add.u32).
template <uint32_t V>
HEXEL_DEVICE void red_add_relaxed_gpu(uint32_t* p) {
  asm volatile("red.relaxed.gpu.global.add.u32 [%0], %1;" ::"l"(p), "n"(V) : "memory");
}

// Thread: *p += v as a release pattern at gpu scope, fence_acq_rel_gpu then a relaxed reduction,
// in one statement: a count that other CTAs acquire (ld_acquire_gpu) to learn that everything
// before it is visible. PTX: fence (.acq_rel.gpu), red (.relaxed.gpu.global.add.u32).
HEXEL_DEVICE void red_add_release_gpu(uint32_t* p, uint32_t v) {
  asm volatile("fence.acq_rel.gpu;\n\tred.relaxed.gpu.global.add.u32 [%0], %1;" ::"l"(p), "r"(v)
               : "memory");
}

// Thread: *p with acquire semantics at system scope: a word another GPU writes (over NVLink, into
// this GPU's memory) to say that what it wrote before is visible. PTX: ld
// (.acquire.sys.global.u32).
HEXEL_DEVICE uint32_t ld_acquire_sys(const uint32_t* p) {
  uint32_t v;
  asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

// Thread: *p = v with release semantics at system scope, p possibly another GPU's memory: a reader
// on any GPU that acquires v sees everything that precedes this store in causality order (this
// thread's accesses, and those of the threads that met it at a barrier before).
// PTX: st (.release.sys.global.u32).
HEXEL_DEVICE void st_release_sys(uint32_t* p, uint32_t v) {
  asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

// Thread: *p += a in L2, as red_add_relaxed_gpu's pair does per element (the same f32 add, the
// same flush of subnormals). PTX: red (.relaxed.gpu.global.add.f32).
HEXEL_DEVICE void red_add_relaxed_gpu(float* p, float a) {
  asm volatile("red.relaxed.gpu.global.add.f32 [%0], %1;" ::"l"(p), "f"(a) : "memory");
}

}  // namespace hexel
#endif
