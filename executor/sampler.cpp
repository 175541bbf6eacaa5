#include "executor/sampler.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "support/error.hpp"

namespace telos::exec {
namespace {

std::uint64_t splitmix64(std::uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

}  // namespace

double counter_uniform(std::uint64_t seed, std::uint64_t counter) {
  const std::uint64_t bits = splitmix64(splitmix64(seed) ^ counter);
  return static_cast<double>(bits >> 11) * 0x1.0p-53;  // the top 53 bits: every double in [0, 1)
}

std::optional<SamplingRefusal> check_sampling(const SamplingParams& p, int vocab_size) {
  auto refuse = [](const char* field, std::string what) {
    return SamplingRefusal{field, std::move(what)};
  };
  if (!std::isfinite(p.temperature) || p.temperature < 0)
    return refuse("temperature", "must be >= 0 and finite");
  if (p.top_k < 0) return refuse("top_k", "must be >= 0 (0 turns it off)");
  if (!(p.top_p > 0 && p.top_p <= 1)) return refuse("top_p", "must be in (0, 1]");
  if (!(p.min_p >= 0 && p.min_p <= 1)) return refuse("min_p", "must be in [0, 1]");
  if (!std::isfinite(p.repetition_penalty) || p.repetition_penalty <= 0)
    return refuse("repetition_penalty", "must be > 0 and finite");
  if (!(p.presence_penalty >= -2 && p.presence_penalty <= 2))
    return refuse("presence_penalty", "must be in [-2, 2]");
  if (!(p.frequency_penalty >= -2 && p.frequency_penalty <= 2))
    return refuse("frequency_penalty", "must be in [-2, 2]");
  if (p.logprobs < 0 || p.logprobs > kMaxLogprobs)
    return refuse("logprobs", "must be in [0, " + std::to_string(kMaxLogprobs) + "]");
  for (std::int32_t t : p.stop_token_ids)
    if (t < 0 || t >= vocab_size)
      return refuse("stop_token_ids", "contains " + std::to_string(t) +
                                          ", outside the vocabulary of " +
                                          std::to_string(vocab_size));
  if (p.max_tokens && *p.max_tokens < 1) return refuse("max_tokens", "must be >= 1");
  if (p.min_tokens < 0) return refuse("min_tokens", "must be >= 0");
  if (p.max_tokens && p.min_tokens > *p.max_tokens)
    return refuse("min_tokens",
                  "must not exceed max_tokens (" + std::to_string(*p.max_tokens) + ")");
  return std::nullopt;
}

void validate(const SamplingParams& p, int vocab_size, const std::string& who) {
  if (std::optional<SamplingRefusal> r = check_sampling(p, vocab_size))
    fail(who + ": " + r->field + " " + r->what);
}

void Sampler::process(std::span<const float> logits, const SamplingContext& c) {
  const SamplingParams& p = *c.params;
  work_.assign(logits.begin(), logits.end());
  const auto vocab = static_cast<std::int32_t>(work_.size());

  if (p.repetition_penalty != 1.0f || p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f) {
    counts_.assign(work_.size(), 0);
    for (std::int32_t t : c.generated)
      if (t >= 0 && t < vocab) ++counts_[static_cast<std::size_t>(t)];
    if (p.repetition_penalty != 1.0f) {
      // Divide positive logits, multiply negative ones: both make the token less likely.
      std::vector<bool> seen(work_.size(), false);
      for (auto tokens : {c.prompt, c.generated})
        for (std::int32_t t : tokens)
          if (t >= 0 && t < vocab) seen[static_cast<std::size_t>(t)] = true;
      for (std::size_t i = 0; i < work_.size(); ++i)
        if (seen[i])
          work_[i] =
              work_[i] > 0 ? work_[i] / p.repetition_penalty : work_[i] * p.repetition_penalty;
    }
    for (std::size_t i = 0; i < work_.size(); ++i)
      if (counts_[i] > 0)
        work_[i] -= p.presence_penalty + p.frequency_penalty * static_cast<float>(counts_[i]);
  }

  if (static_cast<int>(c.generated.size()) < p.min_tokens) {
    const float masked = -std::numeric_limits<float>::infinity();
    if (!p.ignore_eos)
      for (std::int32_t t : c.eos_token_ids)
        if (t >= 0 && t < vocab) work_[static_cast<std::size_t>(t)] = masked;
    for (std::int32_t t : p.stop_token_ids) work_[static_cast<std::size_t>(t)] = masked;
  }
}

void Sampler::truncate(const SamplingParams& p) {
  const std::size_t vocab = work_.size();
  order_.resize(vocab);
  std::iota(order_.begin(), order_.end(), 0);
  auto more_likely = [&](std::int32_t a, std::int32_t b) {
    const float la = work_[static_cast<std::size_t>(a)], lb = work_[static_cast<std::size_t>(b)];
    return la > lb || (la == lb && a < b);
  };
  // Only the top k need ordering when top-k is on; otherwise the whole vocabulary does, for top-p.
  std::size_t kept = vocab;
  if (p.top_k > 0 && static_cast<std::size_t>(p.top_k) < vocab) {
    kept = static_cast<std::size_t>(p.top_k);
    std::partial_sort(order_.begin(), order_.begin() + static_cast<std::ptrdiff_t>(kept),
                      order_.end(), more_likely);
  } else {
    std::sort(order_.begin(), order_.end(), more_likely);
  }
  order_.resize(kept);

  // Softmax of logits / temperature over the kept tokens, in double.
  const double inv_t = 1.0 / static_cast<double>(p.temperature);
  const double top = static_cast<double>(work_[static_cast<std::size_t>(order_[0])]) * inv_t;
  probs_.resize(kept);
  double sum = 0;
  for (std::size_t i = 0; i < kept; ++i) {
    const double l = static_cast<double>(work_[static_cast<std::size_t>(order_[i])]);
    probs_[i] = std::isinf(l) && l < 0 ? 0.0 : std::exp(l * inv_t - top);
    sum += probs_[i];
  }
  for (double& q : probs_) q /= sum;

  // Top-p: the smallest prefix whose mass reaches top_p (the most likely token always stays).
  if (p.top_p < 1.0f) {
    double before = 0;
    std::size_t n = 0;
    while (n < kept && (n == 0 || before < static_cast<double>(p.top_p))) before += probs_[n++];
    kept = n;
  }
  // Min-p: tokens at least min_p times as likely as the most likely one.
  if (p.min_p > 0.0f) {
    const double floor = static_cast<double>(p.min_p) * probs_[0];
    std::size_t n = 1;
    while (n < kept && probs_[n] >= floor) ++n;
    kept = n;
  }
  // Masked tokens (probability 0) never survive.
  while (kept > 1 && probs_[kept - 1] == 0.0) --kept;
  order_.resize(kept);
  probs_.resize(kept);
  sum = std::accumulate(probs_.begin(), probs_.end(), 0.0);
  for (double& q : probs_) q /= sum;
}

std::vector<double> Sampler::distribution(std::span<const float> logits, const SamplingContext& c) {
  process(logits, c);
  std::vector<double> out(logits.size(), 0.0);
  if (c.params->temperature == 0.0f) {
    out[static_cast<std::size_t>(std::max_element(work_.begin(), work_.end()) - work_.begin())] = 1;
    return out;
  }
  truncate(*c.params);
  for (std::size_t i = 0; i < order_.size(); ++i)
    out[static_cast<std::size_t>(order_[i])] = probs_[i];
  return out;
}

SampledToken Sampler::sample(std::span<const float> logits, const SamplingContext& c) {
  const SamplingParams& p = *c.params;
  process(logits, c);
  SampledToken out;
  if (p.temperature == 0.0f) {
    // max_element returns the first maximum: ties go to the lowest id, as torch.argmax does.
    out.token =
        static_cast<std::int32_t>(std::max_element(work_.begin(), work_.end()) - work_.begin());
  } else {
    truncate(p);
    const double u = counter_uniform(c.seed, c.generated.size());
    double cumulative = 0;
    out.token = order_.back();
    for (std::size_t i = 0; i < order_.size(); ++i) {
      cumulative += probs_[i];
      if (u < cumulative) {
        out.token = order_[i];
        break;
      }
    }
  }

  // Raw log-softmax, for the sampled token and the top alternatives.
  const float max_logit = *std::max_element(logits.begin(), logits.end());
  double sum = 0;
  for (float l : logits) sum += std::exp(static_cast<double>(l) - max_logit);
  const double log_z = static_cast<double>(max_logit) + std::log(sum);
  auto logprob = [&](std::int32_t t) {
    return static_cast<float>(static_cast<double>(logits[static_cast<std::size_t>(t)]) - log_z);
  };
  out.logprob = logprob(out.token);
  if (p.logprobs > 0) {
    std::vector<std::int32_t> ids(logits.size());
    std::iota(ids.begin(), ids.end(), 0);
    const auto n = std::min<std::size_t>(static_cast<std::size_t>(p.logprobs), ids.size());
    std::partial_sort(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(n), ids.end(),
                      [&](std::int32_t a, std::int32_t b) {
                        const float la = logits[static_cast<std::size_t>(a)];
                        const float lb = logits[static_cast<std::size_t>(b)];
                        return la > lb || (la == lb && a < b);
                      });
    for (std::size_t i = 0; i < n; ++i) out.top.push_back({ids[i], logprob(ids[i])});
  }
  return out;
}

}  // namespace telos::exec
