#include "executor/server/http_request_parser.hpp"

#include <algorithm>

namespace telos::exec {
namespace {

// A chunk-size line with its extensions; extensions are ignored, so they need no more room.
constexpr std::size_t kMaxChunkLineBytes = 1024;

bool is_tchar(char c) {
  if ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) return true;
  return std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos;
}

bool is_token(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), is_tchar);
}

char lower(char c) {
  return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c;
}

std::string lowered(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(), lower);
  return out;
}

std::string_view trimmed(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// The elements of a comma-separated header list, trimmed and lower-cased; empty ones dropped.
std::vector<std::string> list_elements(std::string_view value) {
  std::vector<std::string> out;
  while (!value.empty()) {
    const std::size_t comma = value.find(',');
    const std::string_view item = trimmed(value.substr(0, comma));
    if (!item.empty()) out.push_back(lowered(item));
    value = comma == std::string_view::npos ? std::string_view() : value.substr(comma + 1);
  }
  return out;
}

// Field values are visible characters, spaces, tabs and obs-text; other control bytes are refused.
bool is_field_value(std::string_view s) {
  return std::all_of(s.begin(), s.end(), [](char ch) {
    const auto c = static_cast<unsigned char>(ch);
    return c == '\t' || (c >= 0x20 && c != 0x7f);
  });
}

// Request targets are visible ASCII (RFC 3986 characters, percent-encoded as needed).
bool is_target(std::string_view s) {
  return std::all_of(s.begin(), s.end(), [](char ch) {
    const auto c = static_cast<unsigned char>(ch);
    return c > 0x20 && c < 0x7f;
  });
}

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

std::string body_too_large(std::size_t limit) {
  return "the request body is larger than this server's limit of " + std::to_string(limit) +
         " bytes (--max-body-bytes)";
}

}  // namespace

std::optional<std::string_view> HttpRequest::header(std::string_view name) const {
  for (const auto& [n, v] : headers)
    if (n == name) return v;
  return std::nullopt;
}

std::size_t HttpRequestParser::feed(std::string_view data) {
  std::size_t used = 0;
  while (status_ == Status::NeedMore && used < data.size()) {
    const std::string_view rest = data.substr(used);
    if (stage_ == Stage::Head)
      used += feed_head(rest);
    else if (stage_ == Stage::Body)
      used += feed_body(rest);
    else
      used += feed_chunked(rest);
  }
  return used;
}

void HttpRequestParser::begin_body() {
  head_bytes_ = 0;
  header_lines_ = 0;
  status_ = Status::NeedMore;
  if (chunked_) {
    stage_ = Stage::ChunkSize;
  } else if (content_length_ > 0) {
    stage_ = Stage::Body;
    remaining_ = content_length_;
  } else {
    stage_ = Stage::Stopped;
    status_ = Status::Done;
  }
}

HttpRequest HttpRequestParser::take() {
  HttpRequest out = std::move(request_);
  *this = HttpRequestParser(limits_);
  return out;
}

HttpRequestParser::Line HttpRequestParser::take_line(std::string_view data, std::size_t& used,
                                                     std::size_t budget) {
  const std::string_view rest = data.substr(used);
  const std::size_t newline = rest.find('\n');
  const std::size_t take = newline == std::string_view::npos ? rest.size() : newline + 1;
  if (line_.size() + take > budget) return Line::TooLong;
  line_.append(rest.substr(0, take));
  used += take;
  return newline == std::string_view::npos ? Line::Partial : Line::Complete;
}

std::size_t HttpRequestParser::feed_head(std::string_view data) {
  started_ = true;
  std::size_t used = 0;
  while (status_ == Status::NeedMore && used < data.size()) {
    const Line line = take_line(data, used, limits_.max_head_bytes - head_bytes_);
    if (line == Line::TooLong) {
      fail(431, "the request head is larger than this server's limit of " +
                    std::to_string(limits_.max_head_bytes) + " bytes (--max-head-bytes)");
      break;
    }
    if (line == Line::Partial) break;
    head_bytes_ += line_.size();
    head_line();
    line_.clear();
  }
  return used;
}

// Strips the line ending from line_; a CR left inside the line is refused.
void HttpRequestParser::head_line() {
  line_.pop_back();
  if (!line_.empty() && line_.back() == '\r') line_.pop_back();
  if (line_.find('\r') != std::string::npos) return fail(400, "a request line holds a bare CR");
  if (!request_line_seen_) {
    if (!line_.empty()) request_line();  // blank lines before the request line are ignored
  } else if (line_.empty()) {
    head_done();
  } else {
    header_line();
  }
}

