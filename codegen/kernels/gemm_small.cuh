#pragma once
// The small-M GEMM: y = A · Wᵀ for buckets below the prefill GEMM's (decode, short prefill), on
// the same instructions as the prefill GEMM (gemm_prefill.cuh) so that a token's row is the same
// bits in every bucket (batch invariance). Every output element is one wgmma
// m64nNk16 chain over K in 64-element blocks, 16 at a time, in order, accumulating in f32 from
// zero, and the epilogues are the prefill GEMM's arithmetic: the per-element result of wgmma
// depends on the row of A and the column of B only, not on the instruction's N or on which
// 64-row slab of the M tile holds the row (gpu_kernels_test checks this bit for bit).
//
// Shape: the tokens are the A operand, 64 rows per CTA (the M tile of one consumer warpgroup).
// Below one M tile of tokens (64 rows; 128 with WG = 2) the A box has only the bucket's T rows
// (the map's box, codegen): the TMA moves T rows per stage instead of the tile's. Up to 8 tokens,
// a stage's A is a single 8-row group (1 KB) and the wgmma descriptor's group stride is 0, so the
// instruction's 64 rows are that group eight times over: rows 8..63 of the result repeat rows
// 0..7 and are not stored. Rows T.. of the group or of the tile's A stage are never written:
// wgmma reads whatever shared memory holds there (NaN included) into result rows T.., which are
// not stored either, since row r of the result depends on row r of A only. (Zeroing them would
// cost the consumers a pass of shared-memory stores before their first wgmma.) Above
// one M tile the map's rows end at T and TMA zero-fills the last tile's rows past T.
// Warp roles: warps 0-3 are the consumer warpgroup (wgmma needs a warpgroup aligned to 4 warps),
// warp 4's first lane the TMA producer. Registers are few (BN / 2 accumulators), so no setmaxnreg.
// With WG = 2 (the _cl kernels' last argument; more than 64 tokens, no norm prologue) the M tile is
// 128 rows: warps 0-3 and 4-7 are two consumer warpgroups, each on 64 rows of the stage's A (its
// own 8 KB half) against the same weight box, and warp 8's first lane the producer; a stage is
// released when all eight consumer warps have read it. Each row's chain is the one above: the same
// bits.
//
// Programmatic dependent launch: the producer fills the first stages' weight boxes before
// griddepcontrol.wait (weights and tensor maps are never written by a kernel), so under PDL the
// weight stream starts while the previous kernel finishes; the activation boxes, and every other
// thread, wait for it.
//
// blockIdx.x is the M tile, blockIdx.y the weight tile: the CTAs that read the same weight tile
// run side by side and share it in L2.
//
// Weight multicast (CL > 1, the gemm_small_*_cl kernels; two or more M tiles, no norm prologue):
// the CL CTAs of a cluster are CL consecutive M tiles of one weight tile; each loads 1/CL of every
// weight stage (BN / CL rows; SwiGLU: a gate and an up slice) and TMA multicasts it into all CL
// CTAs' stages, so the weight tile crosses L2 → SM once per cluster instead of once per M tile. A
// CTA's stage is full when its own A and all CL slices have landed; a slot is refilled only after
// the consumers of all CL CTAs have released it (each consumer warp arrives on the empty barrier
// of every CTA of the cluster). Loads only: every element's wgmma chain, hence every bit, is the
// same at any CL.
//
// Norm prologue (NORM, up to 8 tokens): A is RMSNorm(x) computed by the kernel itself instead of
// a separate rmsnorm launch writing h: the consumer warpgroup normalizes x's rows with the
// rmsnorm kernel's arithmetic (norm.cuh: the same 128-thread partition and reduction, so A has the
// bits h would have had) straight into a resident A region of the whole K, and the stages carry
// weights only (small_gemm_norm_prologue; gemm_small_sm100.cuh's norm forms run the same code).
// That region is the interleaved (unswizzled) layout of norm_rows.cuh, the M rows of each 8-element
// K chunk packed together, read with group stride 0: A takes K · M · 2 bytes (8 KB at M = 1,
// K = 4096) instead of K · 16. The producer never waits for the previous kernel: every load it
// issues is a weight.
#include "gemm_e4m3.cuh"
#include "gemm_prefill.cuh"
#include "gemm_w8a8.cuh"
#include "hexel/ld_st.cuh"
#include "hexel/memory_order.cuh"
#include "norm.cuh"
#include "norm_rows.cuh"

