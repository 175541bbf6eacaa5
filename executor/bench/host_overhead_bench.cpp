// telos-host-bench: the engine's host work per step, without a device. The engine (scheduler,
// page pool, event delivery) drives a backend that only packs the GPU engine's step descriptor
// (executor/gpu/step_descriptor.hpp, the same code the GPU engine runs) and answers every
// sampling row with a device-greedy token at once, so what is timed is what the host does between
// two GPU steps: scheduling, descriptor packing, the engine's bookkeeping. The target is <= 20 us
// per decode step at batch 1 and 64.
//
//   telos-host-bench ARTIFACT [--prompt-len N] [BATCH ...]
//       (default prompt 16 tokens, batches 1 8 64 256 capped at max_batch; a long prompt shows the
//       per-step work that grows with the context, such as the page tables' packing)
//
// Prints, per batch: host us per full-batch decode step (median, p90: scheduling, packing and
// launch, which an overlapped step does while the device runs the step before it), the loop's
// period, and the share of those steps launched overlapped (engine.hpp; the backend feeds sampled
// tokens).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "executor/artifact.hpp"
#include "executor/engine.hpp"
#include "executor/gpu/step_descriptor.hpp"
#include "support/error.hpp"

namespace telos::exec {
namespace {

class PackOnlyBackend : public ModelBackend {
 public:
  explicit PackOnlyBackend(const Artifact& a) : vocab_(a.model().vocab_size) {
    const ServingConfig& s = a.serving();
    pages_ = s.kv_pool_pages.value_or(4096);
    layout_ = StepDescriptorLayout::make(a.programs().max_tokens, a.programs().max_sample_rows,
                                         s.max_batch, max_pages_per_sequence(s),
                                         a.kv_cache().page_size, vocab_, pages_);
    for (auto& h : host_) h.resize(static_cast<std::size_t>(layout_.bytes));
  }
  int num_kv_pages() const override { return pages_; }
  int vocab_size() const override { return vocab_; }
  std::string name() const override { return "pack-only"; }
  bool samples_on_device() const override { return true; }
  bool feeds_sampled_tokens() const override { return true; }
  void forward(const Step&, std::vector<float>&) override { fail("pack-only backend: no logits"); }
  // Like the GPU engine: two descriptors alternate, so packing a step leaves the one in flight alone.
  void launch(const Step& step, std::span<const std::uint8_t> device_picks,
              std::span<const DeviceSampling>, bool want_logits) override {
    if (want_logits) fail("pack-only backend: requests must be greedy");
    int tokens = 0, rows = 0;
    for (const auto& s : step.sequences) tokens += static_cast<int>(s.tokens.size()), rows += s.samples ? 1 : 0;
    int bucket = 1;
    while (bucket < tokens) bucket *= 2;
    const int slot = (oldest_ + in_flight_) % 2;
    pack_step_descriptor(layout_, step, std::min(bucket, layout_.max_tokens), rows, {}, fed_rows_,
                         host_[slot].data(), &page_rows_[slot]);
    fed_rows_ = rows;
    greedy_[slot] = device_picks.size();
    ++in_flight_;
  }
  void wait(StepOutput& out) override {
    out.device_tokens.assign(greedy_[oldest_], 1);
    out.logits.clear();
    oldest_ ^= 1;
    --in_flight_;
  }

 private:
  int vocab_ = 0, pages_ = 0;
  int oldest_ = 0, in_flight_ = 0, fed_rows_ = 0;
  std::size_t greedy_[2] = {};
  StepDescriptorLayout layout_;
  std::vector<char> host_[2];
  PageRowCache page_rows_[2];
};

double quantile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[static_cast<std::size_t>(q * static_cast<double>(v.size() - 1) + 0.5)];
}

int run(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: telos-host-bench ARTIFACT [--prompt-len N] [BATCH ...]\n");
    return 2;
  }
  auto artifact = Artifact::load(argv[1]);
  std::vector<int> batches;
  int prompt = 16;
  for (int i = 2; i < argc; ++i) {
    if (std::string(argv[i]) != "--prompt-len") {
      batches.push_back(std::atoi(argv[i]));
      continue;
    }
    if (i + 1 == argc) fail("--prompt-len needs a number of tokens");
    prompt = std::atoi(argv[++i]);
  }
  if (prompt < 1) fail("--prompt-len must be at least 1");
  if (batches.empty()) batches = {1, 8, 64, 256};
  const int max_batch = artifact->serving().max_batch;
  EngineOptions options;
  options.record_step_timings = true;
  options.check_invariants = false;
  auto engine = Engine::create(artifact, std::make_unique<PackOnlyBackend>(*artifact), options);
  if (prompt >= engine->max_seq_len())
    fail("--prompt-len " + std::to_string(prompt) + " leaves no room below max_seq_len " +
         std::to_string(engine->max_seq_len()));
  const int gen = std::min(256, engine->max_seq_len() - prompt);
  std::printf("%s: prompt %d, %d generated per request\n%6s %14s %14s %14s %12s\n", artifact->model().name.c_str(),
              prompt, gen, "batch", "host us p50", "host us p90", "period us p50", "overlapped");
  for (int batch : batches) {
    if (batch > max_batch) continue;
    engine->take_step_timings();
    std::vector<GenerationRequest> requests;
    for (int i = 0; i < batch; ++i) {
      GenerationRequest r;
      for (int j = 0; j < prompt; ++j) r.prompt.push_back((i * 31 + j * 7) % artifact->model().vocab_size);
      r.sampling.temperature = 0;
      r.sampling.max_tokens = gen;
      r.sampling.ignore_eos = true;
      requests.push_back(std::move(r));
    }
    // At once, as telos-run bench submits a batch: one by one, the loop could admit the first
    // requests before the last arrived, and the steps around a late admission would depend on the
    // timing of this thread against the engine's.
    const std::vector<RequestHandle> handles = engine->submit_all(std::move(requests));
    for (auto& h : handles) {
      RequestEvent e;
      while (h->next(e)) {
      }
    }
    engine->wait_idle();
    std::vector<double> host, period;
    int overlapped = 0;
    const auto steps = engine->take_step_timings();
    for (std::size_t i = 1; i < steps.size(); ++i)
      if (steps[i].decode && steps[i].sequences == batch && steps[i - 1].decode && steps[i - 1].sequences == batch) {
        host.push_back(steps[i].host_seconds * 1e6);
        period.push_back(std::chrono::duration<double, std::micro>(steps[i].started - steps[i - 1].started).count());
        overlapped += steps[i].overlapped ? 1 : 0;
      }
    std::printf("%6d %14.1f %14.1f %14.1f %11.0f%%\n", batch, quantile(host, 0.5), quantile(host, 0.9),
                quantile(period, 0.5), host.empty() ? 0.0 : 100.0 * overlapped / static_cast<double>(host.size()));
  }
  return 0;
}

}  // namespace
}  // namespace telos::exec

int main(int argc, char** argv) {
  try {
    return telos::exec::run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "telos-host-bench: %s\n", e.what());
    return 1;
  }
}
