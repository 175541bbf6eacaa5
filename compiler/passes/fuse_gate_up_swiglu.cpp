#include <vector>

#include "compiler/passes/fusion_passes.hpp"
#include "compiler/passes/rewrite.hpp"

namespace telos::compiler {

void fuse_gate_up_swiglu(ir::Graph& g) {
  std::vector<ir::Op*> swiglus;
  for (const auto& op : g.ops())
    if (op->kind == "swiglu") swiglus.push_back(op.get());

  for (ir::Op* act : swiglus) {
    ir::Op* gate = defined_by(act->operands[0], "linear");
    ir::Op* up = defined_by(act->operands[1], "linear");
    if (!gate || !up || gate == up || gate->operands[0] != up->operands[0]) continue;
    if (gate->params.size() != 1 || up->params.size() != 1) continue;
    if (!single_use(g, gate->results[0]) || !single_use(g, up->results[0])) continue;

    // Gate rows first, then up rows: the epilogue computes silu(row j) * row (j + I).
    ir::Param fused = ir::concat_params(g, {gate->params[0], up->params[0]},
                                        param_prefix(gate->params[0]) + "gate_up", 1);
    const std::string fused_name = fused.name;
    g.insert_param(std::move(fused), gate->params[0]);

    const std::string name = act->results[0]->name;
    ir::Value* out =
        g.insert_op(g.index_of(act), "linear", {gate->operands[0]}, {fused_name},
                    {{"epilogue", std::string("swiglu")}}, {{name, act->results[0]->type}})
            ->results[0];
    g.replace_uses(act->results[0], out);
    g.erase_ops({act, gate, up});
    take_name(out, name);
    g.drop_unused_params();
  }
}

}  // namespace telos::compiler
