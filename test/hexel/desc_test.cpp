// Host unit tests of Hexel's descriptor builders against encodings worked out by hand from the
// PTX ISA manual (sections cited per test), and of the swizzle map TMA and wgmma share.
#include <gtest/gtest.h>

#include "hexel/desc_print.h"
#include "hexel/swizzle.cuh"
#include "hexel/tcgen05_desc.cuh"
#include "hexel/wgmma_desc.cuh"

namespace {

using hexel::Swizzle;

// "Matrix Descriptor Format": start 0x400 >> 4 = 0x40 in bits 0-13, LBO 16 >> 4 = 1 in bits
// 16-29, SBO 1024 >> 4 = 0x40 in bits 32-45, 128B swizzle = 1 in bits 62-63.
TEST(WgmmaSmemDesc, KMajor128BSwizzle) {
  constexpr auto d = hexel::wgmma::kmajor_desc(0x400, Swizzle::B128);
  static_assert(d.bits == 0x4000004000010040ull);
  EXPECT_EQ(d.bits, 0x4000004000010040ull);
  EXPECT_EQ(d.start_address(), 0x400u);
  EXPECT_EQ(d.leading_byte_offset(), 16u);
  EXPECT_EQ(d.stride_byte_offset(), 1024u);
  EXPECT_EQ(d.swizzle_field(), 1u);
}

// 64B swizzle is code 2, 32B code 3, none 0 (bits 62-63); SBO = 8 rows x span.
TEST(WgmmaSmemDesc, SwizzleCodesAndStrides) {
  EXPECT_EQ(hexel::wgmma::kmajor_desc(0, Swizzle::B64).bits,
            (2ull << 62) | (32ull << 32) | (1u << 16));
  EXPECT_EQ(hexel::wgmma::kmajor_desc(0, Swizzle::B32).bits,
            (3ull << 62) | (16ull << 32) | (1u << 16));
  // No swizzle, core matrices 8 rows x 16 B: LBO 128 B between K-adjacent core matrices,
  // SBO 256 B between M-adjacent ones.
  EXPECT_EQ(hexel::wgmma::SmemDesc::make(0x1230, Swizzle::None, 128, 256).bits,
            0x0000001000080123ull);
}

// The address field holds bits 4..17 of the shared address; base offset sits in bits 49-51.
TEST(WgmmaSmemDesc, AddressMaskAndBaseOffset) {
  constexpr auto d = hexel::wgmma::SmemDesc::make(0x3FFF0, Swizzle::None, 0, 0, 5);
  EXPECT_EQ(d.bits, (5ull << 49) | 0x3FFFull);
  EXPECT_EQ(d.base_offset(), 5u);
}

// Stepping K by 16 bf16 (32 bytes) inside a 128B swizzle row adds 2 to the start field.
TEST(WgmmaSmemDesc, AdvanceByKSlice) {
  constexpr auto d = hexel::wgmma::kmajor_desc(0x400, Swizzle::B128);
  EXPECT_EQ(d.advanced(32).bits, d.bits + 2);
  EXPECT_EQ(d.advanced(96).start_address(), 0x400u + 96u);
}

// "Instruction descriptor" for kind::f16: D f32 (1 << 4), A bf16 (1 << 7), B bf16 (1 << 10),
// N = 256 -> 32 << 17, M = 128 -> 8 << 24. 0x10 + 0x80 + 0x400 + 0x400000 + 0x8000000.
TEST(Tcgen05InstrDesc, Bf16M128N256) {
  constexpr auto d =
      hexel::tcgen05::InstrDesc::make(hexel::tcgen05::AbType::BF16, hexel::tcgen05::AbType::BF16,
                                      hexel::tcgen05::DType::F32, 128, 256);
  static_assert(d.bits == 0x08400490u);
  EXPECT_EQ(d.bits, 0x08400490u);
  EXPECT_EQ(d.m(), 128u);
  EXPECT_EQ(d.n(), 256u);
}

// f16 inputs, f16 accumulate, M = 64, N = 8, B MN-major, A negated:
// (0 << 4) | (0 << 7) | (0 << 10) | (1 << 13) | (1 << 16) | (1 << 17) | (4 << 24).
TEST(Tcgen05InstrDesc, F16FlagsAndSmallShape) {
  constexpr auto d = hexel::tcgen05::InstrDesc::make(
      hexel::tcgen05::AbType::F16, hexel::tcgen05::AbType::F16, hexel::tcgen05::DType::F16, 64, 8,
      /*a_mn_major=*/false, /*b_mn_major=*/true, /*negate_a=*/true);
  EXPECT_EQ(d.bits, (1u << 13) | (1u << 16) | (1u << 17) | (4u << 24));
}

// kind::f8f6f4 type codes: E4M3 0, E5M2 1, E2M3 3, E3M2 4, E2M1 5 (A at bits 7-9, B at 10-12).
TEST(Tcgen05InstrDesc, Fp8TypeCodes) {
  using hexel::tcgen05::AbType;
  auto at = [](AbType a, AbType b) {
    return hexel::tcgen05::InstrDesc::make(a, b, hexel::tcgen05::DType::F32, 128, 128).bits &
           0x1F80u;
  };
  EXPECT_EQ(at(AbType::E4M3, AbType::E4M3), 0u);
  EXPECT_EQ(at(AbType::E5M2, AbType::E4M3), 1u << 7);
  EXPECT_EQ(at(AbType::E4M3, AbType::E2M3), 3u << 10);
  EXPECT_EQ(at(AbType::E3M2, AbType::E2M1), (4u << 7) | (5u << 10));
  EXPECT_EQ(hexel::tcgen05::kind_of(AbType::BF16), hexel::tcgen05::Kind::F16);
  EXPECT_EQ(hexel::tcgen05::kind_of(AbType::E2M1), hexel::tcgen05::Kind::F8F6F4);
}

// "Shared memory descriptor" (tcgen05): Hopper fields + version 1 at bit 46 + layout 2 (128B)
// at bits 61-63: 0x40 | 1 << 16 | 0x40 << 32 | 1 << 46 | 2 << 61.
TEST(Tcgen05SmemDesc, KMajor128BSwizzle) {
  constexpr auto d = hexel::tcgen05::kmajor_desc(0x400, Swizzle::B128);
  static_assert(d.bits == 0x4000404000010040ull);
  EXPECT_EQ(d.bits, 0x4000404000010040ull);
}

// Layout codes: 64B = 4, 32B = 6, none = 0 at bits 61-63.
TEST(Tcgen05SmemDesc, LayoutCodes) {
  EXPECT_EQ(hexel::tcgen05::SmemDesc::make(0, Swizzle::B64, 0, 0).bits >> 61, 4u);
  EXPECT_EQ(hexel::tcgen05::SmemDesc::make(0, Swizzle::B32, 0, 0).bits >> 61, 6u);
  EXPECT_EQ(hexel::tcgen05::SmemDesc::make(0, Swizzle::None, 0, 0).bits, 1ull << 46);
}

// "Tensor Memory": lane 32 (the second warp's quarter), column 64 -> 0x00200040.
TEST(Tcgen05TmemAddr, LaneAndColumn) {
  EXPECT_EQ(hexel::tcgen05::tmem_addr(32, 64), 0x00200040u);
  EXPECT_EQ(hexel::tcgen05::tmem_addr(0, 511), 0x1FFu);
}

// TMA swizzle ("Tensor swizzling modes"): the 16-byte chunk index (address bits 4..) is XORed
// with the 128-byte row index (bits 7..): bits 4-6 ^= 7-9 for 128B, 4-5 ^= 7-8 for 64B,
// 4 ^= 7 for 32B.
TEST(Swizzle, ChunkPermutation) {
  EXPECT_EQ(hexel::swizzled_offset(0x000, Swizzle::B128), 0x000u);
  EXPECT_EQ(hexel::swizzled_offset(0x080, Swizzle::B128), 0x090u);  // row 1, chunk 0 -> 1
  EXPECT_EQ(hexel::swizzled_offset(0x3F5, Swizzle::B128), 0x385u);  // row 7, chunk 7 -> 0
  EXPECT_EQ(hexel::swizzled_offset(0x400, Swizzle::B128), 0x400u);  // repeats every 1024 B
  EXPECT_EQ(hexel::swizzled_offset(0x180, Swizzle::B64), 0x1B0u);   // row 3: chunk 0 -> 3
  EXPECT_EQ(hexel::swizzled_offset(0x080, Swizzle::B32), 0x090u);
  EXPECT_EQ(hexel::swizzled_offset(0x100, Swizzle::B32), 0x100u);
  EXPECT_EQ(hexel::swizzled_offset(0x0F3, Swizzle::None), 0x0F3u);
}

// The row-and-chunk form of the 128B swizzle lands every chunk where swizzled_offset puts its
// first byte, from the tile's base, for int and unsigned indices; a chunk index past 7 is its
// 128-byte row's chunk % 8 (a caller's piece index along a wider row).
TEST(Swizzle, RowAndChunkFormAgrees) {
  constexpr uint32_t kTile = 0x2400;
  for (int row = 0; row < 24; ++row)
    for (int chunk = 0; chunk < 16; ++chunk) {
      const uint32_t want =
          kTile +
          hexel::swizzled_offset(static_cast<uint32_t>(row * 128 + chunk % 8 * 16), Swizzle::B128);
      EXPECT_EQ(hexel::swizzled_chunk_b128(kTile, row, chunk), want) << row << " " << chunk;
      EXPECT_EQ(hexel::swizzled_chunk_b128(kTile, static_cast<uint32_t>(row),
                                           static_cast<uint32_t>(chunk)),
                want);
    }
  EXPECT_EQ(hexel::swizzled_chunk_b128(0u, 1, 0), 0x090u);  // row 1, chunk 0 -> 1
  EXPECT_EQ(hexel::swizzled_chunk_b128(0u, 7, 7), 0x380u);  // row 7, chunk 7 -> 0
}

// The printers decode every field back out of the bits.
TEST(DescPrint, EveryFieldDecoded) {
  EXPECT_EQ(hexel::to_string(hexel::wgmma::kmajor_desc(0x400, Swizzle::B128)),
            "wgmma::SmemDesc{start=0x400, lbo=16, sbo=1024, base_offset=0, swizzle=128B}");
  EXPECT_EQ(hexel::to_string(hexel::tcgen05::SmemDesc::make(0x1230, Swizzle::B64, 128, 256, 3)),
            "tcgen05::SmemDesc{start=0x1230, lbo=128, sbo=256, version=1, base_offset=3, "
            "lbo_mode=0, layout=64B}");
  EXPECT_EQ(hexel::to_string(hexel::tcgen05::InstrDesc::make(
                hexel::tcgen05::AbType::BF16, hexel::tcgen05::AbType::E5M2,
                hexel::tcgen05::DType::F32, 64, 8, true, false, false, true)),
            "tcgen05::InstrDesc{M=64, N=8, d_type=1, a_type=1, b_type=1, negate_a=0, "
            "negate_b=1, a_mn_major=1, b_mn_major=0}");
}

}  // namespace
