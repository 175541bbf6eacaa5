// cp.async: per-thread asynchronous copies of a few bytes from global to shared memory, which
// complete on an mbarrier or a wait (PTX ISA, "Data Movement and Conversion Instructions:
// cp.async", "cp.async.mbarrier.arrive", "cp.async.wait_all"). They write shared memory through
// the generic proxy: a wgmma or TMA reader needs fence_proxy_async_smem (sync.cuh) after the wait.
#pragma once
#include "hexel/config.cuh"

#if defined(__CUDACC__)
namespace hexel::cp_async {

// Thread: 16 bytes from `src` (global, 16-byte aligned) to shared memory at `dst`, bypassing L1;
// `src_bytes` of them are read (16, or 0: sixteen zero bytes written and nothing read).
// PTX: cp.async (.cg.shared.global, cp-size 16, src-size).
HEXEL_DEVICE void copy_16(uint32_t dst, const void* src, uint32_t src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(src_bytes)
               : "memory");
}

// Thread: the mbarrier at `bar` receives one arrival once every cp.async this thread issued so
// far has completed; .noinc: that arrival counts against the barrier's expected count (init the
// barrier with the copying threads among its arrivals). PTX: cp.async.mbarrier.arrive (.noinc).
HEXEL_DEVICE void arrive_noinc(uint32_t bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" ::"r"(bar) : "memory");
}

// Thread: waits until every cp.async this thread issued has completed (before a thread leaves
// with copies in flight into memory others will read). PTX: cp.async.wait_all.
HEXEL_DEVICE void wait_all() {
  asm volatile("cp.async.wait_all;" ::: "memory");
}

}  // namespace hexel::cp_async
#endif
