#pragma once
// Codegen's last stage for telosc: emit the CUDA C++ of the kernel instances the lowered programs
// name (lowering.hpp), compile it with NVRTC for every target (cached by content), enforce zero
// spills and no local memory, and describe the result for the manifest (docs/artifact.md,
// "Kernels").
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "codegen/compile_cache.hpp"
#include "codegen/kernel_plan.hpp"

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
  nlohmann::ordered_json programs;   // manifest "programs": descriptor, bucket launches
};

struct CodegenOptions {
  std::string cache_dir = CompileCache::default_root();  // "" disables the cache
};

// `plan` is plan_kernels' lowering of the fully fused IR; `targets` the serving config's. Throws
// telos::Error naming the kernel when one spills or uses local memory, and with NVRTC's log when
// compilation fails.
GeneratedKernels generate_kernels(const KernelPlan& plan, const std::vector<std::string>& targets,
                                  const CodegenOptions& options = {});

}  // namespace telos::codegen
