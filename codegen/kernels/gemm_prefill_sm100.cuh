#pragma once
// The prefill GEMM on Blackwell (sm_100a): gemm_prefill.cuh's kernels with the tensor-core work on
// tcgen05. The same operands and tensor maps, tiles (128 x 256), tile order, persistent grid,
// block (384 threads), dynamic shared memory and epilogues, so that an sm_100a lowering row names
// these templates where the sm_90a rows name gemm_prefill_*, and nothing else changes; the TMA
// producer, the stage ring, the weight's sources and the epilogue's chunk protocol are that file's
// code.
//
// Roles, by warp: 0 the TMA producer (one thread, prefill_gemm_produce); 1 allocates Tensor
// Memory, and one of its threads issues every MMA (hexel/tcgen05_accum.cuh: per 64-wide K block
// four tcgen05.mma kind::f16, M 128, N 256, K 16, into an f32 accumulator in Tensor Memory, the
// stage released by tcgen05.commit once they have read it); 2 and 3 idle (the block keeps the
// Hopper kernel's 384 threads); 4-11 the epilogue, two warpgroups of 128 output columns each
// (PrefillEpilogueSm100). Tensor Memory holds two accumulators of 256 columns (all 512): the MMAs
// of a CTA's next tile run into one while the epilogue drains the other, handed over through an
// accumulator-full barrier (tcgen05.commit) and an accumulator-empty barrier (every epilogue
// thread, once its loads are done).
//
// The MMA atom and its accumulator access are a policy (the kernel body's Atom), so that the same
// kernel runs on Hopper as its twin and an H200 checks everything but the atom:
// - Shared by both: the tiling, tile order and persistent loop, the producer and its stage ring,
//   the roles of warps 0 and 4-11, the epilogue's chunks and pieces (PrefillEpilogueSm100), their
//   arithmetic, the swizzled chunk-buffer stores (prefill_sm100_put) and the TMA hand-off
//   (prefill_chunk_acquire / _release), the box coordinates, and the kernels' interface.
// - PrefillTcgen05 (gemm_prefill_sm100_*): as above; an epilogue thread holds one tile row and
//   loads 32 of its columns a piece with tcgen05.ld; 64 threads share a chunk buffer.
// - PrefillWgmmaTwin (sm_90a, gemm_prefill_sm100_twin_*): each epilogue warpgroup issues wgmma
//   m64nNk16 for its own output columns over the tile's 128 rows (N 128; SwiGLU 64 gate and 64 up
//   columns) from the same stages and keeps the accumulator in registers, tile after tile (no
//   accumulator hand-off, so no second accumulator); a thread holds 32 values of each piece in
//   wgmma's fragment layout (PrefillTwinEpilogue), 2 adjacent columns a store, and the
//   warpgroup's 128 threads share its two chunk buffers. Warps 1-3 idle.
//
// The CTA pair (gemm_prefill_sm100_pair_*, the form sm_100a's prefill buckets take): a cluster of
// two CTAs computes a 256 x 256 tile with M = 256 tcgen05.mma.cta_group::2, each CTA loading its
// own 128 A rows and half of the tile's W rows (128; SwiGLU: rank 0 the gate rows, rank 1 their up
// rows, so accumulator column j is gate j and 128 + j up j as on one CTA). Why: per 64-wide K
// block a one-CTA tile loads 16 KB of A and 32 KB of W for 128 x 256 x 64 x 2 = 4.2 MFLOP; a pair
// CTA loads 16 + 16 = 32 KB for the same 4.2 MFLOP (the pair's 8.4 over two SMs), so the
// L2-to-SM traffic drops by a third at the same MMA rate, which is what limits a large GEMM on
// B200. The stage is 32 KB, so 6 stages fit where 4 of 48 KB do: 6 x (32768 + 16) + 4 x 8192
// (chunk buffers) + 1024 (alignment) = 230496 bytes of 232448, beside 48 static. Wiring: the
// leader (rank 0) arms its full barrier for both CTAs' bytes and both producers' boxes complete on
// it (.cta_group::2); the leader's MMA thread issues the MMAs once it is full and commits each
// stage and each accumulator to the barriers of both CTAs (multicast), which free the stage in
// both and hand each CTA's epilogue its own 128 rows (Layout A: a CTA's rows in its own lanes, read
// as on one CTA); every epilogue thread of both CTAs gives the accumulator back on the leader's
// empty barrier. Tensor Memory is allocated by the pair (cta_group::2). The tiles, tile order
// (over clusters), persistent loop, epilogue and chunk protocol are the one-CTA form's; only the
// atom (PrefillTcgen05Pair), the stage's contents (PrefillPairTiling, prefill_pair_produce) and the
// barriers differ. It reads the weight's own 2D map only: where a slot image would be read the
// lowering keeps the one-CTA form (kernel_plan's image boxes are planned for 256-row tiles).
// Its Hopper twin (gemm_prefill_sm100_pair_twin_*, PrefillWgmmaPairTwin) runs the pair's tiles,
// tile order, stage split and cluster barriers on an H100/H200: each CTA multicasts its W half to
// both, so each stage holds the whole tile (48 KB, 4 stages) and each CTA's wgmma computes its 128
// rows; a stage goes back to the empty barriers of both CTAs.
//
// Reduction order, for batch invariance: every output element is one chain of tcgen05.mma over K
// in 16-wide steps, in order, from zero, whatever M is. The twin's chain is the Hopper GEMM's
// (wgmma, the tokens as A), so it gives gemm_prefill's bits. The PTX ISA does not state that an
// M = 256 cta_group::2 MMA gives a row the bits an M = 128 cta_group::1 MMA gives it (the small-M
// GEMM's and the decode rows' chain); that waits for the first B200 run, of a test comparing the
// sm_100a small and prefill GEMMs bit for bit (test/codegen/gpu_kernels_test.cpp has the Hopper
// form, SmallGemmMatchesPrefillGemmBitForBit, and the twins').
//
// The index math is host-callable (PrefillEpilogueSm100, PrefillTwinEpilogue;
// test/codegen/prefill_epilogue_sm100_test checks it against hexel/tcgen05_model.h and wgmma's
// fragment layout); the tcgen05 kernels compile under NVRTC for sm_100a only
// (test/codegen/lit/prefill_sm100_assembly.test assembles every instance the real configs need),
// the twins for sm_90a (test/codegen/lit/sm100_twin_assembly.test).
#include "gemm_prefill_shape.cuh"
#include "hexel/swizzle.cuh"
#include "hexel/tcgen05_accum.cuh"

