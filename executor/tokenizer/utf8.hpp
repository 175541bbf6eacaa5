#pragma once
// UTF-8 validation shared by the tokenizer (PCRE2 and ICU need valid input) and the decoders
// (which must never emit half a character or an invalid sequence).
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace telos::utf8 {

enum class Scan { complete, incomplete, invalid };

struct Sequence {
  Scan scan;
  // complete: the sequence's length; incomplete: bytes available (a valid prefix that reached
  // the end of input); invalid: the length of the maximal invalid subpart, which becomes one
  // U+FFFD (the Unicode-recommended practice, also what Rust's from_utf8_lossy does).
  std::size_t length;
};

// Examines the sequence starting at bytes[at], at < bytes.size().
Sequence scan(std::string_view bytes, std::size_t at);

// Offset of the first byte that is not part of a complete valid sequence, or bytes.size().
std::size_t first_invalid(std::string_view bytes);

void append_code_point(std::string& out, std::uint32_t cp);

inline constexpr std::string_view replacement = "\xEF\xBF\xBD";  // U+FFFD

}  // namespace telos::utf8
