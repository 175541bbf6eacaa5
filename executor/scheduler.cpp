#include "executor/scheduler.hpp"

#include <algorithm>
#include <string>

#include "support/error.hpp"

namespace telos::exec {

Scheduler::Scheduler(SchedulerLimits limits, KvPagePool& pool)
    : limits_(std::move(limits)), pool_(pool) {
  if (limits_.max_batch < 1 || limits_.max_seq_len < 1 || limits_.page_size < 1 ||
      limits_.token_budget < 1)
    fail("scheduler: limits need max_batch, max_seq_len, page_size and token_budget >= 1");
  if (limits_.decode_buckets.empty() || limits_.decode_buckets.back() < limits_.max_batch ||
      limits_.prefill_buckets.empty() || limits_.prefill_buckets.back() < limits_.token_budget)
    fail(
        "scheduler: the largest decode bucket must hold max_batch and the largest prefill bucket "
        "the token budget");
}

void Scheduler::check_fits(const SchedulerLimits& limits, int pool_pages, const std::string& who,
                           int prompt_len, int max_new_tokens) {
  if (prompt_len < 1) fail(who + ": the prompt is empty (at least one token is needed)");
  if (max_new_tokens < 1) fail(who + ": max_tokens must be at least 1");
  const long long total = static_cast<long long>(prompt_len) + max_new_tokens;
  if (total > limits.max_seq_len)
    fail(who + ": the prompt of " + std::to_string(prompt_len) + " tokens plus max_tokens " +
         std::to_string(max_new_tokens) + " exceeds the artifact's max_seq_len " +
         std::to_string(limits.max_seq_len));
  const long long pages = (total + limits.page_size - 1) / limits.page_size;
  if (pages > pool_pages)
    fail(who + ": needs " + std::to_string(pages) + " KV pages, more than the whole pool of " +
         std::to_string(pool_pages));
}

void Scheduler::add(RequestId id, std::vector<std::int32_t> prompt, int max_new_tokens) {
  const std::string who = "request " + std::to_string(id);
  if (sequences_.count(id)) fail(who + ": the id is already in use");
  check_fits(limits_, pool_.num_pages(), who, static_cast<int>(prompt.size()), max_new_tokens);
  SequenceState s;
  s.id = id;
  s.arrival = next_arrival_++;
  s.prompt_len = static_cast<int>(prompt.size());
  s.max_len = s.prompt_len + max_new_tokens;
  s.tokens = std::move(prompt);
  sequences_.emplace(id, std::move(s));
  waiting_.push_back(id);
}

void Scheduler::insert_by_arrival(std::vector<RequestId>& list, RequestId id) {
  const std::uint64_t arrival = sequences_.at(id).arrival;
  auto pos = std::find_if(list.begin(), list.end(),
                          [&](RequestId other) { return sequences_.at(other).arrival > arrival; });
  list.insert(pos, id);
}

void Scheduler::preempt(RequestId id) {
  SequenceState& s = sequences_.at(id);
  pool_.release_all(s.pages);
  s.num_computed = 0;
  s.running = false;
  ++s.preemptions;
  ++preemptions_;
  running_.erase(std::find(running_.begin(), running_.end(), id));
  auto pos = std::find_if(waiting_.begin(), waiting_.end(), [&](RequestId other) {
    return sequences_.at(other).arrival > s.arrival;
  });
  waiting_.insert(pos, id);
}

Step Scheduler::schedule() {
  Step step;
  // One allocation per step instead of one per doubling while the batch fills.
  step.sequences.reserve(static_cast<std::size_t>(limits_.max_batch));
  int budget = limits_.token_budget;
  auto add_chunk = [&](SequenceState& s, int count) {
    ScheduledSequence seq;
    seq.request = s.id;
    seq.first_position = s.num_computed;
    seq.tokens = std::span<const std::int32_t>(s.tokens).subspan(
        static_cast<std::size_t>(s.num_computed), static_cast<std::size_t>(count));
    seq.page_table = s.pages;
    seq.samples = s.num_computed + count == static_cast<int>(s.tokens.size());
    step.sequences.push_back(seq);
    step.num_tokens += count;
    budget -= count;
  };

  // When max_batch exceeds the budget, decodes alone can spend it step after step and prompts
  // would never get a turn: then every other step serves prompts only, provided one can make
  // progress (a prompt mid-way, or a waiting request that fits now).
  auto remaining = [](const SequenceState& s) {
    return static_cast<int>(s.tokens.size()) - s.num_computed;
  };
  int decoders = 0;
  bool prompt_ready = false;
  for (RequestId id : running_) {
    const int r = remaining(sequences_.at(id));
    decoders += r == 1;
    prompt_ready = prompt_ready || r > 1;
  }
  if (!waiting_.empty() && num_running() < limits_.max_batch &&
      pages_for(static_cast<int>(sequences_.at(waiting_.front()).tokens.size())) <=
          pool_.free_pages())
    prompt_ready = true;
  const bool prompt_turn = prompt_ready && decoders >= budget && !last_step_prompt_turn_;
  last_step_prompt_turn_ = prompt_turn;

  // 1. Decode, oldest first. Victims of preemption are always younger than the request being
  // served, so none of them is already in the step.
  const std::vector<RequestId> by_age = prompt_turn ? std::vector<RequestId>{} : running_;
  for (RequestId id : by_age) {
    SequenceState& s = sequences_.at(id);
    if (!s.running || remaining(s) != 1) continue;
    bool has_page = s.num_computed < static_cast<int>(s.pages.size()) * limits_.page_size;
    while (!has_page) {
      if (pool_.allocate(1, s.pages)) {
        has_page = true;
      } else {
        RequestId youngest = running_.back();
        preempt(youngest);
        if (youngest == id) break;
      }
    }
    if (!has_page) continue;
    add_chunk(s, 1);
  }

  // 2. The rest of the prompts of running requests, oldest first, within the budget.
  for (RequestId id : running_) {
    if (budget <= 0) break;
    SequenceState& s = sequences_.at(id);
    // One remaining token was served (or preempted) by the decode pass above.
    if (remaining(s) > 1) add_chunk(s, std::min(remaining(s), budget));
  }

  // 3. Admission in arrival order. A request takes pages for all its known tokens now, so its
  // prompt chunks never wait for pages later.
  while (!waiting_.empty() && budget > 0 && num_running() < limits_.max_batch) {
    SequenceState& s = sequences_.at(waiting_.front());
    if (!pool_.allocate(pages_for(static_cast<int>(s.tokens.size())), s.pages)) break;
    waiting_.pop_front();
    s.running = true;
    insert_by_arrival(running_, s.id);
    add_chunk(s, std::min(static_cast<int>(s.tokens.size()), budget));
  }

  const bool all_single =
      std::all_of(step.sequences.begin(), step.sequences.end(),
                  [](const ScheduledSequence& q) { return q.tokens.size() == 1; });
  if (all_single) {
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
  return step;
}

void Scheduler::commit(const Step& step) {
  for (const ScheduledSequence& q : step.sequences) {
    auto it = sequences_.find(q.request);
    if (it == sequences_.end()) continue;
    SequenceState& s = it->second;
    s.num_computed = q.first_position + static_cast<int>(q.tokens.size());
  }
}

void Scheduler::append_token(RequestId id, std::int32_t token) {
  SequenceState& s = sequences_.at(id);
  if (static_cast<int>(s.tokens.size()) >= s.max_len)
    fail("scheduler: request " + std::to_string(id) + " is already at its length limit");
  s.tokens.push_back(token);
}

void Scheduler::resolve_token(RequestId id, int position, std::int32_t token) {
  SequenceState& s = sequences_.at(id);
  if (position < s.prompt_len || position >= static_cast<int>(s.tokens.size()) ||
      s.tokens[static_cast<std::size_t>(position)] >= 0)
    fail("scheduler: request " + std::to_string(id) + " has no placeholder at position " +
         std::to_string(position));
  s.tokens[static_cast<std::size_t>(position)] = token;
}

void Scheduler::remove(RequestId id) {
  auto it = sequences_.find(id);
  if (it == sequences_.end()) return;
  pool_.release_all(it->second.pages);
  if (it->second.running)
    running_.erase(std::find(running_.begin(), running_.end(), id));
  else
    waiting_.erase(std::find(waiting_.begin(), waiting_.end(), id));
  sequences_.erase(it);
}

const SequenceState* Scheduler::find(RequestId id) const {
  auto it = sequences_.find(id);
  return it == sequences_.end() ? nullptr : &it->second;
}

void Scheduler::check_invariant() const {
  std::vector<std::span<const PageId>> tables;
  for (const auto& [id, s] : sequences_) {
    const std::string who = "scheduler invariant: request " + std::to_string(id);
    if (!s.running && !s.pages.empty()) fail(who + " is waiting but holds pages");
    if (s.num_computed > static_cast<int>(s.pages.size()) * limits_.page_size)
      fail(who + " has more computed positions than its pages hold");
    if (s.running &&
        static_cast<int>(s.pages.size()) < pages_for(static_cast<int>(s.tokens.size()) - 1))
      fail(who + " is running without pages for its known tokens");
    tables.emplace_back(s.pages);
  }
  if (num_running() > limits_.max_batch) fail("scheduler invariant: more running than max_batch");
  if (running_.size() + waiting_.size() != sequences_.size())
    fail("scheduler invariant: a request is in neither queue or in both");
  pool_.check_invariant(tables);
}

}  // namespace telos::exec
