#pragma once
// The K loop of the sm_100a GEMMs' Hopper twins (gemm_small_sm100.cuh, gemm_prefill_sm100.cuh):
// one consumer warpgroup's CHAINS accumulators of wgmma m64nNk16 over a ring of 128B-swizzled,
// K-major stages that TMA filled, each chain one operand pair (its 64 A rows of the stage and its
// N B rows: the stage's, or the small GEMM's resident tokens in its norm forms). The tcgen05 kernels issue one MMA chain per accumulator over the same stages; the
// twins split the same chains into wgmma's 64-row pieces, which a row's result does not depend on.
#include "hexel/mbarrier.cuh"
#include "hexel/swizzle.cuh"
#include "hexel/wgmma.cuh"

namespace telos_kernels {

// A warp's release of the stage whose empty barrier is at `empty`: one arrival on it, or on the
// barrier at that offset in each CTA of ranks 0 .. CL - 1. PTX: mbarrier.arrive (.shared::cluster).
template <unsigned CL>
__device__ __forceinline__ void wgmma_chains_release(unsigned empty) {
  if constexpr (CL == 1)
    hexel::mbarrier::arrive(empty);
  else
    hexel::mbarrier::arrive_remote_ranks<CL>(empty);
}

// For each of k_blocks stages of the ring: wait for its full barrier (full + 8 · index), then per
// 16-wide K step kk of K block kb one wgmma into each chain d[i] (A at a_tile(stage, i): the
// stage's address, 1024-byte aligned, in the 128B swizzle; B through b_desc(stage, i, kb, kk): its
// descriptor, wherever B lies), from zero at the first; one group stays in flight, and
// once only the newest is pending the warp's first lane releases the previous stage (empty + 8 ·
// index: one arrival per warp; CL > 1, a cluster's CTAs whose producers write the stage: one on
// the barrier at that offset in each of ranks 0 .. CL - 1, wgmma_chains_release). Returns the last
// stage's index, which the caller releases if anything loads after it. PTX: wgmma.fence,
// wgmma.mma_async, wgmma.commit_group, wgmma.wait_group.
template <unsigned N, unsigned CL = 1, unsigned CHAINS, unsigned STAGES, class ATile, class BDesc>
__device__ __forceinline__ unsigned wgmma_chains_k_loop(float (&d)[CHAINS][N / 2],
                                                        hexel::mbarrier::StageRing<STAGES>& ring,
                                                        unsigned k_blocks, unsigned full,
                                                        unsigned empty, unsigned lane, ATile a_tile,
                                                        BDesc b_desc) {
  using namespace hexel;
  unsigned prev = 0;
  for (unsigned kb = 0; kb < k_blocks; ++kb) {
    mbarrier::wait_parity(full + 8 * ring.index, ring.phase);
    wgmma::fence();
#pragma unroll
    for (unsigned kk = 0; kk < 4; ++kk)  // a 64-wide K block: one 128-byte swizzle row of bf16
#pragma unroll
      for (unsigned i = 0; i < CHAINS; ++i) {
        const auto a = wgmma::kmajor_desc(a_tile(ring.index, i), Swizzle::B128).advanced(32 * kk);
        wgmma::mma_ss<N>(d[i], a, b_desc(ring.index, i, kb, kk), kb > 0 || kk > 0);
      }
    wgmma::commit_group();
    wgmma::wait_group<1>();
    if (kb > 0 && lane == 0) wgmma_chains_release<CL>(empty + 8 * prev);
    prev = ring.index;
    ring.advance();
  }
  wgmma::wait_group<0>();
#pragma unroll
  for (unsigned i = 0; i < CHAINS; ++i) wgmma::fence_operand(d[i]);
  return prev;
}

}  // namespace telos_kernels
