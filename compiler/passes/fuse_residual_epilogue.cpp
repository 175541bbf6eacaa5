#include <vector>

#include "compiler/passes/fusion_passes.hpp"
#include "compiler/passes/rewrite.hpp"

namespace telos::compiler {

void fuse_residual_epilogue(ir::Graph& g) {
  std::vector<ir::Op*> adds;
  for (const auto& op : g.ops())
    if (op->kind == "add") adds.push_back(op.get());

  for (ir::Op* add : adds) {
    // Either operand may be the GEMM's output; the other is the residual it adds.
    for (int branch = 1; branch >= 0; --branch) {
      ir::Value* b = add->operands[branch];
      ir::Op* gemm = defined_by(b, "linear");
      if (!gemm || gemm->params.size() != 1 || !single_use(g, b)) continue;
      ir::Value* residual = add->operands[1 - branch];
      const std::string name = add->results[0]->name;
      ir::Value* out =
          g.insert_op(g.index_of(add), "linear", {gemm->operands[0], residual}, gemm->params,
                      {{"epilogue", std::string("residual")}}, {{name, add->results[0]->type}})
              ->results[0];
      g.replace_uses(add->results[0], out);
      g.erase_ops({add, gemm});
      take_name(out, name);
      break;
    }
  }
}

}  // namespace telos::compiler
