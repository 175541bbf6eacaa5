#pragma once
// A pre-tokenizer regex on PCRE2. The patterns of tokenizer.json files are written for Oniguruma;
// with UTF and UCP, PCRE2 gives \s, \p{L}, \p{N} and (?i:) the same Unicode meaning.
#include <string>
#include <string_view>
#include <vector>

struct pcre2_real_code_8;

namespace telos {

class SplitRegex {
 public:
  // `literal`: match `pattern` as plain text (a Split step's {"String": ...}). Errors name `where`.
  SplitRegex(const std::string& pattern, bool literal, const std::string& where);
  SplitRegex(const SplitRegex&) = delete;
  SplitRegex& operator=(const SplitRegex&) = delete;
  ~SplitRegex();

  // Appends to `pieces` the matches in `text` and the gaps between them, both kept (the
  // "Isolated" behaviour). `text` must already be valid UTF-8.
  void split_isolated(std::string_view text, std::vector<std::string_view>& pieces) const;

 private:
  pcre2_real_code_8* code_ = nullptr;
};

}  // namespace telos
