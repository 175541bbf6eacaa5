#include "executor/server/openai_request.hpp"

#include <cmath>
#include <cstdio>
#include <limits>

#include "executor/server/api_error.hpp"

namespace telos::exec {
namespace {

using json = nlohmann::ordered_json;

std::string describe(const json& v) {
  std::string text = v.dump();
  if (text.size() > 40) text = text.substr(0, 37) + "...";
  switch (v.type()) {
    case json::value_t::string:
      return "the string " + text;
    case json::value_t::boolean:
      return "the boolean " + text;
    case json::value_t::array:
      return "an array";
    case json::value_t::object:
      return "an object";
    case json::value_t::null:
      return "null";
    default:
      return "the number " + text;
  }
}

[[noreturn]] void expected(const std::string& param, const std::string& what, const json& got) {
  throw bad_request(param, "expected " + what + ", got " + describe(got));
}

std::string number_text(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

// The field's value, or nullptr when it is absent or null (OpenAI treats both as "not given").
const json* field(const json& body, const char* name) {
  auto it = body.find(name);
  return it == body.end() || it->is_null() ? nullptr : &*it;
}

std::optional<double> number(const json& body, const char* name) {
  const json* v = field(body, name);
  if (!v) return std::nullopt;
  if (!v->is_number()) expected(name, "a number", *v);
  const double d = v->get<double>();
  if (!std::isfinite(d)) throw bad_request(name, "must be a finite number");
  return d;
}

std::optional<std::int64_t> integer(const json& body, const char* name) {
  const json* v = field(body, name);
  if (!v) return std::nullopt;
  if (v->is_number_integer()) return v->get<std::int64_t>();
  // 2.0 is an integer to JavaScript clients; 2.5 is not.
  if (v->is_number_float() && std::isfinite(v->get<double>()) &&
      v->get<double>() == std::floor(v->get<double>()) && std::fabs(v->get<double>()) < 9e15)
    return static_cast<std::int64_t>(v->get<double>());
  expected(name, "an integer", *v);
}

std::optional<bool> boolean(const json& body, const char* name) {
  const json* v = field(body, name);
  if (!v) return std::nullopt;
  if (!v->is_boolean()) expected(name, "a boolean", *v);
  return v->get<bool>();
}

void check_range(const char* name, double v, double lo, bool lo_open, double hi, bool hi_open) {
  const bool ok = (lo_open ? v > lo : v >= lo) && (hi_open ? v < hi : v <= hi);
  if (!ok)
    throw bad_request(name, std::string("must be in ") + (lo_open ? "(" : "[") + number_text(lo) +
                                ", " + number_text(hi) + (hi_open ? ")" : "]") + ", got " +
                                number_text(v));
}

int bounded_int(const json& body, const char* name, std::int64_t lo, std::int64_t hi,
                int fallback) {
  const std::optional<std::int64_t> v = integer(body, name);
  if (!v) return fallback;
  if (*v < lo || *v > hi)
    throw bad_request(name, "must be in [" + std::to_string(lo) + ", " + std::to_string(hi) +
                                "], got " + std::to_string(*v));
  return static_cast<int>(*v);
}

std::int32_t token_id(const json& v, const std::string& param, const std::string& where,
                      int vocab_size) {
  if (!v.is_number_integer()) expected(param, "a token id (an integer) at " + where, v);
  const std::int64_t id = v.get<std::int64_t>();
  if (id < 0 || id >= vocab_size)
    throw bad_request(param, where + " is the token id " + std::to_string(id) +
                                 ", outside the vocabulary of " + std::to_string(vocab_size));
  return static_cast<std::int32_t>(id);
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
  if (const json* v = field(body, "response_format");
      v && !(v->is_object() && v->value("type", "") == "text"))
    throw bad_request("response_format", "only {\"type\": \"text\"} is supported by Telos");
}

// The fields both endpoints share.
void parse_common(const json& body, ApiRequest& r, int vocab_size) {
  if (!body.is_object())
    throw bad_request("", "the request body must be a JSON object, got " + describe(body));
  refuse_unsupported(body);
  SamplingParams& s = r.sampling;

  if (auto v = number(body, "temperature")) {
    if (*v < 0) throw bad_request("temperature", "must be >= 0, got " + number_text(*v));
    s.temperature = static_cast<float>(*v);
  }
  if (auto v = number(body, "top_p")) {
    check_range("top_p", *v, 0, true, 1, false);
    s.top_p = static_cast<float>(*v);
  }
  // vLLM writes -1 for "off"; so do we, besides 0.
  s.top_k = std::max(0, bounded_int(body, "top_k", -1, vocab_size, 0));
  if (auto v = number(body, "min_p")) {
    check_range("min_p", *v, 0, false, 1, false);
    s.min_p = static_cast<float>(*v);
  }
  if (auto v = number(body, "presence_penalty")) {
    check_range("presence_penalty", *v, -2, false, 2, false);
    s.presence_penalty = static_cast<float>(*v);
  }
  if (auto v = number(body, "frequency_penalty")) {
    check_range("frequency_penalty", *v, -2, false, 2, false);
    s.frequency_penalty = static_cast<float>(*v);
  }
  if (auto v = number(body, "repetition_penalty")) {
    if (*v <= 0) throw bad_request("repetition_penalty", "must be > 0, got " + number_text(*v));
    s.repetition_penalty = static_cast<float>(*v);
  }
  if (auto v = integer(body, "seed")) s.seed = static_cast<std::uint64_t>(*v);
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
}

// max_tokens (chat: max_completion_tokens first) and min_tokens.
void parse_lengths(const json& body, ApiRequest& r, const char* max_field) {
  if (auto v = integer(body, max_field)) {
    if (*v < 1) throw bad_request(max_field, "must be >= 1, got " + std::to_string(*v));
    r.sampling.max_tokens =
        static_cast<int>(std::min<std::int64_t>(*v, std::numeric_limits<int>::max()));
  }
  r.sampling.min_tokens = bounded_int(body, "min_tokens", 0, std::numeric_limits<int>::max(), 0);
  if (r.sampling.max_tokens && r.sampling.min_tokens > *r.sampling.max_tokens)
    throw bad_request("min_tokens", "must not exceed " + std::string(max_field) + " (" +
                                        std::to_string(*r.sampling.max_tokens) + "), got " +
                                        std::to_string(r.sampling.min_tokens));
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
    if (!part.is_object() || part.value("type", "") != "text" || !part.contains("text") ||
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

}  // namespace

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
    r.sampling.logprobs = bounded_int(body, "logprobs", 0, kMaxLogprobs, 0);
    if (r.echo)
      throw bad_request(
          "echo", "cannot be combined with logprobs (Telos does not compute prompt logprobs)");
  }
  return r;
}

ApiRequest parse_chat_request(const json& body, const std::string& served_model, int vocab_size) {
  ApiRequest r;
  r.kind = ApiRequest::Kind::Chat;
  parse_common(body, r, vocab_size);
  check_model(body, served_model);
  parse_lengths(body, r,
                field(body, "max_completion_tokens") ? "max_completion_tokens" : "max_tokens");
  r.messages = parse_messages(body);
  r.logprobs = boolean(body, "logprobs").value_or(false);
  if (field(body, "top_logprobs")) {
    if (!r.logprobs) throw bad_request("top_logprobs", "needs logprobs set to true");
    r.sampling.logprobs = bounded_int(body, "top_logprobs", 0, kMaxLogprobs, 0);
  }
  r.add_generation_prompt = boolean(body, "add_generation_prompt").value_or(true);
  if (const json* v = field(body, "chat_template_kwargs")) {
    if (!v->is_object()) expected("chat_template_kwargs", "an object", *v);
    r.template_kwargs = *v;
  }
  return r;
}

}  // namespace telos::exec
