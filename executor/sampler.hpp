#pragma once
// Turning one position's logits into the next token, per request. Results depend only on the
// logits, the request's parameters and tokens, and the request-local step: the random draw is a
// counter-based function of (seed, step), so the same request gives the same tokens whatever else
// is in the batch and however often it was preempted.
//
// The order follows Hugging Face's generate (what users compare against):
//   penalties (repetition on prompt + output, presence/frequency on output) →
//   stop tokens masked while fewer than min_tokens were generated →
//   greedy argmax when temperature is 0, else: / temperature → top-k → top-p → min-p → draw.
// Logprobs are those of the model's raw distribution (log-softmax of the unprocessed logits), as
// vLLM reports them by default.
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace telos::exec {

struct SamplingParams {
  float temperature = 1.0f;           // 0: greedy
  int top_k = 0;                      // 0: off
  float top_p = 1.0f;                 // 1: off
  float min_p = 0.0f;                 // 0: off
  float repetition_penalty = 1.0f;    // 1: off; > 1 discourages tokens seen in prompt or output
  float presence_penalty = 0.0f;      // subtracted once from every token already generated
  float frequency_penalty = 0.0f;     // subtracted per occurrence in the generated tokens
  std::optional<std::uint64_t> seed;  // absent: the engine draws one per request
  int logprobs = 0;                   // report this many most likely alternatives per token (0..20)
  std::vector<std::int32_t> stop_token_ids;  // stop after generating any of these
  bool ignore_eos = false;                   // do not stop on the model's EOS ids
  std::optional<int> max_tokens;             // absent: as many as max_seq_len allows
  int min_tokens = 0;  // EOS and stop tokens are masked until this many were generated
};

inline constexpr int kMaxLogprobs = 20;

// A field of SamplingParams out of range: its name and what it must be ("top_p", "must be in
// (0, 1]").
struct SamplingRefusal {
  std::string field, what;
};

// The first field out of range, or nullopt when every field is valid. The engine's validate() and
// the server's request parser both ask this, so the server refuses exactly what the engine would.
std::optional<SamplingRefusal> check_sampling(const SamplingParams& params, int vocab_size);

// Throws telos::Error naming `who` (e.g. "request 7") and the field when a value is out of range.
void validate(const SamplingParams& params, int vocab_size, const std::string& who);

struct TokenLogprob {
  std::int32_t token = 0;
  float logprob = 0.0f;
};

struct SampledToken {
  std::int32_t token = 0;
  float logprob = 0.0f;           // of `token` under the raw distribution
  std::vector<TokenLogprob> top;  // params.logprobs most likely tokens, most likely first
};

// Everything besides the logits that a draw depends on.
struct SamplingContext {
  const SamplingParams* params = nullptr;
  std::span<const std::int32_t> prompt;
  std::span<const std::int32_t> generated;
  std::span<const std::int32_t> eos_token_ids;  // the model's
  std::uint64_t seed = 0;                       // params.seed, or the engine's draw
};

// A uniform double in [0, 1) that is a pure function of (seed, counter): a SplitMix64 finalizer
// over the pair. Counter-based so that no generator state travels with a request.
double counter_uniform(std::uint64_t seed, std::uint64_t counter);

class Sampler {
 public:
  SampledToken sample(std::span<const float> logits, const SamplingContext& context);

  // The distribution a non-greedy draw uses after every mask (zeros where masked, summing to 1);
  // for greedy parameters, all mass on the argmax. Exposed so tests can check masks exactly.
  std::vector<double> distribution(std::span<const float> logits, const SamplingContext& context);

 private:
  // Applies penalties and min_tokens masking to a copy of the logits in work_.
  void process(std::span<const float> logits, const SamplingContext& context);
  // From work_: the kept tokens in order of decreasing probability (ties by id) and their
  // normalized probabilities, after temperature, top-k, top-p and min-p.
  void truncate(const SamplingParams& params);

  std::vector<float> work_;
  std::vector<std::int32_t> order_;
  std::vector<double> probs_;  // parallel to order_
  std::vector<int> counts_;    // occurrences of each token in the output
};

}  // namespace telos::exec
