// The engine on the CPU reference backend, on hand-written artifacts: results do not depend on
// batch composition, chunking or preemption; cancellation and rejection behave; pages come back.
#include "executor/engine.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <condition_variable>
#include <deque>
#include <functional>
#include <iostream>
#include <mutex>
#include <random>
#include <thread>

#include "executor/backend_selection.hpp"
#include "executor/cpu_reference_model.hpp"
#include "support/error.hpp"
#include "test/executor/tiny_artifact.hpp"

namespace telos::exec {
namespace {

using testing::TinyArtifactSpec;

struct Result {
  std::vector<std::int32_t> ids;
  std::vector<float> prompt_logits;
  FinishReason finish = FinishReason::Error;
  RequestTimings timings;
  RequestUsage usage;
  int first_token_cached_tokens = -1;  // usage.cached_tokens of the first token event
};

Result collect(const RequestHandle& h) {
  Result r;
  RequestEvent e;
  while (h->next(e)) {
    if (e.token && r.ids.empty()) r.first_token_cached_tokens = e.usage.cached_tokens;
    if (e.token) r.ids.push_back(e.token->token);
    if (!e.logits.empty()) r.prompt_logits = e.logits;
    if (e.finish) {
      r.finish = *e.finish;
      r.timings = e.timings;
      r.usage = e.usage;
    }
  }
  return r;
}

// A tiny artifact written to a fresh temporary directory `name`, loaded.
std::shared_ptr<const Artifact> tiny_artifact(const TinyArtifactSpec& spec, const std::string& name) {
  const std::string dir = testing::temp_dir(name);
  testing::write_tiny_artifact(dir, spec);
  return Artifact::load(dir);
}

// Every test engine checks the page pool and scheduler invariants after each step.
EngineOptions checked_options() {
  EngineOptions options;
  options.check_invariants = true;
  return options;
}

std::unique_ptr<Engine> make_engine(const TinyArtifactSpec& spec, const std::string& name) {
  auto artifact = tiny_artifact(spec, name);
  return Engine::create(artifact, std::make_unique<CpuReferenceModel>(artifact), checked_options());
}

GenerationRequest request(std::vector<std::int32_t> prompt, int max_tokens, float temperature,
                          std::uint64_t seed) {
  GenerationRequest r;
  r.prompt = std::move(prompt);
  r.sampling.max_tokens = max_tokens;
  r.sampling.temperature = temperature;
  r.sampling.seed = seed;
  r.sampling.ignore_eos = true;
  r.return_prompt_logits = true;
  return r;
}

const std::vector<std::vector<std::int32_t>> kPrompts = {
    {1, 17, 42, 33, 25, 7}, {5}, {30, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40, 41,
                                  42, 43, 44, 45, 46, 47, 48, 49, 50, 51, 52}};

std::vector<Result> run_all(Engine& engine, float temperature) {
  std::vector<RequestHandle> handles;
  for (std::size_t i = 0; i < kPrompts.size(); ++i)
    handles.push_back(engine.submit(request(kPrompts[i], 12, temperature, 100 + i)));
  std::vector<Result> out;
  for (const RequestHandle& h : handles) out.push_back(collect(h));
  return out;
}

std::vector<Result> run_alone(Engine& engine, float temperature) {
  std::vector<Result> out;
  for (std::size_t i = 0; i < kPrompts.size(); ++i)
    out.push_back(collect(engine.submit(request(kPrompts[i], 12, temperature, 100 + i))));
  return out;
}

class EngineFamilies : public ::testing::TestWithParam<std::string> {
 protected:
  TinyArtifactSpec spec() const {
    TinyArtifactSpec s;
    s.family = GetParam();
    s.qkv_bias = s.family == "qwen2";
    s.qk_norm = s.family == "qwen3";
    s.tie_word_embeddings = s.family != "qwen3";
    s.rope_type = s.family == "llama" ? "llama3" : "default";
    return s;
  }
};

// The same requests alone and together: identical tokens and bit-identical prompt logits.
TEST_P(EngineFamilies, BatchCompositionChangesNothing) {
  auto engine = make_engine(spec(), "batch-" + GetParam());
  for (float temperature : {0.0f, 1.0f}) {
    const auto alone = run_alone(*engine, temperature);
    const auto together = run_all(*engine, temperature);
    for (std::size_t i = 0; i < kPrompts.size(); ++i) {
      EXPECT_EQ(alone[i].finish, FinishReason::Length);
      EXPECT_EQ(alone[i].ids.size(), 12u);
      EXPECT_EQ(alone[i].ids, together[i].ids) << "request " << i << " T=" << temperature;
      EXPECT_EQ(alone[i].prompt_logits, together[i].prompt_logits) << "request " << i;
    }
  }
}

// A stream whose reader comes only after the request has ended holds every event, and hands
// them over in order (the stream's storage drops read events as the reader catches up).
TEST(Engine, AReaderFarBehindGetsEveryEventInOrder) {
  TinyArtifactSpec spec;
  spec.max_seq_len = 256;
  spec.kv_pages = 128;
  auto engine = make_engine(spec, "late-reader");
  const Result live = collect(engine->submit(request({3, 1, 4}, 200, 0.0f, 1)));
  RequestHandle late = engine->submit(request({3, 1, 4}, 200, 0.0f, 1));
  engine->wait_idle();
  const Result buffered = collect(late);
  EXPECT_EQ(buffered.finish, FinishReason::Length);
  ASSERT_EQ(buffered.ids.size(), 200u);
  EXPECT_EQ(buffered.ids, live.ids);
}

// A prefill chunk of 4 tokens, and a pool so small that requests are preempted and recomputed,
// give the same tokens as one-step prefill with room to spare.
TEST_P(EngineFamilies, ChunkingAndPreemptionChangeNothing) {
  auto roomy = make_engine(spec(), "roomy-" + GetParam());
  TinyArtifactSpec tight = spec();
  tight.prefill_chunk = 4;
  tight.kv_pages = 10;  // 40 positions for three requests of up to 35
  auto cramped = make_engine(tight, "cramped-" + GetParam());
  for (float temperature : {0.0f, 1.0f}) {
    const auto want = run_all(*roomy, temperature);
    const auto got = run_all(*cramped, temperature);
    for (std::size_t i = 0; i < kPrompts.size(); ++i) EXPECT_EQ(want[i].ids, got[i].ids) << i;
  }
  EXPECT_GT(cramped->stats().preemptions, 0u);
  EXPECT_EQ(cramped->stats().kv_pages_used, 0);
}

INSTANTIATE_TEST_SUITE_P(Families, EngineFamilies, ::testing::Values("llama", "qwen2", "qwen3"));

TEST(Engine, StopsOnStopTokensAndEos) {
  auto engine = make_engine({}, "stop");
  // Find what greedy generates, then make its third token a stop token.
  const Result free_run = collect(engine->submit(request({4, 9, 12}, 8, 0.0f, 1)));
  ASSERT_EQ(free_run.ids.size(), 8u);
  GenerationRequest r = request({4, 9, 12}, 8, 0.0f, 1);
  r.sampling.stop_token_ids = {free_run.ids[2]};
  const std::size_t first = static_cast<std::size_t>(
      std::find(free_run.ids.begin(), free_run.ids.end(), free_run.ids[2]) - free_run.ids.begin());
  const Result stopped = collect(engine->submit(r));
  EXPECT_EQ(stopped.finish, FinishReason::Stop);
  EXPECT_EQ(stopped.ids,
            std::vector<std::int32_t>(free_run.ids.begin(),
                                      free_run.ids.begin() + static_cast<long>(first) + 1));
}

// The CPU reference model behind a gate: its first step passes, every later one waits while the
// gate is closed (it starts closed; close() closes it again). A cancel then lands mid-request
// whatever the machine's load (a tiny request otherwise finishes in about a millisecond, which a
// loaded CI machine can spend between two lines of the test).
class GatedAfterFirstStep : public CpuReferenceModel {
 public:
  using CpuReferenceModel::CpuReferenceModel;
  void forward(const Step& step, std::vector<float>& logits) override {
    if (steps_++ >= 1) {
      std::unique_lock lock(mutex_);
      opened_.wait(lock, [&] { return open_; });
    }
    CpuReferenceModel::forward(step, logits);
  }
  void open() {
    {
      std::lock_guard lock(mutex_);
      open_ = true;
    }
    opened_.notify_all();
  }
  void close() {
    std::lock_guard lock(mutex_);
    open_ = false;
  }

