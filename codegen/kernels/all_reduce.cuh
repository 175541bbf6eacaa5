#pragma once
// The tensor-parallel all-reduce over peer memory (docs/multi-gpu.md). Each rank's o and down
// projections add its partial product into its `partial` buffer (f32 [M, H], zero before:
// gemm_*_residual into it); the kernels below add every rank's partial, in rank order, to the
// rank's residual stream x, reading the other ranks' partials straight from their memory (NVLink
// peer pointers), with no collective library in the way. Three forms, which the plan chooses at
// compile time (codegen/kernel_plan.hpp, all_reduce_two_shot and the lowering's all-reduce rule):
//   all_reduce_residual           one-shot: every rank reads every rank's whole partial;
//   all_reduce_residual_two_shot  reduce-scatter, then all-gather: each rank sums its 1/N slice of
//                                 every rank's partial into its own partial, then reads the other
//                                 ranks' summed slices (2 (N - 1) / N of the message read a rank
//                                 instead of N - 1, for one more barrier);
//   all_reduce_residual_rmsnorm   one-shot, one block a row, and the next RMSNorm applied to the
//                                 row it leaves in x, writing h for the next GEMM.
// Large messages (prefill chunks) go through NCCL instead: ncclAllGather of every rank's partial
// into the rank's gather buffer, then gather_sum_residual adds the gathered rows to x in rank
// order, with no barrier of its own (the collective before it on the stream is one).
// Every form adds the same values in the same order for every element, so x keeps the same bits
// on every rank and in every form: x[i] += ((p0[i] + p1[i]) + p2[i]) + ..., the CPU reference
// engine's order (rank_sum4; the two-shot's owner of a slice forms that sum once and every rank
// adds the same f32 to its x).
//
// The ranks meet at barriers, block b of each rank with block b of every other, through words in
// each rank's `flags` buffer (kAllReduceMaxBlocks x RANKS u32, zero at start): block b of rank s
// signals rank r by raising r's word [b][s] to its epoch (a release at system scope) and then
// waits until its own word [b][r] has reached it (an acquire) for every rank r. Block b's epoch is
// its own word [b][rank] (the rank signals itself too): it rises by one a barrier, compared with
// wrap-around. Every rank launches the same buckets in the same order, so block b of each rank
// meets block b of the others in the same launch; a grid's blocks are all resident (at most
// kAllReduceMaxBlocks, launched before any PDL successor), so no block waits on one that cannot
// run. Block b of a rank touches only what block b of the other ranks touch (the same elements of
// every partial), so the barriers of one block order everything it reads and writes. After the
// last barrier every rank has read every partial, and each rank zeroes its own for the next
// projection.
#include "common.cuh"
#include "hexel/memory_order.cuh"
#include "norm.cuh"

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

// The epoch block b of this rank reached in its last launch: its own flag word.
template <int RANKS>
__device__ __forceinline__ unsigned block_epoch(unsigned* const* flags, int rank) {
  __shared__ unsigned epoch;
  if (threadIdx.x == 0) epoch = hexel::ld_acquire_sys(flags[rank] + blockIdx.x * RANKS + rank);
  __syncthreads();
  return epoch;
}

// The sum of every rank's partial at float4 i, in rank order, read past L1 (other ranks wrote
// these lines).
template <int RANKS>
__device__ __forceinline__ float4 rank_sum4(float* const* partials, long long i) {
  float4 s = __ldcg(reinterpret_cast<const float4*>(partials[0]) + i);
#pragma unroll
  for (int r = 1; r < RANKS; ++r) {
    const float4 p = __ldcg(reinterpret_cast<const float4*>(partials[r]) + i);
    s.x += p.x, s.y += p.y, s.z += p.z, s.w += p.w;
  }
  return s;
}

__device__ __forceinline__ void add_to4(float* x, long long i, float4 s) {
  float4* out = reinterpret_cast<float4*>(x) + i;
  float4 v = *out;
  v.x += s.x, v.y += s.y, v.z += s.z, v.w += s.w;
  *out = v;
}

