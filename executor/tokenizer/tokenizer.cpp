#include "executor/tokenizer/tokenizer.hpp"

#include <algorithm>
#include <array>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <queue>
#include <unordered_map>

#include "executor/tokenizer/byte_alphabet.hpp"
#include "executor/tokenizer/nfc.hpp"
#include "executor/tokenizer/split_regex.hpp"
#include "executor/tokenizer/utf8.hpp"
#include "support/error.hpp"

namespace telos {
namespace {

using nlohmann::json;

// --- Reading fields with errors that name them -----------------------------------------------

struct Reader {
  const std::string& origin;

  [[noreturn]] void bad(const std::string& field, const std::string& what) const {
    fail(origin + ": " + field + ": " + what);
  }
  const json& get(const json& obj, const std::string& field, const char* key) const {
    auto it = obj.find(key);
    if (it == obj.end()) bad(field + "." + key, "is missing");
    return *it;
  }
  const json& object(const json& obj, const std::string& field, const char* key) const {
    const json& v = get(obj, field, key);
    if (!v.is_object()) bad(field + "." + key, "must be an object");
    return v;
  }
  std::string string(const json& obj, const std::string& field, const char* key) const {
    const json& v = get(obj, field, key);
    if (!v.is_string()) bad(field + "." + key, "must be a string");
    return v.get<std::string>();
  }
  // A flag that may be absent (defaults to `otherwise`).
  bool flag(const json& obj, const std::string& field, const char* key, bool otherwise) const {
    auto it = obj.find(key);
    if (it == obj.end() || it->is_null()) return otherwise;
    if (!it->is_boolean()) bad(field + "." + key, "must be true or false");
    return it->get<bool>();
  }
  std::string type(const json& component, const std::string& field) const {
    if (!component.is_object()) bad(field, "must be an object");
    return string(component, field, "type");
  }
};

// The pattern ByteLevel applies when its use_regex is set (GPT-2's).
constexpr const char* kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

struct AddedToken {
  TokenId id;
  std::string content;
  bool special, lstrip, rstrip, normalized;
};

bool is_space_byte(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

// Finds added tokens in text, leftmost and then longest first (the order Hugging Face's
// matcher uses), candidates bucketed by first byte so text without them costs one lookup a byte.
class AddedTokenMatcher {
 public:
  void add(const AddedToken* token, std::string pattern) {
    if (pattern.empty()) return;
    auto& bucket = by_first_byte_[static_cast<unsigned char>(pattern[0])];
    bucket.push_back({token, std::move(pattern)});
    std::stable_sort(bucket.begin(), bucket.end(), [](const Entry& a, const Entry& b) {
      return a.pattern.size() > b.pattern.size();
    });
  }
  // Calls on_text(piece) for stretches without tokens and on_token(token) for each match, in order.
  // `specials` says where special tokens may match (where one may not, a shorter token that is
  // not special still may).
  template <typename OnText, typename OnToken>
  void split(std::string_view text, Tokenizer::Specials specials, OnText&& on_text,
             OnToken&& on_token) const {
    std::size_t text_start = 0, at = 0;
    while (at < text.size()) {
      const bool no_special =
          specials == Tokenizer::Specials::none ||
          (specials == Tokenizer::Specials::except_marked && at >= kTextMark.size() &&
           text.compare(at - kTextMark.size(), kTextMark.size(), kTextMark) == 0);
      const Entry* hit = nullptr;
      for (const Entry& e : by_first_byte_[static_cast<unsigned char>(text[at])]) {
        if (no_special && e.token->special) continue;
        if (text.compare(at, e.pattern.size(), e.pattern) == 0) {
          hit = &e;
          break;
        }
      }
      if (hit == nullptr) {
        ++at;
        continue;
      }
      std::size_t begin = at, end = at + hit->pattern.size();
      // lstrip/rstrip: the token swallows the whitespace next to it.
      if (hit->token->lstrip)
        while (begin > text_start && is_space_byte(text[begin - 1])) --begin;
      if (hit->token->rstrip)
        while (end < text.size() && is_space_byte(text[end])) ++end;
      if (begin > text_start) on_text(text.substr(text_start, begin - text_start));
      on_token(*hit->token);
      text_start = at = end;
    }
    if (text_start < text.size()) on_text(text.substr(text_start));
  }
  // Whether some token's pattern begins at text[at].
  bool starts_at(std::string_view text, std::size_t at) const {
    for (const Entry& e : by_first_byte_[static_cast<unsigned char>(text[at])])
      if (text.compare(at, e.pattern.size(), e.pattern) == 0) return true;
    return false;
  }

 private:
  struct Entry {
    const AddedToken* token;
    std::string pattern;
  };
  std::array<std::vector<Entry>, 256> by_first_byte_;
};

// Ids index dense tables, so a corrupt id must not size them: real vocabularies stay far below
// this (Llama 3: 128k, Qwen: 152k).
constexpr std::int64_t kMaxTokenId = (1 << 24) - 1;

bool valid_id(const json& id) {
  return id.is_number_integer() && id.get<std::int64_t>() >= 0 &&
         id.get<std::int64_t>() <= kMaxTokenId;
}

// SentencePiece's word marker, U+2581 LOWER ONE EIGHTH BLOCK.
constexpr std::string_view kWordMarker = "\xE2\x96\x81";

std::size_t leading_marker_run(std::string_view s) {
  std::size_t at = 0;
  while (s.compare(at, kWordMarker.size(), kWordMarker) == 0) at += kWordMarker.size();
  return at;
}

std::uint64_t pair_key(TokenId left, TokenId right) {
  return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(left)) << 32) |
         static_cast<std::uint32_t>(right);
}

struct Merge {
  std::int32_t rank;
  TokenId merged;
};

}  // namespace

