#pragma once
// The GPU engine for a tensor-parallel artifact (docs/multi-gpu.md): its N ranks, each a
// GpuStepExecutor on its device with its own weights (weights.rank{r}.bin), KV pool (its KV
// heads), arena and captured graphs, driven as one ModelBackend by the engine's one scheduler.
//
// A step goes to every rank: each packs the same descriptor and launches the same bucket's graph,
// in rank order from the engine's thread (the all-reduce's barriers need every rank to run the
// same launches in the same order). The LM head is replicated, so every rank computes logits of
// the same bits and its sample kernel draws the same tokens from the same seeds and positions: no
// token crosses between ranks. wait() returns rank 0's tokens and logits and refuses a step whose
// ranks picked different tokens.
//
// Load: peer access between every pair of the ranks' devices (cudaDeviceEnablePeerAccess), then
// every rank loads on its own thread (the weight uploads run side by side), taking rank 0's KV
// pool size and the others' arena addresses (the `peer:NAME` tables) through a RankExchange.
//
// Large all-reduces (the launch programs' collective entries, docs/artifact.md) run on NCCL where
// each rank has its own GPU: before the ranks load, the group creates one communicator a rank
// (NcclGroup), and each rank captures its ncclAllGather into its graphs on its own load thread, so
// the ranks' first collective, which connects them, is reached by all at once and no group call
// has to span them. Ranks sharing a device (NCCL refuses two ranks on one), a machine without
// libnccl.so.2 (said in one log line) and TELOS_NCCL=0 run each entry's fallback, our kernel.
//
// The one-device test mode (TELOS_TP_ONE_DEVICE=1, backend_selection.hpp) places every rank on
// one GPU, each with its own memory, streams and graphs; the all-reduce reads the other ranks'
// buffers through plain device pointers. Graphs of several ranks then share the GPU, and a rank's
// all-reduce spins until every rank's has arrived (kernels/all_reduce.cuh), so the other ranks'
// kernels before theirs must find room to run beside the spinning blocks. With programmatic
// dependent launch a kernel's successor becomes resident as soon as the kernel starts (pdl_entry)
// and waits there, and a large successor grid fills every free slot of the GPU: a rank whose
// all-reduce spins could then keep the other ranks from reaching theirs. So ranks sharing a
// device launch in plain stream order (GpuExecutorOptions::programmatic_launch): the only blocks
// that wait on another rank are the all-reduces' (at most kAllReduceMaxBlocks of 256 threads a
// rank, a small part of one GPU), and every other kernel runs to its end on the rest. The mode
// relies on the GPU running two streams' kernels side by side, which a tool that serializes
// kernels (compute-sanitizer) does not: it would hang at the first all-reduce.
#include <memory>
#include <vector>

#include "executor/gpu/gpu_step_executor.hpp"

namespace telos::exec {

class GpuRankGroup : public ModelBackend {
 public:
  // Rank r on devices[r] (one entry a rank); `options` apply to every rank (device, rank and the
  // exchange are set per rank; only rank 0 writes the load log).
  GpuRankGroup(std::shared_ptr<const Artifact> artifact, std::vector<int> devices,
               GpuExecutorOptions options);
  ~GpuRankGroup() override;

  int num_kv_pages() const override;
  int vocab_size() const override;
  std::string name() const override { return "gpu"; }
  int ranks() const { return static_cast<int>(ranks_.size()); }
  GpuStepExecutor& rank(int r) { return *ranks_[static_cast<std::size_t>(r)]; }

  void forward(const Step& step, std::vector<float>& logits) override;
  bool samples_on_device() const override { return true; }
  bool draws_on_device() const override { return true; }
  bool feeds_sampled_tokens() const override;
  void launch(const Step& step, std::span<const std::uint8_t> device_picks,
              std::span<const DeviceSampling> device_sampling, bool want_logits) override;
  void wait(StepOutput& out) override;
  void set_step_timing(bool on) override;

  // GpuStepExecutor::run over every rank: `sampling` is indexed like step.sequences; `tokens` and
  // `logits` are rank 0's.
  void run(const Step& step, std::span<const DeviceSampling> sampling,
           std::vector<std::int32_t>& tokens, std::vector<float>* logits);

 private:
  // Before the ranks: their graphs, which captured its operations, go first (NcclGroup).
  std::unique_ptr<NcclGroup> nccl_;
  std::vector<std::unique_ptr<GpuStepExecutor>> ranks_;
  StepOutput other_;  // a rank's output past rank 0's, reused
};

// The GPU engine for `artifact` on options.device: a GpuStepExecutor for one rank, a GpuRankGroup
// over rank_devices(artifact, options.device) for several.
std::unique_ptr<ModelBackend> make_gpu_engine(std::shared_ptr<const Artifact> artifact,
                                              GpuExecutorOptions options);

}  // namespace telos::exec
