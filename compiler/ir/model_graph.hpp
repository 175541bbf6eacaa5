#pragma once
// Lowers an imported model's hyperparameters to unfused Telos IR: one op per step of the forward
// pass in docs/artifact.md, with separate q/k/v and gate/up projections (params layers.N.q, .k,
// .v, .gate, .up). The fusion passes turn it into the artifact's form.
#include "compiler/import/model_spec.hpp"
#include "compiler/ir/graph.hpp"

namespace telos::compiler::ir {

Graph build_model_graph(const ModelSpec& spec);

}  // namespace telos::compiler::ir