// x[m, :] += sum over ranks r of partials[r][m, :] for the bucket's M rows; `partials` and `flags`
// hold every rank's buffer (peer pointers, rank order), `rank` this rank's index. One-shot: block b
// reads float4s b·THREADS + t, + gridDim·THREADS, ... of every rank's partial.
template <int M, int H, int RANKS, int THREADS>
__global__ void __launch_bounds__(THREADS)
    all_reduce_residual(float* const* partials, unsigned* const* flags, const int* rank_index,
                        float* x) {
  pdl_entry();
  static_assert(H % 4 == 0, "rows are read 16 bytes at a time");
  static_assert(RANKS >= 2 && RANKS <= 8, "the ranks of one host");
  constexpr int kVectors = M * H / 4;
  const int rank = *rank_index;
  const unsigned e = block_epoch<RANKS>(flags, rank);

  rank_barrier<RANKS>(flags, rank, e + 1);
  const int first = static_cast<int>(blockIdx.x * THREADS + threadIdx.x);
  const int stride = static_cast<int>(gridDim.x * THREADS);
  for (int i = first; i < kVectors; i += stride) add_to4(x, i, rank_sum4<RANKS>(partials, i));
  rank_barrier<RANKS>(flags, rank, e + 2);
  for (int i = first; i < kVectors; i += stride)
    reinterpret_cast<float4*>(partials[rank])[i] = make_float4(0.f, 0.f, 0.f, 0.f);
}

// The float4s of a message of V split over RANKS slices: slice r is [slice_begin(r),
// slice_begin(r + 1)), the sizes within one of each other (V need not divide).
template <int V, int RANKS>
__device__ __forceinline__ int slice_begin(int r) {
  return static_cast<int>(static_cast<long long>(V) * r / RANKS);
}

// all_reduce_residual's result in two steps. Reduce-scatter: rank r sums its slice r of every
// rank's partial into its own partial's slice r (no other rank reads that slice of r's partial
// before the next barrier) and adds it to its x. All-gather: rank r adds every other rank s's
// summed slice s to its x. Block b takes the float4s j = b·THREADS + t, + gridDim·THREADS, ...
// of each slice, in both steps and in the zeroing after the third barrier.
template <int M, int H, int RANKS, int THREADS>
__global__ void __launch_bounds__(THREADS)
    all_reduce_residual_two_shot(float* const* partials, unsigned* const* flags,
                                 const int* rank_index, float* x) {
  pdl_entry();
  static_assert(H % 4 == 0, "rows are read 16 bytes at a time");
  static_assert(RANKS >= 2 && RANKS <= 8, "the ranks of one host");
  constexpr int kVectors = M * H / 4;
  const int rank = *rank_index;
  const unsigned e = block_epoch<RANKS>(flags, rank);
  const int first = static_cast<int>(blockIdx.x * THREADS + threadIdx.x);
  const int stride = static_cast<int>(gridDim.x * THREADS);
  float4* own = reinterpret_cast<float4*>(partials[rank]);

  rank_barrier<RANKS>(flags, rank, e + 1);
  const int lo = slice_begin<kVectors, RANKS>(rank),
            n = slice_begin<kVectors, RANKS>(rank + 1) - lo;
  for (int j = first; j < n; j += stride) {
    const float4 s = rank_sum4<RANKS>(partials, lo + j);
    own[lo + j] = s;
    add_to4(x, lo + j, s);
  }
  rank_barrier<RANKS>(flags, rank, e + 2);
#pragma unroll
  for (int r = 0; r < RANKS; ++r) {
    if (r == rank) continue;
    const int lo_r = slice_begin<kVectors, RANKS>(r);
    const int n_r = slice_begin<kVectors, RANKS>(r + 1) - lo_r;
    for (int j = first; j < n_r; j += stride)
      add_to4(x, lo_r + j, __ldcg(reinterpret_cast<const float4*>(partials[r]) + lo_r + j));
  }
  rank_barrier<RANKS>(flags, rank, e + 3);
#pragma unroll
  for (int r = 0; r < RANKS; ++r) {
    const int lo_r = slice_begin<kVectors, RANKS>(r);
    const int n_r = slice_begin<kVectors, RANKS>(r + 1) - lo_r;
    for (int j = first; j < n_r; j += stride) own[lo_r + j] = make_float4(0.f, 0.f, 0.f, 0.f);
  }
}

