#include "executor/tokenizer/chat_template.hpp"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "support/error.hpp"

namespace telos {
namespace {

using nlohmann::ordered_json;

std::string token_field(const ordered_json& config, const char* key, const std::string& origin) {
  auto it = config.find(key);
  if (it == config.end() || it->is_null()) return "";
  if (it->is_string()) return it->get<std::string>();
  // Older configs serialize an AddedToken: {"content": "<s>", "lstrip": false, ...}.
  if (it->is_object() && it->contains("content") && (*it)["content"].is_string())
    return (*it)["content"].get<std::string>();
  fail(origin + ": " + key + ": must be a string or {\"content\": string}");
}

// Every string in `value`, object keys included, through Tokenizer::mark_as_text. Iterative (an
// explicit stack of the values still to visit), so the depth of `value` costs no stack.
void mark_strings(ordered_json& value, const Tokenizer& tokenizer) {
  std::vector<ordered_json*> pending{&value};
  while (!pending.empty()) {
    ordered_json& v = *pending.back();
    pending.pop_back();
    if (v.is_string()) {
      v = tokenizer.mark_as_text(v.get_ref<const std::string&>());
    } else if (v.is_array()) {
      for (ordered_json& e : v) pending.push_back(&e);
    } else if (v.is_object()) {
      ordered_json marked = ordered_json::object();
      for (auto& [k, e] : v.items()) marked[tokenizer.mark_as_text(k)] = std::move(e);
      v = std::move(marked);
      for (auto& [k, e] : v.items()) pending.push_back(&e);
    }
  }
}

}  // namespace

std::optional<ChatTemplate> ChatTemplate::load_if_present(const std::string& path) {
  if (!std::filesystem::exists(path)) return std::nullopt;
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(path + ": cannot open tokenizer config");
  ordered_json config;
  try {
    config = ordered_json::parse(in);
  } catch (const ordered_json::exception& e) {
    fail(path + ": not valid JSON: " + e.what());
  }
  if (!config.is_object()) fail(path + ": must be a JSON object");
  if (config.contains("chat_template") && !config["chat_template"].is_null())
    return from_config_json(config, path);
  // Checkpoints saved by newer transformers keep the template in chat_template.jinja beside the
  // config instead of in it.
  const std::filesystem::path sibling =
      std::filesystem::path(path).parent_path() / "chat_template.jinja";
  std::ifstream jinja(sibling, std::ios::binary);
  if (!jinja) return std::nullopt;
  std::ostringstream text;
  text << jinja.rdbuf();
  return ChatTemplate(jinja::Template::parse(text.str(), sibling.string()),
                      token_field(config, "bos_token", path),
                      token_field(config, "eos_token", path), path);
}

ChatTemplate ChatTemplate::from_tokenizer_config(const std::string& path) {
  if (!std::filesystem::exists(path)) fail(path + ": cannot open tokenizer config");
  std::optional<ChatTemplate> chat = load_if_present(path);
  if (!chat)
    fail(path + ": chat_template: is missing (and there is no chat_template.jinja beside it)");
  return std::move(*chat);
}

ChatTemplate ChatTemplate::from_config_json(const ordered_json& config, const std::string& origin) {
  if (!config.is_object()) fail(origin + ": must be a JSON object");
  auto it = config.find("chat_template");
  if (it == config.end() || it->is_null()) fail(origin + ": chat_template: is missing");
  std::string source;
  if (it->is_string()) {
    source = it->get<std::string>();
  } else if (it->is_array()) {
    for (const ordered_json& named : *it)
      if (named.is_object() && named.value("name", "") == "default" && named.contains("template") &&
          named["template"].is_string())
        source = named["template"].get<std::string>();
    if (source.empty())
      fail(origin + ": chat_template: the list has no {\"name\": \"default\", \"template\": ...}");
  } else {
    fail(origin + ": chat_template: must be a string or a list of named templates");
  }
  return ChatTemplate(jinja::Template::parse(source, origin + ": chat_template"),
                      token_field(config, "bos_token", origin),
                      token_field(config, "eos_token", origin), origin);
}

bool ChatTemplate::is_reserved_variable(std::string_view name) {
  return name == "messages" || name == "add_generation_prompt" || name == "bos_token" ||
         name == "eos_token" || jinja::is_global(name);
}

std::string ChatTemplate::render(const ordered_json& messages, bool add_generation_prompt,
                                 const ordered_json& extra) const {
  if (!messages.is_array()) fail(origin_ + ": render: messages must be an array");
  if (!extra.is_object()) fail(origin_ + ": render: extra variables must be an object");
  ordered_json variables = {{"messages", messages},
                            {"add_generation_prompt", add_generation_prompt},
                            {"bos_token", bos_token_},
                            {"eos_token", eos_token_}};
  for (auto& [k, v] : extra.items()) {
    if (is_reserved_variable(k))
      fail(origin_ + ": render: the extra variable '" + k + "' is reserved (render() sets it or " +
           "the template environment defines it)");
    variables[k] = v;
  }
  return template_.render(variables);
}

std::vector<TokenId> ChatTemplate::encode(const Tokenizer& tokenizer, const ordered_json& messages,
                                          bool add_generation_prompt, const ordered_json& extra,
                                          bool split_special_tokens) const {
  if (!split_special_tokens)
    return tokenizer.encode(render(messages, add_generation_prompt, extra), false);
  ordered_json marked_messages = messages, marked_extra = extra;
  mark_strings(marked_messages, tokenizer);
  mark_strings(marked_extra, tokenizer);
  return tokenizer.encode(render(marked_messages, add_generation_prompt, marked_extra), false,
                          Tokenizer::Specials::except_marked);
}

}  // namespace telos