 private:
  std::atomic<int> steps_{0};
  std::mutex mutex_;
  std::condition_variable opened_;
  bool open_ = false;
};

TEST(Engine, CancelEndsARequestAndFreesItsPages) {
  auto artifact = tiny_artifact({}, "cancel");
  EngineOptions options = checked_options();
  auto backend = std::make_unique<GatedAfterFirstStep>(artifact);
  GatedAfterFirstStep* gate = backend.get();
  auto engine = Engine::create(artifact, std::move(backend), options);
  RequestHandle h = engine->submit(request({4, 9, 12}, 60, 1.0f, 3));
  RequestEvent e;
  ASSERT_TRUE(h->next(e));  // its first token: the engine now waits at the gate, mid-request
  ASSERT_TRUE(e.token.has_value());
  EXPECT_GT(engine->stats().kv_pages_used, 0);
  h->cancel();
  gate->open();
  const Result rest = collect(h);
  EXPECT_EQ(rest.finish, FinishReason::Cancelled);
  engine->wait_idle();
  const EngineStats stats = engine->stats();
  EXPECT_EQ(stats.kv_pages_used, 0);
  EXPECT_EQ(stats.kv_pages_free, stats.kv_pages_total);
  EXPECT_EQ(stats.running, 0);
  // Cancel by id, of a request that may still be queued (or held at its first step).
  gate->close();
  RequestHandle h2 = engine->submit(request({4}, 60, 1.0f, 4));
  engine->cancel(h2->id());
  gate->open();
  EXPECT_EQ(collect(h2).finish, FinishReason::Cancelled);
  engine->wait_idle();
  EXPECT_EQ(engine->stats().kv_pages_used, 0);
}

TEST(Engine, RejectsRequestsThatCanNeverRunWithClearErrors) {
  auto engine = make_engine({}, "reject");
  auto message = [&](GenerationRequest r) {
    try {
      engine->submit(std::move(r));
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("(accepted)");
  };
  EXPECT_NE(
      message(request({1, 64}, 4, 0, 1)).find("prompt token 1 is 64, outside the vocabulary of 64"),
      std::string::npos);
  EXPECT_NE(message(request(std::vector<std::int32_t>(60, 3), 8, 0, 1)).find("max_seq_len 64"),
            std::string::npos);
  GenerationRequest bad = request({1}, 4, 0, 1);
  bad.sampling.top_p = 2;
  EXPECT_NE(message(bad).find("top_p"), std::string::npos);
  EXPECT_EQ(engine->stats().requests_rejected, 3u);
  // Without max_tokens a request may run to max_seq_len.
  GenerationRequest open = request({1, 2}, 4, 0, 1);
  open.sampling.max_tokens.reset();
  const Result r = collect(engine->submit(open));
  EXPECT_EQ(r.finish, FinishReason::Length);
  EXPECT_EQ(r.ids.size(), 62u);
}

// A CPU backend that records the most sequences any step held, and the most tokens.
class CountingSequences : public CpuReferenceModel {
 public:
  using CpuReferenceModel::CpuReferenceModel;
  void forward(const Step& step, std::vector<float>& logits) override {
    most = std::max(most, static_cast<int>(step.sequences.size()));
    most_tokens = std::max(most_tokens, step.num_tokens);
    CpuReferenceModel::forward(step, logits);
  }
  int most = 0, most_tokens = 0;
};

// The message of the telos::Error `f` throws, or "(no error)".
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

// Runtime limits below the artifact's (4 sequences, 64 tokens, 64 pages of 4, 16-token chunks):
// the steps hold at most max_batch sequences and prefill_chunk tokens, requests past max_seq_len
// are refused naming the option, the pool has kv_pages pages, and every request's tokens are
// those of the engine without limits.
TEST(Engine, RuntimeLimitsBelowTheArtifactsHold) {
  auto artifact = tiny_artifact({}, "limits");
  EngineOptions options = checked_options();
  options.limits = {.max_batch = 1, .max_seq_len = 40, .kv_pages = 12, .prefill_chunk = 5};
  auto backend = make_backend(artifact, EngineChoice::Cpu, std::cerr, options.limits);
  EXPECT_EQ(backend->num_kv_pages(), 12);
  auto counting = std::make_unique<CountingSequences>(artifact, 12);
  CountingSequences* seen = counting.get();
  auto limited = Engine::create(artifact, std::move(counting), options);
  EXPECT_EQ(limited->max_batch(), 1);
  EXPECT_EQ(limited->max_seq_len(), 40);
  EXPECT_EQ(limited->stats().kv_pages_total, 12);
  auto unlimited = make_engine({}, "limits-none");
  EXPECT_EQ(unlimited->max_batch(), 4);
  const std::vector<Result> a = run_all(*limited, 1.0f), b = run_all(*unlimited, 1.0f);
  for (std::size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].finish, FinishReason::Length) << i;
    EXPECT_EQ(a[i].ids, b[i].ids) << "request " << i;
  }
  EXPECT_EQ(seen->most, 1);
  EXPECT_EQ(seen->most_tokens, 5);  // kPrompts[2]'s 23 tokens in chunks of 5
  // 23 prompt tokens + 20 pass the artifact's 64 but not 40.
  EXPECT_NE(error_of([&] {
              limited->submit(request(kPrompts[2], 20, 0, 1));
            }).find("the prompt of 23 tokens plus max_tokens 20 exceeds --max-seq-len 40"),
            std::string::npos);
  // Without max_tokens a request runs to the limit, not to the artifact's max_seq_len.
  GenerationRequest open = request({1, 2, 3, 4}, 4, 0, 1);
  open.sampling.max_tokens.reset();
  EXPECT_EQ(collect(limited->submit(open)).ids.size(), 36u);
  limited->wait_idle();
  EXPECT_EQ(limited->stats().kv_pages_used, 0);
}

TEST(Engine, RuntimeLimitsPastTheArtifactsAreRefused) {
  auto artifact = tiny_artifact({}, "limits-refused");
  auto refused = [&](RuntimeLimits limits) {
    return error_of([&] { resolve_runtime_limits(*artifact, limits); });
  };
  EXPECT_EQ(
      refused({.max_batch = 5}),
      "--max-batch 5 is above the artifact's serving.max_batch 4 (the most it was compiled for)");
  EXPECT_EQ(refused({.max_seq_len = 65}),
            "--max-seq-len 65 is above the artifact's serving.max_seq_len 64 (the most it was "
            "compiled for)");
  EXPECT_EQ(refused({.kv_pages = 65}),
            "--kv-pages 65 is above the artifact's serving.kv_pool.pages 64 (the most it was "
            "compiled for)");
  EXPECT_EQ(refused({.prefill_chunk = 17}),
            "--prefill-chunk 17 is above the artifact's serving.prefill_chunk 16 (the most it was "
            "compiled for)");
  EXPECT_EQ(refused({.max_batch = -1}), "--max-batch -1: expected at least 1");
  EXPECT_EQ(refused({.mixed_chunk = 17}),
            "--mixed-chunk 17 is above the prefill chunk, the artifact's prefill_chunk 16");
  EXPECT_EQ(refused({.prefill_chunk = 8, .mixed_chunk = 9}),
            "--mixed-chunk 9 is above the prefill chunk, --prefill-chunk 8");
  EXPECT_EQ(refused({.mixed_chunk = -2}), "--mixed-chunk -2: expected at least 1");
  EXPECT_EQ(refused({.max_batch = 4, .max_seq_len = 64, .kv_pages = 64}), "(no error)");
  const RuntimeLimits artifacts = resolve_runtime_limits(*artifact, {});
  EXPECT_EQ(artifacts.max_batch, 4);
  EXPECT_EQ(artifacts.max_seq_len, 64);
  EXPECT_EQ(artifacts.kv_pages, 0);  // the backend sizes the artifact's pool
  EXPECT_EQ(artifacts.prefill_chunk, 16);
  EXPECT_EQ(artifacts.mixed_chunk, 16);  // kDefaultMixedChunk, at most the prefill chunk
  EXPECT_EQ(resolve_runtime_limits(*artifact, {.mixed_chunk = 6}).mixed_chunk, 6);
  // The same checks guard the engine and the backend.
  EngineOptions options = checked_options();
  options.limits.max_batch = 5;
  EXPECT_NE(error_of([&] {
              Engine::create(artifact, std::make_unique<CpuReferenceModel>(artifact), options);
            }).find("--max-batch 5 is above"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              make_backend(artifact, EngineChoice::Cpu, std::cerr, options.limits);
            }).find("--max-batch 5 is above"),
            std::string::npos);
  // A pool chosen at start must hold one max_seq_len sequence (64 tokens: 16 pages), or the limits
  // would admit requests that can never run; a backend whose pool is not the limits' was built for
  // other limits.
  EXPECT_EQ(
      refused({.kv_pages = 15}),
      "--kv-pages 15 cannot hold one sequence of the artifact's max_seq_len 64 (16 pages of 4 "
      "positions): lower --max-seq-len or raise --kv-pages");
  EXPECT_EQ(refused({.max_seq_len = 61, .kv_pages = 15}),
            "--kv-pages 15 cannot hold one sequence of --max-seq-len 61 (16 pages of 4 positions): "
            "lower --max-seq-len or raise --kv-pages");
  options.limits = {.max_seq_len = 60, .kv_pages = 15};
  EXPECT_EQ(error_of([&] {
              Engine::create(artifact, std::make_unique<CpuReferenceModel>(artifact, 15), options);
            }),
            "(no error)");
  EXPECT_NE(error_of([&] {
              Engine::create(artifact, std::make_unique<CpuReferenceModel>(artifact, 20), options);
            }).find("KV pool has 20 pages where the runtime limits ask for 15"),
            std::string::npos);
}

