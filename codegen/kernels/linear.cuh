#pragma once
// The small-M GEMM (decode, and prefill tiled over M for now): y = A · Wᵀ with A [M, K] bf16
// activations and W [N, K] bf16 weights, row-major (K contiguous, docs/artifact.md). It is memory
// bound, so every weight byte is read once per M tile with 16-byte non-coherent loads and the
// work is spread over many blocks. Block (g, mt) computes ROWS weight rows (chosen by the
// epilogue: contiguous, or gate and up rows together) for the MT activation rows of tile mt into
// shared memory, and its epilogue writes them out.
//
// Reduction order, for batch invariance: lane l of a warp sums the 16-byte chunks l, l + 32, ...
// of K in order, eight products per chunk in order, and the 32 lane sums are combined by a fixed
// xor butterfly. None of this depends on MT or on the number of rows.
#include "common.cuh"

namespace telos_kernels {

constexpr int kLinearThreads = 256;

template <int K, int MT, int ROWS, class RowOf>
__device__ __forceinline__ void linear_tile(const bf16* __restrict__ W, const bf16* __restrict__ A,
                                            int m0, int g, float (*tile)[ROWS]) {
  static_assert(K % 8 == 0, "K is read 16 bytes at a time");
  constexpr int kWarps = kLinearThreads / 32;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const bf16* a = A + static_cast<long long>(m0) * K;
  for (int r = warp; r < ROWS; r += kWarps) {
    const bf16* w = W + static_cast<long long>(RowOf::row(g, r)) * K;
    float acc[MT];
#pragma unroll
    for (int m = 0; m < MT; ++m) acc[m] = 0.f;
#pragma unroll 4
    for (int c = lane; c < K / 8; c += 32) {
      const uint4 wv = load8_nc(w + c * 8);
#pragma unroll
      for (int m = 0; m < MT; ++m) acc[m] += dot8(wv, load8(a + m * K + c * 8));
    }
#pragma unroll
    for (int m = 0; m < MT; ++m) {
      const float s = warp_sum(acc[m]);
      if (lane == 0) tile[m][r] = s;
    }
  }
  __syncthreads();
}

template <int ROWS>
struct ContiguousRows {
  __device__ static int row(int g, int r) { return g * ROWS + r; }
};

// x[m, n] += (A · Wᵀ)[m, n]: the residual add after the attention output and down projections.
// x is the f32 residual stream.
template <int K, int N, int MT, int ROWS>
__global__ void __launch_bounds__(kLinearThreads) linear_residual(const bf16* W, const bf16* A,
                                                                  float* x) {
  static_assert(N % ROWS == 0, "a block owns whole column groups");
  __shared__ float tile[MT][ROWS];
  const int m0 = blockIdx.y * MT, g = blockIdx.x;
  linear_tile<K, MT, ROWS, ContiguousRows<ROWS>>(W, A, m0, g, tile);
  for (int i = threadIdx.x; i < MT * ROWS; i += kLinearThreads) {
    const int m = i / ROWS, r = i % ROWS;
    x[static_cast<long long>(m0 + m) * N + g * ROWS + r] += tile[m][r];
  }
}

// y[m, n] = (A · Wᵀ)[m, n] in f32: the LM head's logits.
template <int K, int N, int MT, int ROWS>
__global__ void __launch_bounds__(kLinearThreads) linear_f32(const bf16* W, const bf16* A,
                                                             float* y) {
  static_assert(N % ROWS == 0, "a block owns whole column groups");
  __shared__ float tile[MT][ROWS];
  const int m0 = blockIdx.y * MT, g = blockIdx.x;
  linear_tile<K, MT, ROWS, ContiguousRows<ROWS>>(W, A, m0, g, tile);
  for (int i = threadIdx.x; i < MT * ROWS; i += kLinearThreads) {
    const int m = i / ROWS, r = i % ROWS;
    y[static_cast<long long>(m0 + m) * N + g * ROWS + r] = tile[m][r];
  }
}

// act[m, j] = bf16(silu(g) * u) with g = (A · Wᵀ)[m, j] and u = (A · Wᵀ)[m, I + j]: W is gate_up,
// [2I, K] (gate rows, then up rows). A block owns COLS output columns, so it reads COLS gate rows
// and the COLS up rows that pair with them.
template <int COLS, int I>
struct GateUpRows {
  __device__ static int row(int g, int r) { return r < COLS ? g * COLS + r : I + g * COLS + r - COLS; }
};

template <int K, int I, int MT, int COLS>
__global__ void __launch_bounds__(kLinearThreads) linear_swiglu(const bf16* W, const bf16* A,
                                                                bf16* act) {
  static_assert(I % COLS == 0, "a block owns whole column groups");
  __shared__ float tile[MT][2 * COLS];
  const int m0 = blockIdx.y * MT, g = blockIdx.x;
  linear_tile<K, MT, 2 * COLS, GateUpRows<COLS, I>>(W, A, m0, g, tile);
  for (int i = threadIdx.x; i < MT * COLS; i += kLinearThreads) {
    const int m = i / COLS, c = i % COLS;
    const float gate = tile[m][c], up = tile[m][COLS + c];
    act[static_cast<long long>(m0 + m) * I + g * COLS + c] = f32_to_bf16(gate / (1.f + expf(-gate)) * up);
  }
}

// The QKV projection with its whole epilogue. Block g computes head g of the [Hq + 2 Hkv] heads of
// D columns: adds the bias (Qwen2), applies the per-head RMSNorm to q and k (Qwen3), rotates q and
// k (RoPE, rotate-half; Rope::inv_freq(i) holds the frequencies, llama3 scaling included), then
// writes q (f32, [M, Hq D]) or appends k / v to the token's KV page. Rows whose position is
// negative are padding: their k and v are not written.
//
// KV pages: page[layer][kv][head][slot][dim] bf16; `kv_layer` points at layer `layer` of page 0,
// PAGE_ELEMS is the size of a whole page in elements, page_tables has MAXP entries per sequence.
template <int K, int HQ, int HKV, int D, int MT, bool BIAS, bool QK_NORM, float EPS, int PAGE,
          int MAXP, long long PAGE_ELEMS, class Rope>
__global__ void __launch_bounds__(kLinearThreads)
    qkv_rope_append(const bf16* W, const bf16* A, const float* bias, const float* q_norm,
                    const float* k_norm, const int* positions, const int* token_seq,
                    const int* page_tables, bf16* kv_layer, float* q_out) {
  static_assert(D % 2 == 0, "RoPE rotates pairs");
  __shared__ float tile[MT][D];
  const int m0 = blockIdx.y * MT, head = blockIdx.x;
  linear_tile<K, MT, D, ContiguousRows<D>>(W, A, m0, head, tile);

  const bool is_q = head < HQ, is_k = !is_q && head < HQ + HKV;
  if constexpr (BIAS) {
    for (int i = threadIdx.x; i < MT * D; i += kLinearThreads) tile[i / D][i % D] += bias[head * D + i % D];
    __syncthreads();
  }
  if constexpr (QK_NORM) {
    if (is_q || is_k) {
      const float* nw = is_q ? q_norm : k_norm;
      const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
      for (int m = warp; m < MT; m += kLinearThreads / 32) {
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
    for (int i = threadIdx.x; i < MT * (D / 2); i += kLinearThreads) {
      const int m = i / (D / 2), j = i % (D / 2);
      const int pos = max(positions[m0 + m], 0);
      // The angle is rounded to f32 as transformers computes it; reducing it by 2π in f64 keeps
      // sincos on its short path (the long-argument path needs local memory).
      const float angle = static_cast<float>(pos) * Rope::inv_freq(j);
      const double turns = rint(static_cast<double>(angle) * 0.15915494309189535);
      float s, c;
      __sincosf(static_cast<float>(fma(-turns, 6.283185307179586, static_cast<double>(angle))), &s, &c);
      const float x1 = tile[m][j], x2 = tile[m][j + D / 2];
      tile[m][j] = x1 * c - x2 * s;
      tile[m][j + D / 2] = x2 * c + x1 * s;
    }
    __syncthreads();
  }
  if (is_q) {
    for (int i = threadIdx.x; i < MT * D; i += kLinearThreads) {
      const int m = i / D, d = i % D;
      q_out[static_cast<long long>(m0 + m) * HQ * D + head * D + d] = tile[m][d];
    }
    return;
  }
  const int kv = is_k ? 0 : 1, kvh = head - HQ - kv * HKV;
  for (int i = threadIdx.x; i < MT * D; i += kLinearThreads) {
    const int m = i / D, d = i % D;
    const int pos = positions[m0 + m];
    if (pos < 0) continue;
    const int page = page_tables[token_seq[m0 + m] * MAXP + pos / PAGE];
    kv_layer[page * PAGE_ELEMS + (static_cast<long long>(kv * HKV + kvh) * PAGE + pos % PAGE) * D + d] =
        f32_to_bf16(tile[m][d]);
  }
}

}  // namespace telos_kernels
