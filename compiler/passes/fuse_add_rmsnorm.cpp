#include <vector>

#include "compiler/passes/fusion_passes.hpp"
#include "compiler/passes/rewrite.hpp"

namespace telos::compiler {

void fuse_add_rmsnorm(ir::Graph& g) {
  std::vector<ir::Op*> norms;
  for (const auto& op : g.ops())
    if (op->kind == "rmsnorm") norms.push_back(op.get());

  for (ir::Op* norm : norms) {
    ir::Op* add = defined_by(norm->operands[0], "add");
    if (!add) continue;
    // The fused op stands where the add stood, so every later user of the sum still follows it.
    const std::string sum_name = add->results[0]->name, norm_name = norm->results[0]->name;
    ir::Op* fused =
        g.insert_op(g.index_of(add), "add_rmsnorm", add->operands, norm->params, norm->attrs,
                    {{sum_name, add->results[0]->type}, {norm_name, norm->results[0]->type}});
    g.replace_uses(add->results[0], fused->results[0]);
    g.replace_uses(norm->results[0], fused->results[1]);
    g.erase_ops({norm, add});
    take_name(fused->results[0], sum_name);
    take_name(fused->results[1], norm_name);
  }
}

}  // namespace telos::compiler
