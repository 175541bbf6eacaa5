#pragma once
// Attention over the paged KV cache, for decode and prefill alike: every token is a query at its
// own absolute position and attends to positions [0, position] of its sequence (causal; the
// QKV kernel has already appended this step's keys and values). The context is cut into splits
// of SPLIT positions at fixed absolute boundaries; attn_split computes one split of one token for
// one KV head (the G = HQ/HKV query heads that share it, one warp each, so K and V are read once
// for the group) with an online softmax, and attn_combine merges the splits in order. Split
// boundaries and the 32-position steps inside a split depend only on positions, never on the
// batch, so a row's result does not depend on its bucket.
#include "common.cuh"

namespace telos_kernels {

// Partial results, per (token, query head, split): part_o [D] unnormalised f32 sums and
// part_ml {running max (log2 domain), sum of weights}. SCALE_LOG2 = log2(e) / sqrt(D).
template <int HQ, int HKV, int D, int PAGE, int MAXP, long long PAGE_ELEMS, int SPLIT,
          float SCALE_LOG2>
__global__ void __launch_bounds__(HQ / HKV * 32)
    attn_split(const float* q, const int* positions, const int* token_seq, const int* page_tables,
               const bf16* kv_layer, float* part_o, float* part_ml) {
  constexpr int G = HQ / HKV, NSPLIT = (MAXP * PAGE + SPLIT - 1) / SPLIT;
  static_assert(HQ % HKV == 0 && D % 32 == 0 && SPLIT % 32 == 0, "shape");
  __shared__ float qs[G][D];
  const int t = blockIdx.x, kvh = blockIdx.y, split = blockIdx.z;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, hq = kvh * G + warp;
  const int pos = positions[t];
  const int start = split * SPLIT, end = min(start + SPLIT, pos + 1);

  for (int d = lane; d < D; d += 32) qs[warp][d] = q[(static_cast<long long>(t) * HQ + hq) * D + d] * SCALE_LOG2;
  __syncwarp();

  const int* pt = page_tables + (pos >= 0 ? token_seq[t] * MAXP : 0);
  const bf16* k_base = kv_layer + static_cast<long long>(kvh) * PAGE * D;
  const bf16* v_base = kv_layer + static_cast<long long>(HKV + kvh) * PAGE * D;
  // Values are read 16 bytes (8 dims) per lane: LPR lanes cover one row, so a warp reads PPI
  // positions per step; lane holds dims (lane % LPR) * 8 .. + 8 for positions j with
  // j % PPI == lane / LPR, and the PPI partial sums are folded by a fixed butterfly at the end.
  constexpr int LPR = D / 8, PPI = 32 / LPR;
  float m = -__int_as_float(0x7f800000), l = 0.f, acc[8];
#pragma unroll
  for (int i = 0; i < 8; ++i) acc[i] = 0.f;

  for (int base = start; base < end; base += 32) {
    const int p = base + lane;
    const bool valid = p < end;
    float s = -__int_as_float(0x7f800000);
    if (valid) {
      const bf16* k = k_base + pt[p / PAGE] * PAGE_ELEMS + (p % PAGE) * D;
      s = 0.f;
#pragma unroll
      for (int c = 0; c < D / 8; ++c) {
        float kf[8];
        unpack8(load8(k + c * 8), kf);
#pragma unroll
        for (int j = 0; j < 8; ++j) s = fmaf(qs[warp][c * 8 + j], kf[j], s);
      }
    }
    const float m_new = fmaxf(m, warp_max(s));
    const float w = valid ? exp2f(s - m_new) : 0.f;
    const float corr = exp2f(m - m_new);
    l = l * corr + warp_sum(w);
#pragma unroll
    for (int i = 0; i < 8; ++i) acc[i] *= corr;
#pragma unroll 2
    for (int j0 = 0; j0 < 32; j0 += PPI) {
      const int j = j0 + lane / LPR;
      const float wj = __shfl_sync(0xffffffffu, w, j);
      if (base + j < end) {
        const int pj = base + j;
        float vf[8];
        unpack8(load8(v_base + pt[pj / PAGE] * PAGE_ELEMS + (pj % PAGE) * D + (lane % LPR) * 8), vf);
#pragma unroll
        for (int i = 0; i < 8; ++i) acc[i] = fmaf(wj, vf[i], acc[i]);
      }
    }
    m = m_new;
  }
#pragma unroll
  for (int o = LPR; o < 32; o <<= 1)
#pragma unroll
    for (int i = 0; i < 8; ++i) acc[i] += __shfl_xor_sync(0xffffffffu, acc[i], o);

  const long long idx = (static_cast<long long>(t) * HQ + hq) * NSPLIT + split;
  if (lane < LPR) {
#pragma unroll
    for (int i = 0; i < 8; ++i) part_o[idx * D + lane * 8 + i] = acc[i];
  }
  if (lane == 0) {
    part_ml[idx * 2] = m;
    part_ml[idx * 2 + 1] = l;
  }
}

// out[t, hq*D + d] = bf16(softmax-weighted sum), merging the splits 0..position/SPLIT in order.
// Padding rows (negative position) get zeros.
template <int HQ, int D, int NSPLIT, int SPLIT>
__global__ void __launch_bounds__(D) attn_combine(const float* part_o, const float* part_ml,
                                                  const int* positions, bf16* out) {
  const int t = blockIdx.x, hq = blockIdx.y, d = threadIdx.x;
  const int pos = positions[t];
  bf16* o = out + (static_cast<long long>(t) * HQ + hq) * D;
  if (pos < 0) {
    o[d] = 0;
    return;
  }
  const long long base = (static_cast<long long>(t) * HQ + hq) * NSPLIT;
  const int last = pos / SPLIT;
  float mx = -__int_as_float(0x7f800000);
  for (int s = 0; s <= last; ++s) mx = fmaxf(mx, part_ml[(base + s) * 2]);
  float l = 0.f, acc = 0.f;
  for (int s = 0; s <= last; ++s) {
    const float w = exp2f(part_ml[(base + s) * 2] - mx);
    l = fmaf(part_ml[(base + s) * 2 + 1], w, l);
    acc = fmaf(part_o[(base + s) * D + d], w, acc);
  }
  o[d] = f32_to_bf16(acc / l);
}

}  // namespace telos_kernels
