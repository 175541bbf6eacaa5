// Per-thread asynchronous copies from global to shared memory, 16 or 8 bytes at a time, with their
// completion groups (PTX ISA, "Data Movement and Conversion Instructions: cp.async",
// "cp.async.commit_group", "cp.async.wait_group"). A thread's copies are visible to that thread
// once wait_group has retired their group; other threads need a barrier after it. Unlike TMA they
// take no mbarrier and no tensor map: each thread names its own source and destination, so a
// kernel keeps whatever register layout it loaded before and only moves where the bytes wait.
#pragma once
#include "hexel/config.cuh"

#if defined(__CUDACC__)
namespace hexel::async_copy {

// 16 bytes from global `src` (16-byte aligned) to shared `dst` (a shared-window address, 16-byte
// aligned), cached in L2 only (.cg: the data passes L1 by). PTX: cp.async.cg.shared.global.
HEXEL_DEVICE void copy16(uint32_t dst, const void* src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(dst), "l"(src) : "memory");
}

// 8 bytes from global `src` (8-byte aligned) to shared `dst` (8-byte aligned), through L1 (.ca:
// .cg takes 16 bytes only). PTX: cp.async.ca.shared.global.
HEXEL_DEVICE void copy8(uint32_t dst, const void* src) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 8;" ::"r"(dst), "l"(src) : "memory");
}

// Closes this thread's copies issued since the last commit into one group. PTX:
// cp.async.commit_group.
HEXEL_DEVICE void commit_group() {
  asm volatile("cp.async.commit_group;" ::: "memory");
}

// Waits until at most N of this thread's committed groups are still pending (groups retire in
// the order committed). PTX: cp.async.wait_group.
template <int N>
HEXEL_DEVICE void wait_group() {
  static_assert(N >= 0 && N < 8, "a small immediate");
  asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

}  // namespace hexel::async_copy
#endif
