#pragma once
// The manifest's "graph" section (docs/artifact.md, "graph"): the optimized Telos IR in a form the
// executor reads without the compiler, validated as a graph: every size bounded
// (artifact_limits.hpp), every operand defined by a graph input or an earlier op, every value
// defined once, every parameter a tensor of the weight table. What an op computes, and so which op
// kinds there are, is its readers' (the CPU reference engine's executor/cpu_reference_ops.hpp).
// Part of validate_manifest (artifact_format.hpp).
#include <cstdint>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "support/dtype.hpp"
#include "support/manifest_fields.hpp"

namespace telos {

// A value's dimension: a constant from 1, or one of the step's symbolic sizes.
inline constexpr std::int64_t kGraphTokens = -1;     // "T": tokens in the step
inline constexpr std::int64_t kGraphSequences = -2;  // "S": sequences in the step

struct GraphValue {
  std::string name;  // ir.txt's %name, without the '%'
  DType dtype = DType::F32;
  std::vector<std::int64_t> shape;
};

using GraphAttr = std::variant<std::int64_t, double, std::string>;

struct GraphOp {
  std::string op;                                        // "linear", "rmsnorm", ...
  std::vector<int> operands;                             // indices into ArtifactGraph::values
  std::vector<std::string> params;                       // weight table names (ir.txt's @name)
  std::vector<std::pair<std::string, GraphAttr>> attrs;  // sorted by name
  std::vector<int> results;                              // indices into ArtifactGraph::values

  const GraphAttr* attr(std::string_view name) const;
};

struct ArtifactGraph {
  std::vector<GraphValue> values;  // the inputs, then each op's results, in order
  std::vector<int> inputs, outputs;
  std::vector<GraphOp> ops;  // program order
};

// Reads and validates the graph section; `tensors` are the weight table's names. Throws
// telos::Error naming the first field at fault ("graph.ops[3].operands[0]: ...").
ArtifactGraph read_graph(const ManifestFields& f, const nlohmann::json& graph,
                         const std::set<std::string>& tensors);

// A value's type as ir.txt prints it: "bf16[T,128]".
std::string graph_type_string(const GraphValue& value);

}  // namespace telos
