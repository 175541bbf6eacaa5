#pragma once
// The prefill GEMM: y = A · Wᵀ for M ≥ 128 rows, A [M, K] bf16 activations and W [N, K] bf16
// weights, row-major, f32 accumulation, on Hopper tensor cores. The structure is Hexel's proof
// GEMM (hexel/examples/gemm_bf16.cuh): persistent (one CTA per SM), warp-specialised (warpgroup 0
// is the TMA producer, warpgroups 1 and 2 the wgmma consumers, 64 rows of a 128-row tile each),
// a ring of STAGES shared-memory stages between them, one wgmma m64n256k16 per 16 of K.
//
// Operands arrive through TMA tensor maps that the executor encodes once at load time and keeps
// in device memory (launch argument `tmap:`, docs/artifact.md); the kernel reads them from global
// memory through their generic address (PTX ISA, cp.async.bulk.tensor: the tensor-map operand
// may live in the .param, .const or .global state space). Maps are 128B-swizzled with 128-byte
// box rows: bf16 A in 128 x 64 boxes, W in 256 x 64 boxes (128 x 64 for SwiGLU: gate and up
// halves), bf16 outputs in 64 x 64 boxes, the f32 residual stream x in 64 x 32 boxes.
//
// Ragged shapes: tiles past M or N load zeros (TMA fills out-of-bounds box elements with zeros)
// and TMA stores and reductions drop out-of-bounds elements.
//
// Reduction order, for batch invariance: every output element sums K in 16-wide steps in order,
// whatever M is, so a row's result does not depend on the bucket.
#include "common.cuh"
#include "gemm_e4m3.cuh"
#include "gemm_prefill_shape.cuh"
#include "hexel/cluster.cuh"
#include "hexel/ld_st.cuh"
#include "hexel/math.cuh"
#include "hexel/matrix_ldst.cuh"
#include "hexel/mbarrier.cuh"
#include "hexel/sync.cuh"
#include "hexel/tma.cuh"
#include "hexel/wgmma.cuh"

