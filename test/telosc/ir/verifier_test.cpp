// Unit tests of Telos IR: the verifier's checks and messages (each names the op), and that the
// importer's graph and every fusion pass keep a graph valid.
#include "compiler/ir/verifier.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "compiler/ir/model_graph.hpp"
#include "compiler/passes/pass_manager.hpp"
#include "compiler/passes/shard_tensor_parallel.hpp"
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
            "IR verifier: op 2 (%y = linear): unknown epilogue (expected residual, swiglu, "
            "rope_kv_append or partial)");
}

// `activations = "e4m3"` (the W8A8 pass) where the W8A8 kernels take the weight, e4m3 in 128 x 128
// scale blocks: on the LM head as on a linear; refused on any other weight, and any other value.
TEST(Verifier, ChecksActivationsOnTheLmHeadAndLinears) {
  auto graph = [](const std::string& kind, DType dtype, const std::string& activations) {
    Graph g;
    g.name = "w8a8";
    g.add_param({"embed", {DType::BF16, {256, 128}}, {"e"}});
    Param w{"w", {dtype, {256, 128}}, {"w"}};
    if (dtype == DType::E4M3) w.scale = ParamScale{128, 128, {"w.scale"}, 128, 128};
    g.add_param(std::move(w));
    Value* tokens = g.add_input("tokens", {DType::I32, {kTokens}});
    Value* x = g.append_op("embed", {tokens}, {"embed"}, {}, {{"x", act(128)}})->results[0];
    Op* op = kind == "linear"
                 ? g.append_op("linear", {x}, {"w"}, {}, {{"y", act(256)}})
                 : g.append_op(kind, {x}, {"w"}, {}, {{"y", {DType::I32, {kSequences}}}});
    if (!activations.empty()) op->set_attr("activations", activations);
    g.set_outputs({op->results[0]});
    return g;
  };
  for (const std::string kind : {"lm_head_sample", "linear"}) {
    EXPECT_EQ(verify_error(graph(kind, DType::E4M3, "e4m3")), "") << kind;
    EXPECT_EQ(verify_error(graph(kind, DType::E4M3, "")), "") << kind;
    EXPECT_EQ(verify_error(graph(kind, DType::BF16, "e4m3")),
              "IR verifier: op 1 (%y = " + kind +
                  "): activations = \"e4m3\" needs a W8A8 weight: @w is not an e4m3 matrix");
    EXPECT_EQ(
        verify_error(graph(kind, DType::E4M3, "bf16")),
        "IR verifier: op 1 (%y = " + kind + "): activations must be \"e4m3\" (W8A8) where given");
  }
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

// The writer packs parameters as they are: the verifier refuses one it could not pack, and an
// e4m3 parameter without its scales (or scales on any other).
TEST(Verifier, RefusesAParameterTypeTheWriterDoesNotPack) {
  Graph g = small_graph();
  g.add_param({"half", {DType::F16, {8, 8}}, {"h"}});
  EXPECT_EQ(verify_error(g),
            "IR verifier: parameter @half has type f16[8,8], expected a bf16 or e4m3 matrix or an "
            "f32 vector");

  Graph g2 = small_graph();
  g2.add_param({"cube", {DType::BF16, {2, 2, 2}}, {"c"}});
  EXPECT_EQ(verify_error(g2),
            "IR verifier: parameter @cube has type bf16[2,2,2], expected a bf16 or e4m3 matrix or "
            "an f32 vector");

  Graph g3 = small_graph();
  g3.add_param({"fp8", {DType::E4M3, {8, 8}}, {"q"}});
  EXPECT_EQ(verify_error(g3),
            "IR verifier: parameter @fp8 has type e4m3[8,8] but no scales (an e4m3 weight needs "
            "them)");

  Graph g4 = small_graph();
  g4.add_param(
      {"scaled", {DType::BF16, {8, 8}}, {"w"}, std::nullopt, ParamScale{1, 8, {"s"}, 1, 8}});
  EXPECT_EQ(verify_error(g4),
            "IR verifier: parameter @scaled has type bf16[8,8] but scales (e4m3 only)");

  Graph g5 = small_graph();
  g5.add_param({"two", {DType::E4M3, {8, 8}}, {"q"}, std::nullopt, ParamScale{1, 8, {}, 1, 8}});
  EXPECT_EQ(verify_error(g5),
            "IR verifier: parameter @two: expected positive scale blocks and one scale tensor a "
            "source, found blocks 1x8 and 0 scale tensors for 1 sources");
}

// Fused e4m3 weights keep blocks that lie inside one part's block: the gcd of the parts' rows and
// their block rows, one row where a QKV head would not fit whole; parts of two dtypes are refused.
TEST(Verifier, ConcatenatedScalesKeepTheirBlocks) {
  Graph g;
  auto add = [&](const std::string& name, DType dtype, std::int64_t rows) {
    Param p{name, {dtype, {rows, 256}}, {name + ".weight"}};
    if (dtype == DType::E4M3) p.scale = ParamScale{128, 128, {name + ".scale"}, 128, 128};
    g.add_param(p);
  };
  add("q", DType::E4M3, 256);
  add("k", DType::E4M3, 64);
  add("v", DType::E4M3, 64);
  add("b", DType::BF16, 64);
  const Param qkv = concat_params(g, {"q", "k", "v"}, "qkv", 32);
  EXPECT_EQ(qkv.type.str(), "e4m3[384,256]");
  EXPECT_EQ(qkv.scale->block_rows, 64);
  EXPECT_EQ(qkv.scale->block_cols, 128);
  EXPECT_EQ(qkv.scale->sources, (std::vector<std::string>{"q.scale", "k.scale", "v.scale"}));
  EXPECT_EQ(qkv.scale_dims(), (std::vector<std::int64_t>{6, 2}));
  EXPECT_EQ(concat_params(g, {"q", "k", "v"}, "qkv", 128).scale->block_rows, 1);
  EXPECT_EQ(concat_params(g, {"q", "q"}, "qq", 1).scale->block_rows, 128);
  try {
    concat_params(g, {"q", "b"}, "qb", 1);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              "@b is bf16[64,256] but @q is e4m3[256,256]: @qb packs them as one weight of one "
              "dtype (quantize all of them or none)");
  }
}

