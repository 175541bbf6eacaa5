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

// RMSNorm of one row, the same arithmetic wherever it runs (the rmsnorm kernel below, the
// small GEMM's norm prologue in gemm_small.cuh), so a row's bits do not depend on which kernel
// normalized it: 128 threads (kNormThreads); thread t owns the 8-element chunks c = t, t + 128, ...
// (elements 8c .. 8c + 7) and sums their squares in that order with fmaf (rms_partial); each warp
// sums its 32 partials with butterflies and the four warp sums are added as (w0 + w1) + (w2 + w3)
// (rms_inv); an element is bf16(x · inv · w) (rms_apply8). With L2_ONLY the row is read past L1
// (ld.global.cg): a persistent kernel reads x again after other CTAs changed it, when its L1 may
// still hold the old lines.
constexpr int kNormThreads = 128;
template <int H>
constexpr int kNormChunks = (H / 8 + kNormThreads - 1) / kNormThreads;  // chunks per thread

template <bool L2_ONLY>
__device__ __forceinline__ float4 rms_load4(const float* p) {
  if constexpr (L2_ONLY) return __ldcg(reinterpret_cast<const float4*>(p));
  return *reinterpret_cast<const float4*>(p);
}

template <int H, bool L2_ONLY = false>
__device__ __forceinline__ float rms_partial(const float* row, int t) {
  static_assert(H % 8 == 0, "rows are read 8 elements at a time");
  float ss = 0.f;
#pragma unroll
  for (int k = 0; k < kNormChunks<H>; ++k) {
    const int c = t + k * kNormThreads;
    if (c < H / 8) {
      const float4 a = rms_load4<L2_ONLY>(row + 8 * c);
      const float4 b = rms_load4<L2_ONLY>(row + 8 * c + 4);
      ss = fmaf(a.x, a.x, ss), ss = fmaf(a.y, a.y, ss), ss = fmaf(a.z, a.z, ss), ss = fmaf(a.w, a.w, ss);
      ss = fmaf(b.x, b.x, ss), ss = fmaf(b.y, b.y, ss), ss = fmaf(b.z, b.z, ss), ss = fmaf(b.w, b.w, ss);
    }
  }
  return warp_sum(ss);
}

// inv = 1 / sqrt(mean(x²) + EPS) from the four warp sums of rms_partial.
template <int H, float EPS>
__device__ __forceinline__ float rms_inv(const float (&warp_sums)[4]) {
  return rsqrtf(((warp_sums[0] + warp_sums[1]) + (warp_sums[2] + warp_sums[3])) / H + EPS);
}

// Chunk c of a normalized row as 8 packed bf16 (zeros past H); w8 holds w[8c .. 8c + 7].
template <int H, bool L2_ONLY = false>
__device__ __forceinline__ uint4 rms_apply8(const float* row, int c, float inv, const float (&w8)[8]) {
  if (c >= H / 8) return make_uint4(0u, 0u, 0u, 0u);
  const float4 a = rms_load4<L2_ONLY>(row + 8 * c);
  const float4 b = rms_load4<L2_ONLY>(row + 8 * c + 4);
  const float x[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
  unsigned u[4];
#pragma unroll
  for (int i = 0; i < 4; ++i)
    u[i] = static_cast<unsigned>(f32_to_bf16(x[2 * i] * inv * w8[2 * i])) |
           static_cast<unsigned>(f32_to_bf16(x[2 * i + 1] * inv * w8[2 * i + 1])) << 16;
  return make_uint4(u[0], u[1], u[2], u[3]);
}

// A thread's weights of the norm: w8[k] = w[8c .. 8c + 7] for its chunks c = t + 128 k (zeros past H).
template <int H>
__device__ __forceinline__ void rms_load_w(const float* w, int t, float (&w8)[kNormChunks<H>][8]) {
#pragma unroll
  for (int k = 0; k < kNormChunks<H>; ++k) {
    const int c = t + k * kNormThreads;
#pragma unroll
    for (int e = 0; e < 8; ++e) w8[k][e] = c < H / 8 ? w[8 * c + e] : 0.f;
  }
}

// out[r] = bf16(x[src] / sqrt(mean(x[src]^2) + EPS) * w), one block of kNormThreads per output
// row r. With GATHER, src = rows[r] (the rows that sample, for the final norm) and a negative entry
// (a padding row) writes zeros; otherwise src = r. w is read before griddepcontrol.wait (a weight:
// no kernel writes it), so under PDL its load overlaps the previous kernel's tail.
template <int H, float EPS, bool GATHER>
__global__ void __launch_bounds__(kNormThreads) rmsnorm(const float* x, const float* w, const int* rows,
                                                        bf16* out) {
  __shared__ float scratch[4];
  hexel::launch_dependents();
  const int t = threadIdx.x;
  float w8[kNormChunks<H>][8];
  rms_load_w<H>(w, t, w8);
  hexel::grid_dependency_wait();
  const int r = blockIdx.x;
  const int src = GATHER ? rows[r] : r;
  uint4* o = reinterpret_cast<uint4*>(out + static_cast<long long>(r) * H);
  if (src < 0) {
    for (int c = t; c < H / 8; c += kNormThreads) o[c] = make_uint4(0u, 0u, 0u, 0u);
    return;
  }
  const float* in = x + static_cast<long long>(src) * H;
  const float ss = rms_partial<H>(in, t);
  if (t % 32 == 0) scratch[t / 32] = ss;
  __syncthreads();
  const float sums[4] = {scratch[0], scratch[1], scratch[2], scratch[3]};
  const float inv = rms_inv<H, EPS>(sums);
#pragma unroll
  for (int k = 0; k < kNormChunks<H>; ++k) {
    const int c = t + k * kNormThreads;
    if (c < H / 8) o[c] = rms_apply8<H>(in, c, inv, w8[k]);
  }
}

}  // namespace telos_kernels
