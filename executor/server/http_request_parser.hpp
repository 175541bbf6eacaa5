#pragma once
// An incremental HTTP/1.1 request parser for the server behind `telos-run serve`
// (http_server.hpp). Bytes go in as they arrive, in pieces of any size; the parser keeps only what
// the request needs (the head up to its limit, the body up to its limit) and says as early as it
// can that a request is refused:
//   400  a malformed request line, header line or chunk; a folded header line; Content-Length that
//        is not one plain decimal number (negative, signed, empty, a list) or both Content-Length
//        and Transfer-Encoding; an HTTP/1.1 request without exactly one Host
//   413  a body over max_body_bytes: at once for Content-Length, and for a chunked body as soon as
//        a chunk's announced size would carry the total past the limit
//   417  an Expect other than 100-continue
//   431  a head (or a chunked body's trailer) over max_head_bytes or max_header_lines
//   501  a transfer coding other than chunked
//   505  an HTTP version other than 1.0 and 1.1
// Lines may end in CRLF or a bare LF (RFC 9112 section 2.2 lets a recipient accept LF); a bare CR
// inside a line is refused. Only origin-form targets ("/path?query") are accepted: absolute-form is
// for proxies, and a server that accepted it would have a second Host to check.
//
// The parser stops after the head (status HeadDone) so that the server can vet the head (route,
// key, Host) and answer 100 Continue or refuse before any body is read, and it stops at the end of
// each request (Done) so that pipelined bytes stay with the caller for the next request.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace telos::exec {

// What one request may carry; the defaults are what `telos-run serve` uses unless told otherwise.
struct HttpRequestLimits {
  std::size_t max_head_bytes = 16u << 10;  // request line + headers, line ends included
  int max_header_lines = 100;
  std::size_t max_body_bytes = 4u << 20;  // after chunked decoding
};

struct HttpRequest {
  std::string method;  // as sent: methods are case-sensitive
  std::string target;  // origin-form, e.g. "/v1/completions?x=1"
  std::string path;    // the target up to '?'
  int minor_version = 1;
  std::vector<std::pair<std::string, std::string>> headers;  // names lower-cased
  std::string body;                                          // chunked bodies decoded
  bool keep_alive = true;        // HTTP/1.1 unless "Connection: close"; HTTP/1.0 only if asked
  bool expect_continue = false;  // "Expect: 100-continue"

  // The first header of that (lower-case) name.
  std::optional<std::string_view> header(std::string_view name) const;
};

struct HttpParseError {
  int status = 400;
  std::string message;
};

class HttpRequestParser {
 public:
  enum class Status { NeedMore, HeadDone, Done, Failed };

  explicit HttpRequestParser(HttpRequestLimits limits) : limits_(limits) {}

  // Consumes a prefix of `data` and returns how many bytes it used. It uses everything unless it
  // reaches HeadDone, Done or Failed, which it stays in until begin_body() / reset().
  std::size_t feed(std::string_view data);
  Status status() const { return status_; }
  // Whether any byte of the current request has arrived (leading blank lines excepted).
  bool started() const { return started_; }
  // After HeadDone: read the body (Done at once when there is none).
  void begin_body();
  // Whether the request announces a body (Content-Length above 0, or chunked).
  bool expects_body() const { return chunked_ || content_length_ > 0; }
  // The request so far: its head from HeadDone on, its body at Done.
  const HttpRequest& request() const { return request_; }
  // At Done: takes the request and gets ready for the next one.
  HttpRequest take();
  // At Failed.
  const HttpParseError& error() const { return error_; }

 private:
  enum class Stage { Head, Body, ChunkSize, ChunkData, ChunkDataEnd, Trailers, Stopped };

  std::size_t feed_head(std::string_view data);
  std::size_t feed_body(std::string_view data);
  std::size_t feed_chunked(std::string_view data);
  // Appends bytes of data[used..] to line_ up to and including '\n' and advances `used`.
  // `budget` bounds the whole line, its ending included: past it nothing is taken.
  enum class Line { Partial, Complete, TooLong };
  Line take_line(std::string_view data, std::size_t& used, std::size_t budget);
  void head_line();
  void request_line();
  void header_line();
  void head_done();
  void chunk_size_line();
  void trailer_line();
  void append_body(std::string_view bytes);
  void fail(int status, std::string message);

  HttpRequestLimits limits_;
  Status status_ = Status::NeedMore;
  Stage stage_ = Stage::Head;
  bool started_ = false;
  bool request_line_seen_ = false;
  std::size_t head_bytes_ = 0;  // of the head, or of the trailer section
  int header_lines_ = 0;        // of the head, or of the trailer section
  std::string line_;            // the line being assembled
  HttpRequest request_;
  bool chunked_ = false;
  std::uint64_t content_length_ = 0;
  std::uint64_t remaining_ = 0;  // of the Content-Length body or of the current chunk
  HttpParseError error_;
};

}  // namespace telos::exec