struct Tokenizer::Impl {
  std::string origin;

  // Normalizer steps, in order: NFC (Qwen), or Prepend + Replace (SentencePiece-style files).
  struct NormalizerStep {
    enum class Kind { nfc, prepend, replace } kind;
    std::string text, replacement;
  };
  std::vector<NormalizerStep> normalizers;

  // Pre-tokenizer: Split regexes applied in order, then ByteLevel's own options.
  std::vector<std::unique_ptr<SplitRegex>> splits;
  bool prefix_space = false;
  std::unique_ptr<SplitRegex> byte_level_regex;

  // Byte-level BPE (GPT-2 style: symbols are bytes, vocab spelled in ByteAlphabet) when the
  // pre-tokenizer has a ByteLevel step; otherwise character BPE (SentencePiece style: symbols
  // are characters, unknown ones fall back to <0xXX> byte tokens or unk).
  bool byte_level = false;
  bool byte_fallback = false, fuse_unk = false;
  // Character BPE: true when no token has "▁" after a non-"▁" character (SentencePiece trains
  // with split_by_whitespace). No merge can then cross the start of a "▁" run, so text is cut
  // there into words that are encoded and cached separately: the same ids, far less work on
  // long prompts than one BPE over the whole text.
  bool cut_at_word_marker = false;
  std::optional<TokenId> unk;

  // BPE model. Keys are the bytes a token stands for (byte-level; decoded once at load) or its
  // spelling (character BPE).
  std::unordered_map<std::string, TokenId> vocab;
  std::vector<std::string> bytes_of;  // id -> what it decodes to; added tokens hold their content
  std::vector<char> known;            // id -> present in the file
  std::array<TokenId, 256> byte_token{};  // byte -> its token (byte-level, or <0xXX>; -1: none)
  std::unordered_map<std::uint64_t, Merge> merges;
  bool ignore_merges = false;

  std::vector<std::unique_ptr<AddedToken>> added;
  std::vector<char> special;  // id -> added token marked special
  std::unordered_map<std::string, TokenId> added_by_content;
  AddedTokenMatcher raw_matcher, normalized_matcher;
  AddedTokenMatcher special_spellings;  // special tokens by their written content (mark_as_text)

  std::vector<TokenId> prefix, suffix;  // post-processor template around a single sequence

  // Decoder of character BPE: Replace steps on token spellings (e.g. "▁" -> " "), and a Strip
  // of leading characters from the decoded text (SentencePiece's prepended space).
  std::vector<std::pair<std::string, std::string>> decode_replace;
  bool decode_byte_fallback = false;
  std::string strip_content;
  std::size_t strip_start = 0;

  mutable std::mutex cache_mutex;
  mutable std::unordered_map<std::string, std::vector<TokenId>> word_cache;

  void load_normalizer(const json& doc, const Reader& r);
  void load_pre_tokenizer(const json& doc, const Reader& r);
  void load_model(const json& doc, const Reader& r);
  void load_added_tokens(const json& doc, const Reader& r);
  void load_post_processor(const json& doc, const Reader& r);
  void load_decoder(const json& doc, const Reader& r);

  std::string normalize(std::string_view text) const;
  std::string decoded_spelling(const std::string& spelling) const;
  // The decoder's Strip: removes up to `left` copies of strip_content from the start of the
  // decoded text; `left` counts down across calls so a stream strips like a whole decode.
  void strip_leading(std::string& text, std::size_t& left) const {
    while (left > 0 && !text.empty()) {
      if (text.rfind(strip_content, 0) != 0 || strip_content.empty()) {
        left = 0;
        return;
      }
      text.erase(0, strip_content.size());
      --left;
    }
  }
  void encode_text(std::string_view text, std::vector<TokenId>& out) const;
  void encode_word(std::string_view word, std::vector<TokenId>& out) const;
  std::vector<TokenId> initial_symbols(std::string_view word) const;
  std::vector<TokenId> bpe(std::string_view word) const;
  void check_id(TokenId id) const {
    if (id < 0 || static_cast<std::size_t>(id) >= known.size() || !known[id])
      fail(origin + ": token id " + std::to_string(id) + " is not in the vocabulary");
  }
};

