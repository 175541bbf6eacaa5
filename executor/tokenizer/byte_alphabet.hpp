#pragma once
// GPT-2's byte-level alphabet: byte-level BPE spells every byte as a printable code point so that
// vocab entries are readable strings. Printable Latin-1 bytes stand for themselves, the other 68
// bytes are moved to U+0100 onwards in byte order.
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>

namespace telos {

class ByteAlphabet {
 public:
  ByteAlphabet();
  // The spelling of raw bytes ("\n" -> "Ċ", " " -> "Ġ").
  std::string spell(std::string_view bytes) const;
  // The bytes a spelling stands for; nullopt when a character is outside the alphabet (such a
  // vocab entry is never produced by BPE and decodes to its own UTF-8).
  std::optional<std::string> unspell(std::string_view spelling) const;

 private:
  std::array<std::uint32_t, 256> code_point_{};
  std::unordered_map<std::uint32_t, unsigned char> byte_of_;
};

const ByteAlphabet& byte_alphabet();

}  // namespace telos
