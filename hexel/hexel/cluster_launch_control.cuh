// Cluster launch control (sm_100a): a running CTA cancels the launch of a cluster that has not
// started and takes over its work, so persistent-style kernels keep the hardware's scheduling
// (PTX ISA, "Parallel Synchronization: clusterlaunchcontrol.try_cancel / query_cancel").
// The 16-byte response lands in shared memory and completes on an mbarrier (arm it with
// mbarrier::arrive_expect_tx(bar, 16)).
#pragma once
#include "hexel/config.cuh"

#if defined(__CUDACC__)
namespace hexel::clc {

inline constexpr uint32_t kResponseBytes = 16;

// Thread: asks to cancel one pending cluster; the response goes to the 16-byte-aligned shared
// buffer at `response`. PTX: clusterlaunchcontrol.try_cancel.
HEXEL_DEVICE void try_cancel(uint32_t response, uint32_t bar) {
  asm volatile(
      "clusterlaunchcontrol.try_cancel.async.shared::cta.mbarrier::complete_tx::bytes.b128 [%0], "
      "[%1];" ::"r"(response),
      "r"(bar)
      : "memory");
}

// Decodes a completed response: true and the first CTA's x index if a cluster was cancelled
// (its work is now ours); false when none was left. PTX: clusterlaunchcontrol.query_cancel.
HEXEL_DEVICE bool query_cancel(uint32_t response, uint32_t& first_cta_x) {
  uint32_t ok, x;
  asm volatile(
      "{\n .reg .b128 r;\n .reg .pred p;\n ld.shared.b128 r, [%2];\n"
      " clusterlaunchcontrol.query_cancel.is_canceled.pred.b128 p, r;\n"
      " selp.u32 %0, 1, 0, p;\n"
      " @p clusterlaunchcontrol.query_cancel.get_first_ctaid::x.b32.b128 %1, r;\n}"
      : "=r"(ok), "=r"(x)
      : "r"(response)
      : "memory");
  first_cta_x = x;
  return ok != 0;
}

}  // namespace hexel::clc
#endif
