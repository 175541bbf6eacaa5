// Thread-block clusters: ids, distributed shared memory addressing and the cluster barrier
// (PTX ISA, "Special Registers: %cluster_ctarank ...", "Data Movement: mapa",
// "Parallel Synchronization: barrier.cluster").
#pragma once
#include "hexel/config.cuh"

#if defined(__CUDACC__)
namespace hexel::cluster {

// Rank of this CTA in its cluster (0 .. size()-1). PTX: %cluster_ctarank.
HEXEL_DEVICE uint32_t cta_rank() {
  uint32_t r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
  return r;
}

// Number of CTAs in the cluster. PTX: %cluster_nctarank.
HEXEL_DEVICE uint32_t size() {
  uint32_t r;
  asm volatile("mov.u32 %0, %%cluster_nctarank;" : "=r"(r));
  return r;
}

// This cluster's index in the grid (x). PTX: %clusterid.x.
HEXEL_DEVICE uint32_t id_x() {
  uint32_t r;
  asm volatile("mov.u32 %0, %%clusterid.x;" : "=r"(r));
  return r;
}

// This CTA's x position inside its cluster. PTX: %cluster_ctaid.x.
HEXEL_DEVICE uint32_t cta_id_x() {
  uint32_t r;
  asm volatile("mov.u32 %0, %%cluster_ctaid.x;" : "=r"(r));
  return r;
}

// The shared::cluster address of the variable at `smem` (this CTA's shared address) in CTA
// `rank`'s shared memory. PTX: mapa.shared::cluster.
HEXEL_DEVICE uint32_t map_shared(uint32_t smem, uint32_t rank) {
  uint32_t r;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(r) : "r"(smem), "r"(rank));
  return r;
}

// Loads/stores a word of any CTA's shared memory through a shared::cluster address.
// PTX: ld/st with .shared::cluster.
HEXEL_DEVICE uint32_t load_u32(uint32_t cluster_addr) {
  uint32_t v;
  asm volatile("ld.shared::cluster.u32 %0, [%1];" : "=r"(v) : "r"(cluster_addr) : "memory");
  return v;
}
HEXEL_DEVICE void store_u32(uint32_t cluster_addr, uint32_t v) {
  asm volatile("st.shared::cluster.u32 [%0], %1;" ::"r"(cluster_addr), "r"(v) : "memory");
}

// Stores four words into a CTA's shared memory through a shared::cluster address (16-byte aligned)
// and completes 16 bytes of transaction on that CTA's mbarrier `cluster_bar` (also a
// shared::cluster address, in the same CTA), without waiting: the receiver arrives on the barrier
// expecting the bytes and waits for its phase, after which the words are visible to it.
// PTX: st.async (.shared::cluster.mbarrier::complete_tx::bytes.v4.b32).
HEXEL_DEVICE void store_async_v4(uint32_t cluster_addr, uint32_t a, uint32_t b, uint32_t c,
                                 uint32_t d, uint32_t cluster_bar) {
  asm volatile(
      "st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.b32 "
      "[%0], {%1, %2, %3, %4}, [%5];"
      :
      : "r"(cluster_addr), "r"(a), "r"(b), "r"(c), "r"(d), "r"(cluster_bar)
      : "memory");
}

// Cluster barrier, split in halves so independent work can sit between them; every thread of
// every CTA in the cluster takes part. PTX: barrier.cluster.arrive.release / wait.acquire.
HEXEL_DEVICE void arrive() {
  asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory");
}
HEXEL_DEVICE void wait() {
  asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory");
}
HEXEL_DEVICE void sync() {
  arrive();
  wait();
}

}  // namespace hexel::cluster
#endif
