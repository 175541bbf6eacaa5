#include "executor/backend_selection.hpp"

#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <cstdlib>
#include <system_error>
#include <thread>

#include "executor/cpu_reference_model.hpp"
#include "support/error.hpp"

namespace telos::exec {
namespace {

// Architectures the kernels are written for: Hopper and Blackwell datacenter parts.
bool supported_arch(const std::string& arch) {
  return arch == "sm_90" || arch == "sm_100";
}

GpuBackendFactory& gpu_backend_factory() {
  static GpuBackendFactory factory;
  return factory;
}

// Why the GPU engine cannot run `artifact` on `gpu`, or empty when it can.
std::string gpu_engine_unavailable(const Artifact& artifact, const GpuDevice& gpu) {
  if (!supported_arch(gpu.arch))
    return "GPU 0 (" + gpu.name + ", " + gpu.arch + ") is not a supported GPU (sm_90, sm_100)";
  if (std::string why = gpu_engine_refusal(artifact, gpu.count); !why.empty()) return why;
  if (!artifact.has_kernels())
    return artifact.dir() +
           ": manifest.json kernels is empty: the GPU engine needs the kernels "
           "telosc compiles";
  try {
    artifact.check_target(gpu.arch);
  } catch (const Error& e) {
    return e.what();
  }
  if (!gpu_backend_factory()) return "this telos-run was built without the GPU engine";
  return "";
}

// Whether the NVIDIA driver's library can be loaded. Without it the CUDA runtime reports
// "CUDA driver version is insufficient", which reads as an old driver rather than none.
bool nvidia_driver_present() {
  void* driver = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
  if (driver == nullptr) return false;
  dlclose(driver);
  return true;
}

}  // namespace

bool tensor_parallel_one_device() {
  const char* v = std::getenv(kTensorParallelOneDeviceEnv);
  return v != nullptr && std::string(v) == "1";
}

bool nccl_enabled() {
  const char* v = std::getenv(kNcclEnv);
  return v == nullptr || std::string(v) != "0";
}

std::vector<int> rank_devices(const Artifact& artifact, int first) {
  std::vector<int> devices;
  const bool one_device = tensor_parallel_one_device();
  for (int r = 0; r < artifact.ranks(); ++r) devices.push_back(one_device ? first : first + r);
  return devices;
}

std::string gpu_engine_refusal(const Artifact& artifact, int gpu_count) {
  const int ranks = artifact.ranks();
  if (ranks == 1 || ranks <= gpu_count || tensor_parallel_one_device()) return "";
  return artifact.dir() + "/manifest.json: serving.tensor_parallel is " + std::to_string(ranks) +
         ": its ranks need " + std::to_string(ranks) + " GPUs, one a rank, and this machine has " +
         std::to_string(gpu_count) + " (" + kTensorParallelOneDeviceEnv +
         "=1 runs every rank on GPU 0, a test mode)";
}

std::optional<GpuDevice> detect_gpu(std::string* why_not) {
  if (!nvidia_driver_present()) {
    if (why_not) *why_not = "no NVIDIA driver found (libcuda.so.1 is missing)";
    return std::nullopt;
  }
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
  return GpuDevice{0, prop.name, "sm_" + std::to_string(prop.major * 10 + prop.minor), count};
}

std::shared_ptr<const Artifact> load_artifact(const std::string& dir, EngineChoice choice) {
  std::jthread gpu_start;
  if (choice != EngineChoice::Cpu) {
    try {
      gpu_start = std::jthread([] {
        // Errors are detect_gpu's to report, later, on the thread that asks.
        int count = 0;
        if (cudaGetDeviceCount(&count) == cudaSuccess && count > 0) cudaFree(nullptr);
      });
    } catch (const std::system_error&) {
      // No thread to be had: the engine starts the GPU itself, after the checks.
    }
  }
  return Artifact::load(dir);
}

void register_gpu_backend(GpuBackendFactory factory) {
  gpu_backend_factory() = std::move(factory);
}

std::unique_ptr<ModelBackend> make_backend(std::shared_ptr<const Artifact> artifact,
                                           EngineChoice choice, std::ostream& log,
                                           const RuntimeLimits& limits) {
  const RuntimeLimits resolved = resolve_runtime_limits(*artifact, limits);
  const int kv_pages = resolved.kv_pages;
  if (const std::string summary = runtime_limits_summary(*artifact, limits); !summary.empty())
    log << "telos-run: " << summary << "\n";
  if (choice == EngineChoice::Cpu)
    return std::make_unique<CpuReferenceModel>(std::move(artifact), kv_pages);

  std::string why_not;
  const std::optional<GpuDevice> gpu = detect_gpu(&why_not);
  if (gpu) why_not = gpu_engine_unavailable(*artifact, *gpu);
  if (why_not.empty()) {
    if (choice == EngineChoice::Auto)
      log << "telos-run: using the GPU engine on GPU 0 (" << gpu->name << ", " << gpu->arch << ")"
          << (artifact->ranks() > 1
                  ? ", " + std::to_string(artifact->ranks()) + " tensor-parallel ranks"
                  : std::string())
          << "\n";
    return gpu_backend_factory()(std::move(artifact), *gpu, resolved);
  }
  if (choice == EngineChoice::Gpu) fail("--engine gpu: " + why_not + "; use --engine cpu");
  log << "telos-run: " << why_not << "; using the CPU reference engine\n";
  return std::make_unique<CpuReferenceModel>(std::move(artifact), kv_pages);
}

}  // namespace telos::exec