namespace telos_kernels {

using PrefillAccum = hexel::tcgen05::Bf16Accum<PrefillGemm::kBlockN>;

// Warp roles and Tensor Memory (enumerators: see PrefillTiling).
struct PrefillSm100 {
  enum : unsigned {
    kProducerWarp = 0,
    kMmaWarp = 1,
    kFirstEpilogueWarp = 4,
    kAccumulators = 2,
    kTmemColumns = kAccumulators * PrefillGemm::kBlockN,  // all 512
  };
};

// The epilogue's index math for an epilogue of shape Shape (gemm_prefill_shape.cuh). Epilogue
// warp e = warp - 4 (0..7) belongs to warpgroup c = e / 4, which writes the tile's output columns
// c · kGroupCols ..; warp % 4 = q is its lane quarter, the only Tensor Memory lanes it may read, so
// thread (warp, lane) holds tile row 32 q + lane (PrefillAccum::ld_taddr). The rows 64 p .. 64 p +
// 63 (p = q / 2) of warpgroup c leave through chunk buffer 2 c + p, shared by its 64 threads (one
// 64-row TMA box of kChunkCols columns a chunk). A chunk is loaded in pieces of 32 columns, one
// tcgen05.ld .32x32b.x32 each (SwiGLU two: the gate columns and their up columns kBlockN / 2 on),
// and written to the buffer in 16-byte stores of kVecRegs values.
template <class Shape>
struct PrefillEpilogueSm100 {
  enum : unsigned {
    kGroupCols = Shape::kOutCols / PrefillGemm::kConsumers,
    kChunks = kGroupCols / Shape::kChunkCols,
    kPieceCols = PrefillAccum::kLoadColumns,
    kPieces = Shape::kChunkCols / kPieceCols,
    kElemBytes = Shape::kResidual ? 4 : 2,
    kVecRegs = 16 / kElemBytes,
    kUpOffset = PrefillGemm::kBlockN / 2,  // SwiGLU: up row j of a tile is W row kBlockN / 2 + j
  };
  static_assert(kGroupCols % Shape::kChunkCols == 0 && Shape::kChunkCols % kPieceCols == 0 &&
                    Shape::kChunkCols * kElemBytes == 128,
                "a chunk row is one 128-byte swizzle span of whole pieces");

  // The tile's output column of register r of piece `piece` of chunk `chunk` in warpgroup c.
  static HEXEL_HOST_DEVICE constexpr unsigned out_col(unsigned c, unsigned chunk, unsigned piece,
                                                      unsigned r) {
    return c * kGroupCols + chunk * Shape::kChunkCols + piece * kPieceCols + r;
  }
  // The accumulator column a piece's load starts at. Accumulator column n is W row n of the tile's
  // stage, so for a store or a residual it is output column n; SwiGLU's stage holds the gate rows,
  // then the up rows (prefill_gemm_produce), so gate j is column j and up j column kUpOffset + j.
  static HEXEL_HOST_DEVICE constexpr unsigned acc_col(unsigned c, unsigned chunk, unsigned piece) {
    return out_col(c, chunk, piece, 0);
  }
  static HEXEL_HOST_DEVICE constexpr unsigned group(unsigned warp) {
    return (warp - PrefillSm100::kFirstEpilogueWarp) / 4;
  }
  // The tile row thread (warp, lane) holds.
  static HEXEL_HOST_DEVICE constexpr unsigned row(unsigned warp, unsigned lane) {
    return 32 * (warp % 4) + lane;
  }
  // The chunk buffer (of PrefillGemm::kChunkBytes) of warp `warp`'s rows, and the first thread
  // of the 64 that share it, which hands it to the TMA.
  static HEXEL_HOST_DEVICE constexpr unsigned buffer(unsigned warp) {
    return 2 * group(warp) + warp % 4 / 2;
  }
  static HEXEL_HOST_DEVICE constexpr bool leader(unsigned warp, unsigned lane) {
    return warp % 2 == 0 && lane == 0;
  }
  // Byte offset, before the swizzle, of register r of piece `piece` in its chunk buffer: row
  // row(warp, lane) % 64 of the box, 128 bytes a row.
  static HEXEL_HOST_DEVICE constexpr unsigned chunk_offset(unsigned warp, unsigned lane,
                                                           unsigned piece, unsigned r) {
    return row(warp, lane) % 64 * 128 + (piece * kPieceCols + r) * kElemBytes;
  }
  // The output coordinates (column, row) of the box of chunk `chunk` of tile (tm, tn).
  static HEXEL_HOST_DEVICE constexpr unsigned box_col(unsigned tn, unsigned c, unsigned chunk) {
    return tn * Shape::kOutCols + out_col(c, chunk, 0, 0);
  }
  static HEXEL_HOST_DEVICE constexpr unsigned box_row(unsigned tm, unsigned warp) {
    return tm * PrefillGemm::kBlockM + row(warp, 0) / 64 * 64;
  }
};

// The Hopper twin's accumulator and its map into the chunk buffers (PrefillWgmmaTwin), for an
// epilogue of shape Shape. Epilogue warpgroup c issues the wgmma for its own kGroupCols output
// columns over all 128 tile rows: per 64-row half h2 and chain (0 the gate's or only product, 1
// SwiGLU's up), one m64nNk16 accumulator (N = kGroupCols) of the stage's W rows w_row(c, chain) ..,
// kept in registers d[h2 kChains + chain]. Thread (warp, lane) of the warpgroup holds, of n-block
// J (8 columns) of each, registers 4J + 2h + e: row 64 h2 + 16 (warp % 4) + lane / 4 + 8h, column
// 8J + 2 (lane % 4) + e (PTX ISA, wgmma "Register Fragments", matrix D of .m64nNk16). So of
// piece `piece` of chunk `chunk` (PrefillEpilogueSm100's 32 columns) it holds runs of two
// adjacent columns, j = 0..3 and h, h2 = 0..1: 32 values, as a tcgen05 thread does, in both of
// its warpgroup's chunk buffers (rows 64 h2 ..), which the warpgroup's 128 threads share.
template <class Shape>
struct PrefillTwinEpilogue {
  using E = PrefillEpilogueSm100<Shape>;
  enum : unsigned {
    kChains = Shape::kSplitW ? 2 : 1,
    kN = E::kGroupCols,  // wgmma's N
    kRun = 2,            // adjacent columns of one row a thread holds
  };
  // The tile's first W row (accumulator column) of chain `chain` of warpgroup c.
  static HEXEL_HOST_DEVICE constexpr unsigned w_row(unsigned c, unsigned chain) {
    return chain * E::kUpOffset + c * E::kGroupCols;
  }
  // The tile row of thread (warp, lane)'s runs in row half h2, fragment half h.
  static HEXEL_HOST_DEVICE constexpr unsigned row(unsigned warp, unsigned lane, unsigned h2,
                                                  unsigned h) {
    return 64 * h2 + 16 * (warp % 4) + lane / 4 + 8 * h;
  }
  // The column inside its chunk of run j of piece `piece`.
  static HEXEL_HOST_DEVICE constexpr unsigned chunk_col(unsigned lane, unsigned piece, unsigned j) {
    return piece * E::kPieceCols + 8 * j + 2 * (lane % 4);
  }
  // The register of that run's first value in its chain.
  static HEXEL_HOST_DEVICE constexpr unsigned reg(unsigned chunk, unsigned piece, unsigned j,
                                                  unsigned h) {
    return 4 * ((chunk * Shape::kChunkCols + piece * E::kPieceCols) / 8 + j) + 2 * h;
  }
  // The chunk buffer of tile row `row` in warpgroup c, and the byte offset (before the swizzle)
  // of column `col` of that row inside it.
  static HEXEL_HOST_DEVICE constexpr unsigned buffer(unsigned c, unsigned row) {
    return 2 * c + row / 64;
  }
  static HEXEL_HOST_DEVICE constexpr unsigned offset(unsigned row, unsigned col) {
    return row % 64 * 128 + col * E::kElemBytes;
  }
};

}  // namespace telos_kernels

