#pragma once
// Small pattern-matching helpers shared by the fusion passes.
#include <string>

#include "compiler/ir/graph.hpp"

namespace telos::compiler {

// The op defining `v` when it is of `kind` (a linear only without an epilogue), else null.
inline ir::Op* defined_by(const ir::Value* v, const std::string& kind) {
  if (!v || !v->def || v->def->kind != kind) return nullptr;
  if (kind == "linear" && v->def->attr("epilogue")) return nullptr;
  return v->def;
}

inline bool single_use(const ir::Graph& g, const ir::Value* v) {
  if (g.users(v).size() != 1) return false;
  for (const ir::Value* out : g.outputs())
    if (out == v) return false;
  return true;
}

// Gives `v` a name that a now-erased value held, so fused IR keeps the names a reader knows.
inline void take_name(ir::Value* v, const std::string& name) {
  v->name = name;
}

// "layers.3.q" -> "layers.3.": the layer prefix of a per-layer parameter name.
inline std::string param_prefix(const std::string& name) {
  return name.substr(0, name.rfind('.') + 1);
}

}  // namespace telos::compiler
