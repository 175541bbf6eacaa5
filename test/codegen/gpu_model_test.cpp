// The tiny models end to end on the GPU: each golden case of transformers (fp32) alone and all of
// them in one mixed batch, through the GPU step executor and the artifact's compiled kernels.
// Last-position logits within 2e-2 relative L2; every golden greedy id, teacher-forced, within
// bf16 tolerance of our largest logit; the 32 free-running greedy ids identical, or parting only
// at such a tie; a batch giving each case exactly what it gives alone; graphs and direct launches
// identical; seeded sampling independent of the batch.
//
// Needs TELOS_GPU_ARTIFACTS: a directory holding tiny-llama.telos, tiny-qwen2.telos and
// tiny-qwen3.telos (compiled by telosc); goldens are read from the source tree at
// TELOS_SOURCE_DIR (default: the current directory). The engine runs the artifact's kernel set for
// GPU 0 (sm_90a or sm_100a: tools/gpu_check.sh --prepare with TELOS_GPU_TARGET); skipped without a
// GPU of either target.
#include <gtest/gtest.h>

#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>

#include "executor/artifact.hpp"
#include "executor/cpu_reference_model.hpp"
#include "executor/engine.hpp"
#include "executor/gpu/gpu_rank_group.hpp"
#include "executor/gpu/gpu_step_executor.hpp"
#include "test/codegen/gpu_test_support.hpp"

namespace telos::exec {
namespace {

// Enough pages for every golden case at once, with room to spare.
constexpr int kPoolPages = 256;

struct GoldenCase {
  std::vector<std::int32_t> prompt, greedy;
  std::vector<float> last_logits;
};

std::string env_or(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v && *v ? v : fallback;
}

std::vector<GoldenCase> load_golden(const std::string& model) {
  const std::string root = env_or("TELOS_SOURCE_DIR", ".");
  const std::string path = model == "tiny-llama" ? root + "/models/tiny-llama/golden.json"
                                                 : root + "/test/fixtures/" + model + "/golden.json";
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot open " + path);
  const nlohmann::json g = nlohmann::json::parse(in);
  std::vector<GoldenCase> cases;
  for (const auto& c : g.at("cases"))
    cases.push_back({c.at("prompt_ids").get<std::vector<std::int32_t>>(),
                     c.at("greedy_ids").get<std::vector<std::int32_t>>(),
                     c.at("last_logits").get<std::vector<float>>()});
  return cases;
}

// A sequence being generated: its tokens so far and its pages (taken from a shuffled pool, so
// page tables are scattered).
struct Seq {
  std::vector<std::int32_t> tokens;
  std::vector<PageId> pages;
  int computed = 0;
  int prompt_len = 0;  // tokens past it are generated: at most max_batch of those a step
};

class PagePool {
 public:
  explicit PagePool(int n) : free_(static_cast<std::size_t>(n)) {
    std::iota(free_.begin(), free_.end(), 0);
    std::shuffle(free_.begin(), free_.end(), std::mt19937(12345));
  }
  void grow(Seq& s, int positions, int page_size) {
    while (static_cast<int>(s.pages.size()) * page_size < positions) {
      s.pages.push_back(free_.back());
      free_.pop_back();
    }
  }

 private:
  std::vector<PageId> free_;
};

// One step over `seqs`: every sequence computes its tokens from `computed` on (at most `chunk` of
// them) and samples when that reaches its end. Returns the sampled tokens in sequence order and
// the logits of the sampling rows.
// `ex`: a GpuStepExecutor, or a GpuRankGroup (the same run()).
std::vector<std::int32_t> step(auto& ex, std::vector<Seq*> seqs, int page_size, PagePool& pool,
                               std::span<const DeviceSampling> sampling, std::vector<float>* logits,
                               std::vector<bool>* sampled_mask, int chunk) {
  Step st;
  for (Seq* s : seqs) {
    const int n = std::min(chunk, static_cast<int>(s->tokens.size()) - s->computed);
    pool.grow(*s, s->computed + n, page_size);
    ScheduledSequence q;
    q.first_position = s->computed;
    q.tokens = std::span<const std::int32_t>(s->tokens).subspan(static_cast<std::size_t>(s->computed), static_cast<std::size_t>(n));
    q.page_table = s->pages;
    q.samples = s->computed + n == static_cast<int>(s->tokens.size());
    q.prompt_len = s->prompt_len;
    st.num_tokens += n;
    st.sequences.push_back(q);
  }
  std::vector<std::int32_t> out;
  ex.run(st, sampling, out, logits);
  if (sampled_mask) sampled_mask->clear();
  for (std::size_t i = 0; i < seqs.size(); ++i) {
    seqs[i]->computed += static_cast<int>(st.sequences[i].tokens.size());
    if (sampled_mask) sampled_mask->push_back(st.sequences[i].samples);
  }
  return out;
}

double rel_l2(std::span<const float> a, std::span<const float> b) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < b.size(); ++i) {
    if (!std::isfinite(a[i])) return INFINITY;
    num += double(a[i] - b[i]) * (a[i] - b[i]);
    den += double(b[i]) * b[i];
  }
  return std::sqrt(num / den);
}

void report(const std::string& what, const std::string& value, bool ok) {
  std::printf("CHECK | %-52s | %-22s | %s\n", what.c_str(), value.c_str(), ok ? "pass" : "FAIL");
}

// Generates for every case of `cases` together (one sequence each). A single case prefills its
// prompt in one step; several prefill in chunks of at most kBatchChunk tokens per sequence and
// step, so chunked prefill runs beside other sequences' decode steps. Teacher-forced, each step
// feeds the golden greedy id instead of the sampled one and records, per generated position, how
// far the golden id's logit is below the largest, relative to the RMS of the logits.
constexpr int kBatchChunk = 8;

