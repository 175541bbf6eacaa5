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
// Reduction order, for batch invariance: every output element is one chain of tcgen05.mma over K
// in 16-wide steps, in order, from zero, whatever M is.
//
// The index math is host-callable (PrefillEpilogueSm100; test/codegen/prefill_epilogue_sm100_test
// checks it against hexel/tcgen05_model.h); the kernels compile under NVRTC for sm_100a only
// (test/codegen/lit/prefill_sm100_assembly.test assembles every instance the real configs need).
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

}  // namespace telos_kernels

#if defined(__CUDACC__)
#include "gemm_prefill.cuh"
#include "hexel/ld_st.cuh"
#include "hexel/mbarrier.cuh"
#include "hexel/sync.cuh"
#include "hexel/tcgen05.cuh"
#include "hexel/tma.cuh"

namespace telos_kernels {

// The MMA thread: for each of the CTA's tiles, wait until the epilogue has drained the
// accumulator it will write (both are free at first), run the K loop into it, and commit it to
// its accumulator-full barrier, which completes once every MMA of the tile has.
template <class T, unsigned W_BH>
__device__ __forceinline__ void prefill_sm100_mma(const PrefillSmem<T>& sm, unsigned tmem,
                                                  unsigned accum_full, unsigned accum_empty) {
  using namespace hexel;
  mbarrier::StageRing<T::kStages> ring;
  mbarrier::StageRing<PrefillSm100::kAccumulators> acc;
  for (unsigned u = blockIdx.x; u < T::kUnits; u += gridDim.x) {
    unsigned tm, tn;
    prefill_tile_coords(u, T::kTilesM, T::kTilesN, tm, tn);
    const unsigned w_at = T::w_offset(tn);
    mbarrier::wait_parity(accum_empty + 8 * acc.index, acc.phase ^ 1u);
    tcgen05::fence_after_thread_sync();
    PrefillAccum::k_loop(
        ring, tmem + acc.index * PrefillGemm::kBlockN, T::kKBlocks, sm.full, sm.empty,
        [&](unsigned s) { return sm.a(s); }, [&](unsigned s) { return sm.w(s) + w_at; });
    tcgen05::commit(accum_full + 8 * acc.index);
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

// An epilogue thread's part of tile (tm, tn) from the accumulator at `acc`: per chunk, its row's
// pieces into the chunk buffer (16-byte stores; bf16 packed in pairs, the residual's f32 as they
// are), which the leader of its 64 threads hands to the TMA (prefill_chunk_acquire / _release;
// one buffer each, so it waits until the TMA has read the previous chunk). With the 128B swizzle a
// quarter warp's eight rows put their 16 bytes in eight different bank groups.
template <class Epi>
__device__ __forceinline__ void prefill_sm100_epilogue(unsigned acc, const TensorMap* out_map,
                                                       unsigned epilogue, unsigned tm, unsigned tn,
                                                       unsigned warp, unsigned lane) {
  using E = PrefillEpilogueSm100<Epi>;
  using namespace hexel;
  const unsigned c = E::group(warp), buf = epilogue + E::buffer(warp) * PrefillGemm::kChunkBytes;
  const unsigned barrier = 1 + E::buffer(warp);
  const bool leader = E::leader(warp, lane);
#pragma unroll
  for (unsigned ch = 0; ch < E::kChunks; ++ch) {
    prefill_chunk_acquire<0>(barrier, 64, leader);
#pragma unroll
    for (unsigned pc = 0; pc < E::kPieces; ++pc) {
      float v[32];
      prefill_sm100_load_piece<Epi>(v, acc, warp, E::acc_col(c, ch, pc));
#pragma unroll
      for (unsigned i = 0; i < 32; i += E::kVecRegs) {
        const unsigned at =
            buf + swizzled_offset(E::chunk_offset(warp, lane, pc, i), Swizzle::B128);
        if constexpr (Epi::kResidual)
          st_shared_v4(at, __float_as_uint(v[i]), __float_as_uint(v[i + 1]),
                       __float_as_uint(v[i + 2]), __float_as_uint(v[i + 3]));
        else
          st_shared_v4(at, pack_bf16x2(v[i], v[i + 1]), pack_bf16x2(v[i + 2], v[i + 3]),
                       pack_bf16x2(v[i + 4], v[i + 5]), pack_bf16x2(v[i + 6], v[i + 7]));
      }
    }
    prefill_chunk_release<Epi::kResidual>(out_map, buf, E::box_col(tn, c, ch), E::box_row(tm, warp),
                                          barrier, 64, leader);
  }
}

// An epilogue thread's tiles: wait for each tile's accumulator, write the tile out, and give the
// accumulator back (every epilogue thread arrives, after its loads). PTX:
// tcgen05.fence::after_thread_sync / before_thread_sync around the barrier.
template <class T, class Epi>
__device__ __forceinline__ void prefill_sm100_drain(unsigned tmem, const TensorMap* out_map,
                                                    unsigned epilogue, unsigned accum_full,
                                                    unsigned accum_empty, unsigned warp,
                                                    unsigned lane) {
  using namespace hexel;
  const bool leader = PrefillEpilogueSm100<Epi>::leader(warp, lane);
  if (leader) {
    tma::acquire_map(out_map);
    tma::prefetch_map(out_map);
  }
  mbarrier::StageRing<PrefillSm100::kAccumulators> acc;
  for (unsigned u = blockIdx.x; u < T::kUnits; u += gridDim.x) {
    unsigned tm, tn;
    prefill_tile_coords(u, T::kTilesM, T::kTilesN, tm, tn);
    mbarrier::wait_parity(accum_full + 8 * acc.index, acc.phase);
    tcgen05::fence_after_thread_sync();
    prefill_sm100_epilogue<Epi>(tmem + acc.index * PrefillGemm::kBlockN, out_map, epilogue, tm, tn,
                                warp, lane);
    tcgen05::fence_before_thread_sync();
    mbarrier::arrive(accum_empty + 8 * acc.index);
    acc.advance();
  }
  if (leader) tma::wait_group<0>();
}

// The whole kernel (prefill_gemm_body's interface). The stages' barriers are in the dynamic shared
// memory as on Hopper; the accumulators' barriers and the Tensor Memory address are static, so the
// dynamic shared memory is the Hopper kernel's (kernel_plan.hpp, prefill_gemm_smem).
template <int M, int N, int K, class Epi, unsigned W_BH = 0, unsigned W_BOX = 0>
__device__ __forceinline__ void prefill_sm100_body(const TensorMap* a_map, const TensorMap* w_map,
                                                   const TensorMap* out_map) {
  using T = PrefillTiling<M, N, K, Epi, W_BH, W_BOX>;
  using R = PrefillSm100;
  using namespace hexel;
  extern __shared__ unsigned char smem_raw[];
  __shared__ unsigned long long accum_bars[2 * R::kAccumulators];  // full[2], then empty[2]
  __shared__ unsigned tmem_slot;
  const PrefillSmem<T> sm(smem_raw);
  const unsigned accum_full = smem_addr(accum_bars),
                 accum_empty = accum_full + 8 * R::kAccumulators;
  const unsigned warp = warp_index(), lane = threadIdx.x % 32;

  if (threadIdx.x == 0) {
    prefill_init_stages(sm, a_map, w_map, 1);  // the MMA thread's tcgen05.commit
    for (unsigned b = 0; b < R::kAccumulators; ++b) {
      mbarrier::init(accum_full + 8 * b, 1);
      mbarrier::init(accum_empty + 8 * b, PrefillGemm::kConsumers * 128);
    }
    mbarrier::fence_init();
  }
  if (warp == R::kMmaWarp) {
    tcgen05::alloc(smem_addr(&tmem_slot), R::kTmemColumns);
    tcgen05::relinquish_alloc_permit();
  }
  tcgen05::fence_before_thread_sync();
  __syncthreads();
  tcgen05::fence_after_thread_sync();
  const unsigned tmem = tmem_slot;

  if (warp == R::kProducerWarp) {
    auto a_stage = [&](unsigned s) { return sm.a(s); };
    auto w_stage = [&](unsigned s) { return sm.w(s); };
    if (lane == 0)
      prefill_gemm_produce<M, N, K, Epi, W_BH, W_BOX>(a_map, w_map, sm.full, sm.empty, a_stage,
                                                      w_stage);
  } else if (warp == R::kMmaWarp) {
    if (lane == 0) prefill_sm100_mma<T, W_BH>(sm, tmem, accum_full, accum_empty);
  } else if (warp >= R::kFirstEpilogueWarp) {
    prefill_sm100_drain<T, Epi>(tmem, out_map, sm.epilogue, accum_full, accum_empty, warp, lane);
  }
  // Every tcgen05.ld has completed (wait::ld) before the allocating warp frees the columns.
  tcgen05::fence_before_thread_sync();
  __syncthreads();
  if (warp == R::kMmaWarp) {
    tcgen05::fence_after_thread_sync();
    tcgen05::dealloc(tmem, R::kTmemColumns);
  }
}

// gemm_prefill_bf16 on tcgen05: y[m, n] = bf16((A · Wᵀ)[m, n]).
template <int M, int N, int K, unsigned W_BH = 0, unsigned W_BOX = 0>
__global__ void __launch_bounds__(PrefillGemm::kThreads, 1)
    gemm_prefill_sm100_bf16(const TensorMap* a_map, const TensorMap* w_map,
                            const TensorMap* y_map) {
  pdl_entry();
  prefill_sm100_body<M, N, K, EpilogueStoreBf16, W_BH, W_BOX>(a_map, w_map, y_map);
}

// gemm_prefill_residual on tcgen05: x[m, n] += (A · Wᵀ)[m, n] by TMA reductions.
template <int M, int N, int K, unsigned W_BH = 0, unsigned W_BOX = 0>
__global__ void __launch_bounds__(PrefillGemm::kThreads, 1)
    gemm_prefill_sm100_residual(const TensorMap* a_map, const TensorMap* w_map,
                                const TensorMap* x_map) {
  pdl_entry();
  prefill_sm100_body<M, N, K, EpilogueResidual, W_BH, W_BOX>(a_map, w_map, x_map);
}

// gemm_prefill_swiglu on tcgen05: act[m, j] = bf16(silu(g) · u) of gate_up's rows j and I + j.
template <int M, int I, int K, unsigned W_BH = 0, unsigned W_BOX = 0>
__global__ void __launch_bounds__(PrefillGemm::kThreads, 1)
    gemm_prefill_sm100_swiglu(const TensorMap* a_map, const TensorMap* w_map,
                              const TensorMap* act_map) {
  pdl_entry();
  prefill_sm100_body<M, I, K, EpilogueSwiGlu, W_BH, W_BOX>(a_map, w_map, act_map);
}

}  // namespace telos_kernels
#endif  // __CUDACC__
