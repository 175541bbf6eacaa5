#include "executor/tokenizer/utf8.hpp"

namespace telos::utf8 {

Sequence scan(std::string_view bytes, std::size_t at) {
  auto byte = [&](std::size_t i) { return static_cast<unsigned char>(bytes[i]); };
  const unsigned char lead = byte(at);
  if (lead < 0x80) return {Scan::complete, 1};
  std::size_t need = 0;
  // The allowed range of the second byte excludes overlong forms, surrogates and code points
  // above U+10FFFF (Unicode table 3-7).
  unsigned char lo = 0x80, hi = 0xBF;
  if (lead >= 0xC2 && lead <= 0xDF) {
    need = 2;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    need = 3;
    if (lead == 0xE0) lo = 0xA0;
    if (lead == 0xED) hi = 0x9F;
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    need = 4;
    if (lead == 0xF0) lo = 0x90;
    if (lead == 0xF4) hi = 0x8F;
  } else {
    return {Scan::invalid, 1};
  }
  for (std::size_t k = 1; k < need; ++k) {
    if (at + k >= bytes.size()) return {Scan::incomplete, k};
    const unsigned char c = byte(at + k);
    const unsigned char min = k == 1 ? lo : 0x80, max = k == 1 ? hi : 0xBF;
    if (c < min || c > max) return {Scan::invalid, k};
  }
  return {Scan::complete, need};
}

std::size_t first_invalid(std::string_view bytes) {
  std::size_t at = 0;
  while (at < bytes.size()) {
    // ASCII runs dominate prompts; skip them without the full scan.
    if (static_cast<unsigned char>(bytes[at]) < 0x80) {
      ++at;
      continue;
    }
    const Sequence s = scan(bytes, at);
    if (s.scan != Scan::complete) return at;
    at += s.length;
  }
  return at;
}

void append_code_point(std::string& out, std::uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

}  // namespace telos::utf8
