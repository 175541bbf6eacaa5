// Adding an op end to end, as a new op is added: a toy `scale` ({factor}: y = factor * x) gets its
// IR rule and its reference implementation here, in a few lines each, and a graph that uses it,
// written by the compiler's artifact writer, runs on the CPU reference engine. The graph is the
// one telosc builds for the tiny test artifact's shape, which this also holds equal to what
// tiny_artifact.cpp writes by hand.
#include <gtest/gtest.h>

#include <algorithm>

#include "compiler/artifact/graph_section.hpp"
#include "compiler/ir/model_graph.hpp"
#include "compiler/ir/verifier.hpp"
#include "compiler/passes/pass_manager.hpp"
#include "executor/cpu_reference_model.hpp"
#include "support/error.hpp"
#include "test/executor/tiny_artifact.hpp"

namespace telos::exec {
namespace {

using compiler::ir::Graph;
using compiler::ir::Op;
using nlohmann::json;

// 1. The IR op: `%y = scale(%x) {factor}`, y of x's type.
void check_scale(const Graph&, const Op& op) {
  if (op.operands.size() != 1 || !op.params.empty() || op.results.size() != 1)
    fail("IR verifier: scale takes one operand and no parameters, and has one result");
  if (op.results[0]->type != op.operands[0]->type)
    fail("IR verifier: scale's result has its operand's type");
  const compiler::ir::AttrValue* factor = op.attr("factor");
  if (!factor || !std::holds_alternative<double>(*factor))
    fail("IR verifier: scale needs a float attribute factor");
}
const compiler::ir::OpRules kToyRules = {{"scale", &check_scale}};

// 2. The lowering rule (codegen's table from IR ops to kernels) joins here with that table.

// 3. The reference implementation.
CpuOpRun bind_scale(const CpuOpBinding& b) {
  b.counts(1, 0, 0, 1);
  const int x = b.operand(0, 0), n = b.cols(x), y = b.result(0, n);
  const float factor = static_cast<float>(b.positive_attr("factor"));
  return [=](CpuStep& s) {
    const float* in = s.in(x);
    float* out = s.out(y, n);
    for (int i = 0; i < s.rows * n; ++i) out[i] = factor * in[i];
  };
}

// The model telosc would import for write_tiny_artifact's default shape.
compiler::ModelSpec tiny_spec(const testing::TinyArtifactSpec& s) {
  compiler::ModelSpec m;
  m.name = "tiny-test";
  m.architecture = "TestForCausalLM";
  m.family = s.family;
  m.vocab_size = s.vocab_size;
  m.hidden_size = s.hidden_size;
  m.intermediate_size = s.intermediate_size;
  m.num_layers = s.num_layers;
  m.num_heads = s.num_heads;
  m.num_kv_heads = s.num_kv_heads;
  m.head_dim = s.head_dim;
  m.rms_norm_eps = 1e-5;
  m.max_position_embeddings = s.max_seq_len;
  m.rope.type = s.rope_type;
  m.rope.theta = 10000.0;
  m.tie_word_embeddings = s.tie_word_embeddings;
  return m;
}

Graph fused_graph(const testing::TinyArtifactSpec& s) {
  Graph g = compiler::ir::build_model_graph(tiny_spec(s));
  compiler::run_passes(g, compiler::fusion_pipeline(), nullptr);
  return g;
}

// Puts `%scaled = scale(%final) {factor}` before the LM head, which then reads it.
void scale_before_lm_head(Graph& g, double factor) {
  const auto& ops = g.ops();
  const auto head = std::find_if(ops.begin(), ops.end(),
                                 [](const auto& op) { return op->kind == "lm_head_sample"; });
  ASSERT_NE(head, ops.end());
  Op* lm_head = head->get();
  compiler::ir::Value* final_norm = lm_head->operands[0];
  Op* scale = g.insert_op(static_cast<std::size_t>(head - ops.begin()), "scale", {final_norm}, {},
                          {{"factor", factor}}, {{"scaled", final_norm->type}});
  lm_head->operands[0] = scale->results[0];
}

// The logits of one sequence's prompt on a fresh engine.
std::vector<float> prompt_logits(CpuReferenceModel& model) {
  const std::vector<std::int32_t> tokens = {1, 5, 9, 33, 60};
  const std::vector<PageId> pages = {0, 1};
  Step step;
  ScheduledSequence seq;
  seq.tokens = tokens;
  seq.page_table = pages;
  seq.samples = true;
  step.sequences.push_back(seq);
  step.num_tokens = static_cast<int>(tokens.size());
  std::vector<float> logits;
  model.forward(step, logits);
  return logits;
}

std::string message(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(ToyOp, HandWrittenGraphIsTheOneTheCompilerWrites) {
  testing::TinyArtifactSpec spec;
  const json manifest = testing::write_tiny_artifact(testing::temp_dir("toy-same"), spec);
  EXPECT_EQ(manifest["graph"], json::parse(compiler::graph_section(fused_graph(spec)).dump()));
}

TEST(ToyOp, RunsEndToEndOnTheCpuEngine) {
  testing::TinyArtifactSpec spec;
  const std::string plain_dir = testing::temp_dir("toy-plain");
  const std::string scaled_dir = testing::temp_dir("toy-scaled");
  testing::write_tiny_artifact(plain_dir, spec);
  json manifest = testing::write_tiny_artifact(scaled_dir, spec);

  Graph g = fused_graph(spec);
  scale_before_lm_head(g, 2.0);
  EXPECT_NE(message([&] { compiler::ir::verify(g); }).find("unknown op"), std::string::npos);
  compiler::ir::verify(g, kToyRules);
  manifest["graph"] = json::parse(compiler::graph_section(g).dump());
  testing::rewrite_manifest(scaled_dir, manifest);

  const auto scaled = Artifact::load(scaled_dir);
  EXPECT_NE(message([&] { CpuReferenceModel model(scaled); })
                .find("graph.ops[" + std::to_string(g.ops().size() - 2) +
                      "].op: \"scale\" is not an op the CPU reference engine runs"),
            std::string::npos);
  CpuOpTable ops = cpu_reference_ops();
  ops.emplace("scale", &bind_scale);
  CpuReferenceModel with_scale(scaled, 0, ops);
  CpuReferenceModel plain(Artifact::load(plain_dir));

  // Doubling is exact in f32, and so is every product and sum of the LM head's dot products.
  const std::vector<float> want = prompt_logits(plain), got = prompt_logits(with_scale);
  ASSERT_EQ(got.size(), static_cast<std::size_t>(spec.vocab_size));
  ASSERT_EQ(want.size(), got.size());
  for (std::size_t i = 0; i < want.size(); ++i) EXPECT_EQ(got[i], 2.0f * want[i]) << i;
  EXPECT_NE(*std::max_element(want.begin(), want.end()), 0.0f);
}

}  // namespace
}  // namespace telos::exec
