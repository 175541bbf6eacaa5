#pragma once
// Embedding gather and RMSNorm. The residual stream x is f32 (one row of H per token); what
// feeds a GEMM is bf16.
#include "common.cuh"

namespace telos_kernels {

// x[t] = embed[tokens[t]], one block per token. A token -(r+1) is fed from the device: the token
// the previous step sampled in row r (docs/artifact.md), so the host launches a decode step
// before it has seen the previous step's tokens.
template <int H, int THREADS>
__global__ void __launch_bounds__(THREADS) embed_gather(const bf16* embed, const int* tokens,
                                                        const int* sampled, float* x) {
  pdl_entry();
  static_assert(H % 8 == 0, "rows are read 16 bytes at a time");
  const int t = blockIdx.x;
  const int token = tokens[t] < 0 ? sampled[-tokens[t] - 1] : tokens[t];
  const bf16* row = embed + static_cast<long long>(token) * H;
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
// row) writes zeros; otherwise src = r. Each thread holds its elements of w and x in registers:
// w is read before griddepcontrol.wait (a weight: no kernel writes it), so under PDL its load
// overlaps the previous kernel's tail, and x is read once.
template <int H, int THREADS, float EPS, bool GATHER>
__global__ void __launch_bounds__(THREADS) rmsnorm(const float* x, const float* w, const int* rows,
                                                   bf16* out) {
  constexpr int PER = (H + THREADS - 1) / THREADS;  // elements per thread: i = tid + k * THREADS
  __shared__ float scratch[THREADS / 32];
  pdl_launch_dependents();
  float wr[PER];
#pragma unroll
  for (int k = 0; k < PER; ++k) {
    const int i = threadIdx.x + k * THREADS;
    wr[k] = i < H ? w[i] : 0.f;
  }
  pdl_wait();
  const int r = blockIdx.x;
  const int src = GATHER ? rows[r] : r;
  bf16* o = out + static_cast<long long>(r) * H;
  if (src < 0) {
    for (int i = threadIdx.x; i < H; i += THREADS) o[i] = 0;
    return;
  }
  const float* in = x + static_cast<long long>(src) * H;
  float xr[PER];
  float ss = 0.f;
#pragma unroll
  for (int k = 0; k < PER; ++k) {
    const int i = threadIdx.x + k * THREADS;
    xr[k] = i < H ? in[i] : 0.f;
    if (i < H) ss = fmaf(xr[k], xr[k], ss);
  }
  ss = block_sum<THREADS>(ss, scratch);
  const float inv = rsqrtf(ss / H + EPS);
#pragma unroll
  for (int k = 0; k < PER; ++k) {
    const int i = threadIdx.x + k * THREADS;
    if (i < H) o[i] = f32_to_bf16(xr[k] * inv * wr[k]);
  }
}

}  // namespace telos_kernels