// A split e4m3 weight's scale blocks lie inside one block of the whole on every rank: the whole's
// blocks where the ranges fall on block bounds; else one row each for a row split, and for a column
// split the rank's columns as one block, or the common divisor of 64 columns; else refused.
TEST(Verifier, SplitScalesKeepEachElementsBlock) {
  const auto blocks = [](std::int64_t rows, std::int64_t cols, std::int64_t block_cols,
                         const ParamShard& shard) {
    const Param p{"w",
                  {DType::E4M3, {rows, cols}},
                  {"w.weight"},
                  std::nullopt,
                  ParamScale{128, block_cols, {"w.scale"}, 128, block_cols}};
    const ParamScale s = shard_scale(p, shard);
    return std::to_string(s.block_rows) + "x" + std::to_string(s.block_cols);
  };
  EXPECT_EQ(blocks(512, 256, 128, {0, 512, {{{0, 128}, {256, 384}}, {{128, 256}, {384, 512}}}}),
            "128x128");
  EXPECT_EQ(blocks(256, 256, 128, {0, 256, {{{0, 64}, {128, 160}}, {{64, 128}, {160, 192}}}}),
            "1x128");
  EXPECT_EQ(blocks(128, 512, 128, {1, 512, {{{0, 256}}, {{256, 512}}}}), "128x128");
  EXPECT_EQ(blocks(128, 128, 128, {1, 128, {{{0, 32}}, {{32, 64}}, {{64, 96}}, {{96, 128}}}}),
            "128x32");
  EXPECT_EQ(blocks(128, 384, 128, {1, 384, {{{0, 192}}, {{192, 384}}}}), "128x64");
  EXPECT_EQ(blocks(128, 256, 256, {1, 256, {{{0, 128}}, {{128, 256}}}}), "128x128");
  try {
    blocks(128, 192, 128, {1, 192, {{{0, 96}}, {{96, 192}}}});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              "@w: its e4m3 scales of 128x128 blocks do not split with its columns of 192: rank 0 "
              "[0:96], rank 1 [96:192]: each rank's columns must lie inside one scale block, or "
              "start and end on blocks of a multiple of 64 columns (the e4m3 kernels' K block; "
              "these columns share blocks of 32); compile with fewer ranks or unquantized weights");
  }
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

