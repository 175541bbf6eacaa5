// The lowering table: every op of the fused IR finds its rule in each shape class, an op or a
// target without one is refused naming it, and what each rule made of a bucket's ops.
#include "codegen/lowering.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <stdexcept>
#include <string>
#include <variant>
#include <vector>

#include "compiler/passes/pass_manager.hpp"
#include "support/error.hpp"
#include "test/codegen/test_models.hpp"

namespace telos::codegen {
namespace {

namespace ir = compiler::ir;

const std::string kHopper = "sm_90a";

std::string epilogue(const ir::Op& op) {
  const ir::AttrValue* v = op.attr("epilogue");
  return v ? std::get<std::string>(*v) : "";
}

// The message find_lowering_rule throws for `ops`, or "" when it finds a rule.
std::string refusal(const ir::Graph& g, const std::vector<const ir::Op*>& ops, bool layer,
                    ShapeClass shape, const std::string& target = kHopper) {
  try {
    find_lowering_rule(g, ops, layer, shape, target);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

const ir::Op& op_named(const ir::Graph& g, const std::string& result) {
  for (const auto& op : g.ops())
    if (!op->results.empty() && op->results[0]->name == result) return *op;
  throw std::runtime_error("no op defines %" + result);
}

// In small-M and prefill GEMM buckets each op finds the rule named for its kind and epilogue, for
// each target, and the rule names the GEMM family of its shape class and target.
TEST(Lowering, EveryOpFindsItsRule) {
  const std::map<std::string, std::string> rule_of = {
      {"embed", "embed"},
      {"rmsnorm", "rmsnorm"},
      {"linear/rope_kv_append", "linear.rope_kv_append"},
      {"paged_attention", "paged_attention"},
      {"linear/residual", "linear.residual"},
      {"linear/swiglu", "linear.swiglu"},
      {"lm_head_sample", "lm_head_sample"}};
  for (const char* family : {"llama", "qwen2", "qwen3"}) {
    const ir::Graph g = fused_ir(tiny(family).spec);
    for (const std::string target : {"sm_90a", "sm_100a"})
      for (ShapeClass shape : {ShapeClass::small_m, ShapeClass::prefill_gemm}) {
        std::set<std::string> kinds;
        for (const auto& op : g.ops()) {
          const std::string key = op->kind + (epilogue(*op).empty() ? "" : "/" + epilogue(*op));
          const LoweringRule& rule = find_lowering_rule(g, {op.get()}, false, shape, target);
          EXPECT_EQ(rule.name, rule_of.at(key)) << family << ": " << ir::print_op(*op);
          EXPECT_EQ(rule.target, target);
          kinds.insert(key);
          if (op->kind == "linear" && epilogue(*op) == "residual") {
            // sm_100a: gemm_small_sm100_* and the CTA-pair prefill GEMM.
            const bool small = shape == ShapeClass::small_m;
            std::string form = target != "sm_100a" ? "" : small ? "sm100_" : "sm100_pair_";
            const std::string family_gemm =
                std::string(small ? "gemm_small_" : "gemm_prefill_") + form + "residual";
            EXPECT_NE(std::string(rule.kernels).find(family_gemm), std::string::npos)
                << rule.kernels;
          }
        }
        EXPECT_EQ(kinds.size(), rule_of.size()) << family << " " << target;
      }
  }
}

// In one-token decode buckets a layer's seven ops lower together (decode_layer_persistent); the
// ops outside the layers each by their own rule; a layer's op alone has none there.
TEST(Lowering, OneTokenLayersLowerWhole) {
  const ir::Graph g = fused_ir(tiny("llama").spec);
  std::vector<const ir::Op*> layer0;
  for (const auto& op : g.ops())
    if (layer0.size() < 7 && op->kind != "embed") layer0.push_back(op.get());
  const LoweringRule& layer =
      find_lowering_rule(g, layer0, true, ShapeClass::one_token_decode, kHopper);
  EXPECT_EQ(std::string(layer.name), "layer");
  EXPECT_NE(std::string(layer.kernels).find("decode_layer_persistent"), std::string::npos);
  EXPECT_EQ(std::string(find_lowering_rule(g, {&op_named(g, "x")}, false,
                                           ShapeClass::one_token_decode, kHopper)
                            .name),
            "embed");
  EXPECT_EQ(std::string(find_lowering_rule(g, {&op_named(g, "final")}, false,
                                           ShapeClass::one_token_decode, kHopper)
                            .name),
            "rmsnorm");
  const std::string alone =
      refusal(g, {&op_named(g, "l0.attn")}, false, ShapeClass::one_token_decode);
  EXPECT_NE(alone.find("no lowering rule for %l0.attn = paged_attention(%l0.q_rope)"),
            std::string::npos)
      << alone;
  EXPECT_NE(alone.find("in one-token decode buckets"), std::string::npos) << alone;
  TestModel m = tiny("llama");
  m.serving.decode_buckets = {1};
  m.serving.prefill_buckets = {};
  ir::Graph extra = fused_ir(m.spec);
  // A layer whose ops are not decode_layer_persistent's is refused naming the op that differs.
  extra.insert_op(2, "rmsnorm", {extra.ops()[1]->results[0]}, {"layers.0.attn_norm"},
                  {{"eps", 1e-5}}, {{"l0.again", extra.ops()[1]->results[0]->type}});
  try {
    plan_kernels(extra, m.serving);
    ADD_FAILURE() << "a layer of eight ops lowered";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("decode_layer_persistent runs a layer of rmsnorm, linear "
                                         "(rope_kv_append), paged_attention"),
              std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("%l0.again = rmsnorm(%l0.attn_in"), std::string::npos)
        << e.what();
  }
}

// An FP8 model (every layer projection e4m3): its one-token bucket runs each layer on
// decode_layer_persistent_e4m3 (the table's e4m3 `layer` rule), with the bf16 layer's tiles; a
// model whose layer projections are e4m3 and bf16 both (a checkpoint's unconverted module) runs
// its one-token bucket on the small-M rules instead, the bf16 projection on the bf16 GEMM.
TEST(Lowering, Fp8OneTokenLayersTakeTheE4m3LayerOrTheSmallGemms) {
  TestModel m = tiny("llama");
  m.spec.quant.scheme = compiler::WeightQuant::Scheme::kBlock;
  m.spec.quant.method = "fp8";
  m.spec.quant.scale_suffix = "weight_scale_inv";
  m.spec.quant.block_size = 128;
  const auto one_token = [](const KernelPlan& plan) {
    std::vector<std::string> used;
    for (const BucketProgram& b : plan.buckets)
      if (b.kind == "decode" && b.size == 1)
        for (const Launch& l : b.launches) used.push_back(plan.kernels[l.kernel].instance);
    return used;
  };
  const auto count = [](const std::vector<std::string>& used, const std::string& prefix) {
    return std::count_if(used.begin(), used.end(),
                         [&](const std::string& k) { return k.starts_with(prefix); });
  };
  const std::vector<std::string> fp8 = one_token(plan_kernels(m));
  EXPECT_EQ(count(fp8, "telos_kernels::decode_layer_persistent_e4m3<128, 4, 2, 32, "), 2);
  EXPECT_EQ(count(fp8, "telos_kernels::gemm_small"), 1);  // the LM head's
  m.spec.quant.not_converted = {"model.layers.1.mlp.down_proj"};
  const std::vector<std::string> mixed = one_token(plan_kernels(m));
  EXPECT_EQ(count(mixed, "telos_kernels::decode_layer_persistent"), 0);
  EXPECT_EQ(count(mixed, "telos_kernels::gemm_small_e4m3_norm_bf16<1, "), 2);
  EXPECT_EQ(count(mixed, "telos_kernels::gemm_small_residual<1, 128, 256, "), 1);  // its down
}

// An op the table has no rule for is refused naming the op as the IR prints it and what was
// looked up: the importer's unfused ops (a plain linear, an add), and a whole plan whose IR keeps
// the LM head apart from sampling.
TEST(Lowering, AnOpWithoutARuleIsRefusedNamingIt) {
  TestModel m = tiny("llama");
  ir::Graph unfused = ir::build_model_graph(m.spec);
  const std::string q = refusal(unfused, {&op_named(unfused, "l0.q")}, false, ShapeClass::small_m);
  EXPECT_EQ(q,
            "codegen: no lowering rule for %l0.q = linear(%l0.attn_in, @layers.0.q) : bf16[T,128]: "
            "op linear, bf16, in small-M buckets");
  const std::string add =
      refusal(unfused, {&op_named(unfused, "l0.x_attn")}, false, ShapeClass::prefill_gemm);
  EXPECT_NE(add.find("no lowering rule for %l0.x_attn = add(%x, %l0.attn_out)"), std::string::npos)
      << add;
  EXPECT_NE(add.find("op add, bf16, in prefill GEMM buckets"), std::string::npos) << add;

  ir::Graph apart = ir::build_model_graph(m.spec);
  compiler::run_passes(apart,
                       compiler::select_passes("fuse-qkv,fuse-rope-kv-append,fuse-gate-up-swiglu,"
                                               "fuse-residual-epilogue"),
                       nullptr);
  try {
    plan_kernels(apart, m.serving);
    ADD_FAILURE() << "an lm_head op lowered";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no lowering rule for %logits = lm_head(%final, @embed)"),
              std::string::npos)
        << e.what();
  }
}

// A target is refused naming it where the table has no rules for it, and a rule another target
// has (sm_90a's one-token layer on e4m3 weights) is refused for sm_100a naming the target.
TEST(Lowering, ATargetWithoutRulesIsRefusedNamingIt) {
  TestModel m = tiny("llama");
  m.spec.quant.scheme = compiler::WeightQuant::Scheme::kBlock;
  m.spec.quant.method = "fp8";
  m.spec.quant.scale_suffix = "weight_scale_inv";
  m.spec.quant.block_size = 128;
  const ir::Graph g = fused_ir(m.spec);
  try {
    plan_kernels(g, m.serving, "sm_80");
    ADD_FAILURE() << "sm_80 planned";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              "codegen: target sm_80: the lowering table has no rules for it");
  }
  std::vector<const ir::Op*> layer0;
  for (const auto& op : g.ops())
    if (layer0.size() < 7 && op->kind != "embed") layer0.push_back(op.get());
  const std::string why = refusal(g, layer0, true, ShapeClass::one_token_decode, "sm_100a");
  EXPECT_NE(why.find("codegen: no lowering rule for target sm_100a for layer 0"), std::string::npos)
      << why;
  EXPECT_NE(why.find("(other targets have one)"), std::string::npos) << why;
}

// On sm_100a a one-token bucket runs each layer on decode_layer_persistent_sm100 (the table's
// sm_100a `layer` rule): 128-row tiles, gate/up's 256, no slot images; the ops outside the layers
// on their sm_100a rules (the LM head's tcgen05 GEMM); the other buckets stay small-M.
TEST(Lowering, Sm100OneTokenLayersRunTheTcgen05Layer) {
  const TestModel m = tiny("llama");
  const ir::Graph g = fused_ir(m.spec);
  const KernelPlan plan = plan_kernels(g, m.serving, "sm_100a");
  for (const BucketProgram& b : plan.buckets) {
    std::vector<std::string> used;
    for (const Launch& l : b.launches) used.push_back(plan.kernels[l.kernel].instance);
    const auto count = [&](const std::string& prefix) {
      return std::count_if(used.begin(), used.end(),
                           [&](const std::string& k) { return k.starts_with(prefix); });
    };
    SCOPED_TRACE(b.kind + ":" + std::to_string(b.size));
    const bool one = b.kind == "decode" && b.size == 1;
    EXPECT_EQ(b.shape == ShapeClass::one_token_decode, one);
    EXPECT_EQ(count("telos_kernels::decode_layer_persistent_sm100<128, 4, 2, 32, "), one ? 2 : 0);
    EXPECT_EQ(count("telos_kernels::decode_layer_persistent<"), 0);
    if (one) {
      EXPECT_EQ(count("telos_kernels::gemm_small_sm100_f32cand<1, "), 1);
      EXPECT_EQ(used.size(), 6u);  // embed, the two layers, the final norm, the LM head, sample
    }
  }
  for (const KernelInstance& k : plan.kernels)
    if (k.instance.starts_with("telos_kernels::decode_layer_persistent_sm100<")) {
      EXPECT_NE(k.instance.find(", 128, 128, 256, 128, true, 0>"), std::string::npos) << k.instance;
      EXPECT_EQ(k.block, kPersistentThreads);
    }
}

// sm_100a buckets fold what sm_90a buckets fold: the same norms (the same notes), the QKV epilogue
// in the same buckets, each folding GEMM the target's norm form (gemm_small_norm_* there,
// gemm_small_sm100_norm_* here: x and the norm's weights its first arguments; the QKV epilogue's
// gemm_small_norm_qkv and gemm_small_sm100_norm_qkv), and no rmsnorm launch into h where the GEMM
// folds it. With an e4m3 KV cache the one-token bucket takes the small-M rules on both targets, so
// its QKV GEMM folds the epilogue too; the larger buckets keep qkv_rope_append_rows.
TEST(Lowering, Sm100BucketsFoldWhereSm90BucketsFold) {
  TestModel m = tiny("llama");
  m.serving.kv_dtype = DType::E4M3;
  m.serving.kv_k_scales = m.serving.kv_v_scales = {1.f, 1.f};
  const ir::Graph g = fused_ir(m.spec);
  const KernelPlan hopper = plan_kernels(g, m.serving, "sm_90a");
  const KernelPlan blackwell = plan_kernels(g, m.serving, "sm_100a");
  ASSERT_EQ(hopper.buckets.size(), blackwell.buckets.size());
  // A bucket's notes, and per launch the folded form it is (or "" for any other kernel).
  auto folds = [](const KernelPlan& plan, const BucketProgram& b, const std::string& prefix) {
    std::vector<std::string> seen;
    for (const LoweredOps& t : b.lowered) seen.push_back(t.rule + ": " + t.note);
    for (const Launch& l : b.launches) {
      const std::string& k = plan.kernels[static_cast<std::size_t>(l.kernel)].instance;
      if (!k.starts_with(prefix)) continue;
      seen.push_back(k.substr(prefix.size(), k.find('<') - prefix.size()));
      EXPECT_EQ(l.args.at(0), "buf:x") << k;
    }
    return seen;
  };
  int qkv_folds = 0;
  for (std::size_t i = 0; i < hopper.buckets.size(); ++i) {
    const BucketProgram &h = hopper.buckets[i], &b = blackwell.buckets[i];
    SCOPED_TRACE(b.kind + ":" + std::to_string(b.size));
    const std::vector<std::string> folded =
        folds(blackwell, b, "telos_kernels::gemm_small_sm100_norm_");
    EXPECT_EQ(folds(hopper, h, "telos_kernels::gemm_small_norm_"), folded);
    qkv_folds += static_cast<int>(std::count(folded.begin(), folded.end(), "qkv"));
    const bool norm_folds = std::count(folded.begin(), folded.end(), "swiglu") > 0;
    EXPECT_EQ(norm_folds, b.tokens <= kSmallGemmNormMaxRows) << "tiny layers fold to 8 tokens";
  }
  EXPECT_EQ(qkv_folds, 2) << "decode:1's two layers";
}

// What each rule made of a bucket: in IR order, the rule, its launches, and what it folded or
// declared. decode:8 folds the norms into the QKV and gate/up GEMMs; decode:1 runs each layer as
// one launch, its table still holding the small-M kernels of its shape.
TEST(Lowering, EachBucketRecordsWhatItsRulesDid) {
  const KernelPlan plan = plan_kernels(tiny("llama"));
  auto bucket = [&](const std::string& kind, int size) -> const BucketProgram& {
    for (const BucketProgram& b : plan.buckets)
      if (b.kind == kind && b.size == size) return b;
    throw std::runtime_error("no bucket");
  };
  auto instance = [&](const BucketProgram& b, int launch) {
    return plan
        .kernels[static_cast<std::size_t>(b.launches[static_cast<std::size_t>(launch)].kernel)]
        .instance;
  };
  const BucketProgram& d8 = bucket("decode", 8);
  EXPECT_EQ(d8.shape, ShapeClass::small_m);
  std::vector<std::string> rules;
  int launches = 0;
  for (const LoweredOps& t : d8.lowered) {
    ASSERT_EQ(t.ops.size(), 1u);
    rules.push_back(t.rule);
    EXPECT_EQ(t.first_launch, launches) << t.ops[0];
    launches += t.launches;
  }
  EXPECT_EQ(launches, static_cast<int>(d8.launches.size()));
  ASSERT_EQ(rules.size(), 1u + 2 * 7 + 2);
  EXPECT_EQ(
      std::vector<std::string>(rules.begin(), rules.begin() + 8),
      (std::vector<std::string>{"embed", "rmsnorm", "linear.rope_kv_append", "paged_attention",
                                "linear.residual", "rmsnorm", "linear.swiglu", "linear.residual"}));
  const LoweredOps& norm = d8.lowered[1];
  EXPECT_EQ(norm.launches, 0);
  EXPECT_EQ(norm.note, "folded into the GEMM of %l0.q_rope");
  const LoweredOps& qkv = d8.lowered[2];
  ASSERT_EQ(qkv.launches, 2);
  EXPECT_TRUE(instance(d8, qkv.first_launch)
                  .starts_with("telos_kernels::gemm_small_norm_bf16<8, 256, 128,"));
  EXPECT_TRUE(instance(d8, qkv.first_launch + 1)
                  .starts_with("telos_kernels::qkv_rope_append_rows<4, 2, 32,"));
  EXPECT_EQ(d8.launches[static_cast<std::size_t>(qkv.first_launch)].args[1],
            "w:layers.0.attn_norm");

  const BucketProgram& d1 = bucket("decode", 1);
  EXPECT_EQ(d1.shape, ShapeClass::one_token_decode);
  ASSERT_EQ(d1.lowered.size(), 1u + 2 + 2);
  const LoweredOps& layer = d1.lowered[1];
  EXPECT_EQ(layer.rule, "layer");
  EXPECT_EQ(layer.ops.size(), 7u);
  ASSERT_EQ(layer.launches, 1);
  EXPECT_TRUE(
      instance(d1, layer.first_launch).starts_with("telos_kernels::decode_layer_persistent<"));
  ASSERT_EQ(layer.declared.size(), 5u);  // combine, split, o, gate/up, down
  EXPECT_TRUE(plan.kernels[static_cast<std::size_t>(layer.declared[2])].instance.starts_with(
      "telos_kernels::gemm_small_residual<1, 128, 128,"));
  EXPECT_NE(print_lowering(plan).find("decode:1 (one-token decode, 1 tokens, 1 sample rows)\n"
                                      "  %x = embed(%tokens, @embed) : bf16[T,128]\n"
                                      "    rule embed: embed_gather\n"
                                      "    launch 0: kernel "),
            std::string::npos);
}

}  // namespace
}  // namespace telos::codegen
