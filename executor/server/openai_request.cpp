#include "executor/server/openai_request.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "executor/prefix_cache.hpp"
#include "executor/server/api_error.hpp"
#include "executor/tokenizer/chat_template.hpp"

namespace telos::exec {
namespace {

using json = nlohmann::ordered_json;

// A scalar as sent, for error messages: strings quoted and cut to a few dozen bytes.
std::string scalar_text(const json& v) {
  if (!v.is_string()) return v.dump();
  const std::string& s = v.get_ref<const std::string&>();
  constexpr std::size_t kShown = 37;
  // A cut through a character becomes U+FFFD.
  return json(s.substr(0, kShown)).dump(-1, ' ', false, json::error_handler_t::replace) +
         (s.size() > kShown ? "..." : "");
}

// A value as an error message shows it: containers by their kind only, so that no message walks a
// request value.
std::string describe(const json& v) {
  switch (v.type()) {
    case json::value_t::string:
      return "the string " + scalar_text(v);
    case json::value_t::boolean:
      return "the boolean " + scalar_text(v);
    case json::value_t::array:
      return "an array";
    case json::value_t::object:
      return "an object";
    case json::value_t::null:
      return "null";
    default:
      return "the number " + scalar_text(v);
  }
}

[[noreturn]] void expected(const std::string& param, const std::string& what, const json& got) {
  throw bad_request(param, "expected " + what + ", got " + describe(got));
}

// The field's value, or nullptr when it is absent or null (OpenAI treats both as "not given").
const json* field(const json& body, const char* name) {
  auto it = body.find(name);
  return it == body.end() || it->is_null() ? nullptr : &*it;
}

// Whether object[name] is the string "text".
bool is_text(const json& object, const char* name) {
  auto it = object.find(name);
  return it != object.end() && it->is_string() && it->get_ref<const std::string&>() == "text";
}

std::optional<double> number(const json& body, const char* name) {
  const json* v = field(body, name);
  if (!v) return std::nullopt;
  if (!v->is_number()) expected(name, "a number", *v);
  const double d = v->get<double>();
  if (!std::isfinite(d)) throw bad_request(name, "must be a finite number");
  return d;
}

// A double as the float the engine holds; beyond float's range it becomes an infinity, which the
// engine's check refuses.
float to_float(double d) {
  constexpr double kMax = std::numeric_limits<float>::max();
  if (std::fabs(d) > kMax) return std::copysign(std::numeric_limits<float>::infinity(), d);
  return static_cast<float>(d);
}

float real(const json& body, const char* name, float fallback) {
  const std::optional<double> v = number(body, name);
  return v ? to_float(*v) : fallback;
}

// An integer field; values beyond int64 saturate (the error messages show the value as sent).
std::optional<std::int64_t> integer(const json& body, const char* name) {
  const json* v = field(body, name);
  if (!v) return std::nullopt;
  if (v->is_number_unsigned())
    return static_cast<std::int64_t>(
        std::min<std::uint64_t>(v->get<std::uint64_t>(), std::numeric_limits<std::int64_t>::max()));
  if (v->is_number_integer()) return v->get<std::int64_t>();
  // 2.0 is an integer to JavaScript clients; 2.5 is not.
  if (v->is_number_float() && std::isfinite(v->get<double>()) &&
      v->get<double>() == std::floor(v->get<double>()) && std::fabs(v->get<double>()) < 9e15)
    return static_cast<std::int64_t>(v->get<double>());
  expected(name, "an integer", *v);
}

int saturate_to_int(std::int64_t v) {
  return static_cast<int>(std::clamp<std::int64_t>(v, std::numeric_limits<int>::min(),
                                                   std::numeric_limits<int>::max()));
}

// An int field whose range the engine's check_sampling() judges.
int int_field(const json& body, const char* name, int fallback) {
  const std::optional<std::int64_t> v = integer(body, name);
  return v ? saturate_to_int(*v) : fallback;
}

std::optional<bool> boolean(const json& body, const char* name) {
  const json* v = field(body, name);
  if (!v) return std::nullopt;
  if (!v->is_boolean()) expected(name, "a boolean", *v);
  return v->get<bool>();
}

int bounded_int(const json& body, const char* name, std::int64_t lo, std::int64_t hi,
                int fallback) {
  const std::optional<std::int64_t> v = integer(body, name);
  if (!v) return fallback;
  if (*v < lo || *v > hi)
    throw bad_request(name, "must be in [" + std::to_string(lo) + ", " + std::to_string(hi) +
                                "], got " + field(body, name)->dump());
  return static_cast<int>(*v);
}

std::int32_t token_id(const json& v, const std::string& param, const std::string& where,
                      int vocab_size) {
  if (!v.is_number_integer()) expected(param, "a token id (an integer) at " + where, v);
  // nlohmann holds ids >= 0 as unsigned; 2^63 and above do not fit an int64.
  const bool in_vocab = v.is_number_unsigned()
                            ? v.get<std::uint64_t>() < static_cast<std::uint64_t>(vocab_size)
                            : v.get<std::int64_t>() >= 0 && v.get<std::int64_t>() < vocab_size;
  if (!in_vocab)
    throw bad_request(param, where + " is the token id " + v.dump() +
                                 ", outside the vocabulary of " + std::to_string(vocab_size));
  return static_cast<std::int32_t>(v.get<std::int64_t>());
}

std::vector<std::int32_t> token_ids(const json& list, const std::string& param,
                                    const std::string& where, int vocab_size) {
  if (list.empty()) throw bad_request(param, where + " is an empty list of token ids");
  std::vector<std::int32_t> ids;
  ids.reserve(list.size());
  for (std::size_t i = 0; i < list.size(); ++i)
    ids.push_back(token_id(list[i], param, where + "[" + std::to_string(i) + "]", vocab_size));
  return ids;
}

void check_model(const json& body, const std::string& served_model) {
  const json* v = field(body, "model");
  if (!v) return;  // optional, as in vLLM: there is one model
  if (!v->is_string()) expected("model", "a string", *v);
  if (v->get<std::string>() != served_model)
    throw ApiError(404, "invalid_request_error",
                   "model: the model '" + v->get<std::string>() +
                       "' does not exist; this server serves '" + served_model + "'",
                   "model", "model_not_found");
}

void refuse_unsupported(const json& body) {
  if (const json* v = field(body, "logit_bias"); v && !(v->is_object() && v->empty()))
    throw bad_request("logit_bias", "is not supported by Telos");
  if (const json* v = field(body, "suffix");
      v && !(v->is_string() && v->get<std::string>().empty()))
    throw bad_request("suffix", "is not supported by Telos");
  if (const json* v = field(body, "tools"); v && !(v->is_array() && v->empty()))
    throw bad_request("tools", "tool calling is not supported by Telos");
  if (const json* v = field(body, "response_format"); v && !(v->is_object() && is_text(*v, "type")))
    throw bad_request("response_format", "only {\"type\": \"text\"} is supported by Telos");
}

// An empty salt would share with every unsalted request while looking like isolation (a tenant id
// that was never filled in), so it is refused rather than taken as none, as vLLM does.
std::string parse_cache_salt(const json& body) {
  const json* v = field(body, "cache_salt");
  if (!v) return {};
  if (!v->is_string()) expected("cache_salt", "a string", *v);
  const std::string& salt = v->get_ref<const std::string&>();
  if (salt.empty())
    throw bad_request("cache_salt",
                      "must not be empty (leave it out to share the prefix cache with every "
                      "request that has no salt)");
  if (salt.size() > kMaxCacheSaltBytes)
    throw bad_request("cache_salt", "has " + std::to_string(salt.size()) + " bytes, more than " +
                                        std::to_string(kMaxCacheSaltBytes));
  return salt;
}

// The fields both endpoints share.
void parse_common(const json& body, ApiRequest& r, int vocab_size) {
  if (!body.is_object())
    throw bad_request("", "the request body must be a JSON object, got " + describe(body));
  refuse_unsupported(body);
  // Ranges are judged once every field is read, by check_sampling() (see check_sampling_fields).
  SamplingParams& s = r.sampling;
  s.temperature = real(body, "temperature", s.temperature);
  s.top_p = real(body, "top_p", s.top_p);
  // vLLM writes -1 for "off"; so do we, besides 0.
  s.top_k = std::max(0, bounded_int(body, "top_k", -1, vocab_size, 0));
  s.min_p = real(body, "min_p", s.min_p);
  s.presence_penalty = real(body, "presence_penalty", s.presence_penalty);
  s.frequency_penalty = real(body, "frequency_penalty", s.frequency_penalty);
  s.repetition_penalty = real(body, "repetition_penalty", s.repetition_penalty);
  if (const json* v = field(body, "seed"); v && v->is_number_unsigned())
    s.seed = v->get<std::uint64_t>();
  else if (auto seed = integer(body, "seed"))
    s.seed = static_cast<std::uint64_t>(*seed);
  if (auto v = boolean(body, "ignore_eos")) s.ignore_eos = *v;
  if (const json* v = field(body, "stop_token_ids")) {
    if (!v->is_array()) expected("stop_token_ids", "an array of token ids", *v);
    for (std::size_t i = 0; i < v->size(); ++i)
      s.stop_token_ids.push_back(token_id((*v)[i], "stop_token_ids",
                                          "stop_token_ids[" + std::to_string(i) + "]", vocab_size));
  }

  r.n = bounded_int(body, "n", 1, kMaxChoices, 1);
  if (auto v = integer(body, "best_of"); v && *v != r.n)
    throw bad_request("best_of", "must equal n (Telos returns every sample it draws)");

  r.stream = boolean(body, "stream").value_or(false);
  if (const json* v = field(body, "stream_options")) {
    if (!v->is_object()) expected("stream_options", "an object", *v);
    if (!r.stream) throw bad_request("stream_options", "is only allowed when stream is true");
    r.include_usage = boolean(*v, "include_usage").value_or(false);
  }

  if (const json* v = field(body, "stop")) {
    if (v->is_string()) {
      r.stop.push_back(v->get<std::string>());
    } else if (v->is_array()) {
      if (v->size() > static_cast<std::size_t>(kMaxStopStrings))
        throw bad_request(
            "stop", "at most " + std::to_string(kMaxStopStrings) + " stop strings are allowed");
      for (std::size_t i = 0; i < v->size(); ++i) {
        if (!(*v)[i].is_string())
          expected("stop", "a string at stop[" + std::to_string(i) + "]", (*v)[i]);
        r.stop.push_back((*v)[i].get<std::string>());
      }
    } else {
      expected("stop", "a string or an array of strings", *v);
    }
    for (const std::string& s : r.stop)
      if (s.empty()) throw bad_request("stop", "stop strings must not be empty");
  }
  r.skip_special_tokens = boolean(body, "skip_special_tokens").value_or(true);
  r.return_token_ids = boolean(body, "return_token_ids").value_or(false);
  r.split_special_tokens =
      boolean(body, "split_special_tokens").value_or(r.kind == ApiRequest::Kind::Chat);
  r.cache_salt = parse_cache_salt(body);
}

// max_tokens (chat: max_completion_tokens first) and min_tokens.
void parse_lengths(const json& body, ApiRequest& r, const char* max_field) {
  if (auto v = integer(body, max_field)) r.sampling.max_tokens = saturate_to_int(*v);
  r.sampling.min_tokens = int_field(body, "min_tokens", 0);
}

// The engine's own check of the sampling parameters, so that what it would refuse is refused here,
// naming the request's field (chat names two of them differently) and the value as sent.
void check_sampling_fields(const json& body, const ApiRequest& r, int vocab_size,
                           const char* max_field) {
  const std::optional<SamplingRefusal> refusal = check_sampling(r.sampling, vocab_size);
  if (!refusal) return;
  std::string param = refusal->field;
  if (param == "max_tokens") param = max_field;
  if (param == "logprobs" && r.kind == ApiRequest::Kind::Chat) param = "top_logprobs";
  const json* sent = field(body, param.c_str());
  throw bad_request(
      param, refusal->what + (sent && sent->is_primitive() ? ", got " + scalar_text(*sent) : ""));
}

std::vector<PromptInput> parse_prompt(const json& body, int vocab_size) {
  const json* v = field(body, "prompt");
  if (!v) throw bad_request("prompt", "is required");
  if (v->is_string()) return {PromptInput{v->get<std::string>(), {}}};
  if (!v->is_array())
    expected("prompt", "a string, an array of token ids, or an array of either", *v);
  if (v->empty()) throw bad_request("prompt", "must not be an empty array");
  if ((*v)[0].is_number())
    return {PromptInput{std::nullopt, token_ids(*v, "prompt", "prompt", vocab_size)}};
  std::vector<PromptInput> prompts;
  for (std::size_t i = 0; i < v->size(); ++i) {
    const json& p = (*v)[i];
    const std::string where = "prompt[" + std::to_string(i) + "]";
    if (p.is_string())
      prompts.push_back({p.get<std::string>(), {}});
    else if (p.is_array())
      prompts.push_back({std::nullopt, token_ids(p, "prompt", where, vocab_size)});
    else
      expected("prompt", "a string or an array of token ids at " + where, p);
  }
  return prompts;
}

// OpenAI content is a string or a list of parts; templates want a string, so text parts are
// joined with newlines (as vLLM does) and other parts refused.
std::string message_text(const json& content, const std::string& where) {
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array())
    expected("messages", "a string or an array of text parts at " + where, content);
  std::string text;
  for (std::size_t i = 0; i < content.size(); ++i) {
    const json& part = content[i];
    const std::string part_where = where + "[" + std::to_string(i) + "]";
    if (!part.is_object() || !is_text(part, "type") || !part.contains("text") ||
        !part["text"].is_string())
      throw bad_request("messages", part_where +
                                        " must be {\"type\": \"text\", \"text\": \"...\"} (Telos "
                                        "serves text-only models)");
    if (i > 0) text += "\n";
    text += part["text"].get<std::string>();
  }
  return text;
}

json parse_messages(const json& body) {
  const json* v = field(body, "messages");
  if (!v) throw bad_request("messages", "is required");
  if (!v->is_array()) expected("messages", "an array of messages", *v);
  if (v->empty()) throw bad_request("messages", "must contain at least one message");
  json messages = json::array();
  for (std::size_t i = 0; i < v->size(); ++i) {
    const json& m = (*v)[i];
    const std::string where = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) expected("messages", "an object at " + where, m);
    auto role = m.find("role");
    if (role == m.end() || !role->is_string())
      throw bad_request("messages", where + ".role must be a string");
    const std::string r = role->get<std::string>();
    if (r != "system" && r != "developer" && r != "user" && r != "assistant" && r != "tool")
      throw bad_request("messages", where + ".role '" + r +
                                        "' is not one of system, developer, user, assistant, tool");
    json out = m;
    auto content = m.find("content");
    if (content == m.end() || content->is_null()) {
      if (r != "assistant") throw bad_request("messages", where + ".content is required");
      out["content"] = "";
    } else {
      out["content"] = message_text(*content, where + ".content");
    }
    messages.push_back(std::move(out));
  }
  return messages;
}

