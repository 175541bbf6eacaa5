#include <vector>

#include "compiler/passes/fusion_passes.hpp"
#include "compiler/passes/rewrite.hpp"

namespace telos::compiler {

void fuse_lm_head_sample(ir::Graph& g) {
  std::vector<ir::Op*> samples;
  for (const auto& op : g.ops())
    if (op->kind == "sample") samples.push_back(op.get());

  for (ir::Op* sample : samples) {
    ir::Op* head = defined_by(sample->operands[0], "lm_head");
    if (!head || !single_use(g, sample->operands[0])) continue;
    const std::string name = sample->results[0]->name;
    ir::Value* out = g.insert_op(g.index_of(sample), "lm_head_sample", head->operands, head->params,
                                 head->attrs, {{name, sample->results[0]->type}})
                         ->results[0];
    g.replace_uses(sample->results[0], out);
    g.erase_ops({sample, head});
    take_name(out, name);
  }
}

}  // namespace telos::compiler