struct Generated {
  std::vector<std::int32_t> ids;
  std::vector<float> prompt_logits;  // at the prompt's last position
  std::vector<std::vector<float>> logits;  // at each sampled position, the prompt's last first
  std::vector<double> golden_gap;    // teacher-forced only
};

std::vector<Generated> generate(auto& ex, const Artifact& art, const std::vector<GoldenCase>& cases,
                                const std::vector<DeviceSampling>& sampling,
                                bool teacher_forced = false) {
  const int page_size = art.kv_cache().page_size, V = art.model().vocab_size;
  int largest_prefill = 0;
  for (int b : art.serving().prefill_buckets) largest_prefill = std::max(largest_prefill, b);
  const int chunk = cases.size() == 1 ? largest_prefill : kBatchChunk;
  PagePool pool(ex.num_kv_pages());
  std::vector<Seq> seqs(cases.size());
  for (std::size_t i = 0; i < cases.size(); ++i) {
    seqs[i].tokens = cases[i].prompt;
    seqs[i].prompt_len = static_cast<int>(cases[i].prompt.size());
  }
  std::vector<Generated> out(cases.size());
  const std::size_t want = cases.front().greedy.size();
  while (true) {
    std::vector<Seq*> active;
    std::vector<std::size_t> index;
    for (std::size_t i = 0; i < seqs.size(); ++i)
      if (out[i].ids.size() < want) active.push_back(&seqs[i]), index.push_back(i);
    if (active.empty()) break;
    std::vector<DeviceSampling> samp;
    for (std::size_t i : index) samp.push_back(sampling[i]);
    std::vector<float> lg;
    std::vector<bool> sampled;
    const auto toks = step(ex, active, page_size, pool, samp, &lg, &sampled, chunk);
    std::size_t r = 0;
    for (std::size_t a = 0; a < active.size(); ++a) {
      if (!sampled[a]) continue;
      const std::size_t i = index[a];
      const std::span<const float> row(lg.data() + r * V, static_cast<std::size_t>(V));
      if (out[i].ids.empty()) out[i].prompt_logits.assign(row.begin(), row.end());
      out[i].logits.emplace_back(row.begin(), row.end());
      const std::int32_t golden = cases[i].greedy[out[i].ids.size()];
      double rms = 0;
      for (float v : row) rms += double(v) * v;
      rms = std::sqrt(rms / V);
      out[i].golden_gap.push_back((*std::max_element(row.begin(), row.end()) - row[golden]) / rms);
      out[i].ids.push_back(toks[r]);
      seqs[i].tokens.push_back(teacher_forced ? golden : toks[r]);
      ++r;
    }
  }
  return out;
}

// Two logits each within the 2e-2 tolerance can swap order when they are within 4e-2 (of the
// logits' RMS) of each other: a golden greedy id closer than this to our largest logit is a tie
// under bf16 arithmetic.
constexpr double kTieGap = 4e-2;

// Checks one generation against its golden case: prompt logits within `logits_bound` relative L2
// (2e-2, bf16 tolerance, unless the caller says why not); the teacher-forced golden ids all within
// `tie_gap` (kTieGap unless the caller says why not) of our largest logit; the free-running ids
// identical, or first different where the golden id was such a tie (then the two continuations
// legitimately part). Prints a line per check for tools/gpu_check.sh's table.
void check_case(const std::string& label, const GoldenCase& golden, const Generated& free_run,
                const Generated& forced, double logits_bound = 2e-2, double tie_gap = kTieGap) {
  const double err = rel_l2(free_run.prompt_logits, golden.last_logits);
  char buf[96];
  std::snprintf(buf, sizeof buf, "relL2 %.2e", err);
  report(label + ": last logits", buf, err <= logits_bound);
  EXPECT_LE(err, logits_bound) << label;

  const double worst = *std::max_element(forced.golden_gap.begin(), forced.golden_gap.end());
  std::snprintf(buf, sizeof buf, "worst gap %.3f rms", worst);
  report(label + ": teacher-forced golden ids", buf, worst <= tie_gap);
  EXPECT_LE(worst, tie_gap) << label;

  std::size_t first = 0;
  while (first < golden.greedy.size() && free_run.ids[first] == golden.greedy[first]) ++first;
  if (first == golden.greedy.size()) {
    report(label + ": 32 greedy ids", "identical", true);
    return;
  }
  const double gap = forced.golden_gap[first];
  std::snprintf(buf, sizeof buf, "part at %zu, tie %.3f rms", first, gap);
  report(label + ": 32 greedy ids", buf, gap <= tie_gap);
  EXPECT_LE(gap, tie_gap) << label << ": greedy ids part at " << first
                          << " where the golden id is no tie";
}

// Each test's model (the parameter), its artifact from TELOS_GPU_ARTIFACTS and its golden cases;
// skipped without an sm_90 or sm_100 GPU or without the artifacts.
class GpuModel : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    TELOS_SKIP_WITHOUT_GPU();
    const std::string dir = env_or("TELOS_GPU_ARTIFACTS", "");
    if (dir.empty())
      GTEST_SKIP() << "skipped: set TELOS_GPU_ARTIFACTS to a directory of tiny-model artifacts";
    model = GetParam();
    art = Artifact::load(dir + "/" + model + ".telos");
    cases = load_golden(model);
  }
  std::string model;
  std::shared_ptr<const Artifact> art;
  std::vector<GoldenCase> cases;
};

