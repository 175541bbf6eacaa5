#pragma once
// The engine: requests in, streams of tokens out. This is the API the HTTP server and
// `telos-run generate` build on.
//
//   auto engine = Engine::create(artifact, std::make_unique<CpuReferenceModel>(artifact));
//   RequestHandle h = engine->submit({.prompt = {1, 17, 42}, .sampling = {.temperature = 0}});
//   RequestEvent e;
//   while (h->next(e)) {           // blocks; false once the finish event has been read
//     if (e.token) use(e.token->token);
//     if (e.finish) report(*e.finish, e.usage, e.timings);
//   }
//
// Threading: every public member function is safe to call from any thread. One background thread
// runs the loop: take new submissions and cancellations, schedule a step (continuous batching,
// see scheduler.hpp), launch it on the backend, and while the device computes, deliver the
// previous step's events to the requests' streams; then wait for the step, sample, and queue the
// new events.
//
// Overlapped steps: when every sampling row of the step N in flight is sampled on the device and
// the backend feeds_sampled_tokens(), the loop schedules and launches N+1 before waiting for N.
// Each request of N that goes on gets a placeholder next token -(r+1), "what row r of the
// previous step sampled", which the device resolves itself; the host resolves it when N comes
// back (Scheduler::resolve_token). So the GPU has N+1 queued while the host samples N, and the
// host's per-step work hides behind the device. What the host cannot know yet:
//  - a request that stops at N on EOS or a stop id: its row of N+1 computes a discarded token.
//    Its pages go back to the pool when N is collected; N+1's write to them is harmless because
//    whatever reuses them runs after N+1 on the device (steps run in launch order).
//  - max_tokens is known: a request whose N token is its last gets no placeholder and no row.
// Every other case (rows sampled on the host, logits wanted, a backend without device feeding)
// waits for N before scheduling N+1. The tokens, finish reasons and event order are what the
// synchronous loop produces; only the step boundaries may differ (a stopped request holds its
// slot and pages one schedule longer).
//
// Greedy requests without penalties, logprobs or prompt logits are sampled on the device when the
// backend can (samples_on_device): only their tokens come back, not the logits. Both pick the
// lowest id among the largest logits, so the tokens are the same either way. Requests with a
// temperature (and top_k, top_p or min_p) are drawn on the device too when the backend can
// (draws_on_device), unless they set both top_p and min_p (the host applies top_p first, as
// Hugging Face does; the sample kernel min_p first). A device draw is a function of the request's
// seed and the position, so it repeats alone, in any batch and after a preemption, but it is not
// the host sampler's draw for the same seed. Everything else is sampled on the host from the
// step's logits.
// Events of one request arrive in order; a stream never blocks the loop (it is an unbounded
// queue, and a request produces at most max_seq_len events).
//
// Every request ends with exactly one event whose `finish` is set (it may also carry the last
// token). Its KV pages are back in the pool before that event is delivered, whatever the reason:
// finished, cancelled, or failed.
//
// Prefix caching (EngineOptions::prefix_cache, on unless turned off): a request takes the KV pages
// of the longest prefix of its prompt that an earlier request with the same cache_salt computed
// (scheduler.hpp, prefix_cache.hpp) and computes only the rest; its tokens are the ones it gets
// without the cache. RequestUsage::cached_tokens says how many prompt tokens it took.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <vector>

#include "executor/artifact.hpp"
#include "executor/model_backend.hpp"
#include "executor/runtime_limits.hpp"
#include "executor/sampler.hpp"
#include "executor/scheduler.hpp"

