#pragma once
// Sampling, one cluster of C blocks per row that samples. A row's token depends only on its
// logits and its parameters (seed and counter included), never on the other rows.
//
//  - temperature <= 0 or top_k == 1: greedy, the lowest index among the maxima, from the LM
//    head's per-tile candidates (gemm_small_f32cand);
//  - otherwise weights w_i = exp((logit_i - max) / temperature), restricted to the top_k largest
//    logits (ties at the k-th value are all kept), to w_i >= min_p (w_max is 1), then to the
//    smallest set of largest weights whose mass reaches top_p of what is left; the token is the
//    first whose running sum exceeds u * mass, u uniform in [0, 1) drawn from (seed, counter), in
//    the kernel's fixed order of the vocabulary (block, thread, then the thread's values: index
//    rank * THREADS * PER + j * THREADS + thread holds the thread's j-th value), which depends on
//    the shape only. NaN logits count as -inf.
// The k-th largest logit and the top-p threshold are found by a search over order-preserving
// integer keys, exact and without a sort: two bits a step (three pivots cut the interval left
// into four), each step one reduction over the cluster; the search ends early once the interval
// left holds one value (a row of distinct logits: ~9-13 steps rather than 16, as close as the
// values around the cut sit). The row lives in registers (up to 32 values a thread), so a step
// reads no global memory, and once the interval holds at most a few thousand values each block
// keeps its own in a shared-memory list that the last steps read instead. C blocks (a cluster,
// each reduction's block partials pushed into every block's shared memory by st.async) spread
// the row over C SMs.
#include "common.cuh"
#include "hexel/cluster.cuh"
#include "hexel/mbarrier.cuh"

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

// A partial of sample's cluster reductions: three float sums and three counts (the search's
// measures at its three pivots; other reductions use the first), four smallest keys (one for
// each quarter of the search's interval) and a largest key (u32 fields: one redux.sync a warp,
// PTX ISA "Parallel Synchronization and Communication Instructions: redux.sync"). 48 bytes, 16
// aligned: three 16-byte st.async to another block of the cluster.
struct alignas(16) SamplePartial {
  float sum[3];
  unsigned count[3], min_key[4], max_key, unused;
};

// A greedy row from its G candidates `c` (the LM head's first stage), by one block: the largest
// candidate is the largest logit, lowest id among equals; none (every logit NaN or -inf) gives 0.
// One load a thread (tid, lane, warp) for G up to THREADS; best_c holds the warps' maxima;
// put(token) by thread 0.
template <int THREADS, int G, class Put>
__device__ __forceinline__ void sample_greedy(const unsigned long long* c, int tid, int lane,
                                              int warp, unsigned long long (&best_c)[THREADS / 32],
                                              Put& put) {
  constexpr int kWarps = THREADS / 32;
  unsigned long long best = 0;
  for (int j = tid; j < G; j += THREADS) best = c[j] > best ? c[j] : best;
  best = warp_max_u64(best);
  if (lane == 0) best_c[warp] = best;
  __syncthreads();
  if (tid == 0) {
    for (int w = 1; w < kWarps; ++w) best = best_c[w] > best ? best_c[w] : best;
    put(best != 0 ? greedy_candidate_index(best) : 0);
  }
}

// The block's offset in the cluster's running sum (the totals of the blocks before it, in rank
// order) and the cluster's total, from each block's `block_total` through the blocks' block_sum
// (distributed shared memory; res: thread 0's result for the block).
template <int C>
__device__ __forceinline__ float2 sample_block_offset(float block_total, int tid, int rank,
                                                      float& block_sum, SamplePartial& res) {
  float offset = 0.f, total = block_total;
  if constexpr (C > 1) {
    if (tid == 0) block_sum = block_total;
    hexel::cluster::sync();
    if (tid == 0) {
      const unsigned a = hexel::smem_addr(&block_sum);
      float run = 0.f;
      for (int c = 0; c < C; ++c) {
        if (c == rank) res.sum[0] = run;
        run += __uint_as_float(hexel::cluster::load_u32(hexel::cluster::map_shared(a, c)));
      }
      res.max_key = __float_as_uint(run);
    }
    __syncthreads();
    offset = res.sum[0], total = __uint_as_float(res.max_key);
  }
  return make_float2(offset, total);
}