void HttpRequestParser::request_line() {
  request_line_seen_ = true;
  const std::string_view line(line_);
  const std::size_t sp1 = line.find(' ');
  const std::size_t sp2 = sp1 == std::string_view::npos ? sp1 : line.find(' ', sp1 + 1);
  if (sp2 == std::string_view::npos || line.find(' ', sp2 + 1) != std::string_view::npos)
    return fail(400, "the request line is not 'METHOD /path HTTP/1.1'");
  const std::string_view method = line.substr(0, sp1);
  const std::string_view target = line.substr(sp1 + 1, sp2 - sp1 - 1);
  const std::string_view version = line.substr(sp2 + 1);
  if (!is_token(method)) return fail(400, "the request method is not a token");
  if (target.empty() || target.front() != '/' || !is_target(target))
    return fail(400, "the request target must be a path starting with '/'");
  if (version == "HTTP/1.1" || version == "HTTP/1.0") {
    request_.minor_version = version.back() - '0';
  } else if (version.size() == 8 && version.substr(0, 5) == "HTTP/" && version[6] == '.') {
    return fail(505, "only HTTP/1.0 and HTTP/1.1 are served");
  } else {
    return fail(400, "the request line is not 'METHOD /path HTTP/1.1'");
  }
  request_.method = method;
  request_.target = target;
  request_.path = target.substr(0, target.find('?'));
}

void HttpRequestParser::header_line() {
  if (++header_lines_ > limits_.max_header_lines)
    return fail(431, "the request has more than " + std::to_string(limits_.max_header_lines) +
                         " header lines, this server's limit (--max-header-lines)");
  if (line_.front() == ' ' || line_.front() == '\t')
    return fail(400, "folded header lines (obs-fold) are not accepted");
  const std::string_view line(line_);
  const std::size_t colon = line.find(':');
  if (colon == std::string_view::npos || !is_token(line.substr(0, colon)))
    return fail(400, "a header line is not 'Name: value'");
  const std::string_view value = trimmed(line.substr(colon + 1));
  if (!is_field_value(value)) return fail(400, "a header value holds a control character");
  request_.headers.emplace_back(lowered(line.substr(0, colon)), std::string(value));
}

void HttpRequestParser::head_done() {
  std::vector<std::string_view> hosts, lengths, encodings, connection, expect;
  for (const auto& [name, value] : request_.headers) {
    if (name == "host") hosts.push_back(value);
    if (name == "content-length") lengths.push_back(value);
    if (name == "transfer-encoding") encodings.push_back(value);
    if (name == "connection") connection.push_back(value);
    if (name == "expect") expect.push_back(value);
  }
  const bool http11 = request_.minor_version == 1;
  if (hosts.size() > 1 || (http11 && hosts.empty()))
    return fail(400, "an HTTP/1.1 request needs exactly one Host header");

  std::vector<std::string> tokens;
  for (std::string_view v : connection)
    for (std::string& t : list_elements(v)) tokens.push_back(std::move(t));
  const auto has = [&](const char* t) {
    return std::find(tokens.begin(), tokens.end(), t) != tokens.end();
  };
  request_.keep_alive = http11 ? !has("close") : has("keep-alive");

  if (!expect.empty()) {
    if (expect.size() > 1 || lowered(expect.front()) != "100-continue")
      return fail(417, "the only expectation served is 'Expect: 100-continue'");
    request_.expect_continue = http11;
  }

  if (!encodings.empty()) {
    if (!lengths.empty())
      return fail(400, "a request must not carry both Content-Length and Transfer-Encoding");
    if (!http11) return fail(400, "Transfer-Encoding needs HTTP/1.1");
    std::vector<std::string> codings;
    for (std::string_view v : encodings)
      for (std::string& c : list_elements(v)) codings.push_back(std::move(c));
    if (codings.empty() || codings.back() != "chunked")
      return fail(400, "Transfer-Encoding must end in chunked");
    if (codings.size() > 1)
      return fail(501, "the only transfer coding served is chunked (no compression)");
    chunked_ = true;
  } else if (!lengths.empty()) {
    const std::string_view v = lengths.front();
    if (lengths.size() > 1 || v.empty() ||
        !std::all_of(v.begin(), v.end(), [](char c) { return c >= '0' && c <= '9'; }))
      return fail(400, "Content-Length must be one decimal number of bytes");
    // Saturates at the limit: any longer number is too large, and none overflows.
    for (char c : v) {
      content_length_ = content_length_ * 10 + static_cast<std::uint64_t>(c - '0');
      if (content_length_ > limits_.max_body_bytes)
        return fail(413, body_too_large(limits_.max_body_bytes));
    }
  }
  status_ = Status::HeadDone;
  stage_ = Stage::Stopped;
}

