#include "executor/gpu/step_descriptor.hpp"

#include <algorithm>
#include <cstring>
#include <string>

#include "support/error.hpp"

namespace telos::exec {

StepDescriptorLayout StepDescriptorLayout::make(int max_tokens, int max_sample_rows, int max_batch,
                                                int max_pages, int page_size, int vocab, int kv_pages) {
  StepDescriptorLayout l;
  l.max_tokens = max_tokens;
  l.max_sample_rows = max_sample_rows;
  l.max_batch = max_batch;
  l.max_pages = max_pages;
  l.page_size = page_size;
  l.vocab = vocab;
  l.kv_pages = kv_pages;
  std::int64_t off = 0;
  auto field = [&](std::int64_t& at, std::int64_t bytes) {
    at = off;
    off = (off + bytes + 255) / 256 * 256;
  };
  field(l.off_tokens, 4LL * max_tokens);
  field(l.off_positions, 4LL * max_tokens);
  field(l.off_token_seq, 4LL * max_tokens);
  field(l.off_split_positions, 4LL * max_tokens);
  field(l.off_prompt_positions, 4LL * max_tokens);
  field(l.off_sample_rows, 4LL * max_sample_rows);
  field(l.off_params, static_cast<std::int64_t>(sizeof(DeviceSampleParams)) * max_sample_rows);
  field(l.off_page_tables, 4LL * max_batch * max_pages);
  l.bytes = off;
  return l;
}

PackedStep pack_step_descriptor(const StepDescriptorLayout& L, const Step& step, int bucket_tokens,
                                int bucket_sample_rows, std::span<const DeviceSampling> sampling,
                                int fed_rows, char* host, PageRowCache* page_rows) {
  auto* tok = reinterpret_cast<std::int32_t*>(host + L.off_tokens);
  auto* pos = reinterpret_cast<std::int32_t*>(host + L.off_positions);
  auto* seq = reinterpret_cast<std::int32_t*>(host + L.off_token_seq);
  auto* split_pos = reinterpret_cast<std::int32_t*>(host + L.off_split_positions);
  auto* prompt_pos = reinterpret_cast<std::int32_t*>(host + L.off_prompt_positions);
  auto* rows = reinterpret_cast<std::int32_t*>(host + L.off_sample_rows);
  auto* pages = reinterpret_cast<std::int32_t*>(host + L.off_page_tables);
  auto* params = reinterpret_cast<DeviceSampleParams*>(host + L.off_params);
  if (bucket_tokens > L.max_tokens || bucket_sample_rows > L.max_sample_rows ||
      static_cast<int>(step.sequences.size()) > L.max_batch)
    fail("gpu engine: a step larger than the step descriptor");

  // Generated tokens take rows 0..g-1 and prompt tokens rows g..: prefill buckets launch the
  // split kernels over the first max_batch rows only (docs/artifact.md, "Prompt and generated
  // tokens"), so a step may hold at most max_batch generated tokens.
  int generated = 0, total = 0;
  for (const ScheduledSequence& s : step.sequences) {
    const int n = static_cast<int>(s.tokens.size());
    generated += std::clamp(s.first_position + n - s.prompt_len, 0, n);
    total += n;
    auto who = [&] { return "gpu engine: request " + std::to_string(s.request); };
    if (total > bucket_tokens) fail(who() + ": the step has more rows than its bucket");
    if (generated > L.max_batch)
      fail(who() + ": the step has more generated tokens than max_batch " +
           std::to_string(L.max_batch) +
           " (prefill buckets run the split kernels over rows 0..max_batch-1 only)");
  }

  // A buffer's record has a row for each sequence a step can hold (empty the first time).
  if (page_rows) page_rows->rows.resize(static_cast<std::size_t>(L.max_batch));
  int next_generated = 0, next_prompt = generated, r = 0;
  for (std::size_t i = 0; i < step.sequences.size(); ++i) {
    const ScheduledSequence& s = step.sequences[i];
    const int n = static_cast<int>(s.tokens.size());
    auto who = [&] { return "gpu engine: request " + std::to_string(s.request); };
    if (s.first_position < 0 || s.first_position + n > L.max_pages * L.page_size)
      fail(who() + ": positions beyond the compiled max_seq_len");
    if (s.samples && r >= bucket_sample_rows)
      fail(who() + ": the step has more sampling rows than its bucket");
    const int needed = (s.first_position + n + L.page_size - 1) / L.page_size;
    if (static_cast<int>(s.page_table.size()) < needed) fail(who() + ": page table too short for its positions");
    // Only the pages of positions up to the step's last are read (attention and the KV append
    // stop at the token's position), so the rest of the row is left as it is.
    // Entries the row already holds for this page table stay (they were checked when written);
    // the row's record changes only once the new ones are in.
    std::int32_t* row = pages + i * static_cast<std::size_t>(L.max_pages);
    int from = 0;
    if (page_rows) {
      const PageRowCache::Row& held = page_rows->rows[i];
      if (s.pages_id != 0 && held.pages_id == s.pages_id && held.written <= needed)
        from = held.written;
    }
    for (int p = from; p < needed; ++p) {
      if (s.page_table[p] < 0 || s.page_table[p] >= L.kv_pages) fail(who() + ": page id out of range");
      row[p] = s.page_table[p];
    }
    if (page_rows) page_rows->rows[i] = {s.pages_id, needed};
    int t = -1;  // the row of the sequence's last token
    for (int j = 0; j < n; ++j) {
      if (s.tokens[j] >= L.vocab || s.tokens[j] < -fed_rows) fail(who() + ": token id out of range");
      const int p = s.first_position + j;
      t = p >= s.prompt_len ? next_generated++ : next_prompt++;
      tok[t] = s.tokens[j];
      pos[t] = p;
      seq[t] = static_cast<std::int32_t>(i);
      split_pos[t] = p >= s.prompt_len ? p : -1;
      prompt_pos[t] = p < s.prompt_len ? p : -2;
    }
    if (!s.samples) continue;
    rows[r] = t;
    const DeviceSampling g = i < sampling.size() ? sampling[i] : DeviceSampling{};
    params[r] = {g.temperature, g.top_p,  g.min_p, g.top_k, static_cast<std::uint32_t>(g.seed),
                 static_cast<std::uint32_t>(g.seed >> 32), s.first_position + n, 0};
    ++r;
  }
  // Padding rows of the bucket.
  std::fill(tok + total, tok + bucket_tokens, 0);
  std::fill(pos + total, pos + bucket_tokens, -1);
  std::fill(seq + total, seq + bucket_tokens, 0);
  std::fill(split_pos + total, split_pos + bucket_tokens, -1);
  std::fill(prompt_pos + total, prompt_pos + bucket_tokens, -1);
  std::fill(rows + r, rows + bucket_sample_rows, -1);
  if (bucket_sample_rows > r)
    std::memset(params + r, 0, sizeof(DeviceSampleParams) * static_cast<std::size_t>(bucket_sample_rows - r));
  return {r, L.off_page_tables + 4LL * L.max_pages * static_cast<std::int64_t>(step.sequences.size())};
}

int choose_bucket(std::span<const BucketShape> buckets, const Step& step, int sampling_rows,
                  int max_batch) {
  const int n = static_cast<int>(step.sequences.size());
  int total = 0;
  bool generated_single = true;
  for (const ScheduledSequence& s : step.sequences) {
    total += static_cast<int>(s.tokens.size());
    generated_single = generated_single && s.tokens.size() == 1 && s.first_position >= s.prompt_len;
  }
  int best = -1;
  for (int i = 0; i < static_cast<int>(buckets.size()); ++i) {
    const BucketShape& b = buckets[static_cast<std::size_t>(i)];
    const bool fits =
        b.decode ? generated_single && n <= b.size : total <= b.tokens && n <= max_batch;
    if (!fits || sampling_rows > b.sample_rows) continue;
    const BucketShape* c = best < 0 ? nullptr : &buckets[static_cast<std::size_t>(best)];
    // Decode buckets first, then the smallest that fits.
    if (!c || (b.decode && !c->decode) || (b.decode == c->decode && b.tokens < c->tokens)) best = i;
  }
  if (best < 0)
    fail("gpu engine: a step of " + std::to_string(n) + " sequences and " + std::to_string(total) +
         " tokens fits no bucket of this artifact");
  return best;
}

bool bucket_reachable(std::span<const BucketShape> buckets, const BucketShape& bucket,
                      int runtime_max_batch, int runtime_prefill_chunk) {
  // A bucket's measure: sequences for decode buckets, tokens for prefill ones.
  const auto measure = [](const BucketShape& b) { return b.decode ? b.size : b.tokens; };
  const int limit = bucket.decode ? runtime_max_batch : runtime_prefill_chunk;
  if (limit <= 0) return true;
  // The smallest bucket of the kind that holds the limit, if any does.
  int holds = -1;
  for (const BucketShape& b : buckets)
    if (b.decode == bucket.decode && measure(b) >= limit && (holds < 0 || measure(b) < holds))
      holds = measure(b);
  return holds < 0 || measure(bucket) <= holds;
}

}  // namespace telos::exec