TEST(Engine, ShutdownCancelsWhatIsLeft) {
  RequestHandle h;
  {
    auto engine = make_engine({}, "shutdown");
    engine->stop_admitting();
    EXPECT_THROW(engine->submit(request({1}, 4, 0, 1)), Error);
  }
  auto engine = make_engine({}, "shutdown2");
  h = engine->submit(request({1, 2, 3}, 60, 1.0f, 1));
  engine.reset();
  Result r = collect(h);
  EXPECT_TRUE(r.finish == FinishReason::Cancelled || r.finish == FinishReason::Length);
}

TEST(Engine, StatsCountRequestsAndTokens) {
  auto engine = make_engine({}, "stats");
  run_all(*engine, 0.0f);
  engine->wait_idle();
  const EngineStats s = engine->stats();
  EXPECT_EQ(s.backend, "cpu");
  EXPECT_EQ(s.requests_submitted, 3u);
  EXPECT_EQ(s.requests_finished, 3u);
  EXPECT_EQ(s.prompt_tokens, 6u + 1u + 23u);
  EXPECT_EQ(s.generated_tokens, 36u);
  EXPECT_EQ(s.waiting, 0);
  const LatencySamples l = engine->take_latency_samples();
  EXPECT_EQ(l.time_to_first_token.size(), 3u);
  EXPECT_EQ(l.time_per_output_token.size(), 3u);
  EXPECT_TRUE(engine->take_latency_samples().time_to_first_token.empty());
}

