// The W8A8 reference arithmetic (executor/w8a8_reference.hpp): the activations' quantization per
// 128 columns and the promotion of each K block's partial sum. Expected values are worked out by
// hand from the e4m3 format (bias 7, three mantissa bits), not from the functions under test.
#include "executor/w8a8_reference.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "support/dtype.hpp"

namespace telos::exec {
namespace {

struct QuantizedRow {
  std::vector<std::uint8_t> q;
  std::vector<float> scale;
};

QuantizedRow quantize(const std::vector<float>& x) {
  const int k = static_cast<int>(x.size());
  QuantizedRow r{std::vector<std::uint8_t>(x.size(), 0xaa),
                 std::vector<float>(static_cast<std::size_t>(w8a8_k_blocks(k)), -1.0f)};
  quantize_row_e4m3(x.data(), k, r.q.data(), r.scale.data());
  return r;
}

TEST(W8a8Reference, ZeroBlockGetsScaleOneAndItsNeighbourItsOwnScale) {
  std::vector<float> x(256, 0.0f);
  x[128] = 3.5f;
  x[129] = -7.0f;  // amax 7: scale 7 / 448 = 2^-6, exact
  const QuantizedRow r = quantize(x);
  ASSERT_EQ(r.scale.size(), 2u);
  EXPECT_EQ(r.scale[0], 1.0f);
  EXPECT_EQ(r.scale[1], 0.015625f);
  for (int c = 0; c < 128; ++c) EXPECT_EQ(r.q[c], 0x00) << c;
  EXPECT_EQ(r.q[128], 0x76);  // 3.5 / 2^-6 = 224 = 1.75 · 2^7: exponent 14, mantissa 6
  EXPECT_EQ(r.q[129], 0xfe);  // -448, the largest finite magnitude
  EXPECT_EQ(r.q[130], 0x00);
}

TEST(W8a8Reference, AmaxSaturatesAtTheLargestFiniteValueNeverNan) {
  // 19 / (19 / 448) is 448.00003 in f32 and 0.001 / (0.001 / 448) is 447.99997: both the
  // largest finite e4m3 (0x7e), not the NaN pattern 0x7f above it.
  for (const float amax : {19.0f, 0.001f, 1000.0f}) {
    const QuantizedRow r = quantize({amax, -amax, 0.0f, 0.0f});
    EXPECT_EQ(r.q[0], 0x7e) << amax;
    EXPECT_EQ(r.q[1], 0xfe) << amax;
    EXPECT_EQ(r.q[2], 0x00) << amax;
  }
}

TEST(W8a8Reference, UnderflowingScaleIsOne) {
  // amax / 448 of the smallest subnormal float is zero: the scale is 1 and the element rounds to
  // zero (far below e4m3's smallest subnormal, 2^-9).
  const float tiny = std::numeric_limits<float>::denorm_min();
  const QuantizedRow r = quantize({tiny, 0.0f});
  EXPECT_EQ(r.scale[0], 1.0f);
  EXPECT_EQ(r.q[0], 0x00);
}

TEST(W8a8Reference, RaggedLastBlockTakesItsOwnColumnsScale) {
  std::vector<float> x(130, 0.0f);
  x[0] = 448.0f;  // block 0: scale 1
  x[128] = 0.5f;  // block 1, two columns: amax 0.5, scale 0.5 / 448
  x[129] = -0.25f;
  const QuantizedRow r = quantize(x);
  ASSERT_EQ(r.scale.size(), 2u);
  EXPECT_EQ(r.scale[0], 1.0f);
  EXPECT_EQ(r.scale[1], 0.5f / 448.0f);
  EXPECT_EQ(r.q[0], 0x7e);
  EXPECT_EQ(r.q[128], 0x7e);
  EXPECT_EQ(r.q[129], 0xf6);  // -224
}

TEST(W8a8Reference, DotPromotesEachBlockWithTheScaleProductFused) {
  // K = 258: two full blocks and one of two columns.
  std::vector<float> x(258, 0.0f);
  x[0] = 7.0f;  // scale 2^-6: q 448, 224
  x[1] = 3.5f;
  x[256] = 0.5f;  // scale 0.5 / 448: q 448, 224
  x[257] = 0.25f;
  const QuantizedRow a = quantize(x);
  std::vector<std::uint8_t> w(258, 0x00);
  w[0] = 0x38;    // 1
  w[1] = 0x40;    // 2
  w[256] = 0x41;  // 2.25
  w[257] = 0x47;  // 3.75
  const std::vector<float> sw = {0.5f, 5.0f, 3.0f};
  // Block 0: (448 · 1 + 224 · 2) · (2^-6 · 0.5) = 7, exact. Block 1: zeros (adds +0). Block 2:
  // 448 · 2.25 + 224 · 3.75 = 1848 times the f32 product of its scales, fused into the sum:
  // 13.1875009..., where rounding the product first would give 13.1875.
  const float got = w8a8_dot(a.q.data(), a.scale.data(), w.data(), sw.data(), 258);
  EXPECT_EQ(got, std::fma(1848.0f, (0.5f / 448.0f) * 3.0f, 7.0f));
  EXPECT_NE(got, 13.1875f);
}

TEST(W8a8Reference, NanAndInfinityMakeTheRowNan) {
  std::vector<std::uint8_t> w(256, 0x38);
  const std::vector<float> sw = {1.0f, 1.0f};
  for (const float bad :
       {std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::infinity()}) {
    std::vector<float> x(256, 1.0f);
    x[200] = bad;
    const QuantizedRow a = quantize(x);
    EXPECT_EQ(a.scale[0], 1.0f / 448.0f);  // the other block is untouched
    EXPECT_FALSE(std::isfinite(a.scale[1])) << bad;
    EXPECT_TRUE(std::isnan(w8a8_dot(a.q.data(), a.scale.data(), w.data(), sw.data(), 256))) << bad;
  }
}

WeightTensor e4m3_weight(const std::vector<std::uint8_t>& q, const std::vector<float>& s, int n,
                         int k) {
  WeightTensor w;
  w.name = "layers.0.o";
  w.dtype = DType::E4M3;
  w.shape = {n, k};
  w.data = q.data();
  w.bytes = q.size();
  w.scale = s.data();
  w.block_rows = 128;
  w.block_cols = 128;
  w.scale_cols = w8a8_k_blocks(k);
  return w;
}

void expect_refused(const WeightTensor& w, const std::string& words) {
  std::vector<float> x(static_cast<std::size_t>(w.shape[1]), 1.0f), y(1024, -1.0f);
  try {
    w8a8_matmul(y.data(), x.data(), 1, w);
    FAIL() << "no error for " << words;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("layers.0.o"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
  }
  EXPECT_EQ(y[0], -1.0f);  // nothing written
}

TEST(W8a8Reference, RefusesWeightsOtherThanE4m3In128Blocks) {
  const std::vector<std::uint8_t> q(4 * 256, 0x38);
  const std::vector<float> s(2, 1.0f);
  WeightTensor bf16 = e4m3_weight(q, s, 2, 256);
  bf16.dtype = DType::BF16;
  expect_refused(bf16, "needs a 2-D e4m3 weight, got bf16");
  WeightTensor channel = e4m3_weight(q, s, 4, 256);
  channel.block_rows = 1;
  channel.block_cols = 256;
  expect_refused(channel, "needs 128 x 128 scale blocks");
  WeightTensor short_scales = e4m3_weight(q, s, 4, 256);
  short_scales.scale_cols = 1;
  expect_refused(short_scales, "scales have 1 columns, expected 2");
}

// Random rows and weights (ragged N and K): every output is w8a8_dot of its row's quantization,
// the same bits whatever other rows share the call, and within the f32 summation bound of the f64
// dot product of the dequantized operands.
TEST(W8a8Reference, MatmulMatchesF64OfDequantizedOperandsAndIsRowInvariant) {
  const int n = 200, k = 320, rows = 3;
  std::mt19937 rng(7);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> x(static_cast<std::size_t>(rows) * k);
  for (float& v : x) v = dist(rng) * (dist(rng) > 1.5f ? 30.0f : 1.0f);
  std::vector<std::uint8_t> q(static_cast<std::size_t>(n) * k);
  for (std::uint8_t& v : q) v = f32_to_e4m3(dist(rng) * 100.0f);
  std::vector<float> s(2 * 3);
  for (float& v : s) v = std::abs(dist(rng)) * 0.01f + 1e-3f;
  const WeightTensor w = e4m3_weight(q, s, n, k);
  std::vector<float> y(static_cast<std::size_t>(rows) * n), one(static_cast<std::size_t>(n));
  w8a8_matmul(y.data(), x.data(), rows, w);
  w8a8_matmul(one.data(), x.data() + 2 * k, 1, w);
  for (int r = 0; r < n; ++r) EXPECT_EQ(one[r], y[2 * n + r]) << r;
  for (int t = 0; t < rows; ++t) {
    const QuantizedRow a = quantize({x.begin() + t * k, x.begin() + (t + 1) * k});
    for (int r = 0; r < n; ++r) {
      double exact = 0, magnitude = 0;
      for (int c = 0; c < k; ++c) {
        const double p = static_cast<double>(e4m3_to_f32(a.q[c])) * a.scale[c / 128] *
                         e4m3_to_f32(q[r * k + c]) * s[r / 128 * 3 + c / 128];
        exact += p;
        magnitude += std::abs(p);
      }
      const float got = y[t * n + r];
      EXPECT_NEAR(got, exact, std::ldexp(magnitude, -16)) << t << " " << r;
    }
  }
}

}  // namespace
}  // namespace telos::exec