void Tokenizer::Impl::load_normalizer(const json& doc, const Reader& r) {
  auto it = doc.find("normalizer");
  if (it == doc.end() || it->is_null()) return;
  std::vector<std::pair<const json*, std::string>> steps{{&*it, "normalizer"}};
  if (r.type(*it, "normalizer") == "Sequence") {
    steps.clear();
    const json& list = r.get(*it, "normalizer", "normalizers");
    if (!list.is_array()) r.bad("normalizer.normalizers", "must be an array");
    for (std::size_t i = 0; i < list.size(); ++i)
      steps.emplace_back(&list[i], "normalizer.normalizers[" + std::to_string(i) + "]");
  }
  for (auto& [step, field] : steps) {
    const std::string type = r.type(*step, field);
    if (type == "NFC") {
      normalizers.push_back({NormalizerStep::Kind::nfc, "", ""});
    } else if (type == "Prepend") {
      normalizers.push_back({NormalizerStep::Kind::prepend, r.string(*step, field, "prepend"), ""});
    } else if (type == "Replace") {
      const json& pattern = r.object(*step, field, "pattern");
      if (!pattern.contains("String"))
        r.bad(field + ".pattern", "only a {\"String\": ...} pattern is supported");
      normalizers.push_back({NormalizerStep::Kind::replace,
                             r.string(pattern, field + ".pattern", "String"),
                             r.string(*step, field, "content")});
      if (normalizers.back().text.empty()) r.bad(field + ".pattern.String", "must not be empty");
    } else {
      r.bad(field + ".type", "'" + type + "' is not supported (NFC, Prepend and Replace are)");
    }
  }
}

std::string Tokenizer::Impl::normalize(std::string_view text) const {
  std::string s(text);
  for (const NormalizerStep& step : normalizers) {
    switch (step.kind) {
      case NormalizerStep::Kind::nfc:
        s = to_nfc(s);
        break;
      case NormalizerStep::Kind::prepend:
        // Hugging Face prepends only to non-empty text.
        if (!s.empty()) s = step.text + s;
        break;
      case NormalizerStep::Kind::replace: {
        std::string out;
        std::size_t from = 0, at;
        while ((at = s.find(step.text, from)) != std::string::npos) {
          out.append(s, from, at - from);
          out += step.replacement;
          from = at + step.text.size();
        }
        out.append(s, from);
        s = std::move(out);
        break;
      }
    }
  }
  return s;
}

void Tokenizer::Impl::load_pre_tokenizer(const json& doc, const Reader& r) {
  const json& pre = r.get(doc, "tokenizer.json", "pre_tokenizer");
  // No pre-tokenizer: each stretch of text is one word (SentencePiece-style files).
  if (pre.is_null()) return;
  std::vector<std::pair<const json*, std::string>> steps{{&pre, "pre_tokenizer"}};
  if (r.type(pre, "pre_tokenizer") == "Sequence") {
    steps.clear();
    const json& list = r.get(pre, "pre_tokenizer", "pretokenizers");
    if (!list.is_array()) r.bad("pre_tokenizer.pretokenizers", "must be an array");
    for (std::size_t i = 0; i < list.size(); ++i)
      steps.emplace_back(&list[i], "pre_tokenizer.pretokenizers[" + std::to_string(i) + "]");
  }
  for (auto& [step, field] : steps) {
    const std::string type = r.type(*step, field);
    if (byte_level) r.bad(field, "'" + type + "' after ByteLevel is not supported");
    if (type == "Split") {
      const std::string behavior = r.string(*step, field, "behavior");
      if (behavior != "Isolated")
        r.bad(field + ".behavior", "'" + behavior + "' is not supported (only Isolated is)");
      if (r.flag(*step, field, "invert", false)) r.bad(field + ".invert", "true is not supported");
      const json& pattern = r.object(*step, field, "pattern");
      if (pattern.contains("Regex")) {
        splits.push_back(
            std::make_unique<SplitRegex>(r.string(pattern, field + ".pattern", "Regex"), false,
                                         origin + ": " + field + ".pattern.Regex"));
      } else if (pattern.contains("String")) {
        splits.push_back(
            std::make_unique<SplitRegex>(r.string(pattern, field + ".pattern", "String"), true,
                                         origin + ": " + field + ".pattern.String"));
      } else {
        r.bad(field + ".pattern", "must hold \"Regex\" or \"String\"");
      }
    } else if (type == "ByteLevel") {
      byte_level = true;
      prefix_space = r.flag(*step, field, "add_prefix_space", false);
      if (r.flag(*step, field, "use_regex", true))
        byte_level_regex = std::make_unique<SplitRegex>(kGpt2Pattern, false, origin + ": " + field);
    } else {
      r.bad(field + ".type", "'" + type + "' is not supported (Split and ByteLevel are)");
    }
  }
}

