#include "executor/sampler.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "support/error.hpp"

namespace telos::exec {
namespace {

struct Draw {
  SamplingParams params;
  std::vector<std::int32_t> prompt = {3};
  std::vector<std::int32_t> generated;
  std::vector<std::int32_t> eos = {0};
  std::uint64_t seed = 1;

  SamplingContext context() const {
    SamplingContext c;
    c.params = &params;
    c.prompt = prompt;
    c.generated = generated;
    c.eos_token_ids = eos;
    c.seed = seed;
    return c;
  }
};

// Logits whose softmax is exactly `probs` (up to a constant).
std::vector<float> logits_for(const std::vector<double>& probs) {
  std::vector<float> l;
  for (double p : probs) l.push_back(static_cast<float>(std::log(p)));
  return l;
}

std::vector<int> kept(const std::vector<double>& dist) {
  std::vector<int> ids;
  for (std::size_t i = 0; i < dist.size(); ++i)
    if (dist[i] > 0) ids.push_back(static_cast<int>(i));
  return ids;
}

TEST(Sampler, GreedyTakesTheArgmaxAndBreaksTiesTowardTheLowestId) {
  Sampler s;
  Draw d;
  d.params.temperature = 0;
  EXPECT_EQ(s.sample(std::vector<float>{0.1f, 2.0f, -1.0f, 1.9f}, d.context()).token, 1);
  EXPECT_EQ(s.sample(std::vector<float>{0.5f, 3.0f, 3.0f}, d.context()).token, 1);
}

TEST(Sampler, ASeedGivesTheSameTokenWhateverWasDrawnBefore) {
  const std::vector<float> logits = {0.3f, 0.1f, 0.5f, 0.2f, 0.4f, 0.0f, 0.35f, 0.25f};
  Draw d;
  d.seed = 1234;
  d.generated = {5, 6, 7};
  Sampler a;
  const std::int32_t first = a.sample(logits, d.context()).token;
  // Another request's draws in between (another batch composition) change nothing.
  Sampler b;
  Draw other;
  other.seed = 99;
  for (int i = 0; i < 10; ++i) b.sample(logits, other.context());
  EXPECT_EQ(b.sample(logits, d.context()).token, first);
  EXPECT_EQ(a.sample(logits, d.context()).token, first);
  // Different seeds or steps do explore: over 64 seeds more than one token comes out.
  std::set<std::int32_t> seen;
  for (std::uint64_t seed = 0; seed < 64; ++seed) {
    d.seed = seed;
    seen.insert(a.sample(logits, d.context()).token);
  }
  EXPECT_GT(seen.size(), 3u);
}

TEST(Sampler, CounterUniformIsAPureFunctionInTheUnitInterval) {
  EXPECT_EQ(counter_uniform(7, 3), counter_uniform(7, 3));
  EXPECT_NE(counter_uniform(7, 3), counter_uniform(7, 4));
  EXPECT_NE(counter_uniform(7, 3), counter_uniform(8, 3));
  for (std::uint64_t i = 0; i < 1000; ++i) {
    const double u = counter_uniform(i, i * 31);
    EXPECT_GE(u, 0.0);
    EXPECT_LT(u, 1.0);
  }
}

TEST(Sampler, TopKKeepsExactlyTheKMostLikely) {
  Sampler s;
  Draw d;
  d.params.top_k = 3;
  const auto dist = s.distribution(std::vector<float>{0.1f, 0.9f, 0.5f, 0.7f, 0.2f}, d.context());
  EXPECT_EQ(kept(dist), (std::vector<int>{1, 2, 3}));
  double sum = 0;
  for (double p : dist) sum += p;
  EXPECT_NEAR(sum, 1.0, 1e-12);
}

TEST(Sampler, TopPKeepsTheSmallestPrefixReachingP) {
  Sampler s;
  Draw d;
  const auto logits = logits_for({0.05, 0.5, 0.15, 0.3});
  d.params.top_p = 0.75f;  // 0.5 < 0.75, 0.5 + 0.3 reaches it
  EXPECT_EQ(kept(s.distribution(logits, d.context())), (std::vector<int>{1, 3}));
  d.params.top_p = 0.85f;
  EXPECT_EQ(kept(s.distribution(logits, d.context())), (std::vector<int>{1, 2, 3}));
  d.params.top_p = 0.1f;  // the most likely token always stays
  const auto only = s.distribution(logits, d.context());
  EXPECT_EQ(kept(only), (std::vector<int>{1}));
  EXPECT_DOUBLE_EQ(only[1], 1.0);
}

TEST(Sampler, MinPKeepsTokensWithinAFactorOfTheBest) {
  Sampler s;
  Draw d;
  const auto logits = logits_for({0.05, 0.5, 0.15, 0.3});
  d.params.min_p = 0.2f;  // floor 0.1
  const auto dist = s.distribution(logits, d.context());
  EXPECT_EQ(kept(dist), (std::vector<int>{1, 2, 3}));
  EXPECT_NEAR(dist[1], 0.5 / 0.95, 1e-6);
  d.params.min_p = 0.7f;  // floor 0.35
  EXPECT_EQ(kept(s.distribution(logits, d.context())), (std::vector<int>{1}));
}

TEST(Sampler, PenaltiesFollowTheirDefinitions) {
  Sampler s;
  Draw d;
  d.params.temperature = 1;
  d.prompt = {0};
  d.generated = {1, 1, 2};
  d.params.repetition_penalty = 2.0f;
  d.params.presence_penalty = 0.5f;
  d.params.frequency_penalty = 0.25f;
  const std::vector<float> logits = {1.0f, 2.0f, -1.0f, 0.5f};
  // Expected logits: token 0 (prompt): 1 / 2; token 1 (output x2): 2 / 2 - 0.5 - 0.5;
  // token 2 (output x1): -1 * 2 - 0.5 - 0.25; token 3: unchanged.
  const std::vector<double> want_logits = {0.5, 0.0, -2.75, 0.5};
  std::vector<double> want;
  double z = 0;
  for (double l : want_logits) z += std::exp(l);
  for (double l : want_logits) want.push_back(std::exp(l) / z);
  const auto dist = s.distribution(logits, d.context());
  for (std::size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(dist[i], want[i], 1e-6) << i;
}

TEST(Sampler, MinTokensMasksEosAndStopTokens) {
  Sampler s;
  Draw d;
  d.params.temperature = 0;
  d.params.min_tokens = 2;
  d.params.stop_token_ids = {3};
  const std::vector<float> logits = {5.0f, 1.0f, 2.0f, 4.0f};  // EOS (0) then stop token 3 lead
  d.generated = {1};
  EXPECT_EQ(s.sample(logits, d.context()).token, 2);
  d.generated = {1, 1};
  EXPECT_EQ(s.sample(logits, d.context()).token, 0);
  // ignore_eos leaves EOS alone even under min_tokens.
  d.generated = {1};
  d.params.ignore_eos = true;
  EXPECT_EQ(s.sample(logits, d.context()).token, 0);
}

TEST(Sampler, LogprobsAreTheRawLogSoftmaxMostLikelyFirst) {
  Sampler s;
  Draw d;
  d.params.temperature = 0;
  d.params.logprobs = 2;
  d.params.repetition_penalty = 3.0f;  // changes the choice, not the reported distribution
  d.prompt = {1};
  const std::vector<float> logits = {0.0f, 3.0f, 2.0f, 1.0f};
  const SampledToken t = s.sample(logits, d.context());
  double z = 0;
  for (float l : logits) z += std::exp(static_cast<double>(l));
  EXPECT_EQ(t.token, 2);
  EXPECT_NEAR(t.logprob, 2.0 - std::log(z), 1e-6);
  ASSERT_EQ(t.top.size(), 2u);
  EXPECT_EQ(t.top[0].token, 1);
  EXPECT_NEAR(t.top[0].logprob, 3.0 - std::log(z), 1e-6);
  EXPECT_EQ(t.top[1].token, 2);
}

// Draws with temperature 0.7 over many (seed, step) counters follow softmax(logits / 0.7): the
// chi-square statistic with 5 degrees of freedom stays below 25 (p < 2e-4 for a true sampler).
// Fixed seeds make the test deterministic.
TEST(Sampler, TemperatureSamplingMatchesTheSoftmaxDistribution) {
  const std::vector<float> logits = {1.0f, 0.2f, -0.5f, 1.5f, 0.0f, -2.0f};
  const double temperature = 0.7;
  std::vector<double> expected;
  double z = 0;
  for (float l : logits) z += std::exp(l / temperature);
  for (float l : logits) expected.push_back(std::exp(l / temperature) / z);

  Sampler s;
  Draw d;
  d.params.temperature = static_cast<float>(temperature);
  const int draws = 40000;
  std::vector<int> counts(logits.size(), 0);
  for (int i = 0; i < draws; ++i) {
    d.seed = static_cast<std::uint64_t>(i / 4);
    d.generated.assign(static_cast<std::size_t>(i % 4), 1);  // the step counter
    ++counts[static_cast<std::size_t>(s.sample(logits, d.context()).token)];
  }
  double chi2 = 0;
  for (std::size_t i = 0; i < logits.size(); ++i) {
    const double e = expected[i] * draws;
    chi2 += (counts[i] - e) * (counts[i] - e) / e;
  }
  EXPECT_LT(chi2, 25.0);
  // And a sampler that ignored temperature would fail the same bound.
  std::vector<double> untempered;
  double z1 = 0;
  for (float l : logits) z1 += std::exp(l);
  double chi2_wrong = 0;
  for (std::size_t i = 0; i < logits.size(); ++i) {
    const double e = std::exp(logits[i]) / z1 * draws;
    chi2_wrong += (counts[i] - e) * (counts[i] - e) / e;
  }
  EXPECT_GT(chi2_wrong, 25.0);
}

TEST(Sampler, ValidationNamesTheRequestAndField) {
  SamplingParams p;
  p.top_p = 0;
  try {
    validate(p, 10, "request 3");
    FAIL();
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "request 3: top_p must be in (0, 1]");
  }
  p = {};
  p.stop_token_ids = {10};
  EXPECT_THROW(validate(p, 10, "r"), Error);
  p = {};
  p.temperature = -1;
  EXPECT_THROW(validate(p, 10, "r"), Error);
  p = {};
  p.logprobs = 21;
  EXPECT_THROW(validate(p, 10, "r"), Error);
  p = {};
  p.max_tokens = 2;
  p.min_tokens = 3;
  EXPECT_THROW(validate(p, 10, "r"), Error);
  validate(SamplingParams{}, 10, "r");
}

}  // namespace
}  // namespace telos::exec