// A backend that fails any step containing token 63, and otherwise computes normally.
class FailingOnToken63 : public CpuReferenceModel {
 public:
  using CpuReferenceModel::CpuReferenceModel;
  void forward(const Step& step, std::vector<float>& logits) override {
    for (const ScheduledSequence& q : step.sequences)
      for (std::int32_t t : q.tokens)
        if (t == 63) fail("injected failure on token 63");
    CpuReferenceModel::forward(step, logits);
  }
};

TEST(Engine, ABackendFailureFailsItsRequestsAndTheEngineServesOn) {
  auto artifact = tiny_artifact({}, "failing");
  EngineOptions options = checked_options();
  auto engine = Engine::create(artifact, std::make_unique<FailingOnToken63>(artifact), options);
  RequestHandle bad = engine->submit(request({5, 63, 5}, 4, 0, 1));
  RequestEvent e, last;
  while (bad->next(e)) last = e;
  ASSERT_TRUE(last.finish.has_value());
  EXPECT_EQ(*last.finish, FinishReason::Error);
  EXPECT_NE(last.error.find("injected failure on token 63"), std::string::npos) << last.error;
  engine->wait_idle();
  EXPECT_EQ(engine->stats().kv_pages_used, 0);
  const Result good = collect(engine->submit(request({5, 6, 7}, 4, 0, 1)));
  EXPECT_EQ(good.finish, FinishReason::Length);
  EXPECT_EQ(good.ids.size(), 4u);
}

// A backend that samples greedy rows "on the device" the way the GPU engine does: launch() only
// queues, wait() computes, and the logits come back only when asked for (otherwise they are
// poisoned, so that an engine reading them would sample garbage).
class DeviceGreedy : public CpuReferenceModel {
 public:
  using CpuReferenceModel::CpuReferenceModel;
  bool samples_on_device() const override { return true; }
  void launch(const Step& step, std::span<const std::uint8_t> device_picks,
              std::span<const DeviceSampling>, bool want_logits) override {
    step_ = &step;
    greedy_.assign(device_picks.begin(), device_picks.end());
    want_logits_ = want_logits;
    bool all_greedy = true;
    for (std::uint8_t g : greedy_) all_greedy = all_greedy && g;
    EXPECT_TRUE(want_logits || all_greedy) << "a row sampled on the host needs the logits";
  }
  void wait(StepOutput& out) override {
    CpuReferenceModel::forward(*step_, out.logits);
    const auto vocab = static_cast<std::size_t>(vocab_size());
    out.device_tokens.assign(greedy_.size(), -1);
    for (std::size_t r = 0; r < greedy_.size(); ++r) {
      if (!greedy_[r]) continue;
      const auto row = out.logits.begin() + static_cast<std::ptrdiff_t>(r * vocab);
      out.device_tokens[r] =
          static_cast<std::int32_t>(std::max_element(row, row + static_cast<std::ptrdiff_t>(vocab)) - row);
      ++device_rows;
    }
    if (!want_logits_) std::fill(out.logits.begin(), out.logits.end(), std::nanf(""));
    out.idle_gap_seconds = 1e-6;
    // Launch call times as the GPU engine reports them, the bytes tied to the step so that a test
    // can tell each step's timing got its own step's figures.
    out.launch_call_seconds = 10e-6;
    LaunchCallTimes& c = out.launch_calls;
    c.upload_seconds = 1e-6, c.wait_seconds = 2e-6, c.graph_launch_seconds = 3e-6;
    c.other_seconds = 4e-6, c.timing_seconds = 0;
    c.upload_bytes = 64 * static_cast<std::int64_t>(step_->num_tokens);
  }
  int device_rows = 0;

 private:
  const Step* step_ = nullptr;
  std::vector<std::uint8_t> greedy_;
  bool want_logits_ = false;
};

