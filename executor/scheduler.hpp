#pragma once
// Continuous batching over a paged KV cache. Each call to schedule() builds one step: a batch of
// sequences, each with a run of new tokens at given positions (a prefill chunk, or one decode
// token), padded to one of the artifact's buckets. The policy:
//
//  1. Decode first: every running request whose prompt is done gets its next token, even when
//     that is more tokens than the budget (max_batch may exceed prefill_chunk). A decode that
//     crosses into a new page takes one from the pool; when the pool is empty the youngest running
//     request (latest arrival) is preempted: its pages are freed and it goes back to the waiting
//     queue with everything it has generated, to be recomputed later. The oldest request is
//     therefore never preempted while others run, so every request finishes.
//  2. Running requests in the middle of their prompt get what is left of the token budget
//     (serving.prefill_chunk tokens per step, decode tokens included), oldest first; a step with
//     prompt tokens thus never exceeds the largest prefill bucket.
//     A step that also carries decodes holds fewer: at most mixed_budget tokens in all, so that
//     a long prompt's chunks do not hold up every decoding request for a whole prefill_chunk's
//     time (inter-token latency), but at least mixed_budget / 2 prompt tokens, so that prompts
//     still move under a full batch of decodes.
//     When the decodes alone spend the budget (max_batch > prefill_chunk), every other step
//     serves prompts only, so that new requests still get in.
//     A step holds at most max_batch generated tokens (decodes, and tokens a preempted request
//     generated before, recomputed): the GPU's prefill buckets run the split attention kernels
//     over their first max_batch rows only; a recomputing request's chunk stops at that limit.
//  3. Waiting requests are admitted in arrival order while the batch has room (serving.max_batch),
//     the budget is not spent and the pool has pages for all of their known tokens; the first that
//     does not fit stops admission, so a big request is not overtaken forever by small ones.
//     With a prefix cache (prefix_cache.hpp), an admitted request first takes the cached pages of
//     its longest cached prompt prefix, and its first chunk starts after them, as a later chunk of
//     a chunked prefill would. The hit is whole prompt pages short of the last known token, which
//     is always computed (its logits sample the next token). A prompt's full pages are offered to
//     the cache once the step that fills them has run (cache_prompt_pages).
//
// A request is only a token sequence here; the engine owns sampling and streaming. The scheduler
// does not know whether a GPU or the CPU runs its steps.
#include <cstdint>
#include <deque>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "executor/kv_page_pool.hpp"
#include "executor/prefix_cache.hpp"

namespace telos::exec {

using RequestId = std::uint64_t;

struct SchedulerLimits {
  int max_batch = 0;                 // sequences per step
  int max_seq_len = 0;               // prompt + generated tokens of one request
  int page_size = 0;                 // positions per KV page
  int token_budget = 0;              // tokens per step (serving.prefill_chunk)
  std::vector<int> decode_buckets;   // ascending; the largest >= max_batch
  std::vector<int> prefill_buckets;  // ascending; the largest >= token_budget
  // max_seq_len was set when telos-run started (RuntimeLimits), below the artifact's: messages
  // name the option instead of the artifact's field.
  bool max_seq_len_set_at_start = false;
  // Tokens per step that also carries decodes (--mixed-chunk), at most token_budget; 0: that.
  int mixed_budget = 0;
};

// One sequence's share of a step. The spans point into the scheduler and stay valid until the
// next call that changes it (schedule, commit, append_token, remove).
struct ScheduledSequence {
  RequestId request = 0;
  int first_position = 0;                // position of tokens[0] in the sequence
  std::span<const std::int32_t> tokens;  // the new tokens this step computes
  std::span<const PageId> page_table;    // page i holds positions [i*page_size, (i+1)*page_size)
  bool samples = false;                  // the chunk ends the known tokens: a next token is sampled
  // The request's slot (Scheduler::add): the engine keeps per-request state in vectors indexed by
  // it instead of looking ids up in maps every step. A slot is reused once its request is removed,
  // so a step that outlives its request (an overlapped one) must compare `request` before use.
  int slot = -1;
  // Positions below it are the request's prompt, the rest tokens it generated (recomputed after a
  // preemption): attention computes the two with different kernels in prefill buckets, and a step
  // holding a prompt token is never a decode step (docs/artifact.md, "Prompt and generated
  // tokens").
  int prompt_len = 0;
  // Names this page table while it only grows: the scheduler gives a request a new one each time
  // it is admitted (first, and again after a preemption freed its pages), so a copy of its first
  // entries made under the same id is still right (the GPU descriptor's page rows,
  // step_descriptor.hpp). 0: not named (every entry is written each step).
  std::uint64_t pages_id = 0;
};

enum class BucketKind { Decode, Prefill };

struct Step {
  std::vector<ScheduledSequence> sequences;
  int num_tokens = 0;  // real tokens, summed over sequences
  // Decode steps (one token per sequence) pad the sequence count to a decode bucket; steps with a
  // longer chunk pad the token count to a prefill bucket. Padding rows are the GPU graphs' concern.
  BucketKind bucket_kind = BucketKind::Decode;
  int bucket = 0;
  bool empty() const { return sequences.empty(); }
};

// What the scheduler knows about one request.
struct SequenceState {
  RequestId id = 0;
  std::uint64_t arrival = 0;         // admission order; larger is younger
  std::vector<std::int32_t> tokens;  // prompt, then generated tokens
  int prompt_len = 0;
  int max_len = 0;       // prompt_len + the most tokens it may generate
  int num_computed = 0;  // positions whose K and V are in the cache
  std::vector<PageId> pages;
  bool running = false;
  int preemptions = 0;
  std::uint64_t pages_id = 0;  // ScheduledSequence::pages_id; new at each admission
  PrefixLink prefix;           // how far its prompt pages are in the prefix cache
  int cached_tokens = 0;       // prompt tokens taken from the prefix cache at its first admission
};

class Scheduler {
 public:
  // `cache` (null: none) must manage `pool`, with the limits' page size.
  Scheduler(SchedulerLimits limits, KvPagePool& pool, PrefixCache* cache = nullptr);