namespace telos::exec {

struct GenerationRequest {
  std::vector<std::int32_t> prompt;  // token ids, each below the model's vocab_size
  SamplingParams sampling;
  // Diagnostics: the first token event carries the logits it was sampled from (the prompt's
  // last position), for comparing an artifact against reference outputs.
  bool return_prompt_logits = false;
  // Report each token's logprob (SampledToken::logprob) even when sampling.logprobs is 0; without
  // it, and without sampling.logprobs, the logprob of a device-sampled token is 0.
  bool token_logprobs = false;
  // Requests share cached prompt pages only with requests of the same salt (prefix_cache.hpp);
  // empty: the salt of every request without one. At most kMaxCacheSaltBytes.
  std::string cache_salt;
};

enum class FinishReason {
  Stop,       // an EOS id (unless ignore_eos) or one of stop_token_ids was generated
  Length,     // max_tokens generated, or the sequence reached the artifact's max_seq_len
  Cancelled,  // cancel() was called, or the engine shut down first
  Error,      // the backend failed on a step with this request in it (see RequestEvent::error)
};
// "stop", "length", "cancelled", "error".
std::string_view finish_reason_name(FinishReason reason);

struct RequestUsage {
  int prompt_tokens = 0;
  int completion_tokens = 0;
  int cached_tokens = 0;  // prompt tokens whose KV came from the prefix cache
};

struct RequestTimings {
  double queue_seconds = 0;        // submit → first scheduled
  double first_token_seconds = 0;  // submit → first token (TTFT); 0 when no token came
  double total_seconds = 0;        // submit → finish
  int preemptions = 0;             // times its pages were taken back and it was recomputed
};

struct RequestEvent {
  std::optional<SampledToken> token;  // a newly generated token, with logprobs
  std::vector<float> logits;          // return_prompt_logits: on the first token event only
  std::optional<FinishReason> finish;
  // Set with `finish`:
  std::optional<std::int32_t> stop_token;  // Stop: the token that stopped it (also in `token`)
  std::string error;                       // Error: what failed
  // With `finish`; the first token event carries cached_tokens too, for a reader that stops
  // before the finish event (a stop string).
  RequestUsage usage;
  RequestTimings timings;
};

using Clock = std::chrono::steady_clock;

// One request's side of the engine: its event queue and its cancel switch.
class RequestStream {
 public:
  explicit RequestStream(RequestId id) : id_(id) {}
  RequestId id() const { return id_; }

  // Waits for the next event. Returns false, leaving `out` alone, once the finish event has been
  // taken: the stream is over.
  bool next(RequestEvent& out);
  enum class Poll { Event, Timeout, Ended };
  // Like next(), waiting at most `timeout` (servers poll so that they notice a client going away).
  Poll next_for(RequestEvent& out, std::chrono::milliseconds timeout);

  // Asks the engine to end this request; the stream then ends with FinishReason::Cancelled (or
  // with whatever finish came first). Safe to call any number of times, from any thread.
  void cancel();
  bool cancel_requested() const;

 private:
  friend class Engine;
  void push(RequestEvent event);
  // Moves the oldest unread event to `out`; the caller holds mutex_ and has seen one.
  void take(RequestEvent& out);

