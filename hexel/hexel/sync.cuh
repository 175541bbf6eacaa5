// Warp, warpgroup and CTA-level synchronisation and the launch-level primitives a
// warp-specialised kernel needs: setmaxnreg, the async-proxy fence, named barriers, elect.sync
// and programmatic dependent launch (griddepcontrol).
#pragma once
#include "hexel/config.cuh"

#if defined(__CUDACC__)
namespace hexel {

// Warpgroup: raise this warpgroup's per-thread register budget to N (the registers come from
// warpgroups that lowered theirs). Needs sm_90a and a launch-time cap (__launch_bounds__(T, 1)).
// PTX: setmaxnreg.
template <int N>
HEXEL_DEVICE void setmaxnreg_inc() {
  static_assert(N >= 24 && N <= 256 && N % 8 == 0, "setmaxnreg takes 24..256 in steps of 8");
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(N));
}

// Warpgroup: lower this warpgroup's register budget to N, releasing registers. PTX: setmaxnreg.
template <int N>
HEXEL_DEVICE void setmaxnreg_dec() {
  static_assert(N >= 24 && N <= 256 && N % 8 == 0, "setmaxnreg takes 24..256 in steps of 8");
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(N));
}

// Thread: orders this thread's generic-proxy shared-memory writes (st.shared, stmatrix) before
// later async-proxy reads of them (TMA stores, wgmma, tcgen05); follow with a barrier.
// PTX: fence.proxy.async.
HEXEL_DEVICE void fence_proxy_async_smem() {
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

// CTA: named barrier `id` (1..15; 0 is __syncthreads) over `threads` threads (a multiple of
// 32). sync waits; arrive signals without waiting (a producer's half). Both are the .aligned
// forms: every thread that waits on one barrier executes the same sync instruction (the usual
// shape of warp-specialised code; compute-sanitizer's synccheck reports two different sync
// sites meeting on one barrier as divergence), while producers may arrive from elsewhere.
// PTX: bar.sync, bar.arrive (barrier.sync.aligned, barrier.arrive.aligned).
HEXEL_DEVICE void named_barrier_sync(uint32_t id, uint32_t threads) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}
HEXEL_DEVICE void named_barrier_arrive(uint32_t id, uint32_t threads) {
  asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(threads) : "memory");
}

// Warp: elects one lane among `member_mask` and returns true in that lane only. The caller
// decides who issues; Hexel never hides an election inside another wrapper. PTX: elect.sync.
HEXEL_DEVICE bool elect_one(uint32_t member_mask = 0xFFFFFFFFu) {
  uint32_t elected;
  asm volatile("{\n .reg .pred p;\n elect.sync _|p, %1;\n selp.u32 %0, 1, 0, p;\n}"
               : "=r"(elected)
               : "r"(member_mask));
  return elected != 0;
}

// Warp index inside the warpgroup-aligned CTA, as a warp-uniform value.
HEXEL_DEVICE uint32_t warp_index() {
  return __shfl_sync(0xFFFFFFFFu, threadIdx.x / 32, 0);
}

// Thread: block until the grids this one depends on (launched before it with programmatic
// stream serialization) have completed and their memory is visible. PTX: griddepcontrol.wait.
HEXEL_DEVICE void grid_dependency_wait() {
  asm volatile("griddepcontrol.wait;" ::: "memory");
}

// Thread: allow the dependent grid to start launching (its prologue overlaps our tail).
// PTX: griddepcontrol.launch_dependents.
HEXEL_DEVICE void launch_dependents() {
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
}

}  // namespace hexel
#endif
