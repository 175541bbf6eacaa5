#include "executor/server/api_error.hpp"

#include <gtest/gtest.h>

namespace telos::exec {
namespace {

TEST(ApiError, MessagesAreBounded) {
  const std::string path(100000, 'p');
  const ApiError e(404, "invalid_request_error", "no such endpoint: GET /" + path);
  const std::string message = e.what();
  EXPECT_LE(message.size(), kMaxErrorMessageBytes + 40);
  EXPECT_EQ(message.rfind("no such endpoint: GET /ppp", 0), 0u);
  EXPECT_NE(message.find("(cut at 512 bytes)"), std::string::npos);
  EXPECT_LE(error_body(e).dump().size(), kMaxErrorMessageBytes + 200);
  EXPECT_EQ(ApiError(400, "t", "short").what(), std::string("short"));
}

TEST(ApiError, CutsAtACharacterBoundary) {
  // 3-byte characters: byte 512 falls inside one, which must not be split.
  std::string text;
  while (text.size() < 2000) text += "\xE2\x82\xAC";
  const std::string message = ApiError(400, "t", text).what();
  const std::string kept = message.substr(0, message.find("..."));
  EXPECT_EQ(kept.size() % 3, 0u);
  EXPECT_LE(kept.size(), kMaxErrorMessageBytes);
  EXPECT_GT(kept.size(), kMaxErrorMessageBytes - 3);
}

}  // namespace
}  // namespace telos::exec
