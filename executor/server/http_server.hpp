#pragma once
// The HTTP/1.1 server under `telos-run serve`: plain POSIX sockets, one event-loop thread and a
// fixed pool of workers. It exists because a server for untrusted clients needs what a
// general-purpose library did not give: a deadline for a whole request rather than for each read,
// limits that chunked bodies obey too, and a way for a handler to see that its client hung up.
//
// Shape. One thread owns every connection while it waits for a request, reads its head and body
// (non-blocking, through the incremental HttpRequestParser), and writes short answers; deadlines
// are checked on a 100 ms tick. A slow client therefore costs a file descriptor and a few buffers,
// never a thread. Requests the service answers at once (health, metrics, every refusal) are
// answered on the loop without blocking; the rest (generation) go to a worker, which runs the
// handler and writes its response, fixed or streamed, itself. A keep-alive connection then goes
// back to the loop, which serves pipelined requests in order.
//
// Deadlines. A new connection's head must arrive within head_timeout of its accept; a keep-alive
// connection may wait keep_alive_timeout for its next request, whose head then has head_timeout
// from its first byte. The whole body has body_timeout from the end of the head. A request that
// misses a deadline is answered 408 and closed; an idle connection is closed without a word.
// A write that makes no progress for send_timeout ends the connection, so a client that stops
// reading holds a worker for at most that long.
//
// Connections. At most max_connections are open. When one more arrives, the connection that has
// waited longest for its request to complete (an idle keep-alive one, or a slow head or body) is
// closed to make room (with a 503 if it was mid-request): a fresh client beats a slow one, so
// clients that trickle bytes cannot lock out /health. Only when every connection is being served
// by a worker is the newcomer answered 503 and closed at once. max_connections is fitted under the
// open-file limit (raising the soft limit when the hard one allows), keeping room for the rest of
// the process.
//
// Memory. Each request body is bounded by max_body_bytes, and all the bodies held at once (being
// received, or received and waiting for a worker) by max_buffered_body_bytes: the request whose
// bytes would pass that budget is answered 503 and closed, so a crowd of large uploads cannot
// exhaust the host.
//
// Refusals that leave part of a request unread (a bad head, a limit, 100-continue refused) are
// answered with "Connection: close", then the server stops writing and reads and drops whatever
// the client still sends for a short while before closing: closing with unread input would reset
// the connection and could destroy the answer before the client reads it.
//
// A peer that shuts down its sending side counts as gone: a half-close and a close look the same
// to a server that is not writing, and clients of this API do not half-close.
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "executor/server/http_request_parser.hpp"

namespace telos::exec {

// Every limit of the HTTP layer, with its default; `telos-run serve` sets each from the flag its
// message names.
struct HttpServerLimits {
  HttpRequestLimits request;
  double head_timeout_s = 10;       // --head-timeout
  double body_timeout_s = 60;       // --body-timeout
  double keep_alive_timeout_s = 5;  // --keep-alive-timeout
  double send_timeout_s = 30;       // --send-timeout
  int max_connections = 1000;       // --max-connections
  // Request bodies the server holds at once, being received or waiting for a worker: without it,
  // max_connections bodies of max_body_bytes each could be held together.
  std::size_t max_buffered_body_bytes = std::size_t{256} << 20;  // --max-buffered-bytes
};

using HttpHeaders = std::vector<std::pair<std::string, std::string>>;

struct HttpResponse {
  int status = 200;
  std::string content_type;
  std::string body;
  HttpHeaders headers;  // more headers, e.g. Allow
};

// One request being answered on a worker: the response goes out through it, and it tells whether
// the client is still there. Made by HttpServer (or by a test, over any connected socket).
class HttpExchange {
 public:
  // `keep_alive`: whether the response may leave the connection open (the request allows it and
  // the server is not stopping).
  HttpExchange(int fd, const HttpRequest& request, bool keep_alive,
               std::chrono::milliseconds send_timeout);

  // Whether the client has closed its side or the connection failed. Costs one poll(2).
  bool peer_closed() const;
  // A whole response with Content-Length. False when it could not be written (client gone).
  bool respond(const HttpResponse& response);
  // A response whose body follows in pieces: chunked transfer coding for HTTP/1.1, the body up to
  // the close for HTTP/1.0. False when the client is gone.
  bool begin_stream(int status, std::string_view content_type, const HttpHeaders& headers);
  bool stream(std::string_view data);
  bool end_stream();

  // The status sent, or 0 before any response began.
  int status() const { return status_; }
  // Whether the response was written completely.
  bool complete() const { return state_ == State::Done; }
  // Whether the connection can take the next request.
  bool reusable() const { return complete() && keep_alive_; }

 private:
  enum class State { Fresh, Streaming, Done, Broken };
  bool send_all(std::string_view bytes);

  int fd_;
  bool keep_alive_;
  bool head_only_;  // HEAD: the head of the response, no body
  bool chunked_;    // HTTP/1.1 streams
  std::chrono::milliseconds send_timeout_;
  State state_ = State::Fresh;
  int status_ = 0;
};

// What the server serves. check_head and answer_now run on the event loop and must not block;
// serve runs on a worker.
class HttpService {
 public:
  virtual ~HttpService() = default;
  // A request's head has arrived: a refusal to answer at once (its body is never read), or nullopt
  // to read the body (after 100 Continue when the client asked for it).
  virtual std::optional<HttpResponse> check_head(const HttpRequest& head) = 0;
  // The whole request has arrived: its response when it can be made at once, or nullopt to hand
  // the request to a worker's serve().
  virtual std::optional<HttpResponse> answer_now(const HttpRequest& request) = 0;
  // Answers the request through `exchange`. When it returns without a response (the client left),
  // the connection is closed.
  virtual void serve(const HttpRequest& request, HttpExchange& exchange) = 0;
  // The body of an error the HTTP layer answers by itself: a malformed request, a limit, a
  // deadline, the connection cap.
  virtual HttpResponse error(int status, const std::string& message) = 0;
  // Each response's status as it is sent.
  virtual void responded(int status) = 0;
};

class HttpServer {
 public:
  // `workers` threads run serve(); the service must outlive the server.
  HttpServer(HttpService& service, HttpServerLimits limits, int workers);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Listens on host:port (an address or a name; port 0 picks a free one) and returns the port.
  // Throws telos::Error naming the address when it cannot.
  int bind(const std::string& host, int port);
  // The connection cap in force: max_connections, or less where the open-file limit is lower.
  int max_connections() const;
  int open_connections() const;
  // Serves until stop(): then stops accepting, closes connections that are not being served,
  // waits for the workers' handlers to return, and returns.
  void serve();
  // Safe from any thread, any number of times.
  void stop();

  struct Loop;

 private:
  std::unique_ptr<Loop> loop_;
};

}  // namespace telos::exec