// ---- Tensor parallelism -------------------------------------------------------------------------

// qwen3_like through the fusion pipeline and the tensor-parallel pass over `ranks` ranks.
Graph sharded_qwen3_like(int ranks) {
  Graph g = build_model_graph(qwen3_like());
  run_passes(g, fusion_pipeline(), nullptr);
  run_passes(g, {tensor_parallel_pass(ranks)}, nullptr);
  return g;
}

std::string shard_string(const Param& p) {
  std::string s = p.shard->dim == 0 ? "rows" : "columns";
  for (const auto& rank : p.shard->ranks) {
    s += " |";
    for (const auto& [begin, end] : rank)
      s += " " + std::to_string(begin) + ":" + std::to_string(end);
  }
  return s;
}

TEST(TensorParallel, SplitsHeadsIntermediateRowsAndAddsAllReduces) {
  const Graph g = sharded_qwen3_like(2);
  EXPECT_EQ(g.ranks, 2);
  // Per layer the two residual linears became a partial linear and an all_reduce.
  EXPECT_EQ(g.ops().size(), 3u * 9u + 3u);
  int all_reduces = 0;
  for (const auto& op : g.ops()) all_reduces += op->kind == "all_reduce";
  EXPECT_EQ(all_reduces, 6);
  // 4 query heads, 2 KV heads of 16; intermediate 48; hidden 32.
  EXPECT_EQ(g.find_param("layers.0.qkv")->type.str(), "bf16[64,32]");
  EXPECT_EQ(shard_string(*g.find_param("layers.0.qkv")),
            "rows | 0:32 64:80 96:112 | 32:64 80:96 112:128");
  EXPECT_EQ(shard_string(*g.find_param("layers.0.qkv_bias")),
            "rows | 0:32 64:80 96:112 | 32:64 80:96 112:128");
  EXPECT_EQ(g.find_param("layers.0.o")->type.str(), "bf16[32,32]");
  EXPECT_EQ(shard_string(*g.find_param("layers.0.o")), "columns | 0:32 | 32:64");
  EXPECT_EQ(shard_string(*g.find_param("layers.0.gate_up")), "rows | 0:24 48:72 | 24:48 72:96");
  EXPECT_EQ(shard_string(*g.find_param("layers.0.down")), "columns | 0:24 | 24:48");
  for (const char* whole : {"embed", "layers.0.attn_norm", "layers.0.q_norm", "layers.0.k_norm",
                            "layers.0.mlp_norm", "final_norm"})
    EXPECT_FALSE(g.find_param(whole)->shard.has_value()) << whole;
}

TEST(TensorParallel, SharesAKvHeadAmongTheRanksThatReadIt) {
  // 2 KV heads over 4 ranks: ranks 0 and 1 hold KV head 0, ranks 2 and 3 KV head 1.
  const Graph g = sharded_qwen3_like(4);
  EXPECT_EQ(shard_string(*g.find_param("layers.2.qkv")),
            "rows | 0:16 64:80 96:112 | 16:32 64:80 96:112 | 32:48 80:96 112:128 | 48:64 80:96 "
            "112:128");
  for (const auto& op : g.ops())
    if (op->kind == "paged_attention") {
      EXPECT_EQ(op->int_attr("heads"), 1);
      EXPECT_EQ(op->int_attr("kv_heads"), 1);
    }
}

TEST(TensorParallel, RefusesShapesThatDoNotSplitAndUnfusedGraphs) {
  Graph g = build_model_graph(qwen3_like());
  run_passes(g, fusion_pipeline(), nullptr);
  // 4 query heads do not go 8 ways; 48 intermediate rows go 2, 4, 8 ways (6 each).
  EXPECT_THROW(shard_tensor_parallel(g, 8), Error);
  try {
    shard_tensor_parallel(g, 8);
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              "shard-tensor-parallel: 8 does not divide num_heads 4 (each rank takes whole query "
              "heads)");
  }
  EXPECT_EQ(g.ranks, 1);
  EXPECT_EQ(verify_error(g), "");

  Graph unfused = build_model_graph(qwen3_like());
  EXPECT_THROW(shard_tensor_parallel(unfused, 2), Error);
}

