#include "executor/scheduler.hpp"

#include <algorithm>
#include <string>

#include "executor/runtime_limits.hpp"
#include "support/error.hpp"

namespace telos::exec {

Scheduler::Scheduler(SchedulerLimits limits, KvPagePool& pool, PrefixCache* cache)
    : limits_(std::move(limits)), pool_(pool), cache_(cache) {
  if (limits_.max_batch < 1 || limits_.max_seq_len < 1 || limits_.page_size < 1 ||
      limits_.token_budget < 1 || limits_.mixed_budget < 0 ||
      limits_.mixed_budget > limits_.token_budget)
    fail(
        "scheduler: limits need max_batch, max_seq_len, page_size and token_budget >= 1, and "
        "mixed_budget from 0 to token_budget");
  if (limits_.mixed_budget == 0) limits_.mixed_budget = limits_.token_budget;
  if (limits_.decode_buckets.empty() || limits_.decode_buckets.back() < limits_.max_batch ||
      limits_.prefill_buckets.empty() || limits_.prefill_buckets.back() < limits_.token_budget)
    fail(
        "scheduler: the largest decode bucket must hold max_batch and the largest prefill bucket "
        "the token budget");
  if (cache_ && cache_->page_size() != limits_.page_size)
    fail("scheduler: the prefix cache's page size differs from the limits' page_size");
}

void Scheduler::check_fits(const SchedulerLimits& limits, int pool_pages, const std::string& who,
                           int prompt_len, int max_new_tokens) {
  if (prompt_len < 1) fail(who + ": the prompt is empty (at least one token is needed)");
  if (max_new_tokens < 1) fail(who + ": max_tokens must be at least 1");
  const long long total = static_cast<long long>(prompt_len) + max_new_tokens;
  if (total > limits.max_seq_len)
    fail(who + ": the prompt of " + std::to_string(prompt_len) + " tokens plus max_tokens " +
         std::to_string(max_new_tokens) + " exceeds " +
         describe_limit("--max-seq-len", "max_seq_len", limits.max_seq_len,
                        limits.max_seq_len_set_at_start));
  const long long pages = (total + limits.page_size - 1) / limits.page_size;
  if (pages > pool_pages)
    fail(who + ": needs " + std::to_string(pages) + " KV pages, more than the whole pool of " +
         std::to_string(pool_pages));
}

int Scheduler::add(RequestId id, std::vector<std::int32_t> prompt, int max_new_tokens,
                   std::string_view cache_salt) {
  const std::string who = "request " + std::to_string(id);
  if (slot_of_.count(id)) fail(who + ": the id is already in use");
  check_fits(limits_, pool_.num_pages(), who, static_cast<int>(prompt.size()), max_new_tokens);
  int slot;
  if (free_slots_.empty()) {
    slot = static_cast<int>(slots_.size());
    slots_.emplace_back();
    slot_used_.push_back(false);
  } else {
    slot = free_slots_.back();
    free_slots_.pop_back();
  }
  SequenceState& s = slots_[static_cast<std::size_t>(slot)];
  s = SequenceState{};
  s.id = id;
  s.arrival = next_arrival_++;
  s.prompt_len = static_cast<int>(prompt.size());
  s.max_len = s.prompt_len + max_new_tokens;
  s.tokens = std::move(prompt);
  if (cache_) s.prefix = cache_->start(cache_salt);
  slot_used_[static_cast<std::size_t>(slot)] = true;
  slot_of_.emplace(id, slot);
  waiting_.push_back(slot);
  return slot;
}

void Scheduler::insert_by_arrival(std::vector<int>& list, int slot) {
  const std::uint64_t arrival = slots_[static_cast<std::size_t>(slot)].arrival;
  auto pos = std::find_if(list.begin(), list.end(), [&](int other) {
    return slots_[static_cast<std::size_t>(other)].arrival > arrival;
  });
  list.insert(pos, slot);
}

void Scheduler::preempt(int slot) {
  SequenceState& s = slots_[static_cast<std::size_t>(slot)];
  pool_.release_all(s.pages);
  s.num_computed = 0;
  s.prefix = PrefixLink{.seed = s.prefix.seed};
  s.running = false;
  ++s.preemptions;
  ++preemptions_;
  running_.erase(std::find(running_.begin(), running_.end(), slot));
  auto pos = std::find_if(waiting_.begin(), waiting_.end(), [&](int other) {
    return slots_[static_cast<std::size_t>(other)].arrival > s.arrival;
  });
  waiting_.insert(pos, slot);
}

bool Scheduler::take_pages(int count, std::vector<PageId>& pages) {
  if (!pool_.allocate(count, pages, evicted_)) return false;
  if (!evicted_.empty()) cache_->forget(evicted_);
  evicted_.clear();
  return true;
}

bool Scheduler::admit(SequenceState& s) {
  const int known = static_cast<int>(s.tokens.size());
  // Whole prompt pages, short of the last known token, which is computed for its logits.
  const int max_hit = std::min(s.prompt_len, known - 1) / limits_.page_size;
  if (cache_) cache_->match(s.prefix, s.tokens, max_hit, s.pages);
  const int hit = static_cast<int>(s.pages.size());
  // Hits nobody holds are counted free; taking them leaves that many fewer for the rest.
  const auto unheld_hits = std::count_if(s.pages.begin(), s.pages.end(),
                                         [&](PageId p) { return pool_.ref_count(p) == 0; });
  if (pool_.free_pages() - unheld_hits < pages_for(known) - hit) {
    s.pages.clear();
    s.prefix = PrefixLink{.seed = s.prefix.seed};
    return false;
  }
  for (PageId p : s.pages) pool_.retain(p);
  take_pages(pages_for(known) - hit, s.pages);  // there are enough: checked above
  s.num_computed = hit * limits_.page_size;
  if (s.preemptions == 0) {
    s.cached_tokens = s.num_computed;
    prefix_cache_queries_ += static_cast<std::uint64_t>(s.prompt_len);
    prefix_cache_hits_ += static_cast<std::uint64_t>(s.cached_tokens);
  }
  return true;
}

void Scheduler::schedule(Step& step) {
  // clear() keeps the capacity of the step's sequence vector; the first schedule into a step
  // reserves max_batch entries at once, instead of one allocation per doubling while it fills.
  step.sequences.clear();
  step.sequences.reserve(static_cast<std::size_t>(limits_.max_batch));
  step.num_tokens = 0;
  int budget = limits_.token_budget;
  // Generated tokens the step may still take: at most max_batch a step (decode steps by their
  // size; a prefill step runs the split kernels over its first max_batch rows only, which the
  // GPU engine fills with the step's generated tokens; docs/artifact.md, "Prompt and generated
  // tokens").
  int generated_left = limits_.max_batch;
  // How many of the next `count` tokens of `s` fit that: its prompt tokens all, then as many
  // generated ones (recomputed after a preemption) as are left.
  auto within_generated = [&](const SequenceState& s, int count) {
    return std::min(count, std::max(0, s.prompt_len - s.num_computed) + generated_left);
  };
  auto add_chunk = [&](int slot, int count) {
    SequenceState& s = slots_[static_cast<std::size_t>(slot)];
    ScheduledSequence seq;
    seq.request = s.id;
    seq.slot = slot;
    seq.first_position = s.num_computed;
    seq.tokens = std::span<const std::int32_t>(s.tokens).subspan(
        static_cast<std::size_t>(s.num_computed), static_cast<std::size_t>(count));
    seq.page_table = s.pages;
    seq.pages_id = s.pages_id;
    seq.samples = s.num_computed + count == static_cast<int>(s.tokens.size());
    seq.prompt_len = s.prompt_len;
    step.sequences.push_back(seq);
    step.num_tokens += count;
    budget -= count;
    generated_left -= std::clamp(s.num_computed + count - s.prompt_len, 0, count);
  };

  // When max_batch exceeds the budget, decodes alone can spend it step after step and prompts
  // would never get a turn: then every other step serves prompts only, provided one can make
  // progress (a prompt mid-way, or a waiting request that fits now).
  auto remaining = [](const SequenceState& s) {
    return static_cast<int>(s.tokens.size()) - s.num_computed;
  };
  // A decoder's one remaining token is one it generated; a prompt's last token is a prompt token
  // (and goes with the prompts, within the budget: a step holding it is a prefill step).
  auto decoding = [&](const SequenceState& s) {
    return remaining(s) == 1 && s.num_computed >= s.prompt_len;
  };
  int decoders = 0;
  bool prompt_ready = false;
  for (int slot : running_) {
    const SequenceState& s = slots_[static_cast<std::size_t>(slot)];
    decoders += decoding(s);
    prompt_ready = prompt_ready || (remaining(s) >= 1 && !decoding(s));
  }
  if (!waiting_.empty() && num_running() < limits_.max_batch &&
      pages_for(static_cast<int>(slots_[static_cast<std::size_t>(waiting_.front())].tokens.size())) <=
          pool_.free_pages())
    prompt_ready = true;
  const bool prompt_turn = prompt_ready && decoders >= budget && !last_step_prompt_turn_;
  last_step_prompt_turn_ = prompt_turn;

  // 1. Decode, oldest first. Victims of preemption are always the youngest, at the back of
  // running_: none of them is already in the step, and walking running_ by index meets exactly
  // the requests that are still running.
  for (std::size_t i = 0; !prompt_turn && i < running_.size(); ++i) {
    const int slot = running_[i];
    SequenceState& s = slots_[static_cast<std::size_t>(slot)];
    if (!decoding(s)) continue;
    bool has_page = s.num_computed < static_cast<int>(s.pages.size()) * limits_.page_size;
    while (!has_page) {
      if (take_pages(1, s.pages)) {
        has_page = true;
      } else {
        const int youngest = running_.back();
        preempt(youngest);
        if (youngest == slot) break;
      }
    }
    if (!has_page) continue;
    add_chunk(slot, 1);
  }

  // A step with decodes takes at most mixed_budget tokens, and at least mixed_budget / 2 prompt
  // tokens, within the budget (the largest prefill bucket holds the whole step).
  const int decoded = step.num_tokens;
  if (decoded > 0)
    budget = std::min(
        budget, std::max(limits_.mixed_budget - decoded, std::max(1, limits_.mixed_budget / 2)));

  // 2. The rest of the prompts of running requests, oldest first, within the budget.
  for (int slot : running_) {
    if (budget <= 0) break;
    const SequenceState& s = slots_[static_cast<std::size_t>(slot)];
    // A decoder's token was served (or preempted) by the decode pass above. A request recomputing
    // its generated tokens may get none of them this step; but it is running and not decoding, so
    // the decode pass took at most max_batch - 1 and the oldest such request gets one at least.
    if (remaining(s) < 1 || decoding(s)) continue;
    const int count = within_generated(s, std::min(remaining(s), budget));
    if (count > 0) add_chunk(slot, count);
  }

  // 3. Admission in arrival order. A request takes pages for all its known tokens now, so its
  // prompt chunks never wait for pages later.
  while (!waiting_.empty() && budget > 0 && num_running() < limits_.max_batch) {
    const int slot = waiting_.front();
    SequenceState& s = slots_[static_cast<std::size_t>(slot)];
    if (!admit(s)) break;
    waiting_.pop_front();
    s.running = true;
    s.pages_id = next_pages_id_++;
    // Room for every token and page it can reach, taken once it runs (not while it waits, where
    // a long queue would hold it): growing them while it decodes would reallocate in the steps
    // where a batch that started together crosses the same sizes.
    s.tokens.reserve(static_cast<std::size_t>(s.max_len));
    s.pages.reserve(static_cast<std::size_t>(pages_for(s.max_len)));
    insert_by_arrival(running_, slot);
    // admit() leaves one known token at least to compute, but a request whose whole prompt was
    // cached and that recomputes generated tokens gets none while the step's are spent (the
    // decode pass serves it next).
    const int count = within_generated(s, std::min(remaining(s), budget));
    if (count > 0) add_chunk(slot, count);
  }

  // A decode step holds one generated token per sequence; a prompt's last token alone (a one-token
  // prompt, or a chunk's remainder) makes a prefill step, so that prompt tokens always meet the
  // prefill buckets' attention and a request's bits do not depend on what it shares a step with.
  const bool all_generated_single =
      std::all_of(step.sequences.begin(), step.sequences.end(), [](const ScheduledSequence& q) {
        return q.tokens.size() == 1 && q.first_position >= q.prompt_len;
      });
  if (all_generated_single) {
    step.bucket_kind = BucketKind::Decode;
    const int n = static_cast<int>(step.sequences.size());
    step.bucket =
        n == 0 ? 0
               : *std::lower_bound(limits_.decode_buckets.begin(), limits_.decode_buckets.end(), n);
  } else {
    step.bucket_kind = BucketKind::Prefill;
    step.bucket = *std::lower_bound(limits_.prefill_buckets.begin(), limits_.prefill_buckets.end(),
                                    step.num_tokens);
  }
}

void Scheduler::commit(const Step& step) {
  for (const ScheduledSequence& q : step.sequences) {
    const auto slot = static_cast<std::size_t>(q.slot);
    // Removed since the step was scheduled, and perhaps the slot taken by a later request.
    if (!slot_used_[slot] || slots_[slot].id != q.request) continue;
    slots_[slot].num_computed = q.first_position + static_cast<int>(q.tokens.size());
  }
}

void Scheduler::cache_prompt_pages(const Step& step) {
  if (!cache_) return;
  for (const ScheduledSequence& q : step.sequences) {
    const auto slot = static_cast<std::size_t>(q.slot);
    SequenceState& s = slots_[slot];
    // Removed, or preempted (and perhaps admitted again, with other pages) since it was scheduled.
    if (!slot_used_[slot] || s.id != q.request || !s.running || s.pages_id != q.pages_id) continue;
    const int end = std::min(s.prompt_len, q.first_position + static_cast<int>(q.tokens.size()));
    const int full = end / limits_.page_size;
    if (full > s.prefix.pages) cache_->insert(s.prefix, s.tokens, s.pages, full);
  }
}

void Scheduler::append_token(RequestId id, std::int32_t token) {
  SequenceState& s = slots_.at(static_cast<std::size_t>(slot_of_.at(id)));
  if (static_cast<int>(s.tokens.size()) >= s.max_len)
    fail("scheduler: request " + std::to_string(id) + " is already at its length limit");
  s.tokens.push_back(token);
}

void Scheduler::resolve_token(RequestId id, int position, std::int32_t token) {
  SequenceState& s = slots_.at(static_cast<std::size_t>(slot_of_.at(id)));
  if (position < s.prompt_len || position >= static_cast<int>(s.tokens.size()) ||
      s.tokens[static_cast<std::size_t>(position)] >= 0)
    fail("scheduler: request " + std::to_string(id) + " has no placeholder at position " +
         std::to_string(position));
  s.tokens[static_cast<std::size_t>(position)] = token;
}

void Scheduler::remove(RequestId id) {
  auto it = slot_of_.find(id);
  if (it == slot_of_.end()) return;
  const int slot = it->second;
  SequenceState& s = slots_[static_cast<std::size_t>(slot)];
  pool_.release_all(s.pages);
  if (s.running)
    running_.erase(std::find(running_.begin(), running_.end(), slot));
  else
    waiting_.erase(std::find(waiting_.begin(), waiting_.end(), slot));
  // The tokens go now, not when the slot is reused: a finished request's memory is not held.
  s.tokens = {};
  slot_used_[static_cast<std::size_t>(slot)] = false;
  free_slots_.push_back(slot);
  slot_of_.erase(it);
}

const SequenceState* Scheduler::find(RequestId id) const {
  auto it = slot_of_.find(id);
  return it == slot_of_.end() ? nullptr : &slots_[static_cast<std::size_t>(it->second)];
}

void Scheduler::check_invariant() const {
  std::vector<std::span<const PageId>> tables;
  for (std::size_t slot = 0; slot < slots_.size(); ++slot) {
    if (!slot_used_[slot]) continue;
    const SequenceState& s = slots_[slot];
    const std::string who = "scheduler invariant: request " + std::to_string(s.id);
    if (!s.running && !s.pages.empty()) fail(who + " is waiting but holds pages");
    if (s.num_computed > static_cast<int>(s.pages.size()) * limits_.page_size)
      fail(who + " has more computed positions than its pages hold");
    if (s.running &&
        static_cast<int>(s.pages.size()) < pages_for(static_cast<int>(s.tokens.size()) - 1))
      fail(who + " is running without pages for its known tokens");
    tables.emplace_back(s.pages);
  }
  if (num_running() > limits_.max_batch) fail("scheduler invariant: more running than max_batch");
  if (running_.size() + waiting_.size() != slot_of_.size())
    fail("scheduler invariant: a request is in neither queue or in both");
  pool_.check_invariant(tables);
  if (cache_) cache_->check_invariant();
}

}  // namespace telos::exec
