// The sm_100a one-token layer's index math on the CPU (codegen/kernels/decode_layer_sm100.cuh,
// LayerSm100), against the tcgen05 model (hexel/tcgen05_model.h): the MMA's instruction
// descriptor, the operand descriptors of a ring slot (the weights as A, from the producer's boxes;
// the resident token as B), the epilogue's loads (which Tensor Memory cell each consumer thread
// reads, and which weight row's element the cell holds: Layout D), QKV_ROPE's partners and table
// entries, and the twin's image; then the plan's tiling (kernel_plan.hpp,
// decode_layer_sm100_tiling) against the kernel's constants at the real configs' shapes.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "codegen/kernel_plan.hpp"
#include "codegen/kernels/decode_layer_sm100.cuh"
#include "codegen/nvrtc_driver.hpp"
#include "examples/gemm_tile_accum.cuh"
#include "hexel/swizzle.cuh"
#include "hexel/tcgen05_model.h"
#include "support/qkv_layout.hpp"

namespace telos_kernels {
namespace {

namespace model = hexel::tcgen05::model;
using S = LayerSm100;
using Accum = hexel::tcgen05::Bf16Accum<S::kN>;
using hexel::Swizzle;

// One-CTA kind::f16, M 128, N 16 (gemm_small_sm100's shape for a one-token bucket: the same
// instruction), both operands K-major; both chains fit the allocation.
TEST(LayerSm100, MmaIsGemmSmallSm100sOneTokenShape) {
  const model::InstrFields f = model::decode(Accum::kInstrDesc);
  EXPECT_NO_THROW(model::check_dense_kind_f16_cta1(f));
  EXPECT_EQ(f.m, 128u);
  EXPECT_EQ(f.n, 16u);
  EXPECT_FALSE(f.a_mn_major || f.b_mn_major);
  using OneToken = SmallEpilogueSm100<1, 2048, false>;
  EXPECT_EQ(Accum::kInstrDesc.bits, hexel::tcgen05::Bf16Accum<OneToken::kN>::kInstrDesc.bits);
  EXPECT_LE(S::token_col(1) + S::kN, unsigned{S::kTmemColumns});
}

// The token's descriptor at K step kk of K block kb reads, in B row 0, elements 64 kb + 16 kk ..
// + 15 of the resident row (chunk c at 16 c); every B row it reads lies inside the row and
// persistent_norm_a's 128-byte zero tail.
TEST(LayerSm100, TokenDescriptorReadsTheResidentRow) {
  constexpr unsigned kBase = 0x4000, kK = 2048;
  for (unsigned kb = 0; kb < kK / 64; ++kb)
    for (unsigned kk = 0; kk < 4; ++kk) {
      const auto desc = S::token_desc(kBase, kb, kk);
      for (unsigned k = 0; k < 16; ++k) {
        ASSERT_EQ(model::kmajor_element_address(desc, 0, k, 2), kBase + 2 * (64 * kb + 16 * kk + k))
            << "K block " << kb << ", step " << kk << ", element " << k;
        for (unsigned row = 0; row < S::kN; ++row) {
          const unsigned at = model::kmajor_element_address(desc, row, k, 2);
          ASSERT_GE(at, kBase);
          ASSERT_LT(at + 2, kBase + 2 * kK + 128 + 1) << "B row " << row;
        }
      }
    }
}

// A slot of a tile of bn rows (128: two K blocks; gate/up's 256: one) holds the producer's boxes
// (StreamCursor::boxes: K block j at j bn 128 bytes, gate/up's up box 128 rows after its gate box,
// each a 128B-swizzled TMA box of 64 columns); chain c's descriptor at K step kk reads A row i,
// element k from the box row of weight row i of that chain, column 16 kk + k.
TEST(LayerSm100, WeightDescriptorsReadTheProducersBoxes) {
  constexpr unsigned kSlot = 0x10000;  // 1024-byte aligned, like every ring slot
  for (unsigned bn : {128u, 256u}) {
    const unsigned chains = bn / S::kWeightRows, blocks = S::kSlotRows / bn;
    EXPECT_EQ(blocks * bn * 128, unsigned{S::kSlotBytes});
    for (unsigned j = 0; j < blocks; ++j)
      for (unsigned c = 0; c < chains; ++c) {
        const unsigned box = kSlot + j * bn * 128 + c * (bn / chains) * 128;  // the producer's
        ASSERT_EQ(S::weight_tile(kSlot, j, bn, c), box);
        ASSERT_EQ(box % 1024, 0u);
        for (unsigned kk = 0; kk < 4; ++kk)
          for (unsigned i = 0; i < S::kWeightRows; ++i)
            for (unsigned k = 0; k < 16; ++k)
              ASSERT_EQ(model::kmajor_element_address(
                            Accum::operand_desc(S::weight_tile(kSlot, j, bn, c), kk), i, k, 2),
                        box + hexel::swizzled_offset(i * 128 + 2 * (16 * kk + k), Swizzle::B128))
                  << "bn " << bn << ", block " << j << ", chain " << c << ", row " << i;
      }
  }
}

// The epilogue over the tiles of an N-row weight (SwiGLU: the gate rows of its first N rows and
// the up rows of the next N): thread (warp, lane) loads, from chain c's columns, the cell Layout D
// gives the element (its weight row, the token); every output column gets the elements of its
// weight row (and I + its row), once.
void walk(unsigned n, bool swiglu) {
  SCOPED_TRACE("N " + std::to_string(n) + (swiglu ? ", SwiGLU" : ""));
  const unsigned chains = swiglu ? 2 : 1;
  std::map<std::pair<unsigned, unsigned>, unsigned> held;  // cell -> weight row (in the tile)
  for (unsigned c = 0; c < chains; ++c)
    for (unsigned i = 0; i < S::kWeightRows; ++i) {
      const model::TmemCell cell =
          model::accumulator_cell(hexel::tcgen05::tmem_addr(0, S::token_col(c)), 128, S::kN, i, 0);
      held[{cell.lane, cell.column}] = c * S::kWeightRows + i;
    }
  std::vector<int> times(n);
  for (unsigned t = 0; t < n / S::kWeightRows; ++t)
    for (unsigned warp = 0; warp < 4; ++warp)
      for (unsigned lane = 0; lane < 32; ++lane) {
        const unsigned col = S::out_col(t, warp, lane);
        ASSERT_LT(col, n);
        ++times[col];
        for (unsigned c = 0; c < chains; ++c) {
          const model::TmemCell cell =
              model::ld_32x32b_cell(warp, Accum::ld_taddr(0, warp, S::token_col(c)), 1, lane, 0);
          ASSERT_LT(cell.column, unsigned{S::kTmemColumns});
          const unsigned row = held.at({cell.lane, cell.column});
          // The tile's row r of chain c is weight row t 128 + r (the gate's or only one; the
          // producer's up box: I + t 128 + r).
          ASSERT_EQ(c * n + t * S::kWeightRows + row % S::kWeightRows, c * n + col);
          ASSERT_EQ(row / S::kWeightRows, c);
        }
      }
  for (unsigned col = 0; col < n; ++col) ASSERT_EQ(times[col], 1) << "column " << col;
}

TEST(LayerSm100, EpilogueLoadsEachRowsElementOnce) {
  walk(128, false);
  walk(2048, false);
  walk(6144, false);
  walk(8960, true);
  walk(14336, true);
}

// QKV_ROPE: a row's rotation partner is four lanes over in its warp and holds the other element of
// its pair (qkv_pair_pos's order); both take the same entry of qkv_rope_angle's table, the one
// qkv_rope_pairs gives the row's pair index.
TEST(LayerSm100, RopePartnersAndAngles) {
  for (unsigned d : {32u, 64u, 128u})
    for (unsigned p = 0; p < 4 * d; ++p) {
      const unsigned r = p % S::kWeightRows, q = p - r + S::rope_partner(r);
      const unsigned n = S::rope_element(p, d);
      ASSERT_EQ(telos::qkv_pair_pos(n, static_cast<int>(d)), p % d) << "row " << p;
      ASSERT_EQ(r / 32, S::rope_partner(r) / 32) << "the partner in the same warp";
      ASSERT_EQ(S::rope_element(q, d), (n + d / 2) % d) << "row " << p;
      ASSERT_EQ(S::rope_entry(r), S::rope_entry(S::rope_partner(r)));
      // qkv_rope_angle(t, k): pair index (t BN + 8 (k / 4)) % D / 8 · 4 + k % 4.
      const unsigned k = S::rope_entry(r), group = p - r + 8 * (k / 4);
      ASSERT_EQ(group % d / 8 * 4 + k % 4, n % (d / 2)) << "row " << p;
    }
}

// The twin's image: each consumer thread's wgmma registers (two 64-row pieces a chain; their
// elements as hexel/examples/gemm_tile_accum.cuh's WgmmaAccum states wgmma's fragment layout) go
// to the cell where Tensor Memory holds the element, each cell once, inside the image; so each
// thread's read of its row's column token_col(c) is the tcgen05.ld it stands for.
TEST(LayerSm100, TwinImageHoldsTensorMemorysCells) {
  using T = SmallGemmSm100Twin;
  using Fragment = hexel::examples::WgmmaAccum<128>;
  std::map<unsigned, std::pair<unsigned, unsigned>> image;
  for (unsigned warp = 0; warp < 4; ++warp)
    for (unsigned lane = 0; lane < 32; ++lane)
      for (unsigned c = 0; c < 2; ++c)
        for (unsigned h = 0; h < 2; ++h)
          for (unsigned j = 0; j < S::kN / 8; ++j)
            for (unsigned hh = 0; hh < 2; ++hh)
              for (unsigned e = 0; e < 2; ++e) {
                const hexel::examples::TileElement el =
                    Fragment::element(32 * warp + lane, 0, 4 * j + 2 * hh + e);
                const unsigned row = S::image_row(h, warp, lane, hh);
                const unsigned col = T::image_col(c, S::kN, j, lane) + e;
                ASSERT_EQ(row, 64 * h + el.row);
                ASSERT_EQ(col, S::token_col(c) + el.col);
                const unsigned at = T::image_offset(row, col, S::kTmemColumns);
                ASSERT_LE(at + 4, S::image_bytes());
                ASSERT_TRUE(image.emplace(at, std::pair{row, col}).second) << "a cell twice";
              }
  for (unsigned warp = 0; warp < 4; ++warp)
    for (unsigned lane = 0; lane < 32; ++lane)
      for (unsigned c = 0; c < 2; ++c)
        ASSERT_EQ(image.at(T::image_offset(S::row(warp, lane), S::token_col(c), S::kTmemColumns)),
                  (std::pair{S::row(warp, lane), S::token_col(c)}));
}

// The plan's tiling: the kernel's tiles and slots, fitting the real configs and the tiny model,
// not a model whose rows make no whole 128-row chain; the shared memory within a block's.
TEST(LayerSm100, PlanTilingIsTheKernels) {
  using telos::codegen::decode_layer_sm100_tiling;
  EXPECT_EQ(telos::codegen::kPersistentSm100SlotBytes, static_cast<int>(S::kSlotBytes) + 16);
  struct Shape {
    int h, nqkv, ko, i, d;
    bool qk_norm;
  };
  for (const Shape& s :
       {Shape{128, 256, 128, 256, 32, false}, Shape{2048, 3072, 2048, 8192, 64, false},
        Shape{4096, 6144, 4096, 14336, 128, false}, Shape{1536, 2048, 1536, 8960, 128, false},
        Shape{1024, 4096, 2048, 3072, 128, true}}) {
    const telos::codegen::PersistentLayerTiling t =
        decode_layer_sm100_tiling(s.h, s.nqkv, s.ko, s.i, s.d, s.qk_norm);
    SCOPED_TRACE("H " + std::to_string(s.h));
    EXPECT_TRUE(t.fits);
    EXPECT_EQ(t.bq, static_cast<int>(S::kWeightRows));
    EXPECT_EQ(t.bg, 2 * static_cast<int>(S::kWeightRows));
    EXPECT_TRUE(S::tile_ok(t.bq, s.h) && S::tile_ok(t.bo, s.ko) && S::tile_ok(t.bg, s.h) &&
                S::tile_ok(t.bd, s.i));
    EXPECT_EQ(t.qkv_rope, !s.qk_norm);
    EXPECT_EQ(t.bulk, 0) << "no slot images";
    EXPECT_GE(t.stages, 4);
    EXPECT_LE(t.smem + 16 * 1024, telos::codegen::kMaxSmemPerBlock);
  }
  EXPECT_EQ(telos::codegen::kPersistentSm100TwinImageBytes, static_cast<int>(S::image_bytes()));
  // The twin: the slots that fit beside the image in static shared memory (the 1B: one fewer).
  const telos::codegen::PersistentLayerTiling one_b =
      decode_layer_sm100_tiling(2048, 3072, 2048, 8192, 64, false);
  const telos::codegen::PersistentLayerTiling twin =
      telos::codegen::decode_layer_sm100_twin_tiling(one_b);
  EXPECT_TRUE(twin.fits);
  EXPECT_EQ(twin.stages, one_b.stages - 1);
  EXPECT_EQ(twin.smem, one_b.smem - telos::codegen::kPersistentSm100SlotBytes);
  EXPECT_LE(twin.smem + 16 * 1024 + telos::codegen::kPersistentSm100TwinImageBytes,
            telos::codegen::kMaxSmemPerBlock);
  EXPECT_FALSE(decode_layer_sm100_tiling(192, 384, 192, 512, 64, false).fits) << "192 rows";
  EXPECT_FALSE(decode_layer_sm100_tiling(2048, 3072, 2048, 8200, 64, false).fits) << "I 8200";
  EXPECT_FALSE(S::tile_ok(128, 192)) << "K in whole 32 KB slots";
  EXPECT_TRUE(S::tile_ok(256, 192));
}

}  // namespace
}  // namespace telos_kernels
