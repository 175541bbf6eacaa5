// mbarrier: the transaction-counting barrier in shared memory that TMA, wgmma pipelines and
// tcgen05 commits complete on (PTX ISA, "Parallel Synchronization and Communication
// Instructions: mbarrier"). Every function takes the barrier's 32-bit shared address.
#pragma once
#include "hexel/cluster.cuh"
#include "hexel/config.cuh"

namespace hexel::mbarrier {

// One thread initialises; `count` arrivals (plus any expected transaction bytes) complete a
// phase. PTX: mbarrier.init.
HEXEL_DEVICE void init(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
}

// Makes initialised barriers visible to the async proxy and to the cluster; follow it with a
// CTA (or cluster) barrier before any other thread uses them. PTX: fence.mbarrier_init.
HEXEL_DEVICE void fence_init() {
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}

// Arrive once (release, CTA scope). PTX: mbarrier.arrive.
HEXEL_DEVICE void arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}

// Arrive on a barrier in another CTA of the cluster; `cluster_bar` comes from
// cluster::map_shared(bar, rank). Release at cluster scope: the peer that waits sees this
// thread's prior writes. PTX: mbarrier.arrive (.release.cluster, .shared::cluster).
HEXEL_DEVICE void arrive_cluster(uint32_t cluster_bar) {
  asm volatile("mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%0];" ::"r"(cluster_bar)
               : "memory");
}

// Arrive on a peer CTA's barrier with the default CTA-scope release: cheaper, and enough when
// the arrival only reports that this thread is done *reading* something (e.g. a pipeline stage
// freed after wgmma::wait_group), with no writes of its own for the peer to see.
// PTX: mbarrier.arrive (.shared::cluster).
HEXEL_DEVICE void arrive_remote(uint32_t cluster_bar) {
  asm volatile("mbarrier.arrive.shared::cluster.b64 _, [%0];" ::"r"(cluster_bar) : "memory");
}

// Arrive (as arrive_remote) on the barrier at shared offset `bar` in each CTA of cluster ranks 0 ..
// N - 1: a consumer's release of a pipeline stage that the producers of N CTAs multicast into,
// each of which refills it only once every consumer of the N CTAs is done with it.
// PTX: mapa (.shared::cluster), mbarrier.arrive (.shared::cluster).
template <uint32_t N>
HEXEL_DEVICE void arrive_remote_ranks(uint32_t bar) {
#pragma unroll
  for (uint32_t r = 0; r < N; ++r) arrive_remote(cluster::map_shared(bar, r));
}

// Arrive and add `bytes` to the transaction count the current phase waits for: the producer's
// half of a TMA handshake. PTX: mbarrier.arrive.expect_tx.
HEXEL_DEVICE void arrive_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes)
               : "memory");
}

// Add expected transaction bytes without arriving. PTX: mbarrier.expect_tx.
HEXEL_DEVICE void expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(bytes)
               : "memory");
}

// True once the phase with parity `parity` has completed. A freshly initialised barrier is in
// phase 0, so parity 1 (the "previous" phase) reports complete. PTX: mbarrier.try_wait.parity.
HEXEL_DEVICE bool try_wait_parity(uint32_t bar, uint32_t parity) {
  uint32_t done;
  asm volatile(
      "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
      " selp.u32 %0, 1, 0, p;\n}"
      : "=r"(done)
      : "r"(bar), "r"(parity)
      : "memory");
  return done != 0;
}

// Blocks until phase `parity` completes; traps after HEXEL_DEBUG_WAIT_LIMIT polls in debug.
HEXEL_DEVICE void wait_parity(uint32_t bar, uint32_t parity) {
  WaitGuard guard;
  while (!try_wait_parity(bar, parity)) guard.spin();
}

// Same, with cluster-scope acquire: for barriers that peer CTAs arrive on remotely.
HEXEL_DEVICE void wait_parity_cluster(uint32_t bar, uint32_t parity) {
  WaitGuard guard;
  for (;;) {
    uint32_t done;
    asm volatile(
        "{\n .reg .pred p;\n mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%1], "
        "%2;\n"
        " selp.u32 %0, 1, 0, p;\n}"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
    if (done) return;
    guard.spin();
  }
}

// Position in a ring of `Stages` full/empty barrier pairs. The phase bit flips each time the
// index wraps; consumers wait on full[index] with `phase`, producers on empty[index] with
// `phase ^ 1` (the empty barriers start out "already completed" in the parity-1 sense).
template <uint32_t Stages>
struct StageRing {
  static_assert(Stages >= 1, "a ring needs at least one stage");
  uint32_t index = 0;
  uint32_t phase = 0;

  HEXEL_DEVICE void advance() {
    if (++index == Stages) {
      index = 0;
      phase ^= 1u;
    }
  }
};

}  // namespace hexel::mbarrier
