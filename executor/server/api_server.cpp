#include "executor/server/api_server.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <random>
#include <set>

#include "executor/server/api_error.hpp"
#include "executor/server/choice_text.hpp"
#include "executor/server/host_allowlist.hpp"
#include "executor/server/http_server.hpp"
#include "executor/server/openai_request.hpp"
#include "executor/server/server_metrics.hpp"
#include "support/error.hpp"

namespace telos::exec {
namespace {

using json = nlohmann::ordered_json;

// Invalid UTF-8 can only come from token bytes; it is replaced rather than refused.
std::string dump(const json& j) {
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string random_id(const char* prefix) {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  char buf[40];
  std::snprintf(buf, sizeof buf, "%s%016llx%08llx", prefix, static_cast<unsigned long long>(rng()),
                static_cast<unsigned long long>(rng() & 0xffffffffu));
  return buf;
}

std::int64_t unix_seconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// How often a request's handler looks whether its client is still there.
constexpr auto kClientCheck = std::chrono::milliseconds(100);
// Workers beyond one per generation slot: the requests refused with 429 need one for a moment.
constexpr int kSpareWorkers = 8;

HttpResponse json_response(int status, const json& body) {
  return {status, "application/json", dump(body), {}};
}

HttpResponse error_response(const ApiError& e) {
  return json_response(e.status, error_body(e));
}

// The OpenAI-style error for a status the HTTP layer or the routing answers by itself.
ApiError http_error(int status, const std::string& message) {
  static constexpr std::pair<int, const char*> kCodes[] = {
      {403, "host_not_allowed"},
      {404, "not_found"},
      {408, "request_timeout"},
      {413, "request_too_large"},
      {415, "unsupported_media_type"},
      {417, "expectation_failed"},
      {431, "request_header_fields_too_large"},
      {500, "internal_error"},
      {501, "not_implemented"},
      {503, "service_unavailable"},
      {505, "http_version_not_supported"},
  };
  const char* code = "invalid_request";
  for (const auto& [s, c] : kCodes)
    if (s == status) code = c;
  return ApiError(status, status >= 500 ? "server_error" : "invalid_request_error", message, "",
                  code);
}

std::string lower_case(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(), [](char c) {
    return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c;
  });
  return out;
}

// "application/json", with parameters (charset) or not, in any case.
bool is_json_media_type(std::string_view value) {
  std::string_view type = value.substr(0, value.find(';'));
  while (!type.empty() && (type.back() == ' ' || type.back() == '\t')) type.remove_suffix(1);
  return lower_case(type) == "application/json";
}

// Compares the whole key whatever the first difference, so that timing tells nothing about it.
bool same_secret(std::string_view a, std::string_view b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (std::size_t i = 0; i < a.size(); ++i)
    diff |= static_cast<unsigned char>(a[i] ^ (i < b.size() ? b[i] : 0));
  return diff == 0;
}

// The routes: which methods each path takes, and whether its answer is made on the event loop
// (cheap, never waits) or on a worker (generation).
struct Route {
  std::string_view path;
  std::string_view methods;  // the Allow header's value
  bool on_worker;
};
constexpr Route kRoutes[] = {
    {"/v1/completions", "POST", true},  {"/v1/chat/completions", "POST", true},
    {"/v1/models", "GET, HEAD", false}, {"/health", "GET, HEAD", false},
    {"/metrics", "GET, HEAD", false},
};

const Route* find_route(std::string_view path) {
  for (const Route& r : kRoutes)
    if (r.path == path) return &r;
  return nullptr;
}

bool route_takes(const Route& r, std::string_view method) {
  std::string_view methods = r.methods;
  while (!methods.empty()) {
    const std::size_t comma = methods.find(", ");
    if (methods.substr(0, comma) == method) return true;
    methods = comma == std::string_view::npos ? std::string_view() : methods.substr(comma + 2);
  }
  return false;
}

// The text a token stands for in logprobs: its bytes, with an incomplete UTF-8 character
// replaced; "token_id:N" without a tokenizer (vLLM's spelling).
std::string token_text(const Tokenizer* tokenizer, std::int32_t id) {
  if (!tokenizer) return "token_id:" + std::to_string(id);
  const std::string_view bytes = tokenizer->token_bytes(id);
  std::string out;
  const std::size_t used = append_complete_utf8(bytes, out);
  if (used < bytes.size()) out += "\xEF\xBF\xBD";
  return out;
}

// Characters (code points) in UTF-8 text: what OpenAI's text_offset counts.
std::size_t code_points(std::string_view text) {
  return static_cast<std::size_t>(std::count_if(text.begin(), text.end(), [](char c) {
    return (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  }));
}

json token_bytes(const Tokenizer* tokenizer, std::int32_t id) {
  json bytes = json::array();
  if (tokenizer)
    for (unsigned char c : tokenizer->token_bytes(id)) bytes.push_back(static_cast<int>(c));
  return bytes;
}

// One choice of a request: an engine request and what it produced so far.
struct Choice {
  Choice(int index, std::size_t prompt, ChoiceText text)
      : index(index), prompt(prompt), text(std::move(text)) {}
  int index;
  std::size_t prompt;
  ChoiceText text;
  RequestHandle handle;
  std::vector<std::int32_t> tokens;
  std::vector<SampledToken> sampled;  // with logprobs only
  std::string output;                 // non-streaming: the text so far
  std::size_t text_offset = 0;  // completion logprobs: the character where the next token starts
  std::optional<std::string> finish_reason;
  std::optional<ApiError> error;
  bool done = false;
  int cached_tokens = 0;  // prompt tokens its engine request took from the prefix cache
};

// What one engine event changed in a choice.
struct Delta {
  std::string text;
  std::vector<std::int32_t> tokens;
  std::vector<SampledToken> sampled;
  bool finished = false;
};

struct PreparedPrompt {
  std::vector<std::int32_t> ids;
  std::string echo;  // the prompt's text, for echo
};

}  // namespace

struct CompletionJob;

struct ApiServer::State : HttpService {
  State(ServedModel model, ServerOptions options);