namespace telos_kernels {

// A block: WG consumer warpgroups and the producer's warp (WG = 2: the _cl kernels' option).
__host__ __device__ constexpr unsigned small_gemm_threads(unsigned wg) { return 128 * wg + 32; }

struct SmallGemm {
  static constexpr unsigned kBlockM = 64;
  static constexpr unsigned kBlockK = PrefillGemm::kBlockK;
  static constexpr unsigned kThreads = small_gemm_threads(1);
  // The e4m3 forms (gemm_e4m3.cuh): four converter warps after the producer's. Enumerators, which
  // NVRTC does not emit as globals of the module (gemm_prefill_shape.cuh).
  enum : unsigned { kConverters = 128, kE4m3Threads = small_gemm_threads(1) + kConverters };
};
// Dynamic shared memory (codegen: SmallGemmTiling::smem): STAGES stages of (8 or 64) + BN rows of
// 64 bf16, full[] and empty[] barriers, +1024 to align the base to the 128B swizzle repeat.

// Epilogue kinds; the arithmetic of each is its prefill counterpart's (EpilogueStoreBf16,
// EpilogueResidual, EpilogueSwiGlu). F32Cand (the LM head; no prefill counterpart): the f32
// results, and per row the greedy candidate of the tile's BN columns (the first stage of greedy
// sampling, common.cuh's greedy_candidate: the largest and, among equals, the lowest index).
enum class SmallEpi { StoreBf16, Residual, SwiGlu, F32Cand };

// A resident in shared memory at `base` in the interleaved layout (norm_rows.cuh): chunk c (eight
// bf16) of row r at 16 (c M + r). Unordered stores: the caller's global loads for later chunks may
// move above them (they do not alias), so their L2 round trips overlap; a_finish's fence and
// barrier are ordered after every store.
template <int M>
__device__ __forceinline__ void a_store_chunk(unsigned base, unsigned c, int r, uint4 v) {
  hexel::st_shared_v4_unordered(base + NormRows<M>::chunk_offset(c, r), v.x, v.y, v.z, v.w);
}
// After the last of `chunks` chunks, by the 128 consumer threads (t): the 128-byte zero tail the
// last core matrix's rows past M read, then the fence for wgmma and the meeting.
template <int M>
__device__ __forceinline__ void a_finish(unsigned base, unsigned chunks, unsigned t) {
  if (t < 8) a_store_chunk<1>(base, chunks * M + t, 0, make_uint4(0u, 0u, 0u, 0u));
  hexel::fence_proxy_async_smem();  // generic-proxy stores, then wgmma (async proxy) reads them
  hexel::named_barrier_sync(1, 128);
}

// RMSNorm of x's M rows [M, K] (f32) into A resident in shared memory at `base`, in the interleaved
// wgmma layout (chunk c of row r at 16 (c M + r)), with the rmsnorm kernel's arithmetic (norm.cuh),
// by the 128 consumer threads (t, its warp and lane): pass 1, every row's sum of squares (no barrier
// between rows, so their loads overlap) into scratch[4 M]; pass 2, chunks 0 .. CHUNKS - 1 of every
// row (zeros past K), then the 128-byte zero tail the last core matrix's rows past M read; the fence
// for wgmma and the meeting. w8: this thread's norm weights (rms_load_w). L2_ONLY: x read past L1.
template <int M, int K, float EPS, unsigned CHUNKS, bool L2_ONLY, class Warp>
__device__ __forceinline__ void rms_rows_interleaved(unsigned base, const float* x, const float (&w8)[kNormChunks<K>][8],
                                                     float* scratch, int t, Warp warp, Warp lane) {
  using namespace hexel;
#pragma unroll
  for (int r = 0; r < M; ++r) {
    const float ss = rms_partial<K, L2_ONLY>(x + static_cast<long long>(r) * K, t);
    if (lane == 0) scratch[4 * r + warp] = ss;
  }
  named_barrier_sync(1, 128);
#pragma unroll
  for (int r = 0; r < M; ++r) {
    const float* row = x + static_cast<long long>(r) * K;
    const float sums[4] = {scratch[4 * r], scratch[4 * r + 1], scratch[4 * r + 2], scratch[4 * r + 3]};
    const float inv = rms_inv<K, EPS>(sums);
#pragma unroll
    for (int k = 0; k < kNormChunks<K>; ++k) {
      const int c = t + k * kNormThreads;
      if (c < static_cast<int>(CHUNKS)) a_store_chunk<M>(base, c, r, rms_apply8<K, L2_ONLY>(row, c, inv, w8[k]));
    }
  }
  a_finish<M>(base, CHUNKS, t);
}

// The norm prologue of a small GEMM (up to 8 tokens), by the 128 threads t that normalize (warps
// 0-3): the norm's weights before griddepcontrol.wait (no kernel writes them), x after it, then
// RMSNorm of x's M rows into the resident rows at `base` (norm_rows.cuh: CHUNKS chunks a row, zeros
// past K), with the rmsnorm kernel's arithmetic, so they hold the bits rmsnorm would write into h.
// `scratch`: 4 M floats of shared memory for the warp sums; `warp`, `lane`: t's (the caller's own
// values: how it computes them is part of its code). Ends with the fence for the async proxy and
// the 128 threads' meeting (a_finish).
template <int M, int K, float EPS, unsigned CHUNKS>
__device__ __forceinline__ void small_gemm_norm_prologue(unsigned base, const float* x,
                                                         const float* norm_w, float* scratch, int t,
                                                         unsigned warp, unsigned lane) {
  float w8[kNormChunks<K>][8];
  rms_load_w<K>(norm_w, t, w8);
  hexel::grid_dependency_wait();
  rms_rows_interleaved<M, K, EPS, CHUNKS, false>(base, x, w8, scratch, t, warp, lane);
}

// A word of act not yet written (decode_layer_persistent marks act so and its down phase polls:
// persistent_poll_a): two bf16 NaNs with the sign and every payload bit set. small_gemm_store
// writes 0x7FFF7FFF, NaNs too, where SwiGLU would give it.
constexpr unsigned kActPending = 0xffffffffu;

// The epilogue of one accumulator pair of a small-M GEMM tile: d[4j + 2h], d[4j + 2h + 1] (with
// SwiGLU their up halves kUp further) into columns n, n + 1 of row m of `out`, at = m · N + n, with
// the prefill epilogues' arithmetic; the residual is added in L2 by a reduction, never read here.
// L2_ONLY (a persistent kernel whose other CTAs read or wrote the output in the same launch) writes
// SwiGLU's act with gpu-scope relaxed stores (decode_layer_persistent's down phase polls them:
// persistent_poll_a).
template <SmallEpi EPI, unsigned BN, bool L2_ONLY = false>
__device__ __forceinline__ void small_gemm_store(const float (&d)[BN / 2], unsigned h, unsigned j, void* out,
                                                 long long at) {
  if constexpr (EPI == SmallEpi::Residual) {
    // The add in L2 (hexel/memory_order.cuh: the TMA f32 reduction's arithmetic), past L1 as
    // L2_ONLY needs: no read of x to wait for at the end of the kernel or of a persistent layer's
    // phase, where a load meets the next launch's weight stream (docs/performance.md).
    hexel::red_add_relaxed_gpu(static_cast<float*>(out) + at, d[4 * j + 2 * h],
                               d[4 * j + 2 * h + 1]);
  } else if constexpr (EPI == SmallEpi::SwiGlu) {
    constexpr unsigned kUp = 4 * (BN / 2 / 8);
    unsigned* p = reinterpret_cast<unsigned*>(static_cast<bf16*>(out) + at);
    const unsigned v = pack_bf16x2(EpilogueSwiGlu::act(d[4 * j + 2 * h], d[kUp + 4 * j + 2 * h]),
                                   EpilogueSwiGlu::act(d[4 * j + 2 * h + 1], d[kUp + 4 * j + 2 * h + 1]));
    if constexpr (L2_ONLY)
      hexel::st_relaxed_gpu(p, v == kActPending ? 0x7fff7fffu : v);
    else
      *p = v;
  } else if constexpr (EPI == SmallEpi::F32Cand) {
    *reinterpret_cast<float2*>(static_cast<float*>(out) + at) =
        make_float2(d[4 * j + 2 * h], d[4 * j + 2 * h + 1]);
  } else {
    *reinterpret_cast<unsigned*>(static_cast<bf16*>(out) + at) = pack_bf16x2(d[4 * j + 2 * h], d[4 * j + 2 * h + 1]);
  }
}

// The greedy candidate of a tile row (F32Cand): the largest of its BN values (h: the accumulator
// row half, tn the weight tile), each lane's 2 BN / 8, then its quad's (the four lanes holding the
// row). Every lane takes part in the shuffles.
template <unsigned BN>
__device__ __forceinline__ unsigned long long small_gemm_candidate(const float (&d)[BN / 2],
                                                                   unsigned h, unsigned tn,
                                                                   unsigned lane) {
  unsigned long long best = 0;
#pragma unroll
  for (unsigned j = 0; j < BN / 8; ++j)
#pragma unroll
    for (unsigned e = 0; e < 2; ++e) {
      const unsigned long long c =
          greedy_candidate(d[4 * j + 2 * h + e], tn * BN + 8 * j + 2 * (lane % 4) + e);
      best = c > best ? c : best;
    }
#pragma unroll
  for (unsigned o = 1; o < 4; o <<= 1) {
    const unsigned long long c = __shfl_xor_sync(0xffffffffu, best, o);
    best = c > best ? c : best;
  }
  return best;
}

// A consumer thread's epilogue of a small-M GEMM tile (M tile tm, weight tile tn; the thread's
// warpgroup wg, warp and lane): its accumulators d[4j + 2h + e], row 16 warp + lane / 4 + 8h,
// column 8j + 2 (lane % 4) + e of its 64 rows of the tile, into `out` (rows past M and columns
// past N store nothing), and with F32Cand each row's candidate into cand.
template <int M, int N, int BN, SmallEpi EPI, int WG>
__device__ __forceinline__ void small_gemm_epilogue(const float (&d)[BN / 2], unsigned tm,
                                                    unsigned tn, unsigned wg, unsigned warp,
                                                    unsigned lane, void* out,
                                                    unsigned long long* cand) {
  constexpr unsigned kTileM = SmallGemm::kBlockM * WG;
  constexpr unsigned kOutCols = EPI == SmallEpi::SwiGlu ? BN / 2 : BN;
#pragma unroll
  for (unsigned h = 0; h < 2; ++h) {
    const unsigned m = tm * kTileM + wg * SmallGemm::kBlockM + 16 * warp + lane / 4 + 8 * h;
    if constexpr (EPI == SmallEpi::F32Cand) {
      const unsigned long long best = small_gemm_candidate<BN>(d, h, tn, lane);
      if (m < static_cast<unsigned>(M) && cand != nullptr && lane % 4 == 0)
        cand[static_cast<long long>(m) * (N / BN) + tn] = best;
    }
    if (m >= static_cast<unsigned>(M)) continue;
#pragma unroll
    for (unsigned j = 0; j < kOutCols / 8; ++j) {
      const unsigned n = tn * kOutCols + 8 * j + 2 * (lane % 4);
      if (n >= static_cast<unsigned>(N)) continue;
      small_gemm_store<EPI, BN>(d, h, j, out, static_cast<long long>(m) * N + n);
    }
  }
}

// The producer of a small-M GEMM CTA (M tile tm, weight tile tn, cluster rank `rank`; one
// thread): every K block's weight rows (with CL > 1 this CTA's slice, multicast to the cluster) and
// activations into the ring of STAGES stages (a_stage, w_stage: their shared addresses) behind the
// full / empty barriers. The first pass over the ring: weights before griddepcontrol.wait,
// activations after it (the weights and tensor maps are never written by a kernel). Each stage
// expects its A and W bytes (out-of-bounds box elements count too). An e4m3 weight (WF,
// gemm_e4m3.cuh) goes to the stage's raw area (w_stage gives it) behind its own barrier (w_full:
// the raw barriers; full otherwise), rows of 64 bytes. W8A8 (WF = W8a8Operands): e4m3 rows of A
// and W, a K block of 128 columns (a row's 128 bytes, as a bf16 block's 64 columns are).
template <int M, int N, int K, int BN, int STAGES, SmallEpi EPI, bool NORM, int CL, int WG, int KPS,
          unsigned W_BH, unsigned W_BOX, class WF, class AStage, class WStage>
__device__ __forceinline__ void small_gemm_produce(const TensorMap* a_map, const TensorMap* w_map,
                                                   unsigned full, unsigned w_full, unsigned empty,
                                                   unsigned tm, unsigned tn, unsigned rank,
                                                   AStage& a_stage, WStage& w_stage) {
  using G = SmallGemm;
  using namespace hexel;
  constexpr unsigned kTileM = G::kBlockM * WG;
  constexpr bool kSplitW = EPI == SmallEpi::SwiGlu;
  constexpr unsigned kOutCols = kSplitW ? BN / 2 : BN;
  constexpr unsigned kSliceRows = kOutCols / CL;
  constexpr unsigned kWRowBytes = WF::kE4m3 ? WF::kRawRowBytes : 128;
  constexpr unsigned kWBytes = BN * kWRowBytes;
  constexpr unsigned kARows = M < static_cast<int>(kTileM) ? M : kTileM;
  constexpr unsigned kKbCols = WF::kW8a8 ? PrefillW8a8Gemm::kBlockK : G::kBlockK;
  constexpr unsigned k_blocks = (K + kKbCols - 1) / kKbCols;
  constexpr unsigned kTxBytes = (NORM ? 0 : kARows * 128) + (WF::kE4m3 ? 0 : kWBytes);
  mbarrier::StageRing<STAGES> ring;
  // Each stage's expected bytes: A and W, or with an e4m3 weight A (full) and W (w_full).
  auto expect = [&](unsigned stage) {
    mbarrier::arrive_expect_tx(full + 8 * stage, KPS * kTxBytes);
    if constexpr (WF::kE4m3) mbarrier::arrive_expect_tx(w_full + 8 * stage, KPS * kWBytes);
  };
  // Slot s (stage s / KPS), K block kb.
  auto load_w = [&](unsigned s, unsigned kb) {
    const unsigned bar = w_full + 8 * (s / KPS);
    if constexpr (CL > 1) {
      constexpr uint16_t kAll = (1u << CL) - 1u;
      const unsigned at = rank * kSliceRows;
      load_weight_rows<kSliceRows, W_BH, W_BOX, true>(w_stage(s) + at * kWRowBytes, w_map, bar, kb,
                                                      tn * kOutCols + at, 0, N, kAll);
      if constexpr (kSplitW)
        load_weight_rows<kSliceRows, W_BH, W_BOX, true>(w_stage(s) + (kOutCols + at) * kWRowBytes,
                                                        w_map, bar, kb, tn * kOutCols + at, 1, N,
                                                        kAll);
    } else if constexpr (kSplitW) {
      load_weight_rows<kOutCols, W_BH, W_BOX, false, kKbCols>(w_stage(s), w_map, bar, kb,
                                                              tn * kOutCols, 0, N);
      load_weight_rows<kOutCols, W_BH, W_BOX, false, kKbCols>(w_stage(s) + kOutCols * kWRowBytes,
                                                              w_map, bar, kb, tn * kOutCols, 1, N);
    } else {
      load_weight_rows<BN, W_BH, W_BOX, false, kKbCols>(w_stage(s), w_map, bar, kb, tn * BN, 0, N);
    }
  };
  auto load_a = [&](unsigned s, unsigned kb) {
    if constexpr (!NORM)
      tma::load(a_stage(s), a_map, full + 8 * (s / KPS), kb * kKbCols, tm * kTileM);
  };
  // The first pass over the ring: weights before the wait, activations after it. Each stage
  // expects its A and W bytes (out-of-bounds box elements count too).
  // (With KPS > 1, K blocks and slots pair up as stage · KPS + j.)
  constexpr unsigned kStagesK = k_blocks / KPS;
  constexpr unsigned kFirst = STAGES < kStagesK ? STAGES : kStagesK;
  for (unsigned ks = 0; ks < kFirst; ++ks) {
    expect(ks);
    for (unsigned j = 0; j < KPS; ++j) load_w(ks * KPS + j, ks * KPS + j);
  }
  if constexpr (!NORM) {
    grid_dependency_wait();
    for (unsigned kb = 0; kb < kFirst * KPS; ++kb) load_a(kb, kb);
  }
  for (unsigned ks = 0; ks < kFirst; ++ks) ring.advance();
  for (unsigned ks = kFirst; ks < kStagesK; ++ks) {
    mbarrier::wait_parity(empty + 8 * ring.index, ring.phase ^ 1u);
    expect(ring.index);
    for (unsigned j = 0; j < KPS; ++j) {
      load_a(ring.index * KPS + j, ks * KPS + j);
      load_w(ring.index * KPS + j, ks * KPS + j);
    }
    ring.advance();
  }
}

// BN weight rows per tile (for SwiGLU: BN / 2 gate rows then their BN / 2 up rows); N output
// columns (SwiGLU: I, with W [2I, K]). `out` is bf16 [M, N] (StoreBf16, SwiGlu), the f32
// residual stream x [M, N] (Residual) or f32 [M, N] (F32Cand, with the candidates in cand [M, N /
// BN] where cand is not null). A is a_map's [M, K] bf16 rows, or with NORM the rows of RMSNorm(x)
// with weights norm_w (x f32 [M, K]; a_map unused). W_BH, W_BOX: where the weight rows come from,
// the weight's 2D map or its slot image's (load_weight_rows, gemm_prefill.cuh); every kernel below
// takes them last. WF: the weight's format (gemm_e4m3.cuh); an e4m3 weight (its 2D map, one M tile
// of one warpgroup, no cluster, one K block a stage; with or without the norm prologue) has its
// scales at w_scale and a CTA of SmallGemm::kE4m3Threads: the converter warps follow the
// producer's. WF = W8a8Operands (gemm_small_w8a8.cuh; one warpgroup, A by TMA from the weight's 2D
// map, no cluster, one K block a stage): A is a_map's e4m3 rows with their scales a_scale [M,
// ceil(K / 128)], W e4m3 with its 128 x 128 block scales w_scale, and the K loop is the W8A8
// prefill GEMM's (w8a8_k_loop, gemm_w8a8.cuh).
template <int M, int N, int K, int BN, int STAGES, SmallEpi EPI, bool NORM = false, float EPS = 0.f,
          int CL = 1, int WG = 1, int KPS = 1, unsigned W_BH = 0, unsigned W_BOX = 0,
          class WF = Bf16Weight>
__device__ __forceinline__ void small_gemm_body(const TensorMap* a_map, const float* x,
                                                const float* norm_w, const TensorMap* w_map,
                                                void* out, unsigned long long* cand = nullptr,
                                                const float* w_scale = nullptr,
                                                const float* a_scale = nullptr) {
  using G = SmallGemm;
  using namespace hexel;
  static_assert(M > 0 && N % 8 == 0 && K % 8 == 0, "TMA rows are multiples of 16 bytes");
  static_assert(BN % 16 == 0 && BN >= 16 && BN <= 256, "wgmma N, and whole 8-column blocks per half");
  static_assert(STAGES >= 2, "one stage computes while the next loads");
  static_assert(!NORM || M <= 8, "the norm prologue keeps one 8-row group of A for the whole K");
  static_assert(EPI != SmallEpi::F32Cand || N % BN == 0, "the candidates are per whole tile");
  static_assert(WG == 1 || (WG == 2 && !NORM && M > static_cast<int>(G::kBlockM)),
                "two consumer warpgroups: 128-row M tiles of more than 64 tokens, A from TMA");
  constexpr unsigned kTileM = G::kBlockM * WG;  // rows of A a CTA
  constexpr bool kSplitW = EPI == SmallEpi::SwiGlu;
  constexpr unsigned kOutCols = kSplitW ? BN / 2 : BN;
  // A multicast slice: whole 8-row swizzle repeats (1024 bytes), so each lands where the CTA's own
  // load of those rows would have.
  constexpr unsigned kSliceRows = kOutCols / CL;
  static_assert(CL >= 1 && CL <= 16 && (CL == 1 || (!NORM && kOutCols % (8 * CL) == 0)),
                "weight multicast: 8-row slices, no norm prologue");
  constexpr unsigned kWBytes = BN * G::kBlockK * 2;
  // Rows of A the box loads, and the rows of A a stage holds: one 8-row group up to 8 tokens
  // (read with group stride 0), else the M tile's.
  constexpr unsigned kARows = M < static_cast<int>(kTileM) ? M : kTileM;
  constexpr unsigned kASlotRows = kARows <= 8 ? 8 : kTileM;
  constexpr unsigned kASbo = kARows <= 8 ? 0 : 1024;
  // A K block: 128 bytes of a row, 64 bf16 or (W8A8) 128 e4m3.
  constexpr unsigned kKbCols = WF::kW8a8 ? PrefillW8a8Gemm::kBlockK : G::kBlockK;
  constexpr unsigned k_blocks = (K + kKbCols - 1) / kKbCols;
  // KPS K blocks a stage: a stage is KPS consecutive slots (one K block's A and W each, the layout
  // of a KPS = 1 stage), behind one full and one empty barrier.
  static_assert(KPS == 1 || (!NORM && CL == 1 && WG == 1 && k_blocks % KPS == 0),
                "K blocks a stage: A by TMA, no multicast, one warpgroup, whole stages of K");
  static_assert(!WF::kE4m3 || (CL == 1 && WG == 1 && KPS == 1 && W_BH == 0),
                "e4m3 weights: their 2D map, one warpgroup, one K block a stage");
  static_assert(!WF::kW8a8 || (!NORM && CL == 1 && WG == 1 && KPS == 1 && W_BH == 0 &&
                               K % 16 == 0),
                "W8A8: A by TMA, the weight's 2D map, one warpgroup, one K block a stage");
  static_assert(!WF::kW8a8 || (128 % BN == 0 && (!kSplitW || N % (BN / 2) == 0)),
                "W8A8: a weight tile's rows (SwiGLU: its gate and its up rows) in one scale block");
  constexpr unsigned kSlots = STAGES * KPS;
  // With NORM the A region holds all of K ahead of the stages, which hold W only: M rows of 16
  // bytes per K chunk, 128 zero bytes after the last (the last core matrix's rows past M read
  // them), rounded up to keep the stages 1024-byte aligned.
  constexpr unsigned kASlot = NORM ? 0 : kASlotRows * G::kBlockK * 2;
  using Rows = NormRows<NORM ? M : 1>;  // the resident A's layout, with NORM
  constexpr unsigned kAChunks = k_blocks * 8;
  constexpr unsigned kAResident = NORM ? Rows::bytes(kAChunks) : 0;
  // An e4m3 weight's raw block after the bf16 one (rows of 64 bytes; whole KB for BN % 16 == 0).
  constexpr unsigned kRawBytes = WF::kE4m3 ? BN * WF::kRawRowBytes : 0;
  constexpr unsigned kStageBytes = kASlot + kWBytes + kRawBytes;
  constexpr unsigned kTxBytes = (NORM ? 0 : kARows * G::kBlockK * 2) + kWBytes;
  extern __shared__ unsigned char smem_raw[];
  const unsigned base = (smem_addr(smem_raw) + 1023u) & ~1023u;
  const unsigned stages = base + kAResident;
  const unsigned full = stages + kSlots * kStageBytes;
  const unsigned empty = full + STAGES * 8;
  const unsigned raw = empty + STAGES * 8;  // e4m3 only: each stage's raw block has landed
  // With NORM, K block kb's first chunk in the resident rows: Rows::step_offset(kb, 0), written
  // out because that form assembles to other address arithmetic in this kernel's loop.
  auto a_stage = [&](unsigned s, unsigned kb = 0) {
    return NORM ? base + kb * 8 * M * 16 : stages + s * kStageBytes;
  };
  auto w_stage = [&](unsigned s) { return stages + s * kStageBytes + kASlot; };
  // Where the producer's weight loads land: the bf16 block, or an e4m3 weight's raw block.
  auto w_load = [&](unsigned s) { return w_stage(s) + (WF::kE4m3 ? kWBytes : 0u); };
  const unsigned tm = blockIdx.x, tn = blockIdx.y;
  const unsigned rank = CL > 1 ? cluster::cta_rank() : 0;  // = tm % CL

  if (threadIdx.x == 0) {
    if constexpr (!NORM) {
      hexel::tma::acquire_map(a_map);
      tma::prefetch_map(a_map);
    }
    hexel::tma::acquire_map(w_map);
    tma::prefetch_map(w_map);
    for (unsigned s = 0; s < STAGES; ++s) {
      // The producer's arrival, and with an e4m3 weight each converter warp's.
      mbarrier::init(full + 8 * s, 1 + (WF::kE4m3 ? G::kConverters / 32 : 0));
      mbarrier::init(empty + 8 * s, 4 * WG * CL);  // one arrival per consumer warp of the cluster
      if constexpr (WF::kE4m3) mbarrier::init(raw + 8 * s, 1);
    }
    mbarrier::fence_init();
  }
  if constexpr (CL > 1)
    cluster::sync();  // every peer's barriers exist before a multicast or a remote arrival
  else
    __syncthreads();

  if (warp_index() == 4 * WG) {
    if (threadIdx.x % 32 == 0) {
      small_gemm_produce<M, N, K, BN, STAGES, EPI, NORM, CL, WG, KPS, W_BH, W_BOX, WF>(
          a_map, w_map, full, WF::kE4m3 ? raw : full, empty, tm, tn, rank, a_stage, w_load);
    }
    // No CTA of a cluster exits while a peer may still multicast into it or arrive on its barriers.
    if constexpr (CL > 1) {
      __syncwarp();
      cluster::sync();
    }
    return;
  }

  if constexpr (WF::kE4m3) {
    if (warp_index() > 4 * WG) {
      // The converters: every K block's raw e4m3 rows into the stage's bf16 block. Tile row r is
      // weight row tn · BN + r; with SwiGLU the gate rows, then their up rows N further.
      mbarrier::StageRing<STAGES> conv_ring;
      auto row_of = [&](unsigned r) {
        return kSplitW ? (r < kOutCols ? 0u : N - kOutCols) + tn * kOutCols + r : tn * BN + r;
      };
      e4m3_convert_stages<WF, BN, G::kConverters>(conv_ring, k_blocks, raw, full, w_scale,
                                                  threadIdx.x - G::kThreads, threadIdx.x % 32,
                                                  row_of, w_load, w_stage);
      return;
    }
  }
  const unsigned warp = warp_index() % 4, wg = WG > 1 ? warp_index() / 4 : 0;
  const unsigned lane = threadIdx.x % 32;
  if constexpr (NORM) {
    // The norm's warp sums after the barriers (an e4m3 weight's raw ones included).
    const unsigned sums = raw + (WF::kE4m3 ? STAGES * 8 : 0u);
    float* scratch = reinterpret_cast<float*>(smem_raw + (sums - smem_addr(smem_raw)));
    small_gemm_norm_prologue<M, K, EPS, kAChunks>(base, x, norm_w, scratch,
                                                  static_cast<int>(threadIdx.x), warp, lane);
  } else {
    grid_dependency_wait();
  }
  mbarrier::StageRing<STAGES> ring;
  float d[BN / 2];
  // This warpgroup's 64 rows of the stage's A.
  auto a_rows = [&](unsigned s, unsigned kb) { return a_stage(s, kb) + wg * G::kBlockM * 128; };
  if constexpr (WF::kW8a8) {
    unsigned wb[kSplitW ? 2 : 1];
    w8a8_weight_blocks<N, kOutCols, kSplitW>(wb, tn);
    w8a8_k_loop<M, k_blocks, BN, kASbo>(
        d, ring, full, empty, lane, a_scale, w_scale, tm * kTileM + 16 * warp + lane / 4, wb,
        [&](unsigned s) { return a_stage(s); }, w_stage);
  } else {
    wgmma_k_loop<BN, STAGES, kASbo, NORM ? Rows::kLbo : 0, CL, KPS>(d, ring, k_blocks, full, empty,
                                                                lane, a_rows, w_stage);
  }
  // The last stage needs no release: nothing loads after it.

  small_gemm_epilogue<M, N, BN, EPI, WG>(d, tm, tn, wg, warp, lane, out, cand);
  if constexpr (CL > 1) {
    __syncwarp();
    cluster::sync();
  }
}

// y[m, n] = bf16((A · Wᵀ)[m, n]): the QKV projection (then qkv_rope_append_rows, as in prefill).
// A map: [M, K], 64 x 64 boxes; W map: [N, K], BN x 64 boxes.
// KPS: K blocks a stage (small_gemm_body).
template <int M, int N, int K, int BN, int STAGES, int KPS = 1, unsigned W_BH = 0, unsigned W_BOX = 0>
__global__ void __launch_bounds__(SmallGemm::kThreads)
    gemm_small_bf16(const TensorMap* a_map, const TensorMap* w_map, bf16* y) {
  hexel::launch_dependents();  // the wait is in the body (after the first weight loads)
  small_gemm_body<M, N, K, BN, STAGES, SmallEpi::StoreBf16, false, 0.f, 1, 1, KPS, W_BH, W_BOX>(
      a_map, nullptr, nullptr, w_map, y);
}

// x[m, n] += (A · Wᵀ)[m, n], x the f32 residual stream: the attention output and down projections.
template <int M, int N, int K, int BN, int STAGES, int KPS = 1, unsigned W_BH = 0, unsigned W_BOX = 0>
__global__ void __launch_bounds__(SmallGemm::kThreads)
    gemm_small_residual(const TensorMap* a_map, const TensorMap* w_map, float* x) {
  hexel::launch_dependents();  // the wait is in the body
  small_gemm_body<M, N, K, BN, STAGES, SmallEpi::Residual, false, 0.f, 1, 1, KPS, W_BH, W_BOX>(
      a_map, nullptr, nullptr, w_map, x);
}

// act[m, j] = bf16(silu(g) · u), g = (A · Wᵀ)[m, j], u = (A · Wᵀ)[m, I + j], W = gate_up [2I, K]
// (map with BN / 2-row boxes).
template <int M, int I, int K, int BN, int STAGES, int KPS = 1, unsigned W_BH = 0, unsigned W_BOX = 0>
__global__ void __launch_bounds__(SmallGemm::kThreads)
    gemm_small_swiglu(const TensorMap* a_map, const TensorMap* w_map, bf16* act) {
  hexel::launch_dependents();  // the wait is in the body
  small_gemm_body<M, I, K, BN, STAGES, SmallEpi::SwiGlu, false, 0.f, 1, 1, KPS, W_BH, W_BOX>(
      a_map, nullptr, nullptr, w_map, act);
}

// y[m, n] = (A · Wᵀ)[m, n] in f32: the LM head's logits, on the wgmma chain and TMA ring of the
// other projections, with the first stage of greedy sampling: cand[m, t] (N / BN a token) the
// greedy candidate of weight tile t's logits of token m; null: logits only. A map: [M, K] (the
// gathered sample rows); W map: [N, K], BN x 64.
template <int M, int N, int K, int BN, int STAGES>
__global__ void __launch_bounds__(SmallGemm::kThreads)
    gemm_small_f32cand(const TensorMap* a_map, const TensorMap* w_map, float* y,
                       unsigned long long* cand) {
  hexel::launch_dependents();  // the wait is in the body
  small_gemm_body<M, N, K, BN, STAGES, SmallEpi::F32Cand>(a_map, nullptr, nullptr, w_map, y, cand);
}

// The same four kernels on clusters of CL consecutive M tiles sharing each weight tile by multicast
// (small_gemm_body; grid.x a multiple of CL), and with WG = 2 on 128-row M tiles of two consumer
// warpgroups (128 · WG + 32 threads): the same arguments, the same bits.
template <int M, int N, int K, int BN, int STAGES, int CL, int WG = 1, unsigned W_BH = 0,
          unsigned W_BOX = 0>
__global__ void __cluster_dims__(CL, 1, 1) __launch_bounds__(small_gemm_threads(WG))
    gemm_small_bf16_cl(const TensorMap* a_map, const TensorMap* w_map, bf16* y) {
  hexel::launch_dependents();
  small_gemm_body<M, N, K, BN, STAGES, SmallEpi::StoreBf16, false, 0.f, CL, WG, 1, W_BH, W_BOX>(
      a_map, nullptr, nullptr, w_map, y);
}

template <int M, int N, int K, int BN, int STAGES, int CL, int WG = 1, unsigned W_BH = 0,
          unsigned W_BOX = 0>
__global__ void __cluster_dims__(CL, 1, 1) __launch_bounds__(small_gemm_threads(WG))
    gemm_small_residual_cl(const TensorMap* a_map, const TensorMap* w_map, float* x) {
  hexel::launch_dependents();
  small_gemm_body<M, N, K, BN, STAGES, SmallEpi::Residual, false, 0.f, CL, WG, 1, W_BH, W_BOX>(
      a_map, nullptr, nullptr, w_map, x);
}

template <int M, int I, int K, int BN, int STAGES, int CL, int WG = 1, unsigned W_BH = 0,
          unsigned W_BOX = 0>
__global__ void __cluster_dims__(CL, 1, 1) __launch_bounds__(small_gemm_threads(WG))
    gemm_small_swiglu_cl(const TensorMap* a_map, const TensorMap* w_map, bf16* act) {
  hexel::launch_dependents();
  small_gemm_body<M, I, K, BN, STAGES, SmallEpi::SwiGlu, false, 0.f, CL, WG, 1, W_BH, W_BOX>(
      a_map, nullptr, nullptr, w_map, act);
}

template <int M, int N, int K, int BN, int STAGES, int CL, int WG = 1>
__global__ void __cluster_dims__(CL, 1, 1) __launch_bounds__(small_gemm_threads(WG))
    gemm_small_f32cand_cl(const TensorMap* a_map, const TensorMap* w_map, float* y,
                          unsigned long long* cand) {
  hexel::launch_dependents();
  small_gemm_body<M, N, K, BN, STAGES, SmallEpi::F32Cand, false, 0.f, CL, WG>(
      a_map, nullptr, nullptr, w_map, y, cand);
}

// The three projection kernels on an e4m3 weight (gemm_e4m3.cuh): W's map is over its e4m3 bytes
// (BN x 64-byte boxes, SwiGLU BN / 2, no swizzle), `w_scale` its f32 scales of SBR x SBC blocks;
// the results are the bf16 kernels' on W' = bf16(float(q) · s), bit for bit.
template <int M, int N, int K, int BN, int STAGES, unsigned SBR, unsigned SBC>
__global__ void __launch_bounds__(SmallGemm::kE4m3Threads)
    gemm_small_e4m3_bf16(const TensorMap* a_map, const TensorMap* w_map, const float* w_scale,
                         bf16* y) {
  hexel::launch_dependents();  // the wait is in the body
  small_gemm_body<M, N, K, BN, STAGES, SmallEpi::StoreBf16, false, 0.f, 1, 1, 1, 0, 0,
                  E4m3Weight<N, K, SBR, SBC>>(a_map, nullptr, nullptr, w_map, y, nullptr, w_scale);
}

template <int M, int N, int K, int BN, int STAGES, unsigned SBR, unsigned SBC>
__global__ void __launch_bounds__(SmallGemm::kE4m3Threads)
    gemm_small_e4m3_residual(const TensorMap* a_map, const TensorMap* w_map, const float* w_scale,
                             float* x) {
  hexel::launch_dependents();
  small_gemm_body<M, N, K, BN, STAGES, SmallEpi::Residual, false, 0.f, 1, 1, 1, 0, 0,
                  E4m3Weight<N, K, SBR, SBC>>(a_map, nullptr, nullptr, w_map, x, nullptr, w_scale);
}

template <int M, int I, int K, int BN, int STAGES, unsigned SBR, unsigned SBC>
__global__ void __launch_bounds__(SmallGemm::kE4m3Threads)
    gemm_small_e4m3_swiglu(const TensorMap* a_map, const TensorMap* w_map, const float* w_scale,
                           bf16* act) {
  hexel::launch_dependents();
  small_gemm_body<M, I, K, BN, STAGES, SmallEpi::SwiGlu, false, 0.f, 1, 1, 1, 0, 0,
                  E4m3Weight<2 * I, K, SBR, SBC>>(a_map, nullptr, nullptr, w_map, act, nullptr,
                                                  w_scale);
}

// The LM head on an e4m3 weight (weight-only: bf16 activations): gemm_small_f32cand's logits and
// candidates, on W' = bf16(float(q) · s).
template <int M, int N, int K, int BN, int STAGES, unsigned SBR, unsigned SBC>
__global__ void __launch_bounds__(SmallGemm::kE4m3Threads)
    gemm_small_e4m3_f32cand(const TensorMap* a_map, const TensorMap* w_map, const float* w_scale,
                            float* y, unsigned long long* cand) {
  hexel::launch_dependents();
  small_gemm_body<M, N, K, BN, STAGES, SmallEpi::F32Cand, false, 0.f, 1, 1, 1, 0, 0,
                  E4m3Weight<N, K, SBR, SBC>>(a_map, nullptr, nullptr, w_map, y, cand, w_scale);
}

// The QKV and gate/up projections with the norm that feeds them (decode, up to 8 tokens):
// A = RMSNorm(x) with weights norm_w, computed in the kernel (see the norm prologue above).
template <int M, int N, int K, int BN, int STAGES, float EPS, unsigned W_BH = 0, unsigned W_BOX = 0>
__global__ void __launch_bounds__(SmallGemm::kThreads)
    gemm_small_norm_bf16(const float* x, const float* norm_w, const TensorMap* w_map, bf16* y) {
  hexel::launch_dependents();  // the wait is in the body
  small_gemm_body<M, N, K, BN, STAGES, SmallEpi::StoreBf16, true, EPS, 1, 1, 1, W_BH, W_BOX>(
      nullptr, x, norm_w, w_map, y);
}

template <int M, int I, int K, int BN, int STAGES, float EPS, unsigned W_BH = 0, unsigned W_BOX = 0>
__global__ void __launch_bounds__(SmallGemm::kThreads)
    gemm_small_norm_swiglu(const float* x, const float* norm_w, const TensorMap* w_map, bf16* act) {
  hexel::launch_dependents();  // the wait is in the body
  small_gemm_body<M, I, K, BN, STAGES, SmallEpi::SwiGlu, true, EPS, 1, 1, 1, W_BH, W_BOX>(
      nullptr, x, norm_w, w_map, act);
}

// The same two on an e4m3 weight (as gemm_small_e4m3_bf16 and _swiglu, the scales at w_scale):
// the bits of rmsnorm, then gemm_small_e4m3_bf16 or _swiglu.
template <int M, int N, int K, int BN, int STAGES, float EPS, unsigned SBR, unsigned SBC>
__global__ void __launch_bounds__(SmallGemm::kE4m3Threads)
    gemm_small_e4m3_norm_bf16(const float* x, const float* norm_w, const TensorMap* w_map,
                              const float* w_scale, bf16* y) {
  hexel::launch_dependents();  // the wait is in the body
  small_gemm_body<M, N, K, BN, STAGES, SmallEpi::StoreBf16, true, EPS, 1, 1, 1, 0, 0,
                  E4m3Weight<N, K, SBR, SBC>>(nullptr, x, norm_w, w_map, y, nullptr, w_scale);
}

template <int M, int I, int K, int BN, int STAGES, float EPS, unsigned SBR, unsigned SBC>
__global__ void __launch_bounds__(SmallGemm::kE4m3Threads)
    gemm_small_e4m3_norm_swiglu(const float* x, const float* norm_w, const TensorMap* w_map,
                                const float* w_scale, bf16* act) {
  hexel::launch_dependents();  // the wait is in the body
  small_gemm_body<M, I, K, BN, STAGES, SmallEpi::SwiGlu, true, EPS, 1, 1, 1, 0, 0,
                  E4m3Weight<2 * I, K, SBR, SBC>>(nullptr, x, norm_w, w_map, act, nullptr, w_scale);
}

// The QKV epilogue folded into a QKV GEMM (gemm_small_norm_qkv; gemm_small_sm100_norm_qkv), after
// this CTA's stores of columns col0 .. col0 + COLS - 1 of qkv (bf16 [M, (HQ + 2 HKV) D]; col0 a
// multiple of COLS), by the 128 threads t that stored them (`sync`: their barrier). Each head those
// columns touch counts this CTA's arrival in arrivals[head] after the stores (fence, then an
// atomic: the threadfence-reduction pattern); the CTA whose arrival completes a head (the head's
// tiles: those its D columns touch) reads the head's row back from L2 and runs the epilogue on it
// (qkv_rope_row, gemm_prefill.cuh: bias, QK norm, RoPE, q out, K/V appended) for every token, then
// returns the counter to zero (the arena starts zeroed, docs/artifact.md). The epilogue reads the
// bf16 values that qkv_rope_append_rows would, so every bucket gives a row the same bits.
template <int M, int COLS, int HQ, int HKV, int D, bool BIAS, bool QK_NORM, float EPS, int PAGE,
          int MAXP, long long PAGE_ELEMS, class Rope, class KV, class Sync>
__device__ __forceinline__ void qkv_fold_epilogue(
    int col0, int t, const bf16* qkv, const float* bias, const float* q_norm, const float* k_norm,
    const int* positions, const int* token_seq, const int* page_tables,
    typename KV::Elem* kv_layer, float* q_out, unsigned* arrivals, Sync sync) {
  constexpr int NH = HQ + 2 * HKV, N = NH * D;
  // The most heads a tile touches: one where it lies inside a head, COLS / D where it holds whole
  // heads, else one more than it spans.
  constexpr int kHeads = D % COLS == 0 ? 1 : COLS % D == 0 ? COLS / D : (COLS + D - 2) / D + 1;
  static_assert(D <= 128 && kHeads <= 32, "a thread per element; a bit per head of the tile");
  __shared__ float head_v[D];
  __shared__ float scratch[4];
  __shared__ unsigned last;  // bit i: this CTA completed head col0 / D + i
  const int first = col0 / D;
  __threadfence();  // this thread's qkv stores, before the arrival
  sync();
  if (t == 0) {
    unsigned done = 0;
#pragma unroll
    for (int i = 0; i < kHeads; ++i) {
      const int head = first + i;
      if (head >= NH || head * D >= col0 + COLS) break;
      const unsigned tiles = (head * D + D - 1) / COLS - head * D / COLS + 1;
      if (atomicAdd(&arrivals[head], 1u) == tiles - 1) {
        done |= 1u << i;
        arrivals[head] = 0;
      }
    }
    last = done;
  }
  sync();
  const unsigned done = last;
  if (done == 0) return;
  __threadfence();
#pragma unroll
  for (int i = 0; i < kHeads; ++i) {
    if (!(done >> i & 1u)) continue;
    for (int m = 0; m < M; ++m) {
      const bf16* p = qkv + static_cast<long long>(m) * N + (first + i) * D + qkv_pair_pos(t, D);
      const float v = t < D ? __uint_as_float(static_cast<unsigned>(__ldcg(p)) << 16) : 0.f;
      qkv_rope_row<HQ, HKV, D, BIAS, QK_NORM, EPS, PAGE, MAXP, PAGE_ELEMS, Rope, KV>(
          v, first + i, m, t, bias, q_norm, k_norm, positions, token_seq, page_tables, kv_layer,
          q_out, head_v, scratch, sync);
    }
  }
}

// The QKV projection of a one-token decode bucket in one launch: the norm prologue, the GEMM into
// qkv (bf16 [M, (HQ + 2 HKV) D], as gemm_small_bf16), then the QKV epilogue (qkv_fold_epilogue: a
// head's D columns span D / BN CTAs, the last to arrive runs it).
// EPS is the model's RMSNorm epsilon, for the input norm and the QK norm alike; the template
// arguments after D are qkv_rope_append_rows's after its D up to Rope; KV (last) is its KV.
template <int M, int K, int BN, int STAGES, int HQ, int HKV, int D, bool BIAS, bool QK_NORM, float EPS, int PAGE,
          int MAXP, long long PAGE_ELEMS, class Rope, unsigned W_BH = 0, unsigned W_BOX = 0, class KV = KvBf16>
__global__ void __launch_bounds__(SmallGemm::kThreads)
    gemm_small_norm_qkv(const float* x, const float* norm_w, const TensorMap* w_map, bf16* qkv, const float* bias,
                        const float* q_norm, const float* k_norm, const int* positions, const int* token_seq,
                        const int* page_tables, typename KV::Elem* kv_layer, float* q_out, unsigned* arrivals) {
  constexpr int NH = HQ + 2 * HKV, N = NH * D;
  static_assert(D % BN == 0 && D <= 128, "a weight tile lies inside one head; a thread per element");
  hexel::launch_dependents();  // the wait is in the body
  small_gemm_body<M, N, K, BN, STAGES, SmallEpi::StoreBf16, true, EPS, 1, 1, 1, W_BH, W_BOX>(
      nullptr, x, norm_w, w_map, qkv);
  if (hexel::warp_index() == 4) return;  // the producer warp
  qkv_fold_epilogue<M, BN, HQ, HKV, D, BIAS, QK_NORM, EPS, PAGE, MAXP, PAGE_ELEMS, Rope, KV>(
      static_cast<int>(blockIdx.y) * BN, threadIdx.x, qkv, bias, q_norm, k_norm, positions,
      token_seq, page_tables, kv_layer, q_out, arrivals, [] { hexel::named_barrier_sync(2, 128); });
}

}  // namespace telos_kernels
