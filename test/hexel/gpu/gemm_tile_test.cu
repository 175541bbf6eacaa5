// The tile GEMM's Hopper twin (hexel/examples/gemm_tile.cuh with WgmmaAccum: the producer, stage
// ring and epilogue the Blackwell form shares) against a host f64 reference: exact tiles, tails
// in M, N and K, and random ragged shapes drawn fresh per run (failures name the seed). C is
// poisoned with bf16 NaN and followed by a guard region, so an element left unwritten or a store
// past C fails.
#include <random>
#include <string>

#include "gemm_tile_launch.h"
#include "gpu_check.h"

namespace {

using Accum = hexel::examples::WgmmaAccum<128>;
constexpr size_t kGuard = 4096;           // elements after C that must stay untouched
constexpr uint16_t kGuardValue = 0x7FC1;  // a bf16 NaN the kernel never produces

void run_tile_gemm(uint32_t m, uint32_t n, uint32_t k, uint32_t seed) {
  SCOPED_TRACE("M=" + std::to_string(m) + " N=" + std::to_string(n) + " K=" + std::to_string(k) +
               " seed=" + std::to_string(seed));
  const auto a = random_bf16(size_t(m) * k, seed);
  const auto w = random_bf16(size_t(n) * k, seed + 1);
  DeviceBuffer<uint16_t> da(a.size()), dw(w.size()), dc(size_t(m) * n + kGuard);
  ASSERT_NE(da.ptr, nullptr);
  ASSERT_NE(dw.ptr, nullptr);
  ASSERT_NE(dc.ptr, nullptr);
  CUDA_OK(da.upload(a));
  CUDA_OK(dw.upload(w));
  std::vector<uint16_t> poison(dc.count, 0xFFFF);  // bf16 NaN
  for (size_t i = size_t(m) * n; i < poison.size(); ++i) poison[i] = kGuardValue;
  CUDA_OK(dc.upload(poison));
  CUDA_OK(hexel::examples::gemm_tile<Accum>(da.ptr, dw.ptr, dc.ptr, m, n, k, nullptr));
  CUDA_OK(cudaDeviceSynchronize());
  const auto c = dc.download();
  for (size_t i = size_t(m) * n; i < c.size(); ++i)
    ASSERT_EQ(c[i], kGuardValue) << "store past C, " << i - size_t(m) * n << " elements on";
  for (uint32_t r = 0; r < m; ++r)
    for (uint32_t col = 0; col < n; ++col) {
      double ref = 0, mag = 0;
      for (uint32_t kk = 0; kk < k; ++kk) {
        const double p =
            double(bf16_to_f32(a[size_t(r) * k + kk])) * bf16_to_f32(w[size_t(col) * k + kk]);
        ref += p;
        mag += std::fabs(p);
      }
      const float got = bf16_to_f32(c[size_t(r) * n + col]);
      ASSERT_FALSE(std::isnan(got)) << "C[" << r << "][" << col << "] unwritten";
      // bf16 output: half an ulp of 2^-8 relative, plus f32 accumulation-order noise.
      ASSERT_NEAR(got, ref, 4e-3 * std::fabs(ref) + 1e-5 * mag + 1e-6)
          << "C[" << r << "][" << col << "]";
    }
}

TEST(GemmTile, OneExactTile) {
  REQUIRE_SM90();
  run_tile_gemm(128, 128, 64, 1);
}

// Several K blocks (the ring wraps more than once), several tiles both ways.
TEST(GemmTile, ExactTilesLongK) {
  REQUIRE_SM90();
  run_tile_gemm(256, 384, 1024, 2);
}

// Tails everywhere: one row, one column, K = 8; N not a multiple of the 2-column store run.
TEST(GemmTile, SmallestAndOddShapes) {
  REQUIRE_SM90();
  run_tile_gemm(1, 1, 8, 3);
  run_tile_gemm(3, 5, 24, 4);
  run_tile_gemm(129, 127, 72, 5);
}

// Random ragged shapes, drawn fresh per run.
TEST(GemmTile, RandomRaggedShapes) {
  REQUIRE_SM90();
  const uint32_t seed = std::random_device{}();
  std::mt19937 rng(seed);
  for (int i = 0; i < 12; ++i) {
    const uint32_t m = 1 + rng() % 400, n = 1 + rng() % 300, k = 8 * (1 + rng() % 64);
    run_tile_gemm(m, n, k, seed + i);
    if (HasFatalFailure()) return;
  }
}

TEST(GemmTileHost, RejectsShapesItCannotRun) {
  EXPECT_EQ(hexel::examples::gemm_tile<Accum>(nullptr, nullptr, nullptr, 64, 64, 60, nullptr),
            cudaErrorInvalidValue);
  EXPECT_EQ(hexel::examples::gemm_tile<Accum>(nullptr, nullptr, nullptr, 0, 64, 64, nullptr),
            cudaErrorInvalidValue);
  EXPECT_EQ(
      hexel::examples::gemm_tile<Accum>(nullptr, nullptr, nullptr, 128u * 65536, 64, 64, nullptr),
      cudaErrorInvalidValue);
}

}  // namespace
