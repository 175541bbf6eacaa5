#include "executor/scheduler.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <map>
#include <numeric>
#include <random>
#include <string>

#include "support/error.hpp"

namespace telos::exec {
namespace {

SchedulerLimits limits(int max_batch = 4, int budget = 16, int page_size = 4,
                       int max_seq_len = 64) {
  return SchedulerLimits{max_batch, max_seq_len, page_size, budget, {1, 2, 4}, {8, 16}};
}

std::vector<std::int32_t> prompt(int n, std::int32_t first = 10) {
  std::vector<std::int32_t> p(static_cast<std::size_t>(n));
  std::iota(p.begin(), p.end(), first);
  return p;
}

// Plays the engine: marks the step computed and gives every sampling sequence a token.
void run(Scheduler& s, const Step& step, std::int32_t token = 7) {
  s.commit(step);
  s.cache_prompt_pages(step);
  for (const ScheduledSequence& q : step.sequences)
    if (q.samples) s.append_token(q.request, token);
  s.check_invariant();
}

TEST(Scheduler, AdmitsInArrivalOrderWithinBatchAndBudget) {
  KvPagePool pool(64);
  Scheduler s(limits(/*max_batch=*/2, /*budget=*/16), pool);
  s.add(1, prompt(10), 4);
  s.add(2, prompt(10), 4);
  s.add(3, prompt(2), 4);
  Step step = s.schedule();
  ASSERT_EQ(step.sequences.size(), 2u);
  EXPECT_EQ(step.sequences[0].request, 1u);
  EXPECT_EQ(step.sequences[0].tokens.size(), 10u);
  EXPECT_TRUE(step.sequences[0].samples);
  EXPECT_EQ(step.sequences[1].request, 2u);
  EXPECT_EQ(step.sequences[1].tokens.size(), 6u);  // the budget's remainder
  EXPECT_FALSE(step.sequences[1].samples);
  EXPECT_EQ(step.num_tokens, 16);
  EXPECT_EQ(s.num_running(), 2);
  EXPECT_EQ(s.num_waiting(), 1);  // max_batch holds request 3 back
  // Pages for every known token are taken at admission: 10 tokens / 4 per page = 3 pages each.
  EXPECT_EQ(pool.used_pages(), 6);
  run(s, step);
}

TEST(Scheduler, ChunksALongPromptAndSamplesOnlyAtItsEnd) {
  KvPagePool pool(64);
  Scheduler s(limits(4, 16), pool);
  s.add(1, prompt(40), 4);
  std::vector<int> chunks;
  for (int i = 0; i < 3; ++i) {
    Step step = s.schedule();
    ASSERT_EQ(step.sequences.size(), 1u);
    const ScheduledSequence& q = step.sequences[0];
    EXPECT_EQ(q.first_position, i * 16);
    EXPECT_EQ(q.samples, i == 2);
    chunks.push_back(static_cast<int>(q.tokens.size()));
    EXPECT_EQ(q.tokens[0], 10 + i * 16);
    run(s, step);
  }
  EXPECT_EQ(chunks, (std::vector<int>{16, 16, 8}));
  // Then decode: one token at position 40.
  Step step = s.schedule();
  ASSERT_EQ(step.sequences.size(), 1u);
  EXPECT_EQ(step.sequences[0].first_position, 40);
  EXPECT_EQ(step.sequences[0].tokens.size(), 1u);
  EXPECT_EQ(step.bucket_kind, BucketKind::Decode);
}

TEST(Scheduler, DecodeComesFirstAndPrefillFillsTheBudget) {
  KvPagePool pool(64);
  Scheduler s(limits(4, 16), pool);
  s.add(1, prompt(3), 8);
  run(s, s.schedule());  // request 1's prompt; it now decodes
  s.add(2, prompt(30), 4);
  Step step = s.schedule();
  ASSERT_EQ(step.sequences.size(), 2u);
  EXPECT_EQ(step.sequences[0].request, 1u);
  EXPECT_EQ(step.sequences[0].tokens.size(), 1u);
  EXPECT_EQ(step.sequences[1].request, 2u);
  EXPECT_EQ(step.sequences[1].tokens.size(), 15u);
  EXPECT_EQ(step.num_tokens, 16);
  EXPECT_EQ(step.bucket_kind, BucketKind::Prefill);
  EXPECT_EQ(step.bucket, 16);
}

// A step that carries decodes holds at most the mixed budget (8 of the 16 here), so a long prompt
// beside decoding requests goes in shorter chunks; alone it takes the whole budget.
TEST(Scheduler, AStepWithDecodesHoldsTheMixedBudget) {
  KvPagePool pool(64);
  SchedulerLimits l = limits(4, 16);
  l.mixed_budget = 8;
  Scheduler s(l, pool);
  s.add(1, prompt(3), 8);
  s.add(2, prompt(40), 4);
  Step first = s.schedule();  // no decodes yet: 3 + 13 prompt tokens
  EXPECT_EQ(first.num_tokens, 16);
  run(s, first);
  Step mixed = s.schedule();  // request 1 decodes: 1 + 7
  ASSERT_EQ(mixed.sequences.size(), 2u);
  EXPECT_EQ(mixed.sequences[0].tokens.size(), 1u);
  EXPECT_EQ(mixed.sequences[1].tokens.size(), 7u);
  EXPECT_EQ(mixed.bucket, 8);
  run(s, mixed);
  s.remove(1);
  Step alone = s.schedule();  // request 2's prompt alone again: the whole budget
  EXPECT_EQ(alone.num_tokens, 16);
}

// Decodes that spend most of the mixed budget leave the prompts half of it, within the token
// budget: three decodes and a mixed budget of 4 give the prompt 2 tokens a step.
TEST(Scheduler, PromptsKeepHalfTheMixedBudgetUnderManyDecodes) {
  KvPagePool pool(64);
  SchedulerLimits l = limits(4, 16);
  l.mixed_budget = 4;
  Scheduler s(l, pool);
  for (RequestId id = 1; id <= 3; ++id) s.add(id, prompt(1), 8);
  run(s, s.schedule());
  s.add(4, prompt(20), 4);
  Step step = s.schedule();
  ASSERT_EQ(step.sequences.size(), 4u);
  EXPECT_EQ(step.sequences[3].tokens.size(), 2u);
  EXPECT_EQ(step.num_tokens, 5);
  SchedulerLimits bad = limits(4, 16);
  bad.mixed_budget = 17;
  EXPECT_THROW(Scheduler(bad, pool), Error);
  bad.mixed_budget = -1;
  EXPECT_THROW(Scheduler(bad, pool), Error);
}

TEST(Scheduler, PadsToTheSmallestBucketThatHoldsTheStep) {
  KvPagePool pool(64);
  Scheduler s(limits(4, 16), pool);
  for (RequestId id = 1; id <= 3; ++id) s.add(id, prompt(1), 8);
  // Three one-token prompts: one token a sequence, but prompt tokens, so a prefill step (a prompt
  // token always meets the prefill buckets' attention, docs/artifact.md).
  Step first = s.schedule();
  EXPECT_EQ(first.bucket_kind, BucketKind::Prefill);
  EXPECT_EQ(first.bucket, 8);
  for (const ScheduledSequence& q : first.sequences) EXPECT_EQ(q.prompt_len, 1);
  run(s, first);
  s.remove(3);
  Step second = s.schedule();  // their first generated tokens: a decode step
  EXPECT_EQ(second.bucket_kind, BucketKind::Decode);
  EXPECT_EQ(second.bucket, 2);
  run(s, second);
  s.add(4, prompt(5), 4);
  Step mixed = s.schedule();  // 2 decode tokens + 5 prompt tokens = 7
  EXPECT_EQ(mixed.bucket_kind, BucketKind::Prefill);
  EXPECT_EQ(mixed.num_tokens, 7);
  EXPECT_EQ(mixed.bucket, 8);
}

// max_batch 4 with a budget of 2 tokens: four decodes take one step together (a decode bucket of
// 4), and prompts get every other step instead of waiting for decodes to end.
TEST(Scheduler, DecodesBeyondTheBudgetAlternateWithPrompts) {
  KvPagePool pool(64);
  Scheduler s(SchedulerLimits{4, 64, 4, 2, {1, 2, 4}, {2}}, pool);
  for (RequestId id = 1; id <= 5; ++id) s.add(id, prompt(1), 30);
  std::vector<int> running_after;
  std::vector<int> tokens;
  for (int i = 0; i < 6; ++i) {
    Step step = s.schedule();
    tokens.push_back(step.num_tokens);
    run(s, step);
    running_after.push_back(s.num_running());
  }
  // Step 1 admits two one-token prompts. Their decodes would spend the whole budget, so step 2 is
  // a prompt turn: two more are admitted. From step 3 on, four decode together; no prompt turn
  // comes while the batch is full.
  EXPECT_EQ(tokens, (std::vector<int>{2, 2, 4, 4, 4, 4}));
  EXPECT_EQ(running_after, (std::vector<int>{2, 4, 4, 4, 4, 4}));
  EXPECT_EQ(s.num_waiting(), 1);
  Step step = s.schedule();
  EXPECT_EQ(step.bucket_kind, BucketKind::Decode);
  EXPECT_EQ(step.bucket, 4);
}

TEST(Scheduler, PreemptsTheYoungestWhenThePoolRunsOut) {
  // 4 pages of 4 positions. Two requests with 8-token prompts take 2 pages each; the first decode
  // past position 8 needs a fifth page.
  KvPagePool pool(4);
  Scheduler s(limits(4, 16, 4, 16), pool);
  s.add(1, prompt(8), 8);
  s.add(2, prompt(8), 8);
  run(s, s.schedule());
  EXPECT_EQ(pool.free_pages(), 0);
  Step step = s.schedule();
  // Request 1 (older) needs a page for position 8: request 2 is preempted and its pages go to 1.
  ASSERT_EQ(step.sequences.size(), 1u);
  EXPECT_EQ(step.sequences[0].request, 1u);
  EXPECT_EQ(s.num_preemptions(), 1u);
  EXPECT_EQ(s.num_waiting(), 1);
  const SequenceState* two = s.find(2);
  ASSERT_NE(two, nullptr);
  EXPECT_EQ(two->num_computed, 0);
  EXPECT_TRUE(two->pages.empty());
  EXPECT_EQ(two->tokens.size(), 9u);  // its prompt and the token it had generated are kept
  run(s, step);
  // When request 1 ends, request 2 comes back and recomputes all 9 known tokens at once.
  s.remove(1);
  Step again = s.schedule();
  ASSERT_EQ(again.sequences.size(), 1u);
  EXPECT_EQ(again.sequences[0].request, 2u);
  EXPECT_EQ(again.sequences[0].tokens.size(), 9u);
  EXPECT_TRUE(again.sequences[0].samples);
  run(s, again);
}

// A step holds at most max_batch generated tokens (the GPU's prefill buckets run the split
// attention kernels over their first max_batch rows): a preempted request recomputes the tokens it
// generated at most max_batch a step, beside the decodes, and its prompt within the budget.
TEST(Scheduler, RecomputedTokensCountAgainstMaxBatch) {
  // 6 pages of 4 positions, max_batch 2. Request 1 (prompt 12) and request 2 (prompt 2) decode
  // side by side until request 1 needs a page for position 16 and the pool is empty: request 2,
  // younger, is preempted with its prompt and the 5 tokens it generated.
  KvPagePool pool(6);
  Scheduler s(limits(2, 16, 4, 32), pool);
  s.add(1, prompt(12), 8);
  s.add(2, prompt(2), 16);
  while (s.num_preemptions() == 0) run(s, s.schedule());
  ASSERT_NE(s.find(2), nullptr);
  EXPECT_EQ(s.find(2)->tokens.size(), 7u);
  s.remove(1);
  // Back alone: its 2 prompt tokens and 2 of its 5 generated ones, then 2, then the last one it
  // knows, alone: a decode.
  std::vector<int> chunks;
  while (s.find(2)->num_computed < 7) {
    Step step = s.schedule();
    ASSERT_EQ(step.sequences.size(), 1u);
    chunks.push_back(static_cast<int>(step.sequences[0].tokens.size()));
    s.commit(step);
  }
  EXPECT_EQ(chunks, (std::vector<int>{4, 2, 1}));
}

TEST(Scheduler, ARequestAloneIsNeverPreemptedAndPreemptsItselfLast) {
  // 3 pages: request 1 grows to fill them; request 2, younger, gives way every time.
  KvPagePool pool(3);
  Scheduler s(limits(2, 8, 4, 12), pool);
  s.add(1, prompt(4), 8);
  s.add(2, prompt(4), 4);
  int steps = 0;
  while (s.num_running() + s.num_waiting() > 0 && steps < 100) {
    Step step = s.schedule();
    ASSERT_FALSE(step.empty());
    run(s, step);
    ++steps;
    for (RequestId id : {RequestId{1}, RequestId{2}}) {
      const SequenceState* q = s.find(id);
      if (q && static_cast<int>(q->tokens.size()) == q->max_len) s.remove(id);
    }
  }
  EXPECT_EQ(s.num_running() + s.num_waiting(), 0);
  EXPECT_GT(s.num_preemptions(), 0u);
  EXPECT_EQ(pool.free_pages(), 3);
}

TEST(Scheduler, CancellingAnywhereReturnsPages) {
  KvPagePool pool(16);
  Scheduler s(limits(2, 8, 4, 32), pool);
  s.add(1, prompt(20), 4);  // mid-prefill after one step
  s.add(2, prompt(4), 4);   // waiting (the budget is spent on request 1)
  Step step = s.schedule();
  ASSERT_EQ(step.sequences.size(), 1u);
  run(s, step);
  EXPECT_EQ(pool.used_pages(), 5);
  s.remove(2);
  s.check_invariant();
  s.remove(1);
  s.check_invariant();
  EXPECT_EQ(pool.free_pages(), 16);
  s.remove(1);  // a second cancel is harmless
  EXPECT_EQ(s.num_running() + s.num_waiting(), 0);
}

TEST(Scheduler, RejectsRequestsThatCanNeverFit) {
  KvPagePool pool(4);
  Scheduler s(limits(2, 8, 4, 32), pool);
  try {
    s.add(9, prompt(30), 8);
    FAIL() << "expected a rejection";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("request 9"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("max_seq_len 32"), std::string::npos) << e.what();
  }
  try {
    s.add(10, prompt(16), 8);  // 24 positions: 6 pages, the pool has 4
    FAIL() << "expected a rejection";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("6 KV pages"), std::string::npos) << e.what();
  }
  EXPECT_THROW(s.add(11, {}, 4), Error);
  EXPECT_THROW(s.add(12, prompt(2), 0), Error);
  EXPECT_EQ(s.num_waiting(), 0);
}

// Thousands of requests with random prompts, lengths, early stops and cancellations, under a pool
// small enough to force preemption: every request finishes, the invariant holds after every step,
// and every page is free at the end.
void run_random_lifecycles(int max_batch, int budget, unsigned seed, int mixed_budget = 0) {
  std::mt19937 rng(seed);
  KvPagePool pool(24);
  SchedulerLimits l{max_batch, 48, 4, budget, {1, 2, 4, 8}, {budget}};
  l.mixed_budget = mixed_budget;
  Scheduler s(l, pool);
  std::map<RequestId, int> generated;
  RequestId next_id = 1;
  int finished = 0, cancelled = 0, steps = 0;
  const int total = 3000;
  while (finished + cancelled < total) {
    // Arrivals.
    while (next_id <= static_cast<RequestId>(total) && s.num_waiting() < 6 &&
           std::uniform_int_distribution<int>(0, 2)(rng) != 0) {
      const int p = std::uniform_int_distribution<int>(1, 30)(rng);
      const int m = std::uniform_int_distribution<int>(1, 48 - p)(rng);
      s.add(next_id, prompt(p), m);
      generated[next_id] = 0;
      ++next_id;
    }
    // Cancellations of any live request, waiting or running.
    if (!generated.empty() && std::uniform_int_distribution<int>(0, 9)(rng) == 0) {
      auto it = generated.begin();
      std::advance(
          it, std::uniform_int_distribution<int>(0, static_cast<int>(generated.size()) - 1)(rng));
      s.remove(it->first);
      generated.erase(it);
      ++cancelled;
    }
    Step step = s.schedule();
    if (step.empty()) {
      ASSERT_EQ(s.num_running() + s.num_waiting(), 0) << "live requests but nothing scheduled";
      continue;
    }
    ASSERT_LE(static_cast<int>(step.sequences.size()), max_batch);
    if (step.bucket_kind == BucketKind::Prefill) {
      ASSERT_LE(step.num_tokens, budget);
      // With decodes, at most the mixed budget, or the decodes and half of it.
      const int decodes = static_cast<int>(std::count_if(
          step.sequences.begin(), step.sequences.end(), [](const ScheduledSequence& q) {
            return q.first_position >= q.prompt_len && q.tokens.size() == 1;
          }));
      if (mixed_budget > 0 && decodes > 0) {
        ASSERT_LE(step.num_tokens, std::max(mixed_budget, decodes + std::max(1, mixed_budget / 2)));
      }
    }
    // At most max_batch generated tokens (decodes and recomputed ones): the GPU's prefill buckets
    // run the split kernels over that many rows.
    int generated_tokens = 0;
    for (const ScheduledSequence& q : step.sequences)
      generated_tokens += std::max(0, q.first_position + static_cast<int>(q.tokens.size()) -
                                          std::max(q.first_position, q.prompt_len));
    ASSERT_LE(generated_tokens, max_batch);
    if (step.bucket_kind == BucketKind::Decode)
      ASSERT_GE(step.bucket, static_cast<int>(step.sequences.size()));
    else
      ASSERT_GE(step.bucket, step.num_tokens);
    s.commit(step);
    for (const ScheduledSequence& q : step.sequences) {
      if (!q.samples) continue;
      const SequenceState* st = s.find(q.request);
      const int n = ++generated[q.request];
      const bool eos = std::uniform_int_distribution<int>(0, 19)(rng) == 0;
      if (eos || st->prompt_len + n == st->max_len) {
        s.remove(q.request);
        generated.erase(q.request);
        ++finished;
      } else {
        s.append_token(q.request, 7);
      }
    }
    s.check_invariant();
    ++steps;
    ASSERT_LT(steps, 200000) << "no progress";
  }
  EXPECT_EQ(pool.free_pages(), pool.num_pages());
  EXPECT_GT(s.num_preemptions(), 0u) << "the pool was meant to be small enough to preempt";
  EXPECT_GT(finished, total / 2);
}

TEST(Scheduler, RandomizedLifecyclesLeakNoPage) {
  run_random_lifecycles(4, 16, 42);
}

// The same with max_batch above the token budget, where decodes and prompts alternate.
TEST(Scheduler, RandomizedLifecyclesLeakNoPageWhenDecodesOutnumberTheBudget) {
  run_random_lifecycles(8, 4, 7);
}

// The same with a mixed budget under the token budget.
TEST(Scheduler, RandomizedLifecyclesLeakNoPageWithAMixedBudget) {
  run_random_lifecycles(4, 16, 11, 6);
}

// The engine's overlapped steps: a placeholder token is scheduled like any other before it is
// known, then resolved in place; a step committed after one of its requests ended skips it.
TEST(Scheduler, PlaceholderTokensAreScheduledAndResolvedInPlace) {
  KvPagePool pool(64);
  Scheduler s(limits(), pool);
  s.add(1, prompt(3), 4);
  s.add(2, prompt(5), 4);
  const Step prefill = s.schedule();
  s.commit(prefill);
  s.append_token(1, -1);  // row 0 of the prefill step
  s.append_token(2, -2);
  const Step decode = s.schedule();
  ASSERT_EQ(decode.sequences.size(), 2u);
  EXPECT_EQ(decode.sequences[0].tokens[0], -1);
  EXPECT_EQ(decode.sequences[0].first_position, 3);
  EXPECT_EQ(decode.sequences[1].tokens[0], -2);
  s.resolve_token(1, 3, 40);
  EXPECT_EQ(s.find(1)->tokens.back(), 40);
  EXPECT_THROW(s.resolve_token(1, 3, 41), Error);  // no placeholder there any more
  EXPECT_THROW(s.resolve_token(2, 4, 41), Error);  // a prompt token
  s.remove(2);
  s.commit(decode);
  EXPECT_EQ(s.find(1)->num_computed, 4);
  s.check_invariant();
}

// Slots are reused: a step that outlives its request must not touch the request that took the
// slot after it (the engine commits an overlapped step after requests of it have ended).
TEST(Scheduler, AStepCommittedAfterItsRequestLeftSparesTheSlotsNextHolder) {
  KvPagePool pool(64);
  Scheduler s(limits(), pool);
  const int slot = s.add(1, prompt(6), 4);
  const Step step = s.schedule();
  ASSERT_EQ(step.sequences.size(), 1u);
  EXPECT_EQ(step.sequences[0].slot, slot);
  s.remove(1);
  EXPECT_EQ(s.add(2, prompt(3), 4), slot);
  s.commit(step);
  EXPECT_EQ(s.find(2)->num_computed, 0);
  const Step next = s.schedule();  // request 2's whole prompt, from position 0
  ASSERT_EQ(next.sequences.size(), 1u);
  EXPECT_EQ(next.sequences[0].request, 2u);
  EXPECT_EQ(next.sequences[0].first_position, 0);
  EXPECT_EQ(next.sequences[0].tokens.size(), 3u);
  run(s, next);
  EXPECT_EQ(s.find(2)->num_computed, 3);
}

// schedule(Step&) refills a step in place: what was in it before leaves no trace.
TEST(Scheduler, SchedulingIntoAUsedStepReplacesItsContents) {
  KvPagePool pool(64);
  Scheduler s(limits(), pool);
  s.add(1, prompt(10), 4);
  s.add(2, prompt(3), 4);
  Step step;
  s.schedule(step);
  ASSERT_EQ(step.sequences.size(), 2u);
  EXPECT_EQ(step.num_tokens, 13);
  EXPECT_EQ(step.bucket_kind, BucketKind::Prefill);
  run(s, step);
  s.schedule(step);  // two decodes
  ASSERT_EQ(step.sequences.size(), 2u);
  EXPECT_EQ(step.num_tokens, 2);
  EXPECT_EQ(step.bucket_kind, BucketKind::Decode);
  EXPECT_EQ(step.bucket, 2);
  EXPECT_EQ(step.sequences[0].first_position, 10);
  EXPECT_EQ(step.sequences[1].first_position, 3);
  run(s, step);
}

// ---- With a prefix cache ----

// A pool, the prefix cache over it and a scheduler using both, as the engine builds them.
struct CachedScheduler {
  explicit CachedScheduler(int pages, SchedulerLimits l = limits())
      : pool(pages), cache(pool, l.page_size, "xxh64:test"), s(l, pool, &cache) {}
  // Runs steps until nothing is left to schedule, removing requests that reach max_len.
  void drain() {
    for (int i = 0; i < 1000 && s.num_running() + s.num_waiting() > 0; ++i) {
      const Step step = s.schedule();
      run(s, step);
      for (const ScheduledSequence& q : step.sequences) {
        const SequenceState* st = s.find(q.request);
        if (st && static_cast<int>(st->tokens.size()) == st->max_len) s.remove(q.request);
      }
    }
    ASSERT_EQ(s.num_running() + s.num_waiting(), 0);
  }
  KvPagePool pool;
  PrefixCache cache;
  Scheduler s;
};

// The admission step's chunk of request `id`.
const ScheduledSequence* chunk_of(const Step& step, RequestId id) {
  for (const ScheduledSequence& q : step.sequences)
    if (q.request == id) return &q;
  return nullptr;
}

TEST(SchedulerPrefixCache, ARequestTakesTheCachedPagesOfItsPrefix) {
  CachedScheduler c(64);
  c.s.add(1, prompt(10), 4);
  run(c.s, c.s.schedule());  // its whole prompt: pages 0 and 1 are full and cached
  const std::vector<PageId> first = c.s.find(1)->pages;
  EXPECT_EQ(c.cache.cached_pages(), 2);
  c.s.add(2, prompt(10), 4);
  const Step step = c.s.schedule();
  const ScheduledSequence* q = chunk_of(step, 2);
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(q->first_position, 8);
  EXPECT_EQ(q->tokens.size(), 2u);
  EXPECT_TRUE(q->samples);
  ASSERT_EQ(q->page_table.size(), 3u);
  EXPECT_EQ(q->page_table[0], first[0]);
  EXPECT_EQ(q->page_table[1], first[1]);
  EXPECT_NE(q->page_table[2], first[2]);
  EXPECT_EQ(c.pool.ref_count(first[0]), 2);
  EXPECT_EQ(c.pool.ref_count(first[1]), 2);
  EXPECT_EQ(c.s.find(2)->cached_tokens, 8);
  EXPECT_EQ(c.s.find(1)->cached_tokens, 0);
  EXPECT_EQ(c.s.prefix_cache_queries(), 20u);
  EXPECT_EQ(c.s.prefix_cache_hits(), 8u);
  run(c.s, step);
}

// A prompt of whole pages: the last page is computed again, for the logits of its last token.
TEST(SchedulerPrefixCache, APromptOfWholePagesComputesItsLastPage) {
  CachedScheduler c(64);
  c.s.add(1, prompt(12), 4);
  run(c.s, c.s.schedule());
  EXPECT_EQ(c.cache.cached_pages(), 3);
  c.s.add(2, prompt(12), 4);
  const Step step = c.s.schedule();
  const ScheduledSequence* q = chunk_of(step, 2);
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(q->first_position, 8);
  EXPECT_EQ(q->tokens.size(), 4u);
  EXPECT_EQ(c.s.find(2)->cached_tokens, 8);
  EXPECT_EQ(c.pool.ref_count(c.s.find(1)->pages[2]), 1);  // its own copy of the last page
  run(c.s, step);
  // A prompt of one page takes nothing: its only page holds the token to compute.
  c.s.add(3, prompt(4), 4);
  const Step alone = c.s.schedule();
  ASSERT_NE(chunk_of(alone, 3), nullptr);
  EXPECT_EQ(chunk_of(alone, 3)->first_position, 0);
  run(c.s, alone);
}

TEST(SchedulerPrefixCache, RequestsWithDifferentSaltsShareNothing) {
  CachedScheduler c(64, SchedulerLimits{4, 64, 4, 64, {1, 2, 4}, {64}});
  c.s.add(1, prompt(12), 4, "tenant-a");
  run(c.s, c.s.schedule());
  c.s.add(2, prompt(12), 4, "tenant-b");
  c.s.add(3, prompt(12), 4);
  c.s.add(4, prompt(12), 4, "tenant-a");
  const Step step = c.s.schedule();
  EXPECT_EQ(chunk_of(step, 2)->first_position, 0);
  EXPECT_EQ(chunk_of(step, 3)->first_position, 0);
  EXPECT_EQ(chunk_of(step, 4)->first_position, 8);
  run(c.s, step);
}

// Pages are offered to the cache only once a step has filled them: a request admitted while the
// first one's prompt is still being computed takes what is full by then.
TEST(SchedulerPrefixCache, OnlyPagesOfCompletedStepsAreShared) {
  CachedScheduler c(64, limits(4, /*budget=*/6));
  c.s.add(1, prompt(12), 4);
  const Step first = c.s.schedule();  // positions 0..5: page 0 full, page 1 half
  c.s.commit(first);
  EXPECT_EQ(c.cache.cached_pages(), 0);  // committed, but the step has not been reported run
  c.s.cache_prompt_pages(first);
  EXPECT_EQ(c.cache.cached_pages(), 1);
  c.s.check_invariant();
  run(c.s, c.s.schedule());  // positions 6..11: pages 1 and 2
  EXPECT_EQ(c.cache.cached_pages(), 3);
  c.s.add(2, prompt(20), 4);  // the same 12 tokens, and more
  const Step step = c.s.schedule();
  EXPECT_EQ(chunk_of(step, 2)->first_position, 12);
  run(c.s, step);
}

// Cancelling a request that shares pages leaves them to the other; once neither holds them they
// stay cached, counted free, until the pool needs them.
TEST(SchedulerPrefixCache, CancellingASharerKeepsThePagesForTheOther) {
  CachedScheduler c(16);
  c.s.add(1, prompt(10), 8);
  run(c.s, c.s.schedule());
  c.s.add(2, prompt(10), 8);
  run(c.s, c.s.schedule());
  const std::vector<PageId> shared = {c.s.find(1)->pages[0], c.s.find(1)->pages[1]};
  for (PageId p : shared) EXPECT_EQ(c.pool.ref_count(p), 2);
  c.s.remove(1);
  c.s.check_invariant();
  for (PageId p : shared) EXPECT_EQ(c.pool.ref_count(p), 1);
  EXPECT_EQ(c.s.find(2)->pages[0], shared[0]);
  run(c.s, c.s.schedule());  // request 2 decodes on
  c.s.remove(2);
  c.s.check_invariant();
  EXPECT_EQ(c.pool.used_pages(), 0);
  EXPECT_EQ(c.pool.free_pages(), 16);
  EXPECT_EQ(c.pool.evictable_pages(), 2);
  for (PageId p : shared) EXPECT_EQ(c.pool.ref_count(p), 0);
  // A third request with the same prompt takes them back from the evictable list.
  c.s.add(3, prompt(10), 8);
  const Step step = c.s.schedule();
  EXPECT_EQ(chunk_of(step, 3)->first_position, 8);
  EXPECT_EQ(c.pool.evictable_pages(), 0);
  run(c.s, step);
}

// Preempting a request returns its references; pages it shared stay with their other holder,
// and when it comes back it takes its prefix from the cache again.
TEST(SchedulerPrefixCache, PreemptionReleasesSharedPagesAndTheRecomputeHitsAgain) {
  // 6 pages of 4 positions. Two requests with the same 8-token prompt share its two pages; each
  // adds a page of its own for the tokens it generates. Request 1 grows until the pool runs out.
  CachedScheduler c(6, limits(4, 16, 4, 32));
  c.s.add(1, prompt(9), 15);
  run(c.s, c.s.schedule());
  c.s.add(2, prompt(9), 15);
  run(c.s, c.s.schedule());
  const std::vector<PageId> shared = {c.s.find(1)->pages[0], c.s.find(1)->pages[1]};
  EXPECT_EQ(c.s.find(2)->pages[0], shared[0]);
  while (c.s.num_preemptions() == 0) run(c.s, c.s.schedule());
  const SequenceState* two = c.s.find(2);
  ASSERT_FALSE(two->running);
  EXPECT_TRUE(two->pages.empty());
  for (PageId p : shared) EXPECT_EQ(c.pool.ref_count(p), 1);  // request 1's
  c.s.remove(1);
  c.s.check_invariant();
  const Step again = c.s.schedule();
  const ScheduledSequence* q = chunk_of(again, 2);
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(q->first_position, 8);  // its prompt's two full pages, from the cache
  EXPECT_EQ(q->page_table[0], shared[0]);
  EXPECT_EQ(c.s.find(2)->cached_tokens, 8);    // reported from its first admission
  EXPECT_EQ(c.s.prefix_cache_queries(), 18u);  // the recompute is not counted again
  run(c.s, again);
}

// Under pool pressure the cached pages released longest ago are evicted first: a prefix used
// recently survives a burst of unrelated requests that one used long ago does not.
TEST(SchedulerPrefixCache, EvictsTheLeastRecentlyUsedPrefixFirst) {
  CachedScheduler c(8);
  auto once = [&](RequestId id, std::vector<std::int32_t> p) {
    c.s.add(id, std::move(p), 1);
    c.drain();
  };
  once(1, prompt(9, 100));  // prefix A: 2 cached pages
  once(2, prompt(9, 200));  // prefix B: 2 cached pages
  once(3, prompt(9, 100));  // A again: a hit, and now the more recent
  EXPECT_EQ(c.s.prefix_cache_hits(), 8u);
  EXPECT_EQ(c.pool.evictable_pages(), 4);
  EXPECT_EQ(c.pool.free_pages(), 8);
  // 17 new tokens need 5 pages: 4 are free of anything, so one cached page goes: B's end.
  once(4, prompt(17, 300));
  EXPECT_EQ(c.pool.used_pages(), 0);
  auto cached_prefix = [&](const std::vector<std::int32_t>& p) {
    PrefixLink link = c.cache.start({});
    std::vector<PageId> pages;
    c.cache.match(link, p, 100, pages);
    return pages.size();
  };
  EXPECT_EQ(cached_prefix(prompt(9, 100)), 2u);
  EXPECT_EQ(cached_prefix(prompt(9, 200)), 1u);
  EXPECT_EQ(cached_prefix(prompt(17, 300)), 4u);
}

// Plays the backend over a simulated KV pool: a step reads the slots of every position before its
// chunk (which must hold what the request's own tokens would have written) and writes its own
// (never into a page another request shares or the cache holds). A slot holds a hash of the salt
// and of every token up to its position, as a real K and V depend on the tokens before them.
class SimulatedKv {
 public:
  SimulatedKv(int pages, int page_size) : page_size_(page_size), slots_(pages * page_size, 0) {}
  void run(const Scheduler& s, const Step& step, const std::map<RequestId, std::string>& salts) {
    for (const ScheduledSequence& q : step.sequences) {
      const SequenceState& st = *s.find(q.request);
      std::uint64_t want = std::hash<std::string>{}(salts.at(q.request));
      for (int pos = 0; pos < q.first_position + static_cast<int>(q.tokens.size()); ++pos) {
        const PageId page = q.page_table[static_cast<std::size_t>(pos / page_size_)];
        std::uint64_t& slot =
            slots_[static_cast<std::size_t>(page * page_size_ + pos % page_size_)];
        want = (want ^ static_cast<std::uint64_t>(st.tokens[static_cast<std::size_t>(pos)])) *
               0x100000001b3ull;
        if (pos < q.first_position) {
          ASSERT_EQ(slot, want) << "request " << q.request << " reads position " << pos
                                << " from page " << page << ", which holds another prefix";
        } else {
          ASSERT_EQ(s.pool().ref_count(page), 1) << "a write into a shared page";
          ASSERT_FALSE(s.pool().cached(page)) << "a write into a cached page";
          slot = want;
        }
      }
    }
  }

