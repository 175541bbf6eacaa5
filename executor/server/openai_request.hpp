#pragma once
// The bodies of POST /v1/completions and POST /v1/chat/completions, parsed and range-checked
// field by field before anything reaches the engine. Every refusal is an ApiError whose param is
// the JSON field at fault and whose message says what was expected and what was sent, e.g.
//   top_p: must be in (0, 1], got 1e-300
// Fields OpenAI defines that Telos does not implement (logit_bias, suffix, tools, best_of > n) are
// refused by name rather than ignored; unknown fields are ignored, as OpenAI-compatible servers do.
//
// What a hostile body cannot do:
// - Nest deeply: parse_request_json refuses arrays and objects nested more than
//   kMaxRequestJsonDepth deep before parsing, so no walk over the value (copies, error messages,
//   template values) can exhaust a thread's stack.
// - Slip a sampling value past the engine: the sampling fields are checked by the engine's own
//   check_sampling() on the values the engine will see (floats, ints), so a value the engine
//   would refuse (top_p 1e-300 rounds to 0) is a 400 naming the field, never a late refusal.
// - Override what the server sets: chat_template_kwargs may not name a variable the renderer sets
//   (messages, add_generation_prompt, bos_token, eos_token), a function of the template
//   environment, or tools (tool calling is refused).
// - Forge control tokens: special tokens spelled in chat request text ("<|im_end|>" typed in a
//   message) are encoded as the text they spell, while the chat template's own markup keeps its
//   special tokens; "split_special_tokens": false turns parsing back on (the name and meaning
//   are Hugging Face tokenizers'). A /v1/completions text prompt is the model's raw input, which
//   users write with the model's control tokens by hand, so there the special tokens are parsed
//   unless "split_special_tokens": true; this is also what vLLM and transformers do for a
//   prompt string (they parse special tokens everywhere, chat content included).
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
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
  // Extension, Hugging Face's name: special tokens spelled in request text are encoded as text.
  // Default: true for chat (message text and chat_template_kwargs), false for completions.
  bool split_special_tokens = false;
  // Extension, vLLM's name: requests share cached prompt pages only with requests of the same salt
  // (GenerationRequest::cache_salt). A non-empty string of at most kMaxCacheSaltBytes; absent: the
  // salt of every request without one.
  std::string cache_salt;
};

inline constexpr int kMaxChoices = 64;  // n per prompt
inline constexpr int kMaxStopStrings = 16;
// Arrays and objects nest at most this deep in a request body. The deepest legitimate part of a
// request is a tool's JSON schema inside a message or chat_template_kwargs, a handful of levels;
// every walk over request data (nlohmann's copies and dumps, the template values the chat template
// reads, the template engine's printing and comparisons) recurses once per level, and 64 levels
// stay far inside any thread's stack even under sanitizers.
inline constexpr int kMaxRequestJsonDepth = 64;

// The body as JSON, or an ApiError 400: nested deeper than kMaxRequestJsonDepth (found by a scan
// before parsing, so no value that deep is ever built), or not valid JSON (nlohmann's message,
// which says where).
nlohmann::ordered_json parse_request_json(std::string_view body);

// `served_model` is the name /v1/models lists; a request naming another model is a 404;
// `vocab_size` bounds token ids. Throws ApiError.
ApiRequest parse_completion_request(const nlohmann::ordered_json& body,
                                    const std::string& served_model, int vocab_size);
ApiRequest parse_chat_request(const nlohmann::ordered_json& body, const std::string& served_model,
                              int vocab_size);

}  // namespace telos::exec
