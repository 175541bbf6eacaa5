#include "compiler/ir/model_graph.hpp"

#include <string>

namespace telos::compiler::ir {
namespace {

TensorType matrix(std::int64_t rows, std::int64_t cols) {
  return {DType::BF16, {rows, cols}};
}
TensorType vector(std::int64_t n) {
  return {DType::F32, {n}};
}
TensorType act(std::int64_t cols) {
  return {DType::BF16, {kTokens, cols}};
}

std::vector<Attr> rope_attrs(const ModelSpec& spec, std::int64_t heads) {
  std::vector<Attr> a = {{"heads", heads},
                         {"head_dim", spec.head_dim},
                         {"theta", spec.rope.theta},
                         {"scaling", spec.rope.type}};
  if (spec.rope.type == "llama3") {
    a.push_back({"factor", spec.rope.factor});
    a.push_back({"low_freq_factor", spec.rope.low_freq_factor});
    a.push_back({"high_freq_factor", spec.rope.high_freq_factor});
    a.push_back({"original_max_position_embeddings", spec.rope.original_max_position_embeddings});
  }
  return a;
}

}  // namespace

Graph build_model_graph(const ModelSpec& spec) {
  Graph g;
  g.name = spec.name;
  const std::int64_t H = spec.hidden_size, I = spec.intermediate_size, V = spec.vocab_size;
  const std::int64_t D = spec.head_dim, Hq = spec.num_heads, Hkv = spec.num_kv_heads;

  // A linear layer's weight: the checkpoint module's, bf16, or e4m3 with its scales.
  auto weight = [&](const std::string& name, const std::string& module, std::int64_t rows,
                    std::int64_t cols) {
    Param p{name, matrix(rows, cols), {module + ".weight"}};
    const WeightQuant& q = spec.quant;
    if (q.quantizes(module)) {
      p.type.dtype = DType::E4M3;
      const std::int64_t br = q.block_rows(), bc = q.block_cols(cols);
      p.scale = ParamScale{br, bc, {q.scale_name(module)}, br, bc};
    }
    g.add_param(std::move(p));
  };

  g.add_param({"embed", matrix(V, H), {"model.embed_tokens.weight"}});
  Value* tokens = g.add_input("tokens", {DType::I32, {kTokens}});
  Value* positions = g.add_input("positions", {DType::I32, {kTokens}});
  Value* x = g.append_op("embed", {tokens}, {"embed"}, {}, {{"x", act(H)}})->results[0];

  auto linear = [&](const std::string& name, Value* in, const std::string& param, std::int64_t out,
                    bool bias) {
    std::vector<std::string> params = {param};
    if (bias) params.push_back(param + "_bias");
    return g.append_op("linear", {in}, params, {}, {{name, act(out)}})->results[0];
  };

  for (std::int64_t l = 0; l < spec.num_layers; ++l) {
    const std::string p = "layers." + std::to_string(l) + ".";
    const std::string ck = "model.layers." + std::to_string(l) + ".";
    const std::string v = "l" + std::to_string(l) + ".";

    g.add_param({p + "attn_norm", vector(H), {ck + "input_layernorm.weight"}});
    for (const char* proj : {"q", "k", "v"}) {
      const std::int64_t rows = (proj[0] == 'q' ? Hq : Hkv) * D;
      weight(p + proj, ck + "self_attn." + proj + "_proj", rows, H);
      if (spec.qkv_bias)
        g.add_param({p + proj + "_bias", vector(rows), {ck + "self_attn." + proj + "_proj.bias"}});
    }
    if (spec.qk_norm) {
      g.add_param({p + "q_norm", vector(D), {ck + "self_attn.q_norm.weight"}});
      g.add_param({p + "k_norm", vector(D), {ck + "self_attn.k_norm.weight"}});
    }
    weight(p + "o", ck + "self_attn.o_proj", H, Hq * D);
    g.add_param({p + "mlp_norm", vector(H), {ck + "post_attention_layernorm.weight"}});
    weight(p + "gate", ck + "mlp.gate_proj", I, H);
    weight(p + "up", ck + "mlp.up_proj", I, H);
    weight(p + "down", ck + "mlp.down_proj", H, I);

    Value* h = g.append_op("rmsnorm", {x}, {p + "attn_norm"}, {{"eps", spec.rms_norm_eps}},
                           {{v + "attn_in", act(H)}})
                   ->results[0];
    Value* q = linear(v + "q", h, p + "q", Hq * D, spec.qkv_bias);
    Value* k = linear(v + "k", h, p + "k", Hkv * D, spec.qkv_bias);
    Value* val = linear(v + "v", h, p + "v", Hkv * D, spec.qkv_bias);
    if (spec.qk_norm) {
      q = g.append_op("head_rmsnorm", {q}, {p + "q_norm"},
                      {{"heads", Hq}, {"head_dim", D}, {"eps", spec.rms_norm_eps}},
                      {{v + "q_normed", act(Hq * D)}})
              ->results[0];
      k = g.append_op("head_rmsnorm", {k}, {p + "k_norm"},
                      {{"heads", Hkv}, {"head_dim", D}, {"eps", spec.rms_norm_eps}},
                      {{v + "k_normed", act(Hkv * D)}})
              ->results[0];
    }
    q = g.append_op("rope", {q, positions}, {}, rope_attrs(spec, Hq), {{v + "q_rope", act(Hq * D)}})
            ->results[0];
    k = g.append_op("rope", {k, positions}, {}, rope_attrs(spec, Hkv),
                    {{v + "k_rope", act(Hkv * D)}})
            ->results[0];
    Value* attn = g.append_op("attention", {q, k, val}, {},
                              {{"layer", l}, {"heads", Hq}, {"kv_heads", Hkv}, {"head_dim", D}},
                              {{v + "attn", act(Hq * D)}})
                      ->results[0];
    Value* o = linear(v + "attn_out", attn, p + "o", H, false);
    x = g.append_op("add", {x, o}, {}, {}, {{v + "x_attn", act(H)}})->results[0];

    h = g.append_op("rmsnorm", {x}, {p + "mlp_norm"}, {{"eps", spec.rms_norm_eps}},
                    {{v + "mlp_in", act(H)}})
            ->results[0];
    Value* gate = linear(v + "gate", h, p + "gate", I, false);
    Value* up = linear(v + "up", h, p + "up", I, false);
    Value* act_out = g.append_op("swiglu", {gate, up}, {}, {}, {{v + "act", act(I)}})->results[0];
    Value* down = linear(v + "mlp_out", act_out, p + "down", H, false);
    x = g.append_op("add", {x, down}, {}, {}, {{v + "x", act(H)}})->results[0];
  }

  g.add_param({"final_norm", vector(H), {"model.norm.weight"}});
  Value* h =
      g.append_op("rmsnorm", {x}, {"final_norm"}, {{"eps", spec.rms_norm_eps}}, {{"final", act(H)}})
          ->results[0];
  std::string head = "embed";
  if (!spec.tie_word_embeddings) {
    head = "lm_head";
    weight("lm_head", "lm_head", V, H);
  }
  Value* logits =
      g.append_op("lm_head", {h}, {head}, {}, {{"logits", {DType::F32, {kSequences, V}}}})
          ->results[0];
  Value* next =
      g.append_op("sample", {logits}, {}, {}, {{"next_tokens", {DType::I32, {kSequences}}}})
          ->results[0];
  g.set_outputs({next});
  return g;
}

}  // namespace telos::compiler::ir