// Greedy requests sampled on the device give the tokens host sampling gives; requests that need
// the logits (logprobs, penalties, prompt logits, sampled) still get them, in the same steps.
TEST(Engine, DeviceGreedySamplingMatchesHostSampling) {
  auto artifact = tiny_artifact({}, "device-greedy");
  EngineOptions options = checked_options();
  options.record_step_timings = true;
  auto host = Engine::create(artifact, std::make_unique<CpuReferenceModel>(artifact), options);
  auto device_backend = std::make_unique<DeviceGreedy>(artifact);
  DeviceGreedy* device_view = device_backend.get();
  auto device = Engine::create(artifact, std::move(device_backend), options);

  auto variants = [](std::size_t i) {
    std::vector<GenerationRequest> rs;
    GenerationRequest plain = request(kPrompts[i], 12, 0.0f, 1);
    plain.return_prompt_logits = false;
    rs.push_back(plain);                // greedy: on the device
    rs.push_back(request(kPrompts[i], 12, 0.0f, 1));  // prompt logits: first token on the host
    GenerationRequest lp = plain;
    lp.token_logprobs = true;           // logprobs: on the host
    rs.push_back(lp);
    GenerationRequest pen = plain;
    pen.sampling.repetition_penalty = 1.3f;  // penalties: on the host
    rs.push_back(pen);
    rs.push_back(request(kPrompts[i], 12, 1.0f, 7));  // sampled: on the host
    return rs;
  };
  for (std::size_t i = 0; i < kPrompts.size(); ++i) {
    std::vector<RequestHandle> h, d;
    for (GenerationRequest& r : variants(i)) h.push_back(host->submit(r));
    for (GenerationRequest& r : variants(i)) d.push_back(device->submit(r));
    for (std::size_t v = 0; v < h.size(); ++v) {
      const Result want = collect(h[v]), got = collect(d[v]);
      EXPECT_EQ(got.finish, FinishReason::Length);
      EXPECT_EQ(want.ids, got.ids) << "prompt " << i << " variant " << v;
      EXPECT_EQ(want.prompt_logits, got.prompt_logits) << "prompt " << i << " variant " << v;
    }
  }
  device->wait_idle();
  EXPECT_GT(device_view->device_rows, 0);
  const std::vector<StepTiming> timings = device->take_step_timings();
  ASSERT_FALSE(timings.empty());
  for (std::size_t i = 0; i < timings.size(); ++i) {
    const StepTiming& t = timings[i];
    EXPECT_GT(t.sequences, 0);
    EXPECT_GE(t.tokens, t.sequences);
    EXPECT_EQ(t.decode, t.tokens == t.sequences);
    EXPECT_GE(t.host_seconds, 0);
    EXPECT_EQ(t.idle_gap_seconds, 1e-6);
    EXPECT_EQ(t.launch_call_seconds, 10e-6);
    EXPECT_EQ(t.launch_calls.upload_seconds, 1e-6);
    EXPECT_EQ(t.launch_calls.wait_seconds, 2e-6);
    EXPECT_EQ(t.launch_calls.graph_launch_seconds, 3e-6);
    EXPECT_EQ(t.launch_calls.other_seconds, 4e-6);
    EXPECT_EQ(t.launch_calls.upload_bytes, 64 * t.tokens);
    if (i > 0) {
      EXPECT_GT(t.started, timings[i - 1].started);
    }
  }
  EXPECT_TRUE(device->take_step_timings().empty());
  EXPECT_EQ(device->stats().kv_pages_used, 0);
  // The reference backend has no device calls: its launch call figures say unknown.
  host->wait_idle();
  const std::vector<StepTiming> host_timings = host->take_step_timings();
  ASSERT_FALSE(host_timings.empty());
  for (const StepTiming& t : host_timings) {
    EXPECT_LT(t.launch_call_seconds, 0);
    EXPECT_LT(t.launch_calls.upload_seconds, 0);
    EXPECT_LT(t.launch_calls.graph_launch_seconds, 0);
    EXPECT_EQ(t.launch_calls.upload_bytes, -1);
  }
}

// A backend that feeds sampled tokens the way the GPU engine does (feeds_sampled_tokens): it takes
// a second step while one is in flight, copies what it needs at launch (the engine changes what a
// Step's spans point at before wait), and resolves a token -(r+1) to what row r of the step
// computed before it picked: greedy like the GPU's sample kernel, or, with `draws`, for a row with
// a temperature a draw that depends only on the row's logits, seed and position (Gumbel-max with
// hashed noise; top_k, top_p and min_p are not modelled). Overlapped steps and steps that wanted
// logits are counted.
class DeviceFed : public CpuReferenceModel {
 public:
  using CpuReferenceModel::CpuReferenceModel;
  bool samples_on_device() const override { return true; }
  bool draws_on_device() const override { return draws; }
  bool feeds_sampled_tokens() const override { return true; }
  void launch(const Step& step, std::span<const std::uint8_t> device_picks,
              std::span<const DeviceSampling> device_sampling, bool want_logits) override {
    EXPECT_LT(queue_.size(), 2u) << "a third step launched before the first was collected";
    if (!queue_.empty()) {
      ++overlapped_launches;
      EXPECT_FALSE(queue_.front().want_logits) << "overlapped a step whose logits are wanted";
    }
    logits_launches += want_logits ? 1 : 0;
    Launched l;
    l.greedy.assign(device_picks.begin(), device_picks.end());
    l.sampling.assign(device_sampling.begin(), device_sampling.end());
    l.want_logits = want_logits;
    l.step.num_tokens = step.num_tokens;
    l.step.bucket_kind = step.bucket_kind;
    l.step.bucket = step.bucket;
    for (const ScheduledSequence& seq : step.sequences) {
      l.tokens.emplace_back(seq.tokens.begin(), seq.tokens.end());
      l.pages.emplace_back(seq.page_table.begin(), seq.page_table.end());
      l.step.sequences.push_back(seq);
    }
    queue_.push_back(std::move(l));
  }
  void wait(StepOutput& out) override {
    if (before_wait) before_wait();
    Launched l = std::move(queue_.front());
    queue_.pop_front();
    for (std::size_t i = 0; i < l.step.sequences.size(); ++i) {
      for (std::int32_t& t : l.tokens[i]) {
        if (t >= 0) continue;
        const auto r = static_cast<std::size_t>(-t - 1);
        EXPECT_LT(r, sampled_.size()) << "a fed token names no row of the previous step";
        t = r < sampled_.size() ? sampled_[r] : 0;
        ++fed_tokens;
      }
      l.step.sequences[i].tokens = l.tokens[i];
      l.step.sequences[i].page_table = l.pages[i];
    }
    CpuReferenceModel::forward(l.step, out.logits);
    const auto vocab = static_cast<std::size_t>(vocab_size());
    sampled_.clear();
    out.device_tokens.assign(l.greedy.size(), -1);
    std::size_t r = 0;
    for (const ScheduledSequence& seq : l.step.sequences) {
      if (!seq.samples) continue;
      const auto row = out.logits.begin() + static_cast<std::ptrdiff_t>(r * vocab);
      const int position = seq.first_position + static_cast<int>(seq.tokens.size());
      const bool drawn = l.greedy[r] && draws && l.sampling[r].temperature > 0;
      sampled_.push_back(
          drawn ? draw(row, vocab, l.sampling[r], position)
                : static_cast<std::int32_t>(
                      std::max_element(row, row + static_cast<std::ptrdiff_t>(vocab)) - row));
      if (l.greedy[r]) out.device_tokens[r] = sampled_.back();
      ++r;
    }
    if (!l.want_logits) std::fill(out.logits.begin(), out.logits.end(), std::nanf(""));
  }
  int overlapped_launches = 0, fed_tokens = 0, logits_launches = 0;
  bool draws = false;
  std::function<void()> before_wait;  // on the engine's thread, while the next step may be in flight

