// Unit tests of Telos IR: the verifier's checks and messages (each names the op), and that the
// importer's graph and every fusion pass keep a graph valid.
#include "compiler/ir/verifier.hpp"

#include <gtest/gtest.h>

#include <string>

#include "compiler/artifact/weight_table.hpp"
#include "compiler/ir/model_graph.hpp"
#include "compiler/passes/pass_manager.hpp"
#include "support/error.hpp"

namespace telos::compiler::ir {
namespace {

TensorType act(Dim cols) {
  return {DType::BF16, {kTokens, cols}};
}

std::string verify_error(const Graph& g) {
  try {
    verify(g);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// A two-op graph: x = embed(tokens); h = rmsnorm(x), returning h.
Graph small_graph() {
  Graph g;
  g.name = "small";
  g.add_param({"embed", {DType::BF16, {16, 8}}, {"e"}});
  g.add_param({"norm", {DType::F32, {8}}, {"n"}});
  Value* tokens = g.add_input("tokens", {DType::I32, {kTokens}});
  Value* x = g.append_op("embed", {tokens}, {"embed"}, {}, {{"x", act(8)}})->results[0];
  Value* h = g.append_op("rmsnorm", {x}, {"norm"}, {{"eps", 1e-5}}, {{"h", act(8)}})->results[0];
  g.set_outputs({h});
  return g;
}

TEST(Verifier, AcceptsAWellFormedGraph) {
  EXPECT_EQ(verify_error(small_graph()), "");
}

TEST(Verifier, NamesAnUnknownOp) {
  Graph g = small_graph();
  g.append_op("frobnicate", {}, {}, {}, {{"y", act(8)}});
  EXPECT_EQ(verify_error(g), "IR verifier: op 2 (%y = frobnicate): unknown op");
}

TEST(Verifier, RefusesAnUnknownParameter) {
  Graph g = small_graph();
  g.append_op("rmsnorm", {g.outputs()[0]}, {"missing_norm"}, {{"eps", 1e-5}}, {{"y", act(8)}});
  EXPECT_EQ(verify_error(g), "IR verifier: op 2 (%y = rmsnorm): unknown parameter @missing_norm");
}

TEST(Verifier, RefusesUseBeforeDefinition) {
  Graph g = small_graph();
  Value* h = g.outputs()[0];
  // An op at the front reading %h, which the last op defines.
  g.insert_op(0, "rmsnorm", {h}, {"norm"}, {{"eps", 1e-5}}, {{"early", act(8)}});
  EXPECT_EQ(verify_error(g),
            "IR verifier: op 0 (%early = rmsnorm): operand 0 %h is used before its definition");
}

TEST(Verifier, RefusesAValueNoOpDefines) {
  Graph g = small_graph();
  Value stray{"stray", act(8), nullptr};
  g.append_op("add", {g.outputs()[0], &stray}, {}, {}, {{"y", act(8)}});
  EXPECT_EQ(verify_error(g), "IR verifier: op 2 (%y = add): operand 1 %stray is not defined");
}

TEST(Verifier, RefusesShapeMismatches) {
  Graph g = small_graph();
  g.add_param({"w", {DType::BF16, {4, 16}}, {"w"}});
  g.append_op("linear", {g.outputs()[0]}, {"w"}, {}, {{"y", act(4)}});
  EXPECT_EQ(verify_error(g),
            "IR verifier: op 2 (%y = linear): operand 0 %h has 8 columns but @w expects 16");

  Graph g2 = small_graph();
  g2.add_param({"w", {DType::BF16, {4, 8}}, {"w"}});
  g2.append_op("linear", {g2.outputs()[0]}, {"w"}, {}, {{"y", act(5)}});
  EXPECT_EQ(verify_error(g2),
            "IR verifier: op 2 (%y = linear): result %y has type bf16[T,5], expected bf16[T,4]");
}

TEST(Verifier, RefusesWrongParameterDtype) {
  Graph g = small_graph();
  g.add_param({"bf16_norm", {DType::BF16, {8}}, {"n2"}});
  g.append_op("rmsnorm", {g.outputs()[0]}, {"bf16_norm"}, {{"eps", 1e-5}}, {{"y", act(8)}});
  EXPECT_EQ(verify_error(g),
            "IR verifier: op 2 (%y = rmsnorm): parameter @bf16_norm has type bf16[8], expected "
            "f32[8]");
}

TEST(Verifier, RefusesMissingAttributesAndBadEpilogues) {
  Graph g = small_graph();
  g.append_op("rmsnorm", {g.outputs()[0]}, {"norm"}, {}, {{"y", act(8)}});
  EXPECT_EQ(verify_error(g), "IR verifier: op 2 (%y = rmsnorm): expected a float attribute eps");

  Graph g2 = small_graph();
  g2.add_param({"w", {DType::BF16, {8, 8}}, {"w"}});
  g2.append_op("linear", {g2.outputs()[0]}, {"w"}, {{"epilogue", std::string("gelu")}},
               {{"y", act(8)}});
  EXPECT_EQ(verify_error(g2),
            "IR verifier: op 2 (%y = linear): unknown epilogue (expected residual, swiglu or "
            "rope_kv_append)");
}

TEST(Verifier, RefusesAGraphWithoutOutputs) {
  Graph g = small_graph();
  g.set_outputs({});
  EXPECT_EQ(verify_error(g), "IR verifier: graph @small returns nothing");
}

TEST(Graph, RefusesToEraseAnOpStillInUse) {
  Graph g = small_graph();
  Op* embed = g.ops()[0].get();
  EXPECT_THROW(g.erase_ops({embed}), Error);
  EXPECT_EQ(g.ops().size(), 2u);
}

ModelSpec qwen3_like() {
  ModelSpec s;
  s.name = "q";
  s.family = "qwen3";
  s.vocab_size = 64;
  s.hidden_size = 32;
  s.intermediate_size = 48;
  s.num_layers = 3;
  s.num_heads = 4;
  s.num_kv_heads = 2;
  s.head_dim = 16;  // attention width 64 != hidden 32, as in Qwen3
  s.max_position_embeddings = 128;
  s.qkv_bias = true;
  s.qk_norm = true;
  return s;
}

TEST(Passes, EveryPassKeepsTheGraphValidAndTheResultMatchesTheWeightTable) {
  for (bool tied : {true, false}) {
    ModelSpec spec = qwen3_like();
    spec.tie_word_embeddings = tied;
    Graph g = build_model_graph(spec);
    ASSERT_EQ(verify_error(g), "");
    // run_passes verifies after each pass and names the pass that broke the graph.
    ASSERT_NO_THROW(run_passes(g, fusion_pipeline(), nullptr));
    EXPECT_NO_THROW(check_weight_table(g, spec));
    // Per layer: rmsnorm, qkv+rope+append, paged_attention, o+residual, rmsnorm, gate_up+swiglu,
    // down+residual; plus embed, the final norm and lm_head_sample.
    EXPECT_EQ(g.ops().size(), 3u * 7u + 3u);
  }
}

TEST(Passes, TheUnfusedGraphIsNotTheWeightTable) {
  const ModelSpec spec = qwen3_like();
  const Graph g = build_model_graph(spec);
  try {
    check_weight_table(g, spec);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              "IR: parameter 2 is @layers.0.q, the weight table has @layers.0.qkv there");
  }
}

}  // namespace
}  // namespace telos::compiler::ir
