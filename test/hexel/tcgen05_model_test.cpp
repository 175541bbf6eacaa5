// Host tests of the tcgen05 model (hexel/tcgen05_model.h) against statements of the PTX ISA,
// "TensorCore 5th Generation Family Instructions" (the section of each is named per test), and
// of Hexel's descriptor builders (hexel/tcgen05_desc.cuh) and swizzle map (hexel/swizzle.cuh)
// against the model.
#include "hexel/tcgen05_model.h"

#include <gtest/gtest.h>

#include <set>
#include <utility>
#include <vector>

#include "hexel/swizzle.cuh"
#include "hexel/tcgen05_accum.cuh"
#include "hexel/tcgen05_desc.cuh"

namespace {

using hexel::Swizzle;
using hexel::tcgen05::AbType;
using hexel::tcgen05::DType;
using hexel::tcgen05::InstrDesc;
using hexel::tcgen05::SmemDesc;
namespace model = hexel::tcgen05::model;

#define EXPECT_INVALID(stmt, text)                                                \
  do {                                                                            \
    try {                                                                         \
      (void)(stmt);                                                               \
      ADD_FAILURE() << #stmt " did not throw";                                    \
    } catch (const std::invalid_argument& e) {                                    \
      EXPECT_NE(std::string(e.what()).find(text), std::string::npos) << e.what(); \
    }                                                                             \
  } while (0)

// "Instruction descriptor": the worked value 0x08400490 (bf16 x bf16 -> f32, M 128, N 256)
// decodes to exactly those fields.
TEST(Tcgen05ModelInstr, DecodesTheWorkedValue) {
  const model::InstrFields f = model::decode(InstrDesc{0x08400490u});
  model::InstrFields want;
  want.d_type = 1;
  want.a_type = 1;
  want.b_type = 1;
  want.m = 128;
  want.n = 256;
  EXPECT_EQ(f, want);
}

// Every dense kind::f16 shape and flag combination Hexel's builder can express round-trips:
// decode(make(...)) holds the arguments, and encode(decode(bits)) gives the bits back.
TEST(Tcgen05ModelInstr, BuilderRoundTripsEveryShape) {
  int checked = 0;
  for (AbType t : {AbType::F16, AbType::BF16})
    for (DType d : {DType::F16, DType::F32})
      for (uint32_t m : {64u, 128u})
        for (uint32_t n = 8; n <= 256; n += 8)
          for (uint32_t flags = 0; flags < 16; ++flags) {
            if (d == DType::F16 && t == AbType::BF16) continue;
            const bool amn = flags & 1, bmn = flags & 2, na = flags & 4, nb = flags & 8;
            const InstrDesc desc = InstrDesc::make(t, t, d, m, n, amn, bmn, na, nb);
            const model::InstrFields f = model::decode(desc);
            EXPECT_EQ(f.m, m);
            EXPECT_EQ(f.n, n);
            EXPECT_EQ(f.d_type, static_cast<uint32_t>(d));
            EXPECT_EQ(f.a_type, t == AbType::BF16 ? 1u : 0u);
            EXPECT_EQ(f.b_type, f.a_type);
            EXPECT_EQ(f.a_mn_major, amn);
            EXPECT_EQ(f.b_mn_major, bmn);
            EXPECT_EQ(f.negate_a, na);
            EXPECT_EQ(f.negate_b, nb);
            EXPECT_EQ(desc.m(), m);
            EXPECT_EQ(desc.n(), n);
            EXPECT_NO_THROW(model::check_dense_kind_f16_cta1(f));
            EXPECT_EQ(model::encode(f).bits, desc.bits);
            ++checked;
          }
  EXPECT_EQ(checked, 3 * 2 * 32 * 16);
}

// Reserved bits 6, 23 and 29 must be zero; fields that do not fit are refused by name.
TEST(Tcgen05ModelInstr, RejectsReservedBitsAndOversizedFields) {
  EXPECT_INVALID(model::decode(InstrDesc{1u << 23}), "bit 23 is reserved");
  EXPECT_INVALID(model::decode(InstrDesc{1u << 6}), "bit 6 is reserved");
  EXPECT_INVALID(model::decode(InstrDesc{1u << 29}), "bit 29 is reserved");
  model::InstrFields f;
  f.m = 128;
  f.n = 512;  // N >> 3 = 64 needs 7 bits
  EXPECT_INVALID(model::encode(f), "N >> 3 = 64 does not fit its 6-bit field");
  f.n = 100;
  EXPECT_INVALID(model::encode(f), "N = 100 is not a multiple of 8");
  f.n = 128;
  f.a_type = 8;
  EXPECT_INVALID(model::encode(f), "a_type = 8 does not fit its 3-bit field");
}

// "Matrix Shape": one CTA, dense kind::f16: M 64 or 128, N 8 .. 256 in steps of 8 (N = 8 is
// legal at M = 128 too; steps of 16 are the CTA pair's rule), bf16 operands need an f32 D.
TEST(Tcgen05ModelInstr, ShapeTableForOneCta) {
  model::InstrFields f;
  f.d_type = 1;
  f.a_type = f.b_type = 1;
  f.m = 128;
  f.n = 8;
  EXPECT_NO_THROW(model::check_dense_kind_f16_cta1(f));
  f.m = 256;
  EXPECT_INVALID(model::check_dense_kind_f16_cta1(f), "M = 256");
  f.m = 128;
  f.n = 264;
  EXPECT_INVALID(model::check_dense_kind_f16_cta1(f), "N = 264");
  f.n = 0;
  EXPECT_INVALID(model::check_dense_kind_f16_cta1(f), "N = 0");
  f.n = 128;
  f.d_type = 0;
  EXPECT_INVALID(model::check_dense_kind_f16_cta1(f), "f16 D takes f16 operands only");
}

// "Matrix Shape": a CTA pair, dense kind::f16: M 128 or 256, N 16 .. 256 in steps of 16. The
// pair accumulator's descriptor (Bf16Accum<256, 2>: bf16 x bf16 -> f32, M 256, N 256) is the
// one-CTA worked value 0x08400490 with M >> 4 = 16 in bits 24-28: 0x10400490, which one CTA may
// not issue.
TEST(Tcgen05ModelInstr, ShapeTableForACtaPair) {
  using Pair = hexel::tcgen05::Bf16Accum<256, 2>;
  EXPECT_EQ(Pair::kInstrDesc.bits, 0x10400490u);
  EXPECT_EQ(hexel::tcgen05::Bf16Accum<256>::kInstrDesc.bits, 0x08400490u);
  const model::InstrFields f = model::decode(Pair::kInstrDesc);
  EXPECT_EQ(f.m, 256u);
  EXPECT_EQ(f.n, 256u);
  EXPECT_EQ(f.d_type, 1u);
  EXPECT_EQ(f.a_type, 1u);
  EXPECT_EQ(f.b_type, 1u);
  EXPECT_FALSE(f.a_mn_major || f.b_mn_major);
  EXPECT_NO_THROW(model::check_dense_kind_f16_cta2(f));
  EXPECT_INVALID(model::check_dense_kind_f16_cta1(f), "M = 256");
  model::InstrFields g = f;
  g.n = 8;
  EXPECT_INVALID(model::check_dense_kind_f16_cta2(g), "N = 8");
  g.n = 136;
  EXPECT_INVALID(model::check_dense_kind_f16_cta2(g), "N = 136");
  g.n = 144;
  EXPECT_NO_THROW(model::check_dense_kind_f16_cta2(g));
  g.m = 64;
  EXPECT_INVALID(model::check_dense_kind_f16_cta2(g), "M = 64");
  g.m = 256;
  g.d_type = 0;
  EXPECT_INVALID(model::check_dense_kind_f16_cta2(g), "f16 D takes f16 operands only");
}

// "Shared Memory Descriptor": Hexel's K-major 128B descriptor decodes to start, LBO 16 (unused,
// "assumed 1"), SBO 1024 (8 rows x 128 B), version 0b001, base offset 0, swizzling mode 2.
TEST(Tcgen05ModelSmem, DecodesTheKMajor128BDescriptor) {
  const model::SmemFields f = model::decode(hexel::tcgen05::kmajor_desc(0x400, Swizzle::B128));
  EXPECT_EQ(f, (model::SmemFields{0x400, 16, 1024, 0, 0, 2}));
  EXPECT_EQ(model::decode(hexel::tcgen05::kmajor_desc(0, Swizzle::B64)).layout, 4u);
  EXPECT_EQ(model::decode(hexel::tcgen05::kmajor_desc(0, Swizzle::B32)).layout, 6u);
  EXPECT_EQ(model::decode(hexel::tcgen05::kmajor_desc(0, Swizzle::B64)).sbo, 512u);
}

// Round trips over the shared window (18-bit addresses, 16-byte granules), every swizzle, base
// offsets and strides: model encode == Hexel make, and decode inverts both; advanced(bytes)
// moves the start address only.
TEST(Tcgen05ModelSmem, BuilderRoundTripsAndAdvance) {
  for (Swizzle s : {Swizzle::None, Swizzle::B32, Swizzle::B64, Swizzle::B128})
    for (uint32_t addr = 0; addr < (1u << 18); addr += 0x1230)
      for (uint32_t base_offset = 0; base_offset < 8; base_offset += 3) {
        const uint32_t lbo = 16 * (addr % 97), sbo = 16 * (addr % 1021);
        const SmemDesc d = SmemDesc::make(addr & ~15u, s, lbo, sbo, base_offset);
        const model::SmemFields f = model::decode(d);
        EXPECT_EQ(f.start, addr & ~15u);
        EXPECT_EQ(f.lbo, lbo);
        EXPECT_EQ(f.sbo, sbo);
        EXPECT_EQ(f.base_offset, base_offset);
        EXPECT_EQ(f.layout, static_cast<uint32_t>(hexel::tcgen05::layout_code(s)));
        EXPECT_EQ(model::encode(f).bits, d.bits);
      }
  const SmemDesc d = hexel::tcgen05::kmajor_desc(0x2400, Swizzle::B128);
  model::SmemFields moved = model::decode(d);
  moved.start += 96;
  EXPECT_EQ(model::decode(d.advanced(96)), moved);
}

// Fixed fields and invalid swizzling modes are refused, naming the bits.
TEST(Tcgen05ModelSmem, RejectsFixedFieldsAndInvalidModes) {
  const uint64_t good = hexel::tcgen05::kmajor_desc(0x400, Swizzle::B128).bits;
  EXPECT_INVALID(model::decode(SmemDesc{good & ~(1ull << 46)}), "bits 46-48 must hold 0b001");
  EXPECT_INVALID(model::decode(SmemDesc{good | (1ull << 55)}), "bits 53-60 must be 0");
  EXPECT_INVALID(model::decode(SmemDesc{good | (1ull << 15)}), "bits 14-15 and 30-31");
  EXPECT_INVALID(model::decode(SmemDesc{(good & ~(7ull << 61)) | (3ull << 61)}),
                 "swizzling mode 3 is invalid");
  model::SmemFields f = model::decode(SmemDesc{good});
  f.sbo = 1000;
  EXPECT_INVALID(model::encode(f), "sbo = 1000 is not 16-byte aligned");
  f.sbo = 1u << 18;
  EXPECT_INVALID(model::encode(f), "sbo >> 4 = 16384 does not fit its 14-bit field");
}

// "Major-ness supported by Strides" and the 128B swizzle atom (8 rows x 128 B): worked cases of
// a bf16 K-major tile at 0x400. Row 1's first chunk moves to chunk 1; row 7, k 56 (byte 112,
// chunk 7) moves to chunk 0; row 8 is the next atom, SBO on; an unswizzled K-major tile has
// core matrices of 8 rows x 16 B, LBO apart along K and SBO apart along M.
TEST(Tcgen05ModelSmem, KMajorElementAddressWorkedCases) {
  const SmemDesc d = hexel::tcgen05::kmajor_desc(0x400, Swizzle::B128);
  EXPECT_EQ(model::kmajor_element_address(d, 0, 0, 2), 0x400u);
  EXPECT_EQ(model::kmajor_element_address(d, 1, 0, 2), 0x490u);
  EXPECT_EQ(model::kmajor_element_address(d, 7, 56, 2), 0x780u);
  EXPECT_EQ(model::kmajor_element_address(d, 8, 0, 2), 0x800u);
  EXPECT_EQ(model::kmajor_element_address(d, 9, 3, 2), 0x800u + 128 + 16 + 6);
  const SmemDesc plain = SmemDesc::make(0x1000, Swizzle::None, 128, 256);
  EXPECT_EQ(model::kmajor_element_address(plain, 3, 5, 2), 0x1000u + 3 * 16 + 10);
  EXPECT_EQ(model::kmajor_element_address(plain, 0, 8, 2), 0x1000u + 128);
  EXPECT_EQ(model::kmajor_element_address(plain, 8, 0, 2), 0x1000u + 256);
  EXPECT_INVALID(model::kmajor_element_address(d, 0, 64, 2), "runs past the 128-byte");
  EXPECT_INVALID(
      model::kmajor_element_address(SmemDesc::make(0x400, Swizzle::B128, 16, 1024, 2), 0, 0, 2),
      "base_offset = 2");
}

// The main loop's contract: TMA writes a box of R rows x 64 bf16 (one 128-byte swizzle row
// each) into a 1024-byte-aligned stage, byte o of the row-major box image at swizzled_offset(o)
// (hexel/swizzle.cuh, checked on the GPU byte for byte); the MMA reads K slice kk (16 elements)
// through kmajor_desc(stage).advanced(32 kk). For every row and k of A (128 rows) and of W
// (up to 256 rows) the two agree, and agree with swizzled_chunk_b128's chunk addresses.
TEST(Tcgen05ModelSmem, DescriptorsReadTheTmaImage) {
  constexpr uint32_t kStage = 0x8400;  // 1024-byte aligned
  for (uint32_t rows : {128u, 256u})
    for (uint32_t kk = 0; kk < 4; ++kk) {
      const SmemDesc d = hexel::tcgen05::kmajor_desc(kStage, Swizzle::B128).advanced(32 * kk);
      for (uint32_t row = 0; row < rows; ++row)
        for (uint32_t k = 0; k < 16; ++k) {
          const uint32_t col = 16 * kk + k;
          const uint32_t tma = kStage + hexel::swizzled_offset(row * 128 + 2 * col, Swizzle::B128);
          ASSERT_EQ(model::kmajor_element_address(d, row, k, 2), tma)
              << "row " << row << " k " << col;
          ASSERT_EQ(hexel::swizzled_chunk_b128(kStage, row, col / 8) + 2 * col % 16, tma);
        }
    }
}

// The same agreement for the 64B and 32B swizzles (boxes of 32 and 16 bf16 per row).
TEST(Tcgen05ModelSmem, NarrowSwizzlesReadTheTmaImage) {
  for (Swizzle s : {Swizzle::B64, Swizzle::B32}) {
    const uint32_t span = static_cast<uint32_t>(s);
    for (uint32_t slice = 0; slice < span / 32; ++slice) {
      const SmemDesc d = hexel::tcgen05::kmajor_desc(0x2000, s).advanced(32 * slice);
      for (uint32_t row = 0; row < 64; ++row)
        for (uint32_t k = 0; k < 16; ++k)
          ASSERT_EQ(model::kmajor_element_address(d, row, k, 2),
                    0x2000u + hexel::swizzled_offset(row * span + 32 * slice + 2 * k, s))
              << "span " << span << " row " << row << " k " << k;
    }
  }
}

// "Shared Memory Matrix Layout", the figure "MN major 128B swizzling", in 16-byte units: an atom is
// 8 K rows of 8 chunks along MN, chunk i of row j stored at position 8 j + (i ^ j). For bf16 (8
// a chunk) element (mn, k) of the first atom is at 128 k + 16 ((mn / 8) ^ k) + 2 (mn % 8); the
// next 64 elements along MN are LBO further, the next 8 K rows SBO further.
TEST(Tcgen05ModelSmem, MnMajor128BAtomIsTheFigure) {
  const uint32_t lbo = 0x4000, sbo = 0x400;
  const SmemDesc d = SmemDesc::make(0x2000, Swizzle::B128, lbo, sbo);
  for (uint32_t k = 0; k < 8; ++k)
    for (uint32_t mn = 0; mn < 64; ++mn)
      ASSERT_EQ(model::mnmajor_element_address(d, mn, k, 2),
                0x2000u + 128 * k + 16 * ((mn / 8) ^ k) + 2 * (mn % 8))
          << "mn " << mn << " k " << k;
  EXPECT_EQ(model::mnmajor_element_address(d, 64 + 9, 3, 2),
            0x2000u + lbo + 128 * 3 + 16 * (1 ^ 3) + 2);
  EXPECT_EQ(model::mnmajor_element_address(d, 5, 8 + 2, 2), 0x2000u + sbo + 128 * 2 + 16 * 2 + 10);
  // Distinct elements of a 128 x 16 operand land on distinct bytes.
  std::set<uint32_t> bytes;
  for (uint32_t k = 0; k < 16; ++k)
    for (uint32_t mn = 0; mn < 128; ++mn) bytes.insert(model::mnmajor_element_address(d, mn, k, 2));
  EXPECT_EQ(bytes.size(), 128u * 16u);
  EXPECT_INVALID(
      model::mnmajor_element_address(SmemDesc::make(0x2000, Swizzle::None, 128, 256), 0, 0, 2),
      "swizzled layouts only");
}

// tcgen05.st .32x32b writes the cells tcgen05.ld .32x32b reads, under the same restriction.
TEST(Tcgen05ModelTmem, St32x32bIsLdsFragment) {
  const uint32_t taddr = hexel::tcgen05::tmem_addr(64, 160);
  for (uint32_t lane = 0; lane < 32; ++lane)
    for (uint32_t reg = 0; reg < 32; ++reg)
      EXPECT_EQ(model::st_32x32b_cell(6, taddr, 32, lane, reg),
                (model::TmemCell{64 + lane, 160 + reg}));
  EXPECT_INVALID(model::st_32x32b_cell(5, taddr, 32, 0, 0), "reaches lanes 32-63");
}

// "Data Path Layout Organization", Layout D: an M = 128, N = 256 f32 accumulator at column 128
// puts (row, n) at lane row, column 128 + n; distinct elements land in distinct cells.
TEST(Tcgen05ModelTmem, LayoutDIsLaneRowColumnN) {
  const uint32_t base = hexel::tcgen05::tmem_addr(0, 128);
  EXPECT_EQ(model::accumulator_cell(base, 128, 256, 0, 0), (model::TmemCell{0, 128}));
  EXPECT_EQ(model::accumulator_cell(base, 128, 256, 127, 255), (model::TmemCell{127, 383}));
  std::set<std::pair<uint32_t, uint32_t>> cells;
  for (uint32_t row = 0; row < 128; ++row)
    for (uint32_t n = 0; n < 256; ++n) {
      const model::TmemCell c = model::accumulator_cell(base, 128, 256, row, n);
      cells.insert({c.lane, c.column});
    }
  EXPECT_EQ(cells.size(), 128u * 256u);
  EXPECT_INVALID(model::accumulator_cell(hexel::tcgen05::tmem_addr(32, 0), 128, 128, 0, 0),
                 "starts at lane 0");
  EXPECT_INVALID(model::accumulator_cell(base, 128, 512, 0, 0), "past column 511");
  EXPECT_INVALID(model::accumulator_cell(base, 64, 128, 0, 0), "only Layout D");
  EXPECT_INVALID(model::accumulator_cell(base, 128, 128, 128, 0), "outside 128 x 128");
}

// "Data Path Layout Organization", Layout A (cta_group::2, M = 256): rows 0 .. 127 of D in CTA 0,
// 128 .. 255 in CTA 1, row i at lane i % 128 and column n after the address's column, so a CTA's
// own 128 rows sit as Layout D's; every element of the pair's 256 x 256 accumulator has one
// cell of one CTA. The operands split the same way: A rows by halves of M, B rows by halves of N.
TEST(Tcgen05ModelTmem, LayoutAPutsEachCtasRowsInItsOwnLanes) {
  const uint32_t base = hexel::tcgen05::tmem_addr(0, 256);
  EXPECT_EQ(model::pair_accumulator_cell(base, 256, 256, 0, 0),
            (model::PairCell{0, model::TmemCell{0, 256}}));
  EXPECT_EQ(model::pair_accumulator_cell(base, 256, 256, 127, 255),
            (model::PairCell{0, model::TmemCell{127, 511}}));
  EXPECT_EQ(model::pair_accumulator_cell(base, 256, 256, 128, 3),
            (model::PairCell{1, model::TmemCell{0, 259}}));
  EXPECT_EQ(model::pair_accumulator_cell(base, 256, 256, 255, 17),
            (model::PairCell{1, model::TmemCell{127, 273}}));
  std::set<std::pair<uint32_t, std::pair<uint32_t, uint32_t>>> cells;
  for (uint32_t row = 0; row < 256; ++row)
    for (uint32_t n = 0; n < 256; n += 5) {
      const model::PairCell c = model::pair_accumulator_cell(base, 256, 256, row, n);
      EXPECT_EQ(c.cell, model::accumulator_cell(base, 128, 256, row % 128, n));
      cells.insert({c.cta, {c.cell.lane, c.cell.column}});
    }
  EXPECT_EQ(cells.size(), 256u * 52u);
  EXPECT_EQ(model::pair_a_row(256, 200), (model::PairRow{1, 72}));
  EXPECT_EQ(model::pair_b_row(256, 127), (model::PairRow{0, 127}));
  EXPECT_EQ(model::pair_b_row(256, 128), (model::PairRow{1, 0}));
  EXPECT_INVALID(model::pair_accumulator_cell(base, 128, 256, 0, 0), "only the M = 256 pair");
  EXPECT_INVALID(model::pair_accumulator_cell(base, 256, 256, 256, 0), "outside M = 256");
  EXPECT_INVALID(model::pair_accumulator_cell(hexel::tcgen05::tmem_addr(0, 300), 256, 256, 0, 0),
                 "past column 511");
  EXPECT_INVALID(model::pair_b_row(48, 0), "N = 48");
  EXPECT_INVALID(model::pair_b_row(256, 256), "outside N = 256");
}

// "Matrix fragments for shape .32x32b": thread l's register r is lane base + l, column base + r.
// "Access restrictions": warp w reaches lanes 32 (w % 4) .. + 31 only.
TEST(Tcgen05ModelTmem, Ld32x32bFragment) {
  const uint32_t taddr = hexel::tcgen05::tmem_addr(64, 40);
  EXPECT_EQ(model::ld_32x32b_cell(2, taddr, 32, 0, 0), (model::TmemCell{64, 40}));
  EXPECT_EQ(model::ld_32x32b_cell(6, taddr, 32, 31, 31), (model::TmemCell{95, 71}));
  EXPECT_EQ(model::ld_32x32b_cell(2, taddr, 1, 5, 0), (model::TmemCell{69, 40}));
  EXPECT_INVALID(model::ld_32x32b_cell(1, taddr, 32, 0, 0),
                 "warp 1 reaches lanes 32-63, the load names lane 64");
  EXPECT_INVALID(model::ld_32x32b_cell(2, taddr, 24, 0, 0), ".x24");
  EXPECT_INVALID(model::ld_32x32b_cell(2, taddr, 32, 0, 32), "register 32");
  EXPECT_INVALID(model::ld_32x32b_cell(2, hexel::tcgen05::tmem_addr(64, 500), 32, 0, 0),
                 "past column 511");
}

// A warpgroup whose warp w loads .x32 at lane 32 w, columns 32 c, for c < N / 32, receives
// every cell of a 128 x N accumulator exactly once.
TEST(Tcgen05ModelTmem, WarpgroupLoadsCoverTheAccumulatorOnce) {
  constexpr uint32_t kN = 256;
  std::vector<int> seen(128 * kN, 0);
  for (uint32_t warp = 0; warp < 4; ++warp)
    for (uint32_t c = 0; c < kN / 32; ++c)
      for (uint32_t l = 0; l < 32; ++l)
        for (uint32_t r = 0; r < 32; ++r) {
          const auto cell =
              model::ld_32x32b_cell(warp, hexel::tcgen05::tmem_addr(32 * warp, 32 * c), 32, l, r);
          ++seen[cell.lane * kN + cell.column];
        }
  for (uint32_t i = 0; i < seen.size(); ++i) ASSERT_EQ(seen[i], 1) << "cell " << i;
}

}  // namespace