  // Queues a request and returns its slot (ScheduledSequence::slot). Throws
  // telos::Error naming the request when it can never run: an empty prompt, prompt +
  // max_new_tokens over max_seq_len, or more pages than the whole pool. Requests share cached
  // pages only with requests of the same `cache_salt`.
  int add(RequestId id, std::vector<std::int32_t> prompt, int max_new_tokens,
          std::string_view cache_salt = {});
  // The checks add() makes, for callers that want to refuse a request before queueing it.
  static void check_fits(const SchedulerLimits& limits, int pool_pages, const std::string& who,
                         int prompt_len, int max_new_tokens);

  // Builds the next step into `step`, reusing its storage: the engine schedules into the step
  // slot it launched two steps ago, so a step costs no heap allocation in steady state.
  void schedule(Step& step);
  Step schedule() {
    Step step;
    schedule(step);
    return step;
  }
  // Records that the step ran: every scheduled token now has its K and V in the cache. Requests
  // removed since the step was scheduled are skipped (an overlapped step may outlive them).
  void commit(const Step& step);
  // Offers the prefix cache the prompt pages the step filled. Call once the step has run (its K
  // and V are written), after commit; requests removed or preempted since it was scheduled are
  // skipped.
  void cache_prompt_pages(const Step& step);
  // Appends a token sampled for a sequence whose chunk had `samples` set. A negative token is a
  // placeholder for one not sampled yet (the engine's overlapped steps, engine.hpp): it may be
  // scheduled like any token, and resolve_token() later replaces it.
  void append_token(RequestId id, std::int32_t token);
  // Replaces the placeholder at `position` with the sampled token.
  void resolve_token(RequestId id, int position, std::int32_t token);
  // Ends a request wherever it is (finished, cancelled, failed); its pages return to the pool.
  // Unknown ids are ignored, so a cancel racing a finish is harmless.
  void remove(RequestId id);

  const SequenceState* find(RequestId id) const;
  int num_waiting() const { return static_cast<int>(waiting_.size()); }
  int num_running() const { return static_cast<int>(running_.size()); }
  std::uint64_t num_preemptions() const { return preemptions_; }
  // Prompt tokens looked up in the prefix cache at requests' first admissions, and those found.
  std::uint64_t prefix_cache_queries() const { return prefix_cache_queries_; }
  std::uint64_t prefix_cache_hits() const { return prefix_cache_hits_; }
  const SchedulerLimits& limits() const { return limits_; }
  const KvPagePool& pool() const { return pool_; }

  // Throws telos::Error unless the pool's references match the page tables of live requests and
  // the queues are consistent (see KvPagePool::check_invariant).
  void check_invariant() const;

 private:
  int pages_for(int positions) const {
    return (positions + limits_.page_size - 1) / limits_.page_size;
  }
  void preempt(int slot);
  void insert_by_arrival(std::vector<int>& list, int slot);
  // Takes `count` pages from the pool (evicting cached ones if it must); false when it has fewer.
  bool take_pages(int count, std::vector<PageId>& pages);
  // Gives a waiting request its cached prefix pages and pages for the rest of its known tokens;
  // false, changing nothing, when the pool has too few.
  bool admit(SequenceState& s);

  SchedulerLimits limits_;
  KvPagePool& pool_;
  PrefixCache* cache_;
  std::vector<PageId> evicted_;  // take_pages' scratch
  // Requests by slot, so that schedule() and commit() index a vector where they would otherwise
  // hash an id per sequence per step; slot_of_ serves the calls that name a request by id.
  std::vector<SequenceState> slots_;
  std::vector<bool> slot_used_;
  std::vector<int> free_slots_;  // slots of removed requests, reused before the vector grows
  std::unordered_map<RequestId, int> slot_of_;
  std::deque<int> waiting_;   // slots, by arrival
  std::vector<int> running_;  // slots, by arrival
  std::uint64_t next_arrival_ = 0;
  std::uint64_t next_pages_id_ = 1;
  std::uint64_t preemptions_ = 0;
  std::uint64_t prefix_cache_queries_ = 0, prefix_cache_hits_ = 0;
  bool last_step_prompt_turn_ = false;  // see schedule(): decodes and prompts alternate
};

}  // namespace telos::exec