  const RequestId id_;
  mutable std::mutex mutex_;
  std::condition_variable ready_;
  // Unread events are events_[head_..]. A vector whose storage is reused, not a deque: a deque
  // allocates a node every few events on the engine's thread and the reader frees it on its own,
  // which kept the loop thread's malloc arena growing and trimming every step.
  std::vector<RequestEvent> events_;
  std::size_t head_ = 0;
  bool finished_taken_ = false;
  // The engine loop looks at this before every step; a live request always keeps the loop busy,
  // so no wake-up is needed.
  std::atomic<bool> cancel_requested_{false};
};

using RequestHandle = std::shared_ptr<RequestStream>;

struct EngineStats {
  std::string backend;  // "cpu" or "gpu"
  int waiting = 0;      // queued, not yet admitted (including preempted requests)
  int running = 0;      // admitted: holding KV pages
  // Free pages include the cached ones no request holds (kv_pages_cached), which the pool evicts
  // when it needs them.
  int kv_pages_total = 0, kv_pages_used = 0, kv_pages_free = 0, kv_pages_cached = 0;
  int kv_page_size = 0;  // tokens per page
  // Prompt tokens looked up in the prefix cache at requests' first admissions, and those found
  // there (their KV reused, not computed).
  std::uint64_t prefix_cache_queries = 0, prefix_cache_hits = 0;
  std::uint64_t preemptions = 0;
  std::uint64_t requests_submitted = 0, requests_finished = 0;  // finished: any reason
  std::uint64_t requests_rejected = 0;                          // submit() threw
  std::uint64_t prompt_tokens = 0, generated_tokens = 0;
  std::uint64_t steps = 0;
};

// Latency observations since the last take_latency_samples() call, in seconds, for histograms.
struct LatencySamples {
  std::vector<double> time_to_first_token;
  std::vector<double> time_per_output_token;  // one per request: (total - TTFT) / (tokens - 1)
  std::vector<double> queue_time;             // submit → first scheduled, per scheduled request
};

// One step as telos-run bench sees it (EngineOptions::record_step_timings).
struct StepTiming {
  int sequences = 0;
  int tokens = 0;
  bool decode = false;        // one token per sequence
  Clock::time_point started;     // when its scheduling began
  double host_seconds = 0;       // scheduling, descriptor packing and launch, on the host
  // The loop thread's CPU time over the same work (CLOCK_THREAD_CPUTIME_ID): below host_seconds by
  // what the thread spent off its CPU (preempted, or its vCPU descheduled by the hypervisor).
  double host_cpu_seconds = -1;
  double idle_gap_seconds = -1;  // device idle since the previous step; negative when unknown
  double launch_call_seconds = -1;  // of host_seconds, in the device API's launch calls; < 0: unknown
  LaunchCallTimes launch_calls;     // launch_call_seconds by call group (model_backend.hpp)
  bool overlapped = false;       // launched while the previous step was still in flight
};

struct EngineOptions {
  // Check the page pool and scheduler invariants after every step (tests and debug builds).
#ifdef NDEBUG
  bool check_invariants = false;
#else
  bool check_invariants = true;
#endif
  // Keep a StepTiming per step for take_step_timings(), and ask the backend for device timing.
  bool record_step_timings = false;
  // Launch step N+1 before waiting for step N where the backend can feed it (see above); false:
  // always wait first (telos-run bench --no-overlap compares the two).
  bool overlap_steps = true;
  // Share the full KV pages of prompts between requests (prefix_cache.hpp); false: every prompt
  // is computed in full (--no-prefix-cache).
  bool prefix_cache = true;
  // Limits set at start, at most the artifact's (runtime_limits.hpp; all 0: the artifact's). The
  // backend must have been built with the same kv_pages (make_backend).
  RuntimeLimits limits;
};

class Engine {
 public:
  // Starts the loop thread. The backend must be built for `artifact`.
  static std::unique_ptr<Engine> create(std::shared_ptr<const Artifact> artifact,
                                        std::unique_ptr<ModelBackend> backend,
                                        EngineOptions options = {});
  // Cancels whatever is still queued or running, ends every stream, and joins the loop.
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Queues a request and returns its stream. Throws telos::Error naming the request and field
  // when the request can never run: a token id outside the vocabulary, an out-of-range sampling
  // value, a cache_salt over kMaxCacheSaltBytes, a prompt plus max_tokens beyond max_seq_len, more
  // KV pages than the pool has, or an engine that is shutting down.
  RequestHandle submit(GenerationRequest request);
  // Queues several requests at once (the same checks; all or none): the loop sees them together,
  // so they are scheduled into the same steps (telos-run bench's batches).
  std::vector<RequestHandle> submit_all(std::vector<GenerationRequest> requests);
  // Ends a request (see RequestStream::cancel). Unknown or finished ids are ignored.
  void cancel(RequestId id);
  // Stops admitting requests: later submit() calls throw. Queued and running ones continue.
  void stop_admitting();
  // Waits until no request is queued or running and no step is on the device.
  void wait_idle();

  EngineStats stats() const;
  LatencySamples take_latency_samples();
  // The steps run since the last call (only with EngineOptions::record_step_timings).
  std::vector<StepTiming> take_step_timings();
  const Artifact& artifact() const { return *artifact_; }
  int max_seq_len() const { return limits_.max_seq_len; }
  int max_batch() const { return limits_.max_batch; }

 private:
  Engine(std::shared_ptr<const Artifact> artifact, std::unique_ptr<ModelBackend> backend,
         EngineOptions options);

