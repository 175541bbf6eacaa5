#include "executor/tokenizer/byte_alphabet.hpp"

#include "executor/tokenizer/utf8.hpp"

namespace telos {

ByteAlphabet::ByteAlphabet() {
  std::uint32_t next = 256;
  for (unsigned b = 0; b < 256; ++b) {
    const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
    code_point_[b] = printable ? b : next++;
    byte_of_[code_point_[b]] = static_cast<unsigned char>(b);
  }
}

std::string ByteAlphabet::spell(std::string_view bytes) const {
  std::string out;
  for (unsigned char b : bytes) utf8::append_code_point(out, code_point_[b]);
  return out;
}

std::optional<std::string> ByteAlphabet::unspell(std::string_view spelling) const {
  std::string out;
  std::size_t at = 0;
  while (at < spelling.size()) {
    const utf8::Sequence s = utf8::scan(spelling, at);
    if (s.scan != utf8::Scan::complete) return std::nullopt;
    std::uint32_t cp = static_cast<unsigned char>(spelling[at]);
    if (s.length > 1) {
      cp &= 0xFFu >> (s.length + 1);
      for (std::size_t k = 1; k < s.length; ++k)
        cp = (cp << 6) | (static_cast<unsigned char>(spelling[at + k]) & 0x3F);
    }
    auto it = byte_of_.find(cp);
    if (it == byte_of_.end()) return std::nullopt;
    out += static_cast<char>(it->second);
    at += s.length;
  }
  return out;
}

const ByteAlphabet& byte_alphabet() {
  static const ByteAlphabet alphabet;
  return alphabet;
}

}  // namespace telos
