#pragma once
// Which engine runs an artifact: the GPU engine when a supported GPU is present and the artifact
// has kernels for it, the CPU reference engine otherwise. Shared by every telos-run subcommand
// (generate, serve, bench) so that they choose, and explain their choice, the same way.
#include <functional>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "executor/artifact.hpp"
#include "executor/model_backend.hpp"
#include "executor/runtime_limits.hpp"

namespace telos::exec {

enum class EngineChoice { Auto, Cpu, Gpu };

struct GpuDevice {
  int index = 0;
  std::string name;
  std::string arch;  // "sm_90" for compute capability 9.0
  int count = 1;     // the CUDA devices this process sees
};

// The environment variable of the one-device test mode: set to 1, every rank of a
// tensor-parallel artifact runs on GPU 0, each with its own memory (docs/multi-gpu.md).
inline constexpr const char* kTensorParallelOneDeviceEnv = "TELOS_TP_ONE_DEVICE";
bool tensor_parallel_one_device();

// The environment variable that keeps NCCL out of a tensor-parallel artifact's run: set to 0, the
// large all-reduces run each collective entry's fallback, our kernel (docs/multi-gpu.md).
inline constexpr const char* kNcclEnv = "TELOS_NCCL";
bool nccl_enabled();

// The device of each rank of `artifact`: rank r on GPU first + r, or every rank on `first` in the
// one-device test mode. One entry for a one-rank artifact.
std::vector<int> rank_devices(const Artifact& artifact, int first);

// Why the GPU engine cannot place `artifact`'s ranks on `gpu_count` GPUs ("" when it can): a
// tensor-parallel artifact (serving.tensor_parallel N) needs N GPUs, one a rank, unless the
// one-device test mode puts them all on GPU 0. The CPU reference engine runs such an artifact
// anywhere, every rank simulated.
std::string gpu_engine_refusal(const Artifact& artifact, int gpu_count);

// The first CUDA device, or nullopt with `why_not` saying why (no driver, no device), asked of
// the CUDA runtime so that a machine without a GPU or driver answers instead of failing.
std::optional<GpuDevice> detect_gpu(std::string* why_not);

// The GPU engine lives in its own library (executor/gpu/, which links this one), so a program
// that links it hands its constructor in here at start-up; make_backend then uses it.
// `limits`: the runtime limits, resolved (resolve_runtime_limits): the pool's pages (0: the
// artifact's memory fraction), the sequences and the prompt tokens a step.
using GpuBackendFactory = std::function<std::unique_ptr<ModelBackend>(
    std::shared_ptr<const Artifact> artifact, const GpuDevice& device,
    const RuntimeLimits& limits)>;
void register_gpu_backend(GpuBackendFactory factory);

// Artifact::load(dir) for a subcommand that then calls make_backend(…, choice, …): unless choice
// is Cpu, a second thread meanwhile starts the CUDA driver and GPU 0's context (~0.1-0.3 s that
// the GPU engine's load would otherwise wait for after the checksums).
std::shared_ptr<const Artifact> load_artifact(const std::string& dir, EngineChoice choice);

// Builds the backend for `choice`. Auto takes the GPU engine when GPU 0 is supported, the
// artifact has kernels for it and a GPU engine is registered, else the CPU reference engine, and
// says on `log` which it took and why. Throws telos::Error when --engine gpu cannot be honoured
// (no GPU, the artifact targets another architecture, no kernels, no GPU engine in this build).
// `limits` (the same the engine then takes, EngineOptions::limits) are checked against the
// artifact first, said on `log` when any is set, and the backend's KV pool takes their kv_pages.
std::unique_ptr<ModelBackend> make_backend(std::shared_ptr<const Artifact> artifact,
                                           EngineChoice choice, std::ostream& log,
                                           const RuntimeLimits& limits = {});

}  // namespace telos::exec
