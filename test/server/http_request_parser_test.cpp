#include "executor/server/http_request_parser.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <limits>

namespace telos::exec {
namespace {

using Status = HttpRequestParser::Status;

struct Parsed {
  Status status;
  HttpRequest request;
  HttpParseError error;
  std::size_t used = 0;  // bytes of the input the parser took
};

// Feeds `text` in pieces of `piece` bytes, reading the body as soon as the head is done, until the
// request is Done or Failed or the input runs out.
Parsed parse(std::string_view text, std::size_t piece = std::numeric_limits<std::size_t>::max(),
             HttpRequestLimits limits = {}) {
  HttpRequestParser p(limits);
  std::size_t pos = 0;
  for (;;) {
    if (p.status() == Status::HeadDone) p.begin_body();
    if (p.status() == Status::Done || p.status() == Status::Failed || pos == text.size()) break;
    pos += p.feed(text.substr(pos, std::min(piece, text.size() - pos)));
  }
  Parsed out{p.status(), p.request(), p.error(), pos};
  if (p.status() == Status::Done) out.request = p.take();
  return out;
}

void expect_refused(std::string_view text, int status, std::string_view message_part = "",
                    HttpRequestLimits limits = {}) {
  const Parsed r = parse(text, std::numeric_limits<std::size_t>::max(), limits);
  ASSERT_EQ(r.status, Status::Failed) << text;
  EXPECT_EQ(r.error.status, status) << text << ": " << r.error.message;
  EXPECT_NE(r.error.message.find(message_part), std::string::npos) << r.error.message;
}

std::string post_head(std::string_view extra) {
  return "POST /v1/completions HTTP/1.1\r\nHost: localhost\r\n" + std::string(extra) + "\r\n";
}

TEST(HttpRequestParser, ParsesAGet) {
  const Parsed r =
      parse("GET /v1/models?x=1 HTTP/1.1\r\nHost: localhost:8000\r\nX-Thing:  a b \r\n\r\n");
  ASSERT_EQ(r.status, Status::Done);
  EXPECT_EQ(r.request.method, "GET");
  EXPECT_EQ(r.request.target, "/v1/models?x=1");
  EXPECT_EQ(r.request.path, "/v1/models");
  EXPECT_EQ(r.request.minor_version, 1);
  EXPECT_TRUE(r.request.keep_alive);
  EXPECT_EQ(r.request.header("host"), "localhost:8000");
  EXPECT_EQ(r.request.header("x-thing"), "a b");  // names lower-cased, values trimmed
  EXPECT_EQ(r.request.header("absent"), std::nullopt);
  EXPECT_TRUE(r.request.body.empty());
}

TEST(HttpRequestParser, ContentLengthBodyInAnyPieces) {
  const std::string text = post_head("Content-Length: 11\r\n") + "{\"prompt\":1}";
  for (std::size_t piece : {std::size_t{1}, std::size_t{2}, std::size_t{7}, text.size()}) {
    const Parsed r = parse(text, piece);
    ASSERT_EQ(r.status, Status::Done) << piece;
    EXPECT_EQ(r.request.body, "{\"prompt\":1") << piece;
    EXPECT_EQ(r.used, text.size() - 1) << "the byte after the body is the next request's";
  }
}

TEST(HttpRequestParser, ChunkedBodyInAnyPieces) {
  const std::string text = post_head("Transfer-Encoding: chunked\r\n") +
                           "4\r\nWiki\r\n5;name=value\r\npedia\r\nF  \r\n in \r\n\r\nchunks.\r\n"
                           "0\r\nX-Trailer: 1\r\n\r\n";
  for (std::size_t piece = 1; piece <= text.size(); ++piece) {
    const Parsed r = parse(text, piece);
    ASSERT_EQ(r.status, Status::Done) << piece << ": " << r.error.message;
    EXPECT_EQ(r.request.body, "Wikipedia in \r\n\r\nchunks.") << piece;
    EXPECT_EQ(r.used, text.size());
  }
}

TEST(HttpRequestParser, PipelinedRequestsComeOneAtATime) {
  const std::string text = post_head("Content-Length: 2\r\n") + "{}" +
                           "GET /health HTTP/1.1\r\nHost: h\r\n\r\n" +
                           "GET /metrics HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n";
  HttpRequestParser p({});
  std::string_view rest = text;
  std::vector<HttpRequest> got;
  while (!rest.empty()) {
    rest.remove_prefix(p.feed(rest));
    if (p.status() == Status::HeadDone) p.begin_body();
    if (p.status() == Status::Done) got.push_back(p.take());
    ASSERT_NE(p.status(), Status::Failed) << p.error().message;
  }
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(got[0].body, "{}");
  EXPECT_EQ(got[1].path, "/health");
  EXPECT_TRUE(got[1].keep_alive);
  EXPECT_EQ(got[2].path, "/metrics");
  EXPECT_FALSE(got[2].keep_alive);
  EXPECT_FALSE(p.started());
}

TEST(HttpRequestParser, KeepAliveByVersionAndConnection) {
  EXPECT_FALSE(parse("GET / HTTP/1.0\r\n\r\n").request.keep_alive);  // 1.0 needs no Host
  EXPECT_TRUE(parse("GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n").request.keep_alive);
  EXPECT_FALSE(
      parse("GET / HTTP/1.1\r\nHost: h\r\nConnection: x, Close\r\n\r\n").request.keep_alive);
  EXPECT_EQ(parse("GET / HTTP/1.0\r\n\r\n").request.minor_version, 0);
}

TEST(HttpRequestParser, LeadingBlankLinesAndBareLineFeeds) {
  const Parsed r = parse("\r\n\nGET / HTTP/1.1\nHost: h\n\n");
  ASSERT_EQ(r.status, Status::Done) << r.error.message;
  EXPECT_EQ(r.request.header("host"), "h");
}

TEST(HttpRequestParser, HeadSizeLimit) {
  HttpRequestLimits limits;
  limits.max_head_bytes = 64;
  const std::string head = "GET / HTTP/1.1\r\nHost: h\r\nX: ";
  const std::string fits = head + std::string(64 - head.size() - 4, 'a') + "\r\n\r\n";
  ASSERT_EQ(fits.size(), 64u);
  EXPECT_EQ(parse(fits, 5, limits).status, Status::Done);
  expect_refused(head + std::string(64 - head.size() - 3, 'a') + "\r\n\r\n", 431,
                 "limit of 64 bytes (--max-head-bytes)", limits);
  // A line that never ends is refused once it passes the limit, not buffered.
  const Parsed endless = parse("GET /" + std::string(1000, 'a'), 1, limits);
  EXPECT_EQ(endless.status, Status::Failed);
  EXPECT_EQ(endless.error.status, 431);
  EXPECT_EQ(endless.used, 64u);
}

TEST(HttpRequestParser, HeaderLineLimit) {
  std::string lines;
  for (int i = 0; i < 99; ++i) lines += "X-" + std::to_string(i) + ": v\r\n";
  EXPECT_EQ(parse("GET / HTTP/1.1\r\nHost: h\r\n" + lines + "\r\n").status, Status::Done);
  expect_refused("GET / HTTP/1.1\r\nHost: h\r\nX: v\r\n" + lines + "\r\n", 431,
                 "more than 100 header lines");
  // 100k lines are refused after the 101st: the rest is never read.
  std::string flood = "GET / HTTP/1.1\r\n";
  for (int i = 0; i < 100000; ++i) flood += "X-Flood: y\r\n";
  HttpRequestLimits big;
  big.max_head_bytes = 4u << 20;
  const Parsed r = parse(flood + "\r\n", std::numeric_limits<std::size_t>::max(), big);
  EXPECT_EQ(r.error.status, 431);
  EXPECT_LT(r.used, 2000u);
}

TEST(HttpRequestParser, ContentLengthEdgeCases) {
  HttpRequestLimits limits;
  limits.max_body_bytes = 100;
  for (const char* v : {"1e18", "-1", "+5", "", "5, 5", "0x10", "5 5", "\xff"})
    expect_refused(post_head(std::string("Content-Length: ") + v + "\r\n"), 400,
                   "Content-Length must be one decimal number", limits);
  expect_refused(post_head("Content-Length: 5\r\nContent-Length: 5\r\n"), 400, "", limits);
  for (const char* v :
       {"101", "1000000000000000000", "18446744073709551616", "99999999999999999999999999999999"})
    expect_refused(post_head(std::string("Content-Length: ") + v + "\r\n"), 413,
                   "larger than this server's limit of 100 bytes (--max-body-bytes)", limits);
  // The 413 comes with the head, before any body.
  const Parsed early = parse(post_head("Content-Length: 101\r\n"), 1, limits);
  EXPECT_EQ(early.error.status, 413);
  EXPECT_EQ(parse(post_head("Content-Length: 100\r\n") + std::string(100, 'b'), 9, limits).status,
            Status::Done);
  EXPECT_EQ(parse(post_head("Content-Length:  007 \r\n") + "1234567").request.body, "1234567");
  EXPECT_EQ(parse(post_head("Content-Length: 0\r\n")).status, Status::Done);
}

TEST(HttpRequestParser, TransferEncodingRules) {
  expect_refused(post_head("Content-Length: 3\r\nTransfer-Encoding: chunked\r\n"), 400,
                 "both Content-Length and Transfer-Encoding");
  expect_refused(post_head("Transfer-Encoding: gzip\r\n"), 400, "must end in chunked");
  expect_refused(post_head("Transfer-Encoding: chunked, gzip\r\n"), 400, "must end in chunked");
  expect_refused(post_head("Transfer-Encoding: gzip, chunked\r\n"), 501, "only transfer coding");
  expect_refused("POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n", 400, "needs HTTP/1.1");
  EXPECT_EQ(parse(post_head("Transfer-Encoding: Chunked\r\n") + "1\r\nx\r\n0\r\n\r\n").request.body,
            "x");
}

TEST(HttpRequestParser, ChunkedLimitsAndSyntax) {
  HttpRequestLimits limits;
  limits.max_body_bytes = 10;
  const std::string head = post_head("Transfer-Encoding: chunked\r\n");
  // A chunk announcing more than the room left is refused when its size line arrives.
  Parsed r = parse(head + "b\r\n", std::numeric_limits<std::size_t>::max(), limits);
  EXPECT_EQ(r.error.status, 413);
  r = parse(head + "6\r\nabcdef\r\n5\r\n", 1, limits);
  EXPECT_EQ(r.error.status, 413) << "the running total passes the limit";
  EXPECT_EQ(r.used, head.size() + 14);
  r = parse(head + "ffffffffffffffffffffffff\r\n", 1, limits);
  EXPECT_EQ(r.error.status, 413);
  r = parse(head + "6\r\nabcdef\r\n4\r\nghij\r\n0\r\n\r\n", 3, limits);
  EXPECT_EQ(r.status, Status::Done);
  EXPECT_EQ(r.request.body, "abcdefghij");

  for (const char* bad :
       {"g\r\n", "\r\n", " 4\r\nWiki\r\n", "4 x\r\nWiki\r\n", "4\r\nWikiX\r\n", "4\r\nWiki\r\r\n",
        "-4\r\nWiki\r\n", "4\r\nWiki\r\n0\r\nno colon\r\n\r\n"})
    expect_refused(head + bad, 400, "", limits);
  expect_refused(head + std::string(2000, '0') + "1\r\n", 400, "chunk-size line is longer");
  std::string trailers = "0\r\n";
  for (int i = 0; i < 101; ++i) trailers += "T: v\r\n";
  expect_refused(head + trailers + "\r\n", 431, "trailer has more than 100 lines");
}

TEST(HttpRequestParser, BodyStorageNeverPassesTheLimit) {
  HttpRequestLimits limits;
  limits.max_body_bytes = 1000;
  std::string chunks;
  for (int i = 0; i < 100; ++i) chunks += "a\r\n0123456789\r\n";
  const Parsed r =
      parse(post_head("Transfer-Encoding: chunked\r\n") + chunks + "0\r\n\r\n", 64, limits);
  ASSERT_EQ(r.status, Status::Done) << r.error.message;
  EXPECT_EQ(r.request.body.size(), 1000u);
  EXPECT_EQ(r.request.body.capacity(), 1000u);
}

TEST(HttpRequestParser, ExpectContinue) {
  const std::string head = post_head("Expect: 100-Continue\r\nContent-Length: 2\r\n");
  HttpRequestParser p({});
  EXPECT_EQ(p.feed(head + "{}"), head.size()) << "the parser stops after the head";
  ASSERT_EQ(p.status(), Status::HeadDone);
  EXPECT_TRUE(p.request().expect_continue);
  EXPECT_TRUE(p.expects_body());
  p.begin_body();
  EXPECT_EQ(p.feed("{}"), 2u);
  EXPECT_EQ(p.status(), Status::Done);
  expect_refused(post_head("Expect: something-else\r\n"), 417, "100-continue");
  EXPECT_FALSE(parse("GET / HTTP/1.0\r\nExpect: 100-continue\r\n\r\n").request.expect_continue);
}

TEST(HttpRequestParser, MalformedHeads) {
  const struct {
    const char* text;
    int status;
  } cases[] = {
      {"NOT HTTP AT ALL\r\n\r\n", 400},
      {"GET /\r\n\r\n", 400},
      {"GET  / HTTP/1.1\r\nHost: h\r\n\r\n", 400},
      {"GET http://evil/ HTTP/1.1\r\nHost: h\r\n\r\n", 400},
      {"GET /a b HTTP/1.1\r\nHost: h\r\n\r\n", 400},
      {"G(T / HTTP/1.1\r\nHost: h\r\n\r\n", 400},
      {"GET / HTTP/2.0\r\nHost: h\r\n\r\n", 505},
      {"GET / HTTX/1.1\r\nHost: h\r\n\r\n", 400},
      {"GET / HTTP/1.1\r\n\r\n", 400},
      {"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400},
      {"GET / HTTP/1.1\r\nHost: h\r\nX: a\r\n  folded\r\n\r\n", 400},
      {"GET / HTTP/1.1\r\nHost: h\r\nX : a\r\n\r\n", 400},
      {"GET / HTTP/1.1\r\nHost: h\r\nno colon\r\n\r\n", 400},
      {"GET / HTTP/1.1\r\nHost: h\r\n: empty name\r\n\r\n", 400},
      {"GET / HTTP/1.1\r\nHost: h\rX: y\r\n\r\n", 400},
      {"GET / HTTP/1.1\r\nHost: h\r\nX: a\x01b\r\n\r\n", 400},
  };
  for (const auto& c : cases) {
    const Parsed r = parse(c.text);
    EXPECT_EQ(r.status, Status::Failed) << c.text;
    EXPECT_EQ(r.error.status, c.status) << c.text << ": " << r.error.message;
  }
}

TEST(HttpRequestParser, StartedMarksTheFirstByte) {
  HttpRequestParser p({});
  EXPECT_FALSE(p.started());
  p.feed("G");
  EXPECT_TRUE(p.started());
  EXPECT_EQ(p.status(), Status::NeedMore);
}

}  // namespace
}  // namespace telos::exec