TEST_P(GpuModel, MatchesTransformersAloneAndInAMixedBatch) {
  GpuStepExecutor ex(art, GpuExecutorOptions{.kv_pages = kPoolPages});
  std::printf("%s: %s", model.c_str(), ex.memory_report().c_str());
  const std::vector<DeviceSampling> greedy(cases.size());

  std::vector<Generated> alone;
  for (std::size_t c = 0; c < cases.size(); ++c) {
    alone.push_back(generate(ex, *art, {cases[c]}, {DeviceSampling{}})[0]);
    const Generated forced = generate(ex, *art, {cases[c]}, {DeviceSampling{}}, true)[0];
    check_case(model + " case " + std::to_string(c) + " alone", cases[c], alone.back(), forced);
  }
  const std::vector<Generated> batch = generate(ex, *art, cases, greedy);
  const std::vector<Generated> batch_forced = generate(ex, *art, cases, greedy, true);
  for (std::size_t c = 0; c < cases.size(); ++c) {
    const std::string label = model + " case " + std::to_string(c) + " in batch";
    check_case(label, cases[c], batch[c], batch_forced[c]);
    const bool same = batch[c].ids == alone[c].ids &&
                      std::memcmp(batch[c].prompt_logits.data(), alone[c].prompt_logits.data(),
                                  alone[c].prompt_logits.size() * 4) == 0;
    report(label + ": vs alone (ids, logits bits)", same ? "identical" : "differ", same);
    EXPECT_TRUE(same) << label;
  }
}

// A tensor-parallel artifact's run of `cases` on `ranks`, all in one batch, each case: against its
// golden case (check_case), its greedy ids against the one-rank artifact's (`one_rank`), and alone
// against in the batch (ids and logits bits: batch invariance holds at a given degree). `what`
// names the model in the labels.
void check_tensor_parallel_cases(const std::string& what, GpuRankGroup& ranks,
                                 const Artifact& tp_art, const std::vector<GoldenCase>& cases,
                                 const std::vector<Generated>& one_rank) {
  const std::vector<DeviceSampling> greedy(cases.size());
  const std::vector<Generated> batch = generate(ranks, tp_art, cases, greedy);
  const std::vector<Generated> forced = generate(ranks, tp_art, cases, greedy, true);
  for (std::size_t c = 0; c < cases.size(); ++c) {
    const std::string label = what + " tp2 case " + std::to_string(c);
    check_case(label + " in batch", cases[c], batch[c], forced[c]);
    const bool same = batch[c].ids == one_rank[c].ids;
    report(label + ": greedy ids vs one rank", same ? "identical" : "differ", same);
    EXPECT_TRUE(same) << label;
    const Generated alone = generate(ranks, tp_art, {cases[c]}, {DeviceSampling{}})[0];
    const bool invariant = alone.ids == batch[c].ids &&
                           std::memcmp(alone.prompt_logits.data(), batch[c].prompt_logits.data(),
                                       batch[c].prompt_logits.size() * 4) == 0;
    report(label + ": alone vs in batch (ids, logits bits)", invariant ? "identical" : "differ",
           invariant);
    EXPECT_TRUE(invariant) << label;
  }
}

// The model compiled at tensor_parallel 2 (<model>-tp2.telos beside the one-rank artifact;
// tools/multi_gpu_check.sh compiles it), its two ranks on this one GPU (the one-device test mode,
// gpu_rank_group.hpp): the sharded kernels on each rank's weights and the all-reduce reading the
// other rank's memory. Every golden case, in a mixed batch, checked against transformers as one
// rank is; the greedy ids the one-rank artifact gives; and each case alone gives what it gives in
// the batch (ids and logits bits: batch invariance holds at a given degree).
TEST_P(GpuModel, TwoRanksOnOneDeviceMatchOneRank) {
  const std::string tp2 = env_or("TELOS_GPU_ARTIFACTS", "") + "/" + model + "-tp2.telos";
  if (!std::filesystem::exists(tp2))
    GTEST_SKIP() << "skipped: no " << tp2
                 << " (tools/multi_gpu_check.sh compiles it with serving.tensor_parallel 2)";
  const std::shared_ptr<const Artifact> tp_art = Artifact::load(tp2);
  GpuRankGroup ranks(tp_art, {0, 0}, GpuExecutorOptions{.kv_pages = kPoolPages});
  std::vector<Generated> one_rank;
  {
    GpuStepExecutor one(art, GpuExecutorOptions{.kv_pages = kPoolPages});
    one_rank = generate(one, *art, cases, std::vector<DeviceSampling>(cases.size()));
  }
  check_tensor_parallel_cases(model, ranks, *tp_art, cases, one_rank);
}

// The CPU reference engine as generate() drives an executor: the sampling rows' logits and each
// row's greedy token (the lowest index among equal logits, as the device's).
class CpuGreedy {
 public:
  CpuGreedy(std::shared_ptr<const Artifact> art, int pages) : model_(std::move(art), pages) {}
  int num_kv_pages() const { return model_.num_kv_pages(); }
  void run(const Step& step, std::span<const DeviceSampling>, std::vector<std::int32_t>& tokens,
           std::vector<float>* logits) {
    std::vector<float> lg;
    model_.forward(step, lg);
    const auto V = static_cast<std::ptrdiff_t>(model_.vocab_size());
    tokens.clear();
    for (auto row = lg.begin(); row != lg.end(); row += V)
      tokens.push_back(static_cast<std::int32_t>(std::max_element(row, row + V) - row));
    if (logits) *logits = std::move(lg);
  }

 private:
  CpuReferenceModel model_;
};

