#pragma once
// The chat template of a model: the Jinja "chat_template" of its tokenizer_config.json, rendered
// with the variables transformers' apply_chat_template passes (messages, add_generation_prompt,
// bos_token, eos_token, and extras such as tools or enable_thinking).
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "executor/tokenizer/jinja.hpp"
#include "executor/tokenizer/tokenizer.hpp"

namespace telos {

class ChatTemplate {
 public:
  // Reads tokenizer_config.json: "chat_template" (a string, or a list of {name, template} from
  // which "default" is taken; when absent, chat_template.jinja in the same folder), "bos_token"
  // and "eos_token" (strings or {"content": ...}).
  // Errors name the path and field; an unsupported template construct is refused here.
  static ChatTemplate from_tokenizer_config(const std::string& path);
  // The same, but nullopt (not an error) when the model has no chat template: no config file,
  // or neither "chat_template" nor chat_template.jinja. A present but broken one still throws.
  static std::optional<ChatTemplate> load_if_present(const std::string& path);
  static ChatTemplate from_config_json(const nlohmann::ordered_json& config,
                                       const std::string& origin);

  // `messages` is the OpenAI-style array of {"role", "content", ...}; `extra` (an object) adds
  // template variables (tools, enable_thinking, ...), none of them reserved (see below). Object
  // key order is kept (tojson output depends on it).
  std::string render(const nlohmann::ordered_json& messages, bool add_generation_prompt,
                     const nlohmann::ordered_json& extra = nlohmann::ordered_json::object()) const;

  // The conversation as the model's token ids: render() encoded without the tokenizer's
  // post-processor (the template writes its own BOS). With `split_special_tokens`, a special
  // token spelled in request text (any string in `messages` or `extra`, keys included) is
  // encoded as the text it spells (Tokenizer::mark_as_text), while the template's own markup and
  // bos_token/eos_token keep their special tokens.
  std::vector<TokenId> encode(const Tokenizer& tokenizer, const nlohmann::ordered_json& messages,
                              bool add_generation_prompt, const nlohmann::ordered_json& extra,
                              bool split_special_tokens) const;

  // Whether `name` is a variable render() sets itself (messages, add_generation_prompt,
  // bos_token, eos_token) or a function of the template environment (jinja::is_global), which
  // `extra` may not give.
  static bool is_reserved_variable(std::string_view name);

  // The written forms of the special tokens the config names ("" when it names none); the
  // executor turns them into ids with Tokenizer::token_id.
  const std::string& bos_token() const { return bos_token_; }
  const std::string& eos_token() const { return eos_token_; }

 private:
  ChatTemplate(jinja::Template t, std::string bos, std::string eos, std::string origin)
      : template_(std::move(t)),
        bos_token_(std::move(bos)),
        eos_token_(std::move(eos)),
        origin_(std::move(origin)) {}
  jinja::Template template_;
  std::string bos_token_, eos_token_, origin_;
};

}  // namespace telos
