// The GPU engine's step descriptor, packed on the host (executor/gpu/step_descriptor.hpp): the
// layout the kernels read (docs/artifact.md), padding rows, page-table rows, sampling rows, the
// bytes a step uploads, the refusals that keep bad ids from reaching the device, and which of the
// two device copies (step parity) a launch argument names.
#include "executor/gpu/step_descriptor.hpp"

#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "executor/kv_page_pool.hpp"
#include "executor/scheduler.hpp"
#include "support/error.hpp"

namespace telos::exec {
namespace {

// max_tokens 32, 4 sampling rows, 4 sequences of up to 8 pages of 16 positions, vocab 100,
// 20 KV pages.
StepDescriptorLayout layout() { return StepDescriptorLayout::make(32, 4, 4, 8, 16, 100, 20); }

struct Buffer {
  std::vector<char> bytes;
  explicit Buffer(const StepDescriptorLayout& l) : bytes(static_cast<std::size_t>(l.bytes), '\x5a') {}
  const std::int32_t* i32(std::int64_t off) const { return reinterpret_cast<const std::int32_t*>(bytes.data() + off); }
  const DeviceSampleParams* params(const StepDescriptorLayout& l) const {
    return reinterpret_cast<const DeviceSampleParams*>(bytes.data() + l.off_params);
  }
};

TEST(StepDescriptor, FieldsAreAlignedAndPageTablesComeLast) {
  const StepDescriptorLayout l = layout();
  for (std::int64_t off :
       {l.off_tokens, l.off_positions, l.off_token_seq, l.off_split_positions,
        l.off_prompt_positions, l.off_sample_rows, l.off_params, l.off_page_tables})
    EXPECT_EQ(off % 256, 0);
  EXPECT_LT(l.off_params, l.off_page_tables);
  EXPECT_GE(l.off_page_tables, l.off_params + 4 * 32);
  EXPECT_EQ(l.bytes, l.off_page_tables + 4 * 4 * 8 + 128);  // 128 B of page tables, rounded up to 256
}

TEST(StepDescriptor, PacksAPrefillChunkAndADecodeToken) {
  const StepDescriptorLayout l = layout();
  Buffer b(l);
  const std::vector<std::int32_t> prompt = {7, 8, 9, 10, 11}, decode = {42};
  const std::vector<PageId> pages_a = {3, 4}, pages_b = {9, 1, 2};
  Step step;
  // Request 5: positions 14..18 (crosses into its second page), samples; its prompt is 17 tokens,
  // so 17 and 18 are generated tokens recomputed (after a preemption).
  step.sequences.push_back({5, 14, std::span<const std::int32_t>(prompt), std::span<const PageId>(pages_a), true});
  step.sequences.back().prompt_len = 17;
  // Request 6: one decode token at position 40 (third page).
  step.sequences.push_back({6, 40, std::span<const std::int32_t>(decode), std::span<const PageId>(pages_b), true});
  step.sequences.back().prompt_len = 30;
  step.num_tokens = 6;
  const std::vector<DeviceSampling> sampling = {{0.7f, 0.9f, 0.05f, 40, 0x1122334455667788ull}};
  const PackedStep p = pack_step_descriptor(l, step, 8, 4, sampling, 0, b.bytes.data());

  EXPECT_EQ(p.sample_rows, 2);
  EXPECT_EQ(p.upload, l.off_page_tables + 2 * 8 * 4);
  const std::int32_t* tok = b.i32(l.off_tokens);
  const std::int32_t* pos = b.i32(l.off_positions);
  const std::int32_t* seq = b.i32(l.off_token_seq);
  // Generated tokens first (17 and 18 of request 5, then request 6's), then the prompt tokens: the
  // split kernels of prefill buckets cover the first max_batch rows only.
  EXPECT_EQ(std::vector<std::int32_t>(tok, tok + 8),
            (std::vector<std::int32_t>{10, 11, 42, 7, 8, 9, 0, 0}));
  EXPECT_EQ(std::vector<std::int32_t>(pos, pos + 8),
            (std::vector<std::int32_t>{17, 18, 40, 14, 15, 16, -1, -1}));
  EXPECT_EQ(std::vector<std::int32_t>(seq, seq + 8),
            (std::vector<std::int32_t>{0, 0, 1, 0, 0, 0, 0, 0}));
  // The two attention kernels' rows: generated tokens for the split kernels, prompt tokens for
  // attn_prefill (-2: a generated token, left to the split kernels), -1 for padding in both.
  const std::int32_t* split = b.i32(l.off_split_positions);
  const std::int32_t* prompt_rows = b.i32(l.off_prompt_positions);
  EXPECT_EQ(std::vector<std::int32_t>(split, split + 8),
            (std::vector<std::int32_t>{17, 18, 40, -1, -1, -1, -1, -1}));
  EXPECT_EQ(std::vector<std::int32_t>(prompt_rows, prompt_rows + 8),
            (std::vector<std::int32_t>{-2, -2, -2, 14, 15, 16, -1, -1}));
  // Rows past the bucket are not written.
  EXPECT_EQ(tok[8], 0x5a5a5a5a);
  const std::int32_t* rows = b.i32(l.off_sample_rows);
  // A sampling row names the row of its sequence's last token (request 5's: position 18).
  EXPECT_EQ(std::vector<std::int32_t>(rows, rows + 4), (std::vector<std::int32_t>{1, 2, -1, -1}));
  const std::int32_t* pt = b.i32(l.off_page_tables);
  EXPECT_EQ(pt[0], 3);
  EXPECT_EQ(pt[1], 4);
  EXPECT_EQ(pt[2], 0x5a5a5a5a);  // past position 18's page: left as it was
  EXPECT_EQ(pt[8 + 0], 9);
  EXPECT_EQ(pt[8 + 1], 1);
  EXPECT_EQ(pt[8 + 2], 2);
  const DeviceSampleParams* prm = b.params(l);
  EXPECT_FLOAT_EQ(prm[0].temperature, 0.7f);
  EXPECT_FLOAT_EQ(prm[0].top_p, 0.9f);
  EXPECT_FLOAT_EQ(prm[0].min_p, 0.05f);
  EXPECT_EQ(prm[0].top_k, 40);
  EXPECT_EQ(prm[0].seed_lo, 0x55667788u);
  EXPECT_EQ(prm[0].seed_hi, 0x11223344u);
  EXPECT_EQ(prm[0].counter, 19);  // the position being sampled
  // No sampling entry for request 6: greedy.
  EXPECT_EQ(prm[1].temperature, 0.f);
  EXPECT_EQ(prm[1].top_k, 0);
  EXPECT_EQ(prm[1].counter, 41);
  // Unused sampling rows of the bucket are zero.
  DeviceSampleParams zero{};
  EXPECT_EQ(std::memcmp(&prm[2], &zero, sizeof zero), 0);
  EXPECT_EQ(std::memcmp(&prm[3], &zero, sizeof zero), 0);
}

TEST(StepDescriptor, AChunkThatDoesNotSampleHasNoSamplingRow) {
  const StepDescriptorLayout l = layout();
  Buffer b(l);
  const std::vector<std::int32_t> chunk = {1, 2, 3};
  const std::vector<PageId> pages = {0};
  Step step;
  step.sequences.push_back({9, 0, std::span<const std::int32_t>(chunk), std::span<const PageId>(pages), false});
  const PackedStep p = pack_step_descriptor(l, step, 4, 1, {}, 0, b.bytes.data());
  EXPECT_EQ(p.sample_rows, 0);
  EXPECT_EQ(b.i32(l.off_sample_rows)[0], -1);
}

void expect_refused(const Step& step, int bucket_tokens, const std::string& what, int fed_rows = 0) {
  const StepDescriptorLayout l = layout();
  Buffer b(l);
  try {
    pack_step_descriptor(l, step, bucket_tokens, 4, {}, fed_rows, b.bytes.data());
    FAIL() << "accepted; expected: " << what;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
  }
}

TEST(StepDescriptor, RefusesIdsAndPositionsOutOfRange) {
  const std::vector<std::int32_t> ok = {5}, big = {100}, negative = {-1};
  const std::vector<PageId> pages = {1, 2, 3}, bad_page = {20}, short_table = {1};
  auto one = [](std::span<const std::int32_t> t, int first, std::span<const PageId> p) {
    Step s;
    s.sequences.push_back({77, first, t, p, true});
    return s;
  };
  expect_refused(one(big, 0, pages), 4, "request 77: token id out of range");
  expect_refused(one(negative, 0, pages), 4, "request 77: token id out of range");
  // -3 is row 2 of the previous step, which had two sampling rows.
  const std::vector<std::int32_t> row2 = {-3};
  expect_refused(one(row2, 0, pages), 4, "request 77: token id out of range", 2);
  expect_refused(one(ok, 0, bad_page), 4, "request 77: page id out of range");
  expect_refused(one(ok, 20, short_table), 4, "request 77: page table too short");
  expect_refused(one(ok, 8 * 16, pages), 4, "request 77: positions beyond the compiled max_seq_len");
  expect_refused(one(ok, -1, pages), 4, "request 77: positions beyond the compiled max_seq_len");
  const std::vector<std::int32_t> five = {1, 2, 3, 4, 5};
  expect_refused(one(five, 0, pages), 4, "request 77: the step has more rows than its bucket");
}

// A prompt chunk scheduled before a decode token still leaves row 0 to the decode token, and a
// step with more generated tokens than max_batch (4 here) is refused: the split kernels of a
// prefill bucket run over its first max_batch rows only.
TEST(StepDescriptor, GeneratedTokensComeFirstAndAtMostMaxBatch) {
  const StepDescriptorLayout l = layout();
  Buffer b(l);
  const std::vector<std::int32_t> prompt = {1, 2, 3}, decode = {4};
  const std::vector<PageId> pages = {1, 2};
  auto i32s = [&](std::int64_t off, int n) {
    return std::vector<std::int32_t>(b.i32(off), b.i32(off) + n);
  };
  Step step;
  step.sequences.push_back(
      {1, 0, std::span<const std::int32_t>(prompt), std::span<const PageId>(pages), true});
  step.sequences.back().prompt_len = 3;
  step.sequences.push_back(
      {2, 20, std::span<const std::int32_t>(decode), std::span<const PageId>(pages), true});
  step.sequences.back().prompt_len = 5;
  pack_step_descriptor(l, step, 8, 4, {}, 0, b.bytes.data());
  EXPECT_EQ(i32s(l.off_split_positions, 4), (std::vector<std::int32_t>{20, -1, -1, -1}));
  EXPECT_EQ(i32s(l.off_prompt_positions, 4), (std::vector<std::int32_t>{-2, 0, 1, 2}));
  EXPECT_EQ(i32s(l.off_token_seq, 4), (std::vector<std::int32_t>{1, 0, 0, 0}));
  EXPECT_EQ(i32s(l.off_sample_rows, 2), (std::vector<std::int32_t>{3, 0}));

  // Request 78 recomputes positions 10..14 after a preemption, all past its 10-token prompt: five
  // generated tokens, one more than max_batch, within the bucket's 8 rows.
  const std::vector<std::int32_t> recomputed = {1, 2, 3, 4, 5};
  Step over;
  over.sequences.push_back(
      {78, 10, std::span<const std::int32_t>(recomputed), std::span<const PageId>(pages), true});
  over.sequences.back().prompt_len = 10;
  expect_refused(over, 8, "request 78: the step has more generated tokens than max_batch 4");
  // Four of them fit.
  over.sequences.back().tokens = std::span<const std::int32_t>(recomputed).first(4);
  pack_step_descriptor(l, over, 8, 4, {}, 0, b.bytes.data());
  EXPECT_EQ(i32s(l.off_split_positions, 5), (std::vector<std::int32_t>{10, 11, 12, 13, -1}));
}

// An overlapped decode step: -(r+1) stands for the token row r of the previous step sampled, and
// reaches the device as it is (the embedding kernel resolves it).
TEST(StepDescriptor, PassesFedTokensOn) {
  const StepDescriptorLayout l = layout();
  Buffer b(l);
  const std::vector<std::int32_t> fed_a = {-2}, fed_b = {-1}, known = {42};
  const std::vector<PageId> pages = {3};
  Step step;
  step.sequences.push_back({1, 4, std::span<const std::int32_t>(fed_a), std::span<const PageId>(pages), true});
  step.sequences.push_back({2, 7, std::span<const std::int32_t>(known), std::span<const PageId>(pages), true});
  step.sequences.push_back({3, 9, std::span<const std::int32_t>(fed_b), std::span<const PageId>(pages), true});
  const PackedStep p = pack_step_descriptor(l, step, 4, 4, {}, 2, b.bytes.data());
  EXPECT_EQ(p.sample_rows, 3);
  const std::int32_t* tok = b.i32(l.off_tokens);
  EXPECT_EQ(std::vector<std::int32_t>(tok, tok + 4), (std::vector<std::int32_t>{-2, 42, -1, 0}));
}

// The bucket a step runs in: decode buckets only for one generated token a sequence (a one-token
// prompt chunk beside decodes goes to a prefill bucket, so the prompt token meets attn_prefill as
// it would alone), preferred there, then the smallest prefill bucket that holds the step.
// With a PageRowCache, a row that holds the same page table (pages_id) gets only its new entries
// (the ones before are left as they are: poisoned here, they stay poisoned), and a row whose
// pages_id changed, or is 0 (not named), is written whole.
TEST(StepDescriptor, PageRowsWriteOnlyWhatASequenceAdded) {
  const StepDescriptorLayout l = layout();
  Buffer b(l);
  PageRowCache rows;
  const std::vector<std::int32_t> tok = {5};
  std::vector<PageId> pages = {3, 4};
  auto step_at = [&](std::uint64_t pages_id, int position) {
    Step step;
    step.sequences.push_back(
        {9, position, std::span<const std::int32_t>(tok), std::span<const PageId>(pages), true});
    step.sequences.back().prompt_len = 1;
    step.sequences.back().pages_id = pages_id;
    step.num_tokens = 1;
    return step;
  };
  std::int32_t* row = reinterpret_cast<std::int32_t*>(b.bytes.data() + l.off_page_tables);
  pack_step_descriptor(l, step_at(4, 20), 1, 1, {}, 0, b.bytes.data(), &rows);
  EXPECT_EQ(std::vector<std::int32_t>(row, row + 2), (std::vector<std::int32_t>{3, 4}));
  row[0] = row[1] = -7;  // what the buffer held stays unless rewritten
  pages.push_back(11);
  pack_step_descriptor(l, step_at(4, 33), 1, 1, {}, 0, b.bytes.data(), &rows);
  EXPECT_EQ(std::vector<std::int32_t>(row, row + 3), (std::vector<std::int32_t>{-7, -7, 11}));
  // The same request after a preemption (new pages, a new pages_id): the whole row again.
  pages = {6, 2, 8};
  pack_step_descriptor(l, step_at(5, 33), 1, 1, {}, 0, b.bytes.data(), &rows);
  EXPECT_EQ(std::vector<std::int32_t>(row, row + 3), (std::vector<std::int32_t>{6, 2, 8}));
  // Not named (pages_id 0, as a caller without a scheduler builds steps): the whole row, twice.
  for (int k = 0; k < 2; ++k) {
    row[0] = -7;
    pages = {1, 5, 7};
    pack_step_descriptor(l, step_at(0, 33), 1, 1, {}, 0, b.bytes.data(), &rows);
    EXPECT_EQ(std::vector<std::int32_t>(row, row + 3), (std::vector<std::int32_t>{1, 5, 7}));
  }
  // A refused step leaves the row's record as it was: a bad new entry is not taken for written.
  pack_step_descriptor(l, step_at(6, 33), 1, 1, {}, 0, b.bytes.data(), &rows);
  pages = {1, 5, 7, 99};
  EXPECT_THROW(pack_step_descriptor(l, step_at(6, 50), 1, 1, {}, 0, b.bytes.data(), &rows), Error);
  pages = {1, 5, 7, 12};
  pack_step_descriptor(l, step_at(6, 50), 1, 1, {}, 0, b.bytes.data(), &rows);
  EXPECT_EQ(std::vector<std::int32_t>(row, row + 4), (std::vector<std::int32_t>{1, 5, 7, 12}));
}

// The scheduler's real steps over thousands of request lifecycles with preemptions (a pool small
// enough to force them), packed as the GPU engine packs them, two buffers alternating with their
// PageRowCaches: every sequence's page-table row equals a full pack's, step after step.
TEST(StepDescriptor, PageRowsMatchAFullPackOverRandomLifecycles) {
  const StepDescriptorLayout l = StepDescriptorLayout::make(16, 4, 4, 12, 4, 100, 24);
  KvPagePool pool(24);
  Scheduler s(SchedulerLimits{4, 48, 4, 16, {1, 2, 4}, {16}}, pool);
  std::mt19937 rng(5);
  Buffer parity[2] = {Buffer(l), Buffer(l)};
  PageRowCache rows[2];
  std::map<RequestId, int> live;
  RequestId next_id = 1;
  int steps = 0, done = 0;
  const int total = 1500;
  while (done < total) {
    while (next_id <= static_cast<RequestId>(total) && s.num_waiting() < 4 &&
           std::uniform_int_distribution<int>(0, 2)(rng) != 0) {
      const int p = std::uniform_int_distribution<int>(1, 30)(rng);
      s.add(next_id, std::vector<std::int32_t>(static_cast<std::size_t>(p), 3),
            std::uniform_int_distribution<int>(1, 48 - p)(rng));
      live[next_id++] = 0;
    }
    const Step step = s.schedule();
    if (step.empty()) continue;
    Buffer& b = parity[steps % 2];
    pack_step_descriptor(l, step, 16, 4, {}, 0, b.bytes.data(), &rows[steps % 2]);
    Buffer full(l);
    pack_step_descriptor(l, step, 16, 4, {}, 0, full.bytes.data());
    for (std::size_t i = 0; i < step.sequences.size(); ++i) {
      const ScheduledSequence& q = step.sequences[i];
      const int needed = (q.first_position + static_cast<int>(q.tokens.size()) + 3) / 4;
      const std::int32_t* got = b.i32(l.off_page_tables) + i * 12;
      const std::int32_t* want = full.i32(l.off_page_tables) + i * 12;
      ASSERT_EQ(std::vector<std::int32_t>(got, got + needed),
                std::vector<std::int32_t>(want, want + needed))
          << "step " << steps << " request " << q.request << " (pages_id " << q.pages_id << ")";
    }
    s.commit(step);
    for (const ScheduledSequence& q : step.sequences) {
      if (!q.samples) continue;
      const SequenceState* st = s.find(q.request);
      if (std::uniform_int_distribution<int>(0, 19)(rng) == 0 ||
          st->prompt_len + ++live[q.request] == st->max_len) {
        s.remove(q.request);
        live.erase(q.request);
        ++done;
      } else {
        s.append_token(q.request, 7);
      }
    }
    ++steps;
    ASSERT_LT(steps, 100000) << "no progress";
  }
  EXPECT_GT(s.num_preemptions(), 0u) << "the pool was meant to be small enough to preempt";
}

TEST(ChooseBucket, DecodeBucketsTakeGeneratedTokensOnly) {
  const std::vector<BucketShape> buckets = {
      {false, 4, 64, 4}, {false, 4, 16, 4}, {true, 4, 4, 4}, {true, 1, 1, 1}};
  const std::vector<std::int32_t> ids(65, 7);
  auto seq = [&](int first_position, int n, int prompt_len) {
    ScheduledSequence q;
    q.first_position = first_position;
    q.tokens = std::span<const std::int32_t>(ids).first(static_cast<std::size_t>(n));
    q.prompt_len = prompt_len;
    return q;
  };
  Step step;
  step.sequences = {seq(9, 1, 5)};  // one decode token
  EXPECT_EQ(choose_bucket(buckets, step, 1, 4), 3);
  step.sequences = {seq(9, 1, 5), seq(3, 1, 2)};  // two decode tokens
  EXPECT_EQ(choose_bucket(buckets, step, 2, 4), 2);
  step.sequences = {seq(9, 1, 5), seq(4, 1, 5)};  // a decode token and a prompt's last token
  EXPECT_EQ(choose_bucket(buckets, step, 2, 4), 1);
  step.sequences = {seq(0, 1, 1)};  // a one-token prompt alone
  EXPECT_EQ(choose_bucket(buckets, step, 1, 4), 1);
  step.sequences = {seq(0, 20, 20)};  // past the 16-token bucket
  EXPECT_EQ(choose_bucket(buckets, step, 1, 4), 0);
  step.sequences = {seq(0, 65, 65)};
  EXPECT_THROW(choose_bucket(buckets, step, 1, 4), Error);
}

// Under runtime limits, the buckets past the smallest that holds them are never chosen (decode
// buckets by max_batch, prefill buckets by the prefill chunk): checked against choose_bucket
// itself for every decode step size and prompt chunk up to the limits.
TEST(ChooseBucket, BucketsPastTheRuntimeLimitsAreUnreachable) {
  std::vector<BucketShape> buckets;
  for (int tokens : {64, 32, 16}) buckets.push_back({false, 8, tokens, std::min(tokens, 8)});
  for (int size : {8, 4, 2, 1}) buckets.push_back({true, size, size, size});
  // Decode buckets by size, prefill buckets by -tokens.
  auto reachable = [&](int max_batch, int prefill_chunk) {
    std::vector<int> sizes;
    for (const BucketShape& b : buckets)
      if (bucket_reachable(buckets, b, max_batch, prefill_chunk))
        sizes.push_back(b.decode ? b.size : -b.tokens);
    return sizes;
  };
  EXPECT_EQ(reachable(0, 0), (std::vector<int>{-64, -32, -16, 8, 4, 2, 1}));
  EXPECT_EQ(reachable(8, 64), (std::vector<int>{-64, -32, -16, 8, 4, 2, 1}));
  EXPECT_EQ(reachable(3, 0), (std::vector<int>{-64, -32, -16, 4, 2, 1}));
  EXPECT_EQ(reachable(4, 20), (std::vector<int>{-32, -16, 4, 2, 1}));
  EXPECT_EQ(reachable(1, 16), (std::vector<int>{-16, 1}));
  const std::vector<std::int32_t> ids(64, 7);
  auto chosen = [&](const Step& step, int rows) -> const BucketShape& {
    return buckets[static_cast<std::size_t>(choose_bucket(buckets, step, rows, 8))];
  };
  for (int max_batch = 1; max_batch <= 8; ++max_batch)
    for (int n = 1; n <= max_batch; ++n) {
      Step step;
      for (int i = 0; i < n; ++i) {
        ScheduledSequence q;
        q.first_position = 9;
        q.tokens = std::span<const std::int32_t>(ids).first(1);
        q.prompt_len = 5;
        step.sequences.push_back(q);
      }
      EXPECT_TRUE(bucket_reachable(buckets, chosen(step, n), max_batch, 0))
          << max_batch << " " << n;
    }
  for (int chunk = 1; chunk <= 64; ++chunk)
    for (int tokens = 1; tokens <= chunk; ++tokens) {
      Step step;
      ScheduledSequence q;
      q.first_position = 0;
      q.tokens = std::span<const std::int32_t>(ids).first(static_cast<std::size_t>(tokens));
      q.prompt_len = 64;
      step.sequences.push_back(q);
      EXPECT_TRUE(bucket_reachable(buckets, chosen(step, 1), 0, chunk)) << chunk << " " << tokens;
    }
}

}  // namespace
}  // namespace telos::exec