// The model with an e4m3 KV cache (<model>-kv-fp8.telos, serving.kv_dtype fp8_e4m3; compiled by
// tools/gpu_check.sh --prepare) on the GPU against the CPU reference engine on the same artifact,
// which stores and reads the cache's e4m3 bytes as the kernels do, its arithmetic f32: every
// case's logits after its prompt and at each teacher-forced step, all the cases in one mixed batch,
// within the e4m3 cache's own error (the CPU engine's difference from its f32 cache on the same
// steps, `noise`) plus the bf16 tolerance the suite uses (2e-2): the GPU's K and V reach the
// quantizer as bf16, the CPU's as f32, and an element within a bf16 step of an e4m3 rounding
// boundary rounds to the neighbouring e4m3 value, a whole step, in one engine only. And on the GPU
// each case alone gives its ids and logits bits in the batch.
TEST_P(GpuModel, E4m3KvCacheMatchesTheCpuEngineAndIgnoresTheBatch) {
  const std::string path = env_or("TELOS_GPU_ARTIFACTS", "") + "/" + model + "-kv-fp8.telos";
  if (!std::filesystem::exists(path))
    GTEST_SKIP() << "skipped: no " << path
                 << " (tools/gpu_check.sh --prepare compiles it with serving.kv_dtype fp8_e4m3)";
  const std::shared_ptr<const Artifact> kv_art = Artifact::load(path);
  ASSERT_EQ(kv_art->kv_cache().dtype, DType::E4M3);
  GpuStepExecutor gpu(kv_art, GpuExecutorOptions{.kv_pages = kPoolPages});
  CpuGreedy cpu(kv_art, kPoolPages);
  const std::vector<DeviceSampling> greedy(cases.size());
  const std::vector<Generated> on_gpu = generate(gpu, *kv_art, cases, greedy, true);
  const std::vector<Generated> on_cpu = generate(cpu, *kv_art, cases, greedy, true);
  CpuGreedy cpu_f32(art, kPoolPages);
  const std::vector<Generated> on_cpu_f32 = generate(cpu_f32, *art, cases, greedy, true);
  for (std::size_t c = 0; c < cases.size(); ++c) {
    double worst = 0, noise = 0;
    for (std::size_t i = 0; i < on_cpu[c].logits.size(); ++i) {
      worst = std::max(worst, rel_l2(on_gpu[c].logits[i], on_cpu[c].logits[i]));
      noise = std::max(noise, rel_l2(on_cpu[c].logits[i], on_cpu_f32[c].logits[i]));
    }
    const std::string label = model + " kv e4m3 case " + std::to_string(c);
    char buf[96];
    std::snprintf(buf, sizeof buf, "cache's own error %.2e", noise);
    report(label + ": CPU engine e4m3 vs f32 cache", buf, noise > 0);
    EXPECT_GT(noise, 0) << label << ": the e4m3 cache changes nothing on the CPU engine";
    std::snprintf(buf, sizeof buf, "worst relL2 %.2e (bound %.2e)", worst, noise + 2e-2);
    report(label + ": logits vs CPU engine", buf, worst <= noise + 2e-2);
    EXPECT_LE(worst, noise + 2e-2) << label;
  }
  const std::vector<Generated> batch = generate(gpu, *kv_art, cases, greedy);
  for (std::size_t c = 0; c < cases.size(); ++c) {
    const Generated alone = generate(gpu, *kv_art, {cases[c]}, {DeviceSampling{}})[0];
    bool same = alone.ids == batch[c].ids && alone.logits.size() == batch[c].logits.size();
    for (std::size_t i = 0; same && i < alone.logits.size(); ++i)
      same = std::memcmp(alone.logits[i].data(), batch[c].logits[i].data(),
                         alone.logits[i].size() * 4) == 0;
    const std::string label = model + " kv e4m3 case " + std::to_string(c);
    report(label + ": alone vs in batch (ids, logits bits)", same ? "identical" : "differ", same);
    EXPECT_TRUE(same) << label;
  }
}

TEST_P(GpuModel, GraphsMatchDirectLaunchesAndSeededSamplingIgnoresTheBatch) {
  GpuStepExecutor graphs(art, GpuExecutorOptions{.kv_pages = kPoolPages}),
      direct(art, GpuExecutorOptions{.kv_pages = kPoolPages, .use_graphs = false});

  const std::vector<DeviceSampling> greedy(cases.size());
  const std::vector<Generated> g = generate(graphs, *art, cases, greedy);
  const std::vector<Generated> d = generate(direct, *art, cases, greedy);
  bool same = true;
  for (std::size_t c = 0; c < cases.size(); ++c)
    same = same && g[c].ids == d[c].ids &&
           std::memcmp(g[c].prompt_logits.data(), d[c].prompt_logits.data(), g[c].prompt_logits.size() * 4) == 0;
  report(model + ": graphs vs direct launches", same ? "bit-identical" : "differ", same);
  EXPECT_TRUE(same);

  std::vector<DeviceSampling> sampled(cases.size());
  for (std::size_t c = 0; c < cases.size(); ++c)
    sampled[c] = {.temperature = 0.9f, .top_p = 0.95f, .min_p = 0.f, .top_k = 50, .seed = 1000 + c};
  const std::vector<Generated> batch = generate(graphs, *art, cases, sampled);
  bool invariant = true;
  for (std::size_t c = 0; c < cases.size(); ++c) {
    const Generated alone = generate(graphs, *art, {cases[c]}, {sampled[c]})[0];
    invariant = invariant && alone.ids == batch[c].ids;
    EXPECT_EQ(alone.ids, batch[c].ids) << model << " case " << c;
  }
  report(model + ": seeded sampling alone vs in batch", invariant ? "identical" : "differ", invariant);
}