void Tokenizer::Impl::load_model(const json& doc, const Reader& r) {
  const json& model = r.object(doc, "tokenizer.json", "model");
  const std::string type = r.type(model, "model");
  if (type != "BPE") r.bad("model.type", "'" + type + "' is not supported (only BPE is)");
  byte_fallback = r.flag(model, "model", "byte_fallback", false);
  if (byte_fallback && byte_level)
    r.bad("model.byte_fallback", "true is not supported with a ByteLevel pre_tokenizer");
  fuse_unk = r.flag(model, "model", "fuse_unk", false);
  if (auto it = model.find("dropout"); it != model.end() && !it->is_null())
    r.bad("model.dropout", "must be null (dropout is for training)");
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    auto it = model.find(key);
    if (it != model.end() && !it->is_null() && !(it->is_string() && it->get<std::string>().empty()))
      r.bad(std::string("model.") + key, "must be empty (word-piece markers are not supported)");
  }
  ignore_merges = r.flag(model, "model", "ignore_merges", false);

  const ByteAlphabet& alphabet = byte_alphabet();
  const json& vocab_json = r.object(model, "model", "vocab");
  std::unordered_map<std::string, TokenId> by_spelling;
  by_spelling.reserve(vocab_json.size());
  vocab.reserve(vocab_json.size());
  cut_at_word_marker = !byte_level;
  for (auto& [spelling, id_json] : vocab_json.items()) {
    if (!valid_id(id_json))
      r.bad("model.vocab[\"" + spelling + "\"]",
            "must be an integer id in [0, " + std::to_string(kMaxTokenId) + "]");
    const auto id = id_json.get<TokenId>();
    if (static_cast<std::size_t>(id) >= bytes_of.size()) {
      bytes_of.resize(static_cast<std::size_t>(id) + 1);
      known.resize(static_cast<std::size_t>(id) + 1, 0);
    }
    if (known[id])
      r.bad("model.vocab[\"" + spelling + "\"]", "id " + std::to_string(id) + " is used twice");
    known[id] = 1;
    by_spelling.emplace(spelling, id);
    if (!byte_level) {
      const std::size_t run = leading_marker_run(spelling);
      if (spelling.find(kWordMarker, run) != std::string::npos) cut_at_word_marker = false;
      vocab.emplace(spelling, id);
      bytes_of[id] = decoded_spelling(spelling);
    } else if (auto bytes = alphabet.unspell(spelling)) {
      vocab.emplace(*bytes, id);
      bytes_of[id] = std::move(*bytes);
    } else {
      bytes_of[id] = spelling;
    }
  }
  for (unsigned b = 0; b < 256; ++b) {
    if (!byte_level) {
      char name[8];
      std::snprintf(name, sizeof name, "<0x%02X>", b);
      auto it = by_spelling.find(name);
      const bool present = it != by_spelling.end();
      byte_token[b] = byte_fallback && present ? it->second : -1;
      if (present && decode_byte_fallback)
        bytes_of[it->second] = std::string(1, static_cast<char>(b));
      continue;
    }
    auto it = vocab.find(std::string(1, static_cast<char>(b)));
    if (it == vocab.end())
      r.bad("model.vocab", "has no entry for byte " + std::to_string(b) + " (\"" +
                               alphabet.spell(std::string(1, static_cast<char>(b))) + "\")");
    byte_token[b] = it->second;
  }
  if (auto it = model.find("unk_token"); it != model.end() && !it->is_null()) {
    if (!it->is_string()) r.bad("model.unk_token", "must be a string or null");
    auto found = by_spelling.find(it->get<std::string>());
    if (found == by_spelling.end())
      r.bad("model.unk_token", "\"" + it->get<std::string>() + "\" is not in model.vocab");
    unk = found->second;
  }

  const json& merge_list = r.get(model, "model", "merges");
  if (!merge_list.is_array()) r.bad("model.merges", "must be an array");
  merges.reserve(merge_list.size());
  for (std::size_t rank = 0; rank < merge_list.size(); ++rank) {
    const json& m = merge_list[rank];
    const std::string field = "model.merges[" + std::to_string(rank) + "]";
    std::string left, right;
    // Older files write "a b"; newer ones ["a", "b"] (which allows spaces inside tokens).
    if (m.is_string()) {
      const std::string s = m.get<std::string>();
      const std::size_t space = s.find(' ');
      if (space == std::string::npos || s.find(' ', space + 1) != std::string::npos)
        r.bad(field, "\"" + s + "\" must be two tokens separated by one space");
      left = s.substr(0, space);
      right = s.substr(space + 1);
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      left = m[0].get<std::string>();
      right = m[1].get<std::string>();
    } else {
      r.bad(field, "must be \"a b\" or [\"a\", \"b\"]");
    }
    auto find = [&](const std::string& spelling) {
      auto it = by_spelling.find(spelling);
      if (it == by_spelling.end()) r.bad(field, "token \"" + spelling + "\" is not in model.vocab");
      return it->second;
    };
    const TokenId a = find(left), b = find(right), merged = find(left + right);
    // The first (highest-priority) occurrence of a pair wins, as in Hugging Face's loader.
    merges.try_emplace(pair_key(a, b), Merge{static_cast<std::int32_t>(rank), merged});
  }
}

