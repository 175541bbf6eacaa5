#pragma once
// The GPU step executor: runs an artifact's compiled kernels on one CUDA device.
//
// Load: check the artifact targets this device, load kernels/<arch>.cubin (CUDA runtime library
// API, so nothing links libcuda and binaries start on machines without a driver), carve weights,
// the KV page pool, the activation arena and two step descriptors from one cudaMalloc, upload the
// weights through two pinned staging buffers (the copy of one overlaps the filling of the other;
// the mapped weights.bin pages are dropped behind, so host memory stays small), and capture two
// CUDA graphs per bucket of the manifest's launch programs (one per step parity), largest first.
// A step: pack the step descriptor (token ids, positions, page tables, sampling parameters) in
// pinned memory, one H2D copy and an event on an upload stream, then on the main stream a wait for
// it, one graph launch (its sample kernel writes the tokens straight into the step's mapped pinned
// buffer: no copy back) and one event (after a D2H copy of the logits when asked). Steps alternate
// between two device descriptors (step parity, docs/artifact.md), so the upload runs beside the
// other step's graph and the main stream holds nothing between two steps' graphs. launch() returns once that is queued;
// wait() waits for the oldest step's event. Two steps may be in flight, each with its own pinned
// descriptor and tokens, and a token -(r+1) of the second is the first's sampled row r, read on
// the device (feeds_sampled_tokens). Nothing about kernels is decided at run time: the launch
// programs are codegen's (docs/artifact.md, "Kernels").
#include <cstdint>
#include <iosfwd>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "executor/artifact.hpp"
#include "executor/gpu/rank_exchange.hpp"
#include "executor/gpu/step_descriptor.hpp"
#include "executor/model_backend.hpp"
#include "executor/scheduler.hpp"

namespace telos::exec {

class NcclGroup;

struct GpuExecutorOptions {
  int device = 0;
  int kv_pages = 0;         // 0: the artifact's kv_pool (pages, or memory fraction)
  // A runtime max_batch and prefill chunk (RuntimeLimits): buckets no step can then choose are
  // neither loaded nor captured (bucket_reachable); 0: every bucket.
  int max_batch = 0, prefill_chunk = 0;
  bool use_graphs = true;   // false: launch kernel by kernel (for debugging tools)
  // Where the load log goes (graph capture times and memory, the memory report); null: nowhere.
  std::ostream* log = nullptr;
  bool progress = false;  // a weight upload progress line on `log` (when it is a terminal)
  // A tensor-parallel artifact's rank (GpuRankGroup, docs/multi-gpu.md): its index, which picks
  // its weight file and its `rank` argument, and the exchange through which the ranks loading
  // beside it share the KV pool size and their arena buffers (`peer:NAME`). Null for one rank.
  int rank = 0;
  RankExchange* ranks = nullptr;
  // Programmatic dependent launch between a step's kernels (launch_all). Ranks that share one
  // device launch in plain stream order instead (GpuRankGroup, the one-device test mode).
  bool programmatic_launch = true;
  // The communicators of the rank group (GpuRankGroup, one a rank on its own GPU): the launch
  // programs' collective entries are captured on them (ncclAllGather) and followed by their `then`
  // launches. Null, or without graphs: every collective entry's fallback launches instead.
  const NcclGroup* nccl = nullptr;
};

// One launch of a step's program and its time (profile_step).
struct KernelTime {
  std::string instance;  // the kernel table's instance, e.g. telos_kernels::rmsnorm<...>
  double us = 0;
};
struct StepProfile {
  std::string bucket;  // e.g. decode:1
  double graph_us = 0;     // the bucket's graph (programmatic launches), median
  double serial_us = 0;    // the sum of `launches`
  double launch_host_us = 0;  // the host's time in cudaGraphLaunch (the launches without graphs), median
  std::vector<KernelTime> launches;  // in launch order, each timed alone, median
};

class GpuStepExecutor : public ModelBackend {
 public:
  GpuStepExecutor(std::shared_ptr<const Artifact> artifact, GpuExecutorOptions options = {});
  ~GpuStepExecutor() override;
  GpuStepExecutor(const GpuStepExecutor&) = delete;
  GpuStepExecutor& operator=(const GpuStepExecutor&) = delete;

  int num_kv_pages() const override;
  int vocab_size() const override;
  std::string name() const override { return "gpu"; }

  // ModelBackend: forward() brings back the logits of every sampling sequence for the engine's
  // sampler; launch()/wait() bring back only the tokens picked on the device (greedy or drawn by
  // the sample kernel) unless the logits are wanted.
  void forward(const Step& step, std::vector<float>& logits) override;
  bool samples_on_device() const override { return true; }
  bool draws_on_device() const override { return true; }
  // When the artifact's embed_gather launches read `sampled` (docs/artifact.md).
  bool feeds_sampled_tokens() const override;
  void launch(const Step& step, std::span<const std::uint8_t> device_picks,
              std::span<const DeviceSampling> device_sampling, bool want_logits) override;
  void wait(StepOutput& out) override;
  void set_step_timing(bool on) override;

  // Runs `step` and samples on the GPU: `tokens` gets one token per sequence with `samples` set,
  // in step order, drawn with that sequence's `sampling` entry (indexed like step.sequences).
  // With `logits` non-null it also gets those rows' logits.
  void run(const Step& step, std::span<const DeviceSampling> sampling,
           std::vector<std::int32_t>& tokens, std::vector<float>* logits);

  // Bytes of device memory by use, and the KV pool size in tokens, one line each: weights, KV
  // pool, activation arena, step descriptors, graphs, and everything this
  // executor took beyond weights, KV pool and arena (graphs, kernels, descriptors, allocation
  // rounding).
  std::string memory_report() const;

  // Diagnostics (telos-run bench --profile). While keeping is on, the first step of each bucket
  // leaves a copy of its descriptor. profile_step() then takes the largest decode bucket kept
  // (else the largest prefill bucket), uploads that descriptor to parity 0's copy, replays it
  // `reps` times as its graph and `reps` times kernel by kernel with events between the launches
  // (plain stream order: no overlap), returns the medians and forgets what was kept. A replay
  // only rewrites what the step wrote (activations, KV entries at the step's positions, whose
  // requests have ended by then). Call only while no step is in flight.
  void keep_step_descriptors(bool on);
  StepProfile profile_step(int reps);

 private:
  struct State;
  std::unique_ptr<State> s_;
};

}  // namespace telos::exec