// chat_template_kwargs may add variables, never replace one the server sets.
json parse_template_kwargs(const json& kwargs) {
  for (const auto& [key, value] : kwargs.items()) {
    if (key == "tools")
      throw bad_request("chat_template_kwargs",
                        "'tools' is refused: tool calling is not supported by Telos");
    if (ChatTemplate::is_reserved_variable(key))
      throw bad_request("chat_template_kwargs",
                        "'" + key +
                            "' is reserved: the server sets it (from the request's fields and the "
                            "model) or the template environment defines it");
  }
  return kwargs;
}

// Whether arrays and objects in `text` nest deeper than `limit`, counting brackets outside
// strings: for valid JSON exactly the nesting the parser would build, for anything else a count
// that does not matter, since the parse refuses it. A scan of its own because nlohmann's parser
// callback, the other place to see the depth, makes the parser quadratic in the number of objects
// in an array (it rescans the array after each one).
bool nests_deeper_than(std::string_view text, int limit) {
  int depth = 0;
  bool in_string = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\')
        ++i;
      else if (c == '"')
        in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > limit) return true;
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return false;
}

}  // namespace

json parse_request_json(std::string_view body) {
  if (nests_deeper_than(body, kMaxRequestJsonDepth))
    throw bad_request("", "the request body nests arrays and objects more than " +
                              std::to_string(kMaxRequestJsonDepth) + " levels deep");
  try {
    return json::parse(body);
  } catch (const json::exception& e) {
    throw bad_request("", std::string("the request body is not valid JSON: ") + e.what());
  }
}

