#pragma once
// The small-M GEMM (decode, and prefill tiled over M for now): y = A · Wᵀ with A [M, K] bf16
// activations and W [N, K] bf16 weights, row-major (K contiguous, docs/artifact.md). It is memory
// bound: every weight byte is read once per M tile, straight from global memory into tensor-core
// fragments with 16-byte non-coherent loads, no shared-memory staging.
//
// The MMA is mma.m16n8k16 with its operands swapped: its M is 16 weight rows (W is the row-major
// A operand) and its N is 8 tokens (the activations are the column-major B operand). Block (g, mt)
// owns ROWS weight rows (chosen by the epilogue: contiguous, or gate and up rows together) for the
// MT tokens of tile mt; warp w takes row group w % (ROWS / 16) and K slice w / (ROWS / 16) of
// KSPLIT equal slices. The results land in a shared tile [MT][ROWS] for the epilogue.
//
// K permutation. A dot product does not care in which order K is laid out as long as both
// operands use the same order, so a lane loads 8 contiguous bf16 of its row (lanes 4g..4g+3 read
// 64 contiguous bytes of row g) and feeds them to the k-slots {2t, 2t+1, 2t+8, 2t+9} of two
// consecutive k16 MMAs; its token's 8 bf16 at the same K offsets fill the B fragments the same
// way. One 16-byte load per operand row per 32 K elements, no shuffles.
//
// Reduction order, for batch invariance: within a K slice the MMAs accumulate in K order; the
// KSPLIT slice sums are added in slice order through the shared tile (and QKV's CLUSTER block sums
// in rank order). KSPLIT and CLUSTER are fixed per weight shape (codegen/kernel_plan.cpp), and
// each output column of an MMA depends only on its own token, so a token's result is the same for
// every MT, every position in the tile and every other token.
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

// Fills tile[m][r] (m < MT, r < ROWS) with row RowOf::row(g, r) of W times token m0 + m of A over
// the KR elements of K from k_base (all of K unless a cluster splits it further).
// UNROLL K steps are loaded per batch; it changes nothing in the arithmetic.
template <int K, int KR, int MT, int ROWS, int KSPLIT, int UNROLL, class RowOf>
__device__ __forceinline__ void linear_tile(const bf16* __restrict__ W, const bf16* __restrict__ A,
                                            int m0, int g, int k_base, float (*tile)[ROWS]) {
  static_assert(ROWS % 16 == 0, "a warp owns 16 weight rows");
  static_assert(KR % (32 * KSPLIT) == 0, "a K slice is whole 32-element steps");
  static_assert(MT >= 1 && MT <= 64, "at most 64 tokens per tile");
  constexpr int kGroups = ROWS / 16, NT = (MT + 7) / 8, SLICE = KR / KSPLIT, STEPS = SLICE / 32;
  constexpr int FULL = STEPS / UNROLL * UNROLL;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int group = warp % kGroups, slice = warp / kGroups, gid = lane / 4, tig = lane % 4;
  const int r = group * 16 + gid, k0 = k_base + slice * SLICE + 8 * tig;
  const bf16* w_lo = W + static_cast<long long>(RowOf::row(g, r)) * K + k0;
  const bf16* w_hi = W + static_cast<long long>(RowOf::row(g, r + 8)) * K + k0;
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

// Thread block clusters (PTX ISA: Special Registers: %cluster_ctarank; Parallel Synchronization:
// barrier.cluster; Data Movement: mapa, ld with .shared::cluster).
__device__ __forceinline__ unsigned cluster_ctarank() {
  unsigned r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
  return r;
}

// Every thread of every CTA of the cluster; shared-memory writes before it are visible to the
// whole cluster after it.
__device__ __forceinline__ void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;" ::
                   : "memory");
}

// The f32 at the same shared-memory offset as `p` in the CTA of cluster rank `rank`.
__device__ __forceinline__ float ld_shared_cluster(const float* p, unsigned rank) {
  unsigned long long local;
  asm("cvta.to.shared.u64 %0, %1;" : "=l"(local) : "l"(p));
  unsigned remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;"
               : "=r"(remote)
               : "r"(static_cast<unsigned>(local)), "r"(rank));
  float v;
  asm volatile("ld.shared::cluster.f32 %0, [%1];" : "=f"(v) : "r"(remote) : "memory");
  return v;
}

template <int ROWS>
struct ContiguousRows {
  __device__ static int row(int g, int r) { return g * ROWS + r; }
};