// all_reduce(%partial, %residual) on a graph of two ranks, of hidden 8.
Graph all_reduce_graph(std::vector<Attr> attrs,
                       TensorType partial_type = {DType::F32, {kTokens, 8}}) {
  Graph g = small_graph();
  g.ranks = 2;
  g.add_param({"w", {DType::BF16, {8, 8}}, {"w"}});
  Value* h = g.outputs()[0];
  Value* partial = g.append_op("linear", {h}, {"w"}, {{"epilogue", std::string("partial")}},
                               {{"p", partial_type}})
                       ->results[0];
  Value* sum =
      g.append_op("all_reduce", {partial, h}, {}, std::move(attrs), {{"s", act(8)}})->results[0];
  g.set_outputs({sum});
  return g;
}

TEST(Verifier, ChecksAllReduce) {
  const Attr two{"ranks", std::int64_t{2}}, residual{"epilogue", std::string("residual")};
  EXPECT_EQ(verify_error(all_reduce_graph({two, residual})), "");
  EXPECT_EQ(verify_error(all_reduce_graph({{"ranks", std::int64_t{4}}, residual})),
            "IR verifier: op 3 (%s = all_reduce): ranks is 4, but the graph runs on 2 ranks");
  EXPECT_EQ(verify_error(all_reduce_graph({two})),
            "IR verifier: op 3 (%s = all_reduce): expected epilogue = \"residual\" (the residual "
            "added once, after the sum)");
  EXPECT_EQ(verify_error(all_reduce_graph({two, residual}, {DType::F32, {kTokens, 4}})),
            "IR verifier: op 2 (%p = linear): result %p has type f32[T,4], expected f32[T,8]");
  Graph one_rank = all_reduce_graph({two, residual});
  one_rank.ranks = 1;
  EXPECT_EQ(verify_error(one_rank),
            "IR verifier: op 3 (%s = all_reduce): an all_reduce in a graph of one rank (ranks is "
            "set by the shard pass)");
}

TEST(Verifier, ChecksEveryRanksPartOfASplitParameter) {
  const auto with_shard = [](ParamShard shard, int ranks = 2) {
    Graph g = all_reduce_graph({{"ranks", std::int64_t{2}}, {"epilogue", std::string("residual")}});
    g.ranks = ranks;
    for (auto& op : g.ops())
      if (op->kind == "all_reduce") op->set_attr("ranks", std::int64_t{ranks});
    g.find_param("w")->shard = std::move(shard);
    return verify_error(g);
  };
  EXPECT_EQ(with_shard({1, 16, {{{0, 8}}, {{8, 16}}}}), "");
  EXPECT_EQ(with_shard({1, 16, {{{0, 8}}, {{8, 16}}}}, 4),
            "IR verifier: parameter @w is split 2 ways, but the graph runs on 4 ranks");
  EXPECT_EQ(with_shard({1, 16, {{{0, 8}}, {{8, 17}}}}),
            "IR verifier: parameter @w, rank 1: range 8:17 is not inside the whole parameter's 16");
  EXPECT_EQ(with_shard({0, 16, {{{0, 4}, {8, 12}}, {{4, 8}}}}),
            "IR verifier: parameter @w, rank 1: its ranges hold 4 rows, but the parameter has 8");
  EXPECT_EQ(with_shard({2, 16, {{{0, 8}}, {{8, 16}}}}),
            "IR verifier: parameter @w is split along dimension 2 of bf16[8,8]");

  Graph one_rank = small_graph();
  one_rank.find_param("norm")->shard = ParamShard{0, 16, {{{0, 8}}, {{8, 16}}}};
  EXPECT_EQ(verify_error(one_rank),
            "IR verifier: parameter @norm is split over ranks, but the graph runs on one");
}

}  // namespace
}  // namespace telos::compiler::ir