void Tokenizer::Impl::load_added_tokens(const json& doc, const Reader& r) {
  auto it = doc.find("added_tokens");
  if (it == doc.end() || it->is_null()) return;
  if (!it->is_array()) r.bad("added_tokens", "must be an array");
  for (std::size_t i = 0; i < it->size(); ++i) {
    const json& t = (*it)[i];
    const std::string field = "added_tokens[" + std::to_string(i) + "]";
    if (!t.is_object()) r.bad(field, "must be an object");
    const json& id_json = r.get(t, field, "id");
    if (!valid_id(id_json))
      r.bad(field + ".id", "must be an integer id in [0, " + std::to_string(kMaxTokenId) + "]");
    auto token = std::make_unique<AddedToken>();
    token->id = id_json.get<TokenId>();
    token->content = r.string(t, field, "content");
    if (token->content.empty()) r.bad(field + ".content", "must not be empty");
    if (utf8::first_invalid(token->content) != token->content.size())
      r.bad(field + ".content", "is not valid UTF-8");
    token->special = r.flag(t, field, "special", false);
    token->lstrip = r.flag(t, field, "lstrip", false);
    token->rstrip = r.flag(t, field, "rstrip", false);
    token->normalized = r.flag(t, field, "normalized", !token->special);
    if (r.flag(t, field, "single_word", false))
      r.bad(field + ".single_word", "true is not supported");
    const auto id = static_cast<std::size_t>(token->id);
    if (id >= bytes_of.size()) {
      bytes_of.resize(id + 1);
      known.resize(id + 1, 0);
    }
    // An added token may repeat a vocab entry (same id); its written content is what decodes.
    known[id] = 1;
    bytes_of[id] = token->content;
    if (special.size() <= id) special.resize(id + 1, 0);
    special[id] = token->special;
    added_by_content[token->content] = token->id;
    if (token->normalized)
      normalized_matcher.add(token.get(), normalize(token->content));
    else
      raw_matcher.add(token.get(), token->content);
    if (token->special) special_spellings.add(token.get(), token->content);
    added.push_back(std::move(token));
  }
}

void Tokenizer::Impl::load_post_processor(const json& doc, const Reader& r) {
  auto it = doc.find("post_processor");
  if (it == doc.end() || it->is_null()) return;
  std::vector<std::pair<const json*, std::string>> steps{{&*it, "post_processor"}};
  if (r.type(*it, "post_processor") == "Sequence") {
    steps.clear();
    const json& list = r.get(*it, "post_processor", "processors");
    if (!list.is_array()) r.bad("post_processor.processors", "must be an array");
    for (std::size_t i = 0; i < list.size(); ++i)
      steps.emplace_back(&list[i], "post_processor.processors[" + std::to_string(i) + "]");
  }
  for (auto& [step, field] : steps) {
    const std::string type = r.type(*step, field);
    // ByteLevel post-processing only adjusts offsets, which Telos does not report.
    if (type == "ByteLevel") continue;
    if (type != "TemplateProcessing")
      r.bad(field + ".type",
            "'" + type + "' is not supported (ByteLevel and TemplateProcessing are)");
    const json& single = r.get(*step, field, "single");
    const json& specials = r.get(*step, field, "special_tokens");
    if (!single.is_array()) r.bad(field + ".single", "must be an array");
    bool seen_sequence = false;
    for (std::size_t i = 0; i < single.size(); ++i) {
      const std::string piece_field = field + ".single[" + std::to_string(i) + "]";
      const json& piece = single[i];
      if (piece.is_object() && piece.contains("Sequence")) {
        seen_sequence = true;
      } else if (piece.is_object() && piece.contains("SpecialToken")) {
        const std::string name =
            r.string(piece["SpecialToken"], piece_field + ".SpecialToken", "id");
        auto sp = specials.find(name);
        if (sp == specials.end() || !sp->is_object() || !sp->contains("ids") ||
            !(*sp)["ids"].is_array())
          r.bad(field + ".special_tokens", "has no ids for \"" + name + "\"");
        for (const json& id : (*sp)["ids"]) {
          if (!id.is_number_integer())
            r.bad(field + ".special_tokens[\"" + name + "\"].ids", "must be integers");
          (seen_sequence ? suffix : prefix).push_back(id.get<TokenId>());
        }
      } else {
        r.bad(piece_field, "must be {\"Sequence\": ...} or {\"SpecialToken\": ...}");
      }
    }
  }
  for (TokenId id : prefix) check_id(id);
  for (TokenId id : suffix) check_id(id);
}

