// Correctness of the Hexel proof GEMM (hexel/examples/gemm_bf16.cuh) against a host reference:
// one tile, ragged tails in M, N and K, and a persistent run with more tiles than SMs (checked
// on sampled entries, with every entry checked for having been written), each for the plain
// variant and the CTA-pair multicast variant.
#include "gemm_bf16_launch.h"
#include "gpu_check.h"

namespace {

void run_gemm(uint32_t m, uint32_t n, uint32_t k, size_t samples, uint32_t cluster_m) {
  SCOPED_TRACE("M=" + std::to_string(m) + " N=" + std::to_string(n) + " K=" + std::to_string(k) +
               " cluster_m=" + std::to_string(cluster_m));
  auto a = random_bf16(size_t(m) * k, 7 + m);
  auto b = random_bf16(size_t(n) * k, 11 + n);
  DeviceBuffer<uint16_t> da(a.size()), db(b.size()), dc(size_t(m) * n);
  CUDA_OK(da.upload(a));
  CUDA_OK(db.upload(b));
  CUDA_OK(cudaMemset(dc.ptr, 0xFF, size_t(m) * n * 2));  // bf16 NaN poison
  CUDA_OK(hexel::examples::gemm_bf16(da.ptr, db.ptr, dc.ptr, m, n, k, nullptr, cluster_m));
  CUDA_OK(cudaDeviceSynchronize());
  auto c = dc.download();
  for (size_t i = 0; i < c.size(); ++i)
    ASSERT_FALSE(std::isnan(bf16_to_f32(c[i]))) << "C[" << i / n << "][" << i % n << "] unwritten";
  std::mt19937 rng(5);
  const size_t total = size_t(m) * n;
  const size_t count = samples == 0 ? total : samples;
  for (size_t s = 0; s < count; ++s) {
    const size_t idx = samples == 0 ? s : rng() % total;
    const size_t r = idx / n, col = idx % n;
    double ref = 0, mag = 0;
    for (uint32_t kk = 0; kk < k; ++kk) {
      const double p = double(bf16_to_f32(a[r * k + kk])) * bf16_to_f32(b[col * k + kk]);
      ref += p;
      mag += std::fabs(p);
    }
    // bf16 output: half an ulp of 2^-8 relative, plus f32 accumulation-order noise.
    ASSERT_NEAR(bf16_to_f32(c[idx]), ref, 4e-3 * std::fabs(ref) + 1e-5 * mag + 1e-6)
        << "C[" << r << "][" << col << "]";
  }
}

class GemmBf16 : public ::testing::TestWithParam<uint32_t> {};

TEST_P(GemmBf16, OneTile) {
  REQUIRE_SM90();
  run_gemm(128, 256, 64, 0, GetParam());
}
// 300 rows = 3 tiles: with CTA pairs the second pair's upper CTA has no rows at all.
TEST_P(GemmBf16, RaggedTails) {
  REQUIRE_SM90();
  run_gemm(300, 520, 200, 0, GetParam());
}
TEST_P(GemmBf16, PersistentManyTiles) {
  REQUIRE_SM90();
  run_gemm(4096, 2048, 512, 20000, GetParam());
}
TEST_P(GemmBf16, LlamaOProjection) {
  REQUIRE_SM90();
  run_gemm(4096, 4096, 4096, 4000, GetParam());
}

INSTANTIATE_TEST_SUITE_P(ClusterM, GemmBf16, ::testing::Values(1u, 2u));

TEST(GemmBf16Host, RejectsUnalignedShapesAndBadClusters) {
  EXPECT_EQ(hexel::examples::gemm_bf16(nullptr, nullptr, nullptr, 64, 64, 60, nullptr),
            cudaErrorInvalidValue);
  EXPECT_EQ(hexel::examples::gemm_bf16(nullptr, nullptr, nullptr, 64, 60, 64, nullptr),
            cudaErrorInvalidValue);
  EXPECT_EQ(hexel::examples::gemm_bf16(nullptr, nullptr, nullptr, 64, 64, 64, nullptr, 3),
            cudaErrorInvalidValue);
}

}  // namespace
