#pragma once
// W8A8: the prefill GEMM on e4m3 activations and e4m3 weights, Hopper's e4m3 wgmma at twice the
// bf16 rate, with DeepGEMM's fine-grained scaling (docs/fp8.md). Two kernels:
//
//  - quantize_rows_e4m3: bf16 activation rows [M, K] → e4m3 rows [M, K] and f32 scales
//    [M, ceil(K / 128)], per token and 128 columns: scale = amax / 448 (1 where that is zero), each
//    element e4m3(x / scale), the IEEE f32 quotient rounded to nearest even and saturated. A row's
//    bytes depend on that row alone.
//  - gemm_prefill_w8a8_{bf16,residual,swiglu}: y = A · Wᵀ with A those e4m3 rows and W an e4m3
//    weight [N, K] with one f32 scale a 128 x 128 block (the artifact's `w:NAME.scale`). For each
//    K block kb of 128 columns, a chain of four wgmma m64n128k32 e4m3 sums the block's products
//    from zero into a second set of f32 registers (w8a8_block_mma), then each output takes
//        acc = fma(partial, sa[row][kb] · sw[nblk][kb], acc)      (w8a8_promote)
//    the scale product rounded to f32 first, acc from +0, kb in order: the reference's arithmetic
//    (executor/w8a8_reference.hpp). Promoting at every block keeps the tensor cores' limited
//    accumulation (their adder does not keep f32's 24 bits over a long chain) to 128 products.
//
// Structure: gemm_prefill.cuh's, reused: its producer (prefill_gemm_produce, one thread of
// warpgroup 0), tile order and persistent loop, stage ring, PrefillSmem and epilogues. What
// differs is the tile and the consumers' K loop (w8a8_k_loop_2deep). A stage is one K block: 128
// rows of A and 128 W rows (SwiGLU: 64 gate and their 64 up rows), 128 bytes each, both K-major
// (fp8 wgmma reads only K-major operands) with the 128B swizzle, so A and W maps are over one-byte
// elements with 128 x 128 boxes (SwiGLU's W 64 x 128). The tile is 128 x 128, each consumer
// warpgroup m64n128: its 64 accumulators a thread and two sets of 64 for partial sums fit the 232
// registers setmaxnreg gives it, where m64n256 (the bf16 GEMM's) would need 256. Six stages of 32
// KB, the 32 KB of epilogue buffers and the barriers: 230496 bytes of shared memory
// (PrefillW8a8Gemm::smem).
//
// The K loop keeps the next block's chain in flight while it promotes a block (its partials are
// read only once their chain is done), so the promotion overlaps the warpgroup's own MMAs; a stage
// goes back to the producer as soon as its chain has completed.
//
// Batch invariance: an output's bits depend on its row's e4m3 bytes and scales, the weight's and
// K alone: the wgmma sums within one row, the promotion is per element and the K blocks go in
// order, whatever tile or bucket holds the row. Against the reference the only difference is the
// order (and the tensor cores' rounding) of the sum inside each block: per output,
//     |y - y_ref| <= 2^-9 · Σ_kb |sa · sw| · Σ_k |float(qa) · float(qw)|
// (gpu_kernels_test's W8a8 tests hold the kernels to it).
//
// Ragged shapes: TMA fills rows past M or N and columns past K with zeros, so a partial K block's
// missing products are zero (its scales are the reference's, from the columns present); the
// activation scales of rows past M are read as 0 and TMA drops their outputs.
#include "gemm_prefill.cuh"

