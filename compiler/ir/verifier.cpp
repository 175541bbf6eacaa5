#include "compiler/ir/verifier.hpp"

#include <set>

#include "support/error.hpp"

namespace telos::compiler::ir {
namespace {

class OpChecker {
 public:
  OpChecker(const Graph& graph, const Op& op, std::size_t index, const OpRules& extra_rules)
      : graph_(graph), op_(op), index_(index), extra_rules_(extra_rules) {}

  [[noreturn]] void error(const std::string& message) const {
    std::string head = "op " + std::to_string(index_) + " (";
    if (!op_.results.empty()) head += "%" + op_.results[0]->name + " = ";
    fail("IR verifier: " + head + op_.kind + "): " + message);
  }

  void counts(std::size_t operands, std::size_t params_min, std::size_t params_max,
              std::size_t results) const {
    if (op_.operands.size() != operands)
      error("expected " + std::to_string(operands) + " operands, got " +
            std::to_string(op_.operands.size()));
    if (op_.params.size() < params_min || op_.params.size() > params_max)
      error("expected " + std::to_string(params_min) +
            (params_max != params_min ? " to " + std::to_string(params_max) : "") +
            " parameters, got " + std::to_string(op_.params.size()));
    if (op_.results.size() != results)
      error("expected " + std::to_string(results) + " results, got " +
            std::to_string(op_.results.size()));
  }

  const TensorType& operand(std::size_t i) const { return op_.operands[i]->type; }

  const TensorType& param(std::size_t i) const {
    const Param* p = graph_.find_param(op_.params[i]);
    if (!p) error("unknown parameter @" + op_.params[i]);
    return p->type;
  }

  void expect(const TensorType& actual, const TensorType& expected, const std::string& what) const {
    if (actual != expected)
      error(what + " has type " + actual.str() + ", expected " + expected.str());
  }

  void expect_operand(std::size_t i, const TensorType& expected) const {
    expect(operand(i), expected, "operand " + std::to_string(i) + " %" + op_.operands[i]->name);
  }
  void expect_param(std::size_t i, const TensorType& expected) const {
    expect(param(i), expected, "parameter @" + op_.params[i]);
  }
  void expect_result(std::size_t i, const TensorType& expected) const {
    expect(op_.results[i]->type, expected, "result %" + op_.results[i]->name);
  }

  // A 2-D activation [rows, cols] (rows symbolic or constant).
  void expect_matrix_operand(std::size_t i, DType dtype) const {
    if (operand(i).dtype != dtype || operand(i).dims.size() != 2)
      error("operand " + std::to_string(i) + " %" + op_.operands[i]->name + " has type " +
            operand(i).str() + ", expected " + std::string(dtype_name(dtype)) + "[rows,cols]");
  }
  void expect_weight_matrix(std::size_t i) const {
    const TensorType& t = param(i);
    if ((t.dtype != DType::BF16 && t.dtype != DType::E4M3) || t.dims.size() != 2 ||
        t.dims[0] <= 0 || t.dims[1] <= 0)
      error("parameter @" + op_.params[i] + " has type " + t.str() +
            ", expected bf16[out,in] or e4m3[out,in]");
  }

  std::int64_t positive_attr(const std::string& name) const {
    const AttrValue* v = op_.attr(name);
    if (!v || !std::holds_alternative<std::int64_t>(*v) || std::get<std::int64_t>(*v) <= 0)
      error("expected a positive integer attribute " + name);
    return std::get<std::int64_t>(*v);
  }
  std::int64_t nonnegative_attr(const std::string& name) const {
    const AttrValue* v = op_.attr(name);
    if (!v || !std::holds_alternative<std::int64_t>(*v) || std::get<std::int64_t>(*v) < 0)
      error("expected a non-negative integer attribute " + name);
    return std::get<std::int64_t>(*v);
  }
  void float_attr(const std::string& name) const {
    const AttrValue* v = op_.attr(name);
    if (!v || !std::holds_alternative<double>(*v)) error("expected a float attribute " + name);
  }
  void rope_attrs() const {
    float_attr("theta");
    const AttrValue* s = op_.attr("scaling");
    if (!s || !std::holds_alternative<std::string>(*s))
      error("expected a string attribute scaling");
    const std::string& scaling = std::get<std::string>(*s);
    if (scaling == "llama3") {
      float_attr("factor");
      float_attr("low_freq_factor");
      float_attr("high_freq_factor");
      positive_attr("original_max_position_embeddings");
    } else if (scaling != "default") {
      error("unknown rope scaling \"" + scaling + "\"");
    }
  }

  TensorType act(Dim rows, Dim cols) const { return {DType::BF16, {rows, cols}}; }
  TensorType vec(Dim n) const { return {DType::F32, {n}}; }
  TensorType positions() const { return {DType::I32, {kTokens}}; }