// The token of the thread whose range of the running sum holds u (from `start`): the first of its
// values (index base + j · THREADS, value(j, key, weight)) whose running sum passes u, or with
// rounding its last weighed one.
template <int V, int THREADS, int C, class Value>
__device__ __forceinline__ int sample_pick(float start, float u, int base, Value& value) {
  constexpr int PER = (V + C * THREADS - 1) / (C * THREADS);
  constexpr bool kUnrolled = PER <= 64;
  float run = start;
  int token = -1;
  int last = -1;
#pragma unroll(kUnrolled ? PER : 4)
  for (int j = 0; j < PER; ++j) {
    unsigned k;
    float x;
    value(j, k, x);
    if (token < 0 && x > 0.f) {
      run += x;
      last = base + j * THREADS;
      if (run > u) token = last;
    }
  }
  if (token < 0) token = last;  // rounding: the thread's last weighed value
  return token;
}

// A partial reduced over a warp's lanes: the sums by butterflies over the first `width` lanes'
// distances (lane 0 ends with the sum of lanes 0 .. width - 1), the integers by redux.sync over all
// 32 lanes.
__device__ __forceinline__ void sample_warp_reduce(SamplePartial& v, int width) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1)
    if (o < width)
#pragma unroll
      for (int i = 0; i < 3; ++i) v.sum[i] += __shfl_xor_sync(0xffffffffu, v.sum[i], o);
#pragma unroll
  for (int i = 0; i < 3; ++i) v.count[i] = __reduce_add_sync(0xffffffffu, v.count[i]);
#pragma unroll
  for (int i = 0; i < 4; ++i) v.min_key[i] = __reduce_min_sync(0xffffffffu, v.min_key[i]);
  v.max_key = __reduce_max_sync(0xffffffffu, v.max_key);
}

