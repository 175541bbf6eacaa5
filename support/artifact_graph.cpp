#include "support/artifact_graph.hpp"

#include <map>

#include "support/artifact_limits.hpp"

namespace telos {
namespace {

using nlohmann::json;

class GraphReader {
 public:
  GraphReader(const ManifestFields& f, const std::set<std::string>& tensors)
      : f_(f), tensors_(tensors) {}

  ArtifactGraph read(const json& g) {
    const json& inputs = array(g, "graph", "inputs", limits::kMaxOpEntries);
    for (std::size_t i = 0; i < inputs.size(); ++i)
      graph_.inputs.push_back(define(inputs[i], "graph.inputs[" + std::to_string(i) + "]"));
    const json& ops = array(g, "graph", "ops", limits::kMaxGraphOps);
    for (std::size_t i = 0; i < ops.size(); ++i)
      graph_.ops.push_back(read_op(ops[i], "graph.ops[" + std::to_string(i) + "]"));
    const json& outputs = array(g, "graph", "outputs", limits::kMaxOpEntries);
    if (outputs.empty()) f_.refuse("graph.outputs", "expected at least one value");
    for (std::size_t i = 0; i < outputs.size(); ++i)
      graph_.outputs.push_back(use(outputs[i], "graph.outputs[" + std::to_string(i) + "]"));
    return std::move(graph_);
  }

 private:
  const json& array(const json& obj, const std::string& path, const char* key,
                    std::int64_t most) const {
    const json& a = f_.array(obj, path, key);
    if (static_cast<std::int64_t>(a.size()) > most)
      f_.refuse(path + "." + key,
                std::to_string(a.size()) + " entries, more than " + std::to_string(most));
    return a;
  }

  std::vector<std::int64_t> read_shape(const json& v, const std::string& field) const {
    const json& shape = array(v, field, "shape", limits::kMaxValueRank);
    if (shape.empty()) f_.refuse(field + ".shape", "expected at least one dimension");
    std::vector<std::int64_t> dims;
    for (std::size_t i = 0; i < shape.size(); ++i) {
      const std::string at = field + ".shape[" + std::to_string(i) + "]";
      if (shape[i] == "T")
        dims.push_back(kGraphTokens);
      else if (shape[i] == "S")
        dims.push_back(kGraphSequences);
      else if (shape[i].is_string())
        f_.refuse(at, shape[i].dump() + " is not \"T\", \"S\" or an integer");
      else
        dims.push_back(f_.integer_value(shape[i], at, 1, limits::kMaxValueDim));
    }
    return dims;
  }

  // A value a graph input or an op result defines: named once in the whole graph.
  int define(const json& v, const std::string& field) {
    if (!v.is_object()) f_.refuse(field, "expected an object {name, dtype, shape}");
    GraphValue value;
    value.name = f_.string(v, field, "name");
    if (value.name.empty()) f_.refuse(field + ".name", "expected a non-empty name");
    if (!parse_dtype(f_.string(v, field, "dtype"), &value.dtype))
      f_.refuse(field + ".dtype", "unknown dtype " + v.at("dtype").dump());
    value.shape = read_shape(v, field);
    const int index = static_cast<int>(graph_.values.size());
    if (!defined_.emplace(value.name, index).second)
      f_.refuse(field + ".name", "%" + value.name + " is defined twice");
    graph_.values.push_back(std::move(value));
    return index;
  }

  // A value an op or the graph's outputs read: defined by an input or an earlier op.
  int use(const json& name, const std::string& field) const {
    if (!name.is_string()) f_.refuse(field, "expected a value's name");
    const auto it = defined_.find(name.get<std::string>());
    if (it == defined_.end())
      f_.refuse(field, "%" + name.get<std::string>() +
                           " is not defined by a graph input or an earlier op");
    return it->second;
  }

  GraphOp read_op(const json& o, const std::string& field) {
    if (!o.is_object())
      f_.refuse(field, "expected an object {op, operands, params, attrs, results}");
    GraphOp op;
    op.op = f_.string(o, field, "op");
    if (op.op.empty()) f_.refuse(field + ".op", "expected a non-empty op name");
    const std::string named = field + " (" + op.op + ")";
    const json& operands = array(o, named, "operands", limits::kMaxOpEntries);
    for (std::size_t i = 0; i < operands.size(); ++i)
      op.operands.push_back(use(operands[i], named + ".operands[" + std::to_string(i) + "]"));
    const json& params = array(o, named, "params", limits::kMaxOpEntries);
    for (std::size_t i = 0; i < params.size(); ++i) {
      const std::string at = named + ".params[" + std::to_string(i) + "]";
      if (!params[i].is_string() || !tensors_.count(params[i].get<std::string>()))
        f_.refuse(at, params[i].dump() + " is not a tensor of the weight table (weights.tensors)");
      op.params.push_back(params[i].get<std::string>());
    }
    const json& attrs = f_.object(o, named, "attrs");
    if (static_cast<std::int64_t>(attrs.size()) > limits::kMaxOpEntries)
      f_.refuse(named + ".attrs", std::to_string(attrs.size()) + " attributes, more than " +
                                      std::to_string(limits::kMaxOpEntries));
    for (const auto& [name, value] : attrs.items()) {
      if (value.is_number_integer())
        op.attrs.emplace_back(name, value.get<std::int64_t>());
      else if (value.is_number_float())
        op.attrs.emplace_back(name, value.get<double>());
      else if (value.is_string())
        op.attrs.emplace_back(name, value.get<std::string>());
      else
        f_.refuse(named + ".attrs." + name, "expected an integer, a number or a string");
    }
    // Results last: an op never reads what it defines.
    const json& results = array(o, named, "results", limits::kMaxOpEntries);
    for (std::size_t i = 0; i < results.size(); ++i)
      op.results.push_back(define(results[i], named + ".results[" + std::to_string(i) + "]"));
    return op;
  }

  const ManifestFields& f_;
  const std::set<std::string>& tensors_;
  ArtifactGraph graph_;
  std::map<std::string, int> defined_;
};

}  // namespace

const GraphAttr* GraphOp::attr(std::string_view name) const {
  for (const auto& [n, v] : attrs)
    if (n == name) return &v;
  return nullptr;
}

ArtifactGraph read_graph(const ManifestFields& f, const json& graph,
                         const std::set<std::string>& tensors) {
  if (!graph.is_object()) f.refuse("graph", "expected an object");
  return GraphReader(f, tensors).read(graph);
}

std::string graph_type_string(const GraphValue& value) {
  std::string s = std::string(dtype_name(value.dtype)) + "[";
  for (std::size_t i = 0; i < value.shape.size(); ++i) {
    const std::int64_t d = value.shape[i];
    s += (i ? "," : "") + (d == kGraphTokens      ? "T"
                           : d == kGraphSequences ? "S"
                                                  : std::to_string(d));
  }
  return s + "]";
}

}  // namespace telos