#if defined(__CUDACC__)
#include "gemm_prefill.cuh"
#include "hexel/cluster.cuh"
#include "hexel/ld_st.cuh"
#include "hexel/mbarrier.cuh"
#include "hexel/sync.cuh"
#include "hexel/tcgen05.cuh"
#include "hexel/tma.cuh"
#include "wgmma_chains.cuh"

namespace telos_kernels {

// The CTAs that share a tile: one (CTAS 1), or the pair of a cluster of two (CTAS 2, the tile's
// 256 rows 128 a CTA): the persistent loop's first unit and stride (a unit a cluster), this CTA's
// rank, its 128-row tile of the unit's tile tm (rank 1's rows follow rank 0's), and the barrier
// every thread of the CTAs meets at (PTX: bar.sync, or barrier.cluster.arrive/wait).
template <unsigned CTAS>
struct PrefillCtas {
  static_assert(CTAS == 1 || CTAS == 2, "one CTA or a CTA pair");
  enum : unsigned { kCtas = CTAS };
  static __device__ __forceinline__ unsigned first_unit() { return blockIdx.x / CTAS; }
  static __device__ __forceinline__ unsigned unit_stride() { return gridDim.x / CTAS; }
  static __device__ __forceinline__ unsigned rank() {
    if constexpr (CTAS == 1)
      return 0;
    else
      return hexel::cluster::cta_rank();
  }
  static __device__ __forceinline__ unsigned cta_tm(unsigned tm) { return tm * CTAS + rank(); }
  static __device__ __forceinline__ void sync() {
    if constexpr (CTAS == 1)
      __syncthreads();
    else
      hexel::cluster::sync();
  }
};

// The tiling of an instance on CTAS CTAs: PrefillTiling, or for a pair PrefillPairTiling with
// PAIR_W_ROWS W rows a stage (which reads the weight's own map: W_BH 0).
template <unsigned CTAS, unsigned PAIR_W_ROWS, int M, int N, int K, class Epi, unsigned W_BH,
          unsigned W_BOX>
struct PrefillTilingFor {
  using type = PrefillTiling<M, N, K, Epi, W_BH, W_BOX>;
};
template <unsigned PAIR_W_ROWS, int M, int N, int K, class Epi, unsigned W_BH, unsigned W_BOX>
struct PrefillTilingFor<2, PAIR_W_ROWS, M, N, K, Epi, W_BH, W_BOX> {
  static_assert(W_BH == 0 && W_BOX == 0, "a CTA pair reads the weight's own 2D map");
  using type = PrefillPairTiling<M, N, K, Epi, PAIR_W_ROWS>;
};

// A CTA pair's producer (one thread in each CTA): for each of the cluster's tiles, every K block's
// A rows of this CTA (rows 128 rank .. of the tile) and its half of the tile's W rows (SwiGLU:
// rank 0 the gate rows, rank 1 their up rows, so accumulator column j is gate j and 128 + j up j
// as on one CTA; else the tile's rows 128 rank ..). tcgen05 (TWIN false): into its stage, the
// bytes of both CTAs completing on the leader's full barrier, which the leader arms for both
// (tma::load_pair). The Hopper twin: its half of W multicast to the same rows of both CTAs'
// stages, so each holds the whole tile, its full barrier armed for its A and both halves.
template <class T, int N, class Epi, bool TWIN>
__device__ __forceinline__ void prefill_pair_produce(const TensorMap* a_map, const TensorMap* w_map,
                                                     const PrefillSmem<T>& sm) {
  using namespace hexel;
  using C = PrefillCtas<2>;
  constexpr unsigned kHalf = PrefillGemm::kBlockN / 2;  // the W rows a CTA loads
  constexpr unsigned short kPair = 0b11;
  const unsigned rank = C::rank(), half = Epi::kSplitW ? rank : 0u;
  mbarrier::StageRing<T::kStages> ring;
  for (unsigned u = C::first_unit(); u < T::kUnits; u += C::unit_stride()) {
    unsigned tm, tn;
    prefill_tile_coords(u, T::kTilesM, T::kTilesN, tm, tn);
    const unsigned a_row = C::cta_tm(tm) * T::kBlockM;
    const unsigned w_row = Epi::kSplitW ? tn * kHalf : tn * PrefillGemm::kBlockN + rank * kHalf;
    for (unsigned kb = 0; kb < T::kKBlocks; ++kb) {
      mbarrier::wait_parity_cluster(sm.empty + 8 * ring.index, ring.phase ^ 1u);
      const unsigned bar = sm.full + 8 * ring.index;
      if constexpr (TWIN) {
        mbarrier::arrive_expect_tx(bar, T::kStageBytes);
        tma::load(sm.a(ring.index), a_map, bar, kb * T::kBlockK, a_row);
        load_weight_rows<kHalf, 0, 0, true>(sm.w(ring.index) + rank * kHalf * 128, w_map, bar, kb,
                                            w_row, half, N, kPair);
      } else {
        if (rank == 0) mbarrier::arrive_expect_tx(bar, 2 * T::kStageBytes);
        const unsigned leader_bar = cluster::map_shared(bar, 0);
        tma::load_pair(sm.a(ring.index), a_map, leader_bar, kb * T::kBlockK, a_row);
        tma::load_pair(sm.w(ring.index), w_map, leader_bar, kb * T::kBlockK, half * N + w_row);
      }
      ring.advance();
    }
  }
}

// The MMA thread (a pair's: the leader's): for each of the CTA's tiles, wait until the epilogue
// (a pair's: both CTAs') has drained the accumulator it will write (both are free at first), run
// the K loop into it, and commit it to its accumulator-full barrier (a pair's: in both CTAs),
// which completes once every MMA of the tile has.
template <class T, class Ctas, class Accum>
__device__ __forceinline__ void prefill_sm100_mma(const PrefillSmem<T>& sm, unsigned tmem,
                                                  unsigned accum_full, unsigned accum_empty) {
  using namespace hexel;
  mbarrier::StageRing<T::kStages> ring;
  mbarrier::StageRing<PrefillSm100::kAccumulators> acc;
  for (unsigned u = Ctas::first_unit(); u < T::kUnits; u += Ctas::unit_stride()) {
    unsigned tm, tn;
    prefill_tile_coords(u, T::kTilesM, T::kTilesN, tm, tn);
    const unsigned w_at = T::w_offset(tn);
    if constexpr (Ctas::kCtas == 1)
      mbarrier::wait_parity(accum_empty + 8 * acc.index, acc.phase ^ 1u);
    else
      mbarrier::wait_parity_cluster(accum_empty + 8 * acc.index, acc.phase ^ 1u);
    tcgen05::fence_after_thread_sync();
    Accum::k_loop(
        ring, tmem + acc.index * PrefillGemm::kBlockN, T::kKBlocks, sm.full, sm.empty,
        [&](unsigned s) { return sm.a(s); }, [&](unsigned s) { return sm.w(s) + w_at; });
    Accum::commit_to(accum_full + 8 * acc.index);
    acc.advance();
  }
}

// An epilogue thread's 32 values of one piece (PrefillEpilogueSm100) from the accumulator at
// `acc`: the accumulator columns col .. col + 31 of its row, or for SwiGLU silu(gate) · up of the
// gate columns col .. and the up columns kUpOffset further on. PTX: tcgen05.ld, tcgen05.wait::ld.
template <class Epi>
__device__ __forceinline__ void prefill_sm100_load_piece(float (&v)[32], unsigned acc,
                                                         unsigned warp, unsigned col) {
  using E = PrefillEpilogueSm100<Epi>;
  using namespace hexel;
  uint32_t r[32];
  tcgen05::ld_32x32b(r, PrefillAccum::ld_taddr(acc, warp, col));
  if constexpr (Epi::kSplitW) {
    uint32_t up[32];
    tcgen05::ld_32x32b(up, PrefillAccum::ld_taddr(acc, warp, col + E::kUpOffset));
    tcgen05::wait_ld();
#pragma unroll
    for (unsigned i = 0; i < 32; ++i)
      v[i] = Epi::act(__uint_as_float(r[i]), __uint_as_float(up[i]));
  } else {
    tcgen05::wait_ld();
#pragma unroll
    for (unsigned i = 0; i < 32; ++i) v[i] = __uint_as_float(r[i]);
  }
}

// RUN adjacent output values of one row into chunk buffer `buffer` (of PrefillGemm::kChunkBytes,
// from `epilogue`) at byte offset `offset` before the 128B swizzle: bf16 packed in pairs, the
// residual's f32 as they are, in one 16-, 8- or 4-byte store. With the swizzle a quarter warp's
// eight rows put their 16 bytes in eight different bank groups.
template <class Epi, unsigned RUN>
__device__ __forceinline__ void prefill_sm100_put(unsigned epilogue, unsigned buffer,
                                                  unsigned offset, const float* v) {
  using namespace hexel;
  const unsigned at =
      epilogue + buffer * PrefillGemm::kChunkBytes + swizzled_offset(offset, Swizzle::B128);
  if constexpr (Epi::kResidual && RUN == 4)
    st_shared_v4(at, __float_as_uint(v[0]), __float_as_uint(v[1]), __float_as_uint(v[2]),
                 __float_as_uint(v[3]));
  else if constexpr (Epi::kResidual && RUN == 2)
    st_shared_v2_f32(at, v[0], v[1]);
  else if constexpr (RUN == 8)
    st_shared_v4(at, pack_bf16x2(v[0], v[1]), pack_bf16x2(v[2], v[3]), pack_bf16x2(v[4], v[5]),
                 pack_bf16x2(v[6], v[7]));
  else
    st_shared_b32(at, pack_bf16x2(v[0], v[1]));
}

// The sm_100a atom: two 256-column accumulators in Tensor Memory, filled by the MMA thread and
// drained by the epilogue warps through the accumulator-full and -empty barriers; each 64 epilogue
// threads (one lane half of a warpgroup) share a chunk buffer. CTAS 2 (PrefillTcgen05Pair): the
// CTA pair, whose leader's MMA thread issues cta_group::2 MMAs (M 256) once its full barrier has
// both CTAs' bytes, and whose commits reach the barriers of both CTAs; the accumulators are
// allocated by the pair (the same columns in both), and each CTA's epilogue drains its own 128
// rows and gives the accumulator back on the leader's empty barrier.
template <unsigned CTAS>
struct PrefillTcgen05Of : PrefillCtas<CTAS> {
  using Ctas = PrefillCtas<CTAS>;
  using Accum = hexel::tcgen05::Bf16Accum<PrefillGemm::kBlockN, CTAS>;
  enum : unsigned {
    kEmptyArrivals = 1,  // the MMA thread's tcgen05.commit
    kGroupThreads = 64,
    kGroupBoxes = 1,
  };
  template <int M, int N, int K, class Epi, unsigned W_BH, unsigned W_BOX>
  using Tiling =
      typename PrefillTilingFor<CTAS, PrefillGemm::kBlockN / 2, M, N, K, Epi, W_BH, W_BOX>::type;
  // The producer thread: prefill_gemm_produce, or a pair's prefill_pair_produce.
  template <class T, int N, class Epi, unsigned W_BH, unsigned W_BOX>
  static __device__ __forceinline__ void produce(const TensorMap* a_map, const TensorMap* w_map,
                                                 const PrefillSmem<T>& sm) {
    if constexpr (CTAS == 1) {
      auto a_stage = [&](unsigned s) { return sm.a(s); };
      auto w_stage = [&](unsigned s) { return sm.w(s); };
      prefill_gemm_produce<T, N, Epi, W_BH, W_BOX>(a_map, w_map, sm.full, sm.empty, a_stage,
                                                   w_stage);
    } else {
      prefill_pair_produce<T, N, Epi, false>(a_map, w_map, sm);
    }
  }
  struct State {
    unsigned tmem, accum_full, accum_empty;  // the barriers: full[2], then empty[2]
  };
  // Every thread, as the CTAs' first barrier (thread 0 has initialised the stages): thread 0
  // initialises the accumulators' barriers (the empty one counts every epilogue thread of the
  // CTAs), warp kMmaWarp allocates all 512 columns (a pair's: one warp in each CTA). PTX:
  // tcgen05.alloc, tcgen05.relinquish_alloc_permit, tcgen05.fence.
  static __device__ __forceinline__ State start(unsigned warp) {
    using R = PrefillSm100;
    using namespace hexel;
    __shared__ unsigned long long accum_bars[2 * R::kAccumulators];
    __shared__ unsigned tmem_slot;
    const unsigned accum_full = smem_addr(accum_bars),
                   accum_empty = accum_full + 8 * R::kAccumulators;
    if (threadIdx.x == 0) {
      for (unsigned b = 0; b < R::kAccumulators; ++b) {
        mbarrier::init(accum_full + 8 * b, 1);
        mbarrier::init(accum_empty + 8 * b, CTAS * PrefillGemm::kConsumers * 128);
      }
      mbarrier::fence_init();
    }
    if (warp == R::kMmaWarp) {
      tcgen05::alloc<CTAS>(smem_addr(&tmem_slot), R::kTmemColumns);
      tcgen05::relinquish_alloc_permit<CTAS>();
    }
    tcgen05::fence_before_thread_sync();
    Ctas::sync();
    tcgen05::fence_after_thread_sync();
    return {tmem_slot, accum_full, accum_empty};
  }
  // Warp kMmaWarp: its first thread issues every MMA (a pair's: the leader's).
  template <class T>
  static __device__ __forceinline__ void mma(const State& st, const PrefillSmem<T>& sm,
                                             unsigned lane) {
    if (lane == 0 && Ctas::rank() == 0)
      prefill_sm100_mma<T, Ctas, Accum>(sm, st.tmem, st.accum_full, st.accum_empty);
  }
  // Every thread, at the end: once every tcgen05.ld has completed (wait::ld) and, for a pair, the
  // peer is done with the leader's barriers and the leader's MMAs with the peer's Tensor Memory,
  // the allocating warp frees the columns. PTX: tcgen05.dealloc.
  static __device__ __forceinline__ void finish(const State& st, unsigned warp) {
    using namespace hexel;
    tcgen05::fence_before_thread_sync();
    Ctas::sync();
    if (warp == PrefillSm100::kMmaWarp) {
      tcgen05::fence_after_thread_sync();
      tcgen05::dealloc<CTAS>(st.tmem, PrefillSm100::kTmemColumns);
    }
  }
  // The chunk buffer an epilogue thread writes first, the tile row of its box, and the thread
  // that hands it to the TMA.
  template <class Epi>
  static __device__ __forceinline__ unsigned first_buffer(unsigned warp) {
    return PrefillEpilogueSm100<Epi>::buffer(warp);
  }
  template <class Epi>
  static __device__ __forceinline__ unsigned box_row(unsigned tm, unsigned warp) {
    return PrefillEpilogueSm100<Epi>::box_row(tm, warp);
  }
  template <class Epi>
  static __device__ __forceinline__ bool leader(unsigned warp, unsigned lane) {
    return PrefillEpilogueSm100<Epi>::leader(warp, lane);
  }

