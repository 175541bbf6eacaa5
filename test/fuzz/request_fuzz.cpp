// libFuzzer target: any bytes as the body of POST /v1/completions and of POST
// /v1/chat/completions, through what the server does before the engine: parse_request_json, the
// request parsers, and for text the tokenizer (completions) or the chat template and tokenizer
// (chat), with a small byte-level tokenizer that has ChatML's special tokens and a ChatML
// template that also prints request fields (a message's name, tool_calls and kwargs, by tojson).
// A refusal is an ApiError (parsing) or a telos::Error (the template); anything else escaping is
// a finding, as is a crash or undefined behaviour. Besides, every token id is in the vocabulary,
// and with special tokens in request text read as text (the chat default), the prompt holds
// exactly the special tokens of the template's own markup and decodes to the rendered text.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "executor/server/api_error.hpp"
#include "executor/server/openai_request.hpp"
#include "executor/tokenizer/byte_alphabet.hpp"
#include "executor/tokenizer/chat_template.hpp"
#include "executor/tokenizer/tokenizer.hpp"
#include "support/error.hpp"

namespace {

using nlohmann::json;
using nlohmann::ordered_json;
using telos::TokenId;
using telos::Tokenizer;

const char* const kSpecials[] = {"<|endoftext|>", "<|im_start|>", "<|im_end|>"};

// 256 byte tokens, a few merges, ChatML's special tokens and one added token that is not special.
Tokenizer make_tokenizer() {
  const telos::ByteAlphabet& alphabet = telos::byte_alphabet();
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) vocab[alphabet.spell(std::string(1, static_cast<char>(b)))] = b;
  json merges = json::array();
  for (const char* pair : {"h i", "e l", "el l", "ell o", "Ġ t", "Ġt h", "i m", "Ġ s"}) {
    const std::string p = pair;
    const std::string merged = p.substr(0, p.find(' ')) + p.substr(p.find(' ') + 1);
    vocab[merged] = static_cast<int>(vocab.size());
    merges.push_back(p);
  }
  json added = json::array();
  auto add = [&](const std::string& content, bool special) {
    added.push_back({{"id", static_cast<int>(vocab.size() + added.size())},
                     {"content", content},
                     {"single_word", false},
                     {"lstrip", false},
                     {"rstrip", false},
                     {"normalized", false},
                     {"special", special}});
  };
  for (const char* s : kSpecials) add(s, true);
  add("<think>", false);
  const json doc = {
      {"version", "1.0"},
      {"normalizer", nullptr},
      {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
      {"post_processor", {{"type", "ByteLevel"}}},
      {"decoder", {{"type", "ByteLevel"}}},
      {"added_tokens", added},
      {"model", {{"type", "BPE"}, {"dropout", nullptr}, {"vocab", vocab}, {"merges", merges}}}};
  return Tokenizer::from_json(doc, "fuzz-tokenizer.json");
}

// Two special tokens per message and one for the generation prompt, whatever the request holds.
const char* const kTemplate =
    "{%- for m in messages -%}"
    "<|im_start|>{{ m.role }}\n"
    "{%- if m.content is string and '</think>' in m.content -%}"
    "{{ m.content.split('</think>')[-1] | trim }}"
    "{%- else -%}{{ m.content }}{%- endif -%}"
    "{%- if m.name is defined %} ({{ m.name }}){% endif -%}"
    "{%- if m.tool_calls is defined %}{{ m.tool_calls | tojson }}{% endif -%}"
    "{%- if m.meta is defined and m.meta == messages[0].meta %}{{ m.meta }}{% endif -%}"
    "<|im_end|>\n"
    "{%- endfor -%}"
    "{%- if documents is defined %}{{ documents | tojson(indent=2) }}{% endif -%}"
    "{%- if hint is defined and hint | length > 0 %}{{ hint | string | upper }}{% endif -%}"
    "{%- if add_generation_prompt %}<|im_start|>assistant\n"
    "{%- if enable_thinking is defined and not enable_thinking %}<think>\n\n</think>\n\n"
    "{%- endif -%}{%- endif -%}";

struct Model {
  Tokenizer tokenizer = make_tokenizer();
  telos::ChatTemplate chat = telos::ChatTemplate::from_config_json(
      {{"chat_template", kTemplate}, {"eos_token", "<|im_end|>"}}, "fuzz-template");
  std::vector<TokenId> special_ids;
  Model() {
    for (const char* s : kSpecials) special_ids.push_back(*tokenizer.token_id(s));
  }
  int vocab_size() const { return static_cast<int>(tokenizer.vocab_size()); }
  std::size_t specials_in(const std::vector<TokenId>& ids) const {
    return static_cast<std::size_t>(std::count_if(ids.begin(), ids.end(), [&](TokenId id) {
      return std::find(special_ids.begin(), special_ids.end(), id) != special_ids.end();
    }));
  }
};

void check_ids(const Model& m, const std::vector<TokenId>& ids) {
  for (TokenId id : ids)
    if (id < 0 || id >= m.vocab_size()) std::abort();
}

void completion(const Model& m, const ordered_json& body) {
  telos::exec::ApiRequest r;
  try {
    r = telos::exec::parse_completion_request(body, "fuzz", m.vocab_size());
  } catch (const telos::exec::ApiError&) {
    return;
  }
  for (const telos::exec::PromptInput& p : r.prompts) {
    if (!p.text) continue;
    const auto specials =
        r.split_special_tokens ? Tokenizer::Specials::none : Tokenizer::Specials::parse;
    const std::vector<TokenId> ids = m.tokenizer.encode(*p.text, true, specials);
    check_ids(m, ids);
    if (r.split_special_tokens && m.specials_in(ids) != 0) std::abort();
  }
}

void chat(const Model& m, const ordered_json& body) {
  telos::exec::ApiRequest r;
  try {
    r = telos::exec::parse_chat_request(body, "fuzz", m.vocab_size());
  } catch (const telos::exec::ApiError&) {
    return;
  }
  std::vector<TokenId> ids;
  std::string text;
  try {
    ids = m.chat.encode(m.tokenizer, r.messages, r.add_generation_prompt, r.template_kwargs,
                        r.split_special_tokens);
    text = m.chat.render(r.messages, r.add_generation_prompt, r.template_kwargs);
  } catch (const telos::Error&) {
    return;  // the template refused these messages: a 400 naming the template's line
  }
  check_ids(m, ids);
  if (!r.split_special_tokens) return;
  if (m.specials_in(ids) != 2 * r.messages.size() + (r.add_generation_prompt ? 1 : 0)) std::abort();
  // Marking turns a U+FDD0 of the request's own into U+FFFD, which may change what the template
  // prints; without one the prompt decodes to exactly the rendered text.
  const bool own_marks = r.messages.dump().find(telos::kTextMark) != std::string::npos ||
                         r.template_kwargs.dump().find(telos::kTextMark) != std::string::npos;
  if (!own_marks && m.tokenizer.decode(ids, false) != text) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const Model model;
  ordered_json body;
  try {
    body = telos::exec::parse_request_json(
        std::string_view(reinterpret_cast<const char*>(data), size));
  } catch (const telos::exec::ApiError&) {
    return 0;
  }
  completion(model, body);
  chat(model, body);
  return 0;
}
