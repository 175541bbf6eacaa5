#include "executor/server/choice_text.hpp"

#include <algorithm>

namespace telos::exec {

StopMatch find_stop(const std::string& text, const std::vector<std::string>& stops) {
  StopMatch m;
  std::size_t best_len = 0;
  for (const std::string& s : stops) {
    const std::size_t at = text.find(s);
    if (at != std::string::npos && (!m.at || at < *m.at || (at == *m.at && s.size() > best_len))) {
      m.at = at;
      best_len = s.size();
    }
    for (std::size_t len = std::min(s.size() - 1, text.size()); len > m.partial_suffix; --len) {
      if (text.compare(text.size() - len, len, s, 0, len) == 0) {
        m.partial_suffix = len;
        break;
      }
    }
  }
  return m;
}

ChoiceText::ChoiceText(const Tokenizer* tokenizer, bool skip_special,
                       std::vector<std::string> stops)
    : stops_(std::move(stops)) {
  if (tokenizer) decoder_.emplace(*tokenizer, skip_special);
}

std::string ChoiceText::push(std::int32_t token) {
  if (stopped_ || !decoder_) return {};
  return release(decoder_->push(token), false);
}

std::string ChoiceText::finish() {
  if (stopped_ || !decoder_) return {};
  return release(decoder_->finish(), true);
}

std::string ChoiceText::release(std::string piece, bool at_end) {
  if (stops_.empty()) return piece;
  held_ += piece;
  const StopMatch m = find_stop(held_, stops_);
  std::string out;
  if (m.at) {
    out = held_.substr(0, *m.at);
    held_.clear();
    stopped_ = true;
  } else {
    // A stop string starts with a whole UTF-8 character, so the held suffix does too.
    const std::size_t keep = at_end ? 0 : m.partial_suffix;
    out = held_.substr(0, held_.size() - keep);
    held_.erase(0, held_.size() - keep);
  }
  return out;
}

}  // namespace telos::exec