 private:
  int page_size_;
  std::vector<std::uint64_t> slots_;
};

// Ten thousand requests whose prompts reuse a few prefixes (system prompts, under two salts), with
// random lengths, early stops, cancellations and a pool small enough to preempt and evict: every
// shared page holds the KV its reader would have computed, the invariants hold after every step,
// and at the end no page is held and every cached one is evictable.
TEST(SchedulerPrefixCache, RandomizedLifecyclesWithPrefixReuseLeakNoPage) {
  std::mt19937 rng(11);
  auto uniform = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  const int kPages = 24, kPageSize = 4, kMaxLen = 48;
  CachedScheduler c(kPages, SchedulerLimits{4, kMaxLen, kPageSize, 16, {1, 2, 4}, {16}});
  SimulatedKv kv(kPages, kPageSize);
  const std::vector<std::vector<std::int32_t>> prefixes = {prompt(8, 100), prompt(13, 200),
                                                           prompt(16, 300), prompt(3, 400)};
  std::map<RequestId, std::string> salts;
  RequestId next_id = 1;
  int ended = 0, steps = 0;
  const int total = 10000;
  while (ended < total) {
    while (next_id <= static_cast<RequestId>(total) && c.s.num_waiting() < 6 && uniform(0, 2)) {
      std::vector<std::int32_t> p = prefixes[static_cast<std::size_t>(uniform(0, 3))];
      for (int n = uniform(uniform(0, 1), 20); n > 0; --n) p.push_back(uniform(0, 5));
      const int room = kMaxLen - static_cast<int>(p.size());
      const std::string salt = uniform(0, 3) ? "" : "other";
      c.s.add(next_id, p, uniform(1, room), salt);
      salts[next_id++] = salt;
    }
    if (!salts.empty() && uniform(0, 9) == 0) {
      auto it = std::next(salts.begin(), uniform(0, static_cast<int>(salts.size()) - 1));
      c.s.remove(it->first);
      salts.erase(it);
      ++ended;
    }
    const Step step = c.s.schedule();
    if (step.empty()) {
      ASSERT_EQ(c.s.num_running() + c.s.num_waiting(), 0) << "live requests but nothing scheduled";
      continue;
    }
    kv.run(c.s, step, salts);
    if (::testing::Test::HasFatalFailure()) return;
    c.s.commit(step);
    c.s.cache_prompt_pages(step);
    for (const ScheduledSequence& q : step.sequences) {
      if (!q.samples) continue;
      const SequenceState* st = c.s.find(q.request);
      if (uniform(0, 19) == 0 || static_cast<int>(st->tokens.size()) + 1 == st->max_len) {
        c.s.remove(q.request);
        salts.erase(q.request);
        ++ended;
      } else {
        c.s.append_token(q.request, uniform(0, 5));
      }
    }
    c.s.check_invariant();
    ASSERT_LT(++steps, 400000) << "no progress";
  }
  EXPECT_EQ(c.pool.used_pages(), 0);
  EXPECT_EQ(c.pool.free_pages(), kPages);
  EXPECT_EQ(c.pool.evictable_pages(), c.cache.cached_pages());
  c.cache.check_invariant();
  EXPECT_GT(c.s.num_preemptions(), 0u) << "the pool was meant to be small enough to preempt";
  EXPECT_GT(c.s.prefix_cache_hits(), c.s.prefix_cache_queries() / 10) << "prefixes were reused";
}

}  // namespace
}  // namespace telos::exec
