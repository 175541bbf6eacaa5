#include "compiler/artifact/weight_table.hpp"

#include <string>

#include "support/error.hpp"

namespace telos::compiler {

std::vector<ir::Param> weight_table(const ModelSpec& s) {
  const auto mat = [](std::int64_t r, std::int64_t c) {
    return ir::TensorType{DType::BF16, {r, c}};
  };
  const auto vec = [](std::int64_t n) { return ir::TensorType{DType::F32, {n}}; };
  const std::int64_t H = s.hidden_size, I = s.intermediate_size, D = s.head_dim;
  const std::int64_t qkv_rows = (s.num_heads + 2 * s.num_kv_heads) * D;

  std::vector<ir::Param> t;
  t.push_back({"embed", mat(s.vocab_size, H), {"model.embed_tokens.weight"}});
  for (std::int64_t l = 0; l < s.num_layers; ++l) {
    const std::string p = "layers." + std::to_string(l) + ".";
    const std::string a = "model.layers." + std::to_string(l) + ".self_attn.";
    const std::string m = "model.layers." + std::to_string(l) + ".";
    t.push_back({p + "attn_norm", vec(H), {m + "input_layernorm.weight"}});
    t.push_back({p + "qkv",
                 mat(qkv_rows, H),
                 {a + "q_proj.weight", a + "k_proj.weight", a + "v_proj.weight"}});
    if (s.qkv_bias)
      t.push_back({p + "qkv_bias",
                   vec(qkv_rows),
                   {a + "q_proj.bias", a + "k_proj.bias", a + "v_proj.bias"}});
    if (s.qk_norm) {
      t.push_back({p + "q_norm", vec(D), {a + "q_norm.weight"}});
      t.push_back({p + "k_norm", vec(D), {a + "k_norm.weight"}});
    }
    t.push_back({p + "o", mat(H, s.num_heads * D), {a + "o_proj.weight"}});
    t.push_back({p + "mlp_norm", vec(H), {m + "post_attention_layernorm.weight"}});
    t.push_back(
        {p + "gate_up", mat(2 * I, H), {m + "mlp.gate_proj.weight", m + "mlp.up_proj.weight"}});
    t.push_back({p + "down", mat(H, I), {m + "mlp.down_proj.weight"}});
  }
  t.push_back({"final_norm", vec(H), {"model.norm.weight"}});
  if (!s.tie_word_embeddings) t.push_back({"lm_head", mat(s.vocab_size, H), {"lm_head.weight"}});
  return t;
}

void check_weight_table(const ir::Graph& graph, const ModelSpec& spec) {
  const std::vector<ir::Param> want = weight_table(spec);
  const std::vector<ir::Param>& have = graph.params();
  for (std::size_t i = 0; i < std::max(want.size(), have.size()); ++i) {
    if (i >= have.size())
      fail("IR: parameter @" + want[i].name + " of the weight table is missing");
    if (i >= want.size()) fail("IR: parameter @" + have[i].name + " is not in the weight table");
    const ir::Param& w = want[i];
    const ir::Param& h = have[i];
    if (h.name != w.name)
      fail("IR: parameter " + std::to_string(i) + " is @" + h.name + ", the weight table has @" +
           w.name + " there");
    if (h.type != w.type)
      fail("IR: parameter @" + h.name + " has type " + h.type.str() + ", the weight table says " +
           w.type.str());
    if (h.sources != w.sources)
      fail("IR: parameter @" + h.name + " has other sources than the weight table");
  }
}

}  // namespace telos::compiler
