#pragma once
// BPE tokenizer loaded from a Hugging Face tokenizer.json: byte-level (Llama 3, Qwen2/2.5/3) or
// SentencePiece-style character BPE with byte fallback (Llama 2, Mistral 7B v0.1). Only the
// components those files use are accepted (NFC/Prepend/Replace normalizers, Split-regex +
// ByteLevel pre-tokenizer, BPE model, ByteLevel or Replace/ByteFallback/Fuse/Strip decoder,
// ByteLevel/TemplateProcessing post-processor); anything else is refused with an Error naming
// the field, so a model we would tokenize wrongly never loads.
#include <cstdint>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace telos {

using TokenId = std::int32_t;

// U+FDD0, a Unicode noncharacter (reserved for internal use, never a character of text): see
// Tokenizer::mark_as_text.
inline constexpr std::string_view kTextMark = "\xEF\xB7\x90";

class Tokenizer {
 public:
  // Reads and validates `path` (a tokenizer.json); errors name the path and the field.
  static Tokenizer from_file(const std::string& path);
  // Same from an already parsed document; `origin` names it in errors.
  static Tokenizer from_json(const nlohmann::json& doc, const std::string& origin);

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  // Where encode() matches special tokens written in the text: everywhere; nowhere (each is
  // encoded as the text it spells: Hugging Face's split_special_tokens); or everywhere except
  // right after kTextMark (see mark_as_text), in which case the marks themselves are dropped.
  // Added tokens that are not special are matched in every mode.
  enum class Specials { parse, none, except_marked };

  // Added and special tokens written in `text` (e.g. "<|im_start|>") become their ids; the rest
  // is normalized, pre-tokenized and BPE-encoded. `add_special_tokens` applies the file's
  // post-processor template (e.g. a leading BOS). `text` must be valid UTF-8. Thread-safe.
  std::vector<TokenId> encode(std::string_view text, bool add_special_tokens,
                              Specials specials = Specials::parse) const;

  // `text` (request text) with kTextMark in front of every position where a special token's
  // spelling begins, so that encode(..., Specials::except_marked) reads those spellings as text
  // (Hugging Face's split_special_tokens, for this text only). A kTextMark already in `text`
  // becomes U+FFFD, so every mark is one made here. Marks survive what a chat template does with
  // strings (they are neither space nor cased, and NFC leaves them alone), so request text can be
  // marked before rendering and the template's own markup still encodes as special tokens.
  // A special token the file matches after normalization ("normalized": true) is found here by its
  // written spelling only.
  std::string mark_as_text(std::string_view text) const;

  // Concatenated bytes of the tokens; invalid UTF-8 (a sequence cut mid-character) becomes
  // U+FFFD. Unknown ids are an Error naming the id.
  std::string decode(const std::vector<TokenId>& ids, bool skip_special) const;

  // The raw bytes one token stands for (empty for a skipped special token). Used by
  // IncrementalDecoder; errors like decode().
  std::string_view token_bytes(TokenId id) const;

  // Looks up a token by its written form: an added token's content ("<|im_end|>") or a vocab
  // entry in its byte-level spelling ("Ġthe").
  std::optional<TokenId> token_id(std::string_view token) const;
  bool is_special(TokenId id) const;
  // One past the largest id (vocab and added tokens): the size an embedding table must have.
  std::size_t vocab_size() const;

 private:
  friend class IncrementalDecoder;
  struct Impl;
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Turns a stream of generated ids into text for streaming responses: each push returns only
// complete UTF-8 characters, holding back the bytes of a character whose remaining bytes have
// not arrived yet, so a client never sees half a character. One per request; not thread-safe.
class IncrementalDecoder {
 public:
  IncrementalDecoder(const Tokenizer& tokenizer, bool skip_special);
  // Text that became complete with this token (possibly empty).
  std::string push(TokenId id);
  // At end of stream: bytes still held (an unfinished character) come out as U+FFFD.
  std::string finish();

 private:
  const Tokenizer* tokenizer_;
  bool skip_special_;
  std::size_t strip_left_;  // leading characters the decoder still strips (SentencePiece's space)
  std::string pending_;     // bytes of an unfinished UTF-8 sequence, at most 3
};

// Length of the longest prefix of `bytes` that is valid UTF-8 after replacing every invalid
// sequence by U+FFFD, stopping before an incomplete sequence at the very end. Appends that
// prefix (repaired) to `out` and returns how many bytes of `bytes` it consumed.
std::size_t append_complete_utf8(std::string_view bytes, std::string& out);

}  // namespace telos