  std::optional<HttpResponse> check_head(const HttpRequest& head) override;
  std::optional<HttpResponse> answer_now(const HttpRequest& request) override;
  void serve(const HttpRequest& request, HttpExchange& exchange) override;
  HttpResponse error(int status, const std::string& message) override;
  void responded(int status) override { metrics.count_response(status); }

  void handle_generation(const HttpRequest& req, HttpExchange& exchange, ApiRequest::Kind kind);
  std::vector<PreparedPrompt> prepare_prompts(const ApiRequest& r);
  int max_tokens_for(const ApiRequest& r, int prompt_len);
  void cancel_all();

  ServedModel model;
  ServerOptions options;
  HostAllowlist hosts;
  ServerMetrics metrics;
  int max_prompt_tokens = 0;
  std::atomic<bool> shutting_down{false};
  std::unique_ptr<HttpServer> http;

  std::mutex mutex;
  std::condition_variable idle;
  int in_flight = 0;              // generation requests being served
  std::set<CompletionJob*> jobs;  // their engine requests, for shutdown
};

// The HTTP request's hold on a concurrency slot; taken before parsing, so a flood of requests is
// refused cheaply.
class ConcurrencySlot {
 public:
  explicit ConcurrencySlot(ApiServer::State& s) : s_(s) {
    std::lock_guard lock(s_.mutex);
    if (s_.shutting_down)
      throw ApiError(503, "server_error", "the server is shutting down and admits no new requests",
                     "", "service_unavailable");
    if (s_.in_flight >= s_.options.max_concurrent_requests)
      throw ApiError(429, "rate_limit_error",
                     "too many concurrent requests: this server serves at most " +
                         std::to_string(s_.options.max_concurrent_requests) +
                         " at once (--max-concurrent-requests); retry later",
                     "", "too_many_requests");
    ++s_.in_flight;
  }
  ~ConcurrencySlot() {
    {
      std::lock_guard lock(s_.mutex);
      --s_.in_flight;
    }
    s_.idle.notify_all();
  }
  ConcurrencySlot(const ConcurrencySlot&) = delete;
  ConcurrencySlot& operator=(const ConcurrencySlot&) = delete;

