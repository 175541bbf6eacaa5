// The tcgen05 accumulator of a bf16 GEMM tile, and what every kernel built on one repeats (the
// tile GEMM, hexel/examples/gemm_tile.cuh; codegen's sm_100a prefill GEMM): an f32 accumulator of
// 128 rows a CTA and N columns in Tensor Memory, fed with 64-wide K blocks of bf16 A (128 rows a
// CTA) and B (N rows, or with a CTA pair N / 2 rows a CTA) from shared-memory stages that TMA
// wrote K-major with the 128-byte swizzle. Its instruction descriptor, the operand descriptors of a
// stage's K slices, one MMA thread's K loop over a ring of such stages, and the Tensor Memory
// address a warp's tcgen05.ld .32x32b reads 32 of its columns from (PTX ISA, "TensorCore 5th
// Generation Family Instructions"). CtaGroup 2 is the CTA pair of a cluster of two: one MMA
// thread of the leader CTA (rank 0) issues M = 256 MMAs that read each CTA's 128 A rows and its
// N / 2 B rows at the same shared offsets in both ("Matrix Shape"; the B operand's N split across
// the pair) and write each CTA's own Tensor Memory, its rows in lanes 0 .. 127 ("Data Path Layout
// Organization", Layout A: M = 256, cta_group::2), so a CTA reads its rows as a one-CTA
// accumulator's. The constexpr parts compile on the host too: test/hexel checks them against
// hexel/tcgen05_model.h.
#pragma once
#include "hexel/config.cuh"
#include "hexel/swizzle.cuh"
#include "hexel/tcgen05_desc.cuh"
#if defined(__CUDACC__)
#include "hexel/mbarrier.cuh"
#include "hexel/tcgen05.cuh"
#endif

namespace hexel::tcgen05 {

template <uint32_t N, int CtaGroup = 1>
struct Bf16Accum {
  static_assert(N >= 16 && N <= 256 && N % 16 == 0,
                "128 x N accumulators of 16 .. 256 columns (M = 128 takes N in steps of 16)");
  static_assert(CtaGroup == 1 || CtaGroup == 2, "one CTA or a CTA pair");
  static constexpr uint32_t kRows = 128;                  // a CTA's: lanes 0 .. 127
  static constexpr uint32_t kMmaRows = kRows * CtaGroup;  // the MMA's M
  static constexpr uint16_t kPairMask = 0b11;             // the pair's ranks, for commit multicasts
  static constexpr uint32_t kColumns = N;                 // Tensor Memory columns: one f32 a column
  static constexpr uint32_t kBlockK = 64;       // K a stage: one 128-byte swizzle row of bf16
  static constexpr uint32_t kLoadColumns = 32;  // a tcgen05.ld .32x32b.x32 (N a multiple of 32)
  // kind::f16, bf16 x bf16 -> f32, M = 128 (a pair's 256), N, both operands K-major ("Instruction
  // descriptor").
  static constexpr InstrDesc kInstrDesc =
      InstrDesc::make(AbType::BF16, AbType::BF16, DType::F32, kMmaRows, N);

  // K slice kk (16 elements, 32 bytes) of a stage tile at `tile` (1024-byte aligned, rows of 128
  // bytes in the 128B swizzle): inside a swizzle row a K step is a plain add to the start address.
  static HEXEL_HOST_DEVICE constexpr SmemDesc operand_desc(uint32_t tile, uint32_t kk) {
    return kmajor_desc(tile, Swizzle::B128).advanced(32 * kk);
  }

  // The address from which warp `warp` loads columns `column` .. column + 31 of the accumulator at
  // `tmem`: its lane quarter, 32 (warp % 4) ("Tensor Memory: Access restrictions"; the warp's
  // index in the CTA, whichever warpgroup it is in). Thread l then holds row 32 (warp % 4) + l,
  // register r column `column` + r ("Matrix fragments for shape .32x32b"; Layout D puts row i in
  // lane i).
  static HEXEL_HOST_DEVICE constexpr uint32_t ld_taddr(uint32_t tmem, uint32_t warp,
                                                       uint32_t column) {
    return tmem + tmem_addr(32 * (warp % 4), column);
  }

#if defined(__CUDACC__)
  // MMA thread: the four K = 16 MMAs of one stage into the accumulator at `d`, overwriting it
  // first where `accumulate` is false. PTX: tcgen05.mma (cta_group::1 or ::2, kind::f16).
  static HEXEL_DEVICE void mma_stage(uint32_t d, uint32_t a_tile, uint32_t b_tile,
                                     bool accumulate) {
#pragma unroll
    for (uint32_t kk = 0; kk < kBlockK / 16; ++kk)
      mma<Kind::F16, CtaGroup>(d, operand_desc(a_tile, kk), operand_desc(b_tile, kk), kInstrDesc,
                               accumulate || kk > 0);
  }

  // MMA thread: `bar` gets one arrival once every MMA issued before has completed; with a CTA
  // pair, the barrier at that offset in both CTAs. PTX: tcgen05.commit (.multicast::cluster).
  static HEXEL_DEVICE void commit_to(uint32_t bar) {
    if constexpr (CtaGroup == 1)
      commit(bar);
    else
      commit_multicast(bar, kPairMask);
  }

  // MMA thread: one tile's K loop, k_blocks stages of the ring into the accumulator at `d`
  // (overwritten at the first). Per stage: wait for its full barrier (full + 8 · index), order the
  // MMAs after that wait, issue them, and commit them to the stage's empty barrier (empty + 8 ·
  // index; with a CTA pair in both CTAs), which gets its one arrival once they have read the stage.
  // `a_tile(s)`, `b_tile(s)`: the stage's operand addresses. The ring carries on into the next
  // tile. The caller commits the accumulator itself once the loop is issued. PTX:
  // tcgen05.fence::after_thread_sync, tcgen05.commit.
  template <uint32_t Stages, class ATile, class BTile>
  static HEXEL_DEVICE void k_loop(mbarrier::StageRing<Stages>& ring, uint32_t d, uint32_t k_blocks,
                                  uint32_t full, uint32_t empty, ATile a_tile, BTile b_tile) {
    for (uint32_t kb = 0; kb < k_blocks; ++kb) {
      mbarrier::wait_parity(full + 8 * ring.index, ring.phase);
      fence_after_thread_sync();
      mma_stage(d, a_tile(ring.index), b_tile(ring.index), kb > 0);
      commit_to(empty + 8 * ring.index);
      ring.advance();
    }
  }
#endif
};

}  // namespace hexel::tcgen05