  // An epilogue thread's tiles, in the MMA thread's order: each tile's accumulator once it is
  // full, given back once the thread's loads are done.
  template <class T, class Epi>
  struct Tiles {
    State st;
    hexel::mbarrier::StageRing<PrefillSm100::kAccumulators> acc{};
    unsigned now = 0;  // the current tile's accumulator

    __device__ __forceinline__ Tiles(const State& s, const PrefillSmem<T>&) : st(s) {}
    // PTX: tcgen05.fence::after_thread_sync after the wait.
    __device__ __forceinline__ void acquire(unsigned, unsigned, unsigned) {
      hexel::mbarrier::wait_parity(st.accum_full + 8 * acc.index, acc.phase);
      hexel::tcgen05::fence_after_thread_sync();
      now = st.tmem + acc.index * PrefillGemm::kBlockN;
    }
    // PTX: tcgen05.fence::before_thread_sync before the arrival (a pair's: on the leader's
    // barrier, mbarrier.arrive.release.cluster).
    __device__ __forceinline__ void release(unsigned) {
      using namespace hexel;
      tcgen05::fence_before_thread_sync();
      if constexpr (CTAS == 1)
        mbarrier::arrive(st.accum_empty + 8 * acc.index);
      else
        mbarrier::arrive_cluster(cluster::map_shared(st.accum_empty + 8 * acc.index, 0));
      acc.advance();
    }
    // Piece `piece` of chunk `chunk` of warpgroup c: the thread's row, 32 columns, into the chunk
    // buffer in 16-byte stores of kVecRegs values.
    __device__ __forceinline__ void piece(unsigned epilogue, unsigned c, unsigned chunk,
                                          unsigned piece, unsigned warp, unsigned lane) {
      using E = PrefillEpilogueSm100<Epi>;
      float v[32];
      prefill_sm100_load_piece<Epi>(v, now, warp, E::acc_col(c, chunk, piece));
#pragma unroll
      for (unsigned i = 0; i < 32; i += E::kVecRegs)
        prefill_sm100_put<Epi, E::kVecRegs>(epilogue, E::buffer(warp),
                                            E::chunk_offset(warp, lane, piece, i), v + i);
    }
  };
};

using PrefillTcgen05 = PrefillTcgen05Of<1>;
using PrefillTcgen05Pair = PrefillTcgen05Of<2>;

// The sm_90a twin's atom: each epilogue warpgroup holds its columns' accumulator in registers
// (PrefillTwinEpilogue) and runs the K loop itself, tile after tile, releasing each stage; its 128
// threads share its two chunk buffers. Warps 1-3 idle. CTAS 2 (PrefillWgmmaPairTwin): the pair's
// tiles and barriers on Hopper: each CTA's stage holds its 128 A rows and the whole tile's W rows
// (each CTA multicasts its half, prefill_pair_produce), so a stage is released to the empty
// barriers of both CTAs (both producers write it), and the CTAs meet at the start (the peer's
// barriers initialised before a multicast reaches them) and at the end (no CTA exits while the
// other may still arrive on its barriers).
template <unsigned CTAS>
struct PrefillWgmmaTwinOf : PrefillCtas<CTAS> {
  using Ctas = PrefillCtas<CTAS>;
  enum : unsigned {
    kEmptyArrivals = CTAS * 4 * PrefillGemm::kConsumers,  // each epilogue warp's first lane
    kGroupThreads = 128,
    kGroupBoxes = 2,
  };
  template <int M, int N, int K, class Epi, unsigned W_BH, unsigned W_BOX>
  using Tiling =
      typename PrefillTilingFor<CTAS, PrefillGemm::kBlockN, M, N, K, Epi, W_BH, W_BOX>::type;
  template <class T, int N, class Epi, unsigned W_BH, unsigned W_BOX>
  static __device__ __forceinline__ void produce(const TensorMap* a_map, const TensorMap* w_map,
                                                 const PrefillSmem<T>& sm) {
    if constexpr (CTAS == 1)
      PrefillTcgen05Of<1>::template produce<T, N, Epi, W_BH, W_BOX>(a_map, w_map, sm);
    else
      prefill_pair_produce<T, N, Epi, true>(a_map, w_map, sm);
  }
  struct State {};
  static __device__ __forceinline__ State start(unsigned) {
    if (threadIdx.x == 0) hexel::mbarrier::fence_init();
    Ctas::sync();
    return {};
  }
  template <class T>
  static __device__ __forceinline__ void mma(const State&, const PrefillSmem<T>&, unsigned) {}
  static __device__ __forceinline__ void finish(const State&, unsigned) {
    if constexpr (CTAS == 2) Ctas::sync();
  }
  template <class Epi>
  static __device__ __forceinline__ unsigned first_buffer(unsigned warp) {
    return 2 * PrefillEpilogueSm100<Epi>::group(warp);
  }
  template <class Epi>
  static __device__ __forceinline__ unsigned box_row(unsigned tm, unsigned) {
    return tm * PrefillGemm::kBlockM;
  }
  template <class Epi>
  static __device__ __forceinline__ bool leader(unsigned warp, unsigned lane) {
    return warp % 4 == 0 && lane == 0;
  }

