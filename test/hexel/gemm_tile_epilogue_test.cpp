// The tile GEMM's index math on the CPU (hexel/examples/gemm_tile_accum.cuh): for every tile
// shape the kernels are instantiated with, the epilogue's map from (thread, chunk, register) to
// (row, column) of the tile agrees with what the hardware puts in that register, per the tcgen05
// model (hexel/tcgen05_model.h) for Blackwell and the wgmma fragment layout for Hopper; every
// accumulator element is stored exactly once; the runs the epilogue stores as vectors are
// adjacent columns; and the descriptors the MMAs read the stages through address the image TMA
// writes.
#include <gtest/gtest.h>

#include <map>
#include <ostream>
#include <utility>
#include <vector>

#include "gemm_tile_accum.cuh"
#include "hexel/swizzle.cuh"
#include "hexel/tcgen05_model.h"

namespace hexel::examples {
void PrintTo(const TileElement& e, std::ostream* os) {
  *os << "(" << e.row << ", " << e.col << ")";
}
}  // namespace hexel::examples

namespace {

using hexel::Swizzle;
using hexel::examples::TileElement;
namespace model = hexel::tcgen05::model;

// Counts how often each element of a 128 x BlockN tile is claimed; all must be claimed once.
class Coverage {
 public:
  explicit Coverage(uint32_t cols) : cols_(cols), seen_(128 * cols, 0) {}
  void claim(TileElement e) {
    ASSERT_LT(e.row, 128u);
    ASSERT_LT(e.col, cols_);
    ++seen_[e.row * cols_ + e.col];
  }
  void expect_each_once() const {
    for (uint32_t i = 0; i < seen_.size(); ++i)
      ASSERT_EQ(seen_[i], 1) << "element (" << i / cols_ << ", " << i % cols_ << ")";
  }

