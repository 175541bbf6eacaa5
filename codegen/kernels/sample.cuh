#pragma once
// Sampling, one block per row that samples. A row's token depends only on its logits and its
// parameters (seed and counter included), never on the other rows.
//
//  - temperature <= 0 or top_k == 1: greedy, the lowest index among the maxima, from the LM
//    head's per-block candidates (linear_f32);
//  - otherwise weights w_i = exp((logit_i - max) / temperature), restricted to the top_k largest
//    logits (ties at the k-th value are all kept), to w_i >= min_p (w_max is 1), then to the
//    smallest set of largest weights whose mass reaches top_p of what is left; the token is the
//    first index whose running sum (in index order) exceeds u * mass, u uniform in [0, 1) drawn
//    from (seed, counter).
// The k-th largest logit and the top-p threshold are found by a 32-step bitwise search over
// order-preserving integer keys: exact, and no sort.
#include "common.cuh"

namespace telos_kernels {

// Written by the executor, one per sampling row (32 bytes).
struct SampleParams {
  float temperature;
  float top_p;  // 1: off
  float min_p;  // 0: off
  int top_k;    // 0: off
  unsigned seed_lo, seed_hi;
  int counter;  // the position of the token being sampled
  int reserved;
};

__device__ __forceinline__ unsigned long long splitmix64(unsigned long long z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// Row r's token goes to tokens_out[r] (device memory: the next step's embedding reads it) and to
// tokens_host[r], the step's pinned host buffer mapped into the device's address space (docs/
// artifact.md, `host:sampled`): the host reads its tokens there once the step's event has
// completed, so no copy back is queued between steps. Greedy rows read the row's G candidates
// (`cand`, G a row: the LM head's first stage, linear_f32), the others its V logits.
template <int V, int THREADS, int G>
__global__ void __launch_bounds__(THREADS)
    sample(const float* logits, const unsigned long long* cand, const SampleParams* params,
           const int* rows, int* tokens_out, int* tokens_host) {
  pdl_entry();
  constexpr int PER = (V + THREADS - 1) / THREADS;  // each thread owns a contiguous run of indices
  __shared__ float scratch[32];
  __shared__ float warp_prefix[THREADS / 32];
  __shared__ int chosen, last_kept;
  __shared__ unsigned long long best_c[THREADS / 32];

  const int r = blockIdx.x, tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  auto put = [&](int token) { tokens_out[r] = token, tokens_host[r] = token; };
  if (rows[r] < 0) {
    if (tid == 0) put(0);
    return;
  }
  const float* lg = logits + static_cast<long long>(r) * V;
  const SampleParams p = params[r];
  const int lo = tid * PER, hi = min(V, lo + PER);

  if (p.temperature <= 0.f || p.top_k == 1) {
    // Greedy: the largest candidate is the largest logit, lowest id among equals; none (every
    // logit NaN or -inf) gives 0. One load a thread for G up to THREADS.
    const unsigned long long* c = cand + static_cast<long long>(r) * G;
    unsigned long long best = 0;
    for (int j = tid; j < G; j += THREADS) best = c[j] > best ? c[j] : best;
    best = warp_max_u64(best);
    if (lane == 0) best_c[warp] = best;
    __syncthreads();
    if (tid == 0) {
      for (int w = 1; w < THREADS / 32; ++w) best = best_c[w] > best ? best_c[w] : best;
      put(best != 0 ? greedy_candidate_index(best) : 0);
    }
    return;
  }

  float mx = -__int_as_float(0x7f800000);
  for (int i = lo; i < hi; ++i) mx = fmaxf(mx, lg[i]);
  mx = block_max<THREADS>(mx, scratch);
  const float inv_t = 1.f / p.temperature;
  auto weight = [&](int i) { return expf((lg[i] - mx) * inv_t); };

  // The k-th largest key: the largest key with at least top_k keys >= it.
  unsigned k_key = 0;
  if (p.top_k > 1 && p.top_k < V) {
    for (int bit = 31; bit >= 0; --bit) {
      const unsigned cand = k_key | (1u << bit);
      float n = 0.f;
      for (int i = lo; i < hi; ++i) n += order_key(lg[i]) >= cand ? 1.f : 0.f;
      if (block_sum<THREADS>(n, scratch) >= static_cast<float>(p.top_k)) k_key = cand;
    }
  }
  auto kept = [&](int i) {
    return order_key(lg[i]) >= k_key && (p.min_p <= 0.f || weight(i) >= p.min_p);
  };
  auto mass_at_least = [&](unsigned key) {
    float s = 0.f;
    for (int i = lo; i < hi; ++i)
      if (order_key(lg[i]) >= key && kept(i)) s += weight(i);
    return block_sum<THREADS>(s, scratch);
  };
  unsigned p_key = 0;
  float total = mass_at_least(0);
  if (p.top_p < 1.f) {
    const float target = p.top_p * total;
    for (int bit = 31; bit >= 0; --bit) {
      const unsigned cand = p_key | (1u << bit);
      if (mass_at_least(cand) >= target) p_key = cand;
    }
    total = mass_at_least(p_key);
  }

  const unsigned long long seed = (static_cast<unsigned long long>(p.seed_hi) << 32) | p.seed_lo;
  const unsigned long long bits = splitmix64(seed ^ splitmix64(static_cast<unsigned long long>(p.counter)));
  const float u = static_cast<float>(bits >> 40) * (1.f / 16777216.f) * total;

  // Exclusive prefix of the per-thread masses, in thread order.
  float own = 0.f;
  int own_last = -1;
  for (int i = lo; i < hi; ++i)
    if (order_key(lg[i]) >= p_key && kept(i)) own += weight(i), own_last = i;
  float incl = own;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const float v = __shfl_up_sync(0xffffffffu, incl, o);
    if (lane >= o) incl += v;
  }
  if (lane == 31) warp_prefix[warp] = incl;
  if (tid == 0) chosen = V, last_kept = -1;
  __syncthreads();
  float before = incl - own;
  for (int w = 0; w < warp; ++w) before += warp_prefix[w];
  if (own_last >= 0) atomicMax(&last_kept, own_last);
  if (own > 0.f && u >= before && u < before + own) {
    float run = before;
    for (int i = lo; i < hi; ++i) {
      if (!(order_key(lg[i]) >= p_key && kept(i))) continue;
      run += weight(i);
      if (run > u) {
        atomicMin(&chosen, i);
        break;
      }
    }
  }
  __syncthreads();
  if (tid == 0) put(chosen < V ? chosen : max(last_kept, 0));
}

}  // namespace telos_kernels