  template <class T, class Epi>
  struct Tiles {
    using TE = PrefillTwinEpilogue<Epi>;
    PrefillSmem<T> sm;
    hexel::mbarrier::StageRing<T::kStages> ring{};
    float d[2 * TE::kChains][TE::kN / 2];

    __device__ __forceinline__ Tiles(const State&, const PrefillSmem<T>& s) : sm(s) {}
    // The tile's K loop into d: per row half h2 and chain, the stage's A rows 64 h2 .. and the
    // chain's W rows (from the tile's offset in the stage, T::w_offset); then, the accumulator
    // being in registers, the last stage goes back at once, as in gemm_prefill (a pair's stages
    // to both CTAs).
    __device__ __forceinline__ void acquire(unsigned tn, unsigned warp, unsigned lane) {
      const unsigned c = PrefillEpilogueSm100<Epi>::group(warp), w_at = T::w_offset(tn);
      const unsigned last = wgmma_chains_k_loop<TE::kN, CTAS>(
          d, ring, T::kKBlocks, sm.full, sm.empty, lane,
          [&](unsigned s, unsigned i) { return sm.a(s) + i / TE::kChains * 64 * 128; },
          [&](unsigned s, unsigned i, unsigned, unsigned kk) {
            return hexel::wgmma::kmajor_desc(sm.w(s) + w_at + TE::w_row(c, i % TE::kChains) * 128,
                                             hexel::Swizzle::B128)
                .advanced(32 * kk);
          });
      if (lane == 0) wgmma_chains_release<CTAS>(sm.empty + 8 * last);
    }
    __device__ __forceinline__ void release(unsigned) {}
    __device__ __forceinline__ void piece(unsigned epilogue, unsigned c, unsigned chunk,
                                          unsigned piece, unsigned warp, unsigned lane) {
#pragma unroll
      for (unsigned h2 = 0; h2 < 2; ++h2)
#pragma unroll
        for (unsigned h = 0; h < 2; ++h)
#pragma unroll
          for (unsigned j = 0; j < PrefillEpilogueSm100<Epi>::kPieceCols / 8; ++j) {
            const unsigned row = TE::row(warp, lane, h2, h), r = TE::reg(chunk, piece, j, h);
            const float(&g)[TE::kN / 2] = d[h2 * TE::kChains];
            float v[TE::kRun];
#pragma unroll
            for (unsigned e = 0; e < TE::kRun; ++e)
              if constexpr (Epi::kSplitW)
                v[e] = Epi::act(g[r + e], d[h2 * TE::kChains + 1][r + e]);
              else
                v[e] = g[r + e];
            prefill_sm100_put<Epi, TE::kRun>(epilogue, TE::buffer(c, row),
                                             TE::offset(row, TE::chunk_col(lane, piece, j)), v);
          }
    }
  };
};

using PrefillWgmmaTwin = PrefillWgmmaTwinOf<1>;
using PrefillWgmmaPairTwin = PrefillWgmmaTwinOf<2>;

// An epilogue thread's part of tile (tm, tn) from its atom's accumulator (`tiles`): per chunk,
// its pieces into the chunk buffers of its group, which the group's leader hands to the TMA
// (prefill_chunk_acquire / _release: one buffer, or a warpgroup's two, each; it waits until the
// TMA has read the previous chunk).
template <class Atom, class Epi, class Tiles>
__device__ __forceinline__ void prefill_sm100_epilogue(Tiles& tiles, const TensorMap* out_map,
                                                       unsigned epilogue, unsigned tm, unsigned tn,
                                                       unsigned warp, unsigned lane) {
  using E = PrefillEpilogueSm100<Epi>;
  const unsigned c = E::group(warp), first = Atom::template first_buffer<Epi>(warp);
  const unsigned barrier = 1 + first;
  const bool leader = Atom::template leader<Epi>(warp, lane);
#pragma unroll
  for (unsigned ch = 0; ch < E::kChunks; ++ch) {
    prefill_chunk_acquire<0>(barrier, Atom::kGroupThreads, leader);
#pragma unroll
    for (unsigned pc = 0; pc < E::kPieces; ++pc) tiles.piece(epilogue, c, ch, pc, warp, lane);
    prefill_chunk_release<Epi::kResidual, Atom::kGroupBoxes>(
        out_map, epilogue + first * PrefillGemm::kChunkBytes, E::box_col(tn, c, ch),
        Atom::template box_row<Epi>(tm, warp), barrier, Atom::kGroupThreads, leader);
  }
}

// An epilogue thread's tiles: take each tile's accumulator, write the CTA's rows of it out (a
// pair's tile tm: this CTA's 128-row tile Atom::cta_tm(tm)), give it back.
template <class Atom, class T, class Epi>
__device__ __forceinline__ void prefill_sm100_drain(typename Atom::template Tiles<T, Epi>& tiles,
                                                    const TensorMap* out_map, unsigned epilogue,
                                                    unsigned warp, unsigned lane) {
  using namespace hexel;
  const bool leader = Atom::template leader<Epi>(warp, lane);
  if (leader) {
    tma::acquire_map(out_map);
    tma::prefetch_map(out_map);
  }
  for (unsigned u = Atom::first_unit(); u < T::kUnits; u += Atom::unit_stride()) {
    unsigned tm, tn;
    prefill_tile_coords(u, T::kTilesM, T::kTilesN, tm, tn);
    tiles.acquire(tn, warp, lane);
    prefill_sm100_epilogue<Atom, Epi>(tiles, out_map, epilogue, Atom::cta_tm(tm), tn, warp, lane);
    tiles.release(lane);
  }
  if (leader) tma::wait_group<0>();
}

// The whole kernel on atom Atom (PrefillTcgen05, PrefillWgmmaTwin and their pair forms;
// prefill_gemm_body's interface). The stages' barriers are in the dynamic shared memory as on
// Hopper; the accumulators' barriers and the Tensor Memory address are static, so the one-CTA
// forms' dynamic shared memory is the Hopper kernel's (kernel_plan.hpp, prefill_gemm_smem), the
// pair forms' their stages' (prefill_pair_smem).
template <class Atom, int M, int N, int K, class Epi, unsigned W_BH = 0, unsigned W_BOX = 0>
__device__ __forceinline__ void prefill_sm100_body(const TensorMap* a_map, const TensorMap* w_map,
                                                   const TensorMap* out_map) {
  using T = typename Atom::template Tiling<M, N, K, Epi, W_BH, W_BOX>;
  using R = PrefillSm100;
  using namespace hexel;
  extern __shared__ unsigned char smem_raw[];
  const PrefillSmem<T> sm(smem_raw);
  const unsigned warp = warp_index(), lane = threadIdx.x % 32;

  if (threadIdx.x == 0) prefill_init_stages(sm, a_map, w_map, Atom::kEmptyArrivals);
  const typename Atom::State st = Atom::start(warp);

  if (warp == R::kProducerWarp) {
    if (lane == 0) Atom::template produce<T, N, Epi, W_BH, W_BOX>(a_map, w_map, sm);
  } else if (warp == R::kMmaWarp) {
    Atom::template mma<T>(st, sm, lane);
  } else if (warp >= R::kFirstEpilogueWarp) {
    typename Atom::template Tiles<T, Epi> tiles(st, sm);
    prefill_sm100_drain<Atom, T, Epi>(tiles, out_map, sm.epilogue, warp, lane);
  }
  Atom::finish(st, warp);
}

// gemm_prefill_bf16 on tcgen05: y[m, n] = bf16((A · Wᵀ)[m, n]).
template <int M, int N, int K, unsigned W_BH = 0, unsigned W_BOX = 0>
__global__ void __launch_bounds__(PrefillGemm::kThreads, 1)
    gemm_prefill_sm100_bf16(const TensorMap* a_map, const TensorMap* w_map,
                            const TensorMap* y_map) {
  pdl_entry();
  prefill_sm100_body<PrefillTcgen05, M, N, K, EpilogueStoreBf16, W_BH, W_BOX>(a_map, w_map, y_map);
}

// gemm_prefill_residual on tcgen05: x[m, n] += (A · Wᵀ)[m, n] by TMA reductions.
template <int M, int N, int K, unsigned W_BH = 0, unsigned W_BOX = 0>
__global__ void __launch_bounds__(PrefillGemm::kThreads, 1)
    gemm_prefill_sm100_residual(const TensorMap* a_map, const TensorMap* w_map,
                                const TensorMap* x_map) {
  pdl_entry();
  prefill_sm100_body<PrefillTcgen05, M, N, K, EpilogueResidual, W_BH, W_BOX>(a_map, w_map, x_map);
}

// gemm_prefill_swiglu on tcgen05: act[m, j] = bf16(silu(g) · u) of gate_up's rows j and I + j.
template <int M, int I, int K, unsigned W_BH = 0, unsigned W_BOX = 0>
__global__ void __launch_bounds__(PrefillGemm::kThreads, 1)
    gemm_prefill_sm100_swiglu(const TensorMap* a_map, const TensorMap* w_map,
                              const TensorMap* act_map) {
  pdl_entry();
  prefill_sm100_body<PrefillTcgen05, M, I, K, EpilogueSwiGlu, W_BH, W_BOX>(a_map, w_map, act_map);
}

// The Hopper twins (sm_90a) of the three kernels above: the same arguments, tensor maps, grid,
// block and dynamic shared memory, on PrefillWgmmaTwin.
template <int M, int N, int K, unsigned W_BH = 0, unsigned W_BOX = 0>
__global__ void __launch_bounds__(PrefillGemm::kThreads, 1)
    gemm_prefill_sm100_twin_bf16(const TensorMap* a_map, const TensorMap* w_map,
                                 const TensorMap* y_map) {
  pdl_entry();
  prefill_sm100_body<PrefillWgmmaTwin, M, N, K, EpilogueStoreBf16, W_BH, W_BOX>(a_map, w_map,
                                                                                y_map);
}

template <int M, int N, int K, unsigned W_BH = 0, unsigned W_BOX = 0>
__global__ void __launch_bounds__(PrefillGemm::kThreads, 1)
    gemm_prefill_sm100_twin_residual(const TensorMap* a_map, const TensorMap* w_map,
                                     const TensorMap* x_map) {
  pdl_entry();
  prefill_sm100_body<PrefillWgmmaTwin, M, N, K, EpilogueResidual, W_BH, W_BOX>(a_map, w_map, x_map);
}

template <int M, int I, int K, unsigned W_BH = 0, unsigned W_BOX = 0>
__global__ void __launch_bounds__(PrefillGemm::kThreads, 1)
    gemm_prefill_sm100_twin_swiglu(const TensorMap* a_map, const TensorMap* w_map,
                                   const TensorMap* act_map) {
  pdl_entry();
  prefill_sm100_body<PrefillWgmmaTwin, M, I, K, EpilogueSwiGlu, W_BH, W_BOX>(a_map, w_map, act_map);
}

// The CTA-pair kernels (sm_100a): the three kernels above on PrefillTcgen05Pair, a cluster of two
// CTAs a 256 x 256 tile, the weight through its own 2D map (128-row boxes: a CTA's half of the
// tile's W rows, SwiGLU's gate or up rows), the grid a multiple of 2 (prefill_pair_grid), the
// dynamic shared memory prefill_pair_smem(128).
template <int M, int N, int K>
__global__ void __cluster_dims__(2, 1, 1) __launch_bounds__(PrefillGemm::kThreads, 1)
    gemm_prefill_sm100_pair_bf16(const TensorMap* a_map, const TensorMap* w_map,
                                 const TensorMap* y_map) {
  pdl_entry();
  prefill_sm100_body<PrefillTcgen05Pair, M, N, K, EpilogueStoreBf16>(a_map, w_map, y_map);
}

template <int M, int N, int K>
__global__ void __cluster_dims__(2, 1, 1) __launch_bounds__(PrefillGemm::kThreads, 1)
    gemm_prefill_sm100_pair_residual(const TensorMap* a_map, const TensorMap* w_map,
                                     const TensorMap* x_map) {
  pdl_entry();
  prefill_sm100_body<PrefillTcgen05Pair, M, N, K, EpilogueResidual>(a_map, w_map, x_map);
}

template <int M, int I, int K>
__global__ void __cluster_dims__(2, 1, 1) __launch_bounds__(PrefillGemm::kThreads, 1)
    gemm_prefill_sm100_pair_swiglu(const TensorMap* a_map, const TensorMap* w_map,
                                   const TensorMap* act_map) {
  pdl_entry();
  prefill_sm100_body<PrefillTcgen05Pair, M, I, K, EpilogueSwiGlu>(a_map, w_map, act_map);
}

// The pair kernels' Hopper twins (sm_90a), on PrefillWgmmaPairTwin: the same arguments, maps,
// cluster and grid; the dynamic shared memory prefill_pair_smem(256) (each stage the whole tile's
// W rows).
template <int M, int N, int K>
__global__ void __cluster_dims__(2, 1, 1) __launch_bounds__(PrefillGemm::kThreads, 1)
    gemm_prefill_sm100_pair_twin_bf16(const TensorMap* a_map, const TensorMap* w_map,
                                      const TensorMap* y_map) {
  pdl_entry();
  prefill_sm100_body<PrefillWgmmaPairTwin, M, N, K, EpilogueStoreBf16>(a_map, w_map, y_map);
}

template <int M, int N, int K>
__global__ void __cluster_dims__(2, 1, 1) __launch_bounds__(PrefillGemm::kThreads, 1)
    gemm_prefill_sm100_pair_twin_residual(const TensorMap* a_map, const TensorMap* w_map,
                                          const TensorMap* x_map) {
  pdl_entry();
  prefill_sm100_body<PrefillWgmmaPairTwin, M, N, K, EpilogueResidual>(a_map, w_map, x_map);
}

template <int M, int I, int K>
__global__ void __cluster_dims__(2, 1, 1) __launch_bounds__(PrefillGemm::kThreads, 1)
    gemm_prefill_sm100_pair_twin_swiglu(const TensorMap* a_map, const TensorMap* w_map,
                                        const TensorMap* act_map) {
  pdl_entry();
  prefill_sm100_body<PrefillWgmmaPairTwin, M, I, K, EpilogueSwiGlu>(a_map, w_map, act_map);
}

}  // namespace telos_kernels
#endif  // __CUDACC__
