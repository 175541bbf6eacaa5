// The Blackwell small-M GEMM's index math on the CPU (codegen/kernels/gemm_small_sm100.cuh),
// against the tcgen05 model (hexel/tcgen05_model.h): its MMA's instruction descriptor, the operand
// descriptors of a stage (the weights as A, the tokens as B) and of the norm forms' resident tokens
// (B, norm_rows.cuh), and a walk of whole GEMMs through the functions the epilogue calls. Per CTA
// of the plan's grid, every epilogue thread loads its registers (which Tensor Memory cells: the
// model's .32x32b fragments; which accumulator element each holds: the model's Layout D) and stores
// the elements inside M x N; each output element must come from the right accumulator element,
// once, and SwiGLU's gate and up from W rows j and I + j. The norm forms' epilogue is this one (its
// index math does not depend on where B lies), so the walk covers them. The plan's restatement of
// the tiles (kernel_plan.hpp, small_gemm_sm100_tiling) must agree, with and without the norm.
#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "codegen/kernel_plan.hpp"
#include "codegen/kernels/gemm_small_sm100.cuh"
#include "examples/gemm_tile_accum.cuh"
#include "hexel/swizzle.cuh"
#include "hexel/tcgen05_model.h"
#include "hexel/wgmma_desc.cuh"

