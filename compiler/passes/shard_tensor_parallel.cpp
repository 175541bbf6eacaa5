#include "compiler/passes/shard_tensor_parallel.hpp"

#include <variant>
#include <vector>

#include "compiler/passes/rewrite.hpp"
#include "support/error.hpp"
#include "support/tensor_parallel.hpp"

namespace telos::compiler {
namespace {

[[noreturn]] void refuse(const ir::Op& op, const std::string& what) {
  fail("shard-tensor-parallel: " + ir::print_op(op) + ": " + what);
}

std::string epilogue_of(const ir::Op& op) {
  const ir::AttrValue* e = op.attr("epilogue");
  return e && std::holds_alternative<std::string>(*e) ? std::get<std::string>(*e) : "";
}

// The model's heads, head dim and intermediate rows, read from its fused ops.
struct WholeShape {
  std::int64_t heads = 0, kv_heads = 0, head_dim = 0, intermediate = 0;
};

// Every op is one the pass knows how to split; the shapes are the first QKV and gate/up linear's.
WholeShape whole_shape(const ir::Graph& g) {
  WholeShape w;
  for (const auto& op : g.ops()) {
    const std::string epi = epilogue_of(*op);
    const bool known =
        op->kind == "embed" || op->kind == "rmsnorm" || op->kind == "paged_attention" ||
        op->kind == "lm_head_sample" ||
        (op->kind == "linear" && (epi == "rope_kv_append" || epi == "swiglu" || epi == "residual"));
    if (!known)
      refuse(*op,
             "not an op of the fused graph this pass splits (embed, rmsnorm, linear with a "
             "rope_kv_append, swiglu or residual epilogue, paged_attention, lm_head_sample): "
             "tensor parallelism needs the whole fusion pipeline");
    if (epi == "rope_kv_append" && w.heads == 0) {
      w.heads = op->int_attr("heads");
      w.kv_heads = op->int_attr("kv_heads");
      w.head_dim = op->int_attr("head_dim");
    }
    if (epi == "swiglu" && w.intermediate == 0)
      w.intermediate = g.find_param(op->params.at(0))->type.dims[0] / 2;
  }
  if (w.heads == 0 || w.intermediate == 0)
    fail("shard-tensor-parallel: graph @" + g.name +
         " has no QKV (rope_kv_append) or gate/up (swiglu) linear to split");
  return w;
}

class Sharder {
 public:
  Sharder(ir::Graph& g, int ranks, const WholeShape& whole)
      : g_(g),
        ranks_(ranks),
        whole_(whole),
        rank_(rank_shape(ranks, whole.heads, whole.kv_heads, whole.intermediate)) {}

  void run() {
    std::vector<ir::Op*> ops;
    for (const auto& op : g_.ops()) ops.push_back(op.get());
    for (ir::Op* op : ops) {
      const std::string epi = epilogue_of(*op);
      if (op->kind == "paged_attention") set_heads(*op);
      if (op->kind != "linear") continue;
      if (epi == "rope_kv_append") split_qkv(*op);
      if (epi == "swiglu") split_gate_up(*op);
      if (epi == "residual") split_residual(op);
    }
  }

 private:
  // Parameter `name` becomes each rank's part: the ranges `part(r)` along `dim` of the whole, an
  // e4m3 one with scale blocks that split with it (ir::shard_scale).
  template <typename Part>
  void split_param(const ir::Op& op, const std::string& name, int dim, Part part) {
    ir::Param* p = g_.find_param(name);
    if (p->shard) refuse(op, "@" + name + " is read by another op the pass already split");
    ir::ParamShard shard{dim, p->type.dims[static_cast<std::size_t>(dim)], {}};
    for (int r = 0; r < ranks_; ++r) shard.ranks.push_back(part(r));
    if (p->scale) p->scale = ir::shard_scale(*p, shard);
    std::int64_t extent = 0;
    for (const auto& [begin, end] : shard.ranks[0]) extent += end - begin;
    p->type.dims[static_cast<std::size_t>(dim)] = extent;
    p->shard = std::move(shard);
  }

  void set_heads(ir::Op& op) {
    op.set_attr("heads", rank_.heads);
    op.set_attr("kv_heads", rank_.kv_heads);
    op.results[0]->type.dims[1] = rank_.heads * whole_.head_dim;
  }

  // The QKV linear: its params are qkv, then the bias where there are 2 or 4 (verifier.hpp); the
  // QK norms (3 or 4) are per head dimension, the same on every rank.
  void split_qkv(ir::Op& op) {
    const auto rows = [&](int r) { return rank_.qkv_rows(r, whole_.head_dim); };
    split_param(op, op.params[0], 0, rows);
    if (op.params.size() == 2 || op.params.size() == 4) split_param(op, op.params[1], 0, rows);
    set_heads(op);
  }

  void split_gate_up(ir::Op& op) {
    split_param(op, op.params[0], 0, [&](int r) { return rank_.gate_up_rows(r); });
    op.results[0]->type.dims[1] = rank_.intermediate;
  }

  // residual + x · wᵀ becomes the rank's partial x · w_rᵀ (the columns of w its x covers), then
  // all_reduce(partial, residual).
  void split_residual(ir::Op* op) {
    const std::string w = op->params[0];
    const std::int64_t k = g_.find_param(w)->type.dims[1];
    split_param(*op, w, 1, [&](int r) { return rank_.input_columns(r, k); });
    ir::Value* out = op->results[0];
    const std::string name = out->name;
    const std::size_t at = g_.index_of(op);
    ir::Value* partial =
        g_.insert_op(at, "linear", {op->operands[0]}, {w}, {{"epilogue", std::string("partial")}},
                     {{name + ".partial", {DType::F32, out->type.dims}}})
            ->results[0];
    ir::Value* sum =
        g_.insert_op(at + 1, "all_reduce", {partial, op->operands[1]}, {},
                     {{"ranks", std::int64_t{ranks_}}, {"epilogue", std::string("residual")}},
                     {{name, out->type}})
            ->results[0];
    g_.replace_uses(out, sum);
    g_.erase_ops({op});
    take_name(sum, name);
  }

  ir::Graph& g_;
  int ranks_;
  WholeShape whole_;
  RankShape rank_;
};

}  // namespace

void shard_tensor_parallel(ir::Graph& g, int ranks) {
  const WholeShape whole = whole_shape(g);
  if (const std::string why =
          tensor_parallel_refusal(ranks, whole.heads, whole.kv_heads, whole.intermediate);
      !why.empty() || ranks < 2)
    fail("shard-tensor-parallel: " + (why.empty() ? "one rank has nothing to split" : why));
  g.ranks = ranks;
  Sharder(g, ranks, whole).run();
}

}  // namespace telos::compiler