 private:
  struct Launched {
    Step step;
    std::vector<std::vector<std::int32_t>> tokens;
    std::vector<std::vector<PageId>> pages;
    std::vector<std::uint8_t> greedy;  // per sampling row: the device picks
    std::vector<DeviceSampling> sampling;
    bool want_logits = false;
  };
  static std::int32_t draw(std::vector<float>::const_iterator logits, std::size_t vocab,
                           const DeviceSampling& s, int position) {
    std::int32_t best = 0;
    double best_v = -INFINITY;
    for (std::size_t i = 0; i < vocab; ++i) {
      std::uint64_t z =
          s.seed ^ (static_cast<std::uint64_t>(position) << 32) ^ (i * 0x9e3779b97f4a7c15ull);
      z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
      z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
      const double u = (static_cast<double>((z ^ (z >> 31)) >> 11) + 0.5) / 9007199254740992.0;
      const double v =
          logits[static_cast<std::ptrdiff_t>(i)] / s.temperature - std::log(-std::log(u));
      if (v > best_v) best_v = v, best = static_cast<std::int32_t>(i);
    }
    return best;
  }
  std::deque<Launched> queue_;
  std::vector<std::int32_t> sampled_;  // every row's greedy pick of the last step computed
};

// Randomized workloads on the synchronous engine and on the overlapped one: mixed prompt lengths
// and max_tokens, EOS and stop ids, some rows sampled on the host (which fall back to waiting),
// a pool small enough to preempt. Every request gets the same tokens and finish reason; cancelled
// ones a prefix of what the synchronous engine generates. No page is left behind, the scheduler
// invariant holds after every step, and the overlapped path is really taken.
TEST(Engine, OverlappedStepsMatchTheSynchronousEngine) {
  for (int kv_pages : {64, 12}) {
    TinyArtifactSpec spec;
    spec.kv_pages = kv_pages;
    // Cancellations land from the backend's wait(), so that they find requests with a step in
    // flight whatever the machine's speed: each counts down the waits until its cancel().
    std::mutex cancel_mutex;
    std::vector<std::pair<RequestHandle, int>> cancels;
    auto artifact = tiny_artifact(spec, "overlap");
    EngineOptions options = checked_options();
    options.record_step_timings = true;
    auto sync = Engine::create(artifact, std::make_unique<CpuReferenceModel>(artifact), options);
    auto fed_backend = std::make_unique<DeviceFed>(artifact);
    DeviceFed* fed_view = fed_backend.get();
    fed_view->before_wait = [&] {
      std::lock_guard lock(cancel_mutex);
      for (auto& [handle, waits] : cancels)
        if (waits > 0 && --waits == 0) handle->cancel();
    };
    auto overlapped = Engine::create(artifact, std::move(fed_backend), options);

    std::mt19937 rng(static_cast<unsigned>(kv_pages));
    auto uniform = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
    int finishes[4] = {};  // by FinishReason
    for (int round = 0; round < 6; ++round) {
      std::vector<GenerationRequest> requests;
      std::vector<int> cancel_after;  // waits before cancelling; 0: never
      for (int i = 0; i < 10; ++i) {
        GenerationRequest r;
        const int len = uniform(1, 20);
        for (int j = 0; j < len; ++j) r.prompt.push_back(uniform(0, spec.vocab_size - 1));
        r.sampling.max_tokens = uniform(1, 24);
        r.sampling.seed = static_cast<std::uint64_t>(i);
        r.sampling.ignore_eos = uniform(0, 1) == 0;
        if (uniform(0, 2) == 0) r.sampling.stop_token_ids = {uniform(0, spec.vocab_size - 1)};
        r.sampling.temperature = uniform(0, 5) == 0 ? 1.0f : 0.0f;  // 1: sampled on the host
        if (uniform(0, 7) == 0) r.sampling.min_tokens = std::min(3, *r.sampling.max_tokens);  // host rows until then
        requests.push_back(r);
        cancel_after.push_back(uniform(0, 4) == 0 ? uniform(1, 8) : 0);
      }
      std::vector<RequestHandle> hs, ho;
      for (const GenerationRequest& r : requests) hs.push_back(sync->submit(r));
      {
        std::lock_guard lock(cancel_mutex);
        for (std::size_t i = 0; i < requests.size(); ++i) {
          ho.push_back(overlapped->submit(requests[i]));
          if (cancel_after[i] > 0) cancels.emplace_back(ho.back(), cancel_after[i]);
        }
      }
      for (std::size_t i = 0; i < requests.size(); ++i) {
        const Result want = collect(hs[i]);
        const Result got = collect(ho[i]);
        ++finishes[static_cast<int>(got.finish)];
        if (got.finish == FinishReason::Cancelled) {
          ASSERT_LE(got.ids.size(), want.ids.size()) << "round " << round << " request " << i;
          EXPECT_TRUE(std::equal(got.ids.begin(), got.ids.end(), want.ids.begin()))
              << "round " << round << " request " << i;
        } else {
          EXPECT_EQ(got.finish, want.finish) << "round " << round << " request " << i;
          EXPECT_EQ(got.ids, want.ids) << "round " << round << " request " << i;
        }
      }
    }
    // The workload exercises every way of ending but failure.
    EXPECT_GT(finishes[static_cast<int>(FinishReason::Stop)], 0);
    EXPECT_GT(finishes[static_cast<int>(FinishReason::Length)], 0);
    EXPECT_GT(finishes[static_cast<int>(FinishReason::Cancelled)], 0);
    EXPECT_EQ(finishes[static_cast<int>(FinishReason::Error)], 0);
    overlapped->wait_idle();
    EXPECT_EQ(overlapped->stats().kv_pages_used, 0);
    EXPECT_EQ(sync->stats().kv_pages_used, 0);
    if (kv_pages == 12) {
      EXPECT_GT(overlapped->stats().preemptions, 0u);
    }
    EXPECT_GT(fed_view->fed_tokens, 0);
    int timed_overlapped = 0;
    for (const StepTiming& t : overlapped->take_step_timings()) timed_overlapped += t.overlapped ? 1 : 0;
    EXPECT_EQ(timed_overlapped, fed_view->overlapped_launches);
    // Most decode steps of these workloads can overlap (a fifth of the requests sample on the host).
    EXPECT_GT(fed_view->overlapped_launches, 50) << "kv_pages " << kv_pages;
    for (const StepTiming& t : sync->take_step_timings()) EXPECT_FALSE(t.overlapped);
  }
}

