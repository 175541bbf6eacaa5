// Unit tests of the planner: the arena's sharing and alignment, and serving-config resolution.
#include "compiler/plan/memory_plan.hpp"

#include <gtest/gtest.h>

#include "compiler/plan/serving_config.hpp"
#include "support/error.hpp"

namespace telos::compiler {
namespace {

using codegen::ArenaBuffer;
using codegen::BufferLifetime;
using codegen::KernelPlan;

// A lowering with one bucket per entry of `buckets`, each a list of launches, each the launch's
// arguments.
KernelPlan lowered(std::vector<ArenaBuffer> arena,
                   const std::vector<std::vector<std::vector<std::string>>>& buckets) {
  KernelPlan plan;
  plan.arena = std::move(arena);
  for (const auto& launches : buckets) {
    codegen::BucketProgram b;
    b.kind = "decode";
    b.size = static_cast<int>(plan.buckets.size()) + 1;
    for (const auto& args : launches) b.launches.push_back({0, {1, 1, 1}, args});
    plan.buckets.push_back(std::move(b));
  }
  return plan;
}

std::int64_t offset(const ArenaPlan& p, const std::string& name) {
  for (const ArenaSlot& s : p.buffers)
    if (s.buffer == name) return s.offset;
  ADD_FAILURE() << "no buffer " << name;
  return -1;
}

// a -> b -> c, each read only by the next launch: c takes a's place, b has its own.
TEST(ArenaPlan, SharesBytesOfBuffersNeverLiveTogetherAndAlignsThem) {
  const ArenaPlan p = plan_arena(lowered({{"a", 600}, {"b", 600}, {"c", 600}},
                                         {{{"buf:a"}, {"buf:a", "buf:b"}, {"buf:b", "buf:c"}}}));
  ASSERT_EQ(p.buffers.size(), 3u);
  for (const ArenaSlot& s : p.buffers) {
    EXPECT_EQ(s.bytes, 600);
    EXPECT_EQ(s.offset % kArenaAlignment, 0);
  }
  // 600 B padded to 768.
  EXPECT_EQ(p.bytes, 2 * 768);
  EXPECT_EQ(offset(p, "a"), offset(p, "c"));
  EXPECT_NE(offset(p, "a"), offset(p, "b"));
}

// Live together in one bucket is enough: each graph reads the one arena.
TEST(ArenaPlan, BuffersLiveTogetherInAnyBucketNeverShare) {
  const ArenaPlan p = plan_arena(lowered(
      {{"a", 256}, {"b", 256}, {"c", 256}},
      {{{"buf:a"}, {"buf:a", "buf:b"}, {"buf:b", "buf:c"}}, {{"buf:a", "buf:c"}, {"buf:b"}}}));
  EXPECT_EQ(p.bytes, 3 * 256);
}

// A tensor map over a buffer is a use of it.
TEST(ArenaPlan, ATensorMapOverABufferIsAUse) {
  const ArenaPlan p = plan_arena(
      lowered({{"a", 256}, {"b", 256}}, {{{"buf:a"}, {"tmap:buf:a:4:32:4:64", "buf:b"}}}));
  EXPECT_NE(offset(p, "a"), offset(p, "b"));
}

// A buffer the host reads after the graph lives to the step's end; one the next step reads, or
// counters kept across launches, share with nothing.
TEST(ArenaPlan, LifetimesBeyondTheLaunchesHoldTheirBytes) {
  const ArenaPlan to_end = plan_arena(lowered(
      {{"logits", 256, BufferLifetime::step}, {"later", 256}}, {{{"buf:logits"}, {"buf:later"}}}));
  EXPECT_NE(offset(to_end, "logits"), offset(to_end, "later"));
  const ArenaPlan across =
      plan_arena(lowered({{"first", 256}, {"sampled", 256, BufferLifetime::steps}},
                         {{{"buf:first"}, {"buf:sampled"}}}));
  EXPECT_NE(offset(across, "first"), offset(across, "sampled"));
  // A launch-lifetime pair in the same order shares.
  const ArenaPlan plain =
      plan_arena(lowered({{"first", 256}, {"next", 256}}, {{{"buf:first"}, {"buf:next"}}}));
  EXPECT_EQ(offset(plain, "first"), offset(plain, "next"));
}

TEST(ArenaPlan, RefusesALaunchOfABufferTheLoweringDidNotDeclare) {
  try {
    plan_arena(lowered({{"a", 256}}, {{{"buf:a"}, {"buf:zz"}}}));
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              "plan: bucket decode:1 names buffer \"zz\", which the lowering did not declare");
  }
}

ModelSpec llama8b_like() {
  ModelSpec s;
  s.num_heads = 32;
  s.num_kv_heads = 8;
  s.num_layers = 32;
  s.head_dim = 128;
  s.intermediate_size = 14336;
  s.max_position_embeddings = 131072;
  return s;
}

TEST(ServingConfig, DefaultsAreWhatAvLLMUserExpects) {
  const ServingConfig c = resolve_serving(nullptr, llama8b_like(), "model.json");
  EXPECT_EQ(c.max_batch, 256);
  EXPECT_EQ(c.max_seq_len, 131072);
  EXPECT_EQ(c.kv_page_size, 16);
  EXPECT_FALSE(c.kv_pool_pages.has_value());
  EXPECT_DOUBLE_EQ(c.kv_pool_memory_fraction.value(), 0.9);
  EXPECT_EQ(c.prefill_chunk, 512);
  EXPECT_EQ(c.decode_buckets, (std::vector<std::int64_t>{1, 2, 4, 8, 16, 32, 64, 128, 256}));
  EXPECT_EQ(c.prefill_buckets, (std::vector<std::int64_t>{16, 32, 64, 128, 256, 512}));
  EXPECT_EQ(c.targets, (std::vector<std::string>{"sm_90a"}));
  EXPECT_EQ(c.tensor_parallel, 1);
}

TEST(ServingConfig, ErrorsNameTheFileAndField) {
  const auto error = [](const char* text) {
    try {
      resolve_serving(nlohmann::json::parse(text), llama8b_like(), "s.json");
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_EQ(error(R"({"tensor_parallel": 3})"),
            "s.json: serving.tensor_parallel: 3 is not 1, 2, 4 or 8 (a power of two up to the GPUs "
            "of one host)");
  EXPECT_EQ(error(R"({"max_batch": 2.5})"),
            "s.json: serving.max_batch: expected an integer from 1 to 1024, got 2.5");
  EXPECT_EQ(error(R"({"kv_pool": {"pages": -1}})"),
            "s.json: serving.kv_pool.pages: expected an integer from 1 to 16777216, got -1");
  EXPECT_EQ(error(R"({"targets": []})"),
            "s.json: serving.targets: expected a non-empty array such as [\"sm_90a\"], got []");
  EXPECT_EQ(error(R"({"targets": ["sm_90a", "sm_90a"]})"),
            "s.json: serving.targets: \"sm_90a\" is listed twice");
  EXPECT_EQ(error(R"({"decode_buckets": "all"})"),
            "s.json: serving.decode_buckets: expected a non-empty array of increasing integers, "
            "got \"all\"");
  EXPECT_EQ(error(R"({"kv_dtype": "fp8"})"),
            "s.json: serving.kv_dtype: expected \"bf16\" or \"fp8_e4m3\", got \"fp8\"");
  EXPECT_EQ(error(R"({"kv_dtype": 8})"),
            "s.json: serving.kv_dtype: expected \"bf16\" or \"fp8_e4m3\", got 8");
  EXPECT_EQ(error(R"({"fp8_activations": "fp8"})"),
            "s.json: serving.fp8_activations: expected \"e4m3\" or \"bf16\", got \"fp8\"");
  EXPECT_EQ(error(R"({"fp8_activations": true})"),
            "s.json: serving.fp8_activations: expected \"e4m3\" or \"bf16\", got true");
}

// FP8 activations: W8A8 unless the config asks for weight-only.
TEST(ServingConfig, Fp8ActivationsDefaultToE4m3) {
  const ModelSpec spec = llama8b_like();
  EXPECT_EQ(resolve_serving(nullptr, spec, "model.json").fp8_activations, DType::E4M3);
  EXPECT_EQ(
      resolve_serving(nlohmann::json::parse(R"({"fp8_activations": "bf16"})"), spec, "model.json")
          .fp8_activations,
      DType::BF16);
}

// An e4m3 cache holds K and V in one byte an element: the same page of tokens in half the bytes,
// with a K and a V scale of 1.0 a layer.
TEST(KvCacheGeometry, E4m3HalvesThePageAndScalesEachLayerByOne) {
  const ModelSpec spec = llama8b_like();
  const ServingConfig bf16 = resolve_serving(nullptr, spec, "model.json");
  const ServingConfig fp8 =
      resolve_serving(nlohmann::json::parse(R"({"kv_dtype": "fp8_e4m3"})"), spec, "model.json");
  EXPECT_EQ(bf16.kv_dtype, DType::BF16);
  EXPECT_EQ(fp8.kv_dtype, DType::E4M3);
  const KvCacheGeometry a = kv_cache_geometry(spec, bf16), b = kv_cache_geometry(spec, fp8);
  EXPECT_EQ(a.bytes_per_page, 2 * 32 * 16 * 8 * 128 * 2);
  EXPECT_EQ(b.bytes_per_page * 2, a.bytes_per_page);
  EXPECT_TRUE(a.k_scales.empty() && a.v_scales.empty());
  EXPECT_EQ(b.k_scales, std::vector<float>(32, 1.0f));
  EXPECT_EQ(b.v_scales, std::vector<float>(32, 1.0f));
  const nlohmann::ordered_json j = kv_cache_to_json(b);
  EXPECT_EQ(j["dtype"], "e4m3");
  EXPECT_EQ(j["k_scales"].size(), 32u);
  EXPECT_FALSE(kv_cache_to_json(a).contains("k_scales"));
}

}  // namespace
}  // namespace telos::compiler