// Row r's token goes to tokens_out[r] (device memory: the next step's embedding reads it) and to
// tokens_host[r], the step's pinned host buffer mapped into the device's address space (docs/
// artifact.md, `host:sampled`): the host reads its tokens there once the step's event has
// completed, so no copy back is queued between steps. Greedy rows read the row's G candidates
// (`cand`, G a row: the LM head's first stage, gemm_small_f32cand), the others its V logits. The
// grid is C blocks a row.
template <int V, int THREADS, int G, int C>
__global__ void __cluster_dims__(C, 1, 1) __launch_bounds__(THREADS)
    sample(const float* logits, const unsigned long long* cand, const SampleParams* params,
           const int* rows, int* tokens_out, int* tokens_host) {
  pdl_entry();
  constexpr int kWarps = THREADS / 32;
  constexpr int PER = (V + C * THREADS - 1) / (C * THREADS);  // values a thread holds
  constexpr int kSlice = PER * THREADS;                       // values a block holds
  // A thread keeps its first kRegs values (key and weight) in registers and reads the rest again
  // from the logits at each pass; a row of more than 64 values a thread is read again whole, in
  // loops unrolled by 4 only (registers need loops unrolled whole).
  constexpr int kRegs = 32;
  constexpr bool kUnrolled = PER <= 64;
  constexpr int kHeld = kUnrolled ? (PER < kRegs ? PER : kRegs) : 0;
  __shared__ SamplePartial red[kWarps];  // per-warp partials of a reduction
  __shared__ float block_sum;            // the draw: this block's total, read by the cluster
  __shared__ SamplePartial res;          // a reduction's result
  // The cluster's partials of a reduction, by parity and block rank, each pushed by its block
  // (st.async), and the barrier per parity whose phase completes once all C have arrived.
  __shared__ SamplePartial inbox[2][C];
  __shared__ alignas(8) unsigned long long inbox_bar[2];
  __shared__ unsigned long long best_c[kWarps];
  // The search's values inside its interval once the whole cluster holds at most kList of them:
  // this block's, in order (thread, then the thread's values), keys and weights.
  constexpr int kList = 4096;
  __shared__ unsigned list_key[kList];
  __shared__ float list_w[kList];
  __shared__ int list_base[kWarps + 1];

  const int r = blockIdx.x / C, tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int rank = C > 1 ? static_cast<int>(hexel::cluster::cta_rank()) : 0;
  auto put = [&](int token) { tokens_out[r] = token, tokens_host[r] = token; };
  if (rows[r] < 0) {
    if (rank == 0 && tid == 0) put(0);
    return;
  }
  const SampleParams p = params[r];

  if (p.temperature <= 0.f || p.top_k == 1) {
    // Greedy: the cluster's first block.
    if (rank == 0)
      sample_greedy<THREADS, G>(cand + static_cast<long long>(r) * G, tid, lane, warp, best_c, put);
    return;
  }

  // Every block's inbox barriers exist before any block pushes to them.
  if constexpr (C > 1) {
    if (tid == 0) {
      hexel::mbarrier::init(hexel::smem_addr(&inbox_bar[0]), 1);
      hexel::mbarrier::init(hexel::smem_addr(&inbox_bar[1]), 1);
      hexel::mbarrier::fence_init();
    }
    hexel::cluster::sync();
  }

  // A partial reduced over the cluster in a fixed order (the sum by butterflies over a warp's
  // lanes, then over the block's warps in warp 0, then over the cluster's blocks in warp 0, a
  // block's partial at the lane of its rank; the integers by redux.sync at the same stages): every
  // block computes the same result, and every thread gets it. Across the cluster, warp 0 of each
  // block pushes the block's partial into every block's inbox[parity] and waits for its own to
  // hold all C. Inbox p is written again two reductions later, by a block that has by then
  // received every block's next partial, which each block sends only after reading inbox p.
  int parity = 0;
  unsigned phases = 0;  // bit p: the phase of inbox_bar[p] to wait for next
  auto reduce = [&](SamplePartial v) {
    auto warp_reduce = [&](int width) { sample_warp_reduce(v, width); };
    const SamplePartial none{
        {0.f, 0.f, 0.f}, {0u, 0u, 0u}, {0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}, 0u};
    warp_reduce(32);
    if (lane == 0) red[warp] = v;
    __syncthreads();
    if (warp == 0) {
      v = lane < kWarps ? red[lane] : none;
      warp_reduce(kWarps);
      if constexpr (C > 1) {
        // Lane 0 holds the block's sums (the integers every lane): lanes 0 .. C - 1 push them.
#pragma unroll
        for (int i = 0; i < 3; ++i) v.sum[i] = __shfl_sync(0xffffffffu, v.sum[i], 0);
        const unsigned bar = hexel::smem_addr(&inbox_bar[parity]);
        if (lane == 0) hexel::mbarrier::arrive_expect_tx(bar, C * sizeof(SamplePartial));
        if (lane < C) {
          const unsigned to =
              hexel::cluster::map_shared(hexel::smem_addr(&inbox[parity][rank]), lane);
          const unsigned to_bar = hexel::cluster::map_shared(bar, lane);
          hexel::cluster::store_async_v4(to, __float_as_uint(v.sum[0]), __float_as_uint(v.sum[1]),
                                         __float_as_uint(v.sum[2]), v.count[0], to_bar);
          hexel::cluster::store_async_v4(to + 16, v.count[1], v.count[2], v.min_key[0],
                                         v.min_key[1], to_bar);
          hexel::cluster::store_async_v4(to + 32, v.min_key[2], v.min_key[3], v.max_key, 0u,
                                         to_bar);
        }
        hexel::mbarrier::wait_parity_cluster(bar, (phases >> parity) & 1u);
        phases ^= 1u << parity;
        v = lane < C ? inbox[parity][lane] : none;
        warp_reduce(C);
      }
      if (lane == 0) res = v;
    }
    __syncthreads();
    parity ^= 1;
    return res;
  };
  // Before a block leaves, no other block may still read its `block_sum`.
  auto leave = [&] {
    if constexpr (C > 1) hexel::cluster::sync();
  };

  const float ninf = -__int_as_float(0x7f800000);
  const int base = rank * kSlice + tid;  // the index of this thread's value j is base + j * THREADS
  const float* lg = logits + static_cast<long long>(r) * V;
  auto logit = [&](int j) {  // NaN as -inf, -inf past the vocabulary
    const int i = base + j * THREADS;
    const float x = i < V ? lg[i] : ninf;
    return x == x ? x : ninf;
  };
  float w[kHeld > 0 ? kHeld : 1];
  unsigned key[kHeld > 0 ? kHeld : 1];
  unsigned top = 0;  // the largest key
#pragma unroll(kUnrolled ? PER : 4)
  for (int j = 0; j < PER; ++j) {
    const float x = logit(j);
    if (kHeld > 0 && j < kHeld) w[j] = x;
    top = max(top, order_key(x));
  }
  {
    SamplePartial t{};
    t.max_key = top;
    top = reduce(t).max_key;
  }
  const float mx = __uint_as_float(top & 0x80000000u ? top & 0x7fffffffu : ~top);
  if (mx == ninf) {  // every logit NaN or -inf
    if (rank == 0 && tid == 0) put(0);
    leave();
    return;
  }
  const float scale = 1.4426950408889634f / p.temperature;  // log2(e) / temperature
  auto weight = [&](float x) { return x == mx ? 1.f : exp2f((x - mx) * scale); };
#pragma unroll
  for (int j = 0; j < kHeld; ++j) key[j] = order_key(w[j]), w[j] = weight(w[j]);
  // What is kept so far: keys from `k_min` up, weights from `w_min` up; the others weigh 0 (in
  // registers the cuts are applied once, as they are made).
  unsigned k_min = 0;
  float w_min = 0.f;
  auto value = [&](int j, unsigned& k, float& x) {
    if (kHeld > 0 && j < kHeld) {
      k = key[j], x = w[j];
    } else {
      const float l = logit(j);
      k = order_key(l), x = weight(l);
      if (k < k_min || x < w_min) x = 0.f;
    }
  };

  // The largest key T whose measure (of the values with keys >= T) reaches `target`: by count
  // (every value counts) or by mass (the values of positive weight), `n_all` values counting in
  // all. The measure at key 0 reaches it. Two bits a step from the top: the interval [lo, lo +
  // 4q) left holds T, and the pivots lo + q, lo + 2q, lo + 3q cut it into quarters; T lies in the
  // quarter from the largest pivot whose measure reaches the target (lo's does). Once that
  // quarter holds one value that counts, that value's key is T (every key above it in the quarter
  // measures as the quarter's top does, every key up to it as the quarter's bottom does). A
  // thread keeps its measure over the keys above the interval, so a step only looks closer at
  // the values inside it. Once the cluster's interval holds at most kList values (the counts say
  // how many), each block copies its values inside it into its list, and the steps after that
  // read the list (a few values a thread) instead of every value of the row.
  auto search = [&](float target, bool by_count, unsigned n_all) {
    unsigned lo = 0, n_lo = n_all, n_hi = 0, above_n = 0;
    float above_m = 0.f;
    int listed = -1;  // the values in this block's list; -1: none yet
    for (int shift = 30; shift >= 0; shift -= 2) {
      const unsigned span_m1 = shift == 30 ? 0xffffffffu : (4u << shift) - 1u;
      // Over the values that count: the mass and count over keys >= each pivot (sum[i], count[i]
      // for pivot lo + (i + 1)q), and the smallest key in each quarter.
      SamplePartial v{{above_m, above_m, above_m},
                      {above_n, above_n, above_n},
                      {0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu},
                      0u};
      // A value that counts, inside [lo, lo + 4q).
      auto inside = [&](unsigned k, float x) { return (by_count || x > 0.f) && k - lo <= span_m1; };
      auto count_in = [&](unsigned k, float x) {
        if (inside(k, x)) {
          const unsigned quarter = (k - lo) >> shift;
#pragma unroll
          for (int i = 0; i < 3; ++i)
            if (quarter > static_cast<unsigned>(i)) v.sum[i] += x, ++v.count[i];
#pragma unroll
          for (int i = 0; i < 4; ++i)
            if (quarter == static_cast<unsigned>(i)) v.min_key[i] = min(v.min_key[i], k);
        }
      };
      if (listed < 0 && n_lo - n_hi <= static_cast<unsigned>(kList)) {
        // This thread's values inside [lo, lo + 4q) go to the list from its offset: an exclusive
        // scan of the threads' counts (warp scans, then the warps' totals in order).
        int mine_n = 0;
#pragma unroll(kUnrolled ? PER : 4)
        for (int j = 0; j < PER; ++j) {
          unsigned k;
          float x;
          value(j, k, x);
          mine_n += inside(k, x) ? 1 : 0;
        }
        int incl = mine_n;
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
          const int y = __shfl_up_sync(0xffffffffu, incl, o);
          if (lane >= o) incl += y;
        }
        if (lane == 31) list_base[warp + 1] = incl;
        __syncthreads();
        if (tid == 0) {
          list_base[0] = 0;
          for (int w8 = 1; w8 <= kWarps; ++w8) list_base[w8] += list_base[w8 - 1];
        }
        __syncthreads();
        int at = list_base[warp] + incl - mine_n;
#pragma unroll(kUnrolled ? PER : 4)
        for (int j = 0; j < PER; ++j) {
          unsigned k;
          float x;
          value(j, k, x);
          if (inside(k, x)) list_key[at] = k, list_w[at] = x, ++at;
        }
        listed = list_base[kWarps];
        __syncthreads();
      }
      if (listed >= 0) {
        for (int e = tid; e < listed; e += THREADS) count_in(list_key[e], list_w[e]);
      } else {
#pragma unroll(kUnrolled ? PER : 4)
        for (int j = 0; j < PER; ++j) {
          unsigned k;
          float x;
          value(j, k, x);
          count_in(k, x);
        }
      }
      const SamplePartial mine = v;
      v = reduce(v);
      // The quarter that holds T, and with it (selected in registers: no indexed array) the
      // counts at its bottom and top, its smallest key and this thread's measure at its top.
      // Measures do not grow with the pivot (sums of the same non-negative terms and more, in
      // the same order), so the last pivot that reaches the target is the largest.
      int at = 0;
      unsigned n_at = n_lo, n_next = v.count[0], key_at = v.min_key[0];
      float mine_m = mine.sum[0];
      unsigned mine_n = mine.count[0];
#pragma unroll
      for (int i = 0; i < 3; ++i)
        if ((by_count ? static_cast<float>(v.count[i]) : v.sum[i]) >= target) {
          at = i + 1, n_at = v.count[i], key_at = v.min_key[i + 1];
          n_next = i < 2 ? v.count[i + 1] : n_hi;
          mine_m = i < 2 ? mine.sum[i + 1] : above_m;
          mine_n = i < 2 ? mine.count[i + 1] : above_n;
        }
      if (n_at - n_next == 1) return key_at;
      lo += static_cast<unsigned>(at) << shift;
      n_lo = n_at, n_hi = n_next, above_m = mine_m, above_n = mine_n;
    }
    return lo;
  };

  // top_k: every value counts (C * kSlice of them, padding included), the measure is the count.
  if (p.top_k > 1 && p.top_k < V) {
    k_min = search(static_cast<float>(p.top_k), true, C * kSlice);
#pragma unroll
    for (int j = 0; j < kHeld; ++j)
      if (key[j] < k_min) w[j] = 0.f;
  }
  if (p.min_p > 0.f) {
    w_min = fminf(p.min_p, 1.f);  // the largest weight, 1, always stays
#pragma unroll
    for (int j = 0; j < kHeld; ++j)
      if (w[j] < w_min) w[j] = 0.f;
  }
  // top_p: the values of positive weight count, the measure is their mass.
  if (p.top_p < 1.f) {
    SamplePartial t{};
#pragma unroll(kUnrolled ? PER : 4)
    for (int j = 0; j < PER; ++j) {
      unsigned k;
      float x;
      value(j, k, x);
      t.sum[0] += x, t.count[0] += x > 0.f ? 1u : 0u;
    }
    t = reduce(t);
    k_min = search(fmaxf(p.top_p * t.sum[0], 1e-38f), false, t.count[0]);
#pragma unroll
    for (int j = 0; j < kHeld; ++j)
      if (key[j] < k_min) w[j] = 0.f;
  }

  // The draw: this thread's range of the running sum, [start, end), in the fixed order; ranges
  // meet exactly (each end is the next start, the same float operations), so u falls in one.
  float own = 0.f;