// Requests with a temperature are drawn on the device when the backend can (draws_on_device): no
// logits come back for them, their steps overlap, and a request's tokens are the same alone and
// in a batch, since the draw depends only on its logits, seed and position. The host still samples
// rows with penalties, and rows with both top_p and min_p (engine.hpp).
TEST(Engine, DeviceDrawsSampledRowsAndOverlapsThem) {
  TinyArtifactSpec spec;
  auto artifact = tiny_artifact(spec, "draws");
  auto make = [&](DeviceFed*& view) {
    auto backend = std::make_unique<DeviceFed>(artifact);
    backend->draws = true;
    view = backend.get();
    return Engine::create(artifact, std::move(backend), checked_options());
  };
  auto req = [&](int i, float temperature) {
    GenerationRequest r;
    r.prompt = {3, 5 + i, 7, 2 * i + 1};
    r.sampling.temperature = temperature;
    r.sampling.top_p = 0.9f;
    r.sampling.top_k = 20;
    r.sampling.seed = static_cast<std::uint64_t>(100 + i);
    r.sampling.max_tokens = 12;
    r.sampling.ignore_eos = true;
    return r;
  };
  DeviceFed* alone_view = nullptr;
  auto alone = make(alone_view);
  std::vector<Result> drawn, greedy;
  for (int i = 0; i < 4; ++i) {
    drawn.push_back(collect(alone->submit(req(i, 0.8f))));
    greedy.push_back(collect(alone->submit(req(i, 0.0f))));
    ASSERT_EQ(drawn.back().ids.size(), 12u);
  }
  EXPECT_EQ(alone_view->logits_launches, 0) << "a drawn or greedy row asked for the logits";
  EXPECT_GT(alone_view->overlapped_launches, 0);
  bool differs = false;
  for (int i = 0; i < 4; ++i) differs = differs || drawn[i].ids != greedy[i].ids;
  EXPECT_TRUE(differs) << "the draws are all greedy";

  DeviceFed* batch_view = nullptr;
  auto batch = make(batch_view);
  std::vector<GenerationRequest> requests;
  for (int i = 0; i < 4; ++i) requests.push_back(req(i, 0.8f));
  GenerationRequest host_min_p = req(5, 0.8f), host_penalty = req(6, 0.8f);
  host_min_p.sampling.min_p = 0.1f;
  host_penalty.sampling.repetition_penalty = 1.2f;
  requests.push_back(host_min_p);
  requests.push_back(host_penalty);
  const std::vector<RequestHandle> hs = batch->submit_all(requests);
  for (int i = 0; i < 4; ++i)
    EXPECT_EQ(collect(hs[static_cast<std::size_t>(i)]).ids, drawn[static_cast<std::size_t>(i)].ids)
        << "request " << i;
  EXPECT_EQ(collect(hs[4]).ids.size(), 12u);
  EXPECT_EQ(collect(hs[5]).ids.size(), 12u);
  EXPECT_GT(batch_view->logits_launches, 0) << "the host rows' steps brought no logits back";
  batch->wait_idle();
  EXPECT_EQ(batch->stats().kv_pages_used, 0);
}

// Several client threads submit, read and cancel at once (what the HTTP server does): every
// stream ends, and every page is back in the pool afterwards.
TEST(Engine, ConcurrentClientsAndCancellationsLeaveNoPageBehind) {
  TinyArtifactSpec spec;
  spec.kv_pages = 12;  // small enough to preempt
  auto engine = make_engine(spec, "concurrent");
  std::atomic<int> ended{0};
  std::vector<std::thread> clients;
  for (int c = 0; c < 4; ++c) {
    clients.emplace_back([&, c] {
      std::mt19937 rng(static_cast<unsigned>(c));
      for (int i = 0; i < 15; ++i) {
        std::vector<std::int32_t> prompt(std::uniform_int_distribution<std::size_t>(1, 20)(rng), 9);
        RequestHandle h = engine->submit(request(prompt, 20, 1.0f, static_cast<std::uint64_t>(i)));
        const int cancel_after = std::uniform_int_distribution<int>(0, 25)(rng);
        RequestEvent e;
        int events = 0;
        while (h->next(e)) {
          if (++events == cancel_after) h->cancel();
          if (e.finish) ++ended;
        }
      }
    });
  }
  for (std::thread& t : clients) t.join();
  engine->wait_idle();
  EXPECT_EQ(ended.load(), 60);
  const EngineStats s = engine->stats();
  EXPECT_EQ(s.requests_finished, 60u);
  EXPECT_EQ(s.kv_pages_used, 0);
  EXPECT_EQ(s.running + s.waiting, 0);
}

// ---- Prefix caching ----

std::unique_ptr<Engine> make_engine(const std::shared_ptr<const Artifact>& artifact,
                                    bool prefix_cache) {
  EngineOptions options = checked_options();
  options.prefix_cache = prefix_cache;
  return Engine::create(artifact, std::make_unique<CpuReferenceModel>(artifact), options);
}

// Prompts built on a 13-token "system prompt" (3 full pages of 4 and one token), one of 16 tokens
// (whole pages), and a repeat of each.
std::vector<std::vector<std::int32_t>> shared_prefix_prompts() {
  const std::vector<std::int32_t> system = {3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9};
  std::vector<std::vector<std::int32_t>> prompts;
  for (const std::vector<std::int32_t>& tail :
       {std::vector<std::int32_t>{7}, {11, 12, 13, 14, 15, 16}, {20, 21, 22}, {}}) {
    prompts.push_back(system);
    prompts.back().insert(prompts.back().end(), tail.begin(), tail.end());
  }
  prompts.push_back(prompts[1]);  // 19 tokens again: 4 cached pages, 3 tokens computed
  prompts.push_back(prompts[2]);  // 16 tokens again: 3 cached pages, the last page computed
  return prompts;
}