// The GPU engine behind only forward(): every sampling row's logits come back and the engine's
// host sampler picks the token, the path requests with logprobs or penalties take.
class HostSampledGpu : public ModelBackend {
 public:
  HostSampledGpu(std::shared_ptr<const Artifact> art, GpuExecutorOptions o) : inner_(std::move(art), o) {}
  int num_kv_pages() const override { return inner_.num_kv_pages(); }
  int vocab_size() const override { return inner_.vocab_size(); }
  std::string name() const override { return "gpu"; }
  void forward(const Step& step, std::vector<float>& logits) override { inner_.forward(step, logits); }

 private:
  GpuStepExecutor inner_;
};

// Engine options of these tests: invariants checked after every step, step timings recorded.
EngineOptions checked_timed_options() {
  EngineOptions options;
  options.check_invariants = true;
  options.record_step_timings = true;
  return options;
}
// An engine over the GPU executor with those options.
std::unique_ptr<Engine> device_engine(const std::shared_ptr<const Artifact>& art) {
  return Engine::create(
      art, std::make_unique<GpuStepExecutor>(art, GpuExecutorOptions{.kv_pages = kPoolPages}),
      checked_timed_options());
}

// Through the engine (scheduler, overlap of event delivery with the device): greedy tokens picked
// on the device equal those the host sampler picks from the logits, for every golden case in one
// batch, half of them stopping on a stop id mid-way; the device engine launches its decode steps
// before the previous one is back (fed tokens, engine.hpp) and the host-sampled one cannot; and
// the engine reports the device's idle gap between steps.
TEST_P(GpuModel, EngineSamplesGreedyOnTheDeviceLikeTheHost) {
  auto device = device_engine(art);
  auto host = Engine::create(
      art, std::make_unique<HostSampledGpu>(art, GpuExecutorOptions{.kv_pages = kPoolPages}),
      checked_timed_options());
  auto run = [&](Engine& engine) {
    std::vector<RequestHandle> handles;
    for (std::size_t i = 0; i < cases.size(); ++i) {
      const GoldenCase& c = cases[i];
      GenerationRequest r;
      r.prompt = c.prompt;
      r.sampling.temperature = 0;
      r.sampling.ignore_eos = true;
      r.sampling.max_tokens = static_cast<int>(c.greedy.size());
      if (i % 2 == 1) r.sampling.stop_token_ids = {c.greedy[c.greedy.size() / 2]};
      handles.push_back(engine.submit(std::move(r)));
    }
    // Per case: its tokens, then -(finish reason + 1), so that one comparison covers both (a
    // stopping case ends with Stop unless its greedy run never reaches the stop id).
    std::vector<std::vector<std::int32_t>> ids(cases.size());
    for (std::size_t i = 0; i < handles.size(); ++i) {
      RequestEvent e;
      while (handles[i]->next(e)) {
        if (e.token) ids[i].push_back(e.token->token);
        if (e.finish) {
          EXPECT_TRUE(*e.finish == FinishReason::Length || (i % 2 == 1 && *e.finish == FinishReason::Stop)) << e.error;
          ids[i].push_back(-static_cast<std::int32_t>(*e.finish) - 1);
        }
      }
    }
    return ids;
  };
  const auto on_device = run(*device);
  const auto on_host = run(*host);
  const bool same = on_device == on_host;
  report(model + ": engine greedy, device vs host sampling", same ? "identical" : "differ", same);
  EXPECT_EQ(on_device, on_host);

  device->wait_idle();
  host->wait_idle();
  for (const StepTiming& t : host->take_step_timings()) EXPECT_FALSE(t.overlapped);
  std::vector<double> gaps, host_us;
  int decodes = 0, overlapped = 0;
  for (const StepTiming& t : device->take_step_timings()) {
    if (t.idle_gap_seconds >= 0) gaps.push_back(t.idle_gap_seconds * 1e6);
    if (t.decode) host_us.push_back(t.host_seconds * 1e6);
    decodes += t.decode ? 1 : 0;
    overlapped += t.decode && t.overlapped ? 1 : 0;
  }
  // Every row is greedy on the device, so each step feeds the next and every step after the first
  // is launched overlapped; more than half of the decode steps is what is asserted, so that the
  // check does not depend on how the prompts were chunked.
  report(model + ": engine decode steps launched overlapped",
         std::to_string(overlapped) + " of " + std::to_string(decodes), 2 * overlapped > decodes);
  EXPECT_GT(2 * overlapped, decodes);
  EXPECT_EQ(device->stats().kv_pages_used, 0);
  ASSERT_FALSE(gaps.empty());
  ASSERT_FALSE(host_us.empty());
  std::sort(gaps.begin(), gaps.end());
  std::sort(host_us.begin(), host_us.end());
  char buf[96];
  std::snprintf(buf, sizeof buf, "gap %.1f us, host %.1f us", gaps[gaps.size() / 2], host_us[host_us.size() / 2]);
  report(model + ": engine median idle gap, host per decode step", buf, true);
}

// The number in memory_report()'s "(N graphs: M buckets" (the buckets loaded).
int buckets_loaded(const GpuStepExecutor& ex) {
  const std::string r = ex.memory_report();
  const std::size_t at = r.find(" graphs: ");
  return at == std::string::npos ? -1 : std::atoi(r.c_str() + at + 9);
}