namespace telos_kernels {

using hexel::TensorMap;

// Where a GEMM's weight rows come from, through its `w_map` argument (docs/artifact.md). W_BH = 0:
// the 2D map of the [rows, K] weight with the 128-byte swizzle (`tmap:`), the second half's rows
// (SwiGLU's up) from `half_rows` on. W_BH > 0: the 5D map over the weight's slot image (`timg:`;
// support/slot_image.hpp), whose tiles hold W_BH rows of each half: {64 columns, W_BH rows, half,
// K block, tile}, no swizzle, in boxes of W_BOX rows (W_BOX <= W_BH: W_BOX rows of one tile; else
// W_BOX / W_BH whole tiles). The image keeps each row's 16-byte chunks where the 128-byte swizzle
// puts them, so its bytes land in shared memory as the 2D map's box would have written them (dst
// 1024-byte aligned, n a multiple of 8): the same wgmma operands, the same bits. Rows n .. n + ROWS
// - 1 of half `half`, K block kb, to dst; the boxes complete_tx on `bar` (ROWS · 128 bytes either
// way). MULTICAST: to the cluster's CTAs in `mask` (gemm_small.cuh's weight slices). KB_COLS: the
// 2D map's columns a K block (64: a bf16 swizzle row or an e4m3 raw row; 128: an e4m3 swizzle row,
// gemm_w8a8.cuh).
// W_BOX > ROWS (the prefill GEMM where the image's tiles cut its rows, prefill_gemm_body's kCover):
// one box of W_BOX / W_BH whole tiles from the tile that holds row n, so row n lands n % W_BH rows
// into dst (W_BOX · 128 bytes); the caller reads from there.
template <unsigned ROWS, unsigned W_BH, unsigned W_BOX, bool MULTICAST = false,
          unsigned KB_COLS = 64>
__device__ __forceinline__ void load_weight_rows(unsigned dst, const TensorMap* map, unsigned bar,
                                                 unsigned kb, unsigned n, unsigned half,
                                                 unsigned half_rows, unsigned short mask = 0) {
  static_assert(W_BH == 0 || (W_BOX % 8 == 0 && (ROWS % W_BOX == 0 || W_BOX > ROWS) &&
                              (W_BOX <= W_BH ? W_BH % W_BOX == 0 : W_BOX % W_BH == 0)),
                "image boxes of whole 8-row swizzle repeats, within a tile or whole tiles");
  if constexpr (W_BH > 0 && W_BOX > ROWS) {
    static_assert(!MULTICAST, "a covering box is the prefill GEMM's, which has no clusters");
    hexel::tma::load(dst, map, bar, 0u, 0u, half, kb, n / W_BH);
  } else if constexpr (W_BH == 0) {
    if constexpr (MULTICAST)
      hexel::tma::load_multicast(dst, map, bar, mask, kb * KB_COLS, half * half_rows + n);
    else
      hexel::tma::load(dst, map, bar, kb * KB_COLS, half * half_rows + n);
  } else {
#pragma unroll
    for (unsigned c = 0; c < ROWS / W_BOX; ++c) {
      const unsigned r = n + c * W_BOX, at = dst + c * W_BOX * 128;
      if constexpr (MULTICAST)
        hexel::tma::load_multicast(at, map, bar, mask, 0, r % W_BH, half, kb, r / W_BH);
      else
        hexel::tma::load(at, map, bar, 0u, r % W_BH, half, kb, r / W_BH);
    }
  }
}

// One output tile's main loop over K, the same code in the prefill and the small-M GEMM
// (gemm_small.cuh), which is what makes their results bit-identical per row: for each 64-wide K
// block, wait for its stage, accumulate its four k16 wgmma steps into d (from zero at the first),
// keep one group in flight and give the previous stage back to the producer. `a_stage(s, kb)` and
// `w_stage(s)` are the shared-memory addresses of K block kb's operands in stage s (the small
// GEMM's normalized A stays resident for the whole K, one block per kb). A_SBO is the byte
// distance between the A stage's 8-row groups (dense: 1024; 0 makes every group read the first 8
// rows, for an M of at most 8, gemm_small.cuh). A is 128B-swizzled (TMA's layout) unless A_LBO is
// non-zero: then it is the interleaved layout (no swizzle; PTX ISA, wgmma "Shared Memory Matrix
// Layout": 8 x 16-byte core matrices, rows 16 bytes apart, A_LBO bytes between core matrices
// along K), so a K step of 16 is 2 · A_LBO bytes. CL: the CTAs of the cluster whose producers
// write into this CTA's stages (gemm_small.cuh's weight multicast); a stage read is released to
// the empty barrier of each of them (ranks 0 .. CL - 1). Returns the last stage's index: the caller
// releases it if anything loads after this tile.
// KPS: K blocks a stage (gemm_small.cuh: a stage of KPS slots, each one K block's A and W, at
// slot indices stage · KPS + j; k_blocks a multiple of KPS): the same wgmma chain in the same K
// order, one barrier wait and one release per KPS blocks.
template <unsigned N, unsigned STAGES, unsigned A_SBO = 1024, unsigned A_LBO = 0, unsigned CL = 1,
          unsigned KPS = 1, class AStage, class WStage>
__device__ __forceinline__ unsigned wgmma_k_loop(float (&d)[N / 2],
                                                 hexel::mbarrier::StageRing<STAGES>& ring,
                                                 unsigned k_blocks, unsigned full, unsigned empty,
                                                 unsigned lane, AStage a_stage, WStage w_stage) {
  using namespace hexel;
  constexpr Swizzle kASwizzle = A_LBO ? Swizzle::None : Swizzle::B128;
  constexpr unsigned kAStep = A_LBO ? 2 * A_LBO : 32;
  unsigned prev = 0;
  for (unsigned ks = 0; ks < k_blocks / KPS; ++ks) {
    mbarrier::wait_parity(full + 8 * ring.index, ring.phase);
#pragma unroll
    for (unsigned j = 0; j < KPS; ++j) {
      const unsigned kb = ks * KPS + j, slot = ring.index * KPS + j;
      const auto a = wgmma::SmemDesc::make(a_stage(slot, kb), kASwizzle, A_LBO ? A_LBO : 16, A_SBO);
      const auto b = wgmma::kmajor_desc(w_stage(slot), Swizzle::B128);
      if (j == 0) wgmma::fence();
#pragma unroll
      for (unsigned kk = 0; kk < PrefillGemm::kBlockK / 16; ++kk)
        wgmma::mma_ss<N>(d, a.advanced(kk * kAStep), b.advanced(kk * 32), kb > 0 || kk > 0);
    }
    wgmma::commit_group();
    // One group stays in flight; once it is the only one, the previous stage has been read.
    wgmma::wait_group<1>();
    if (ks > 0 && lane == 0) {
      if constexpr (CL == 1)
        mbarrier::arrive(empty + 8 * prev);
      else
        mbarrier::arrive_remote_ranks<CL>(empty + 8 * prev);
    }
    prev = ring.index;
    ring.advance();
  }
  wgmma::wait_group<0>();
  wgmma::fence_operand(d);
  return prev;
}

// Epilogues. A consumer thread's accumulators (wgmma m64nNk16 f32 layout): d[4j + 2h + e] is row
// 16 · warp + lane / 4 + 8h, column 8j + 2 (lane % 4) + e of its 64-row slab.
//
// Each adds its arithmetic to its shape (gemm_prefill_shape.cuh): the bf16 GEMM's tile of kBlockN
// W rows, or the W8A8 GEMM's (gemm_w8a8.cuh). pack(d, j, h): the two bf16 outputs of column pair
// (j, lane % 4) and row half h, for the TMA-store path.
template <class Shape>
struct EpilogueStoreBf16Of : Shape {
  template <unsigned R>
  __device__ __forceinline__ static unsigned pack(const float (&d)[R], unsigned j, unsigned h) {
    return pack_bf16x2(d[4 * j + 2 * h], d[4 * j + 2 * h + 1]);
  }
};
using EpilogueStoreBf16 = EpilogueStoreBf16Of<StoreBf16Shape>;

// SwiGLU: the tile's first half of W rows are gate rows j0.., the second half the up rows I + j0..
// (two TMA boxes per stage), so gate column c and its up column sit in the same thread, the second
// half of its R accumulators holding the up columns.
template <class Shape>
struct EpilogueSwiGluOf : Shape {
  // silu(gate) · up = gate · up / (1 + 2^(-gate · log2 e)), on the special function unit: one
  // ex2.approx and one rcp.approx (hexel/math.cuh: relative errors near 2^-22 and 1 ulp, far
  // below the bf16 rounding that follows) instead of expf and an IEEE division,
  // which would cost the SwiGLU epilogue ~2 µs of issue per tile while the tensor cores wait. Large
  // negative gates give 2^+inf = inf, rcp(inf) = 0, so silu → -0 as it should. The small-M GEMM
  // calls this same function, so the two stay bit-identical.
  __device__ __forceinline__ static float act(float gate, float up) {
    const float e = hexel::ex2_approx(gate * -1.4426950408889634f);
    const float r = hexel::rcp_approx(1.f + e);
    return gate * r * up;
  }
  template <unsigned R>
  __device__ __forceinline__ static unsigned pack(const float (&d)[R], unsigned j, unsigned h) {
    constexpr unsigned kUp = R / 2;
    return pack_bf16x2(act(d[4 * j + 2 * h], d[kUp + 4 * j + 2 * h]),
                       act(d[4 * j + 2 * h + 1], d[kUp + 4 * j + 2 * h + 1]));
  }
};

// x[m, n] += acc: the f32 accumulators go to shared memory as they are and the TMA adds them
// into x at L2 (cp.reduce.async.bulk.tensor .add, f32: x ← add.rn.ftz(x, acc), one reduction per
// element since one tile owns it, so deterministic whatever M is). The consumers only wait for a
// buffer to have been read before refilling it, not for x's round trip.
template <class Shape>
struct EpilogueResidualOf : Shape {};
using EpilogueSwiGlu = EpilogueSwiGluOf<SwiGluShape>;
using EpilogueResidual = EpilogueResidualOf<ResidualShape>;

// The producer (one thread): for each of the CTA's tiles, every K block's A and W rows into the
// ring of stages (a_stage, w_stage: their shared addresses) behind the full / empty barriers
// (kCover: one box of whole slot-image tiles covering the tile's rows; SwiGLU: the gate and the up
// rows). T: the instance's tiling (PrefillTiling, or PrefillW8a8Tiling, whose e4m3 rows land in
// the stage as the MMA reads them, as a bf16 weight's do). An e4m3 weight of the weight-only GEMM
// (WF, gemm_e4m3.cuh): w_stage gives the stage's raw block, its rows of 64 bytes complete on the
// raw barriers at `raw`.
template <class T, int N, class Epi, unsigned W_BH, unsigned W_BOX, class WF = Bf16Weight,
          class AStage, class WStage>
__device__ __forceinline__ void prefill_gemm_produce(const TensorMap* a_map, const TensorMap* w_map,
                                                     unsigned full, unsigned empty, AStage& a_stage,
                                                     WStage& w_stage, unsigned raw = 0) {
  using namespace hexel;
  constexpr unsigned kWRowBytes = WF::kE4m3 ? WF::kRawRowBytes : 128;
  // The weight map's columns a K block: a raw row's 64 e4m3, else the A map's K block.
  constexpr unsigned kKbCols = WF::kE4m3 ? WF::kRawRowBytes : T::kBlockK;
  mbarrier::StageRing<T::kStages> ring;
  for (unsigned u = blockIdx.x; u < T::kUnits; u += gridDim.x) {
    unsigned tm, tn;
    prefill_tile_coords(u, T::kTilesM, T::kTilesN, tm, tn);
    for (unsigned kb = 0; kb < T::kKBlocks; ++kb) {
      mbarrier::wait_parity(empty + 8 * ring.index, ring.phase ^ 1u);
      const unsigned bar = full + 8 * ring.index;
      const unsigned w_bar = WF::kE4m3 ? raw + 8 * ring.index : bar;
      // Out-of-bounds box elements count too: the stage always receives kStageBytes (with an e4m3
      // weight, its A bytes on full and its raw bytes on w_full; the converters write the rest).
      if constexpr (WF::kE4m3) {
        mbarrier::arrive_expect_tx(bar, T::kABytes);
        mbarrier::arrive_expect_tx(w_bar, T::kWRows * kWRowBytes);
      } else {
        mbarrier::arrive_expect_tx(bar, T::kStageBytes);
      }
      tma::load(a_stage(ring.index), a_map, bar, kb * T::kBlockK, tm * T::kBlockM);
      if constexpr (Epi::kSplitW) {
        constexpr unsigned half = T::kBlockN / 2;
        load_weight_rows<half, W_BH, W_BOX, false, kKbCols>(w_stage(ring.index), w_map, w_bar, kb,
                                                            tn * half, 0, N);
        load_weight_rows<half, W_BH, W_BOX, false, kKbCols>(w_stage(ring.index) + half * kWRowBytes,
                                                            w_map, w_bar, kb, tn * half, 1, N);
      } else {
        load_weight_rows<T::kBlockN, W_BH, W_BOX, false, kKbCols>(w_stage(ring.index), w_map, w_bar,
                                                                  kb, tn * T::kBlockN, 0, N);
      }
      ring.advance();
    }
  }
}

// One 64 x 128-byte chunk of a tile's output goes through a shared buffer (128B-swizzled) to its
// box of out_map, written by the `threads` threads that share named barrier `barrier`, one of them
// the leader. prefill_chunk_acquire, before the writes: the leader waits until the TMA has read
// all but its PENDING most recent chunks (so that the buffer is free), and the threads meet.
template <int PENDING>
__device__ __forceinline__ void prefill_chunk_acquire(unsigned barrier, unsigned threads,
                                                      bool leader) {
  if (leader) hexel::tma::wait_group_read<PENDING>();
  hexel::named_barrier_sync(barrier, threads);
}

// prefill_chunk_release, after the writes: the threads switch proxies and meet, and the leader
// hands buffer `buf` to the TMA for the box at (col, row): a bf16 store, or the residual's f32
// reduction into x; with BOXES > 1 also the next buffers for the boxes 64, 128, .. rows below
// (one bulk group).
template <bool RESIDUAL, unsigned BOXES = 1>
__device__ __forceinline__ void prefill_chunk_release(const TensorMap* out_map, unsigned buf,
                                                      unsigned col, unsigned row, unsigned barrier,
                                                      unsigned threads, bool leader) {
  using namespace hexel;
  fence_proxy_async_smem();  // shared writes, then the TMA reads them: proxy switch
  named_barrier_sync(barrier, threads);
  if (leader) {
#pragma unroll
    for (unsigned b = 0; b < BOXES; ++b) {
      if constexpr (RESIDUAL)
        tma::reduce_add(out_map, buf + b * PrefillGemm::kChunkBytes, col, row + 64 * b);
      else
        tma::store(out_map, buf + b * PrefillGemm::kChunkBytes, col, row + 64 * b);
    }
    tma::commit_group();
  }
}

// A consumer warpgroup's epilogue of tile (tm, tn) (cw: its 64 rows; warp, lane: the thread's):
// the accumulators d through its two 64 x 128-byte chunk buffers at `epilogue`, alternately, to
// out_map, by TMA stores (bf16, through stmatrix) or TMA reductions (the f32 residual), the
// warpgroup's leader issuing them; a buffer is refilled once the TMA has read the chunk that last
// used it. Each tile starts at buffer 0, so that chunk is two chunks ago, except for a tile's
// first chunk after a tile of an odd count of chunks (the W8A8 SwiGLU tile's one): there it is the
// previous chunk, the last tile's last.
template <class Epi, unsigned R>
__device__ __forceinline__ void prefill_gemm_epilogue(const float (&d)[R], const TensorMap* out_map,
                                                      unsigned epilogue, unsigned tm, unsigned tn,
                                                      unsigned cw, unsigned warp, unsigned lane,
                                                      bool wg_leader) {
  using G = PrefillGemm;
  using namespace hexel;
  constexpr unsigned kChunks = Epi::kOutCols / Epi::kChunkCols;
  const unsigned row0 = tm * G::kBlockM + cw * 64;
#pragma unroll
  for (unsigned ch = 0; ch < kChunks; ++ch) {
    const unsigned buf = epilogue + (cw * 2 + ch % 2) * G::kChunkBytes;
    if (ch == 0 && kChunks % 2 == 1)
      prefill_chunk_acquire<0>(1 + cw, 128, wg_leader);
    else
      prefill_chunk_acquire<1>(1 + cw, 128, wg_leader);
    if constexpr (Epi::kResidual) {
      // Column block j (8 f32 = 32 bytes) of row half h: lanes 4r..4r+3 write row r's 32
      // bytes; with the swizzle the warp's 8 rows fall in 8 different 16-byte bank groups.
#pragma unroll
      for (unsigned jj = 0; jj < Epi::kChunkCols / 8; ++jj) {
        const unsigned j = ch * (Epi::kChunkCols / 8) + jj;
#pragma unroll
        for (unsigned h = 0; h < 2; ++h) {
          const unsigned r = 16 * warp + lane / 4 + 8 * h;
          const unsigned off = r * 128 + 4 * (8 * jj + 2 * (lane % 4));
          st_shared_v2_f32(buf + swizzled_offset(off, Swizzle::B128), d[4 * j + 2 * h],
                           d[4 * j + 2 * h + 1]);
        }
      }
    } else {
      // Per 16 columns (column blocks j, j + 1) one stmatrix.x4 writes the warp's 16 rows:
      // matrices (rows 0-7, j), (8-15, j), (0-7, j + 1), (8-15, j + 1), lane l addressing
      // row l % 8 of matrix l / 8.
      const unsigned quad = lane / 8, r_in = 16 * warp + 8 * (quad % 2) + lane % 8;
#pragma unroll
      for (unsigned q = 0; q < Epi::kChunkCols / 16; ++q) {
        const unsigned j = ch * (Epi::kChunkCols / 8) + 2 * q;
        const unsigned frag[4] = {Epi::pack(d, j, 0), Epi::pack(d, j, 1), Epi::pack(d, j + 1, 0),
                                  Epi::pack(d, j + 1, 1)};
        const unsigned col_bytes = 2 * (16 * q + 8 * (quad / 2));
        stmatrix<4>(buf + swizzled_offset(r_in * 128 + col_bytes, Swizzle::B128), frag);
      }
    }
    prefill_chunk_release<Epi::kResidual>(out_map, buf, tn * Epi::kOutCols + ch * Epi::kChunkCols,
                                          row0, 1 + cw, 128, wg_leader);
  }
}

// A CTA's shared memory (PrefillTiling), from the dynamic shared memory's start aligned to the
// 128B swizzle repeat (1024 bytes), which keeps the operand descriptors' base offsets zero: the
// stages (A, then the W rows, then an e4m3 weight's raw rows), the epilogue's chunk buffers, each
// stage's full and empty barriers (and with an e4m3 weight its raw barrier).
template <class T>
struct PrefillSmem {
  unsigned base, epilogue, full, empty, raw;
  __device__ __forceinline__ explicit PrefillSmem(const unsigned char* smem)
      : base((hexel::smem_addr(smem) + 1023u) & ~1023u),
        epilogue(base + T::kStages * T::kStageBytes),
        full(epilogue + PrefillGemm::kEpilogueBytes),
        empty(full + T::kStages * 8),
        raw(empty + T::kStages * 8) {}
  __device__ __forceinline__ unsigned a(unsigned s) const { return base + s * T::kStageBytes; }
  __device__ __forceinline__ unsigned w(unsigned s) const {
    return base + s * T::kStageBytes + T::kABytes;
  }
  __device__ __forceinline__ unsigned w_raw(unsigned s) const { return w(s) + T::kWRows * 128; }
};

// Thread 0, before the CTA's first barrier: makes the operand maps visible to the TMA (written by
// the host) and prefetches them, and initialises each stage's full barrier (the producer's one
// arrival, and `converters` more: the e4m3 converter warps), empty barrier (`empty_arrivals`) and,
// with converters, raw barrier (the producer's). The caller fences the initialisation.
template <class T>
__device__ __forceinline__ void prefill_init_stages(const PrefillSmem<T>& sm,
                                                    const TensorMap* a_map, const TensorMap* w_map,
                                                    unsigned empty_arrivals,
                                                    unsigned converters = 0) {
  using namespace hexel;
  tma::acquire_map(a_map);
  tma::acquire_map(w_map);
  tma::prefetch_map(a_map);
  tma::prefetch_map(w_map);
  for (unsigned s = 0; s < T::kStages; ++s) {
    mbarrier::init(sm.full + 8 * s, 1 + converters);
    mbarrier::init(sm.empty + 8 * s, empty_arrivals);
    if (converters > 0) mbarrier::init(sm.raw + 8 * s, 1);
  }
}

// The converters of an e4m3 weight's prefill GEMM: warps 1-3 of the producer's warpgroup, over
// the CTA's tiles in the producer's order, each K block's raw rows into the stage's bf16 block
// (gemm_e4m3.cuh). Tile row r is weight row tn · kBlockN + r; with SwiGLU the 128 gate rows, then
// their up rows N further.
enum : unsigned { kPrefillConverterWarps = 3 };  // an enumerator: no global of the module
template <int M, int N, int K, class Epi, class WF, class T>
__device__ __forceinline__ void prefill_convert(const PrefillSmem<T>& sm, const float* w_scale) {
  using G = PrefillGemm;
  constexpr unsigned kHalf = G::kBlockN / 2;
  hexel::mbarrier::StageRing<T::kStages> ring;
  for (unsigned u = blockIdx.x; u < T::kUnits; u += gridDim.x) {
    unsigned tm, tn;
    prefill_tile_coords(u, T::kTilesM, T::kTilesN, tm, tn);
    auto row_of = [&](unsigned r) {
      return Epi::kSplitW ? (r < kHalf ? 0u : N - kHalf) + tn * kHalf + r : tn * G::kBlockN + r;
    };
    e4m3_convert_stages<WF, G::kBlockN, 32 * kPrefillConverterWarps>(
        ring, T::kKBlocks, sm.raw, sm.full, w_scale, threadIdx.x - 32, threadIdx.x % 32, row_of,
        [&](unsigned s) { return sm.w_raw(s); }, [&](unsigned s) { return sm.w(s); });
  }
}

// The whole kernel; the epilogue writes through `out_map`: a bf16 TMA store, or the residual's
// f32 TMA reduction into x. W_BH, W_BOX: the weight's source (load_weight_rows).
// kCover (W_BOX > kBlockN): the slot image's tiles cut the tile's kBlockN rows (the 8B's 48-row
// qkv tiles in 256) and one box of W_BOX rows of whole image tiles covers them, one copy a stage
// where boxes of gcd(kBlockN, W_BH) rows would take several (16 for the 8B's qkv: a TMA copy
// costs per box, not per byte; docs/performance.md). The stage holds W_BOX rows (so 3 stages of 288
// rows where 4 of 256 fit) and tile tn's rows start (tn · kBlockN) % W_BH rows in: whole 8-row
// swizzle repeats (kernel_plan.cpp, prefill_image_box_rows), so the W descriptor's base offset
// stays 0 and the bits are the same.
// WF: the weight's format (gemm_e4m3.cuh); an e4m3 weight (its 2D map) has its scales at w_scale,
// and warps 1-3 of the producer's warpgroup convert its stages.
template <int M, int N, int K, class Epi, unsigned W_BH = 0, unsigned W_BOX = 0,
          class WF = Bf16Weight>
__device__ __forceinline__ void prefill_gemm_body(const TensorMap* a_map, const TensorMap* w_map,
                                                  const TensorMap* out_map,
                                                  const float* w_scale = nullptr) {
  using G = PrefillGemm;
  using T = PrefillTiling<M, N, K, Epi, W_BH, W_BOX, WF::kRawRowBytes>;
  using namespace hexel;
  extern __shared__ unsigned char smem_raw[];
  const PrefillSmem<T> sm(smem_raw);
  const unsigned epilogue = sm.epilogue, full = sm.full, empty = sm.empty;
  auto a_stage = [&](unsigned s, unsigned = 0) { return sm.a(s); };
  auto w_stage = [&](unsigned s) { return sm.w(s); };
  const unsigned wg = warp_index() / 4;

  if (threadIdx.x == 0) {
    // One arrival per consumer warp; with an e4m3 weight one per converter warp too.
    prefill_init_stages(sm, a_map, w_map, G::kConsumers * 4,
                        WF::kE4m3 ? kPrefillConverterWarps : 0);
    mbarrier::fence_init();
  }
  __syncthreads();

  if (wg == 0) {
    setmaxnreg_dec<40>();
    if constexpr (WF::kE4m3) {
      auto w_raw = [&](unsigned s) { return sm.w_raw(s); };
      if (threadIdx.x == 0)
        prefill_gemm_produce<T, N, Epi, W_BH, W_BOX, WF>(a_map, w_map, full, empty, a_stage, w_raw,
                                                         sm.raw);
      else if (threadIdx.x >= 32)
        prefill_convert<M, N, K, Epi, WF>(sm, w_scale);
    } else if (threadIdx.x == 0) {
      prefill_gemm_produce<T, N, Epi, W_BH, W_BOX>(a_map, w_map, full, empty, a_stage, w_stage);
    }
  } else {
    setmaxnreg_inc<232>();
    const unsigned cw = wg - 1;  // consumer index: rows 64 cw .. 64 cw + 63 of the tile
    const unsigned warp = warp_index() % 4;
    const unsigned lane = threadIdx.x % 32;
    const bool wg_leader = threadIdx.x % 128 == 0;
    // Each consumer warpgroup's leader issues its TMA stores (or reductions).
    if (wg_leader) {
      hexel::tma::acquire_map(out_map);
      tma::prefetch_map(out_map);
    }
    mbarrier::StageRing<T::kStages> ring;
    float d[G::kBlockN / 2];
    for (unsigned u = blockIdx.x; u < T::kUnits; u += gridDim.x) {
      unsigned tm, tn;
      prefill_tile_coords(u, T::kTilesM, T::kTilesN, tm, tn);
      // This consumer's 64 rows of the A stage; the tile's W rows (kCover: from their offset).
      const unsigned w_at = T::w_offset(tn);
      const unsigned prev = wgmma_k_loop<G::kBlockN>(
          d, ring, T::kKBlocks, full, empty, lane,
          [&](unsigned st, unsigned) { return a_stage(st) + cw * 64 * 128; },
          [&](unsigned st) { return w_stage(st) + w_at; });
      if (lane == 0) mbarrier::arrive(empty + 8 * prev);

      prefill_gemm_epilogue<Epi>(d, out_map, epilogue, tm, tn, cw, warp, lane, wg_leader);
    }
    if (wg_leader) tma::wait_group<0>();
  }
}

// y[m, n] = bf16((A · Wᵀ)[m, n]); y through a 64 x 64-box map of [M, N].
template <int M, int N, int K, unsigned W_BH = 0, unsigned W_BOX = 0>
__global__ void __launch_bounds__(PrefillGemm::kThreads, 1)
    gemm_prefill_bf16(const TensorMap* a_map, const TensorMap* w_map, const TensorMap* y_map) {
  pdl_entry();
  prefill_gemm_body<M, N, K, EpilogueStoreBf16, W_BH, W_BOX>(a_map, w_map, y_map);
}

// x[m, n] += (A · Wᵀ)[m, n], x the f32 residual stream [M, N] through an f32 map with 64 x 32
// boxes: the attention output and down projections.
template <int M, int N, int K, unsigned W_BH = 0, unsigned W_BOX = 0>
__global__ void __launch_bounds__(PrefillGemm::kThreads, 1)
    gemm_prefill_residual(const TensorMap* a_map, const TensorMap* w_map, const TensorMap* x_map) {
  pdl_entry();
  prefill_gemm_body<M, N, K, EpilogueResidual, W_BH, W_BOX>(a_map, w_map, x_map);
}

// act[m, j] = bf16(silu(g) · u), g = (A · Wᵀ)[m, j], u = (A · Wᵀ)[m, I + j], W = gate_up [2I, K]
// (map with 128-row boxes), act through a 64 x 64-box map of [M, I].
template <int M, int I, int K, unsigned W_BH = 0, unsigned W_BOX = 0>
__global__ void __launch_bounds__(PrefillGemm::kThreads, 1)
    gemm_prefill_swiglu(const TensorMap* a_map, const TensorMap* w_map, const TensorMap* act_map) {
  pdl_entry();
  prefill_gemm_body<M, I, K, EpilogueSwiGlu, W_BH, W_BOX>(a_map, w_map, act_map);
}

// The three kernels on an e4m3 weight (gemm_e4m3.cuh): W's map is over its e4m3 bytes (256 x
// 64-byte boxes, SwiGLU 128, no swizzle), `w_scale` its f32 scales of SBR x SBC blocks; the
// results are the bf16 kernels' on W' = bf16(float(q) · s), bit for bit.
template <int M, int N, int K, unsigned SBR, unsigned SBC>
__global__ void __launch_bounds__(PrefillGemm::kThreads, 1)
    gemm_prefill_e4m3_bf16(const TensorMap* a_map, const TensorMap* w_map, const float* w_scale,
                           const TensorMap* y_map) {
  pdl_entry();
  prefill_gemm_body<M, N, K, EpilogueStoreBf16, 0, 0, E4m3Weight<N, K, SBR, SBC>>(a_map, w_map,
                                                                                  y_map, w_scale);
}

template <int M, int N, int K, unsigned SBR, unsigned SBC>
__global__ void __launch_bounds__(PrefillGemm::kThreads, 1)
    gemm_prefill_e4m3_residual(const TensorMap* a_map, const TensorMap* w_map, const float* w_scale,
                               const TensorMap* x_map) {
  pdl_entry();
  prefill_gemm_body<M, N, K, EpilogueResidual, 0, 0, E4m3Weight<N, K, SBR, SBC>>(a_map, w_map,
                                                                                 x_map, w_scale);
}

template <int M, int I, int K, unsigned SBR, unsigned SBC>
__global__ void __launch_bounds__(PrefillGemm::kThreads, 1)
    gemm_prefill_e4m3_swiglu(const TensorMap* a_map, const TensorMap* w_map, const float* w_scale,
                             const TensorMap* act_map) {
  pdl_entry();
  prefill_gemm_body<M, I, K, EpilogueSwiGlu, 0, 0, E4m3Weight<2 * I, K, SBR, SBC>>(
      a_map, w_map, act_map, w_scale);
}

// The QKV projection's rows are packed in RoPE's pair order (docs/artifact.md, layout
// qkv_rope_pairs; support/qkv_layout.hpp is the host form): within each head of D rows, for g = 0 ..
// D / 8 - 1, the head's rows 4g .. 4g + 3, then D / 2 + 4g .. D / 2 + 4g + 3. So every GEMM writes
// qkv in that order, and a tile of whole 8-row groups holds both elements of each rotated pair
// (decode_layer_persistent's QKV tiles: qkv_rope_pairs). qkv_pair_pos: where element d of a head
// is stored within it.
__host__ __device__ constexpr int qkv_pair_pos(int d, int D) {
  return d % (D / 2) / 4 * 8 + d / (D / 2) * 4 + d % 4;
}

// RoPE (rotate-half) of the pair (x1, x2) = elements (j, j + D / 2) of a head at position pos:
// rope_first gives element j, rope_second element j + D / 2. The angle is rounded to f32 as
// transformers computes it; reducing it by 2π in f64 keeps sincos on its short path (the
// long-argument path needs local memory). The products and sums are spelled out (no contraction
// left to the compiler), so every kernel that rotates a pair gives it the same bits
// (qkv_rope_row; decode_layer_persistent's QKV tiles, qkv_rope_pairs).
template <class Rope>
__device__ __forceinline__ void rope_sincos(int pos, int j, float& sn, float& cs) {
  const float angle = static_cast<float>(max(pos, 0)) * Rope::inv_freq(j);
  const double turns = rint(static_cast<double>(angle) * 0.15915494309189535);
  __sincosf(static_cast<float>(fma(-turns, 6.283185307179586, static_cast<double>(angle))), &sn, &cs);
}
__device__ __forceinline__ float rope_first(float x1, float x2, float cs, float sn) {
  return __fmaf_rn(x1, cs, -__fmul_rn(x2, sn));
}
__device__ __forceinline__ float rope_second(float x1, float x2, float cs, float sn) {
  return __fmaf_rn(x2, cs, __fmul_rn(x1, sn));
}

// The QKV epilogue of one (token m, head) row of D values: adds the bias (Qwen2), applies the
// per-head RMSNorm to q and k (Qwen3), rotates q and k (RoPE, rotate-half; Rope::inv_freq(i),
// llama3 scaling included), then writes q (f32, [M, HQ D]) or appends k / v to the token's KV
// page. `v` is thread d's element of the bf16 projection, as f32. Rows whose position is negative
// are padding: their k and v are not written. Threads d >= D (a GEMM's warpgroup when D < 128)
// only take part in the barriers; `sync` is the barrier of the threads running the row, `head_v`
// D floats and `scratch` 4 floats of shared memory. The norm's sum has one order over D threads
// (warp butterflies, then the warp sums), so qkv_rope_append_rows and the small GEMM's
// folded epilogue (gemm_small.cuh) give a row the same bits. KV: the cache's element format
// (common.cuh), which encodes the appended k and v.
template <int HQ, int HKV, int D, bool BIAS, bool QK_NORM, float EPS, int PAGE, int MAXP, long long PAGE_ELEMS,
          class Rope, class KV = KvBf16, class Sync>
__device__ __forceinline__ void qkv_rope_row(float v, int head, int m, int d, const float* bias,
                                             const float* q_norm, const float* k_norm, const int* positions,
                                             const int* token_seq, const int* page_tables,
                                             typename KV::Elem* kv_layer, float* q_out, float* head_v,
                                             float* scratch, Sync sync) {
  static_assert(D % 32 == 0 && D <= 256, "one thread per element of a head");
  const bool on = d < D;
  const bool is_q = head < HQ, is_k = !is_q && head < HQ + HKV;
  if constexpr (BIAS) {
    if (on) v += bias[head * D + d];
  }
  if constexpr (QK_NORM) {
    if (is_q || is_k) {
      constexpr int kWarps = D / 32;
      float ss = warp_sum(v * v);
      if constexpr (kWarps > 1) {
        sync();  // scratch may still be read by a previous row
        if (d % 32 == 0 && on) scratch[d / 32] = ss;
        sync();
        ss = warp_sum(d % 32 < kWarps ? scratch[d % 32] : 0.f);
      }
      if (on) v = v * rsqrtf(ss / D + EPS) * (is_q ? q_norm : k_norm)[d];
    }
  }
  const int pos = positions[m];
  if (is_q || is_k) {
    sync();  // head_v may still be read by a previous row
    if (on) head_v[d] = v;
    sync();
    if (on) {
      const int j = d % (D / 2);
      float sn, cs;
      rope_sincos<Rope>(pos, j, sn, cs);
      const float x1 = head_v[j], x2 = head_v[j + D / 2];
      v = d < D / 2 ? rope_first(x1, x2, cs, sn) : rope_second(x1, x2, cs, sn);
    }
  }
  if (!on) return;
  if (is_q) {
    q_out[static_cast<long long>(m) * HQ * D + head * D + d] = v;
    return;
  }
  if (pos < 0) return;
  const int kv = is_k ? 0 : 1, kvh = head - HQ - kv * HKV;
  const int page = page_tables[token_seq[m] * MAXP + pos / PAGE];
  kv_layer[page * PAGE_ELEMS + (static_cast<long long>(kv * HKV + kvh) * PAGE + pos % PAGE) * D + d] =
      KV::encode(v, kv);
}

// The QKV epilogue as its own kernel, after a GEMM wrote the projection qkv [M, (HQ + 2 HKV) D]
// (bf16, as transformers' projection is; each head's elements in RoPE's pair order, qkv_pair_pos):
// block (head, m), D threads, qkv_rope_row. Decode
// buckets of up to 8 tokens fold it into the QKV GEMM instead (gemm_small_norm_qkv). KV: the
// cache's element format.
template <int HQ, int HKV, int D, bool BIAS, bool QK_NORM, float EPS, int PAGE, int MAXP,
          long long PAGE_ELEMS, class Rope, class KV = KvBf16>
__global__ void __launch_bounds__(D)
    qkv_rope_append_rows(const bf16* qkv, const float* bias, const float* q_norm,
                         const float* k_norm, const int* positions, const int* token_seq,
                         const int* page_tables, typename KV::Elem* kv_layer, float* q_out) {
  pdl_entry();
  __shared__ float head_v[D];
  __shared__ float scratch[D / 32];
  const int head = blockIdx.x, m = blockIdx.y, d = threadIdx.x;
  const float v = __uint_as_float(static_cast<unsigned>(qkv[static_cast<long long>(m) * (HQ + 2 * HKV) * D +
                                                            head * D + qkv_pair_pos(d, D)])
                                  << 16);
  qkv_rope_row<HQ, HKV, D, BIAS, QK_NORM, EPS, PAGE, MAXP, PAGE_ELEMS, Rope, KV>(
      v, head, m, d, bias, q_norm, k_norm, positions, token_seq, page_tables, kv_layer, q_out, head_v, scratch,
      [] { __syncthreads(); });
}

}  // namespace telos_kernels
