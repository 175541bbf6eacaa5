#include "executor/gpu/gpu_rank_group.hpp"

#include <cuda_runtime.h>

#include <exception>
#include <mutex>
#include <ostream>
#include <set>
#include <thread>

#include "executor/backend_selection.hpp"
#include "executor/gpu/nccl_library.hpp"
#include "support/error.hpp"

namespace telos::exec {
namespace {

void check(cudaError_t e, const std::string& what) {
  if (e != cudaSuccess) fail("gpu engine: " + what + ": " + cudaGetErrorString(e));
}

// Every device of the group reads every other's memory (the all-reduce's peer tables).
void enable_peer_access(const std::vector<int>& devices) {
  const std::set<int> distinct(devices.begin(), devices.end());
  for (int a : distinct)
    for (int b : distinct) {
      if (a == b) continue;
      int can = 0;
      check(cudaDeviceCanAccessPeer(&can, a, b), "peer access query");
      if (!can)
        fail("gpu engine: GPU " + std::to_string(a) + " cannot access GPU " + std::to_string(b) +
             "'s memory: the tensor-parallel all-reduce reads every rank's partial over peer "
             "memory (NVLink or PCIe peer access)");
      check(cudaSetDevice(a), "select device " + std::to_string(a));
      const cudaError_t e = cudaDeviceEnablePeerAccess(b, 0);
      if (e == cudaErrorPeerAccessAlreadyEnabled)
        cudaGetLastError();  // clears it: enabled before is what we want
      else
        check(e, "peer access from GPU " + std::to_string(a) + " to GPU " + std::to_string(b));
    }
}

bool has_collectives(const Artifact& artifact) {
  for (const LaunchPrograms& set : artifact.kernel_sets())
    for (const ProgramBucket& b : set.buckets)
      for (const ProgramLaunch& l : b.launches)
        if (l.collective != Collective::none) return true;
  return false;
}

// The ranks' communicators where the artifact has collectives and each rank has its own GPU;
// null (the fallbacks), with a log line saying why, where TELOS_NCCL=0 or libnccl.so.2 is missing.
std::unique_ptr<NcclGroup> make_nccl_group(const Artifact& artifact,
                                           const std::vector<int>& devices, bool shared,
                                           std::ostream* log) {
  if (shared || !has_collectives(artifact)) return nullptr;
  auto say = [&](const std::string& line) {
    if (log) *log << "telos-run: " << line << "\n";
  };
  if (!nccl_enabled()) {
    say(std::string(kNcclEnv) + "=0: the large all-reduces run our kernels, not NCCL");
    return nullptr;
  }
  try {
    NcclLibrary::get();
  } catch (const Error& e) {
    say(std::string(e.what()) + ": the large all-reduces run our kernels instead");
    return nullptr;
  }
  auto group = std::make_unique<NcclGroup>(devices);
  say("NCCL " + std::to_string(NcclLibrary::get().version()) +
      ": the large all-reduces are its all-gathers");
  return group;
}

}  // namespace

GpuRankGroup::GpuRankGroup(std::shared_ptr<const Artifact> artifact, std::vector<int> devices,
                           GpuExecutorOptions options) {
  const int n = artifact->ranks();
  if (static_cast<int>(devices.size()) != n)
    fail("gpu engine: " + std::to_string(devices.size()) + " devices for the " + std::to_string(n) +
         " tensor-parallel ranks of " + artifact->dir());
  enable_peer_access(devices);
  const bool shared = std::set<int>(devices.begin(), devices.end()).size() < devices.size();
  nccl_ = make_nccl_group(*artifact, devices, shared, options.log);
  RankExchange exchange(n);
  ranks_.resize(static_cast<std::size_t>(n));
  std::mutex failure_mutex;
  std::exception_ptr failure;  // the first rank's to fail: the others then fail waiting for it
  {
    std::vector<std::jthread> loads;
    for (int r = 0; r < n; ++r)
      loads.emplace_back([&, r] {
        GpuExecutorOptions o = options;
        o.device = devices[static_cast<std::size_t>(r)];
        o.rank = r;
        o.ranks = &exchange;
        o.programmatic_launch = options.programmatic_launch && !shared;
        o.nccl = nccl_.get();
        if (r > 0) o.log = nullptr, o.progress = false;
        try {
          ranks_[static_cast<std::size_t>(r)] = std::make_unique<GpuStepExecutor>(artifact, o);
        } catch (...) {
          {
            std::lock_guard lock(failure_mutex);
            if (!failure) failure = std::current_exception();
          }
          exchange.abandon();
        }
      });
  }
  if (failure) std::rethrow_exception(failure);
  if (options.log)
    *options.log << "telos-run: " << n << " tensor-parallel ranks on "
                 << (shared ? "one GPU (the one-device test mode, " +
                                  std::string(kTensorParallelOneDeviceEnv) + "=1)"
                            : std::to_string(n) + " GPUs")
                 << "\n";
}

GpuRankGroup::~GpuRankGroup() = default;

int GpuRankGroup::num_kv_pages() const {
  return ranks_[0]->num_kv_pages();
}
int GpuRankGroup::vocab_size() const {
  return ranks_[0]->vocab_size();
}
bool GpuRankGroup::feeds_sampled_tokens() const {
  return ranks_[0]->feeds_sampled_tokens();
}

void GpuRankGroup::forward(const Step& step, std::vector<float>& logits) {
  launch(step, {}, {}, true);
  StepOutput out;
  wait(out);
  logits = std::move(out.logits);
}

void GpuRankGroup::launch(const Step& step, std::span<const std::uint8_t> device_picks,
                          std::span<const DeviceSampling> device_sampling, bool want_logits) {
  // Only rank 0's logits come back: every rank's are the same bits.
  for (std::size_t r = 0; r < ranks_.size(); ++r)
    ranks_[r]->launch(step, device_picks, device_sampling, want_logits && r == 0);
}

void GpuRankGroup::wait(StepOutput& out) {
  // Every rank's step is collected, even after one fails, so that none stays in flight.
  std::exception_ptr failure;
  std::string differ;
  auto collect = [&](GpuStepExecutor& rank, StepOutput& into) {
    try {
      rank.wait(into);
    } catch (...) {
      if (!failure) failure = std::current_exception();
    }
  };
  collect(*ranks_[0], out);
  for (std::size_t r = 1; r < ranks_.size(); ++r) {
    collect(*ranks_[r], other_);
    if (failure || !differ.empty()) continue;
    for (std::size_t i = 0; i < out.device_tokens.size() && differ.empty(); ++i)
      if (other_.device_tokens.at(i) != out.device_tokens[i])
        differ = "gpu engine: tensor-parallel rank " + std::to_string(r) + " picked token " +
                 std::to_string(other_.device_tokens[i]) + " for sampling row " +
                 std::to_string(i) + " where rank 0 picked " +
                 std::to_string(out.device_tokens[i]) + ": the ranks' logits differ";
  }
  if (failure) std::rethrow_exception(failure);
  if (!differ.empty()) fail(differ);
}

void GpuRankGroup::run(const Step& step, std::span<const DeviceSampling> sampling,
                       std::vector<std::int32_t>& tokens, std::vector<float>* logits) {
  std::vector<DeviceSampling> rows;
  for (std::size_t i = 0; i < step.sequences.size(); ++i)
    if (step.sequences[i].samples) rows.push_back(sampling[i]);
  const std::vector<std::uint8_t> picks(rows.size(), 1);
  launch(step, picks, rows, logits != nullptr);
  StepOutput out;
  wait(out);
  tokens = std::move(out.device_tokens);
  if (logits) *logits = std::move(out.logits);
}

void GpuRankGroup::set_step_timing(bool on) {
  for (auto& r : ranks_) r->set_step_timing(on);
}

std::unique_ptr<ModelBackend> make_gpu_engine(std::shared_ptr<const Artifact> artifact,
                                              GpuExecutorOptions options) {
  if (artifact->ranks() == 1)
    return std::make_unique<GpuStepExecutor>(std::move(artifact), options);
  std::vector<int> devices = rank_devices(*artifact, options.device);
  return std::make_unique<GpuRankGroup>(std::move(artifact), std::move(devices), options);
}

}  // namespace telos::exec