// Runtime limits set at start (RuntimeLimits: --max-batch 2, --kv-pages 64, --prefill-chunk 16):
// the executor loads no decode bucket past the smallest that holds 2 sequences nor prefill bucket
// past the smallest that holds 16 tokens, and every golden case, greedy, in one batch gets the
// tokens the engine without limits gives it.
TEST_P(GpuModel, EngineUnderRuntimeLimitsLoadsFewerBucketsSameTokens) {
  auto full_ex = std::make_unique<GpuStepExecutor>(art, GpuExecutorOptions{.kv_pages = kPoolPages});
  auto limited_ex = std::make_unique<GpuStepExecutor>(
      art, GpuExecutorOptions{.kv_pages = 64, .max_batch = 2, .prefill_chunk = 16});
  // Buckets of `sizes` past the smallest that holds `limit`.
  auto past = [](const std::vector<int>& sizes, int limit) {
    int holds = INT_MAX, n = 0;
    for (int s : sizes)
      if (s >= limit) holds = std::min(holds, s);
    for (int s : sizes) n += s > holds ? 1 : 0;
    return n;
  };
  const int unreachable =
      past(art->serving().decode_buckets, 2) + past(art->serving().prefill_buckets, 16);
  const int full_buckets = buckets_loaded(*full_ex), limited_buckets = buckets_loaded(*limited_ex);
  report(model + ": buckets loaded, all / under the limits",
         std::to_string(full_buckets) + " / " + std::to_string(limited_buckets),
         full_buckets - limited_buckets == unreachable);
  EXPECT_EQ(full_buckets - limited_buckets, unreachable);
  EngineOptions limited_options = checked_timed_options();
  limited_options.limits = {.max_batch = 2, .kv_pages = 64, .prefill_chunk = 16};
  auto full = Engine::create(art, std::move(full_ex), checked_timed_options());
  auto limited = Engine::create(art, std::move(limited_ex), limited_options);
  auto run = [&](Engine& engine) {
    std::vector<RequestHandle> handles;
    for (const GoldenCase& c : cases) {
      GenerationRequest r;
      r.prompt = c.prompt;
      r.sampling.temperature = 0;
      r.sampling.ignore_eos = true;
      r.sampling.max_tokens = static_cast<int>(c.greedy.size());
      handles.push_back(engine.submit(std::move(r)));
    }
    std::vector<std::vector<std::int32_t>> ids(cases.size());
    for (std::size_t i = 0; i < handles.size(); ++i) {
      RequestEvent e;
      while (handles[i]->next(e))
        if (e.token) ids[i].push_back(e.token->token);
    }
    return ids;
  };
  const auto a = run(*full), b = run(*limited);
  report(model + ": engine greedy, no limits vs the limits", a == b ? "identical" : "differ",
         a == b);
  EXPECT_EQ(a, b);
  int most = 0;
  for (const StepTiming& t : limited->take_step_timings()) most = std::max(most, t.sequences);
  EXPECT_LE(most, 2);
  limited->wait_idle();
  EXPECT_EQ(limited->stats().kv_pages_used, 0);
  EXPECT_EQ(limited->stats().kv_pages_total, 64);
}

// Through the engine, requests with a temperature, top_k and top_p are drawn by the device's sample
// kernel (draws_on_device): each golden case's tokens are the same alone and in a batch with the
// others and with a request the host samples (top_p with min_p); the draws are not the greedy
// tokens; and the decode steps are launched overlapped, as greedy ones are.
TEST_P(GpuModel, EngineDrawsSampledRowsOnTheDevice) {
  auto engine = device_engine(art);
  auto request = [&](std::size_t i) {
    GenerationRequest r;
    r.prompt = cases[i].prompt;
    r.sampling.temperature = 1.0f;
    r.sampling.top_k = 40;
    r.sampling.top_p = 0.9f;
    r.sampling.seed = 7 + i;
    r.sampling.ignore_eos = true;
    r.sampling.max_tokens = static_cast<int>(cases[i].greedy.size());
    return r;
  };
  auto tokens = [](const RequestHandle& h) {
    std::vector<std::int32_t> ids;
    RequestEvent e;
    while (h->next(e)) {
      if (e.token) ids.push_back(e.token->token);
      if (e.finish) {
        EXPECT_EQ(*e.finish, FinishReason::Length) << e.error;
      }
    }
    return ids;
  };
  std::vector<std::vector<std::int32_t>> alone;
  bool drawn = false;
  for (std::size_t i = 0; i < cases.size(); ++i) {
    alone.push_back(tokens(engine->submit(request(i))));
    drawn = drawn || alone.back() != cases[i].greedy;
  }
  engine->wait_idle();
  int decodes = 0, overlapped = 0;
  for (const StepTiming& t : engine->take_step_timings()) {
    decodes += t.decode ? 1 : 0;
    overlapped += t.decode && t.overlapped ? 1 : 0;
  }
  std::vector<GenerationRequest> batch;
  for (std::size_t i = 0; i < cases.size(); ++i) batch.push_back(request(i));
  GenerationRequest host_row = request(0);
  host_row.sampling.min_p = 0.05f;
  batch.push_back(host_row);
  const std::vector<RequestHandle> hs = engine->submit_all(batch);
  bool same = true;
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const std::vector<std::int32_t> got = tokens(hs[i]);
    same = same && got == alone[i];
    EXPECT_EQ(got, alone[i]) << model << " case " << i;
  }
  EXPECT_EQ(tokens(hs.back()).size(), cases[0].greedy.size());
  report(model + ": engine device draws alone vs in a batch", same ? "identical" : "differ", same);
  EXPECT_TRUE(drawn) << "every drawn sequence is the greedy one";
  report(model + ": engine drawn decode steps launched overlapped",
         std::to_string(overlapped) + " of " + std::to_string(decodes), 2 * overlapped > decodes);
  EXPECT_GT(2 * overlapped, decodes);
  engine->wait_idle();
  EXPECT_EQ(engine->stats().kv_pages_used, 0);
}

