#pragma once
// The LM head's GEMM: y = A · Wᵀ with A [M, K] bf16 activations and W [N, K] bf16 weights,
// row-major (K contiguous, docs/artifact.md). It is memory bound: every weight byte is read once
// per M tile, straight from global memory into tensor-core fragments with 16-byte non-coherent
// loads, no shared-memory staging.
//
// The MMA is mma.m16n8k16 with its operands swapped: its M is 16 weight rows (W is the row-major
// A operand) and its N is 8 tokens (the activations are the column-major B operand). Block
// (blockIdx.x, blockIdx.y) = (mt, g) owns ROWS contiguous weight rows g for the MT tokens of tile
// mt; warp w takes row group w % (ROWS / 16) and K slice w / (ROWS / 16) of KSPLIT equal slices.
// The results land in a shared tile [MT][ROWS] for the epilogue. The M tiles of one row group are
// consecutive blocks, so they run together and all but the first read its weights from L2 (with
// g the fastest index, the blocks of a weight row group came a whole pass over the weights apart,
// and a bucket of 256 tokens read every weight byte from memory four times).
//
// K permutation. A dot product does not care in which order K is laid out as long as both
// operands use the same order, so a lane loads 8 contiguous bf16 of its row (lanes 4g..4g+3 read
// 64 contiguous bytes of row g) and feeds them to the k-slots {2t, 2t+1, 2t+8, 2t+9} of two
// consecutive k16 MMAs; its token's 8 bf16 at the same K offsets fill the B fragments the same
// way. One 16-byte load per operand row per 32 K elements, no shuffles.
//
// Reduction order, for batch invariance: within a K slice the MMAs accumulate in K order; the
// KSPLIT slice sums are added in slice order through the shared tile. KSPLIT is fixed per weight
// shape (codegen/kernel_plan.cpp), and each output column of an MMA depends only on its own token,
// so a token's result is the same for every MT, every position in the tile and every other token.
#include "common.cuh"

