#pragma once
// Embedding gather and RMSNorm. The residual stream x is f32 (one row of H per token); what
// feeds a GEMM is bf16.
#include "common.cuh"

namespace telos_kernels {

// x[t] = embed[tokens[t]], one block per token.
template <int H, int THREADS>
__global__ void __launch_bounds__(THREADS) embed_gather(const bf16* embed, const int* tokens,
                                                        float* x) {
  pdl_entry();
  static_assert(H % 8 == 0, "rows are read 16 bytes at a time");
  const int t = blockIdx.x;
  const bf16* row = embed + static_cast<long long>(tokens[t]) * H;
  float* out = x + static_cast<long long>(t) * H;
  for (int i = threadIdx.x; i < H / 8; i += THREADS) {
    float f[8];
    unpack8(load8_nc(row + i * 8), f);
#pragma unroll
    for (int j = 0; j < 8; ++j) out[i * 8 + j] = f[j];
  }
}

// out[r] = bf16(x[src] / sqrt(mean(x[src]^2) + EPS) * w), one block per output row r. With
// GATHER, src = rows[r] (the rows that sample, for the final norm) and a negative entry (a padding
// row) writes zeros; otherwise src = r.
template <int H, int THREADS, float EPS, bool GATHER>
__global__ void __launch_bounds__(THREADS) rmsnorm(const float* x, const float* w, const int* rows,
                                                   bf16* out) {
  pdl_entry();
  __shared__ float scratch[THREADS / 32];
  const int r = blockIdx.x;
  const int src = GATHER ? rows[r] : r;
  bf16* o = out + static_cast<long long>(r) * H;
  if (src < 0) {
    for (int i = threadIdx.x; i < H; i += THREADS) o[i] = 0;
    return;
  }
  const float* in = x + static_cast<long long>(src) * H;
  float ss = 0.f;
  for (int i = threadIdx.x; i < H; i += THREADS) ss = fmaf(in[i], in[i], ss);
  ss = block_sum<THREADS>(ss, scratch);
  const float inv = rsqrtf(ss / H + EPS);
  for (int i = threadIdx.x; i < H; i += THREADS) o[i] = f32_to_bf16(in[i] * inv * w[i]);
}

}  // namespace telos_kernels
