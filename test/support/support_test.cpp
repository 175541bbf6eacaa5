#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "support/checksum.hpp"
#include "support/dtype.hpp"
#include "support/error.hpp"
#include "support/mapped_file.hpp"
#include "support/qkv_layout.hpp"
#include "support/slot_image.hpp"

using namespace telos;

TEST(Xxh64, PublishedVectors) {
  // Reference values of the xxHash specification's XXH64 with seed 0.
  EXPECT_EQ(xxh64("", 0), 0xEF46DB3751D8E999ull);
  EXPECT_EQ(xxh64("a", 1), 0xD24EC4F1A98C6E5Bull);
  EXPECT_EQ(xxh64("abc", 3), 0x44BC2CF5AD770999ull);
}

TEST(Xxh64, StreamingEqualsOneShot) {
  std::vector<unsigned char> data(1000);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<unsigned char>(i * 131 + 7);
  const auto whole = xxh64(data.data(), data.size());
  for (size_t split : {0u, 1u, 31u, 32u, 33u, 500u, 999u}) {
    Xxh64 h;
    h.update(data.data(), split);
    h.update(data.data() + split, data.size() - split);
    EXPECT_EQ(h.digest(), whole) << "split at " << split;
  }
  EXPECT_EQ(checksum_string(0x0123456789abcdefull), "xxh64:0123456789abcdef");
}

TEST(DType, Bf16RoundTripAndRounding) {
  for (float f : {0.0f, 1.0f, -2.5f, 3.140625f, std::ldexp(1.0f, -120), 65024.0f}) {
    EXPECT_EQ(bf16_to_f32(f32_to_bf16(f)), f) << f;  // all exactly representable in bf16
  }
  // 1 + 2^-8 is halfway between two bf16 values: ties go to even (1.0).
  EXPECT_EQ(bf16_to_f32(f32_to_bf16(1.0f + std::ldexp(1.0f, -8))), 1.0f);
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(NAN))));
}

TEST(DType, F16Conversions) {
  EXPECT_EQ(f16_to_f32(0x3c00), 1.0f);
  EXPECT_EQ(f16_to_f32(0xc000), -2.0f);
  EXPECT_EQ(f16_to_f32(0x0001), std::ldexp(1.0f, -24));  // smallest subnormal
  EXPECT_EQ(f16_to_f32(0x7bff), 65504.0f);
  EXPECT_TRUE(std::isinf(f16_to_f32(0x7c00)));
  for (std::uint32_t h = 0; h < 0x10000; ++h) {
    if ((h & 0x7c00) == 0x7c00 && (h & 0x3ff)) continue;  // NaNs
    ASSERT_EQ(f32_to_f16(f16_to_f32(static_cast<std::uint16_t>(h))), h) << h;
  }
  EXPECT_EQ(f32_to_f16(1e6f), 0x7c00);
}

TEST(DType, Names) {
  DType t;
  ASSERT_TRUE(parse_dtype("bf16", &t));
  EXPECT_EQ(t, DType::BF16);
  EXPECT_EQ(dtype_size(t), 2u);
  EXPECT_FALSE(parse_dtype("float8", &t));
}

TEST(MappedFile, ReadsAndNamesMissingFile) {
  const std::string path = ::testing::TempDir() + "/mapped_file_test.bin";
  { std::ofstream(path, std::ios::binary) << "hello"; }
  MappedFile f(path);
  ASSERT_EQ(f.size(), 5u);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(f.data()), f.size()), "hello");
  std::remove(path.c_str());
  try {
    MappedFile missing(path);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos);
  }
}

