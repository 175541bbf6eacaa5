#include "compiler/passes/w8a8_activations.hpp"

namespace telos::compiler {

void mark_w8a8_activations(ir::Graph& graph) {
  for (const auto& op : graph.ops()) {
    // The linears, and the LM head (a GEMM of the final norm's rows by its weight).
    if (op->kind != "linear" && op->kind != "lm_head" && op->kind != "lm_head_sample") continue;
    const ir::AttrValue* e = op->attr("epilogue");
    const std::string epilogue =
        e && std::holds_alternative<std::string>(*e) ? std::get<std::string>(*e) : "";
    const ir::Param* w = graph.find_param(op->params.at(0));
    if (w && ir::w8a8_refusal(*w, epilogue).empty()) op->set_attr("activations", "e4m3");
  }
}

}  // namespace telos::compiler