 private:
  ApiServer::State& s_;
};

// One completion or chat request in flight: its choices and how to write them out.
struct CompletionJob {
  CompletionJob(ApiServer::State& server, std::unique_ptr<ConcurrencySlot> slot, ApiRequest request,
                std::vector<PreparedPrompt> prompts)
      : server(server),
        slot(std::move(slot)),
        request(std::move(request)),
        prompts(std::move(prompts)),
        chat(this->request.kind == ApiRequest::Kind::Chat),
        id(random_id(chat ? "chatcmpl-" : "cmpl-")),
        created(unix_seconds()) {
    std::lock_guard lock(server.mutex);
    server.jobs.insert(this);
  }
  ~CompletionJob() {
    cancel();
    std::lock_guard lock(server.mutex);
    server.jobs.erase(this);
  }

  void submit();
  // From any thread: the HTTP thread when its client leaves, shutdown() on another.
  void cancel() {
    std::lock_guard lock(choices_mutex);
    for (Choice& c : choices)
      if (c.handle) c.handle->cancel();
  }
  Delta apply(Choice& c, RequestEvent& e);
  // Waits for every choice to end; false as soon as the client is seen gone (the caller's
  // destruction of the job then cancels what still runs).
  bool collect(const HttpExchange& client);
  json response() const;
  bool stream(HttpExchange& client);

  bool show_token_ids() const { return request.return_token_ids || !server.model.tokenizer; }
  json usage() const;
  json logprobs(const std::vector<SampledToken>& sampled, std::size_t& text_offset) const;
  json chunk(Choice& c, const Delta& d, bool first) const;

