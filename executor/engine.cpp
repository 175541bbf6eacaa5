#include "executor/engine.hpp"

#include <time.h>

#include <algorithm>
#include <random>

#include "support/error.hpp"

namespace telos::exec {
namespace {

// Latency samples kept between two take_latency_samples() calls; beyond this, new ones are
// dropped so that a server nobody scrapes does not grow without bound.
constexpr std::size_t kMaxLatencySamples = 100000;

// The calling thread's CPU time in seconds.
double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

double seconds(Clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

bool contains(const std::vector<std::int32_t>& ids, std::int32_t token) {
  return std::find(ids.begin(), ids.end(), token) != ids.end();
}

}  // namespace

std::string_view finish_reason_name(FinishReason reason) {
  switch (reason) {
    case FinishReason::Stop:
      return "stop";
    case FinishReason::Length:
      return "length";
    case FinishReason::Cancelled:
      return "cancelled";
    case FinishReason::Error:
      return "error";
  }
  return "error";
}

// ---- RequestStream ----

void RequestStream::push(RequestEvent event) {
  bool was_empty;
  {
    std::lock_guard lock(mutex_);
    was_empty = head_ == events_.size();
    events_.push_back(std::move(event));
  }
  // Readers wait only while nothing is unread, so only the first unread event needs a wake-up.
  if (was_empty) ready_.notify_all();
}

void RequestStream::take(RequestEvent& out) {
  out = std::move(events_[head_++]);
  if (out.finish) finished_taken_ = true;
  if (head_ == events_.size()) {
    // All read: start over at the front, keeping the storage, so that a reader who keeps up
    // costs no allocation per event.
    events_.clear();
    head_ = 0;
  } else if (head_ >= 64 && 2 * head_ >= events_.size()) {
    // A reader that stays behind: drop the read events so that the storage stays within twice
    // the unread ones (moving at most as many events as were read since the last drop).
    events_.erase(events_.begin(), events_.begin() + static_cast<std::ptrdiff_t>(head_));
    head_ = 0;
  }
}

bool RequestStream::next(RequestEvent& out) {
  std::unique_lock lock(mutex_);
  if (finished_taken_) return false;
  ready_.wait(lock, [&] { return head_ < events_.size(); });
  take(out);
  return true;
}

RequestStream::Poll RequestStream::next_for(RequestEvent& out, std::chrono::milliseconds timeout) {
  std::unique_lock lock(mutex_);
  if (finished_taken_) return Poll::Ended;
  if (!ready_.wait_for(lock, timeout, [&] { return head_ < events_.size(); })) return Poll::Timeout;
  take(out);
  return Poll::Event;
}

void RequestStream::cancel() {
  cancel_requested_.store(true);
}
bool RequestStream::cancel_requested() const {
  return cancel_requested_.load();
}

// ---- Engine ----

std::unique_ptr<Engine> Engine::create(std::shared_ptr<const Artifact> artifact,
                                       std::unique_ptr<ModelBackend> backend,
                                       EngineOptions options) {
  std::unique_ptr<Engine> engine(new Engine(std::move(artifact), std::move(backend), options));
  engine->thread_ = std::thread([e = engine.get()] { e->loop(); });
  return engine;
}

namespace {
// The scheduler's limits: the artifact's, with the runtime limits set at start (each checked
// against the artifact's maximum).
SchedulerLimits limits_from(const Artifact& a, const RuntimeLimits& asked) {
  const ServingConfig& s = a.serving();
  const RuntimeLimits r = resolve_runtime_limits(a, asked);
  SchedulerLimits l{r.max_batch,     r.max_seq_len,    s.kv_page_size,
                    r.prefill_chunk, s.decode_buckets, s.prefill_buckets};
  l.max_seq_len_set_at_start = asked.max_seq_len > 0;
  l.mixed_budget = r.mixed_chunk;
  return l;
}
}  // namespace

Engine::Engine(std::shared_ptr<const Artifact> artifact, std::unique_ptr<ModelBackend> backend,
               EngineOptions options)
    : artifact_(std::move(artifact)),
      backend_(std::move(backend)),
      options_(options),
      limits_(limits_from(*artifact_, options_.limits)),
      pool_(backend_->num_kv_pages()),
      // A cached page's KV depends on the model, its weights and its graph: the manifest checksum.
      prefix_cache_(options_.prefix_cache
                        ? std::make_optional<PrefixCache>(pool_, limits_.page_size,
                                                          artifact_->checksum())
                        : std::nullopt),
      scheduler_(limits_, pool_, prefix_cache_ ? &*prefix_cache_ : nullptr) {
  backend_->set_step_timing(options_.record_step_timings);
  if (backend_->vocab_size() != artifact_->model().vocab_size)
    fail("engine: the " + backend_->name() + " backend was built for another artifact");
  if (options_.limits.kv_pages > 0 && pool_.num_pages() != options_.limits.kv_pages)
    fail("engine: the " + backend_->name() + " backend's KV pool has " +
         std::to_string(pool_.num_pages()) + " pages where the runtime limits ask for " +
         std::to_string(options_.limits.kv_pages) + " (make_backend takes the same limits)");
  stats_.backend = backend_->name();
  stats_.kv_page_size = limits_.page_size;
  stats_.kv_pages_total = pool_.num_pages();
  stats_.kv_pages_free = pool_.free_pages();
}

Engine::~Engine() {
  {
    std::lock_guard lock(mutex_);
    shutting_down_ = true;
    admitting_ = false;
  }
  wake_.notify_all();
  thread_.join();
}

RequestHandle Engine::submit(GenerationRequest request) {
  std::vector<GenerationRequest> one;
  one.push_back(std::move(request));
  return submit_all(std::move(one)).front();
}

std::vector<RequestHandle> Engine::submit_all(std::vector<GenerationRequest> requests) {
  const ModelConfig& model = artifact_->model();
  std::unique_lock lock(mutex_);
  std::vector<Live> lives;
  try {
    for (std::size_t r = 0; r < requests.size(); ++r) {
      GenerationRequest& request = requests[r];
      const std::string who = "request " + std::to_string(next_id_ + r);
      if (!admitting_) fail(who + ": the engine is shutting down and admits no new requests");
      for (std::size_t i = 0; i < request.prompt.size(); ++i) {
        const std::int32_t t = request.prompt[i];
        if (t < 0 || t >= model.vocab_size)
          fail(who + ": prompt token " + std::to_string(i) + " is " + std::to_string(t) +
               ", outside the vocabulary of " + std::to_string(model.vocab_size));
      }
      validate(request.sampling, model.vocab_size, who);
      if (request.cache_salt.size() > kMaxCacheSaltBytes)
        fail(who + ": cache_salt has " + std::to_string(request.cache_salt.size()) +
             " bytes, more than " + std::to_string(kMaxCacheSaltBytes));
      const int prompt_len = static_cast<int>(request.prompt.size());
      const int max_tokens =
          request.sampling.max_tokens.value_or(std::max(1, limits_.max_seq_len - prompt_len));
      Scheduler::check_fits(limits_, pool_.num_pages(), who, prompt_len, max_tokens);

      Live live;
      live.stream = std::make_shared<RequestStream>(next_id_ + r);
      live.seed = request.sampling.seed ? *request.sampling.seed : std::random_device{}();
      live.max_tokens = max_tokens;
      live.request = std::move(request);
      lives.push_back(std::move(live));
    }
  } catch (const Error&) {
    // Every id was taken, as one submit() after another would have: the failing one is named.
    next_id_ += requests.size();
    stats_.requests_rejected += requests.size();
    throw;
  }
  next_id_ += requests.size();
  std::vector<RequestHandle> handles;
  const Clock::time_point now = Clock::now();
  for (Live& live : lives) {
    live.submitted = now;
    handles.push_back(live.stream);
    submitted_.push_back(std::move(live));
    ++in_flight_;
    ++stats_.requests_submitted;
  }
  lock.unlock();
  wake_.notify_all();
  return handles;
}

void Engine::cancel(RequestId id) {
  {
    std::lock_guard lock(mutex_);
    cancelled_.push_back(id);
  }
  wake_.notify_all();
}

void Engine::stop_admitting() {
  std::lock_guard lock(mutex_);
  admitting_ = false;
}

void Engine::wait_idle() {
  std::unique_lock lock(mutex_);
  idle_.wait(lock, [&] { return in_flight_ == 0 && steps_on_device_ == 0; });
}

EngineStats Engine::stats() const {
  std::lock_guard lock(mutex_);
  return stats_;
}

LatencySamples Engine::take_latency_samples() {
  std::lock_guard lock(mutex_);
  return std::exchange(latency_, {});
}

std::vector<StepTiming> Engine::take_step_timings() {
  std::lock_guard lock(mutex_);
  return std::exchange(step_timings_, {});
}

void Engine::loop() {
  for (;;) {
    std::vector<Live> incoming;
    std::vector<RequestId> cancelled;
    bool shutting_down;
    {
      std::unique_lock lock(mutex_);
      wake_.wait(lock, [&] {
        return shutting_down_ || !submitted_.empty() || !cancelled_.empty() || !live_.empty() ||
               num_launched_ > 0;
      });
      incoming.swap(submitted_);
      cancelled.swap(cancelled_);
      shutting_down = shutting_down_;
    }

    for (Live& incoming_live : incoming) {
      const RequestId id = incoming_live.stream->id();
      Live& l = live_.emplace(id, std::move(incoming_live)).first->second;
      try {
        // submit() made the same checks, so this does not throw in practice.
        l.slot = scheduler_.add(id, l.request.prompt, l.max_tokens, l.request.cache_salt);
        if (static_cast<std::size_t>(l.slot) >= live_by_slot_.size())
          live_by_slot_.resize(static_cast<std::size_t>(l.slot) + 1, nullptr);
        live_by_slot_[static_cast<std::size_t>(l.slot)] = &l;
      } catch (const Error& e) {
        RequestEvent event;
        event.error = e.what();
        finish(id, FinishReason::Error, std::move(event));
      }
    }
    for (RequestId id : cancelled)
      if (auto it = live_.find(id); it != live_.end()) it->second.stream->cancel();
    std::vector<RequestId> ending;
    for (const auto& [id, l] : live_)
      if (shutting_down || l.stream->cancel_requested()) ending.push_back(id);
    // A request of a step in flight may end here: collecting the step skips it, and its pages are
    // reused only by steps launched later, which the device runs after that one.
    for (RequestId id : ending) finish(id, FinishReason::Cancelled);

    if (!live_.empty() || num_launched_ > 0) {
      if (num_launched_ == 0) launch_step(false);
      // The step in flight (launched just now, or overlapped by the previous iteration) may feed
      // the next one.
      if (num_launched_ == 1 && !live_.empty() && can_overlap(launched_[oldest_])) {
        append_placeholders(launched_[oldest_]);
        launch_step(true);
      }
      // The device runs the step: hand the previous step's events over meanwhile.
      deliver();
      if (num_launched_ > 0) complete_step();
      if (options_.check_invariants) scheduler_.check_invariant();
    }
    // Events of the last step wait for the next launch while requests remain, so that their
    // delivery overlaps the device; with nothing left to launch they go now.
    if ((live_.empty() && num_launched_ == 0) || shutting_down) deliver();
    if (shutting_down && num_launched_ == 0) return;
  }
}

bool Engine::can_overlap(const Launched& in_flight) const {
  if (!options_.overlap_steps || !backend_->feeds_sampled_tokens() || in_flight.want_logits ||
      in_flight.committed)
    return false;
  return std::all_of(in_flight.device_picks.begin(), in_flight.device_picks.end(),
                     [](std::uint8_t g) { return g != 0; });
}

void Engine::append_placeholders(Launched& in_flight) {
  scheduler_.commit(in_flight.step);
  in_flight.committed = true;
  std::int32_t row = 0;
  for (const ScheduledSequence& seq : in_flight.step.sequences) {
    if (!seq.samples) continue;
    const std::int32_t r = row++;
    Live* live = live_of(seq);
    if (!live) continue;  // cancelled while in flight
    Live& l = *live;
    // The request's last token: it ends at this step with Length, so it has nothing to schedule.
    if (static_cast<int>(l.generated.size()) + 1 >= l.max_tokens) continue;
    l.pending_position = seq.first_position + static_cast<int>(seq.tokens.size());
    scheduler_.append_token(seq.request, -(r + 1));
  }
}

void Engine::launch_step(bool overlapped) {
  // Read outside the wall-clock interval, so that host_seconds does not include the clock's call.
  const double cpu_started = options_.record_step_timings ? thread_cpu_seconds() : 0;
  const Clock::time_point started = Clock::now();
  Launched& next = launched_[(oldest_ + num_launched_) % 2];
  scheduler_.schedule(next.step);
  if (next.step.empty()) return;
  next.device_picks.clear();
  next.device_sampling.clear();
  next.want_logits = false;
  next.committed = false;
  next.overlapped = overlapped;
  next.started = started;
  const bool on_device = backend_->samples_on_device(), draws = backend_->draws_on_device();
  for (const ScheduledSequence& seq : next.step.sequences) {
    // Every sequence just scheduled belongs to a live request.
    Live& l = *live_by_slot_[static_cast<std::size_t>(seq.slot)];
    if (!l.scheduled) {
      l.scheduled = true;
      l.first_scheduled = started;
    }
    if (!seq.samples) continue;
    const SamplingParams& p = l.request.sampling;
    // Tokens generated by the time this row is sampled, a placeholder's included.
    const int generated = static_cast<int>(l.generated.size()) + (l.pending_position >= 0 ? 1 : 0);
    // What the device's pick leaves out: penalties, the min_tokens mask, logprobs and prompt
    // logits all need the logits on the host; so do draws where the backend only picks greedy,
    // and top_p with min_p (engine.hpp).
    const bool drawn = p.temperature > 0.0f;
    const bool on_device_row =
        on_device && (!drawn || (draws && !(p.top_p < 1.0f && p.min_p > 0.0f))) &&
        p.repetition_penalty == 1.0f && p.presence_penalty == 0.0f && p.frequency_penalty == 0.0f &&
        p.logprobs == 0 && !l.request.token_logprobs && generated >= p.min_tokens &&
        !(l.request.return_prompt_logits && generated == 0);
    next.device_picks.push_back(on_device_row ? 1 : 0);
    next.device_sampling.push_back({p.temperature, p.top_p, p.min_p, p.top_k, l.seed});
    next.want_logits = next.want_logits || !on_device_row;
  }
  try {
    backend_->launch(next.step, next.device_picks, next.device_sampling, next.want_logits);
  } catch (const std::exception& e) {
    fail_step(next.step, e.what());
    return;
  }
  next.host_seconds = seconds(Clock::now() - started);
  if (options_.record_step_timings) next.host_cpu_seconds = thread_cpu_seconds() - cpu_started;
  ++num_launched_;
}

void Engine::fail_step(const Step& step, const std::string& what) {
  for (const ScheduledSequence& seq : step.sequences) {
    RequestEvent event;
    event.error = "the " + backend_->name() + " engine failed: " + what;
    finish(seq.request, FinishReason::Error, std::move(event));
  }
}

void Engine::complete_step() {
  Launched& done = launched_[oldest_];
  oldest_ = (oldest_ + 1) % 2;
  --num_launched_;
  const Step& step = done.step;
  try {
    backend_->wait(output_);
  } catch (const std::exception& e) {
    fail_step(step, e.what());
    return;
  }
  if (!done.committed) scheduler_.commit(step);
  scheduler_.cache_prompt_pages(step);
  ++undelivered_steps_;
  if (options_.record_step_timings) {
    StepTiming t;
    t.sequences = static_cast<int>(step.sequences.size());
    t.tokens = step.num_tokens;
    t.decode = step.num_tokens == t.sequences;
    t.started = done.started;
    // The bench's idle-gap events (LaunchCallTimes::timing_seconds) are not a step's host work.
    t.host_seconds = done.host_seconds - std::max(0.0, output_.launch_calls.timing_seconds);
    t.host_cpu_seconds = done.host_cpu_seconds - std::max(0.0, output_.launch_calls.timing_seconds);
    t.idle_gap_seconds = output_.idle_gap_seconds;
    t.launch_call_seconds = output_.launch_call_seconds;
    t.launch_calls = output_.launch_calls;
    t.overlapped = done.overlapped;
    std::lock_guard lock(mutex_);
    step_timings_.push_back(t);
  }

  const Clock::time_point now = Clock::now();
  const auto vocab = static_cast<std::size_t>(artifact_->model().vocab_size);
  const std::vector<std::int32_t>& eos = artifact_->model().eos_token_ids;
  std::size_t row = 0;
  for (const ScheduledSequence& seq : step.sequences) {
    if (!seq.samples) continue;
    const std::size_t r = row++;
    Live* live = live_of(seq);
    // Ended while the step was in flight: cancelled, or stopped at the step before (then this
    // row computed a token nobody wants).
    if (!live) continue;
    Live& l = *live;
    const SamplingParams& params = l.request.sampling;
    RequestEvent event;
    if (done.device_picks[r]) {
      event.token = SampledToken{output_.device_tokens.at(r), 0.0f, {}};
    } else {
      const std::span<const float> logits(output_.logits.data() + r * vocab, vocab);
      const SequenceState& state = *scheduler_.find(seq.request);
      SamplingContext context;
      context.params = &params;
      context.prompt = std::span<const std::int32_t>(state.tokens)
                           .first(static_cast<std::size_t>(state.prompt_len));
      context.generated = l.generated;
      context.eos_token_ids = eos;
      context.seed = l.seed;
      event.token = sampler_.sample(logits, context);
      if (l.generated.empty() && l.request.return_prompt_logits)
        event.logits.assign(logits.begin(), logits.end());
    }
    const std::int32_t token = event.token->token;
    if (l.generated.empty()) {
      l.first_token = now;
      event.usage.cached_tokens = scheduler_.find(seq.request)->cached_tokens;
    }
    l.generated.push_back(token);

    if (contains(params.stop_token_ids, token) || (!params.ignore_eos && contains(eos, token))) {
      event.stop_token = token;
      finish(seq.request, FinishReason::Stop, std::move(event));
    } else if (static_cast<int>(l.generated.size()) >= l.max_tokens) {
      finish(seq.request, FinishReason::Length, std::move(event));
    } else {
      if (l.pending_position >= 0)
        scheduler_.resolve_token(seq.request, std::exchange(l.pending_position, -1), token);
      else
        scheduler_.append_token(seq.request, token);
      deliveries_.push_back({l.stream, std::move(event)});
    }
  }
}

void Engine::finish(RequestId id, FinishReason reason, RequestEvent event) {
  auto it = live_.find(id);
  if (it == live_.end()) return;
  Live& l = it->second;
  const SequenceState* state = scheduler_.find(id);
  event.timings.preemptions = state ? state->preemptions : 0;
  event.usage.cached_tokens = state ? state->cached_tokens : 0;
  scheduler_.remove(id);
  if (l.slot >= 0) live_by_slot_[static_cast<std::size_t>(l.slot)] = nullptr;

  const Clock::time_point now = Clock::now();
  event.finish = reason;
  event.usage.prompt_tokens = static_cast<int>(l.request.prompt.size());
  event.usage.completion_tokens = static_cast<int>(l.generated.size());
  event.timings.queue_seconds = l.scheduled ? seconds(l.first_scheduled - l.submitted) : 0;
  event.timings.first_token_seconds =
      l.generated.empty() ? 0 : seconds(l.first_token - l.submitted);
  event.timings.total_seconds = seconds(now - l.submitted);
  deliveries_.push_back({std::move(l.stream), std::move(event)});
  live_.erase(it);
}

void Engine::deliver() {
  std::size_t finished = 0;
  {
    // Stats first, then the events, so that a client who has seen its finish event also sees its
    // pages free in stats().
    std::lock_guard lock(mutex_);
    stats_.steps += std::exchange(undelivered_steps_, 0);
    for (const Delivery& d : deliveries_) {
      if (!d.event.finish) continue;
      ++finished;
      const RequestUsage& usage = d.event.usage;
      const RequestTimings& timings = d.event.timings;
      ++stats_.requests_finished;
      stats_.prompt_tokens += static_cast<std::uint64_t>(usage.prompt_tokens);
      stats_.generated_tokens += static_cast<std::uint64_t>(usage.completion_tokens);
      if (usage.completion_tokens > 0 && latency_.time_to_first_token.size() < kMaxLatencySamples) {
        latency_.time_to_first_token.push_back(timings.first_token_seconds);
        latency_.queue_time.push_back(timings.queue_seconds);
      }
      if (usage.completion_tokens > 1 &&
          latency_.time_per_output_token.size() < kMaxLatencySamples)
        latency_.time_per_output_token.push_back(
            (timings.total_seconds - timings.first_token_seconds) / (usage.completion_tokens - 1));
    }
    stats_.waiting = scheduler_.num_waiting() + static_cast<int>(submitted_.size());
    stats_.running = scheduler_.num_running();
    stats_.kv_pages_used = pool_.used_pages();
    stats_.kv_pages_free = pool_.free_pages();
    stats_.kv_pages_cached = pool_.evictable_pages();
    stats_.preemptions = scheduler_.num_preemptions();
    stats_.prefix_cache_queries = scheduler_.prefix_cache_queries();
    stats_.prefix_cache_hits = scheduler_.prefix_cache_hits();
    for (Delivery& d : deliveries_) d.stream->push(std::move(d.event));
    in_flight_ -= finished;
    steps_on_device_ = num_launched_;
  }
  deliveries_.clear();
  if (finished > 0 || num_launched_ == 0) idle_.notify_all();
}

}  // namespace telos::exec
