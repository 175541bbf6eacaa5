#pragma once
// The tensor-parallel all-reduce (docs/multi-gpu.md), one-shot over peer memory. Each rank's o and
// down projections add its partial product into its `partial` buffer (f32 [M, H], zero before:
// gemm_*_residual into it); all_reduce_residual then adds every rank's partial, in rank order, to
// the rank's residual stream x, reading the other ranks' partials straight from their memory
// (NVLink peer pointers). A decode-sized message costs two barrier round trips and one read of
// each rank's partial, with no collective library in the way. Every rank sums the same values in
// the same order, so x keeps the same bits on every rank: x[i] += ((p0[i] + p1[i]) + p2[i]) + ...,
// the CPU reference engine's order.
//
// The ranks meet at two barriers a launch, block b of each rank with block b of every other,
// through words in each rank's `flags` buffer (kAllReduceMaxBlocks x RANKS u32, zero at start):
// block b of rank s signals rank r by raising r's word [b][s] to its epoch (a release at system
// scope) and then waits until its own word [b][r] has reached it (an acquire) for every rank r.
// After the first barrier every rank's partial is complete; after the second every rank has read
// every partial, and each rank zeroes its own for the next projection. Block b's epoch is its own
// word [b][rank] (the rank signals itself too): it rises by two a launch, compared with
// wrap-around. Every rank launches the same buckets in the same order, so block b of each rank
// meets block b of the others in the same launch; a grid's blocks are all resident (at most
// kAllReduceMaxBlocks, launched before any PDL successor), so no block waits on one that cannot
// run.
#include "common.cuh"
#include "hexel/memory_order.cuh"

namespace telos_kernels {

// Block b of this rank meets block b of every rank: each thread r < RANKS signals rank r and
// waits for it. The block's accesses before the barrier precede the signal.
template <int RANKS>
__device__ __forceinline__ void rank_barrier(unsigned* const* flags, int rank, unsigned epoch) {
  __syncthreads();
  if (threadIdx.x < RANKS) {
    const int r = static_cast<int>(threadIdx.x);
    hexel::st_release_sys(flags[r] + blockIdx.x * RANKS + rank, epoch);
    const unsigned* from_r = flags[rank] + blockIdx.x * RANKS + r;
    while (static_cast<int>(hexel::ld_acquire_sys(from_r) - epoch) < 0) {
    }
  }
  __syncthreads();
}

// x[m, :] += sum over ranks r of partials[r][m, :] for the bucket's M rows; `partials` and `flags`
// hold every rank's buffer (peer pointers, rank order), `rank` this rank's index.
template <int M, int H, int RANKS, int THREADS>
__global__ void __launch_bounds__(THREADS)
    all_reduce_residual(float* const* partials, unsigned* const* flags, const int* rank_index,
                        float* x) {
  pdl_entry();
  static_assert(H % 4 == 0, "rows are read 16 bytes at a time");
  static_assert(RANKS >= 2 && RANKS <= 8, "the ranks of one host");
  constexpr int kVectors = M * H / 4;
  const int rank = *rank_index;
  __shared__ unsigned epoch;
  if (threadIdx.x == 0) epoch = hexel::ld_acquire_sys(flags[rank] + blockIdx.x * RANKS + rank);
  __syncthreads();
  const unsigned e = epoch;

  rank_barrier<RANKS>(flags, rank, e + 1);
  const int first = static_cast<int>(blockIdx.x * THREADS + threadIdx.x);
  const int stride = static_cast<int>(gridDim.x * THREADS);
  for (int i = first; i < kVectors; i += stride) {
    // Past L1: the other ranks wrote these lines.
    float4 s = __ldcg(reinterpret_cast<const float4*>(partials[0]) + i);
#pragma unroll
    for (int r = 1; r < RANKS; ++r) {
      const float4 p = __ldcg(reinterpret_cast<const float4*>(partials[r]) + i);
      s.x += p.x, s.y += p.y, s.z += p.z, s.w += p.w;
    }
    float4* out = reinterpret_cast<float4*>(x) + i;
    float4 v = *out;
    v.x += s.x, v.y += s.y, v.z += s.z, v.w += s.w;
    *out = v;
  }
  rank_barrier<RANKS>(flags, rank, e + 2);
  for (int i = first; i < kVectors; i += stride)
    reinterpret_cast<float4*>(partials[rank])[i] = make_float4(0.f, 0.f, 0.f, 0.f);
}

}  // namespace telos_kernels