  ApiServer::State& server;
  std::unique_ptr<ConcurrencySlot> slot;
  ApiRequest request;
  std::vector<PreparedPrompt> prompts;
  bool chat;
  std::string id;
  std::int64_t created;
  std::mutex choices_mutex;     // guards the vector and the handles while submit() fills them
  std::vector<Choice> choices;  // after submit(), only the worker touches the rest
};

void CompletionJob::submit() {
  const Tokenizer* tokenizer = server.model.tokenizer;
  for (std::size_t p = 0; p < prompts.size(); ++p) {
    const int max_tokens = server.max_tokens_for(request, static_cast<int>(prompts[p].ids.size()));
    for (int j = 0; j < request.n; ++j) {
      GenerationRequest g;
      g.prompt = prompts[p].ids;
      g.sampling = request.sampling;
      g.sampling.max_tokens = max_tokens;
      g.token_logprobs = request.logprobs;
      g.cache_salt = request.cache_salt;
      // n samples of a seeded request differ from each other but not from run to run.
      if (g.sampling.seed) *g.sampling.seed += static_cast<std::uint64_t>(j);
      RequestHandle handle;
      try {
        handle = server.model.engine->submit(std::move(g));
      } catch (const Error& e) {
        if (server.shutting_down)
          throw ApiError(503, "server_error",
                         "the server is shutting down and admits no new requests", "",
                         "service_unavailable");
        throw bad_request("", std::string("the engine refused the request: ") + e.what());
      }
      std::lock_guard lock(choices_mutex);
      Choice& c =
          choices.emplace_back(static_cast<int>(choices.size()), p,
                               ChoiceText(tokenizer, request.skip_special_tokens, request.stop));
      c.text_offset = request.echo ? code_points(prompts[p].echo) : 0;
      c.handle = std::move(handle);
    }
  }
}

Delta CompletionJob::apply(Choice& c, RequestEvent& e) {
  Delta d;
  if (c.done) return d;
  // The first token's event says it, and the finish event again: a choice a stop string ends
  // reads no further than the token that ended it.
  if ((e.token && c.tokens.empty()) || e.finish) c.cached_tokens = e.usage.cached_tokens;
  if (e.token) {
    c.tokens.push_back(e.token->token);
    d.tokens.push_back(e.token->token);
    if (request.logprobs) d.sampled.push_back(*e.token);
    d.text = c.text.push(e.token->token);
    if (c.text.stopped()) {
      // A stop string ended the choice; the engine request still runs until it sees the cancel.
      c.handle->cancel();
      c.finish_reason = "stop";
      c.done = d.finished = true;
      return d;
    }
  }
  if (e.finish) {
    c.done = d.finished = true;
    switch (*e.finish) {
      case FinishReason::Stop:
        c.finish_reason = "stop";
        break;
      case FinishReason::Length:
        c.finish_reason = "length";
        break;
      case FinishReason::Cancelled:
        c.error =
            ApiError(503, "server_error", "the request was cancelled: the server is shutting down",
                     "", "service_unavailable");
        break;
      case FinishReason::Error:
        c.error =
            ApiError(500, "server_error", "generation failed: " + e.error, "", "engine_error");
        break;
    }
    d.text += c.text.finish();
  }
  return d;
}

// Prompt tokens count each prompt once, whatever n is; so do cached tokens, from the prompt's first
// choice (choices are numbered prompt by prompt, n each).
json CompletionJob::usage() const {
  int prompt_tokens = 0, completion_tokens = 0, cached_tokens = 0;
  for (const PreparedPrompt& p : prompts) prompt_tokens += static_cast<int>(p.ids.size());
  for (const Choice& c : choices) {
    completion_tokens += static_cast<int>(c.tokens.size());
    if (c.index % request.n == 0) cached_tokens += c.cached_tokens;
  }
  return {{"prompt_tokens", prompt_tokens},
          {"completion_tokens", completion_tokens},
          {"total_tokens", prompt_tokens + completion_tokens},
          {"prompt_tokens_details", {{"cached_tokens", cached_tokens}}}};
}

json CompletionJob::logprobs(const std::vector<SampledToken>& sampled,
                             std::size_t& text_offset) const {
  const Tokenizer* tokenizer = server.model.tokenizer;
  if (chat) {
    json content = json::array();
    for (const SampledToken& t : sampled) {
      json top = json::array();
      for (const TokenLogprob& alt : t.top)
        top.push_back({{"token", token_text(tokenizer, alt.token)},
                       {"logprob", alt.logprob},
                       {"bytes", token_bytes(tokenizer, alt.token)}});
      content.push_back({{"token", token_text(tokenizer, t.token)},
                         {"logprob", t.logprob},
                         {"bytes", token_bytes(tokenizer, t.token)},
                         {"top_logprobs", top}});
    }
    return {{"content", content}, {"refusal", nullptr}};
  }
  json tokens = json::array(), token_logprobs = json::array(), top_logprobs = json::array(),
       offsets = json::array();
  for (const SampledToken& t : sampled) {
    const std::string text = token_text(tokenizer, t.token);
    tokens.push_back(text);
    token_logprobs.push_back(t.logprob);
    json top = json::object();
    for (const TokenLogprob& alt : t.top) top[token_text(tokenizer, alt.token)] = alt.logprob;
    top_logprobs.push_back(top);
    offsets.push_back(text_offset);
    text_offset += code_points(text);
  }
  return {{"tokens", tokens},
          {"token_logprobs", token_logprobs},
          {"top_logprobs", top_logprobs},
          {"text_offset", offsets}};
}

bool CompletionJob::collect(const HttpExchange& client) {
  auto next_check = std::chrono::steady_clock::now() + kClientCheck;
  for (Choice& c : choices) {
    RequestEvent e;
    while (!c.done) {
      const RequestStream::Poll poll = c.handle->next_for(e, kClientCheck);
      if (poll == RequestStream::Poll::Ended) break;
      if (poll == RequestStream::Poll::Event) {
        Delta d = apply(c, e);
        c.output += d.text;
        for (SampledToken& t : d.sampled) c.sampled.push_back(std::move(t));
      }
      if (std::chrono::steady_clock::now() >= next_check) {
        if (client.peer_closed()) return false;
        next_check = std::chrono::steady_clock::now() + kClientCheck;
      }
    }
    if (c.error) throw *c.error;
  }
  return true;
}

json CompletionJob::response() const {
  json out_choices = json::array();
  for (const Choice& c : choices) {
    std::size_t offset = c.text_offset;
    json lp = request.logprobs ? logprobs(c.sampled, offset) : json();
    json choice = {{"index", c.index}};
    if (chat)
      choice["message"] = {{"role", "assistant"}, {"content", c.output}};
    else
      choice["text"] = (request.echo ? prompts[c.prompt].echo : std::string()) + c.output;
    choice["logprobs"] = lp;
    choice["finish_reason"] = *c.finish_reason;
    if (show_token_ids()) choice["token_ids"] = c.tokens;
    out_choices.push_back(std::move(choice));
  }
  return {{"id", id},
          {"object", chat ? "chat.completion" : "text_completion"},
          {"created", created},
          {"model", server.options.served_model_name},
          {"choices", out_choices},
          {"usage", usage()}};
}

json CompletionJob::chunk(Choice& c, const Delta& d, bool first) const {
  json choice = {{"index", c.index}};
  if (chat) {
    json delta = json::object();
    if (first) delta["role"] = "assistant";
    if (first || !d.text.empty()) delta["content"] = d.text;
    choice["delta"] = delta;
  } else {
    choice["text"] = (first && request.echo ? prompts[c.prompt].echo : std::string()) + d.text;
  }
  choice["logprobs"] =
      request.logprobs && !d.sampled.empty() ? logprobs(d.sampled, c.text_offset) : json();
  choice["finish_reason"] = d.finished && c.finish_reason ? json(*c.finish_reason) : json();
  if (show_token_ids()) choice["token_ids"] = d.tokens;
  json out = {{"id", id},
              {"object", chat ? "chat.completion.chunk" : "text_completion"},
              {"created", created},
              {"model", server.options.served_model_name},
              {"choices", json::array({choice})}};
  if (request.include_usage) out["usage"] = nullptr;
  return out;
}

// Writes the whole event stream; false when the client went away (the caller's destruction of
// the job then cancels what still runs).
bool CompletionJob::stream(HttpExchange& client) {
  auto send = [&](const std::string& data) { return client.stream("data: " + data + "\n\n"); };
  // Chat's first chunk carries the role; an echoed completion's first chunk carries the prompt.
  if (chat || request.echo)
    for (Choice& c : choices)
      if (!send(dump(chunk(c, Delta{}, true)))) return false;

  std::optional<ApiError> error;
  for (;;) {
    std::vector<Choice*> active;
    for (Choice& c : choices)
      if (!c.done) active.push_back(&c);
    if (active.empty()) break;
    bool progressed = false;
    for (std::size_t i = 0; i < active.size(); ++i) {
      Choice& c = *active[i];
      // Drain what is ready; the first active choice may wait a little, so an idle stream does
      // not spin, but short enough to notice a client that left or a second choice's tokens.
      const auto wait =
          std::chrono::milliseconds(i == 0 && !progressed ? (active.size() == 1 ? 100 : 5) : 0);
      RequestEvent e;
      while (!c.done && c.handle->next_for(e, progressed ? std::chrono::milliseconds(0) : wait) ==
                            RequestStream::Poll::Event) {
        progressed = true;
        Delta d = apply(c, e);
        if (c.error) {
          error = c.error;
          continue;
        }
        const bool worth_sending = !d.text.empty() || d.finished ||
                                   (request.logprobs && !d.sampled.empty()) || show_token_ids();
        if (worth_sending) {
          if (!send(dump(chunk(c, d, false)))) return false;
        }
      }
    }
    if (!progressed && client.peer_closed()) return false;
  }
  if (error) {
    if (!send(dump(error_body(*error)))) return false;
  } else if (request.include_usage) {
    json out = {{"id", id},
                {"object", chat ? "chat.completion.chunk" : "text_completion"},
                {"created", created},
                {"model", server.options.served_model_name},
                {"choices", json::array()},
                {"usage", usage()}};
    if (!send(dump(out))) return false;
  }
  return send("[DONE]") && client.end_stream();
}

// ---- State ----

int ApiServer::State::max_tokens_for(const ApiRequest& r, int prompt_len) {
  const int max_seq_len = model.engine->max_seq_len();
  const int room = max_seq_len - prompt_len;
  const char* prompt_field = r.kind == ApiRequest::Kind::Chat ? "messages" : "prompt";
  if (room < 1)
    throw bad_request(prompt_field,
                      "the prompt has " + std::to_string(prompt_len) +
                          " tokens, which leaves no room to generate within this model's "
                          "maximum context length of " +
                          std::to_string(max_seq_len) + " tokens");
  if (r.sampling.min_tokens > room)
    throw bad_request("min_tokens", "this model's maximum context length is " +
                                        std::to_string(max_seq_len) +
                                        " tokens and the prompt has " +
                                        std::to_string(prompt_len) + ", so at most " +
                                        std::to_string(room) + " tokens can be generated; got " +
                                        std::to_string(r.sampling.min_tokens));
  if (r.sampling.max_tokens) {
    if (*r.sampling.max_tokens > room)
      throw bad_request("max_tokens", "this model's maximum context length is " +
                                          std::to_string(max_seq_len) +
                                          " tokens and the prompt has " +
                                          std::to_string(prompt_len) + ", so at most " +
                                          std::to_string(room) + " tokens can be generated; got " +
                                          std::to_string(*r.sampling.max_tokens));
    return *r.sampling.max_tokens;
  }
  // OpenAI's defaults: 16 for completions, as many as fit for chat.
  const int wanted = r.kind == ApiRequest::Kind::Chat ? room : std::min(16, room);
  return std::max(wanted, r.sampling.min_tokens);
}

std::vector<PreparedPrompt> ApiServer::State::prepare_prompts(const ApiRequest& r) {
  const Tokenizer* tokenizer = model.tokenizer;
  std::vector<PreparedPrompt> out;
  const bool chat = r.kind == ApiRequest::Kind::Chat;
  const char* field = chat ? "messages" : "prompt";
  if (chat) {
    if (!tokenizer || !model.chat_template)
      throw bad_request("messages",
                        "chat needs the model's tokenizer and chat template, and this artifact has "
                        "none (the checkpoint had no tokenizer.json / tokenizer_config.json with a "
                        "chat_template); use /v1/completions with token ids");
    try {
      out.push_back({model.chat_template->encode(*tokenizer, r.messages, r.add_generation_prompt,
                                                 r.template_kwargs, r.split_special_tokens),
                     ""});
    } catch (const Error& e) {
      throw bad_request("messages",
                        std::string("the chat template failed on these messages: ") + e.what());
    }
  } else {
    for (const PromptInput& p : r.prompts) {
      if (p.text) {
        if (!tokenizer)
          throw bad_request("prompt",
                            "text prompts need the model's tokenizer, and this artifact has "
                            "none (the checkpoint had no tokenizer.json); send token ids");
        const auto specials =
            r.split_special_tokens ? Tokenizer::Specials::none : Tokenizer::Specials::parse;
        out.push_back({tokenizer->encode(*p.text, true, specials), *p.text});
      } else {
        out.push_back({p.ids, tokenizer ? tokenizer->decode(p.ids, false) : std::string()});
      }
    }
  }
  if (!r.stop.empty() && !tokenizer)
    throw bad_request("stop",
                      "stop strings need the model's tokenizer, and this artifact has none; "
                      "use stop_token_ids");
  for (const PreparedPrompt& p : out) {
    if (p.ids.empty()) throw bad_request(field, "the prompt is empty (no tokens)");
    if (static_cast<int>(p.ids.size()) > max_prompt_tokens)
      throw bad_request(field, "the prompt has " + std::to_string(p.ids.size()) +
                                   " tokens, more than this server's limit of " +
                                   std::to_string(max_prompt_tokens) + " (--max-prompt-tokens)");
  }
  return out;
}

void ApiServer::State::handle_generation(const HttpRequest& req, HttpExchange& exchange,
                                         ApiRequest::Kind kind) {
  auto slot = std::make_unique<ConcurrencySlot>(*this);
  const int vocab_size = model.engine->artifact().model().vocab_size;
  const json body = parse_request_json(req.body);
  ApiRequest r = kind == ApiRequest::Kind::Chat
                     ? parse_chat_request(body, options.served_model_name, vocab_size)
                     : parse_completion_request(body, options.served_model_name, vocab_size);
  if (static_cast<long>(r.prompts.size()) * r.n > kMaxChoices)
    throw bad_request("n", "prompts times n is " +
                               std::to_string(r.prompts.size() * static_cast<std::size_t>(r.n)) +
                               ", more than " + std::to_string(kMaxChoices) +
                               " choices per request");
  std::vector<PreparedPrompt> prompts = prepare_prompts(r);
  // Destroying the job cancels whatever still runs: a client that left, a failed write.
  CompletionJob job(*this, std::move(slot), std::move(r), std::move(prompts));
  job.submit();
  if (!job.request.stream) {
    if (job.collect(exchange)) exchange.respond(json_response(200, job.response()));
    return;
  }
  if (exchange.begin_stream(200, "text/event-stream", {{"Cache-Control", "no-cache"}}))
    job.stream(exchange);
}

void ApiServer::State::cancel_all() {
  std::lock_guard lock(mutex);
  for (CompletionJob* job : jobs) job->cancel();
}

// Everything the head alone decides, in this order: the Host (DNS rebinding), the key, the route
// and method, the body's media type (a browser's form or text/plain "simple request" cannot send
// application/json across origins without a preflight this server never grants).
std::optional<HttpResponse> ApiServer::State::check_head(const HttpRequest& head) {
  if (std::optional<std::string_view> host = head.header("host"); host && !hosts.allows(*host))
    return error_response(http_error(
        403, "the Host header '" + std::string(*host) +
                 "' is not a name this server answers to (a defence against DNS rebinding); "
                 "start it with --allowed-host NAME to allow a name"));
  if (!options.api_key.empty() && head.path.rfind("/v1/", 0) == 0) {
    const std::string_view sent = head.header("authorization").value_or("");
    if (!same_secret(sent, "Bearer " + options.api_key))
      return error_response(
          ApiError(401, "invalid_request_error",
                   "missing or incorrect API key: send the header 'Authorization: Bearer KEY'", "",
                   "invalid_api_key"));
  }
  const Route* route = find_route(head.path);
  if (!route)
    return error_response(http_error(404, "no such endpoint: " + head.method + " " + head.path));
  if (!route_takes(*route, head.method)) {
    HttpResponse r = error_response(
        ApiError(405, "invalid_request_error",
                 head.path + " takes " + std::string(route->methods) + ", not " + head.method, "",
                 "method_not_allowed"));
    r.headers = {{"Allow", std::string(route->methods)}};
    return r;
  }
  if (head.method == "POST" && !is_json_media_type(head.header("content-type").value_or("")))
    return error_response(http_error(
        415, "the request body must be JSON, sent with 'Content-Type: application/json'"));
  return std::nullopt;
}

std::optional<HttpResponse> ApiServer::State::answer_now(const HttpRequest& request) {
  if (find_route(request.path)->on_worker) return std::nullopt;
  if (request.path == "/health") {
    if (shutting_down)
      return error_response(
          ApiError(503, "server_error", "the server is shutting down", "", "service_unavailable"));
    return json_response(200, {{"status", "ok"}});
  }
  if (request.path == "/metrics") {
    int running;
    {
      std::lock_guard lock(mutex);
      running = in_flight;
    }
    return HttpResponse{200,
                        "text/plain; version=0.0.4",
                        metrics.render(*model.engine, running, http->open_connections()),
                        {}};
  }
  const Artifact& a = model.engine->artifact();
  json card = {{"id", options.served_model_name}, {"object", "model"},
               {"created", unix_seconds()},       {"owned_by", "telos"},
               {"root", a.model().name},          {"max_model_len", model.engine->max_seq_len()}};
  return json_response(200, {{"object", "list"}, {"data", json::array({card})}});
}

// Errors thrown by the handler become JSON; anything unexpected is a 500 and the server goes on.
// Once a stream has begun, its errors travel inside it.
void ApiServer::State::serve(const HttpRequest& request, HttpExchange& exchange) {
  const ApiRequest::Kind kind = request.path == "/v1/chat/completions"
                                    ? ApiRequest::Kind::Chat
                                    : ApiRequest::Kind::Completion;
  try {
    handle_generation(request, exchange, kind);
  } catch (const ApiError& e) {
    if (exchange.status() == 0) exchange.respond(error_response(e));
  } catch (const std::exception& e) {
    if (exchange.status() == 0)
      exchange.respond(error_response(http_error(500, std::string("internal error: ") + e.what())));
  }
}

HttpResponse ApiServer::State::error(int status, const std::string& message) {
  return error_response(http_error(status, message));
}

ApiServer::State::State(ServedModel served, ServerOptions opts)
    : model(served), options(std::move(opts)), hosts(options.allowed_hosts) {
  const int max_seq_len = model.engine->max_seq_len();
  max_prompt_tokens = options.max_prompt_tokens > 0
                          ? std::min(options.max_prompt_tokens, max_seq_len - 1)
                          : max_seq_len - 1;
  if (options.served_model_name.empty())
    options.served_model_name = model.engine->artifact().model().name;
  if (options.max_concurrent_requests < 1) fail("--max-concurrent-requests: must be at least 1");
  // A worker per generation slot, so a long stream never waits for a worker; health, metrics and
  // refusals are answered on the event loop and need none.
  http = std::make_unique<HttpServer>(*this, options.http,
                                      options.max_concurrent_requests + kSpareWorkers);
}

// ---- ApiServer ----

ApiServer::ApiServer(ServedModel model, ServerOptions options)
    : state_(std::make_unique<State>(model, std::move(options))) {}

ApiServer::~ApiServer() = default;

int ApiServer::bind() {
  return state_->http->bind(state_->options.host, state_->options.port);
}

int ApiServer::max_connections() const {
  return state_->http->max_connections();
}

void ApiServer::serve() {
  state_->http->serve();
}

void ApiServer::shutdown() {
  State& s = *state_;
  if (s.shutting_down.exchange(true)) return;
  s.model.engine->stop_admitting();
  s.cancel_all();
  {
    // Handlers end quickly once their requests are cancelled; a client that stopped reading
    // cannot hold the shutdown for longer than this.
    std::unique_lock lock(s.mutex);
    s.idle.wait_for(lock, std::chrono::seconds(10), [&] { return s.in_flight == 0; });
  }
  s.http->stop();
}

}  // namespace telos::exec
