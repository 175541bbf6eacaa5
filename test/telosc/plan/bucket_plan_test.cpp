// Unit tests of the planner: arena reuse and alignment, and serving-config resolution.
#include "compiler/plan/bucket_plan.hpp"

#include <gtest/gtest.h>

#include "compiler/plan/serving_config.hpp"
#include "support/error.hpp"

namespace telos::compiler {
namespace {

using ir::kTokens;

ir::TensorType act(ir::Dim cols) {
  return {DType::BF16, {kTokens, cols}};
}

// a -> b -> c -> d, each read only by the next: a value can reuse the space of the one two back.
ir::Graph chain() {
  ir::Graph g;
  g.name = "chain";
  g.add_param({"n", {DType::F32, {100}}, {"n"}});
  ir::Value* v = g.add_input("in", act(100));
  for (const char* name : {"a", "b", "c", "d"})
    v = g.append_op("rmsnorm", {v}, {"n"}, {{"eps", 1e-5}}, {{name, act(100)}})->results[0];
  g.set_outputs({v});
  return g;
}

TEST(BucketPlan, ReusesDeadBuffersAndAlignsOffsets) {
  const BucketPlan p = plan_bucket(chain(), "decode", 3, 3);
  ASSERT_EQ(p.buffers.size(), 4u);
  // 3 tokens * 100 * 2 B = 600 B, padded to 768 for the next offset.
  for (const ArenaBuffer& b : p.buffers) {
    EXPECT_EQ(b.bytes, 600);
    EXPECT_EQ(b.offset % kArenaAlignment, 0);
  }
  // Only two values are ever live at once (an op's input and output).
  EXPECT_EQ(p.arena_bytes, 2 * 768);
  EXPECT_NE(p.buffers[0].offset, p.buffers[1].offset);
  EXPECT_EQ(p.buffers[0].offset, p.buffers[2].offset);
  EXPECT_EQ(p.buffers[1].offset, p.buffers[3].offset);
}

TEST(BucketPlan, KeepsAValueAliveUntilItsLastUse) {
  ir::Graph g = chain();
  // d also reads a: a must not share space with b or c any more.
  ir::Op* last = g.ops().back().get();
  last->kind = "add";
  last->params.clear();
  last->attrs.clear();
  last->operands = {g.ops()[2]->results[0], g.ops()[0]->results[0]};
  const BucketPlan p = plan_bucket(g, "decode", 1, 1);
  EXPECT_EQ(p.arena_bytes, 3 * 256);
  EXPECT_NE(p.buffers[0].offset, p.buffers[1].offset);
  EXPECT_NE(p.buffers[0].offset, p.buffers[2].offset);
}

ModelSpec llama8b_like() {
  ModelSpec s;
  s.num_heads = 32;
  s.num_kv_heads = 8;
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
            "s.json: serving.tensor_parallel: 3 must divide num_heads (32) and num_kv_heads (8)");
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
}

}  // namespace
}  // namespace telos::compiler