 private:
  uint32_t cols_;
  std::vector<int> seen_;
};

// Runs of Accum::kVec registers are adjacent columns of one row, starting on a multiple of kVec
// (so a run inside C, with N a multiple of kVec, is one aligned vector store).
template <class Accum>
void expect_vector_runs(uint32_t thread, uint32_t chunk) {
  for (uint32_t g = 0; g < Accum::kChunkRegs / Accum::kVec; ++g) {
    const TileElement first = Accum::element(thread, chunk, g * Accum::kVec);
    ASSERT_EQ(first.col % Accum::kVec, 0u);
    for (uint32_t i = 1; i < Accum::kVec; ++i)
      ASSERT_EQ(Accum::element(thread, chunk, g * Accum::kVec + i),
                (TileElement{first.row, first.col + i}));
  }
}

// K slice kk of a stage of `rows` rows, read through operand_desc, is the TMA image's bytes.
template <class Accum>
void expect_operand_descs_read_tma_image(uint32_t rows) {
  constexpr uint32_t kStage = 0x10400;  // 1024-byte aligned
  for (uint32_t kk = 0; kk < Accum::Shape::kBlockK / 16; ++kk)
    for (uint32_t row = 0; row < rows; ++row)
      for (uint32_t k = 0; k < 16; ++k) {
        const hexel::tcgen05::SmemDesc d{Accum::operand_desc(kStage, kk).bits};
        ASSERT_EQ(model::kmajor_element_address(d, row, k, 2),
                  kStage + hexel::swizzled_offset(row * 128 + 2 * (16 * kk + k), Swizzle::B128))
            << "row " << row << " k slice " << kk;
      }
}

template <uint32_t BlockN>
void check_tcgen05_epilogue(uint32_t tmem_base) {
  using Accum = hexel::examples::Tcgen05Accum<BlockN>;
  SCOPED_TRACE("BlockN " + std::to_string(BlockN) + ", TMEM base column " +
               std::to_string(tmem_base & 0xFFFF));
  // Layout D, inverted by enumeration: which accumulator element each Tensor Memory cell holds.
  std::map<std::pair<uint32_t, uint32_t>, TileElement> held;
  for (uint32_t row = 0; row < 128; ++row)
    for (uint32_t n = 0; n < BlockN; ++n) {
      const model::TmemCell c = model::accumulator_cell(tmem_base, 128, BlockN, row, n);
      held[{c.lane, c.column}] = {row, n};
    }
  Coverage coverage(BlockN);
  for (uint32_t thread = 0; thread < 128; ++thread)
    for (uint32_t chunk = 0; chunk < Accum::kChunks; ++chunk) {
      const uint32_t warp = thread / 32, taddr = Accum::chunk_taddr(tmem_base, warp, chunk);
      for (uint32_t reg = 0; reg < Accum::kChunkRegs; ++reg) {
        const model::TmemCell cell =
            model::ld_32x32b_cell(warp, taddr, Accum::kChunkRegs, thread % 32, reg);
        const auto it = held.find({cell.lane, cell.column});
        ASSERT_NE(it, held.end()) << "thread " << thread << " register " << reg
                                  << " reads outside the accumulator";
        ASSERT_EQ(Accum::element(thread, chunk, reg), it->second)
            << "thread " << thread << " chunk " << chunk << " register " << reg;
        coverage.claim(it->second);
      }
      expect_vector_runs<Accum>(thread, chunk);
    }
  coverage.expect_each_once();
}

// Blackwell: the tcgen05.ld fragments of the accumulator warpgroup, through Layout D, are the
// elements the epilogue stores them as, each once, whichever column the allocation starts at.
TEST(GemmTileEpilogue, Tcgen05MapMatchesTheModel) {
  check_tcgen05_epilogue<128>(hexel::tcgen05::tmem_addr(0, 0));
  check_tcgen05_epilogue<128>(hexel::tcgen05::tmem_addr(0, 256));
  check_tcgen05_epilogue<256>(hexel::tcgen05::tmem_addr(0, 0));
  check_tcgen05_epilogue<256>(hexel::tcgen05::tmem_addr(0, 256));
  check_tcgen05_epilogue<64>(hexel::tcgen05::tmem_addr(0, 32));
}

// The instruction descriptor the MMA thread issues is a legal one-CTA kind::f16 shape of the
// tile: M 128, N BlockN, bf16 x bf16 -> f32, both operands K-major; the allocation is a power
// of two of at least BlockN columns.
template <uint32_t BlockN>
void check_tcgen05_mma_setup() {
  using Accum = hexel::examples::Tcgen05Accum<BlockN>;
  const model::InstrFields f = model::decode(Accum::kInstrDesc);
  EXPECT_NO_THROW(model::check_dense_kind_f16_cta1(f));
  EXPECT_EQ(f.m, 128u);
  EXPECT_EQ(f.n, BlockN);
  EXPECT_EQ(f.d_type, 1u);
  EXPECT_EQ(f.a_type, 1u);
  EXPECT_EQ(f.b_type, 1u);
  EXPECT_FALSE(f.a_mn_major || f.b_mn_major || f.negate_a || f.negate_b);
  EXPECT_GE(Accum::kTmemColumns, BlockN);
  EXPECT_TRUE(Accum::kTmemColumns >= 32 && Accum::kTmemColumns <= 512 &&
              (Accum::kTmemColumns & (Accum::kTmemColumns - 1)) == 0);
  expect_operand_descs_read_tma_image<Accum>(128);     // A
  expect_operand_descs_read_tma_image<Accum>(BlockN);  // W
}

TEST(GemmTileEpilogue, Tcgen05MmaDescriptors) {
  check_tcgen05_mma_setup<128>();
  check_tcgen05_mma_setup<256>();
}

// PTX ISA, "Asynchronous Warpgroup Level Matrix Multiply-Accumulate: Register Fragments", matrix
// D of .m64nNk16 with f32 accumulators: thread t = 32 w + l holds N / 2 registers; register i is
// row 16 w + l / 4 + 8 ((i / 2) % 2), column 8 (i / 4) + 2 (l % 4) + i % 2 of the 64-row block.
TileElement wgmma_fragment_element(uint32_t thread, uint32_t reg) {
  const uint32_t w = thread / 32, l = thread % 32;
  return {16 * w + l / 4 + 8 * ((reg / 2) % 2), 8 * (reg / 4) + 2 * (l % 4) + reg % 2};
}

// Hopper: chunk h is the wgmma issued on the A rows 64 h .., so its fragment sits 64 h rows down.
TEST(GemmTileEpilogue, WgmmaMapMatchesTheFragmentLayout) {
  using Accum = hexel::examples::WgmmaAccum<128>;
  Coverage coverage(128);
  for (uint32_t thread = 0; thread < 128; ++thread)
    for (uint32_t h = 0; h < Accum::kChunks; ++h) {
      for (uint32_t reg = 0; reg < Accum::kChunkRegs; ++reg) {
        TileElement want = wgmma_fragment_element(thread, reg);
        want.row += 64 * h;
        ASSERT_EQ(Accum::element(thread, h, reg), want)
            << "thread " << thread << " half " << h << " register " << reg;
        coverage.claim(want);
      }
      expect_vector_runs<Accum>(thread, h);
    }
  coverage.expect_each_once();
}

// The wgmma operand descriptors carry the same start, LBO and SBO fields (bits 0-45) as the
// tcgen05 ones the model checks against the TMA image, with the 128B swizzle in wgmma's encoding.
TEST(GemmTileEpilogue, WgmmaDescriptorsMatchTcgen05Ones) {
  using Wgmma = hexel::examples::WgmmaAccum<128>;
  using Tcgen05 = hexel::examples::Tcgen05Accum<128>;
  constexpr uint64_t kLow46 = (uint64_t{1} << 46) - 1;
  for (uint32_t kk = 0; kk < 4; ++kk) {
    const auto w = Wgmma::operand_desc(0x10400, kk);
    EXPECT_EQ(w.bits & kLow46, Tcgen05::operand_desc(0x10400, kk).bits & kLow46);
    EXPECT_EQ(w.swizzle_field(), 1u);  // 128B
    EXPECT_EQ(w.base_offset(), 0u);
  }
}

}  // namespace