namespace telos_kernels {
namespace {

namespace model = hexel::tcgen05::model;
using G = SmallGemmSm100;
using hexel::Swizzle;

// What one output element received: how often, and from which accumulator element (the MMA's A
// row, its B row: W row, token) of the gate (or only) and the up product.
struct Written {
  int times = 0;
  std::pair<unsigned, unsigned> gate, up;
};

template <int M, int N, bool SPLIT>
void walk() {
  using E = SmallEpilogueSm100<M, N, SPLIT>;
  using Accum = hexel::tcgen05::Bf16Accum<E::kN>;
  SCOPED_TRACE("M " + std::to_string(M) + ", N " + std::to_string(N) + (SPLIT ? ", SwiGLU" : ""));
  // Layout D inverted for the products (SwiGLU: the gate chain's accumulator at column 0, the up
  // chain's at kN): Tensor Memory cell -> the W row and the token of the element it holds. The up
  // chain's A rows are the stage's second 128 rows, W rows N + tn · 128 + i.
  std::map<std::pair<unsigned, unsigned>, std::pair<unsigned, unsigned>> held;
  auto holding = [&](unsigned tm, unsigned tn) {
    held.clear();
    for (unsigned acc = 0; acc < (SPLIT ? 2u : 1u); ++acc)
      for (unsigned i = 0; i < G::kWeightRows; ++i)
        for (unsigned j = 0; j < E::kN; ++j) {
          const model::TmemCell c =
              model::accumulator_cell(hexel::tcgen05::tmem_addr(0, acc * E::kN), 128, E::kN, i, j);
          held[{c.lane, c.column}] = {acc * N + tn * G::kWeightRows + i, tm * E::kTileTokens + j};
        }
  };
  auto load = [&](unsigned warp, unsigned lane, unsigned col, unsigned r) {
    const unsigned taddr = Accum::ld_taddr(0, warp, col);
    const model::TmemCell cell = model::ld_32x32b_cell(warp, taddr, G::kLoadColumns, lane, r);
    EXPECT_LT(cell.column, unsigned{E::kTmemColumns}) << "a load past the allocation";
    return held.at({cell.lane, cell.column});
  };

  const telos::codegen::SmallGemmSm100Tiling plan =
      telos::codegen::small_gemm_sm100_tiling(N, 64, M, SPLIT);
  ASSERT_EQ(plan.tiles_m, static_cast<int>(E::kTilesM));
  ASSERT_EQ(plan.tiles_n, static_cast<int>(E::kTilesN));
  ASSERT_EQ(plan.a_box, static_cast<int>(E::kARows));
  ASSERT_EQ(plan.mma_n, static_cast<int>(E::kN));
  ASSERT_EQ(plan.stage_bytes(), static_cast<int>(E::kStageBytes));
  ASSERT_EQ(plan.w_rows, static_cast<int>(E::kWRows));

  std::vector<Written> out(static_cast<std::size_t>(M) * N);
  for (unsigned tm = 0; tm < E::kTilesM; ++tm)
    for (unsigned tn = 0; tn < E::kTilesN; ++tn) {
      holding(tm, tn);
      for (unsigned warp = 0; warp < G::kEpilogueWarps; ++warp)
        for (unsigned lane = 0; lane < 32; ++lane)
          for (unsigned p = 0; p < E::kPieces; ++p)
            for (unsigned r = 0; r < G::kLoadColumns; ++r) {
              const unsigned m = E::token(tm, p, r), n = E::out_col(tn, warp, lane);
              if (m >= static_cast<unsigned>(M) || n >= static_cast<unsigned>(N)) continue;
              Written& w = out[static_cast<std::size_t>(m) * N + n];
              ++w.times;
              w.gate = load(warp, lane, E::gate_col(p), r);
              if constexpr (SPLIT) w.up = load(warp, lane, E::up_col(p), r);
            }
    }
  for (unsigned m = 0; m < static_cast<unsigned>(M); ++m)
    for (unsigned n = 0; n < static_cast<unsigned>(N); ++n) {
      const Written& w = out[static_cast<std::size_t>(m) * N + n];
      ASSERT_EQ(w.times, 1) << "element (" << m << ", " << n << ")";
      ASSERT_EQ(w.gate, (std::pair<unsigned, unsigned>{n, m}));
      if (SPLIT) {
        ASSERT_EQ(w.up, (std::pair<unsigned, unsigned>{N + n, m}));
      }
    }
}

// Decode rows (1, 8), a token tile of several 64-row groups (100: N 112, a ragged weight tile),
// whole and ragged 256-token tiles (256, 300), real widths (the 8B's gate/up, the 1B's o).
TEST(SmallEpilogueSm100, StoreAndResidual) {
  walk<1, 384, false>();
  walk<8, 2048, false>();
  walk<100, 1000, false>();
  walk<300, 256, false>();
}

TEST(SmallEpilogueSm100, SwiGluPairsGateAndUpRows) {
  walk<1, 14336, true>();
  walk<64, 8192, true>();
  walk<256, 200, true>();
}

// The MMA is a legal one-CTA kind::f16 shape for every token tile (M 128, N the tokens rounded to
// 16), bf16 x bf16 -> f32, both operands K-major; the accumulators fit their allocation.
TEST(SmallEpilogueSm100, MmaShapeForEveryTokenTile) {
  auto check = [](auto e) {
    using E = decltype(e);
    const model::InstrFields f = model::decode(hexel::tcgen05::Bf16Accum<E::kN>::kInstrDesc);
    EXPECT_NO_THROW(model::check_dense_kind_f16_cta1(f));
    EXPECT_EQ(f.m, 128u);
    EXPECT_EQ(f.n, unsigned{E::kN});
    EXPECT_EQ(f.n % 16, 0u);
    EXPECT_FALSE(f.a_mn_major || f.b_mn_major);
    EXPECT_LE(unsigned{E::kAccumColumns}, unsigned{E::kTmemColumns});
  };
  check(SmallEpilogueSm100<1, 128, false>{});
  check(SmallEpilogueSm100<17, 128, true>{});
  check(SmallEpilogueSm100<200, 128, false>{});
  check(SmallEpilogueSm100<256, 128, true>{});
}

// The descriptors the MMA thread builds for a stage read the bytes TMA wrote there: W row i of the
// tile (gate, then up 128 rows on) and token row j, each K slice 16 elements on.
template <int M, bool SPLIT>
void expect_stage_operands() {
  using E = SmallEpilogueSm100<M, 4096, SPLIT>;
  using Accum = hexel::tcgen05::Bf16Accum<E::kN>;
  constexpr unsigned kStage = 0x2000;  // 1024-byte aligned
  for (unsigned kk = 0; kk < G::kBlockK / 16; ++kk)
    for (unsigned k = 0; k < 16; ++k) {
      const unsigned kb = 2 * (16 * kk + k);
      for (unsigned i = 0; i < G::kWeightRows; ++i) {
        ASSERT_EQ(
            model::kmajor_element_address(Accum::operand_desc(kStage + E::a_offset(), kk), i, k, 2),
            kStage + E::a_offset() + hexel::swizzled_offset(i * 128 + kb, Swizzle::B128));
        if (SPLIT) {
          ASSERT_EQ(model::kmajor_element_address(Accum::operand_desc(kStage + E::up_offset(), kk),
                                                  i, k, 2),
                    kStage + E::a_offset() +
                        hexel::swizzled_offset((G::kWeightRows + i) * 128 + kb, Swizzle::B128));
        }
      }
      for (unsigned j = 0; j < E::kN; ++j)
        ASSERT_EQ(model::kmajor_element_address(Accum::operand_desc(kStage, kk), j, k, 2),
                  kStage + hexel::swizzled_offset(j * 128 + kb, Swizzle::B128));
    }
  EXPECT_EQ(E::a_offset() % 1024, 0u);
  EXPECT_GE(E::kASlot, E::kN * 128) << "the tokens' rows the MMA reads lie in the stage";
}

TEST(SmallEpilogueSm100, OperandDescriptorsReadTheTmaImage) {
  expect_stage_operands<1, false>();
  expect_stage_operands<40, true>();
  expect_stage_operands<256, false>();
}

// The tokens' descriptor of the forms without the norm is the one the MMA read its stage through
// before the norm forms existed (Bf16Accum::operand_desc): the same bits at every K step.
TEST(SmallEpilogueSm100, StageTokenDescriptorIsTheAccumulatorsOperand) {
  using E = SmallEpilogueSm100<40, 4096, true>;
  using Accum = hexel::tcgen05::Bf16Accum<E::kN>;
  constexpr unsigned kStage = 0x6000;
  for (unsigned kb = 0; kb < 3; ++kb)
    for (unsigned kk = 0; kk < G::kBlockK / 16; ++kk)
      EXPECT_EQ((E::token_desc<hexel::tcgen05::SmemDesc>(kStage, 0x400, kb, kk).bits),
                Accum::operand_desc(kStage, kk).bits);
}

// The norm forms' tokens (M <= 8 rows of RMSNorm(x), resident for the whole K): the descriptor the
// MMA thread builds for K step kk of K block kb reads B row r < M, element k where the norm
// prologue stores it (a_store_chunk: chunk c of row r at NormRows<M>::chunk_offset(c, r)), for
// every K block of K; every B row it reads (the MMA's N is 16) lies in the resident rows and their
// zero tail, inside resident_bytes; the twin's wgmma descriptor has the same address, LBO and SBO
// fields (bits 0-13, 16-29, 32-45) and no swizzle either; the stages hold the W rows only; and the
// plan's norm tiling states the kernel's stage and resident bytes.
template <int M, int K, bool SPLIT>
void expect_resident_tokens() {
  using E = SmallEpilogueSm100<M, 4096, SPLIT, true>;
  using Rows = NormRows<M>;
  SCOPED_TRACE("M " + std::to_string(M) + ", K " + std::to_string(K) + (SPLIT ? ", SwiGLU" : ""));
  constexpr unsigned kResident = 0x400, kStage = 0x10000;
  constexpr unsigned kBlocks = (K + 63) / 64, kChunks = 8 * kBlocks;
  constexpr std::uint64_t kFields = 0x00003FFF3FFF3FFFull;
  const unsigned written = kResident + kChunks * M * 16 + 128;  // the rows and the zero tail
  ASSERT_LE(written, kResident + E::resident_bytes(K));
  ASSERT_EQ(E::resident_bytes(K) % 1024, 0u);
  ASSERT_EQ(E::kN, 16u);
  ASSERT_EQ(E::a_offset(), 0u) << "the stages hold the W rows only";
  ASSERT_EQ(E::kStageBytes, E::kWRows * 128);
  for (unsigned kb = 0; kb < kBlocks; ++kb)
    for (unsigned kk = 0; kk < G::kBlockK / 16; ++kk) {
      const auto desc = E::template token_desc<hexel::tcgen05::SmemDesc>(kStage, kResident, kb, kk);
      const auto twin = E::template token_desc<hexel::wgmma::SmemDesc>(kStage, kResident, kb, kk);
      ASSERT_EQ(desc.bits & kFields, twin.bits & kFields);
      ASSERT_EQ(desc.bits >> 61, 0u) << "no swizzle";
      ASSERT_EQ(twin.bits >> 62, 0u) << "no swizzle";
      for (unsigned k = 0; k < 16; ++k) {
        const unsigned c = 8 * kb + 2 * kk + k / 8;
        for (unsigned r = 0; r < static_cast<unsigned>(M); ++r)
          ASSERT_EQ(model::kmajor_element_address(desc, r, k, 2),
                    kResident + Rows::chunk_offset(c, r) + 2 * (k % 8))
              << "K block " << kb << ", step " << kk << ", row " << r << ", element " << k;
        for (unsigned row = 0; row < E::kN; ++row) {
          const unsigned at = model::kmajor_element_address(desc, row, k, 2);
          ASSERT_GE(at, kResident);
          ASSERT_LE(at + 2, written) << "B row " << row;
        }
      }
    }
  const telos::codegen::SmallGemmSm100Tiling plan =
      telos::codegen::small_gemm_sm100_tiling(4096, K, M, SPLIT, true);
  EXPECT_EQ(plan.stage_bytes(), static_cast<int>(E::kStageBytes));
  EXPECT_EQ(plan.resident_bytes(), static_cast<int>(E::resident_bytes(K)));
  EXPECT_EQ(plan.a_box, static_cast<int>(E::kARows));
  EXPECT_EQ(plan.mma_n, static_cast<int>(E::kN));
  EXPECT_EQ(plan.smem(), static_cast<int>(E::resident_bytes(K)) +
                             plan.stages * static_cast<int>(E::kStageBytes) + 1024);
}

TEST(SmallEpilogueSm100, NormTokenDescriptorsReadTheResidentRows) {
  expect_resident_tokens<1, 2048, false>();
  expect_resident_tokens<3, 2000, true>();
  expect_resident_tokens<8, 4096, false>();
  expect_resident_tokens<5, 264, true>();
}

// The Hopper twin's accumulator image (SmallGemmSm100Twin): every register of both consumer
// warpgroups' wgmma accumulators (their elements as hexel/examples/gemm_tile_accum.cuh's
// WgmmaAccum states wgmma's fragment layout) lands in the cell where Tensor Memory holds that
// element (row = the tile's W row, column = its accumulator column), each cell once and inside the
// image, which fits the twin's shared memory; so each epilogue load reads the elements the
// tcgen05.ld it stands for would (the walk above).
template <int M, bool SPLIT>
void expect_twin_image() {
  using E = SmallEpilogueSm100<M, 4096, SPLIT>;
  using T = SmallGemmSm100Twin;
  using Fragment = hexel::examples::WgmmaAccum<128>;  // its element map holds for every N
  constexpr unsigned kColumns = E::kAccumColumns, kChains = SPLIT ? 2 : 1;
  SCOPED_TRACE("M " + std::to_string(M) + (SPLIT ? ", SwiGLU" : ""));
  ASSERT_LE(kColumns, unsigned{T::kMaxAccumColumns});
  const unsigned bytes = G::kWeightRows * T::image_pitch(kColumns) * 4;
  ASSERT_LE(bytes + 1024, T::smem(2, E::kStageBytes, kColumns));
  std::map<unsigned, std::pair<unsigned, unsigned>> image;  // byte offset -> (W row, column)
  for (unsigned warp = 0; warp < T::kConsumerWarps; ++warp)
    for (unsigned lane = 0; lane < 32; ++lane)
      for (unsigned c = 0; c < kChains; ++c)
        for (unsigned j = 0; j < E::kN / 8; ++j)
          for (unsigned h = 0; h < 2; ++h)
            for (unsigned e = 0; e < 2; ++e) {
              const hexel::examples::TileElement held =
                  Fragment::element(32 * (warp % 4) + lane, 0, 4 * j + 2 * h + e);
              ASSERT_LT(held.col, unsigned{E::kN});
              const unsigned row = T::image_row(warp, lane, h),
                             col = T::image_col(c, E::kN, j, lane) + e;
              ASSERT_EQ(row, 64 * (warp / 4) + held.row) << "the element's W row";
              ASSERT_EQ(col, c * E::kN + held.col) << "the element's accumulator column";
              const unsigned at = T::image_offset(row, col, kColumns);
              ASSERT_LE(at + 4, bytes);
              ASSERT_TRUE(image.emplace(at, std::pair{row, col}).second) << "a cell written twice";
            }
  ASSERT_EQ(image.size(), std::size_t{G::kWeightRows} * kColumns);
  for (unsigned warp = 0; warp < G::kEpilogueWarps; ++warp)
    for (unsigned lane = 0; lane < 32; ++lane)
      for (unsigned p = 0; p < E::kPieces; ++p)
        for (unsigned r = 0; r < G::kLoadColumns; ++r) {
          const unsigned row = E::row(warp, lane);
          ASSERT_EQ(image.at(T::image_offset(row, E::gate_col(p) + r, kColumns)),
                    (std::pair{row, E::gate_col(p) + r}));
          if (SPLIT) {
            ASSERT_EQ(image.at(T::image_offset(row, E::up_col(p) + r, kColumns)),
                      (std::pair{row, E::up_col(p) + r}));
          }
        }
}

TEST(SmallEpilogueSm100, TwinImageHoldsTheTensorMemoryLayout) {
  expect_twin_image<1, false>();
  expect_twin_image<40, true>();
  expect_twin_image<128, true>();
  expect_twin_image<300, false>();
}

}  // namespace
}  // namespace telos_kernels
