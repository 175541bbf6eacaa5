#include "executor/server/choice_text.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <nlohmann/json.hpp>

namespace telos::exec {
namespace {

TEST(FindStop, EarliestOccurrenceWins) {
  const StopMatch m = find_stop("abcXYdefAB", {"AB", "XY"});
  ASSERT_TRUE(m.at);
  EXPECT_EQ(*m.at, 3u);
}

TEST(FindStop, LongestOnATie) {
  const StopMatch m = find_stop("xxabcd", {"ab", "abc"});
  ASSERT_TRUE(m.at);
  EXPECT_EQ(*m.at, 2u);
}

TEST(FindStop, HoldsBackAPossibleStart) {
  EXPECT_EQ(find_stop("hello wor", {"world"}).partial_suffix, 3u);
  EXPECT_EQ(find_stop("hello", {"world"}).partial_suffix, 0u);
  EXPECT_FALSE(find_stop("hello wor", {"world"}).at);
}

// A byte-level tokenizer without merges: token id b is byte b, spelled in GPT-2's byte alphabet
// (visible bytes stand for themselves, the others are shifted to U+0100 and up).
Tokenizer byte_tokenizer() {
  nlohmann::json vocab = nlohmann::json::object();
  std::vector<int> visible;
  for (int b = 33; b <= 126; ++b) visible.push_back(b);
  for (int b = 161; b <= 172; ++b) visible.push_back(b);
  for (int b = 174; b <= 255; ++b) visible.push_back(b);
  int shifted = 0;
  for (int b = 0; b < 256; ++b) {
    const bool is_visible = std::find(visible.begin(), visible.end(), b) != visible.end();
    const int cp = is_visible ? b : 256 + shifted++;
    std::string utf8;
    if (cp < 0x80) {
      utf8 += static_cast<char>(cp);
    } else {
      utf8 += static_cast<char>(0xC0 | (cp >> 6));
      utf8 += static_cast<char>(0x80 | (cp & 0x3F));
    }
    vocab[utf8] = b;
  }
  nlohmann::json doc = {
      {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}}},
      {"decoder", {{"type", "ByteLevel"}}},
      {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", nlohmann::json::array()}}}};
  return Tokenizer::from_json(doc, "test tokenizer");
}

std::string push_all(ChoiceText& text, const std::string& s) {
  std::string out;
  for (unsigned char c : s) out += text.push(c);
  return out;
}

TEST(ChoiceText, CutsAtTheStopStringAcrossTokens) {
  const Tokenizer tok = byte_tokenizer();
  ChoiceText text(&tok, true, {"END"});
  EXPECT_EQ(push_all(text, "abcEN"), "abc");  // "EN" could start "END": held back
  EXPECT_FALSE(text.stopped());
  EXPECT_EQ(push_all(text, "Dxyz"), "");
  EXPECT_TRUE(text.stopped());
  EXPECT_EQ(text.finish(), "");
}

TEST(ChoiceText, ReleasesAHeldPrefixThatDidNotComplete) {
  const Tokenizer tok = byte_tokenizer();
  ChoiceText text(&tok, true, {"END"});
  EXPECT_EQ(push_all(text, "aEN"), "a");
  EXPECT_EQ(push_all(text, "x"), "ENx");
  EXPECT_EQ(push_all(text, "E"), "");
  EXPECT_EQ(text.finish(), "E");
}

TEST(ChoiceText, KeepsUtf8WholeAndHasNoTextWithoutATokenizer) {
  const Tokenizer tok = byte_tokenizer();
  ChoiceText text(&tok, true, {});
  EXPECT_EQ(text.push(0xC3), "");
  EXPECT_EQ(text.push(0xA9), "\xC3\xA9");
  ChoiceText none(nullptr, true, {});
  EXPECT_EQ(none.push(65), "");
  EXPECT_EQ(none.finish(), "");
}

}  // namespace
}  // namespace telos::exec