// all_reduce_residual, then h[m] = bf16(RMSNorm(x[m]) · w) for the norm that follows it (before
// the next layer's QKV or this layer's gate/up projection). One block of kNormThreads a row (rows
// m = b, b + gridDim, ...); thread t sums and writes x's 8-element chunks c = t, t + 128, ... of
// the row, norm.cuh's partition, then normalizes them with norm.cuh's functions: the row it reads
// back is the x the unfused rmsnorm kernel would read, through the same arithmetic, so h has the
// unfused path's bits. w is read before the wait on the previous kernel, as rmsnorm reads it.
template <int M, int H, int RANKS, float EPS>
__global__ void __launch_bounds__(kNormThreads)
    all_reduce_residual_rmsnorm(float* const* partials, unsigned* const* flags,
                                const int* rank_index, float* x, const float* w, bf16* h) {
  static_assert(H % 8 == 0, "rows are read 8 elements at a time");
  static_assert(RANKS >= 2 && RANKS <= 8, "the ranks of one host");
  __shared__ float scratch[4];
  hexel::launch_dependents();
  const int t = threadIdx.x;
  float w8[kNormChunks<H>][8];
  rms_load_w<H>(w, t, w8);
  hexel::grid_dependency_wait();
  const int rank = *rank_index;
  const unsigned e = block_epoch<RANKS>(flags, rank);

  rank_barrier<RANKS>(flags, rank, e + 1);
  for (int m = blockIdx.x; m < M; m += gridDim.x) {
    const long long base = static_cast<long long>(m) * H;
#pragma unroll
    for (int k = 0; k < kNormChunks<H>; ++k) {
      const int c = t + k * kNormThreads;
      if (c < H / 8) {
        const long long i = (base + 8 * c) / 4;
        add_to4(x, i, rank_sum4<RANKS>(partials, i));
        add_to4(x, i + 1, rank_sum4<RANKS>(partials, i + 1));
      }
    }
    const float* row = x + base;  // this thread's chunks, as it wrote them
    const float ss = rms_partial<H>(row, t);
    if (t % 32 == 0) scratch[t / 32] = ss;
    __syncthreads();
    const float sums[4] = {scratch[0], scratch[1], scratch[2], scratch[3]};
    const float inv = rms_inv<H, EPS>(sums);
    uint4* o = reinterpret_cast<uint4*>(h + base);
#pragma unroll
    for (int k = 0; k < kNormChunks<H>; ++k) {
      const int c = t + k * kNormThreads;
      if (c < H / 8) o[c] = rms_apply8<H>(row, c, inv, w8[k]);
    }
    __syncthreads();  // scratch serves the block's next row
  }
  rank_barrier<RANKS>(flags, rank, e + 2);
  float4* own = reinterpret_cast<float4*>(partials[rank]);
  for (int m = blockIdx.x; m < M; m += gridDim.x)
    for (int i = t; i < H / 4; i += kNormThreads)
      own[static_cast<long long>(m) * H / 4 + i] = make_float4(0.f, 0.f, 0.f, 0.f);
}

// x[m, :] += sum over ranks r of gather[r, m, :] for the bucket's M rows, in rank order, and
// partial zeroed: the one-shot's arithmetic over the rows ncclAllGather put in `gather` [RANKS, M,
// H] (rank r's partial at row block r), so x has the one-shot's bits. The collective before it has
// finished on this rank's stream, so every rank has its copy of this rank's partial and the partial
// can be zeroed for the next projection at once. Launched without programmatic serialization (its
// predecessor is NCCL's kernel); its own successor may be.
template <int M, int H, int RANKS>
__global__ void gather_sum_residual(const float* gather, float* partial, float* x) {
  pdl_entry();
  static_assert(H % 4 == 0, "rows are read 16 bytes at a time");
  static_assert(RANKS >= 2 && RANKS <= 8, "the ranks of one host");
  constexpr long long kVectors = static_cast<long long>(M) * H / 4;
  const float4* g = reinterpret_cast<const float4*>(gather);
  const long long stride = static_cast<long long>(gridDim.x) * blockDim.x;
  for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < kVectors;
       i += stride) {
    float4 s = g[i];
#pragma unroll
    for (int r = 1; r < RANKS; ++r) {
      const float4 p = g[r * kVectors + i];
      s.x += p.x, s.y += p.y, s.z += p.z, s.w += p.w;
    }
    add_to4(x, i, s);
    reinterpret_cast<float4*>(partial)[i] = make_float4(0.f, 0.f, 0.f, 0.f);
  }
}

}  // namespace telos_kernels