// The packed QKV row order (layout qkv_rope_pairs): a permutation within each head whose 8-row
// groups hold 4 rows of the first half and their RoPE partners (row + d / 2), in order.
TEST(QkvLayout, PairOrderIsAPermutationWithinHeadsOfWholePairs) {
  for (int d : {8, 32, 64, 128}) {
    std::vector<int> seen(3 * d, 0);
    for (int p = 0; p < 3 * d; ++p) {
      const long long n = telos::qkv_pair_row(p, d);
      ASSERT_EQ(n / d, p / d) << "d=" << d << " p=" << p;  // within its head
      ASSERT_EQ(telos::qkv_pair_pos(n, d), p) << "d=" << d << " p=" << p;
      ++seen[n];
      if (p % 8 < 4) {
        EXPECT_EQ(telos::qkv_pair_row(p + 4, d), n + d / 2) << "d=" << d << " p=" << p;
      }
    }
    for (int n = 0; n < 3 * d; ++n) EXPECT_EQ(seen[n], 1) << "d=" << d << " n=" << n;
    EXPECT_EQ(telos::qkv_pair_row(0, d), 0);
    EXPECT_EQ(telos::qkv_pair_row(4, d), d / 2);
    EXPECT_EQ(telos::qkv_pair_row(8, d), d > 8 ? 4 : 8);  // d = 8: the next head
  }
}

// A slot image holds each element where the ring's tensor copies would have put it: slot s of
// tile t is one run of 64 / bn K blocks, block j at j · bn · 128 bytes of the slot, its rows (the
// gate box's bn / 2 rows, then the up box's) of 128 bytes in the 128-byte swizzle: 16-byte chunk c
// of a row r of the block at chunk c ^ (r % 8). Derived here slot by slot, the packer goes block
// by block; ranges of tiles pack as the whole image's pieces.
TEST(SlotImage, ElementsLandWhereTheRingsBoxesPutThem) {
  for (const auto& [rows, cols, bn, halves] :
       {std::array<int, 4>{48, 256, 16, 1}, {64, 128, 32, 2}, {128, 64, 64, 2}, {24, 384, 24, 1}}) {
    ASSERT_EQ(slot_image_refusal(rows, cols, bn, halves), "");
    std::vector<std::uint16_t> w(static_cast<std::size_t>(rows) * cols), img(w.size(), 0xffff);
    for (std::size_t i = 0; i < w.size(); ++i) w[i] = static_cast<std::uint16_t>(i);
    const int tiles = rows / bn;
    pack_slot_image(w.data(), rows, cols, bn, halves, 0, 1, img.data());
    pack_slot_image(w.data(), rows, cols, bn, halves, 1, tiles,
                    img.data() + static_cast<std::size_t>(bn) * cols);
    const int per_slot = 64 / bn, slots = cols / 64 / per_slot, slot_elems = per_slot * bn * 64;
    for (int row = 0; row < rows; ++row)
      for (int col = 0; col < cols; ++col) {
        const int half = row / (rows / halves), hr = row % (rows / halves);
        const int t = hr / (bn / halves), box_row = hr % (bn / halves);
        const int r = half * (bn / halves) + box_row;  // the row within the tile's block
        const int kb = col / 64, s = kb / per_slot, j = kb % per_slot, chunk = col % 64 / 8;
        const std::size_t at = static_cast<std::size_t>(t * slots + s) * slot_elems + j * bn * 64 +
                               r * 64 + (chunk ^ (r % 8)) * 8 + col % 8;
        ASSERT_EQ(img[at], w[static_cast<std::size_t>(row) * cols + col])
            << rows << "x" << cols << " bn " << bn << " halves " << halves << " at (" << row << ", "
            << col << ")";
      }
  }
}

TEST(SlotImage, RefusesWhatTheRingCannotHold) {
  EXPECT_NE(slot_image_refusal(64, 128, 32, 3).find("halves must be 1 or 2"), std::string::npos);
  EXPECT_NE(slot_image_refusal(64, 128, 12, 1).find("multiple of 8 from 8 to 64"),
            std::string::npos);
  EXPECT_NE(slot_image_refusal(64, 128, 24, 2).find("multiple of 16"), std::string::npos);
  EXPECT_NE(slot_image_refusal(64, 128, 128, 1).find("from 8 to 64"), std::string::npos);
  EXPECT_NE(slot_image_refusal(40, 128, 32, 1).find("rows must be whole tiles of 32"),
            std::string::npos);
  EXPECT_NE(slot_image_refusal(64, 64, 16, 1).find("cols must be whole slots of 4"),
            std::string::npos);
  EXPECT_EQ(slot_image_refusal(64, 256, 16, 1), "");
}