// Requests one after another, so that each finds what the earlier ones left in the cache: the
// tokens and the prompt logits are bit for bit those of the engine without a cache, and each
// request reports the prompt tokens it took from the cache.
TEST_P(EngineFamilies, APrefixCacheHitGivesTheBitsOfAFullPrefill) {
  auto artifact = tiny_artifact(spec(), "prefix-" + GetParam());
  auto cached = make_engine(artifact, true);
  auto uncached = make_engine(artifact, false);
  const auto prompts = shared_prefix_prompts();
  // Cached tokens: in the first pass what the prompts before left; in the second, the first
  // pass's pages too.
  const std::vector<int> want_cached[2] = {{0, 12, 12, 12, 16, 12}, {12, 16, 12, 12, 16, 12}};
  for (float temperature : {0.0f, 1.0f}) {
    const std::vector<int>& expected = want_cached[temperature == 0.0f ? 0 : 1];
    for (std::size_t i = 0; i < prompts.size(); ++i) {
      const GenerationRequest r = request(prompts[i], 8, temperature, 7 + i);
      const Result got = collect(cached->submit(r));
      const Result want = collect(uncached->submit(r));
      EXPECT_EQ(got.ids, want.ids) << "prompt " << i << " T=" << temperature;
      EXPECT_EQ(got.prompt_logits, want.prompt_logits) << "prompt " << i;
      EXPECT_EQ(want.usage.cached_tokens, 0);
      EXPECT_EQ(got.usage.cached_tokens, expected[i]) << "prompt " << i << " T=" << temperature;
      EXPECT_EQ(got.first_token_cached_tokens, expected[i]) << "prompt " << i;
    }
  }
  cached->wait_idle();
  const EngineStats s = cached->stats();
  EXPECT_EQ(s.prefix_cache_hits, 64u + 80u);
  EXPECT_EQ(s.prefix_cache_queries, 2u * (14 + 19 + 16 + 13 + 19 + 16));
  EXPECT_GT(s.kv_pages_cached, 0);
  EXPECT_EQ(s.kv_pages_used, 0);
  EXPECT_EQ(s.kv_pages_free, s.kv_pages_total);  // cached pages count free
  const EngineStats u = uncached->stats();
  EXPECT_EQ(u.prefix_cache_hits, 0u);
  EXPECT_EQ(u.kv_pages_cached, 0);
}

// Requests submitted together, so that some are admitted while others' prompts are still being
// computed, with the same or different salts: a salt only ever shares with itself.
TEST(Engine, CacheSaltsKeepTenantsApart) {
  auto artifact = tiny_artifact({}, "salt");
  auto engine = make_engine(artifact, true);
  const std::vector<std::int32_t> prompt = {5, 6, 7, 8, 9, 10, 11, 12, 13};
  auto salted = [&](const std::string& salt) {
    GenerationRequest r = request(prompt, 4, 0, 1);
    r.cache_salt = salt;
    return collect(engine->submit(r));
  };
  const Result a = salted("tenant-a");
  EXPECT_EQ(a.usage.cached_tokens, 0);
  EXPECT_EQ(salted("tenant-b").usage.cached_tokens, 0);
  EXPECT_EQ(salted("").usage.cached_tokens, 0);
  const Result again = salted("tenant-a");
  EXPECT_EQ(again.usage.cached_tokens, 8);
  EXPECT_EQ(again.ids, a.ids);
  EXPECT_EQ(salted("").usage.cached_tokens, 8);
  // The longest salt is taken; one byte more is refused, naming the field.
  EXPECT_EQ(salted(std::string(kMaxCacheSaltBytes, 's')).finish, FinishReason::Length);
  GenerationRequest too_long = request(prompt, 4, 0, 1);
  too_long.cache_salt = std::string(kMaxCacheSaltBytes + 1, 's');
  const std::string message = error_of([&] { engine->submit(too_long); });
  EXPECT_NE(message.find("cache_salt has 257 bytes, more than 256"), std::string::npos) << message;
  engine->wait_idle();
  EXPECT_EQ(engine->stats().kv_pages_used, 0);
}

// A step that failed wrote nothing trustworthy: its pages are not offered to the cache, so a
// request with the same prompt computes it in full.
TEST(Engine, AFailedStepCachesNothing) {
  auto artifact = tiny_artifact({}, "prefix-failing");
  auto engine =
      Engine::create(artifact, std::make_unique<FailingOnToken63>(artifact), checked_options());
  std::vector<std::int32_t> prompt = {1, 2, 3, 4, 5, 6, 7, 8, 9, 63};
  EXPECT_EQ(collect(engine->submit(request(prompt, 4, 0, 1))).finish, FinishReason::Error);
  prompt.back() = 10;
  const Result r = collect(engine->submit(request(prompt, 4, 0, 1)));
  EXPECT_EQ(r.finish, FinishReason::Length);
  EXPECT_EQ(r.usage.cached_tokens, 0);
  engine->wait_idle();
  EXPECT_EQ(engine->stats().kv_pages_used, 0);
}

// The overlapped engine (steps launched before the previous one is back) with prompts that share
// prefixes, under a pool small enough to preempt and evict: the tokens of the synchronous engine
// without a cache, hits taken, and no page left held.
TEST(Engine, OverlappedStepsWithCachedPrefixesMatchAnUncachedEngine) {
  TinyArtifactSpec spec;
  spec.kv_pages = 16;
  auto artifact = tiny_artifact(spec, "prefix-overlap");
  auto uncached = make_engine(artifact, false);
  auto fed_backend = std::make_unique<DeviceFed>(artifact);
  DeviceFed* fed = fed_backend.get();
  auto overlapped = Engine::create(artifact, std::move(fed_backend), checked_options());
  std::mt19937 rng(5);
  auto uniform = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  const auto prefixes = shared_prefix_prompts();
  for (int round = 0; round < 6; ++round) {
    std::vector<GenerationRequest> requests;
    for (int i = 0; i < 8; ++i) {
      GenerationRequest r;
      r.prompt = prefixes[static_cast<std::size_t>(uniform(0, 3))];
      for (int n = uniform(0, 6); n > 0; --n) r.prompt.push_back(uniform(0, spec.vocab_size - 1));
      r.sampling.max_tokens = uniform(1, 20);
      r.sampling.temperature = 0;
      r.sampling.ignore_eos = true;
      requests.push_back(r);
    }
    const std::vector<RequestHandle> want = uncached->submit_all(requests);
    const std::vector<RequestHandle> got = overlapped->submit_all(requests);
    for (std::size_t i = 0; i < requests.size(); ++i)
      EXPECT_EQ(collect(got[i]).ids, collect(want[i]).ids) << "round " << round << " request " << i;
  }
  overlapped->wait_idle();
  const EngineStats s = overlapped->stats();
  EXPECT_GT(s.prefix_cache_hits, s.prefix_cache_queries / 4);
  EXPECT_GT(s.preemptions, 0u);
  EXPECT_EQ(s.kv_pages_used, 0);
  EXPECT_GT(fed->overlapped_launches, 20);
}

}  // namespace
}  // namespace telos::exec
