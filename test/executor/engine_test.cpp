// The engine on the CPU reference backend, on hand-written artifacts: results do not depend on
// batch composition, chunking or preemption; cancellation and rejection behave; pages come back.
#include "executor/engine.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <mutex>
#include <condition_variable>
#include <random>
#include <thread>

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
};

Result collect(const RequestHandle& h) {
  Result r;
  RequestEvent e;
  while (h->next(e)) {
    if (e.token) r.ids.push_back(e.token->token);
    if (!e.logits.empty()) r.prompt_logits = e.logits;
    if (e.finish) {
      r.finish = *e.finish;
      r.timings = e.timings;
    }
  }
  return r;
}

std::unique_ptr<Engine> make_engine(const TinyArtifactSpec& spec, const std::string& name) {
  const std::string dir = testing::temp_dir(name);
  testing::write_tiny_artifact(dir, spec);
  auto artifact = Artifact::load(dir);
  EngineOptions options;
  options.check_invariants = true;
  return Engine::create(artifact, std::make_unique<CpuReferenceModel>(artifact), options);
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
  const std::string dir = testing::temp_dir("cancel");
  testing::write_tiny_artifact(dir, {});
  auto artifact = Artifact::load(dir);
  EngineOptions options;
  options.check_invariants = true;
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
  const std::string dir = testing::temp_dir("failing");
  testing::write_tiny_artifact(dir, {});
  auto artifact = Artifact::load(dir);
  EngineOptions options;
  options.check_invariants = true;
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
  void launch(const Step& step, std::span<const std::uint8_t> device_greedy,
              bool want_logits) override {
    step_ = &step;
    greedy_.assign(device_greedy.begin(), device_greedy.end());
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
  const std::string dir = testing::temp_dir("device-greedy");
  testing::write_tiny_artifact(dir, {});
  auto artifact = Artifact::load(dir);
  EngineOptions options;
  options.check_invariants = true;
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
    if (i > 0) {
      EXPECT_GT(t.started, timings[i - 1].started);
    }
  }
  EXPECT_TRUE(device->take_step_timings().empty());
  EXPECT_EQ(device->stats().kv_pages_used, 0);
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

}  // namespace
}  // namespace telos::exec
