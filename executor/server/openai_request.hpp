#pragma once
// The bodies of POST /v1/completions and POST /v1/chat/completions, parsed and range-checked
// field by field before anything reaches the engine. Every refusal is an ApiError whose param is
// the JSON field at fault and whose message says what was expected, e.g.
//   top_p: must be in (0, 1], got 1.5
// Fields OpenAI defines that Telos does not implement (logit_bias, suffix, tools, best_of > n) are
// refused by name rather than ignored; unknown fields are ignored, as OpenAI-compatible servers do.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "executor/sampler.hpp"

namespace telos::exec {

// One prompt: text to tokenize, or token ids given directly.
struct PromptInput {
  std::optional<std::string> text;
  std::vector<std::int32_t> ids;
};

struct ApiRequest {
  enum class Kind { Completion, Chat };
  Kind kind = Kind::Completion;
  std::vector<PromptInput> prompts;   // completions: one or more; chat: none (see messages)
  nlohmann::ordered_json messages;    // chat: OpenAI messages, content flattened to strings
  bool add_generation_prompt = true;  // chat extension
  nlohmann::ordered_json template_kwargs =
      nlohmann::ordered_json::object();  // chat_template_kwargs
  SamplingParams sampling;               // max_tokens absent: the server picks (see max_tokens)
  int n = 1;
  bool stream = false;
  bool include_usage = false;       // stream_options.include_usage
  bool echo = false;                // completions only
  bool logprobs = false;            // report logprobs (sampling.logprobs alternatives)
  std::vector<std::string> stop;    // stop strings, matched on the detokenized text
  bool skip_special_tokens = true;  // extension: leave special tokens out of the text
  bool return_token_ids = false;    // extension: add "token_ids" to every choice
};

inline constexpr int kMaxChoices = 64;  // n per prompt
inline constexpr int kMaxStopStrings = 16;

// `served_model` is the name /v1/models lists; a request naming another model is a 404;
// `vocab_size` bounds token ids. Throws ApiError.
ApiRequest parse_completion_request(const nlohmann::ordered_json& body,
                                    const std::string& served_model, int vocab_size);
ApiRequest parse_chat_request(const nlohmann::ordered_json& body, const std::string& served_model,
                              int vocab_size);

}  // namespace telos::exec