INSTANTIATE_TEST_SUITE_P(Tiny, GpuModel,
                         ::testing::Values("tiny-llama", "tiny-qwen2", "tiny-qwen3"));

// FP8 artifacts (tools/gpu_check.sh compiles them): tiny-llama --quantize fp8 weight-only
// (fp8_activations bf16: its one-token steps run decode_layer_persistent_e4m3, its other buckets
// the small-M e4m3 GEMMs), tiny-w8a8 --quantize fp8 (every layer weight in 128x128 blocks, so
// W8A8: decode_layer_persistent_w8a8 and the small-M W8A8 GEMMs, each GEMM's input quantized) and
// tiny-w8a8-lm-head, the same with --quantize-lm-head (its LM head on gemm_small_w8a8_f32cand), and
// the prefill GEMMs' forms where the artifact has a bucket of kPrefillGemmMinRows tokens (the
// check's artifacts-p512 copies: every prompt through its one 512-token bucket). Against the CPU
// reference engine on the same artifact (the same dequantized weights, or the same W8A8 arithmetic
// on its f32 activations rounded to bf16), each golden prompt of tiny-llama alone and all in one
// mixed batch: the prompt's logits within 2e-2 relative L2 (tiny-w8a8: 1e-1, below), the CPU's
// greedy ids, teacher-forced, within bf16
// tolerance of the GPU's largest logit, the free-running ids identical or parting only at such a
// tie (check_case, with the CPU run as the golden); and each case alone gives the ids and logits
// bits it gives in the batch (batch invariance across the persistent layer and the GEMMs).
// tiny-w8a8's prompt logits are held to 1e-1: its random weights make it chaotic at the
// activations' quantization (rounding its CPU activations to bf16 before they are quantized, one
// bf16 step, moves the CPU engine's own logits 7.7e-2 relative L2), and the GPU's bf16 activations
// differ from the CPU's rounded f32 ones by such a step here and there. A wiring error (a scale,
// map or buffer) moves them by order 1; the ids' checks and the kernels' bit tests
// (GpuKernels.W8a8*) keep their strictness, and at a real shape the W8A8 artifact is within 2e-2
// of transformers (tools/e2e_check.py --fp8). tiny-w8a8-lm-head's ids are held to ties of 1e-1 rms
// too: its LM head quantizes the final norm's rows as well, so the activations' bf16 step there
// moves the logits themselves (teacher-forced gaps of up to 0.072 rms, H100, 2026-12-06).
struct Fp8Artifact {
  const char* name;
  double logits_bound, tie_gap = kTieGap;
};

class GpuModelFp8Artifact : public ::testing::TestWithParam<Fp8Artifact> {};

TEST_P(GpuModelFp8Artifact, MatchesTheCpuEngineAloneAndInAMixedBatch) {
  TELOS_SKIP_WITHOUT_GPU();
  const std::string name = GetParam().name;
  const std::string dir = env_or("TELOS_GPU_ARTIFACTS", "");
  const std::string path = dir + "/" + name + ".telos";
  if (dir.empty() || !std::filesystem::exists(path))
    GTEST_SKIP() << "skipped: set TELOS_GPU_ARTIFACTS to a directory holding " << name << ".telos";
  const auto art = Artifact::load(path);
  const std::vector<GoldenCase> prompts = load_golden("tiny-llama");
  std::vector<GoldenCase> cpu_cases;
  {
    CpuGreedy cpu(art, kPoolPages);
    for (const GoldenCase& p : prompts) {
      const Generated g = generate(cpu, *art, {p}, {DeviceSampling{}})[0];
      cpu_cases.push_back({p.prompt, g.ids, g.prompt_logits});
    }
  }
  GpuStepExecutor ex(art, GpuExecutorOptions{.kv_pages = kPoolPages});
  std::vector<Generated> alone;
  for (std::size_t c = 0; c < cpu_cases.size(); ++c) {
    alone.push_back(generate(ex, *art, {cpu_cases[c]}, {DeviceSampling{}})[0]);
    const Generated forced = generate(ex, *art, {cpu_cases[c]}, {DeviceSampling{}}, true)[0];
    check_case(name + " case " + std::to_string(c) + " alone vs cpu", cpu_cases[c], alone.back(),
               forced, GetParam().logits_bound, GetParam().tie_gap);
  }
  const std::vector<DeviceSampling> greedy(cpu_cases.size());
  const std::vector<Generated> batch = generate(ex, *art, cpu_cases, greedy);
  for (std::size_t c = 0; c < cpu_cases.size(); ++c) {
    const std::string label = name + " case " + std::to_string(c) + " in batch";
    const bool same = batch[c].ids == alone[c].ids &&
                      std::memcmp(batch[c].prompt_logits.data(), alone[c].prompt_logits.data(),
                                  alone[c].prompt_logits.size() * 4) == 0;
    report(label + ": vs alone (ids, logits bits)", same ? "identical" : "differ", same);
    EXPECT_TRUE(same) << label;
  }
}

INSTANTIATE_TEST_SUITE_P(Fp8, GpuModelFp8Artifact,
                         ::testing::Values(Fp8Artifact{"tiny-llama-fp8", 2e-2},
                                           Fp8Artifact{"tiny-w8a8", 1e-1},
                                           Fp8Artifact{"tiny-w8a8-lm-head", 1e-1, 1e-1}),
                         [](const ::testing::TestParamInfo<Fp8Artifact>& info) {
                           std::string n = info.param.name;
                           std::replace(n.begin(), n.end(), '-', '_');
                           return n;
                         });