namespace telos_kernels {

// ---- activation quantization ------------------------------------------------------------------


// Phase: one row's K block kb of 128 columns by one warp, lane l columns 128 kb + 4l .. + 3 (K a
// multiple of 16: a lane's four columns are all in K or all past it). The block's amax is the
// largest magnitude by bit pattern (an exact, order-free integer maximum, redux.sync; a NaN's
// pattern lies above infinity's, so NaN makes the scale NaN and the row's outputs NaN, as the
// reference says).
// The block's four bf16 values of a lane (v: two words, the lower column in each word's low half;
// zeros past K): their e4m3 bytes (the lower column in the low byte) and, in s, the block's scale,
// every lane's the same.
__device__ __forceinline__ unsigned quantize_lane_e4m3(uint2 v, float& s) {
  const float x[4] = {__uint_as_float(v.x << 16), __uint_as_float(v.x & 0xffff0000u),
                      __uint_as_float(v.y << 16), __uint_as_float(v.y & 0xffff0000u)};
  unsigned amax = 0;
#pragma unroll
  for (unsigned i = 0; i < 4; ++i) amax = max(amax, __float_as_uint(x[i]) & 0x7fffffffu);
  amax = __reduce_max_sync(0xffffffffu, amax);
  s = __fdiv_rn(__uint_as_float(amax), 448.f);
  s = s == 0.f ? 1.f : s;
  return hexel::cvt_e4m3x2_f32(__fdiv_rn(x[0], s), __fdiv_rn(x[1], s)) |
         (hexel::cvt_e4m3x2_f32(__fdiv_rn(x[2], s), __fdiv_rn(x[3], s)) << 16);
}

template <int K>
__device__ __forceinline__ void quantize_block_e4m3(const bf16* x_row, unsigned char* q_row,
                                                    float* scale_row, unsigned kb, unsigned lane) {
  const unsigned c = kb * 128 + 4 * lane;
  const bool in_k = c < static_cast<unsigned>(K);
  uint2 v = make_uint2(0u, 0u);
  if (in_k) v = *reinterpret_cast<const uint2*>(x_row + c);
  float s;
  const unsigned q = quantize_lane_e4m3(v, s);
  if (lane == 0) scale_row[kb] = s;
  if (in_k) *reinterpret_cast<unsigned*>(q_row + c) = q;
}

// x [M, K] bf16 → q [M, K] e4m3 and scale [M, ceil(K / 128)] f32; grid ceil(M · ceil(K / 128) /
// kQuantizeWarps) blocks of 32 · kQuantizeWarps threads.
template <int M, int K>
__global__ void __launch_bounds__(32 * kQuantizeWarps)
    quantize_rows_e4m3(const bf16* x, unsigned char* q, float* scale) {
  static_assert(K % 16 == 0, "e4m3 rows of a multiple of 16 bytes (TMA)");
  pdl_entry();
  constexpr unsigned kBlocks = (K + 127) / 128;
  const unsigned unit = blockIdx.x * kQuantizeWarps + threadIdx.x / 32;
  if (unit >= static_cast<unsigned>(M) * kBlocks) return;
  const unsigned m = unit / kBlocks;
  quantize_block_e4m3<K>(x + static_cast<long long>(m) * K, q + static_cast<long long>(m) * K,
                         scale + m * kBlocks, unit % kBlocks, threadIdx.x % 32);
}

// ---- the GEMM ---------------------------------------------------------------------------------

// The epilogues of the W8A8 tile (gemm_prefill.cuh's, on PrefillW8a8Gemm::kBlockN W rows).
using EpilogueW8a8StoreBf16 = EpilogueStoreBf16Of<StoreBf16ShapeOf<PrefillW8a8Gemm::kBlockN>>;
using EpilogueW8a8SwiGlu = EpilogueSwiGluOf<SwiGluShapeOf<PrefillW8a8Gemm::kBlockN>>;
using EpilogueW8a8Residual = EpilogueResidualOf<ResidualShapeOf<PrefillW8a8Gemm::kBlockN>>;

// The MMA chain of one K block: four wgmma m64nNk32 e4m3 (PTX ISA, wgmma.mma_async, .e4m3) over
// the stage's 64 A rows at `a` and N W rows at `w` (K-major, 128B-swizzled, 128 bytes a row), into
// `part` from zero. Issued between wgmma::fence and commit_group. A_SBO: the bytes between A's
// 8-row groups (1024 dense; 0 reads the first group for every group: the small-M GEMM up to 8
// tokens, gemm_small.cuh).
template <unsigned N, unsigned A_SBO = 1024>
__device__ __forceinline__ void w8a8_block_mma(float (&part)[N / 2], unsigned a, unsigned w) {
  using namespace hexel;
  const auto ad = wgmma::SmemDesc::make(a, Swizzle::B128, 16, A_SBO);
  const auto wd = wgmma::kmajor_desc(w, Swizzle::B128);
#pragma unroll
  for (unsigned kk = 0; kk < PrefillW8a8Gemm::kBlockK / 32; ++kk)
    wgmma::mma_ss<N, wgmma::AbType::E4M3>(part, ad.advanced(32 * kk), wd.advanced(32 * kk), kk > 0);
}

// The scale products of K block kb (K_BLOCKS of them a row) for a thread's accumulators: s[h][g]
// = sa · sw, sa the activation scale of row `row` + 8h (0 past M), sw the weight scale of block row
// wb[g] (G = 2 for SwiGLU: the gate's, then the up rows'; else 1).
template <int M, unsigned K_BLOCKS, unsigned G>
__device__ __forceinline__ void w8a8_scales(float (&s)[2][G], const float* a_scale,
                                            const float* w_scale, unsigned row,
                                            const unsigned (&wb)[G], unsigned kb) {
#pragma unroll
  for (unsigned h = 0; h < 2; ++h) {
    const unsigned r = row + 8 * h;
    const float sa = r < static_cast<unsigned>(M) ? __ldg(a_scale + r * K_BLOCKS + kb) : 0.f;
#pragma unroll
    for (unsigned g = 0; g < G; ++g)
      s[h][g] = __fmul_rn(sa, __ldg(w_scale + wb[g] * K_BLOCKS + kb));
  }
}

// The promotion of one K block: acc = fma(part, s, acc) for each accumulator (m64nN layout:
// d[4j + 2h + e] is row half h, column block j; the column blocks of scale group g are the g-th
// G-th of them).
template <unsigned N, unsigned G>
__device__ __forceinline__ void w8a8_promote(float (&acc)[N / 2], const float (&part)[N / 2],
                                             const float (&s)[2][G]) {
#pragma unroll
  for (unsigned j = 0; j < N / 8; ++j)
#pragma unroll
    for (unsigned h = 0; h < 2; ++h)
#pragma unroll
      for (unsigned e = 0; e < 2; ++e) {
        const unsigned i = 4 * j + 2 * h + e;
        acc[i] = __fmaf_rn(part[i], s[h][j * G / (N / 8)], acc[i]);
      }
}

// One tile's K loop for a consumer warpgroup: for each K block, its scale products (loaded before
// the stage's wait, so the loads overlap it and the chain), the stage's wait, the chain into
// `part`, the wait for it, the stage's release (the warp's lane 0) and the promotion into `acc`,
// which starts at +0, over K_BLOCKS blocks. row: the thread's first row (w8a8_scales); wb: its
// weight scale block rows; A_SBO: w8a8_block_mma's.
template <int M, unsigned K_BLOCKS, unsigned N, unsigned A_SBO = 1024, unsigned G, unsigned STAGES,
          class AStage, class WStage>
__device__ __forceinline__ void w8a8_k_loop(float (&acc)[N / 2],
                                            hexel::mbarrier::StageRing<STAGES>& ring, unsigned full,
                                            unsigned empty, unsigned lane, const float* a_scale,
                                            const float* w_scale, unsigned row,
                                            const unsigned (&wb)[G], AStage a_stage,
                                            WStage w_stage) {
  using namespace hexel;
  float part[N / 2];
#pragma unroll
  for (unsigned i = 0; i < N / 2; ++i) acc[i] = 0.f;
  for (unsigned kb = 0; kb < K_BLOCKS; ++kb) {
    float s[2][G];
    w8a8_scales<M, K_BLOCKS, G>(s, a_scale, w_scale, row, wb, kb);
    mbarrier::wait_parity(full + 8 * ring.index, ring.phase);
    wgmma::fence();
    w8a8_block_mma<N, A_SBO>(part, a_stage(ring.index), w_stage(ring.index));
    wgmma::commit_group();
    wgmma::wait_group<0>();
    wgmma::fence_operand(part);
    if (lane == 0) mbarrier::arrive(empty + 8 * ring.index);
    w8a8_promote<N, G>(acc, part, s);
    wgmma::fence_operand(part);  // the promotion reads part before the next chain writes it
    ring.advance();
  }
}

// The K loop two chains deep, for the prefill GEMM: block kb + 1's chain is issued into a second
// partial set before block kb's is waited for, so the tensor cores run it while this warpgroup
// promotes kb (wgmma.wait_group 1 leaves one chain pending). The same chains, promotions and
// order as w8a8_k_loop: the same bits. ptxas keeps a wait at one pending group only where no
// chain is pending across a loop's back edge (else it serializes every wgmma: advisory C7514),
// so the blocks go in runs of kW8a8Run, each run unrolled and ending with nothing pending; a run's
// last promotion overlaps the other warpgroup's chains only.
enum : unsigned { kW8a8Run = 8 };  // an enumerator: NVRTC emits a constexpr variable as a global

// A run of COUNT blocks from kb for w8a8_k_loop_2deep, block kb's chain already issued into p0:
// each block's step issues the next block's chain into the other partial set (the run's last step
// issues none), waits for its own chain and retires it, so nothing is pending at the run's end (the
// conditions fold once unrolled). issue(p, s, kb) issues block kb's chain into p (its scale
// products into s); retire(p, s) releases and promotes the oldest chain.
template <unsigned COUNT, unsigned R, unsigned G, class Issue, class Retire>
__device__ __forceinline__ void w8a8_run(unsigned kb, float (&p0)[R], float (&p1)[R],
                                         float (&s0)[2][G], float (&s1)[2][G], Issue& issue,
                                         Retire& retire) {
  auto step = [&](float(&p)[R], float(&s)[2][G], float(&next_p)[R], float(&next_s)[2][G],
                  unsigned j) {
    if (j + 1 < COUNT) {
      issue(next_p, next_s, kb + j + 1);
      hexel::wgmma::wait_group<1>();
    } else {
      hexel::wgmma::wait_group<0>();
    }
    retire(p, s);
  };
#pragma unroll
  for (unsigned j = 0; j < COUNT; ++j) {
    if (j % 2 == 0)
      step(p0, s0, p1, s1, j);
    else
      step(p1, s1, p0, s0, j);
  }
}

template <int M, unsigned K_BLOCKS, unsigned N, unsigned G, unsigned STAGES, class AStage,
          class WStage>
__device__ __forceinline__ void w8a8_k_loop_2deep(float (&acc)[N / 2],
                                                  hexel::mbarrier::StageRing<STAGES>& ring,
                                                  unsigned full, unsigned empty, unsigned lane,
                                                  const float* a_scale, const float* w_scale,
                                                  unsigned row, const unsigned (&wb)[G],
                                                  AStage a_stage, WStage w_stage) {
  using namespace hexel;
  float p0[N / 2], p1[N / 2], s0[2][G], s1[2][G];
#pragma unroll
  for (unsigned i = 0; i < N / 2; ++i) acc[i] = 0.f;
  // Block kb's scale products into s (loaded before the stage's wait), then its chain into p.
  auto issue = [&](float(&p)[N / 2], float(&s)[2][G], unsigned kb) {
    w8a8_scales<M, K_BLOCKS, G>(s, a_scale, w_scale, row, wb, kb);
    mbarrier::wait_parity(full + 8 * ring.index, ring.phase);
    wgmma::fence();
    w8a8_block_mma<N>(p, a_stage(ring.index), w_stage(ring.index));
    wgmma::commit_group();
    ring.advance();
  };
  // The oldest chain, waited for by the caller: its stage back to the producer, its promotion.
  mbarrier::StageRing<STAGES> done = ring;  // the oldest chain's stage
  auto retire = [&](float(&p)[N / 2], const float(&s)[2][G]) {
    wgmma::fence_operand(p);
    if (lane == 0) mbarrier::arrive(empty + 8 * done.index);
    done.advance();
    w8a8_promote<N, G>(acc, p, s);
    wgmma::fence_operand(p);  // the promotion reads p before the next chain into it
  };
  unsigned kb = 0;
  for (; kb + kW8a8Run <= K_BLOCKS; kb += kW8a8Run) {
    issue(p0, s0, kb);
    w8a8_run<kW8a8Run>(kb, p0, p1, s0, s1, issue, retire);
  }
  if constexpr (K_BLOCKS % kW8a8Run != 0) {
    issue(p0, s0, kb);
    w8a8_run<K_BLOCKS % kW8a8Run>(kb, p0, p1, s0, s1, issue, retire);
  }
}

// The weight scale block rows of weight tile tn's rows (OUT_COLS output columns a tile): one
// block, or SwiGLU's (SPLIT) gate rows tn · OUT_COLS.. and their up rows N + tn · OUT_COLS.. (each
// inside one block: OUT_COLS divides 128 and N, the callers' static_asserts).
template <int N, unsigned OUT_COLS, bool SPLIT>
__device__ __forceinline__ void w8a8_weight_blocks(unsigned (&wb)[SPLIT ? 2 : 1], unsigned tn) {
  wb[0] = tn * OUT_COLS / 128;
  if constexpr (SPLIT) wb[1] = (N + tn * OUT_COLS) / 128;
}

// The whole kernel (prefill_gemm_body's roles): warpgroup 0's thread 0 loads the stages,
// warpgroups 1 and 2 each take 64 rows of every tile, run the K loop and the epilogue through
// `out_map`. N: the output columns (SwiGLU: I, the weight [2I, K]).
template <int M, int N, int K, class Epi>
__device__ __forceinline__ void prefill_w8a8_body(const TensorMap* a_map, const float* a_scale,
                                                  const TensorMap* w_map, const float* w_scale,
                                                  const TensorMap* out_map) {
  using G = PrefillW8a8Gemm;
  using T = PrefillW8a8Tiling<M, N, K, Epi>;
  using namespace hexel;
  constexpr unsigned kScaleGroups = Epi::kSplitW ? 2 : 1;
  extern __shared__ unsigned char smem_raw[];
  const PrefillSmem<T> sm(smem_raw);
  auto a_stage = [&](unsigned s) { return sm.a(s); };
  auto w_stage = [&](unsigned s) { return sm.w(s); };
  const unsigned wg = warp_index() / 4;

  if (threadIdx.x == 0) {
    prefill_init_stages(sm, a_map, w_map, PrefillGemm::kConsumers * 4);  // one arrival a warp
    mbarrier::fence_init();
  }
  __syncthreads();

  if (wg == 0) {
    setmaxnreg_dec<40>();
    if (threadIdx.x == 0)
      prefill_gemm_produce<T, N, Epi, 0, 0>(a_map, w_map, sm.full, sm.empty, a_stage, w_stage);
  } else {
    setmaxnreg_inc<232>();
    const unsigned cw = wg - 1;  // consumer index: rows 64 cw .. 64 cw + 63 of the tile
    const unsigned warp = warp_index() % 4;
    const unsigned lane = threadIdx.x % 32;
    const bool wg_leader = threadIdx.x % 128 == 0;
    if (wg_leader) {
      tma::acquire_map(out_map);
      tma::prefetch_map(out_map);
    }
    mbarrier::StageRing<T::kStages> ring;
    float acc[G::kBlockN / 2];
    for (unsigned u = blockIdx.x; u < T::kUnits; u += gridDim.x) {
      unsigned tm, tn;
      prefill_tile_coords(u, T::kTilesM, T::kTilesN, tm, tn);
      const unsigned row = tm * G::kBlockM + cw * 64 + 16 * warp + lane / 4;
      unsigned wb[kScaleGroups];
      w8a8_weight_blocks<N, Epi::kOutCols, Epi::kSplitW>(wb, tn);
      w8a8_k_loop_2deep<M, T::kKBlocks, G::kBlockN>(
          acc, ring, sm.full, sm.empty, lane, a_scale, w_scale, row, wb,
          [&](unsigned st) { return a_stage(st) + cw * 64 * 128; }, w_stage);
      prefill_gemm_epilogue<Epi>(acc, out_map, sm.epilogue, tm, tn, cw, warp, lane, wg_leader);
    }
    if (wg_leader) tma::wait_group<0>();
  }
}

// y[m, n] = bf16((A · Wᵀ)[m, n]); A through a 128 x 128-box map of its e4m3 rows [M, K] with its
// scales a_scale [M, ceil(K / 128)] (quantize_rows_e4m3), W through a 128 x 128-box map of the
// e4m3 weight [N, K] with its 128 x 128 block scales w_scale; y through a 64 x 64-box map of
// [M, N].
template <int M, int N, int K>
__global__ void __launch_bounds__(PrefillGemm::kThreads, 1)
    gemm_prefill_w8a8_bf16(const TensorMap* a_map, const float* a_scale, const TensorMap* w_map,
                           const float* w_scale, const TensorMap* y_map) {
  pdl_entry();
  prefill_w8a8_body<M, N, K, EpilogueW8a8StoreBf16>(a_map, a_scale, w_map, w_scale, y_map);
}

// x[m, n] += (A · Wᵀ)[m, n], x the f32 residual stream [M, N] through an f32 map with 64 x 32
// boxes.
template <int M, int N, int K>
__global__ void __launch_bounds__(PrefillGemm::kThreads, 1)
    gemm_prefill_w8a8_residual(const TensorMap* a_map, const float* a_scale, const TensorMap* w_map,
                               const float* w_scale, const TensorMap* x_map) {
  pdl_entry();
  prefill_w8a8_body<M, N, K, EpilogueW8a8Residual>(a_map, a_scale, w_map, w_scale, x_map);
}

// act[m, j] = bf16(silu(g) · u), g = (A · Wᵀ)[m, j], u = (A · Wᵀ)[m, I + j], W = gate_up [2I, K]
// through a map with 64 x 128 boxes, act through a 64 x 64-box map of [M, I].
template <int M, int I, int K>
__global__ void __launch_bounds__(PrefillGemm::kThreads, 1)
    gemm_prefill_w8a8_swiglu(const TensorMap* a_map, const float* a_scale, const TensorMap* w_map,
                             const float* w_scale, const TensorMap* act_map) {
  pdl_entry();
  prefill_w8a8_body<M, I, K, EpilogueW8a8SwiGlu>(a_map, a_scale, w_map, w_scale, act_map);
}

}  // namespace telos_kernels
