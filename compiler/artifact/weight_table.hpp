#pragma once
// docs/artifact.md's weight table for a model: the parameters an artifact must carry, in order,
// with shapes, dtypes and checkpoint sources. The fused IR's parameters must equal it exactly;
// the artifact writer checks that before packing, so a pass that leaves the IR in any other
// form cannot produce an artifact the executor would misread.
#include <vector>

#include "compiler/import/model_spec.hpp"
#include "compiler/ir/graph.hpp"

namespace telos::compiler {

std::vector<ir::Param> weight_table(const ModelSpec& spec);

// Throws naming the first parameter that differs (missing, extra, reordered, wrong type/sources).
void check_weight_table(const ir::Graph& graph, const ModelSpec& spec);

}  // namespace telos::compiler