  // The loop thread's view of a request.
  struct Live {
    RequestHandle stream;
    GenerationRequest request;
    std::uint64_t seed = 0;
    int max_tokens = 0;
    std::vector<std::int32_t> generated;
    Clock::time_point submitted, first_scheduled, first_token;
    bool scheduled = false;
    // Position of the placeholder token of an overlapped step (see above), -1 when none.
    int pending_position = -1;
    int slot = -1;  // in the scheduler (ScheduledSequence::slot), -1 until it is added
  };
  // A launched step until it is collected.
  struct Launched {
    Step step;
    std::vector<std::uint8_t> device_picks;       // per sampling row
    std::vector<DeviceSampling> device_sampling;  // per sampling row
    bool want_logits = false;
    bool committed = false;  // scheduler_.commit ran (before the next schedule, when overlapped)
    bool overlapped = false;
    Clock::time_point started;
    double host_seconds = 0;
    double host_cpu_seconds = -1;  // only with EngineOptions::record_step_timings
  };

  void loop();
  // Schedules a step and launches it into the next slot of launched_ (nothing when the step is
  // empty; a launch that throws fails the step's requests).
  void launch_step(bool overlapped);
  // Whether the step in flight can feed the next one its tokens on the device.
  bool can_overlap(const Launched& in_flight) const;
  // Commits the step in flight and gives each request that goes on its placeholder token.
  void append_placeholders(Launched& in_flight);
  // Waits for the oldest launched step, samples and queues the resulting events.
  void complete_step();
  // Fails every request of `step` with `what`: their KV pages cannot be trusted any more.
  void fail_step(const Step& step, const std::string& what);
  // Removes the request from the scheduler (returning its pages), completes `event` with the
  // reason, usage and timings, and queues it as the stream's last event.
  void finish(RequestId id, FinishReason reason, RequestEvent event = {});
  // Hands the queued events to their streams and refreshes the statistics.
  void deliver();
  // The live request a scheduled sequence belongs to, or null when it has ended (a step in
  // flight may outlive its requests, and their slots may be taken by newer ones).
  Live* live_of(const ScheduledSequence& seq) const {
    Live* l = live_by_slot_[static_cast<std::size_t>(seq.slot)];
    return l && l->stream->id() == seq.request ? l : nullptr;
  }

  std::shared_ptr<const Artifact> artifact_;
  std::unique_ptr<ModelBackend> backend_;
  EngineOptions options_;
  SchedulerLimits limits_;

  // Loop thread only.
  KvPagePool pool_;
  std::optional<PrefixCache> prefix_cache_;  // with EngineOptions::prefix_cache
  Scheduler scheduler_;
  Sampler sampler_;
  std::unordered_map<RequestId, Live> live_;
  // live_'s entries by scheduler slot (null where none), so that a step finds its requests by
  // index instead of hashing every sequence's id; the map's nodes do not move.
  std::vector<Live*> live_by_slot_;
  StepOutput output_;
  // Launched steps, oldest first: launched_[oldest_], then the other one when two are in flight.
  Launched launched_[2];
  int oldest_ = 0, num_launched_ = 0;
  struct Delivery {
    RequestHandle stream;
    RequestEvent event;
  };
  std::vector<Delivery> deliveries_;  // queued events, handed over by deliver()
  std::uint64_t undelivered_steps_ = 0;

  // Shared, under mutex_.
  mutable std::mutex mutex_;
  std::condition_variable wake_;      // work for the loop
  std::condition_variable idle_;      // the loop has nothing left
  std::vector<Live> submitted_;       // not yet handed to the scheduler
  std::vector<RequestId> cancelled_;  // cancel(id) calls not yet handled
  bool admitting_ = true;
  bool shutting_down_ = false;
  RequestId next_id_ = 1;
  std::size_t in_flight_ = 0;  // submitted and not yet finished
  // Steps on the device as of the last deliver(): an overlapped step may outlive its requests
  // (they stopped at the step before), and wait_idle() waits for it too.
  int steps_on_device_ = 0;
  EngineStats stats_;
  LatencySamples latency_;
  std::vector<StepTiming> step_timings_;

  std::thread thread_;
};

}  // namespace telos::exec
