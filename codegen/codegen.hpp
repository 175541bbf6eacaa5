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

// One target's kernel set: the source of its instances, the module compiled from it, its kernel
// table and launch programs.
struct GeneratedKernels {
  std::string source;  // kernels/src/model.cu (further targets: model.<arch>.cu)
  TargetKernels compiled;
  nlohmann::ordered_json kernels;   // manifest "kernels": the kernel table
  nlohmann::ordered_json programs;  // manifest "programs": descriptor, bucket launches
};

struct CodegenOptions {
  std::string cache_dir = CompileCache::default_root();  // "" disables the cache
};

// `plan` is plan_kernels' lowering of the fully fused IR for plan.target, compiled for that target.
// Throws telos::Error naming the kernel when one spills or uses local memory, and with NVRTC's log
// when compilation fails.
GeneratedKernels generate_kernels(const KernelPlan& plan, const CodegenOptions& options = {});
// generate_kernels for each plan (plan_kernel_sets': one a target), the targets compiled at once.
std::vector<GeneratedKernels> generate_kernel_sets(const std::vector<KernelPlan>& plans,
                                                   const CodegenOptions& options = {});

}  // namespace telos::codegen
