#include "executor/tokenizer/split_regex.hpp"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <array>
#include <cstdint>
#include <memory>

#include "executor/tokenizer/utf8.hpp"
#include "support/error.hpp"

namespace telos {

SplitRegex::SplitRegex(const std::string& pattern, bool literal, const std::string& where) {
  int code = 0;
  PCRE2_SIZE offset = 0;
  const std::uint32_t options = PCRE2_UTF | PCRE2_UCP | (literal ? PCRE2_LITERAL : 0);
  code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), options,
                        &code, &offset, nullptr);
  if (code_ == nullptr) {
    std::array<PCRE2_UCHAR, 256> message{};
    pcre2_get_error_message(code, message.data(), message.size());
    fail(where + ": cannot compile regex at offset " + std::to_string(offset) + ": " +
         reinterpret_cast<const char*>(message.data()));
  }
  // JIT is an optimization only; without it (unsupported CPU) the interpreter gives the same
  // matches.
  pcre2_jit_compile(code_, PCRE2_JIT_COMPLETE);
}

SplitRegex::~SplitRegex() {
  pcre2_code_free(code_);
}

void SplitRegex::split_isolated(std::string_view text,
                                std::vector<std::string_view>& pieces) const {
  std::unique_ptr<pcre2_match_data, decltype(&pcre2_match_data_free)> data(
      pcre2_match_data_create_from_pattern(code_, nullptr), &pcre2_match_data_free);
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  std::size_t gap_start = 0, at = 0;
  while (at < text.size()) {
    // The whole input was validated once; re-checking per call would make this quadratic.
    const int rc =
        pcre2_match(code_, subject, text.size(), at, PCRE2_NO_UTF_CHECK, data.get(), nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      std::array<PCRE2_UCHAR, 256> message{};
      pcre2_get_error_message(rc, message.data(), message.size());
      fail(std::string("tokenizer regex match failed: ") +
           reinterpret_cast<const char*>(message.data()));
    }
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(data.get());
    const std::size_t begin = ovector[0], end = ovector[1];
    if (end == begin) {
      // An empty match splits nothing; step over one character to make progress.
      at = begin + utf8::scan(text, begin).length;
      continue;
    }
    if (begin > gap_start) pieces.push_back(text.substr(gap_start, begin - gap_start));
    pieces.push_back(text.substr(begin, end - begin));
    gap_start = at = end;
  }
  if (gap_start < text.size()) pieces.push_back(text.substr(gap_start));
}

}  // namespace telos
