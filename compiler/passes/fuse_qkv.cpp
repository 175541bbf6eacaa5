#include <algorithm>
#include <vector>

#include "compiler/passes/fusion_passes.hpp"
#include "compiler/passes/rewrite.hpp"
#include "support/error.hpp"

namespace telos::compiler {
namespace {

// Follows a q or k operand of attention back through rope and head_rmsnorm to its linear.
ir::Op* projection_of(const ir::Value* v) {
  if (ir::Op* rope = defined_by(v, "rope")) v = rope->operands[0];
  if (ir::Op* norm = defined_by(v, "head_rmsnorm")) v = norm->operands[0];
  return defined_by(v, "linear");
}

}  // namespace

void fuse_qkv(ir::Graph& g) {
  std::vector<ir::Op*> attentions;
  for (const auto& op : g.ops())
    if (op->kind == "attention") attentions.push_back(op.get());

  for (ir::Op* attn : attentions) {
    ir::Op* q = projection_of(attn->operands[0]);
    ir::Op* k = projection_of(attn->operands[1]);
    ir::Op* v = defined_by(attn->operands[2], "linear");
    if (!q || !k || !v) continue;
    ir::Value* input = q->operands[0];
    if (k->operands[0] != input || v->operands[0] != input) continue;
    const bool bias = q->params.size() == 2;
    if (k->params.size() != q->params.size() || v->params.size() != q->params.size()) continue;
    if (!single_use(g, q->results[0]) || !single_use(g, k->results[0]) ||
        !single_use(g, v->results[0]))
      continue;

    const std::string prefix = param_prefix(q->params[0]);
    const std::vector<std::string> replaced = {q->params[0], k->params[0], v->params[0]};
    // The writer orders the QKV rows within each head (RoPE's pairs): scale blocks hold whole
    // heads.
    g.insert_param(ir::concat_params(g, replaced, prefix + "qkv", attn->int_attr("head_dim")),
                   q->params[0]);
    std::vector<std::string> fused_params = {prefix + "qkv"};
    if (bias) {
      g.insert_param(
          ir::concat_params(g, {q->params[1], k->params[1], v->params[1]}, prefix + "qkv_bias", 1),
          q->params[1]);
      fused_params.push_back(prefix + "qkv_bias");
    }

    // The fused GEMM goes where the first projection was; the slices follow it.
    std::size_t at = std::min({g.index_of(q), g.index_of(k), g.index_of(v)});
    const std::string q_name = q->results[0]->name, k_name = k->results[0]->name,
                      v_name = v->results[0]->name;
    const ir::Dim rows = input->type.dims[0];
    const std::int64_t nq = q->results[0]->type.dims[1], nk = k->results[0]->type.dims[1],
                       nv = v->results[0]->type.dims[1];
    std::string layer = q_name.substr(0, q_name.rfind('.') + 1);
    ir::Value* qkv = g.insert_op(at++, "linear", {input}, fused_params, {},
                                 {{layer + "qkv", {DType::BF16, {rows, nq + nk + nv}}}})
                         ->results[0];
    auto slice = [&](std::int64_t begin, std::int64_t end, const std::string& name) {
      return g
          .insert_op(at++, "slice", {qkv}, {}, {{"begin", begin}, {"end", end}},
                     {{name, {DType::BF16, {rows, end - begin}}}})
          ->results[0];
    };
    ir::Value* qs = slice(0, nq, q_name);
    ir::Value* ks = slice(nq, nq + nk, k_name);
    ir::Value* vs = slice(nq + nk, nq + nk + nv, v_name);
    g.replace_uses(q->results[0], qs);
    g.replace_uses(k->results[0], ks);
    g.replace_uses(v->results[0], vs);
    g.erase_ops({q, k, v});
    take_name(qs, q_name);
    take_name(ks, k_name);
    take_name(vs, v_name);
    g.drop_unused_params();
  }
}

}  // namespace telos::compiler
