#pragma once
// Codegen's entry point for telosc: lower the optimized IR to the kernel instances the model needs
// (the lowering table, lowering.hpp), emit their CUDA C++,
// compile it with NVRTC for every target (cached by content), enforce zero spills and no local
// memory, and describe the result for the manifest (docs/artifact.md, "Kernels").
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "codegen/codegen_input.hpp"
#include "codegen/compile_cache.hpp"
#include "compiler/ir/graph.hpp"

namespace telos::codegen {

struct TargetKernels {
  std::string arch;  // "sm_90a"
  std::string ptx, cubin, ptxas_log;
  bool from_cache = false;
};

struct GeneratedKernels {
  std::string source;                // kernels/src/model.cu
  std::vector<TargetKernels> targets;
  nlohmann::ordered_json kernels;    // manifest "kernels": the kernel table
  nlohmann::ordered_json programs;   // manifest "programs": descriptor, arena, bucket launches
};

struct CodegenOptions {
  std::string cache_dir = CompileCache::default_root();  // "" disables the cache
};

// `graph` is the fully fused IR. Throws telos::Error naming the op when one has no lowering rule,
// naming the kernel when one spills or uses local memory, and with NVRTC's log when compilation
// fails.
GeneratedKernels generate_kernels(const compiler::ir::Graph& graph, const CodegenInput& in,
                                  const CodegenOptions& options = {});

}  // namespace telos::codegen
