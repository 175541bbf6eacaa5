// The CPU reference engine's KV cache: a bf16 cache keeps K and V in f32 as given; an e4m3 cache
// stores e4m3(x / scale), rounded to nearest even and saturated, and reads back float(q) * scale
// with the layer's K or V scale. Expected values are worked out by hand from the e4m3 format
// (support/dtype.hpp), not from the conversion under test.
#include <gtest/gtest.h>

#include <vector>

#include "executor/cpu_op_binding.hpp"

namespace telos::exec {
namespace {

KvCacheConfig geometry(DType dtype) {
  KvCacheConfig g;
  g.dtype = dtype;
  g.page_size = 8;
  g.num_layers = 2;
  g.num_kv_heads = 1;
  g.head_dim = 4;
  g.layout = "page[layer][kv][head][slot][dim]";
  if (dtype == DType::E4M3) {
    g.k_scales = {0.5f, 2.0f};
    g.v_scales = {1.0f, 4.0f};
  }
  return g;
}

std::vector<float> load(const CpuKvCache& kv, std::span<const PageId> pages, int layer, int k_or_v,
                        int position) {
  std::vector<float> out(4);
  kv.load(pages, layer, k_or_v, 0, position, out.data());
  return out;
}

TEST(CpuKvCache, E4m3StoresQuantizedValuesOverTheLayersScale) {
  CpuKvCache kv(geometry(DType::E4M3), 2);
  const std::vector<PageId> pages = {1, 0};
  // Layer 1's K scale is 2: 1 / 2 = 0.5 is exact; 0.3 / 2 = 0.15 lies between 0.140625 and
  // 0.15625 (steps of 2^-6 in [2^-3, 2^-2)), nearer the latter; -1000 / 2 saturates at -448; 1e-4
  // / 2 is below half the smallest subnormal 2^-9 and becomes 0.
  const float k[4] = {1.0f, 0.3f, -1000.0f, 1e-4f};
  kv.store(pages, 1, 0, 0, 9, k);
  EXPECT_EQ(load(kv, pages, 1, 0, 9), (std::vector<float>{1.0f, 0.3125f, -896.0f, 0.0f}));
  // The same position's V uses layer 1's V scale, 4: 3 / 4 = 0.75 is exact; 2.2 / 4 = 0.55 lies
  // between 0.5 and 0.5625 (steps of 2^-4 in [0.5, 1)), nearer the latter; -448 * 4 is the
  // largest magnitude; 0.01 / 4 = 0.0025 is nearest the subnormal 0.001953125 (2^-9).
  const float v[4] = {3.0f, 2.2f, -1792.0f, 0.01f};
  kv.store(pages, 1, 1, 0, 9, v);
  EXPECT_EQ(load(kv, pages, 1, 1, 9), (std::vector<float>{3.0f, 2.25f, -1792.0f, 0.0078125f}));
  // Another position on the other page, and layer 0 (K scale 0.5), leave those untouched.
  const float k0[4] = {0.25f, -0.25f, 100.0f, 300.0f};
  kv.store(pages, 0, 0, 0, 1, k0);
  EXPECT_EQ(load(kv, pages, 0, 0, 1), (std::vector<float>{0.25f, -0.25f, 96.0f, 224.0f}));
  EXPECT_EQ(load(kv, pages, 1, 0, 9), (std::vector<float>{1.0f, 0.3125f, -896.0f, 0.0f}));
}

TEST(CpuKvCache, Bf16KeepsF32AsGiven) {
  CpuKvCache kv(geometry(DType::BF16), 2);
  const std::vector<PageId> pages = {1, 0};
  const float k[4] = {1.0f, 0.3f, -1000.0f, 1e-4f};
  kv.store(pages, 1, 0, 0, 9, k);
  EXPECT_EQ(load(kv, pages, 1, 0, 9), (std::vector<float>(k, k + 4)));
}

TEST(CpuKvCache, E4m3PagesTakeAQuarterOfTheF32Bytes) {
  EXPECT_EQ(CpuKvCache::bytes_per_page(geometry(DType::E4M3)), 2u * 2 * 1 * 8 * 4);
  EXPECT_EQ(CpuKvCache::bytes_per_page(geometry(DType::BF16)), 2u * 2 * 1 * 8 * 4 * 4);
}

}  // namespace
}  // namespace telos::exec