namespace telos_kernels {

// One warp per (row group of 16, K slice).
template <int ROWS, int KSPLIT>
constexpr int kLinearThreads = 32 * (ROWS / 16) * KSPLIT;

// Blocks per SM promised to ptxas: 16 warps an SM at least, i.e. up to 128 registers a thread.
// Stated, because left to itself ptxas sometimes aims at more blocks and spills (seen with
// clusters: 32 registers and a stack frame).
template <int ROWS, int KSPLIT>
constexpr int kLinearMinBlocks =
    kLinearThreads<ROWS, KSPLIT> >= 512 ? 1 : 512 / kLinearThreads<ROWS, KSPLIT>;

// d += a · b for one m16n8k16 bf16 tile with f32 accumulators (PTX ISA, Warp-level matrix
// instructions: mma; fragments per "Matrix Fragments for mma.m16n8k16 with floating point type":
// a0/a2 hold row g at k-slots 2t..2t+1 / 2t+8..2t+9, a1/a3 row g + 8 at the same slots, b0/b1
// token g at 2t..2t+1 / 2t+8..2t+9, d0,d1 row g and d2,d3 row g + 8 at tokens 2t, 2t + 1).
__device__ __forceinline__ void mma_bf16_m16n8k16(float (&d)[4], unsigned a0, unsigned a1,
                                                  unsigned a2, unsigned a3, unsigned b0,
                                                  unsigned b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// STEPS consecutive 32-element K steps of one warp: all weight loads first (so STEPS × 1 KB per
// warp are in flight), then per step and per token tile the activation load and two MMAs. `a`
// points at the lane's token of the first token tile. In the last tile, lanes whose token is at or
// beyond MT read token 0 of the tile instead (`a_last`, always in bounds) and multiply zeros
// (`last_mask`): no branch splits the loads from the MMAs.
template <int K, int MT, int STEPS>
__device__ __forceinline__ void linear_steps(const bf16* __restrict__ w_lo,
                                             const bf16* __restrict__ w_hi,
                                             const bf16* __restrict__ a,
                                             const bf16* __restrict__ a_last, unsigned last_mask,
                                             float (&acc)[(MT + 7) / 8][4]) {
  constexpr int NT = (MT + 7) / 8;
  uint4 lo[STEPS], hi[STEPS];
#pragma unroll
  for (int s = 0; s < STEPS; ++s) {
    lo[s] = load8_nc(w_lo + 32 * s);
    hi[s] = load8_nc(w_hi + 32 * s);
  }
#pragma unroll
  for (int s = 0; s < STEPS; ++s) {
#pragma unroll
    for (int j = 0; j < NT; ++j) {
      uint4 b;
      if (j + 1 < NT || MT % 8 == 0) {
        b = load8(a + 8LL * j * K + 32 * s);
      } else {
        b = load8(a_last + 32 * s);
        b = make_uint4(b.x & last_mask, b.y & last_mask, b.z & last_mask, b.w & last_mask);
      }
      mma_bf16_m16n8k16(acc[j], lo[s].x, hi[s].x, lo[s].y, hi[s].y, b.x, b.y);
      mma_bf16_m16n8k16(acc[j], lo[s].z, hi[s].z, lo[s].w, hi[s].w, b.z, b.w);
    }
  }
}

// Fills tile[m][r] (m < MT, r < ROWS) with row g · ROWS + r of W times token m0 + m of A.
// UNROLL K steps are loaded per batch; it changes nothing in the arithmetic.
template <int K, int MT, int ROWS, int KSPLIT, int UNROLL>
__device__ __forceinline__ void linear_tile(const bf16* __restrict__ W, const bf16* __restrict__ A,
                                            int m0, int g, float (*tile)[ROWS]) {
  static_assert(ROWS % 16 == 0, "a warp owns 16 weight rows");
  static_assert(K % (32 * KSPLIT) == 0, "a K slice is whole 32-element steps");
  static_assert(MT >= 1 && MT <= 64, "at most 64 tokens per tile");
  constexpr int kGroups = ROWS / 16, NT = (MT + 7) / 8, SLICE = K / KSPLIT, STEPS = SLICE / 32;
  constexpr int FULL = STEPS / UNROLL * UNROLL;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int group = warp % kGroups, slice = warp / kGroups, gid = lane / 4, tig = lane % 4;
  const int r = group * 16 + gid, k0 = slice * SLICE + 8 * tig;
  const bf16* w_lo = W + static_cast<long long>(g * ROWS + r) * K + k0;
  const bf16* w_hi = W + static_cast<long long>(g * ROWS + r + 8) * K + k0;
  const bf16* a = A + static_cast<long long>(m0 + gid) * K + k0;
  const bool live = 8 * (NT - 1) + gid < MT;
  const bf16* a_last = A + static_cast<long long>(m0 + (live ? 8 * (NT - 1) + gid : 0)) * K + k0;
  const unsigned last_mask = live ? ~0u : 0u;
  float acc[NT][4];
#pragma unroll
  for (int j = 0; j < NT; ++j) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.f;
#pragma unroll 1
  for (int s = 0; s < FULL; s += UNROLL)
    linear_steps<K, MT, UNROLL>(w_lo + 32 * s, w_hi + 32 * s, a + 32 * s, a_last + 32 * s,
                                last_mask, acc);
  if constexpr (STEPS % UNROLL != 0)
    linear_steps<K, MT, STEPS % UNROLL>(w_lo + 32 * FULL, w_hi + 32 * FULL, a + 32 * FULL,
                                        a_last + 32 * FULL, last_mask, acc);

    // Slice 0 stores, then slices 1, 2, ... add in order.
#pragma unroll 1
  for (int s = 0; s < KSPLIT; ++s) {
    if (slice == s) {
#pragma unroll
      for (int j = 0; j < NT; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int m = 8 * j + 2 * tig + (e & 1), row = r + (e >> 1) * 8;
          if (m < MT) tile[m][row] = s == 0 ? acc[j][e] : tile[m][row] + acc[j][e];
        }
    }
    __syncthreads();
  }
}

// y[m, n] = (A · Wᵀ)[m, n] in f32: the LM head's logits. With the first stage of greedy sampling:
// cand[m, g] (N / ROWS a token) is the greedy candidate (common.cuh) of block g's ROWS logits of
// token m, the largest and, among equals, the lowest index, so sample's greedy rows reduce N / ROWS
// candidates instead of N logits and pick the same token. Null: logits only.
template <int K, int N, int ROWS, int MT, int KSPLIT, int UNROLL>
__global__ void __launch_bounds__(kLinearThreads<ROWS, KSPLIT>, kLinearMinBlocks<ROWS, KSPLIT>)
    linear_f32(const bf16* W, const bf16* A, float* y, unsigned long long* cand) {
  pdl_entry();
  static_assert(N % ROWS == 0, "a block owns whole row groups");
  constexpr int THREADS = kLinearThreads<ROWS, KSPLIT>;
  __shared__ float tile[MT][ROWS];
  const int m0 = blockIdx.x * MT, g = blockIdx.y;
  linear_tile<K, MT, ROWS, KSPLIT, UNROLL>(W, A, m0, g, tile);
  for (int i = threadIdx.x; i < MT * ROWS; i += THREADS) {
    const int m = i / ROWS, r = i % ROWS;
    y[static_cast<long long>(m0 + m) * N + g * ROWS + r] = tile[m][r];
  }
  if (cand != nullptr) {
    // A warp a token (linear_tile ends with a barrier, so the tile is complete).
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    for (int m = warp; m < MT; m += THREADS / 32) {
      unsigned long long best = 0;
      for (int r = lane; r < ROWS; r += 32) {
        const unsigned long long c = greedy_candidate(tile[m][r], g * ROWS + r);
        best = c > best ? c : best;
      }
      best = warp_max_u64(best);
      if (lane == 0) cand[static_cast<long long>(m0 + m) * (N / ROWS) + g] = best;
    }
  }
}

}  // namespace telos_kernels
