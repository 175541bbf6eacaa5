#pragma once
// One choice's generated tokens turned into the text a client sees: UTF-8-safe incremental
// decoding, then stop strings. Text that might be the beginning of a stop string is held back
// until the next tokens show it is not; when a stop string appears, the text before it is final
// and the rest (the stop string included) is dropped, as OpenAI does.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "executor/tokenizer/tokenizer.hpp"

namespace telos::exec {

// Where the first of `stops` occurs in `text` (the earliest start; the longest on a tie), and the
// length of the longest suffix of `text` that is a proper prefix of some stop string.
struct StopMatch {
  std::optional<std::size_t> at;
  std::size_t partial_suffix = 0;
};
StopMatch find_stop(const std::string& text, const std::vector<std::string>& stops);

class ChoiceText {
 public:
  // `tokenizer` may be null (an artifact without one): the text is then always empty and stop
  // strings must be empty too.
  ChoiceText(const Tokenizer* tokenizer, bool skip_special, std::vector<std::string> stops);

  // Text that became final with this token; after a stop string it returns "" forever.
  std::string push(std::int32_t token);
  // At the end of generation: the held-back text (no stop string can complete any more).
  std::string finish();
  bool stopped() const { return stopped_; }

 private:
  std::string release(std::string piece, bool at_end);

  std::optional<IncrementalDecoder> decoder_;
  std::vector<std::string> stops_;
  std::string held_;
  bool stopped_ = false;
};

}  // namespace telos::exec