std::size_t HttpRequestParser::feed_body(std::string_view data) {
  const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(remaining_, data.size()));
  append_body(data.substr(0, n));
  remaining_ -= n;
  if (remaining_ == 0) {
    stage_ = Stage::Stopped;
    status_ = Status::Done;
  }
  return n;
}

std::size_t HttpRequestParser::feed_chunked(std::string_view data) {
  std::size_t used = 0;
  switch (stage_) {
    case Stage::ChunkData: {
      const std::size_t n =
          static_cast<std::size_t>(std::min<std::uint64_t>(remaining_, data.size()));
      append_body(data.substr(0, n));
      remaining_ -= n;
      if (remaining_ == 0) stage_ = Stage::ChunkDataEnd;
      return n;
    }
    case Stage::ChunkSize:
      switch (take_line(data, used, kMaxChunkLineBytes)) {
        case Line::TooLong:
          fail(400,
               "a chunk-size line is longer than " + std::to_string(kMaxChunkLineBytes) + " bytes");
          break;
        case Line::Complete:
          chunk_size_line();
          line_.clear();
          break;
        case Line::Partial:
          break;
      }
      return used;
    case Stage::ChunkDataEnd: {
      const Line line = take_line(data, used, 2);
      if (line == Line::TooLong || (line == Line::Complete && line_ != "\r\n" && line_ != "\n")) {
        fail(400, "chunk data is not followed by CRLF");
      } else if (line == Line::Complete) {
        line_.clear();
        stage_ = Stage::ChunkSize;
      }
      return used;
    }
    default:
      switch (take_line(data, used, limits_.max_head_bytes - head_bytes_)) {
        case Line::TooLong:
          fail(431, "the chunked body's trailer is larger than this server's limit of " +
                        std::to_string(limits_.max_head_bytes) + " bytes (--max-head-bytes)");
          break;
        case Line::Complete:
          head_bytes_ += line_.size();
          trailer_line();
          line_.clear();
          break;
        case Line::Partial:
          break;
      }
      return used;
  }
}

// chunk-size [ BWS ";" extensions ] - the size in hex; extensions are ignored.
void HttpRequestParser::chunk_size_line() {
  std::string_view line(line_);
  line.remove_suffix(1);
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  std::size_t digits = 0;
  std::uint64_t size = 0;
  const std::uint64_t room = limits_.max_body_bytes - request_.body.size();
  for (; digits < line.size() && hex_digit(line[digits]) >= 0; ++digits) {
    size = size * 16 + static_cast<std::uint64_t>(hex_digit(line[digits]));
    if (size > room) return fail(413, body_too_large(limits_.max_body_bytes));
  }
  const std::string_view rest = trimmed(line.substr(digits));
  if (digits == 0 || (!rest.empty() && rest.front() != ';') || !is_field_value(rest))
    return fail(400, "a chunk-size line is not a hexadecimal size");
  if (size == 0) {
    stage_ = Stage::Trailers;
    return;
  }
  remaining_ = size;
  stage_ = Stage::ChunkData;
}

// Trailer fields are checked like header lines and then dropped: nothing here reads them.
void HttpRequestParser::trailer_line() {
  std::string_view line(line_);
  line.remove_suffix(1);
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  if (line.empty()) {
    stage_ = Stage::Stopped;
    status_ = Status::Done;
    return;
  }
  if (++header_lines_ > limits_.max_header_lines)
    return fail(431, "the chunked body's trailer has more than " +
                         std::to_string(limits_.max_header_lines) +
                         " lines, this server's limit (--max-header-lines)");
  const std::size_t colon = line.find(':');
  if (colon == std::string_view::npos || !is_token(line.substr(0, colon)) ||
      !is_field_value(line.substr(colon + 1)))
    fail(400, "a trailer line is not 'Name: value'");
}

// The body grows to at most the limit: capacity doubles as usual but never past it. A fresh string
// is reserved each time because reserve() on a used one may round up to twice its capacity.
void HttpRequestParser::append_body(std::string_view bytes) {
  std::string& body = request_.body;
  const std::size_t needed = body.size() + bytes.size();
  if (needed > body.capacity()) {
    std::string grown;
    grown.reserve(std::min(std::max(needed, 2 * body.capacity()), limits_.max_body_bytes));
    grown.append(body);
    body.swap(grown);
  }
  body.append(bytes);
}

void HttpRequestParser::fail(int status, std::string message) {
  status_ = Status::Failed;
  stage_ = Stage::Stopped;
  error_ = {status, std::move(message)};
}

}  // namespace telos::exec
