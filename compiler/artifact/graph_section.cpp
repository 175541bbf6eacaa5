#include "compiler/artifact/graph_section.hpp"

namespace telos::compiler {
namespace {

using nlohmann::ordered_json;

ordered_json value_json(const ir::Value& v) {
  ordered_json shape = ordered_json::array();
  for (ir::Dim d : v.type.dims)
    shape.push_back(d == ir::kTokens      ? ordered_json("T")
                    : d == ir::kSequences ? ordered_json("S")
                                          : ordered_json(d));
  return {{"name", v.name}, {"dtype", dtype_name(v.type.dtype)}, {"shape", shape}};
}

ordered_json names(const std::vector<ir::Value*>& values) {
  ordered_json out = ordered_json::array();
  for (const ir::Value* v : values) out.push_back(v->name);
  return out;
}

ordered_json op_json(const ir::Op& op) {
  ordered_json attrs = ordered_json::object();
  for (const ir::Attr& a : op.attrs) std::visit([&](const auto& v) { attrs[a.name] = v; }, a.value);
  ordered_json results = ordered_json::array();
  for (const ir::Value* r : op.results) results.push_back(value_json(*r));
  return {{"op", op.kind},
          {"operands", names(op.operands)},
          {"params", op.params},
          {"attrs", attrs},
          {"results", results}};
}

}  // namespace

ordered_json graph_section(const ir::Graph& graph) {
  ordered_json inputs = ordered_json::array();
  for (const ir::Value* v : graph.inputs()) inputs.push_back(value_json(*v));
  ordered_json ops = ordered_json::array();
  for (const auto& op : graph.ops()) ops.push_back(op_json(*op));
  return {{"inputs", inputs}, {"ops", ops}, {"outputs", names(graph.outputs())}};
}

}  // namespace telos::compiler
