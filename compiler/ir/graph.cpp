#include "compiler/ir/graph.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <set>

#include "support/error.hpp"

namespace telos::compiler::ir {

std::int64_t TensorType::bytes(std::int64_t tokens, std::int64_t sequences) const {
  std::int64_t n = static_cast<std::int64_t>(dtype_size(dtype));
  for (Dim d : dims) n *= d == kTokens ? tokens : d == kSequences ? sequences : d;
  return n;
}

std::string TensorType::str() const {
  std::string s = std::string(dtype_name(dtype)) + "[";
  for (std::size_t i = 0; i < dims.size(); ++i) {
    if (i) s += ",";
    s += dims[i] == kTokens ? "T" : dims[i] == kSequences ? "S" : std::to_string(dims[i]);
  }
  return s + "]";
}

const AttrValue* Op::attr(const std::string& name) const {
  for (const auto& a : attrs)
    if (a.name == name) return &a.value;
  return nullptr;
}

std::int64_t Op::int_attr(const std::string& name) const {
  const AttrValue* v = attr(name);
  if (!v || !std::holds_alternative<std::int64_t>(*v))
    fail("IR: op " + kind + " has no integer attribute " + name);
  return std::get<std::int64_t>(*v);
}

std::string Op::str_attr(const std::string& name) const {
  const AttrValue* v = attr(name);
  if (!v || !std::holds_alternative<std::string>(*v))
    fail("IR: op " + kind + " has no string attribute " + name);
  return std::get<std::string>(*v);
}

void Op::set_attr(const std::string& name, AttrValue value) {
  for (auto& a : attrs)
    if (a.name == name) {
      a.value = std::move(value);
      return;
    }
  attrs.push_back({name, std::move(value)});
}

const Param* Graph::find_param(const std::string& name) const {
  for (const auto& p : params_)
    if (p.name == name) return &p;
  return nullptr;
}

Param* Graph::find_param(const std::string& name) {
  for (auto& p : params_)
    if (p.name == name) return &p;
  return nullptr;
}

void Graph::add_param(Param param) {
  if (find_param(param.name)) fail("IR: parameter @" + param.name + " is declared twice");
  params_.push_back(std::move(param));
}

void Graph::insert_param(Param param, const std::string& before) {
  if (find_param(param.name)) fail("IR: parameter @" + param.name + " is declared twice");
  auto it = std::find_if(params_.begin(), params_.end(),
                         [&](const Param& p) { return p.name == before; });
  params_.insert(it, std::move(param));
}

void Graph::drop_unused_params() {
  std::set<std::string> used;
  for (const auto& op : ops_) used.insert(op->params.begin(), op->params.end());
  std::erase_if(params_, [&](const Param& p) { return !used.count(p.name); });
}

std::string Graph::unique_name(const std::string& wanted) {
  std::set<std::string> taken;
  for (const auto& v : values_) taken.insert(v->name);
  if (!taken.count(wanted)) return wanted;
  for (int i = 1;; ++i) {
    std::string candidate = wanted + "." + std::to_string(i);
    if (!taken.count(candidate)) return candidate;
  }
}

Value* Graph::add_input(const std::string& name, TensorType type) {
  values_.push_back(std::make_unique<Value>(Value{unique_name(name), std::move(type), nullptr}));
  inputs_.push_back(values_.back().get());
  return inputs_.back();
}

Op* Graph::insert_op(std::size_t at, std::string kind, std::vector<Value*> operands,
                     std::vector<std::string> params, std::vector<Attr> attrs,
                     const std::vector<std::pair<std::string, TensorType>>& results) {
  auto op = std::make_unique<Op>();
  op->kind = std::move(kind);
  op->operands = std::move(operands);
  op->params = std::move(params);
  op->attrs = std::move(attrs);
  for (const auto& [name, type] : results) {
    values_.push_back(std::make_unique<Value>(Value{unique_name(name), type, op.get()}));
    op->results.push_back(values_.back().get());
  }
  Op* raw = op.get();
  ops_.insert(ops_.begin() + static_cast<std::ptrdiff_t>(std::min(at, ops_.size())), std::move(op));
  return raw;
}

std::size_t Graph::index_of(const Op* op) const {
  for (std::size_t i = 0; i < ops_.size(); ++i)
    if (ops_[i].get() == op) return i;
  fail("IR: op " + op->kind + " is not in graph @" + name);
}

std::vector<Op*> Graph::users(const Value* value) const {
  std::vector<Op*> out;
  for (const auto& op : ops_)
    if (std::find(op->operands.begin(), op->operands.end(), value) != op->operands.end())
      out.push_back(op.get());
  return out;
}

void Graph::replace_uses(Value* from, Value* to) {
  for (auto& op : ops_) std::replace(op->operands.begin(), op->operands.end(), from, to);
  std::replace(outputs_.begin(), outputs_.end(), from, to);
}

void Graph::erase_ops(const std::vector<Op*>& doomed) {
  std::set<const Op*> gone(doomed.begin(), doomed.end());
  for (const Op* op : doomed)
    for (const Value* r : op->results) {
      for (const Op* user : users(r))
        if (!gone.count(user))
          fail("IR: cannot erase " + op->kind + ": %" + r->name + " is still used by " +
               user->kind);
      if (std::find(outputs_.begin(), outputs_.end(), r) != outputs_.end())
        fail("IR: cannot erase " + op->kind + ": %" + r->name + " is a graph output");
    }
  std::erase_if(values_, [&](const std::unique_ptr<Value>& v) { return gone.count(v->def) > 0; });
  std::erase_if(ops_, [&](const std::unique_ptr<Op>& op) { return gone.count(op.get()) > 0; });
}

namespace {

std::string format_attr(const AttrValue& v) {
  if (const auto* i = std::get_if<std::int64_t>(&v)) return std::to_string(*i);
  if (const auto* s = std::get_if<std::string>(&v)) return "\"" + *s + "\"";
  // Whole numbers print as "500000.0"; others in the shortest form that reads back exactly. A
  // decimal point or exponent is always kept, so a float attribute never reads as an integer.
  char buf[40];
  const double d = std::get<double>(v);
  if (d == static_cast<double>(static_cast<std::int64_t>(d)) && std::abs(d) < 1e15) {
    std::snprintf(buf, sizeof buf, "%.1f", d);
    return buf;
  }
  for (int precision = 1; precision <= 17; ++precision) {
    std::snprintf(buf, sizeof buf, "%.*g", precision, d);
    if (std::strtod(buf, nullptr) == d) break;
  }
  std::string s = buf;
  if (s.find_first_of(".eEn") == std::string::npos) s += ".0";
  return s;
}

}  // namespace

std::string print_op(const Op& op) {
  std::string s;
  for (std::size_t i = 0; i < op.results.size(); ++i) s += (i ? ", %" : "%") + op.results[i]->name;
  if (!op.results.empty()) s += " = ";
  s += op.kind + "(";
  bool first = true;
  for (const Value* v : op.operands) {
    s += (first ? "%" : ", %") + v->name;
    first = false;
  }
  for (const auto& p : op.params) {
    s += (first ? "@" : ", @") + p;
    first = false;
  }
  s += ")";
  if (!op.attrs.empty()) {
    s += " {";
    for (std::size_t i = 0; i < op.attrs.size(); ++i)
      s += (i ? ", " : "") + op.attrs[i].name + " = " + format_attr(op.attrs[i].value);
    s += "}";
  }
  if (!op.results.empty()) {
    s += " : ";
    for (std::size_t i = 0; i < op.results.size(); ++i)
      s += (i ? ", " : "") + op.results[i]->type.str();
  }
  return s;
}

std::vector<std::int64_t> Param::scale_dims() const {
  const std::int64_t rows = type.dims[0], cols = type.dims[1];
  return {(rows + scale->block_rows - 1) / scale->block_rows,
          (cols + scale->block_cols - 1) / scale->block_cols};
}

Param concat_params(const Graph& g, const std::vector<std::string>& names,
                    const std::string& fused_name, std::int64_t row_group) {
  const Param* first = g.find_param(names[0]);
  Param fused{fused_name, first->type, {}};
  fused.type.dims[0] = 0;
  std::int64_t block_rows = first->scale ? first->scale->source_block_rows : 0;
  for (std::size_t i = 0; i < names.size(); ++i) {
    const Param* p = g.find_param(names[i]);
    if (p->type.dtype != first->type.dtype || p->scale.has_value() != first->scale.has_value())
      fail("@" + p->name + " is " + p->type.str() + " but @" + first->name + " is " +
           first->type.str() + ": @" + fused_name +
           " packs them as one weight of one dtype (quantize all of them or none)");
    fused.type.dims[0] += p->type.dims[0];
    fused.sources.insert(fused.sources.end(), p->sources.begin(), p->sources.end());
    if (!p->scale) continue;
    if (!fused.scale)
      fused.scale =
          ParamScale{0, p->scale->block_cols, {}, block_rows, p->scale->source_block_cols};
    fused.scale->sources.insert(fused.scale->sources.end(), p->scale->sources.begin(),
                                p->scale->sources.end());
    if (i + 1 < names.size()) block_rows = std::gcd(block_rows, p->type.dims[0]);
  }
  if (fused.scale) {
    if (row_group > 1 && block_rows % row_group != 0) block_rows = 1;
    fused.scale->block_rows = block_rows;
  }
  return fused;
}

namespace {

// " rows of 256: rank 0 [0:64, 128:160], rank 1 [64:128, 160:192]"
std::string format_shard(const ParamShard& shard) {
  std::string s = std::string(shard.dim == 0 ? " rows" : " columns") + " of " +
                  std::to_string(shard.whole) + ":";
  for (std::size_t r = 0; r < shard.ranks.size(); ++r) {
    s += (r ? ", rank " : " rank ") + std::to_string(r) + " [";
    for (std::size_t i = 0; i < shard.ranks[r].size(); ++i)
      s += (i ? ", " : "") + std::to_string(shard.ranks[r][i].first) + ":" +
           std::to_string(shard.ranks[r][i].second);
    s += "]";
  }
  return s;
}

}  // namespace

std::string w8a8_refusal(const Param& w, const std::string& epilogue) {
  if (w.type.dtype != DType::E4M3 || w.type.dims.size() != 2 || !w.scale)
    return "@" + w.name + " is not an e4m3 matrix";
  if (w.scale->block_rows != 128 || w.scale->block_cols != 128)
    return "@" + w.name + " has scale blocks of " + std::to_string(w.scale->block_rows) + " x " +
           std::to_string(w.scale->block_cols) + ", not 128 x 128";
  if (w.type.dims[1] % 16 != 0)
    return "@" + w.name + " has " + std::to_string(w.type.dims[1]) +
           " columns, not a multiple of 16";
  if (epilogue == "swiglu" && w.type.dims[0] / 2 % 64 != 0)
    return "@" + w.name + " has halves of " + std::to_string(w.type.dims[0] / 2) +
           " rows, not a multiple of 64";
  return "";
}

ParamScale shard_scale(const Param& p, const ParamShard& shard) {
  ParamScale s = p.scale.value();
  std::int64_t& block = shard.dim == 0 ? s.block_rows : s.block_cols;
  const auto on_boundary = [&](std::int64_t at) { return at % block == 0 || at == shard.whole; };
  bool aligned = true, inside = true;
  std::int64_t common = block;
  for (const auto& ranges : shard.ranks)
    for (const auto& [begin, end] : ranges) {
      aligned = aligned && on_boundary(begin) && on_boundary(end);
      inside = inside && ranges.size() == 1 && begin / block == (end - 1) / block;
      common = std::gcd(common, begin);
      if (end != shard.whole) common = std::gcd(common, end);
    }
  if (aligned) return s;
  if (shard.dim == 0) {
    block = 1;
    return s;
  }
  if (!inside && common % 64 != 0)
    fail("@" + p.name + ": its e4m3 scales of " + std::to_string(s.block_rows) + "x" +
         std::to_string(block) + " blocks do not split with its" + format_shard(shard) +
         ": each rank's columns must lie inside one scale block, or start and end on blocks of "
         "a multiple of 64 columns (the e4m3 kernels' K block; these columns share blocks of " +
         std::to_string(common) + "); compile with fewer ranks or unquantized weights");
  const auto& [first_begin, first_end] = shard.ranks[0][0];
  block = inside ? first_end - first_begin : common;
  return s;
}

std::string print_graph(const Graph& g) {
  std::string s = "// Telos IR: T = tokens in the step, S = sequences in the step\n";
  if (g.ranks > 1)
    s += "// tensor parallel: each of " + std::to_string(g.ranks) +
         " ranks runs this graph on its part of the split parameters\n";
  for (const auto& p : g.params()) {
    s += "param @" + p.name + " : " + p.type.str() + " = [";
    for (std::size_t i = 0; i < p.sources.size(); ++i)
      s += (i ? ", \"" : "\"") + p.sources[i] + "\"";
    s += "]";
    if (p.shard) s += format_shard(*p.shard);
    if (p.scale) {
      s += " scale " + TensorType{DType::F32, p.scale_dims()}.str() + " blocks " +
           std::to_string(p.scale->block_rows) + "x" + std::to_string(p.scale->block_cols) + " = [";
      for (std::size_t i = 0; i < p.scale->sources.size(); ++i)
        s += (i ? ", \"" : "\"") + p.scale->sources[i] + "\"";
      s += "]";
    }
    s += "\n";
  }
  s += "\ngraph @" + g.name + "(";
  for (std::size_t i = 0; i < g.inputs().size(); ++i)
    s += (i ? ", %" : "%") + g.inputs()[i]->name + ": " + g.inputs()[i]->type.str();
  s += ") {\n";
  for (const auto& op : g.ops()) s += "  " + print_op(*op) + "\n";
  s += "  return";
  for (std::size_t i = 0; i < g.outputs().size(); ++i)
    s += (i ? ", %" : " %") + g.outputs()[i]->name;
  s += "\n}\n";
  return s;
}

}  // namespace telos::compiler::ir
