// Unit tests of Telos IR: the verifier's checks and messages (each names the op), and that the
// importer's graph and every fusion pass keep a graph valid.
#include "compiler/ir/verifier.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

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

// The fused IR's parameters are what the artifact writer packs, in this order.
TEST(Passes, EveryPassKeepsTheGraphValidAndEndsAtTheArtifactsParameters) {
  for (bool tied : {true, false}) {
    ModelSpec spec = qwen3_like();
    spec.tie_word_embeddings = tied;
    Graph g = build_model_graph(spec);
    ASSERT_EQ(verify_error(g), "");
    // run_passes verifies after each pass and names the pass that broke the graph.
    ASSERT_NO_THROW(run_passes(g, fusion_pipeline(), nullptr));
    // Per layer: rmsnorm, qkv+rope+append, paged_attention, o+residual, rmsnorm, gate_up+swiglu,
    // down+residual; plus embed, the final norm and lm_head_sample.
    EXPECT_EQ(g.ops().size(), 3u * 7u + 3u);

    std::vector<std::string> want = {"embed"};
    for (const char* layer : {"layers.0.", "layers.1.", "layers.2."})
      for (const char* name :
           {"attn_norm", "qkv", "qkv_bias", "q_norm", "k_norm", "o", "mlp_norm", "gate_up", "down"})
        want.push_back(std::string(layer) + name);
    want.push_back("final_norm");
    if (!tied) want.push_back("lm_head");
    std::vector<std::string> have;
    for (const Param& p : g.params()) have.push_back(p.name);
    EXPECT_EQ(have, want);

    const Param* qkv = g.find_param("layers.1.qkv");
    ASSERT_NE(qkv, nullptr);
    EXPECT_EQ(qkv->type.str(), "bf16[128,32]");  // (4 + 2 * 2) heads of 16 rows
    EXPECT_EQ(qkv->sources, (std::vector<std::string>{"model.layers.1.self_attn.q_proj.weight",
                                                      "model.layers.1.self_attn.k_proj.weight",
                                                      "model.layers.1.self_attn.v_proj.weight"}));
    const Param* gate_up = g.find_param("layers.2.gate_up");
    ASSERT_NE(gate_up, nullptr);
    EXPECT_EQ(gate_up->type.str(), "bf16[96,32]");
    EXPECT_EQ(gate_up->sources, (std::vector<std::string>{"model.layers.2.mlp.gate_proj.weight",
                                                          "model.layers.2.mlp.up_proj.weight"}));
  }
}

// The writer packs parameters as they are: the verifier refuses one it could not pack.
TEST(Verifier, RefusesAParameterTypeTheWriterDoesNotPack) {
  Graph g = small_graph();
  g.add_param({"half", {DType::F16, {8, 8}}, {"h"}});
  EXPECT_EQ(verify_error(g),
            "IR verifier: parameter @half has type f16[8,8], expected a bf16 matrix or an f32 "
            "vector");

  Graph g2 = small_graph();
  g2.add_param({"cube", {DType::BF16, {2, 2, 2}}, {"c"}});
  EXPECT_EQ(verify_error(g2),
            "IR verifier: parameter @cube has type bf16[2,2,2], expected a bf16 matrix or an f32 "
            "vector");
}

TEST(Verifier, RefusesAParameterWithoutSources) {
  Graph g = small_graph();
  g.add_param({"w", {DType::BF16, {4, 8}}, {}});
  g.append_op("linear", {g.outputs()[0]}, {"w"}, {}, {{"y", act(4)}});
  EXPECT_EQ(verify_error(g),
            "IR verifier: parameter @w has no checkpoint tensors to be packed from");
}

TEST(Verifier, RefusesAParameterNoOpReads) {
  Graph g = small_graph();
  g.add_param({"unread", {DType::F32, {8}}, {"u"}});
  EXPECT_EQ(verify_error(g), "IR verifier: parameter @unread is read by no op");
}

}  // namespace
}  // namespace telos::compiler::ir