// x[m, n] += (A · Wᵀ)[m, n]: the residual add after the attention output and down projections.
// x is the f32 residual stream.
template <int K, int N, int ROWS, int MT, int KSPLIT, int UNROLL>
__global__ void __launch_bounds__(kLinearThreads<ROWS, KSPLIT>, kLinearMinBlocks<ROWS, KSPLIT>)
    linear_residual(const bf16* W, const bf16* A, float* x) {
  pdl_entry();
  static_assert(N % ROWS == 0, "a block owns whole row groups");
  constexpr int THREADS = kLinearThreads<ROWS, KSPLIT>;
  __shared__ float tile[MT][ROWS];
  const int m0 = blockIdx.y * MT, g = blockIdx.x;
  linear_tile<K, K, MT, ROWS, KSPLIT, UNROLL, ContiguousRows<ROWS>>(W, A, m0, g, 0, tile);
  for (int i = threadIdx.x; i < MT * ROWS; i += THREADS) {
    const int m = i / ROWS, r = i % ROWS;
    x[static_cast<long long>(m0 + m) * N + g * ROWS + r] += tile[m][r];
  }
}

// y[m, n] = (A · Wᵀ)[m, n] in f32: the LM head's logits.
template <int K, int N, int ROWS, int MT, int KSPLIT, int UNROLL>
__global__ void __launch_bounds__(kLinearThreads<ROWS, KSPLIT>, kLinearMinBlocks<ROWS, KSPLIT>)
    linear_f32(const bf16* W, const bf16* A, float* y) {
  pdl_entry();
  static_assert(N % ROWS == 0, "a block owns whole row groups");
  constexpr int THREADS = kLinearThreads<ROWS, KSPLIT>;
  __shared__ float tile[MT][ROWS];
  const int m0 = blockIdx.y * MT, g = blockIdx.x;
  linear_tile<K, K, MT, ROWS, KSPLIT, UNROLL, ContiguousRows<ROWS>>(W, A, m0, g, 0, tile);
  for (int i = threadIdx.x; i < MT * ROWS; i += THREADS) {
    const int m = i / ROWS, r = i % ROWS;
    y[static_cast<long long>(m0 + m) * N + g * ROWS + r] = tile[m][r];
  }
}

// act[m, j] = bf16(silu(g) * u) with g = (A · Wᵀ)[m, j] and u = (A · Wᵀ)[m, I + j]: W is gate_up,
// [2I, K] (gate rows, then up rows). A block owns COLS = ROWS / 2 output columns, so it reads COLS
// gate rows and the COLS up rows that pair with them (COLS a multiple of 8: a row group of 16 is
// 8 gate rows and their 8 up rows, or whole groups of either).
template <int COLS, int I>
struct GateUpRows {
  __device__ static int row(int g, int r) {
    return r < COLS ? g * COLS + r : I + g * COLS + r - COLS;
  }
};

template <int K, int I, int ROWS, int MT, int KSPLIT, int UNROLL>
__global__ void __launch_bounds__(kLinearThreads<ROWS, KSPLIT>, kLinearMinBlocks<ROWS, KSPLIT>)
    linear_swiglu(const bf16* W, const bf16* A, bf16* act) {
  pdl_entry();
  constexpr int COLS = ROWS / 2, THREADS = kLinearThreads<ROWS, KSPLIT>;
  static_assert(I % COLS == 0 && COLS % 8 == 0, "a block owns whole column groups");
  __shared__ float tile[MT][2 * COLS];
  const int m0 = blockIdx.y * MT, g = blockIdx.x;
  linear_tile<K, K, MT, 2 * COLS, KSPLIT, UNROLL, GateUpRows<COLS, I>>(W, A, m0, g, 0, tile);
  for (int i = threadIdx.x; i < MT * COLS; i += THREADS) {
    const int m = i / COLS, c = i % COLS;
    const float gate = tile[m][c], up = tile[m][COLS + c];
    act[static_cast<long long>(m0 + m) * I + g * COLS + c] =
        f32_to_bf16(gate / (1.f + expf(-gate)) * up);
  }
}

// The QKV projection with its whole epilogue. A cluster of CLUSTER blocks computes head g of the
// [Hq + 2 Hkv] heads of D columns (one head per block is too few blocks to stream the weights at
// full bandwidth: 48 for Llama-3.1-8B): block rank r takes the r-th K / CLUSTER of K, and rank 0
// adds the ranks' tiles in rank order through distributed shared memory. Rank 0 then adds the
// bias (Qwen2), applies the per-head RMSNorm to q and k (Qwen3), rotates q and k (RoPE,
// rotate-half; Rope::inv_freq(i) holds the frequencies, llama3 scaling included), then writes q
// (f32, [M, Hq D]) or appends k / v to the token's KV page. Rows whose position is
// negative are padding: their k and v are not written.
//
// KV pages: page[layer][kv][head][slot][dim] bf16; `kv_layer` points at layer `layer` of page 0,
// PAGE_ELEMS is the size of a whole page in elements, page_tables has MAXP entries per sequence.
template <int K, int HQ, int HKV, int D, int MT, int KSPLIT, int UNROLL, int CLUSTER, bool BIAS,
          bool QK_NORM, float EPS, int PAGE, int MAXP, long long PAGE_ELEMS, class Rope>
