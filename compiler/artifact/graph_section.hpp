#pragma once
// The manifest's "graph" section (docs/artifact.md, "graph"): the optimized IR as the executor
// reads it (support/artifact_graph.hpp), the same graph ir.txt prints for people.
#include <nlohmann/json.hpp>

#include "compiler/ir/graph.hpp"

namespace telos::compiler {

nlohmann::ordered_json graph_section(const ir::Graph& graph);

}  // namespace telos::compiler