// tiny-llama --quantize fp8 weight-only at tensor_parallel 2 (tiny-llama-fp8-tp2.telos;
// tools/multi_gpu_check.sh compiles it), its two ranks on this one GPU: the row-parallel o and down
// projections on the e4m3 residual GEMMs into the rank's f32 partial, then the all-reduce. Against
// the CPU reference engine on the one-rank FP8 artifact (the same dequantized weights), every
// golden prompt in a mixed batch as GpuModelFp8.MatchesTheCpuEngineAloneAndInAMixedBatch checks one
// rank; the greedy ids of the one-rank FP8 artifact on the GPU; and each case alone gives the ids
// and logits bits it gives in the batch.
TEST(GpuModelFp8, TwoRanksOnOneDeviceMatchOneRank) {
  TELOS_SKIP_WITHOUT_GPU();
  const std::string dir = env_or("TELOS_GPU_ARTIFACTS", "");
  const std::string one_path = dir + "/tiny-llama-fp8.telos",
                    tp2 = dir + "/tiny-llama-fp8-tp2.telos";
  if (dir.empty() || !std::filesystem::exists(one_path) || !std::filesystem::exists(tp2))
    GTEST_SKIP() << "skipped: set TELOS_GPU_ARTIFACTS to a directory holding tiny-llama-fp8.telos "
                    "and tiny-llama-fp8-tp2.telos (tools/multi_gpu_check.sh compiles the second)";
  const auto art = Artifact::load(one_path);
  const auto tp_art = Artifact::load(tp2);
  std::vector<GoldenCase> cpu_cases;
  {
    CpuGreedy cpu(art, kPoolPages);
    for (const GoldenCase& p : load_golden("tiny-llama")) {
      const Generated g = generate(cpu, *art, {p}, {DeviceSampling{}})[0];
      cpu_cases.push_back({p.prompt, g.ids, g.prompt_logits});
    }
  }
  std::vector<Generated> one_rank;
  {
    GpuStepExecutor one(art, GpuExecutorOptions{.kv_pages = kPoolPages});
    one_rank = generate(one, *art, cpu_cases, std::vector<DeviceSampling>(cpu_cases.size()));
  }
  GpuRankGroup ranks(tp_art, {0, 0}, GpuExecutorOptions{.kv_pages = kPoolPages});
  check_tensor_parallel_cases("tiny-llama fp8 (cpu golden)", ranks, *tp_art, cpu_cases, one_rank);
}

// Past the first attention split: a sequence whose one-token steps run from six positions before
// the split's end to ten after it (positions 250 to 265 at the default split of 256, 506 to 521 at
// the serving config's 512) alone (decode_layer_persistent, which skips the combine while the
// context is one split and runs it after) and beside another such sequence, in step with it
// (two-row buckets: the separate split and combine kernels): every step's logits bit for bit
// (through each step's gap of the largest logit to token 0's, in units of the logits' RMS: a
// function of every logit) and the ids. Needs tiny-llama-long.telos and
// tiny-llama-long-split512.telos (tools/gpu_check.sh: tiny-llama at max_seq_len 512, and at 1024
// with attention_split 512).
class GpuModelLongContext : public ::testing::TestWithParam<std::pair<const char*, int>> {};

TEST_P(GpuModelLongContext, OneTokenStepsAcrossTheFirstSplitMatchTheBatch) {
  TELOS_SKIP_WITHOUT_GPU();
  const auto [name, split] = GetParam();
  const std::string dir = env_or("TELOS_GPU_ARTIFACTS", "");
  const std::string path = dir + "/" + name + ".telos";
  if (dir.empty() || !std::filesystem::exists(path))
    GTEST_SKIP() << "skipped: set TELOS_GPU_ARTIFACTS to a directory holding " << name << ".telos";
  const auto art = Artifact::load(path);
  ASSERT_GE(art->serving().max_seq_len, split + 10);
  std::mt19937 rng(7);
  std::uniform_int_distribution<std::int32_t> id(0, art->model().vocab_size - 1);
  GoldenCase long_case, other;
  for (GoldenCase* c : {&long_case, &other}) {
    for (int i = 0; i < split - 6; ++i) c->prompt.push_back(id(rng));
    c->greedy.assign(16, 0);  // only its length is used: 16 generated tokens
  }
  GpuStepExecutor ex(art, GpuExecutorOptions{.kv_pages = kPoolPages});
  const Generated alone = generate(ex, *art, {long_case}, {DeviceSampling{}})[0];
  const Generated batch =
      generate(ex, *art, {long_case, other}, {DeviceSampling{}, DeviceSampling{}})[0];
  ASSERT_EQ(alone.golden_gap.size(), 16u);
  const bool same = alone.ids == batch.ids && alone.golden_gap == batch.golden_gap &&
                    std::memcmp(alone.prompt_logits.data(), batch.prompt_logits.data(),
                                alone.prompt_logits.size() * 4) == 0;
  report(std::string(name) + ": positions " + std::to_string(split - 6) + "-" +
             std::to_string(split + 9) + " alone vs in batch",
         same ? "bit-identical" : "differ", same);
  EXPECT_TRUE(same);
}

INSTANTIATE_TEST_SUITE_P(
    Splits, GpuModelLongContext,
    ::testing::Values(std::pair<const char*, int>{"tiny-llama-long", 256},
                      std::pair<const char*, int>{"tiny-llama-long-split512", 512}),
    [](const auto& info) { return "Split" + std::to_string(info.param.second); });

}  // namespace
}  // namespace telos::exec