ApiRequest parse_completion_request(const json& body, const std::string& served_model,
                                    int vocab_size) {
  ApiRequest r;
  r.kind = ApiRequest::Kind::Completion;
  parse_common(body, r, vocab_size);
  check_model(body, served_model);
  parse_lengths(body, r, "max_tokens");
  r.prompts = parse_prompt(body, vocab_size);
  r.echo = boolean(body, "echo").value_or(false);
  if (field(body, "logprobs")) {
    r.logprobs = true;
    r.sampling.logprobs = int_field(body, "logprobs", 0);
    if (r.echo)
      throw bad_request(
          "echo", "cannot be combined with logprobs (Telos does not compute prompt logprobs)");
  }
  check_sampling_fields(body, r, vocab_size, "max_tokens");
  return r;
}

ApiRequest parse_chat_request(const json& body, const std::string& served_model, int vocab_size) {
  ApiRequest r;
  r.kind = ApiRequest::Kind::Chat;
  parse_common(body, r, vocab_size);
  check_model(body, served_model);
  const char* max_field =
      field(body, "max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
  parse_lengths(body, r, max_field);
  r.messages = parse_messages(body);
  r.logprobs = boolean(body, "logprobs").value_or(false);
  if (field(body, "top_logprobs")) {
    if (!r.logprobs) throw bad_request("top_logprobs", "needs logprobs set to true");
    r.sampling.logprobs = int_field(body, "top_logprobs", 0);
  }
  check_sampling_fields(body, r, vocab_size, max_field);
  r.add_generation_prompt = boolean(body, "add_generation_prompt").value_or(true);
  if (const json* v = field(body, "chat_template_kwargs")) {
    if (!v->is_object()) expected("chat_template_kwargs", "an object", *v);
    r.template_kwargs = parse_template_kwargs(*v);
  }
  return r;
}

}  // namespace telos::exec