__global__ void __cluster_dims__(CLUSTER, 1, 1)
    __launch_bounds__(kLinearThreads<D, KSPLIT>, kLinearMinBlocks<D, KSPLIT>)
        qkv_rope_append(const bf16* W, const bf16* A, const float* bias, const float* q_norm,
                        const float* k_norm, const int* positions, const int* token_seq,
                        const int* page_tables, bf16* kv_layer, float* q_out) {
  pdl_entry();
  static_assert(D % 2 == 0, "RoPE rotates pairs");
  constexpr int THREADS = kLinearThreads<D, KSPLIT>;
  __shared__ float tile[MT][D];
  static_assert(K % CLUSTER == 0, "the cluster splits K evenly");
  constexpr int KR = K / CLUSTER;
  const int m0 = blockIdx.y * MT, head = blockIdx.x / CLUSTER;
  const unsigned rank = CLUSTER > 1 ? cluster_ctarank() : 0u;
  linear_tile<K, KR, MT, D, KSPLIT, UNROLL, ContiguousRows<D>>(W, A, m0, head,
                                                               static_cast<int>(rank) * KR, tile);
  if constexpr (CLUSTER > 1) {
    cluster_sync();
    if (rank == 0) {
      for (int i = threadIdx.x; i < MT * D; i += THREADS) {
        float s = tile[i / D][i % D];
        for (unsigned r = 1; r < CLUSTER; ++r) s += ld_shared_cluster(&tile[i / D][i % D], r);
        tile[i / D][i % D] = s;
      }
    }
    // The other ranks keep their shared memory until rank 0 has read it; this is also rank 0's
    // barrier before its epilogue reads the sums.
    cluster_sync();
    if (rank != 0) return;
  }

  const bool is_q = head < HQ, is_k = !is_q && head < HQ + HKV;
  if constexpr (BIAS) {
    for (int i = threadIdx.x; i < MT * D; i += THREADS)
      tile[i / D][i % D] += bias[head * D + i % D];
    __syncthreads();
  }
  if constexpr (QK_NORM) {
    if (is_q || is_k) {
      const float* nw = is_q ? q_norm : k_norm;
      const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
      for (int m = warp; m < MT; m += THREADS / 32) {
        float ss = 0.f;
        for (int d = lane; d < D; d += 32) ss = fmaf(tile[m][d], tile[m][d], ss);
        const float inv = rsqrtf(warp_sum(ss) / D + EPS);
        __syncwarp();
        for (int d = lane; d < D; d += 32) tile[m][d] = tile[m][d] * inv * nw[d];
      }
      __syncthreads();
    }
  }
  if (is_q || is_k) {
    for (int i = threadIdx.x; i < MT * (D / 2); i += THREADS) {
      const int m = i / (D / 2), j = i % (D / 2);
      const int pos = max(positions[m0 + m], 0);
      // The angle is rounded to f32 as transformers computes it; reducing it by 2π in f64 keeps
      // sincos on its short path (the long-argument path needs local memory).
      const float angle = static_cast<float>(pos) * Rope::inv_freq(j);
      const double turns = rint(static_cast<double>(angle) * 0.15915494309189535);
      float s, c;
      __sincosf(static_cast<float>(fma(-turns, 6.283185307179586, static_cast<double>(angle))), &s,
                &c);
      const float x1 = tile[m][j], x2 = tile[m][j + D / 2];
      tile[m][j] = x1 * c - x2 * s;
      tile[m][j + D / 2] = x2 * c + x1 * s;
    }
    __syncthreads();
  }
  if (is_q) {
    for (int i = threadIdx.x; i < MT * D; i += THREADS) {
      const int m = i / D, d = i % D;
      q_out[static_cast<long long>(m0 + m) * HQ * D + head * D + d] = tile[m][d];
    }
    return;
  }
  const int kv = is_k ? 0 : 1, kvh = head - HQ - kv * HKV;
  for (int i = threadIdx.x; i < MT * D; i += THREADS) {
    const int m = i / D, d = i % D;
    const int pos = positions[m0 + m];
    if (pos < 0) continue;
    const int page = page_tables[token_seq[m0 + m] * MAXP + pos / PAGE];
    kv_layer[page * PAGE_ELEMS + (static_cast<long long>(kv * HKV + kvh) * PAGE + pos % PAGE) * D +
             d] = f32_to_bf16(tile[m][d]);
  }
}

}  // namespace telos_kernels