void Tokenizer::Impl::load_decoder(const json& doc, const Reader& r) {
  const json& decoder = r.get(doc, "tokenizer.json", "decoder");
  const std::string type = r.type(decoder, "decoder");
  if (byte_level) {
    if (type != "ByteLevel")
      r.bad("decoder.type",
            "'" + type + "' is not supported with a ByteLevel pre_tokenizer (ByteLevel is)");
    return;
  }
  // Character BPE: SentencePiece's decoder chain, Replace("▁", " "), ByteFallback, Fuse, Strip.
  std::vector<std::pair<const json*, std::string>> steps{{&decoder, "decoder"}};
  if (type == "Sequence") {
    steps.clear();
    const json& list = r.get(decoder, "decoder", "decoders");
    if (!list.is_array()) r.bad("decoder.decoders", "must be an array");
    for (std::size_t i = 0; i < list.size(); ++i)
      steps.emplace_back(&list[i], "decoder.decoders[" + std::to_string(i) + "]");
  }
  for (auto& [step, field] : steps) {
    const std::string t = r.type(*step, field);
    if (t == "ByteLevel")
      r.bad(field + ".type", "'ByteLevel' needs a ByteLevel step in the pre_tokenizer");
    if (t == "Replace") {
      const json& pattern = r.object(*step, field, "pattern");
      if (!pattern.contains("String"))
        r.bad(field + ".pattern", "only a {\"String\": ...} pattern is supported");
      decode_replace.emplace_back(r.string(pattern, field + ".pattern", "String"),
                                  r.string(*step, field, "content"));
      if (decode_replace.back().first.empty())
        r.bad(field + ".pattern.String", "must not be empty");
    } else if (t == "ByteFallback") {
      decode_byte_fallback = true;
    } else if (t == "Fuse") {
      // Decoding concatenates tokens anyway.
    } else if (t == "Strip") {
      strip_content = r.string(*step, field, "content");
      const json& start = r.get(*step, field, "start");
      const json& stop = r.get(*step, field, "stop");
      if (!start.is_number_integer() || start.get<std::int64_t>() < 0 ||
          start.get<std::int64_t>() > 8)
        r.bad(field + ".start", "must be a small non-negative integer");
      if (!stop.is_number_integer() || stop.get<std::int64_t>() != 0)
        r.bad(field + ".stop", "only 0 is supported");
      strip_start = start.get<std::size_t>();
    } else {
      r.bad(
          field + ".type",
          "'" + t + "' is not supported (ByteLevel, or Replace, ByteFallback, Fuse and Strip are)");
    }
  }
}

std::string Tokenizer::Impl::decoded_spelling(const std::string& spelling) const {
  std::string s = spelling;
  for (auto& [from, to] : decode_replace) {
    std::string out;
    std::size_t start = 0, at;
    while ((at = s.find(from, start)) != std::string::npos) {
      out.append(s, start, at - start);
      out += to;
      start = at + from.size();
    }
    out.append(s, start);
    s = std::move(out);
  }
  return s;
}

std::vector<TokenId> Tokenizer::Impl::initial_symbols(std::string_view word) const {
  std::vector<TokenId> ids;
  ids.reserve(word.size());
  if (byte_level) {
    for (unsigned char b : word) ids.push_back(byte_token[b]);
    return ids;
  }
  bool last_unknown = false;
  for (std::size_t at = 0; at < word.size();) {
    const std::size_t length = utf8::scan(word, at).length;
    const std::string_view character = word.substr(at, length);
    at += length;
    if (auto it = vocab.find(std::string(character)); it != vocab.end()) {
      ids.push_back(it->second);
      last_unknown = false;
      continue;
    }
    if (byte_fallback && std::all_of(character.begin(), character.end(), [&](char c) {
          return byte_token[static_cast<unsigned char>(c)] >= 0;
        })) {
      for (unsigned char c : character) ids.push_back(byte_token[c]);
      last_unknown = false;
      continue;
    }
    if (!unk)
      fail(origin + ": \"" + std::string(character) +
           "\" is not in the vocabulary and the model has no unk_token");
    if (!(fuse_unk && last_unknown)) ids.push_back(*unk);
    last_unknown = true;
  }
  return ids;
}