  void check() const;

 private:
  void check_linear() const;
  void check_activations(const std::string& epilogue) const;
  void check_all_reduce() const;
  void check_heads(std::size_t operand_index, const std::string& heads_attr) const;

  const Graph& graph_;
  const Op& op_;
  std::size_t index_;
  const OpRules& extra_rules_;
};

void OpChecker::check_heads(std::size_t i, const std::string& heads_attr) const {
  expect_matrix_operand(i, DType::BF16);
  const std::int64_t cols = positive_attr(heads_attr) * positive_attr("head_dim");
  if (operand(i).dims[1] != cols)
    error("operand " + std::to_string(i) + " %" + op_.operands[i]->name + " has " +
          std::to_string(operand(i).dims[1]) + " columns, expected " + heads_attr +
          " * head_dim = " + std::to_string(cols));
}

// A GEMM's `activations` where given: "e4m3" (W8A8), on a weight the W8A8 kernels take.
void OpChecker::check_activations(const std::string& epilogue) const {
  const AttrValue* a = op_.attr("activations");
  if (!a) return;
  if (!std::holds_alternative<std::string>(*a) || std::get<std::string>(*a) != "e4m3")
    error("activations must be \"e4m3\" (W8A8) where given");
  const std::string why = w8a8_refusal(*graph_.find_param(op_.params[0]), epilogue);
  if (!why.empty()) error("activations = \"e4m3\" needs a W8A8 weight: " + why);
}

void OpChecker::check_linear() const {
  const AttrValue* e = op_.attr("epilogue");
  const std::string epilogue =
      e && std::holds_alternative<std::string>(*e) ? std::get<std::string>(*e) : (e ? "?" : "none");
  if (epilogue == "none") {
    counts(1, 1, 2, 1);
  } else if (epilogue == "residual") {
    counts(2, 1, 1, 1);
  } else if (epilogue == "swiglu" || epilogue == "partial") {
    counts(1, 1, 1, 1);
  } else if (epilogue == "rope_kv_append") {
    counts(2, 1, 4, 1);
  } else {
    error("unknown epilogue (expected residual, swiglu, rope_kv_append or partial)");
  }
  expect_matrix_operand(0, DType::BF16);
  expect_weight_matrix(0);
  check_activations(epilogue);
  const Dim rows = operand(0).dims[0];
  const std::int64_t out = param(0).dims[0];
  if (operand(0).dims[1] != param(0).dims[1])
    error("operand 0 %" + op_.operands[0]->name + " has " + std::to_string(operand(0).dims[1]) +
          " columns but @" + op_.params[0] + " expects " + std::to_string(param(0).dims[1]));

  if (epilogue == "none") {
    if (op_.params.size() == 2) expect_param(1, vec(out));
    expect_result(0, act(rows, out));
  } else if (epilogue == "residual") {
    expect_operand(1, act(rows, out));
    expect_result(0, act(rows, out));
  } else if (epilogue == "swiglu") {
    if (out % 2 != 0) error("@" + op_.params[0] + " must have an even number of rows (gate, up)");
    expect_result(0, act(rows, out / 2));
  } else if (epilogue == "partial") {
    expect_result(0, {DType::F32, {rows, out}});
  } else {
    expect_operand(1, positions());
    nonnegative_attr("layer");
    const std::int64_t heads = positive_attr("heads");
    const std::int64_t kv_heads = positive_attr("kv_heads");
    const std::int64_t d = positive_attr("head_dim");
    rope_attrs();
    if (out != (heads + 2 * kv_heads) * d)
      error("@" + op_.params[0] + " has " + std::to_string(out) +
            " rows, expected (heads + 2 kv_heads) * head_dim = " +
            std::to_string((heads + 2 * kv_heads) * d));
    // Params: qkv, then the bias when there are 2 or 4, then q_norm and k_norm when 3 or 4.
    const std::size_t n = op_.params.size();
    if (n == 2 || n == 4) expect_param(1, vec(out));
    if (n >= 3) {
      float_attr("eps");
      expect_param(n - 2, vec(d));
      expect_param(n - 1, vec(d));
    }
    expect_result(0, act(rows, heads * d));
  }
}

// all_reduce(%partial, %residual) {ranks, epilogue = "residual"}: the residual plus the sum of
// every rank's partial.
void OpChecker::check_all_reduce() const {
  counts(2, 0, 0, 1);
  if (graph_.ranks < 2)
    error("an all_reduce in a graph of one rank (ranks is set by the shard pass)");
  if (positive_attr("ranks") != graph_.ranks)
    error("ranks is " + std::to_string(positive_attr("ranks")) + ", but the graph runs on " +
          std::to_string(graph_.ranks) + " ranks");
  const AttrValue* e = op_.attr("epilogue");
  if (!e || *e != AttrValue(std::string("residual")))
    error("expected epilogue = \"residual\" (the residual added once, after the sum)");
  expect_matrix_operand(1, DType::BF16);
  const TensorType& partial = operand(0);
  if ((partial.dtype != DType::F32 && partial.dtype != DType::BF16) ||
      partial.dims != operand(1).dims)
    error("operand 0 %" + op_.operands[0]->name + " has type " + partial.str() +
          ", expected f32 or bf16 of the residual's shape " + operand(1).str());
  expect_result(0, operand(1));
}

void OpChecker::check() const {
  const std::string& k = op_.kind;
  if (k == "embed") {
    counts(1, 1, 1, 1);
    expect_operand(0, positions());
    expect_weight_matrix(0);
    expect_result(0, act(kTokens, param(0).dims[1]));
  } else if (k == "rmsnorm" || k == "add_rmsnorm") {
    const bool add = k == "add_rmsnorm";
    counts(add ? 2 : 1, 1, 1, add ? 2 : 1);
    expect_matrix_operand(0, DType::BF16);
    const TensorType t = operand(0);
    if (add) expect_operand(1, t);
    expect_param(0, vec(t.dims[1]));
    float_attr("eps");
    for (std::size_t i = 0; i < op_.results.size(); ++i) expect_result(i, t);
  } else if (k == "linear") {
    check_linear();
  } else if (k == "slice") {
    counts(1, 0, 0, 1);
    expect_matrix_operand(0, DType::BF16);
    const std::int64_t begin = nonnegative_attr("begin");
    const std::int64_t end = positive_attr("end");
    if (begin >= end || end > operand(0).dims[1])
      error("slice [" + std::to_string(begin) + ", " + std::to_string(end) + ") is outside " +
            operand(0).str());
    expect_result(0, act(operand(0).dims[0], end - begin));
  } else if (k == "head_rmsnorm") {
    counts(1, 1, 1, 1);
    check_heads(0, "heads");
    float_attr("eps");
    expect_param(0, vec(positive_attr("head_dim")));
    expect_result(0, operand(0));
  } else if (k == "rope") {
    counts(2, 0, 0, 1);
    check_heads(0, "heads");
    expect_operand(1, positions());
    rope_attrs();
    expect_result(0, operand(0));
  } else if (k == "attention" || k == "paged_attention") {
    const bool paged = k == "paged_attention";
    counts(paged ? 1 : 3, 0, 0, 1);
    nonnegative_attr("layer");
    if (positive_attr("heads") % positive_attr("kv_heads") != 0)
      error("heads must be a multiple of kv_heads");
    check_heads(0, "heads");
    if (!paged) {
      check_heads(1, "kv_heads");
      check_heads(2, "kv_heads");
    }
    const Dim rows = operand(0).dims[0];
    for (std::size_t i = 1; i < op_.operands.size(); ++i)
      if (operand(i).dims[0] != rows) error("q, k and v must have the same rows");
    expect_result(0, operand(0));
  } else if (k == "swiglu" || k == "add") {
    counts(2, 0, 0, 1);
    expect_matrix_operand(0, DType::BF16);
    expect_operand(1, operand(0));
    expect_result(0, operand(0));
  } else if (k == "lm_head" || k == "lm_head_sample") {
    counts(1, 1, 1, 1);
    expect_matrix_operand(0, DType::BF16);
    expect_weight_matrix(0);
    check_activations("");
    if (operand(0).dims[1] != param(0).dims[1])
      error("operand 0 %" + op_.operands[0]->name + " has " + std::to_string(operand(0).dims[1]) +
            " columns but @" + op_.params[0] + " expects " + std::to_string(param(0).dims[1]));
    if (k == "lm_head")
      expect_result(0, {DType::F32, {kSequences, param(0).dims[0]}});
    else
      expect_result(0, {DType::I32, {kSequences}});
  } else if (k == "all_reduce") {
    check_all_reduce();
  } else if (k == "sample") {
    counts(1, 0, 0, 1);
    if (operand(0).dtype != DType::F32 || operand(0).dims.size() != 2 ||
        operand(0).dims[0] != kSequences)
      error("operand 0 %" + op_.operands[0]->name + " has type " + operand(0).str() +
            ", expected f32[S,V]");
    expect_result(0, {DType::I32, {kSequences}});
  } else if (const auto rule = extra_rules_.find(k); rule != extra_rules_.end()) {
    rule->second(graph_, op_);
  } else {
    error("unknown op");
  }
}

// The parameters are what the artifact writer packs, in order (docs/artifact.md, "weights"):
// each a bf16 matrix or an f32 vector of constant dimensions, the only forms it writes, built
// from at least one checkpoint tensor, and read by some op (an unread one would be packed for
// nothing).
// A split parameter's shard: one part per rank of the graph, each made of ranges inside the whole
// parameter that add up to the parameter's extent along the split dimension.
void check_shard(const Graph& graph, const Param& p, const std::string& head) {
  const ParamShard& s = *p.shard;
  if (graph.ranks < 2) fail(head + " is split over ranks, but the graph runs on one");
  if (s.ranks.size() != static_cast<std::size_t>(graph.ranks))
    fail(head + " is split " + std::to_string(s.ranks.size()) + " ways, but the graph runs on " +
         std::to_string(graph.ranks) + " ranks");
  if (s.dim < 0 || s.dim >= static_cast<int>(p.type.dims.size()))
    fail(head + " is split along dimension " + std::to_string(s.dim) + " of " + p.type.str());
  for (std::size_t r = 0; r < s.ranks.size(); ++r) {
    const std::string part = head + ", rank " + std::to_string(r) + ": ";
    std::int64_t extent = 0;
    for (const auto& [begin, end] : s.ranks[r]) {
      if (begin < 0 || begin >= end || end > s.whole)
        fail(part + "range " + std::to_string(begin) + ":" + std::to_string(end) +
             " is not inside the whole parameter's " + std::to_string(s.whole));
      extent += end - begin;
    }
    if (extent != p.type.dims[static_cast<std::size_t>(s.dim)])
      fail(part + "its ranges hold " + std::to_string(extent) +
           (s.dim == 0 ? " rows" : " columns") + ", but the parameter has " +
           std::to_string(p.type.dims[static_cast<std::size_t>(s.dim)]));
  }
}

void check_params(const Graph& graph) {
  std::set<std::string> used;
  for (const auto& op : graph.ops()) used.insert(op->params.begin(), op->params.end());
  for (const Param& p : graph.params()) {
    const std::string head = "IR verifier: parameter @" + p.name;
    for (Dim d : p.type.dims)
      if (d <= 0) fail(head + " has type " + p.type.str() + ", expected constant dimensions");
    const bool e4m3 = p.type.dtype == DType::E4M3;
    const bool matrix = p.type.dims.size() == 2 && (p.type.dtype == DType::BF16 || e4m3);
    const bool vector = p.type.dims.size() == 1 && p.type.dtype == DType::F32;
    if (!matrix && !vector)
      fail(head + " has type " + p.type.str() +
           ", expected a bf16 or e4m3 matrix or an f32 vector");
    if (e4m3 != p.scale.has_value())
      fail(head + " has type " + p.type.str() +
           (e4m3 ? " but no scales (an e4m3 weight needs them)" : " but scales (e4m3 only)"));
    if (p.scale &&
        (p.scale->block_rows < 1 || p.scale->block_cols < 1 || p.scale->source_block_rows < 1 ||
         p.scale->source_block_cols < 1 || p.scale->sources.size() != p.sources.size()))
      fail(head + ": expected positive scale blocks and one scale tensor a source, found blocks " +
           std::to_string(p.scale->block_rows) + "x" + std::to_string(p.scale->block_cols) +
           " and " + std::to_string(p.scale->sources.size()) + " scale tensors for " +
           std::to_string(p.sources.size()) + " sources");
    if (p.sources.empty()) fail(head + " has no checkpoint tensors to be packed from");
    if (!used.count(p.name)) fail(head + " is read by no op");
    if (p.shard) check_shard(graph, p, head);
  }
}

}  // namespace

void verify(const Graph& graph, const OpRules& extra_rules) {
  std::set<const Value*> defined(graph.inputs().begin(), graph.inputs().end());
  std::set<std::string> names;
  for (const Value* v : graph.inputs())
    if (!names.insert(v->name).second) fail("IR verifier: input %" + v->name + " is defined twice");
  for (std::size_t i = 0; i < graph.ops().size(); ++i) {
    const Op& op = *graph.ops()[i];
    OpChecker checker(graph, op, i, extra_rules);
    for (std::size_t j = 0; j < op.operands.size(); ++j) {
      const Value* v = op.operands[j];
      if (!v) checker.error("operand " + std::to_string(j) + " is missing");
      if (!defined.count(v))
        checker.error("operand " + std::to_string(j) + " %" + v->name +
                      (v->def ? " is used before its definition" : " is not defined"));
    }
    for (const std::string& p : op.params)
      if (!graph.find_param(p)) checker.error("unknown parameter @" + p);
    checker.check();
    for (const Value* r : op.results) {
      if (!names.insert(r->name).second) checker.error("%" + r->name + " is defined twice");
      defined.insert(r);
    }
  }
  for (const Value* v : graph.outputs())
    if (!defined.count(v)) fail("IR verifier: graph output %" + v->name + " is not defined");
  if (graph.outputs().empty()) fail("IR verifier: graph @" + graph.name + " returns nothing");
  check_params(graph);
}

}  // namespace telos::compiler::ir
