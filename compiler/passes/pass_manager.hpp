#pragma once
// Runs passes over Telos IR in order, verifying the graph after each one (a pass that breaks an
// invariant is named at once), and optionally printing it LLVM-style:
//   // -----// IR after fuse-qkv //----- //
#include <functional>
#include <ostream>
#include <string>
#include <vector>

#include "compiler/ir/graph.hpp"

namespace telos::compiler {

struct Pass {
  std::string name;  // as on the command line: "fuse-qkv"
  std::string summary;
  std::function<void(ir::Graph&)> run;
};

// Every fusion pass, in the order the default pipeline runs them (see passes.cpp for why).
const std::vector<Pass>& fusion_pipeline();

// The tensor-parallel pass over `ranks` ranks (shard_tensor_parallel.hpp), which runs after the
// fusion passes when serving.tensor_parallel is above 1.
Pass tensor_parallel_pass(int ranks);

// The W8A8 pass (w8a8_activations.hpp), which runs last.
Pass w8a8_activations_pass();

// The passes named in a comma-separated list, e.g. "fuse-qkv,fuse-rope-kv-append"; throws
// naming an unknown pass.
std::vector<Pass> select_passes(const std::string& list);

// Runs `passes`; with `print_after_all`, writes the IR after each pass there.
void run_passes(ir::Graph& graph, const std::vector<Pass>& passes, std::ostream* print_after_all);

}  // namespace telos::compiler