std::vector<TokenId> Tokenizer::Impl::bpe(std::string_view word) const {
  struct Symbol {
    TokenId id;
    int prev, next;
    bool alive;
  };
  const std::vector<TokenId> start = initial_symbols(word);
  std::vector<Symbol> symbols(start.size());
  for (std::size_t i = 0; i < start.size(); ++i)
    symbols[i] = {start[i], static_cast<int>(i) - 1,
                  i + 1 < start.size() ? static_cast<int>(i) + 1 : -1, true};
  // Lowest rank first, leftmost among equal ranks: the order in which merges apply. Stale
  // entries (a side already merged away) are recognised by their ids and skipped.
  struct Candidate {
    std::int32_t rank;
    int left;
    TokenId left_id, right_id;
    bool operator>(const Candidate& o) const {
      return rank != o.rank ? rank > o.rank : left > o.left;
    }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> queue;
  auto consider = [&](int left) {
    if (left < 0) return;
    const int right = symbols[left].next;
    if (right < 0) return;
    auto it = merges.find(pair_key(symbols[left].id, symbols[right].id));
    if (it != merges.end())
      queue.push({it->second.rank, left, symbols[left].id, symbols[right].id});
  };
  for (int i = 0; i + 1 < static_cast<int>(symbols.size()); ++i) consider(i);
  while (!queue.empty()) {
    const Candidate c = queue.top();
    queue.pop();
    Symbol& left = symbols[c.left];
    if (!left.alive || left.id != c.left_id || left.next < 0) continue;
    Symbol& right = symbols[left.next];
    if (right.id != c.right_id) continue;
    left.id = merges.at(pair_key(c.left_id, c.right_id)).merged;
    right.alive = false;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = c.left;
    consider(left.prev);
    consider(c.left);
  }
  std::vector<TokenId> ids;
  for (int i = 0; i >= 0 && i < static_cast<int>(symbols.size()); i = symbols[i].next)
    ids.push_back(symbols[i].id);
  return ids;
}

void Tokenizer::Impl::encode_word(std::string_view word, std::vector<TokenId>& out) const {
  if (ignore_merges) {
    if (auto it = vocab.find(std::string(word)); it != vocab.end()) {
      out.push_back(it->second);
      return;
    }
  }
  // Long words (whitespace runs, minified code) are rare and would crowd the cache.
  constexpr std::size_t kCachedWordBytes = 64, kCacheEntries = 1 << 16;
  if (word.size() > kCachedWordBytes) {
    const std::vector<TokenId> ids = bpe(word);
    out.insert(out.end(), ids.begin(), ids.end());
    return;
  }
  std::string key(word);
  {
    std::lock_guard lock(cache_mutex);
    if (auto it = word_cache.find(key); it != word_cache.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  std::vector<TokenId> ids = bpe(word);
  out.insert(out.end(), ids.begin(), ids.end());
  std::lock_guard lock(cache_mutex);
  if (word_cache.size() >= kCacheEntries) word_cache.clear();
  word_cache.emplace(std::move(key), std::move(ids));
}

void Tokenizer::Impl::encode_text(std::string_view text, std::vector<TokenId>& out) const {
  // Split steps each refine the previous step's pieces; then ByteLevel (which may add a space
  // to and split each piece itself) and BPE per piece.
  std::vector<std::string_view> pieces{text};
  for (const auto& split : splits) {
    std::vector<std::string_view> next;
    for (std::string_view piece : pieces) split->split_isolated(piece, next);
    pieces = std::move(next);
  }
  std::vector<std::string_view> words;
  for (std::string_view piece : pieces) {
    std::string prefixed;
    if (prefix_space && piece[0] != ' ') {
      prefixed = " " + std::string(piece);
      piece = prefixed;
    }
    if (cut_at_word_marker) {
      // Cut before each "▁" run that follows another character.
      std::size_t start = 0, at = 0;
      while ((at = piece.find(kWordMarker, at)) != std::string_view::npos) {
        const bool after_marker =
            at >= kWordMarker.size() &&
            piece.compare(at - kWordMarker.size(), kWordMarker.size(), kWordMarker) == 0;
        if (at > start && !after_marker) {
          encode_word(piece.substr(start, at - start), out);
          start = at;
        }
        at += kWordMarker.size();
      }
      encode_word(piece.substr(start), out);
      continue;
    }
    if (!byte_level_regex) {
      encode_word(piece, out);
      continue;
    }
    words.clear();
    byte_level_regex->split_isolated(piece, words);
    for (std::string_view word : words) encode_word(word, out);
  }
}

Tokenizer Tokenizer::from_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(path + ": cannot open tokenizer file");
  json doc;
  try {
    doc = json::parse(in);
  } catch (const json::exception& e) {
    fail(path + ": not valid JSON: " + e.what());
  }
  return from_json(doc, path);
}

Tokenizer Tokenizer::from_json(const json& doc, const std::string& origin) {
  auto impl = std::make_unique<Impl>();
  impl->origin = origin;
  const Reader r{impl->origin};
  if (!doc.is_object()) r.bad("tokenizer.json", "must be a JSON object");
  // Order matters: added tokens marked "normalized" are matched in normalized form.
  impl->load_normalizer(doc, r);
  impl->load_pre_tokenizer(doc, r);
  impl->load_decoder(doc, r);  // the model's decoded spellings depend on it
  impl->load_model(doc, r);
  impl->load_added_tokens(doc, r);
  impl->load_post_processor(doc, r);
  impl->special.resize(impl->known.size(), 0);
  return Tokenizer(std::move(impl));
}

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

std::vector<TokenId> Tokenizer::encode(std::string_view text, bool add_special_tokens,
                                       Specials specials) const {
  if (const std::size_t bad = utf8::first_invalid(text); bad != text.size())
    fail("tokenizer: text to encode is not valid UTF-8 (at byte " + std::to_string(bad) + ")");
  const Impl& m = *impl_;
  const bool marked = specials == Specials::except_marked;
  std::vector<TokenId> ids;
  ids.reserve(text.size() / 3 + m.prefix.size() + m.suffix.size() + 8);
  if (add_special_tokens) ids.insert(ids.end(), m.prefix.begin(), m.prefix.end());
  auto push_token = [&](const AddedToken& t) { ids.push_back(t.id); };
  // Marks stay in the text while tokens are matched (they keep the spelling after them from
  // matching) and leave it before pre-tokenization, so the text around them encodes as if they
  // were never there.
  auto push_text = [&](std::string_view piece) {
    if (!marked || piece.find(kTextMark) == std::string_view::npos) {
      m.encode_text(piece, ids);
      return;
    }
    std::string plain;
    for (std::size_t from = 0, at; from < piece.size(); from = at + kTextMark.size()) {
      at = std::min(piece.find(kTextMark, from), piece.size());
      plain.append(piece.substr(from, at - from));
    }
    if (!plain.empty()) m.encode_text(plain, ids);
  };
  // Tokens written verbatim are found first, in the raw text; the stretches between them are
  // normalized and searched again for tokens that are matched in normalized form.
  m.raw_matcher.split(
      text, specials,
      [&](std::string_view stretch) {
        const std::string normal = m.normalize(stretch);
        m.normalized_matcher.split(normal, specials, push_text, push_token);
      },
      push_token);
  if (add_special_tokens) ids.insert(ids.end(), m.suffix.begin(), m.suffix.end());
  return ids;
}

std::string Tokenizer::mark_as_text(std::string_view text) const {
  constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD
  std::string out;
  out.reserve(text.size() + 16);
  for (std::size_t at = 0; at < text.size(); ++at) {
    if (text.compare(at, kTextMark.size(), kTextMark) == 0) {
      out += kReplacement;
      at += kTextMark.size() - 1;
      continue;
    }
    // Every start, not only the leftmost-longest match: a spelling that begins inside another
    // is marked too, so no special token can match anywhere in the text.
    if (impl_->special_spellings.starts_at(text, at)) out += kTextMark;
    out += text[at];
  }
  return out;
}

std::string_view Tokenizer::token_bytes(TokenId id) const {
  impl_->check_id(id);
  return impl_->bytes_of[static_cast<std::size_t>(id)];
}

std::string Tokenizer::decode(const std::vector<TokenId>& ids, bool skip_special) const {
  std::string bytes;
  for (TokenId id : ids) {
    if (skip_special && is_special(id)) continue;
    bytes += token_bytes(id);
  }
  std::string text;
  text.reserve(bytes.size());
  const std::size_t done = append_complete_utf8(bytes, text);
  if (done < bytes.size()) text += utf8::replacement;
  std::size_t strip = impl_->strip_start;
  impl_->strip_leading(text, strip);
  return text;
}

std::optional<TokenId> Tokenizer::token_id(std::string_view token) const {
  if (auto it = impl_->added_by_content.find(std::string(token));
      it != impl_->added_by_content.end())
    return it->second;
  if (auto bytes = byte_alphabet().unspell(token)) {
    if (auto it = impl_->vocab.find(*bytes); it != impl_->vocab.end()) return it->second;
  }
  return std::nullopt;
}

bool Tokenizer::is_special(TokenId id) const {
  impl_->check_id(id);
  return impl_->special[static_cast<std::size_t>(id)] != 0;
}

std::size_t Tokenizer::vocab_size() const {
  return impl_->known.size();
}

std::size_t append_complete_utf8(std::string_view bytes, std::string& out) {
  std::size_t at = 0;
  while (at < bytes.size()) {
    const utf8::Sequence s = utf8::scan(bytes, at);
    if (s.scan == utf8::Scan::incomplete) break;
    if (s.scan == utf8::Scan::complete)
      out.append(bytes.substr(at, s.length));
    else
      out += utf8::replacement;
    at += s.length;
  }
  return at;
}

IncrementalDecoder::IncrementalDecoder(const Tokenizer& tokenizer, bool skip_special)
    : tokenizer_(&tokenizer),
      skip_special_(skip_special),
      strip_left_(tokenizer.impl_->strip_start) {}

std::string IncrementalDecoder::push(TokenId id) {
  std::string text;
  if (skip_special_ && tokenizer_->is_special(id)) return text;
  pending_ += tokenizer_->token_bytes(id);
  pending_.erase(0, append_complete_utf8(pending_, text));
  tokenizer_->impl_->strip_leading(text, strip_left_);
  return text;
}

std::string IncrementalDecoder::finish() {
  std::string text;
  if (!pending_.empty()) text = utf8::replacement;
  pending_.clear();
  return text;
}

}  // namespace telos