#pragma unroll(kUnrolled ? PER : 4)
  for (int j = 0; j < PER; ++j) {
    unsigned k;
    float x;
    value(j, k, x);
    own += x;
  }
  float incl = own;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const float x = __shfl_up_sync(0xffffffffu, incl, o);
    if (lane >= o) incl += x;
  }
  float excl = __shfl_up_sync(0xffffffffu, incl, 1);
  if (lane == 0) excl = 0.f;
  if (lane == 31) red[warp].sum[0] = incl;
  __syncthreads();
  float warp_base = 0.f, block_total = 0.f;
  for (int k = 0; k < kWarps; ++k) {
    if (k == warp) warp_base = block_total;
    block_total += red[k].sum[0];
  }
  const float2 placed = sample_block_offset<C>(block_total, tid, rank, block_sum, res);
  const float offset = placed.x, total = placed.y;
  const unsigned long long seed = (static_cast<unsigned long long>(p.seed_hi) << 32) | p.seed_lo;
  const unsigned long long bits =
      splitmix64(seed ^ splitmix64(static_cast<unsigned long long>(p.counter)));
  float u = static_cast<float>(bits >> 40) * (1.f / 16777216.f) * total;
  u = fminf(u, __uint_as_float(__float_as_uint(total) - 1u));  // below total (total > 0)
  const float start = offset + (warp_base + excl), end = offset + (warp_base + incl);
  if (start <= u && u < end) put(sample_pick<V, THREADS, C>(start, u, base, value));
  leave();
}

}  // namespace telos_kernels
