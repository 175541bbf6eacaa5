#pragma once
// What executes a step's forward pass: the CPU reference engine or the GPU engine. The engine
// loop owns scheduling and sampling; a backend owns the KV cache memory and the arithmetic.
//
// A step is started with launch() and its results collected with wait(), so that the engine can
// do host work (delivering the previous step's events, taking new submissions) while a GPU runs
// the step. The scheduler hands out steps whose page tables and token spans stay valid until
// commit, which comes after wait(). A backend that computes on the host (the CPU reference
// engine) keeps the default pair: launch() only remembers the step and wait() runs forward().
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "executor/scheduler.hpp"

namespace telos::exec {

// The host's time in one step's device API launch calls, by call group, and the bytes of its
// descriptor upload (to see which of them grows with the batch). Negative when unknown (no
// device). The four times add up to StepOutput::launch_call_seconds. The bench's idle-gap events
// (timing on) are not a step's calls in production: their time is apart, in timing_seconds, and in
// none of the others nor in the step's host time.
struct LaunchCallTimes {
  double upload_seconds = -1;        // the descriptor's H2D copy and the event recorded after it
  double wait_seconds = -1;          // the main stream's wait for that event
  double graph_launch_seconds = -1;  // the graph launch, or the kernel launches without graphs
  double other_seconds = -1;         // the logits' copy back, the step's event
  double timing_seconds = -1;        // the bench's two idle-gap events (0 with timing off)
  std::int64_t upload_bytes = -1;
};

// A sampling row's parameters when the device picks its token (samples_on_device): the subset of
// SamplingParams that codegen/kernels/sample.cuh implements. Temperature 0 is greedy; otherwise
// the draw is a function of the seed and the position being sampled.
struct DeviceSampling {
  float temperature = 0.f;  // 0: greedy
  float top_p = 1.f;
  float min_p = 0.f;
  int top_k = 0;
  std::uint64_t seed = 0;
};

// What wait() hands back for one step.
struct StepOutput {
  // One entry per sampling row (sequences with `samples` set, in step order): the token the
  // device picked when the launch asked for it for that row, else -1.
  std::vector<std::int32_t> device_tokens;
  // The vocab_size logits of every sampling row, in step order, when the launch wanted them.
  std::vector<float> logits;
  // Seconds the device sat idle between the end of the previous step's computation and the start
  // of this one's; negative when unknown (no device, timing off, or no previous step).
  double idle_gap_seconds = -1;
  // Seconds the host spent in the device API calls that launched this step (descriptor copy,
  // graph launch, copies back, events and the streams' waits on them); negative when unknown.
  // Part of the engine's host time.
  double launch_call_seconds = -1;
  LaunchCallTimes launch_calls;  // launch_call_seconds by call group
};

class ModelBackend {
 public:
  virtual ~ModelBackend() = default;

  // How many KV pages this backend holds; the engine sizes its page pool to match.
  virtual int num_kv_pages() const = 0;
  virtual int vocab_size() const = 0;
  // "cpu" or "gpu", for logs and stats.
  virtual std::string name() const = 0;

  // Computes every token of `step`, writing its K and V into the pages its page table names.
  // For each sequence with `samples` set, in step order, appends the vocab_size logits of its
  // last token to `logits` (which it first clears). Throws telos::Error on failure; the engine
  // then fails the requests of this step and keeps serving.
  virtual void forward(const Step& step, std::vector<float>& logits) = 0;

  // True when launch() can pick greedy tokens on the device (then only those tokens, not the
  // logits, need to come back to the host).
  virtual bool samples_on_device() const { return false; }
  // True when it can also draw them at a temperature, with top_k, top_p or min_p (DeviceSampling).
  virtual bool draws_on_device() const { return false; }

  // True when launch() takes a step while the previous one is still in flight, and a token id
  // -(r+1) in it stands for the token the device sampled in row r of the previously launched step
  // (which then asked for no logits and for a greedy token in every row). The engine uses that to
  // schedule and launch step N+1 before step N's tokens reach the host (engine.hpp). Such a
  // backend reads `step` only inside launch(): the engine's bookkeeping changes what its spans
  // point at before wait().
  virtual bool feeds_sampled_tokens() const { return false; }

  // Starts `step`. `device_picks` has one entry per sampling row: nonzero asks the device for
  // that row's token, drawn with that row's `device_sampling` entry (greedy unless
  // draws_on_device(); only honoured when samples_on_device()). `want_logits` asks for the logits
  // of every sampling row; it must be set when any row is sampled on the host. Throws like
  // forward(); at most one step is in flight, two with feeds_sampled_tokens(), and wait() collects
  // them in launch order.
  virtual void launch(const Step& step, std::span<const std::uint8_t> /*device_picks*/,
                      std::span<const DeviceSampling> /*device_sampling*/, bool /*want_logits*/) {
    launched_ = &step;
  }
  // Waits for the launched step. Throws like forward().
  virtual void wait(StepOutput& out) {
    const Step* step = launched_;
    launched_ = nullptr;
    out.idle_gap_seconds = -1;
    out.launch_call_seconds = -1;
    out.launch_calls = {};
    forward(*step, out.logits);
    out.device_tokens.clear();
  }

  // Device timing of idle gaps between steps (telos-run bench): costs an event record or two per
  // step, so it is off unless asked for. Backends without a device ignore it.
  virtual void set_step_timing(bool /*on*/) {}

 private:
  const Step* launched_ = nullptr;
};

}  // namespace telos::exec
