#include <vector>

#include "compiler/passes/fusion_passes.hpp"
#include "compiler/passes/rewrite.hpp"

namespace telos::compiler {
namespace {

struct RopeChain {
  ir::Op* rope = nullptr;
  ir::Op* norm = nullptr;  // head_rmsnorm (Qwen3) or null
  ir::Op* slice = nullptr;
};

// attention operand <- rope <- [head_rmsnorm] <- slice, every link used once.
bool match_chain(const ir::Graph& g, const ir::Value* v, RopeChain* c) {
  c->rope = defined_by(v, "rope");
  if (!c->rope || !single_use(g, v)) return false;
  v = c->rope->operands[0];
  c->norm = defined_by(v, "head_rmsnorm");
  if (c->norm) {
    if (!single_use(g, v)) return false;
    v = c->norm->operands[0];
  }
  c->slice = defined_by(v, "slice");
  return c->slice && single_use(g, v);
}

}  // namespace

void fuse_rope_kv_append(ir::Graph& g) {
  std::vector<ir::Op*> attentions;
  for (const auto& op : g.ops())
    if (op->kind == "attention") attentions.push_back(op.get());

  for (ir::Op* attn : attentions) {
    RopeChain q, k;
    if (!match_chain(g, attn->operands[0], &q) || !match_chain(g, attn->operands[1], &k)) continue;
    ir::Op* v_slice = defined_by(attn->operands[2], "slice");
    if (!v_slice || !single_use(g, attn->operands[2])) continue;
    ir::Value* qkv = q.slice->operands[0];
    ir::Op* gemm = defined_by(qkv, "linear");
    if (!gemm || k.slice->operands[0] != qkv || v_slice->operands[0] != qkv) continue;
    if (g.users(qkv).size() != 3 || (q.norm == nullptr) != (k.norm == nullptr)) continue;
    const std::int64_t heads = attn->int_attr("heads"), kv_heads = attn->int_attr("kv_heads"),
                       d = attn->int_attr("head_dim");
    // The epilogue splits columns as [q heads | k heads | v heads]; anything else is not ours.
    if (q.slice->int_attr("begin") != 0 || k.slice->int_attr("begin") != heads * d ||
        v_slice->int_attr("begin") != (heads + kv_heads) * d)
      continue;

    std::vector<ir::Attr> attrs = {{"epilogue", std::string("rope_kv_append")},
                                   {"layer", attn->int_attr("layer")},
                                   {"heads", heads},
                                   {"kv_heads", kv_heads},
                                   {"head_dim", d}};
    for (const ir::Attr& a : q.rope->attrs)
      if (a.name != "heads" && a.name != "head_dim") attrs.push_back(a);
    std::vector<std::string> params = gemm->params;
    if (q.norm) {
      attrs.push_back({"eps", *q.norm->attr("eps")});
      params.push_back(q.norm->params[0]);
      params.push_back(k.norm->params[0]);
    }

    const std::size_t at = g.index_of(attn);
    const std::string q_name = q.rope->results[0]->name, attn_name = attn->results[0]->name;
    ir::Value* q_out = g.insert_op(at, "linear", {gemm->operands[0], q.rope->operands[1]}, params,
                                   attrs, {{q_name, q.rope->results[0]->type}})
                           ->results[0];
    ir::Value* out = g.insert_op(at + 1, "paged_attention", {q_out}, {},
                                 {{"layer", attn->int_attr("layer")},
                                  {"heads", heads},
                                  {"kv_heads", kv_heads},
                                  {"head_dim", d}},
                                 {{attn_name, attn->results[0]->type}})
                         ->results[0];
    g.replace_uses(attn->results[0], out);
    std::vector<ir::Op*> dead = {attn, q.rope, k.rope, q.slice, k.slice, v_slice, gemm};
    if (q.norm) dead.insert(dead.end(), {q.norm, k.norm});
    g.erase_ops(dead);
    take_name(q_out, q_name);
    take_name(out, attn_name);
  }
}

}  // namespace telos::compiler
