#include "executor/backend_selection.hpp"

#include <cuda_runtime_api.h>

#include "executor/cpu_reference_model.hpp"
#include "support/error.hpp"

namespace telos::exec {
namespace {

// Architectures the kernels of issue 4 are written for: Hopper and Blackwell datacenter parts.
bool supported_arch(const std::string& arch) {
  return arch == "sm_90" || arch == "sm_100";
}

// The GPU engine executes the artifact's kernels; until codegen (issue 4) fills the kernel table
// there is nothing for it to run.
std::string gpu_engine_unavailable(const Artifact& artifact) {
  return artifact.dir() + ": the GPU engine needs the artifact's kernels (issue 4) and " +
         (artifact.has_kernels() ? std::string("is not part of this telos-run yet")
                                 : std::string("manifest.json kernels is empty"));
}

}  // namespace

std::optional<GpuDevice> detect_gpu(std::string* why_not) {
  int count = 0;
  if (cudaError_t e = cudaGetDeviceCount(&count); e != cudaSuccess) {
    if (why_not) *why_not = std::string("no usable CUDA GPU (") + cudaGetErrorString(e) + ")";
    return std::nullopt;
  }
  if (count == 0) {
    if (why_not) *why_not = "no CUDA GPU";
    return std::nullopt;
  }
  cudaDeviceProp prop{};
  if (cudaError_t e = cudaGetDeviceProperties(&prop, 0); e != cudaSuccess) {
    if (why_not) *why_not = std::string("cannot query GPU 0 (") + cudaGetErrorString(e) + ")";
    return std::nullopt;
  }
  return GpuDevice{0, prop.name, "sm_" + std::to_string(prop.major * 10 + prop.minor)};
}

std::unique_ptr<ModelBackend> make_backend(std::shared_ptr<const Artifact> artifact,
                                           EngineChoice choice, std::ostream& log) {
  if (choice == EngineChoice::Cpu) return std::make_unique<CpuReferenceModel>(std::move(artifact));

  std::string why_not;
  std::optional<GpuDevice> gpu = detect_gpu(&why_not);
  if (choice == EngineChoice::Gpu) {
    if (!gpu) fail("--engine gpu: " + why_not);
    artifact->check_target(gpu->arch);
    fail(gpu_engine_unavailable(*artifact) + "; use --engine cpu");
  }

  if (!gpu) {
    log << "telos-run: " << why_not << "; using the CPU reference engine\n";
  } else if (!supported_arch(gpu->arch)) {
    log << "telos-run: GPU 0 (" << gpu->name << ", " << gpu->arch
        << ") is not a supported GPU (sm_90, sm_100); using the CPU reference engine\n";
  } else {
    log << "telos-run: GPU 0 (" << gpu->name << ") found, but " << gpu_engine_unavailable(*artifact)
        << "; using the CPU reference engine instead\n";
  }
  return std::make_unique<CpuReferenceModel>(std::move(artifact));
}

}  // namespace telos::exec
