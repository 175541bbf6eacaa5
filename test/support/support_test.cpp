#include <gtest/gtest.h>

#include <array>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "support/artifact_format.hpp"
#include "support/artifact_limits.hpp"
#include "support/checksum.hpp"
#include "support/dtype.hpp"
#include "support/error.hpp"
#include "support/mapped_file.hpp"
#include "support/qkv_layout.hpp"
#include "support/slot_image.hpp"
#include "support/threads.hpp"

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

// E4M3: every finite code survives the round trip; ties go to the even code; what lies beyond 448
// saturates; the subnormal grid is 2^-9.
TEST(DType, E4M3Conversions) {
  EXPECT_EQ(e4m3_to_f32(0x00), 0.0f);
  EXPECT_EQ(e4m3_to_f32(0x01), std::ldexp(1.0f, -9));  // smallest subnormal
  EXPECT_EQ(e4m3_to_f32(0x08), std::ldexp(1.0f, -6));  // smallest normal
  EXPECT_EQ(e4m3_to_f32(0x38), 1.0f);
  EXPECT_EQ(e4m3_to_f32(0x7e), 448.0f);
  EXPECT_EQ(e4m3_to_f32(0xfe), -448.0f);
  EXPECT_TRUE(std::isnan(e4m3_to_f32(0x7f)));
  EXPECT_TRUE(std::isnan(e4m3_to_f32(0xff)));
  for (std::uint32_t q = 0; q < 0x100; ++q) {
    if ((q & 0x7f) == 0x7f) continue;  // NaNs
    ASSERT_EQ(f32_to_e4m3(e4m3_to_f32(static_cast<std::uint8_t>(q))), q) << q;
  }
  EXPECT_EQ(f32_to_e4m3(1.0625f), 0x38);  // halfway between 1 and 1.125: to 1 (even)
  EXPECT_EQ(f32_to_e4m3(1.1875f), 0x3a);  // halfway between 1.125 and 1.25: to 1.25 (even)
  EXPECT_EQ(f32_to_e4m3(1.07f), 0x39);    // above halfway: up
  EXPECT_EQ(f32_to_e4m3(460.0f), 0x7e);   // beyond 448: saturates, never NaN
  EXPECT_EQ(f32_to_e4m3(-1e30f), 0xfe);
  EXPECT_EQ(f32_to_e4m3(INFINITY), 0x7e);
  EXPECT_EQ(f32_to_e4m3(NAN), 0x7f);
  EXPECT_EQ(f32_to_e4m3(std::ldexp(1.5f, -9)), 0x02);  // subnormal tie: to 2 (even)
  EXPECT_EQ(f32_to_e4m3(std::ldexp(0.5f, -9)), 0x00);  // half the smallest subnormal: to zero
  EXPECT_EQ(f32_to_e4m3(std::ldexp(7.5f, -9)), 0x08);  // rounds up into the normals
  DType t;
  ASSERT_TRUE(parse_dtype("e4m3", &t));
  EXPECT_EQ(t, DType::E4M3);
  EXPECT_EQ(dtype_size(t), 1u);
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

// run_on_threads: every item of a shared queue is taken exactly once, whatever the thread count
// asked (one, a few, more than the machine has).
TEST(RunOnThreads, EveryQueuedItemRunsOnce) {
  for (std::size_t threads : {1u, 3u, 64u}) {
    std::vector<std::atomic<int>> runs(1000);
    std::atomic<std::size_t> next{0};
    run_on_threads(threads, [&] {
      for (std::size_t i = next++; i < runs.size(); i = next++) ++runs[i];
    });
    for (std::size_t i = 0; i < runs.size(); ++i)
      ASSERT_EQ(runs[i].load(), 1) << "item " << i << " with " << threads << " threads";
  }
}

// for_each_part covers [0, n) with contiguous parts, each once, as many as the grain allows up to
// the cap (the weight upload's staging copies rely on it).
TEST(RunOnThreads, PartsCoverTheRangeOnce) {
  struct Case {
    std::size_t n, grain, max_parts, parts;
  };
  for (const Case& c : {Case{0, 4, 8, 1}, Case{7, 4, 8, 1}, Case{64, 4, 8, 8}, Case{30, 4, 8, 7},
                        Case{1000, 1, 3, 3}}) {
    std::vector<std::atomic<int>> hits(c.n);
    std::atomic<std::size_t> calls{0};
    for_each_part(c.n, c.grain, c.max_parts, [&](std::size_t b, std::size_t e) {
      ++calls;
      for (std::size_t i = b; i < e; ++i) ++hits[i];
    });
    EXPECT_EQ(calls.load(), c.parts) << "n " << c.n << ", grain " << c.grain;
    for (std::size_t i = 0; i < c.n; ++i) ASSERT_EQ(hits[i].load(), 1) << "item " << i;
  }
}

// xxh64_ranges computes ranges of mapped files on several threads, longest first: each digest
// lands in its own range's slot and equals the one-shot hash of those bytes, for more ranges than
// threads, an empty one, ranges across the 16 MiB windows, and ranges of two files.
TEST(Xxh64, RangesOfMappedFilesMatchOneShotHashes) {
  const std::string a_path = ::testing::TempDir() + "/ranges_a.bin";
  const std::string b_path = ::testing::TempDir() + "/ranges_b.bin";
  std::vector<unsigned char> a((std::size_t{40} << 20) + 12345), b(777);
  for (std::size_t i = 0; i < a.size(); ++i)
    a[i] = static_cast<unsigned char>((i * 2654435761u) >> 13);
  for (std::size_t i = 0; i < b.size(); ++i) b[i] = static_cast<unsigned char>(i * 31 + 5);
  std::ofstream(a_path, std::ios::binary).write(reinterpret_cast<const char*>(a.data()), a.size());
  std::ofstream(b_path, std::ios::binary).write(reinterpret_cast<const char*>(b.data()), b.size());
  const MappedFile fa(a_path), fb(b_path);
  std::vector<ChecksumRange> ranges = {{&fa, 0, a.size()},
                                       {&fb, 0, b.size()},
                                       {&fa, 100, 0},
                                       {&fa, (std::size_t{16} << 20) - 3, (std::size_t{17} << 20)}};
  for (std::size_t i = 0; i < 20; ++i) ranges.push_back({&fa, i * 4099, 1000 + i * 37});
  xxh64_ranges(ranges);
  for (const ChecksumRange& r : ranges) {
    const auto& bytes = r.file == &fa ? a : b;
    EXPECT_EQ(r.digest, xxh64(bytes.data() + r.offset, r.length))
        << "range at " << r.offset << ", " << r.length << " bytes";
  }
  std::remove(a_path.c_str());
  std::remove(b_path.c_str());
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

// The GEMMs read a weight from its image through the 5D map of slot_image_map_view, in boxes of
// image_box_rows rows at the coordinates load_weight_rows gives them: emulated here box by box
// (elements in the box's order, innermost dimension first; coordinates past a dimension read
// zeros), each read lands in shared memory as the 2D map's 128-byte-swizzled box of the weight
// would have put it (row i's chunk c at chunk c ^ (i % 8)), zeros past the weight's rows. A box
// larger than the rows read (the prefill GEMM's covering box, prefill_image_box_rows) is whole
// tiles from the tile holding the first row, which the GEMM then reads n0 % tile rows in.
TEST(SlotImage, MapBoxesReadWhatTheWeightsBoxWouldHave) {
  struct Case {
    int rows, cols, bn, halves, read_rows, box;
  };
  for (const Case& c :
       {Case{96, 128, 48, 1, 32, 16}, Case{96, 128, 48, 1, 48, 48}, Case{128, 128, 32, 1, 256, 256},
        Case{128, 64, 64, 2, 128, 128}, Case{256, 64, 64, 2, 32, 32}, Case{64, 256, 16, 1, 32, 32},
        Case{64, 256, 16, 1, 8, 8}, Case{768, 128, 48, 1, 256, 288}}) {
    std::vector<std::uint16_t> w(static_cast<std::size_t>(c.rows) * c.cols), img(w.size());
    for (std::size_t i = 0; i < w.size(); ++i) w[i] = static_cast<std::uint16_t>(i + 1);
    pack_slot_image(w.data(), c.rows, c.cols, c.bn, c.halves, 0, c.rows / c.bn, img.data());
    const SlotImageMapView v = slot_image_map_view(c.rows, c.cols, c.bn, c.halves, c.box);
    const int h = c.bn / c.halves, half_rows = c.rows / c.halves;
    const std::uint64_t box_elems = std::uint64_t{v.box[0]} * v.box[1] * v.box[4];
    ASSERT_EQ(box_elems, std::uint64_t(c.box) * 64);
    const bool cover = c.box > c.read_rows;
    for (int half = 0; half < c.halves; ++half)
      for (int kb = 0; kb < c.cols / 64; ++kb)
        for (int n0 = 0; n0 < half_rows; n0 += c.read_rows) {
          std::vector<std::uint16_t> smem(
              static_cast<std::size_t>(std::max(c.read_rows, c.box)) * 64, 0xdead);
          for (int b = 0; b < std::max(c.read_rows / c.box, 1); ++b) {
            const int r = n0 + b * c.box;
            const std::uint64_t at[5] = {0, std::uint64_t(cover ? 0 : r % h), std::uint64_t(half),
                                         std::uint64_t(kb), std::uint64_t(r / h)};
            std::size_t o = static_cast<std::size_t>(b) * c.box * 64;
            for (std::uint64_t i4 = 0; i4 < v.box[4]; ++i4)
              for (std::uint64_t i1 = 0; i1 < v.box[1]; ++i1)
                for (std::uint64_t i0 = 0; i0 < v.box[0]; ++i0, ++o) {
                  const std::uint64_t x[5] = {at[0] + i0, at[1] + i1, at[2], at[3], at[4] + i4};
                  bool in = true;
                  std::uint64_t e = x[0];
                  for (int d = 0; d < 5; ++d) in = in && x[d] < v.dims[d];
                  for (int d = 1; d < 5; ++d) e += x[d] * v.strides_bytes[d - 1] / 2;
                  smem[o] = in ? img[e] : 0;
                }
          }
          const int first = cover ? n0 % h : 0;  // where the GEMM's rows start
          for (int i = 0; i < c.read_rows; ++i)
            for (int col = 0; col < 64; ++col) {
              const int row = n0 + i, src = (col / 8 ^ (i % 8)) * 8 + col % 8;
              const std::uint16_t want =
                  row < half_rows
                      ? w[static_cast<std::size_t>(half * half_rows + row) * c.cols + kb * 64 + src]
                      : 0;
              ASSERT_EQ(smem[static_cast<std::size_t>(first + i) * 64 + col], want)
                  << c.rows << "x" << c.cols << " bn " << c.bn << "/" << c.halves << " box "
                  << c.box << ": half " << half << " kb " << kb << " rows from " << n0 << ", row "
                  << i << " col " << col;
            }
        }
  }
}

TEST(SlotImage, RefusesBoxesThatAreNotWholeSwizzleRepeatsOfATileOrWholeTiles) {
  EXPECT_EQ(slot_image_box_refusal(48, 1, 16), "");
  EXPECT_EQ(slot_image_box_refusal(48, 1, 96), "");
  EXPECT_EQ(slot_image_box_refusal(64, 2, 128), "");
  EXPECT_NE(slot_image_box_refusal(48, 1, 12).find("multiple of 8"), std::string::npos);
  EXPECT_NE(slot_image_box_refusal(48, 1, 32).find("divide a tile's 48 rows"), std::string::npos);
  EXPECT_NE(slot_image_box_refusal(64, 2, 48).find("divide a tile's 32 rows"), std::string::npos);
  EXPECT_NE(slot_image_box_refusal(8, 1, 8 * 257).find("at most 256 whole tiles"),
            std::string::npos);
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

// What a manifest's text may be: nested at most limits::kMaxManifestDepth levels (refused while it
// is parsed, before a deep document could exhaust the stack of anything that walks it), a file of
// at most limits::kMaxManifestBytes (refused before it is read).
TEST(ManifestText, RefusesDeepNestingAndHugeFiles) {
  const std::string deep = std::string(40, '[') + std::string(40, ']');
  try {
    parse_manifest_text(deep, "m.json");
    FAIL() << "40 levels accepted";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              "m.json: nested more than 32 levels deep (not a Telos manifest)");
  }
  EXPECT_NO_THROW(parse_manifest_text(std::string(30, '[') + std::string(30, ']'), "m.json"));
  EXPECT_THROW(parse_manifest_text("{ not json", "m.json"), Error);

  const std::string dir = ::testing::TempDir() + "/huge-manifest";
  std::filesystem::create_directories(dir);
  const std::string path = dir + "/manifest.json";
  std::ofstream(path).close();
  std::filesystem::resize_file(path, limits::kMaxManifestBytes + 1);  // sparse: no disk taken
  try {
    read_manifest_file(dir);
    FAIL() << "a manifest beyond the bound accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("67108865 bytes, more than a manifest's 67108864"),
              std::string::npos)
        << e.what();
  }
}

// The manifest checksum covers the graph, model and weights sections as values: the order their
// keys were written in and every other section do not change it, any value in them does.
TEST(ManifestChecksum, CoversTheGraphModelAndWeightsSectionsOnly) {
  const auto m = nlohmann::json::parse(
      R"({"model": {"a": 1, "b": 2.5}, "weights": {"tensors": [{"name": "x"}]}, "plan": 1,
          "graph": {"ops": [{"op": "rmsnorm", "attrs": {"eps": 1e-05}}]}})");
  const auto reordered = nlohmann::json::parse(
      R"({"plan": 2, "graph": {"ops": [{"attrs": {"eps": 1e-05}, "op": "rmsnorm"}]},
          "weights": {"tensors": [{"name": "x"}]}, "model": {"b": 2.5, "a": 1}})");
  EXPECT_EQ(manifest_checksum(m), manifest_checksum(reordered));
  auto edited = m;
  edited["model"]["b"] = 2.25;
  EXPECT_NE(manifest_checksum(m), manifest_checksum(edited));
  edited = m;
  edited["weights"]["tensors"][0]["name"] = "y";
  EXPECT_NE(manifest_checksum(m), manifest_checksum(edited));
  edited = m;
  edited["graph"]["ops"][0]["attrs"]["eps"] = 1e-06;
  EXPECT_NE(manifest_checksum(m), manifest_checksum(edited));
  EXPECT_EQ(manifest_checksum(m).rfind("xxh64:", 0), 0u);
}
