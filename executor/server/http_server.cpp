#include "executor/server/http_server.hpp"

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <deque>
#include <list>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <unordered_map>

#include "support/error.hpp"

namespace telos::exec {
namespace {

using Clock = std::chrono::steady_clock;

// One read's worth: a connection never holds more unparsed input than this.
constexpr std::size_t kReadChunk = 64u << 10;
// How often deadlines are checked, and so how late one may fire.
constexpr auto kTick = std::chrono::milliseconds(100);
// How long a refused connection's unread input is read and dropped before the close.
constexpr auto kLinger = std::chrono::seconds(2);
// Reads per readiness event of a lingering connection, so that a flood cannot starve the loop.
constexpr int kLingerReadsPerEvent = 16;
// File descriptors kept for everything but client connections: the listener, epoll, the engine's
// devices and files, logs.
constexpr rlim_t kReservedFds = 128;

Clock::duration seconds(double s) {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
}

std::string seconds_text(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", s);
  return buf;
}

const char* reason_phrase(int status) {
  static constexpr std::pair<int, const char*> kPhrases[] = {
      {200, "OK"},
      {400, "Bad Request"},
      {401, "Unauthorized"},
      {403, "Forbidden"},
      {404, "Not Found"},
      {405, "Method Not Allowed"},
      {408, "Request Timeout"},
      {413, "Content Too Large"},
      {415, "Unsupported Media Type"},
      {417, "Expectation Failed"},
      {429, "Too Many Requests"},
      {431, "Request Header Fields Too Large"},
      {500, "Internal Server Error"},
      {501, "Not Implemented"},
      {503, "Service Unavailable"},
      {505, "HTTP Version Not Supported"},
  };
  for (const auto& [code, phrase] : kPhrases)
    if (code == status) return phrase;
  return status < 400 ? "OK" : status < 500 ? "Client Error" : "Server Error";
}

std::string http_date() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[40];
  std::strftime(buf, sizeof buf, "%a, %d %b %Y %H:%M:%S GMT", &tm);
  return buf;
}

enum class Framing { Length, Chunked, UntilClose };

std::string response_head(int status, std::string_view content_type, const HttpHeaders& headers,
                          Framing framing, std::size_t length, bool keep_alive) {
  std::string out = "HTTP/1.1 " + std::to_string(status) + " " + reason_phrase(status) +
                    "\r\nDate: " + http_date() + "\r\n";
  if (!content_type.empty()) out.append("Content-Type: ").append(content_type).append("\r\n");
  for (const auto& [name, value] : headers) out.append(name).append(": ").append(value) += "\r\n";
  if (framing == Framing::Length) out += "Content-Length: " + std::to_string(length) + "\r\n";
  if (framing == Framing::Chunked) out += "Transfer-Encoding: chunked\r\n";
  out += keep_alive ? "Connection: keep-alive\r\n\r\n" : "Connection: close\r\n\r\n";
  return out;
}

std::string whole_response(const HttpResponse& r, bool keep_alive, bool head_only) {
  std::string out = response_head(r.status, r.content_type, r.headers, Framing::Length,
                                  r.body.size(), keep_alive);
  if (!head_only) out += r.body;
  return out;
}

// The connection cap that fits under the open-file limit, raising the soft limit towards the hard
// one when that is needed.
int fit_connections(int wanted) {
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0) return wanted;
  const rlim_t needed = static_cast<rlim_t>(wanted) + kReservedFds;
  if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < needed) {
    rlimit raised = rl;
    raised.rlim_cur = rl.rlim_max == RLIM_INFINITY ? needed : std::min(needed, rl.rlim_max);
    if (setrlimit(RLIMIT_NOFILE, &raised) == 0) rl = raised;
  }
  if (rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur >= needed) return wanted;
  return rl.rlim_cur > kReservedFds ? static_cast<int>(rl.rlim_cur - kReservedFds) : 1;
}

// One client connection. The event loop owns it except while a worker serves its request.
struct Connection {
  // Reading: waiting for a request or reading one. Flushing: the loop writes `out`. Serving: a
  // worker has it. Lingering: refused; reading and dropping input until the client closes.
  // Closed: its descriptor is closed and it is freed after the loop's current round, so that the
  // functions below it on the stack may still look at its phase.
  enum class Phase { Reading, Flushing, Serving, Lingering, Closed };
  // What follows once `out` is written.
  enum class Then { ReadBody, NextRequest, Linger };

  Connection(int fd, HttpRequestLimits limits) : fd(fd), parser(limits) {}

  int fd;
  Phase phase = Phase::Reading;
  HttpRequestParser parser;
  std::string in;  // received, not yet taken by the parser (pipelined requests)
  std::string out;
  std::size_t out_sent = 0;
  Then then = Then::NextRequest;
  bool advancing = false;     // advance() is on the stack: it serves pipelined input itself
  bool idle = false;          // a keep-alive connection between requests
  bool reading_body = false;  // the head has been accepted
  Clock::time_point read_deadline, write_deadline;
  std::uint32_t events = 0;  // what epoll watches; 0 while not registered
  std::size_t body_bytes = 0;  // of the loop's body budget: the body this connection holds
  bool held = false;           // in the loop's eviction order
  std::list<Connection*>::iterator held_at;
  // While a worker serves it.
  HttpRequest request;
  bool responded = false;  // the worker wrote a whole response
  bool reusable = false;   // ... and the connection may take the next request
};

}  // namespace

// ---- HttpExchange ----

HttpExchange::HttpExchange(int fd, const HttpRequest& request, bool keep_alive,
                           std::chrono::milliseconds send_timeout)
    : fd_(fd),
      keep_alive_(keep_alive),
      head_only_(request.method == "HEAD"),
      chunked_(request.minor_version == 1),
      send_timeout_(send_timeout) {}

bool HttpExchange::peer_closed() const {
  pollfd p{fd_, POLLRDHUP, 0};
  return ::poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0;
}

bool HttpExchange::respond(const HttpResponse& response) {
  if (state_ != State::Fresh) throw std::logic_error("HttpExchange: a second response");
  status_ = response.status;
  state_ =
      send_all(whole_response(response, keep_alive_, head_only_)) ? State::Done : State::Broken;
  return state_ == State::Done;
}

bool HttpExchange::begin_stream(int status, std::string_view content_type,
                                const HttpHeaders& headers) {
  if (state_ != State::Fresh) throw std::logic_error("HttpExchange: a second response");
  status_ = status;
  if (!chunked_) keep_alive_ = false;  // HTTP/1.0: the close ends the body
  const Framing framing = chunked_ ? Framing::Chunked : Framing::UntilClose;
  state_ = send_all(response_head(status, content_type, headers, framing, 0, keep_alive_))
               ? State::Streaming
               : State::Broken;
  return state_ == State::Streaming;
}

bool HttpExchange::stream(std::string_view data) {
  if (state_ != State::Streaming) return false;
  // An empty chunk would end the body.
  if (data.empty() || head_only_) return true;
  std::string piece;
  if (chunked_) {
    char size[24];
    std::snprintf(size, sizeof size, "%zx\r\n", data.size());
    piece.append(size).append(data) += "\r\n";
  } else {
    piece = data;
  }
  if (!send_all(piece)) state_ = State::Broken;
  return state_ == State::Streaming;
}

bool HttpExchange::end_stream() {
  if (state_ != State::Streaming) return false;
  const bool ok = !chunked_ || head_only_ || send_all("0\r\n\r\n");
  state_ = ok ? State::Done : State::Broken;
  return ok;
}

// The socket is non-blocking; a full send buffer is waited on for at most send_timeout at a time.
bool HttpExchange::send_all(std::string_view bytes) {
  while (!bytes.empty()) {
    const ssize_t n = ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL);
    if (n > 0) {
      bytes.remove_prefix(static_cast<std::size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      pollfd p{fd_, POLLOUT, 0};
      const int ready = ::poll(&p, 1, static_cast<int>(send_timeout_.count()));
      if (ready < 0 && errno == EINTR) continue;
      if (ready <= 0 || (p.revents & POLLERR) != 0) return false;
      continue;
    }
    return false;
  }
  return true;
}

// ---- HttpServer::Loop ----

struct HttpServer::Loop {
  Loop(HttpService& service, HttpServerLimits limits, int workers);
  ~Loop();

  void run();
  void stop();

  void wake();
  void watch(Connection& c, std::uint32_t events);
  void hold(Connection& c, bool first);
  void unhold(Connection& c);
  void account_body(Connection& c, std::size_t bytes);

  void accept_all();
  void open_connection(int fd);
  bool evict_oldest();
  void send_at_once(int fd, int status, const std::string& message);
  void on_event(int fd);
  void read_from(Connection& c);
  void drain(Connection& c);
  void advance(Connection& c);
  template <typename Call>
  std::optional<HttpResponse> ask(Call call);
  void on_head(Connection& c);
  void on_request(Connection& c);
  void answer(Connection& c, const HttpResponse& response, bool keep_alive, bool head_only);
  void refuse(Connection& c, int status, const std::string& message);
  void start_flush(Connection& c, Connection::Then then);
  void flush(Connection& c);
  void next_request(Connection& c);
  void linger(Connection& c);
  void close(Connection& c);
  void dispatch(Connection& c, HttpRequest request);
  void take_returned();
  void check_deadlines();
  void close_down();
  void worker();
  void serve_one(Connection& c);

  HttpService& service;
  const HttpServerLimits limits;
  const int worker_count;
  const int max_connections;
  int listen_fd = -1, epoll_fd = -1, wake_fd = -1;
  std::atomic<bool> stopping{false};
  std::atomic<int> open{0};

  // The loop thread's own.
  std::unordered_map<int, std::unique_ptr<Connection>> connections;  // every open one, by fd
  std::vector<std::unique_ptr<Connection>> closed;  // freed at the end of the loop's round
  std::list<Connection*> order;  // the loop's connections, the longest waiting first
  std::vector<char> buffer = std::vector<char>(kReadChunk);
  int serving = 0;  // connections handed to workers and not yet back
  std::size_t body_bytes = 0;  // request bodies held, against max_buffered_body_bytes
  bool listener_paused = false;
  bool closing_down = false;

  // Shared with the workers.
  std::mutex mutex;
  std::condition_variable work_ready;
  std::deque<Connection*> work;
  std::vector<Connection*> returned;
  bool workers_exit = false;
};

HttpServer::Loop::Loop(HttpService& service, HttpServerLimits limits, int workers)
    : service(service),
      limits(limits),
      worker_count(std::max(workers, 1)),
      max_connections(fit_connections(std::max(limits.max_connections, 1))) {
  epoll_fd = epoll_create1(EPOLL_CLOEXEC);
  wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (epoll_fd < 0 || wake_fd < 0) fail(std::string("HTTP server: ") + std::strerror(errno));
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = wake_fd;
  epoll_ctl(epoll_fd, EPOLL_CTL_ADD, wake_fd, &ev);
}

HttpServer::Loop::~Loop() {
  for (auto& [fd, c] : connections) ::close(fd);
  for (int fd : {listen_fd, epoll_fd, wake_fd})
    if (fd >= 0) ::close(fd);
}

void HttpServer::Loop::wake() {
  const std::uint64_t one = 1;
  if (::write(wake_fd, &one, sizeof one) < 0) {
    // The counter is already non-zero: the loop wakes anyway.
  }
}

void HttpServer::Loop::stop() {
  stopping = true;
  wake();
}

void HttpServer::Loop::watch(Connection& c, std::uint32_t events) {
  if (c.events == events) return;
  epoll_event ev{};
  ev.events = events;
  ev.data.fd = c.fd;
  if (events == 0)
    epoll_ctl(epoll_fd, EPOLL_CTL_DEL, c.fd, &ev);
  else
    epoll_ctl(epoll_fd, c.events == 0 ? EPOLL_CTL_ADD : EPOLL_CTL_MOD, c.fd, &ev);
  c.events = events;
}

// `first`: the next to be evicted (a refused connection); else the last (it just made progress).
void HttpServer::Loop::hold(Connection& c, bool first) {
  unhold(c);
  c.held_at = order.insert(first ? order.begin() : order.end(), &c);
  c.held = true;
}

void HttpServer::Loop::unhold(Connection& c) {
  if (c.held) order.erase(c.held_at);
  c.held = false;
}

// Sets what connection `c` holds of request bodies, in the loop's body budget.
void HttpServer::Loop::account_body(Connection& c, std::size_t bytes) {
  body_bytes = body_bytes - c.body_bytes + bytes;
  c.body_bytes = bytes;
}

void HttpServer::Loop::run() {
  std::vector<std::thread> workers;
  for (int i = 0; i < worker_count; ++i) workers.emplace_back([this] { worker(); });
  std::vector<epoll_event> events(256);
  Clock::time_point next_check = Clock::now() + kTick;
  for (;;) {
    if (stopping && !closing_down) close_down();
    if (closing_down && serving == 0) break;
    const int n = epoll_wait(epoll_fd, events.data(), static_cast<int>(events.size()),
                             static_cast<int>(kTick.count()));
    for (int i = 0; i < n; ++i) {
      closed.clear();
      const int fd = events[static_cast<std::size_t>(i)].data.fd;
      if (fd == wake_fd) {
        std::uint64_t count;
        if (::read(wake_fd, &count, sizeof count) < 0) count = 0;
        take_returned();
      } else if (fd == listen_fd) {
        accept_all();
      } else {
        on_event(fd);
      }
    }
    closed.clear();
    if (Clock::now() >= next_check) {
      next_check = Clock::now() + kTick;
      check_deadlines();
      closed.clear();
      if (listener_paused && listen_fd >= 0) {
        epoll_event ev{};
        ev.events = EPOLLIN;
        ev.data.fd = listen_fd;
        epoll_ctl(epoll_fd, EPOLL_CTL_MOD, listen_fd, &ev);
        listener_paused = false;
      }
    }
  }
  {
    std::lock_guard lock(mutex);
    workers_exit = true;
  }
  work_ready.notify_all();
  for (std::thread& t : workers) t.join();
}

void HttpServer::Loop::close_down() {
  closing_down = true;
  if (listen_fd >= 0) ::close(listen_fd);
  listen_fd = -1;
  while (!order.empty()) close(*order.front());
}

void HttpServer::Loop::accept_all() {
  for (;;) {
    const int fd = ::accept4(listen_fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        // Out of descriptors: pending connections wait in the backlog until the next tick.
        epoll_event ev{};
        ev.data.fd = listen_fd;
        epoll_ctl(epoll_fd, EPOLL_CTL_MOD, listen_fd, &ev);
        listener_paused = true;
      }
      return;
    }
    if (open >= max_connections && !evict_oldest()) {
      send_at_once(fd, 503,
                   "the server is at its limit of " + std::to_string(max_connections) +
                       " open connections (--max-connections), all of them busy; retry later");
      ::close(fd);
      continue;
    }
    open_connection(fd);
  }
}

void HttpServer::Loop::open_connection(int fd) {
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);  // events go out as they are made
  auto owned = std::make_unique<Connection>(fd, limits.request);
  Connection& c = *owned;
  connections[fd] = std::move(owned);
  ++open;
  c.read_deadline = Clock::now() + seconds(limits.head_timeout_s);
  hold(c, false);
  watch(c, EPOLLIN | EPOLLRDHUP);
}

// Closes the connection that has waited longest for its request, if the loop holds any.
bool HttpServer::Loop::evict_oldest() {
  if (order.empty()) return false;
  Connection& c = *order.front();
  if (c.phase == Connection::Phase::Reading && c.parser.started())
    send_at_once(c.fd, 503,
                 "the server is at its limit of " + std::to_string(max_connections) +
                     " open connections (--max-connections) and this request was the slowest to "
                     "arrive; retry later");
  close(c);
  return true;
}

// A refusal written without waiting: whatever the socket takes now, before the close.
void HttpServer::Loop::send_at_once(int fd, int status, const std::string& message) {
  const std::string bytes = whole_response(service.error(status, message), false, false);
  if (::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL | MSG_DONTWAIT) < 0) {
    // The client is gone or not reading; it is closed either way.
  }
  service.responded(status);
}

void HttpServer::Loop::on_event(int fd) {
  auto it = connections.find(fd);
  if (it == connections.end()) return;
  Connection& c = *it->second;
  switch (c.phase) {
    case Connection::Phase::Reading:
      return read_from(c);
    case Connection::Phase::Flushing:
      return flush(c);
    case Connection::Phase::Lingering:
      return drain(c);
    case Connection::Phase::Serving:
    case Connection::Phase::Closed:
      return;
  }
}

void HttpServer::Loop::read_from(Connection& c) {
  const ssize_t n = ::recv(c.fd, buffer.data(), buffer.size(), 0);
  if (n == 0) return close(c);  // the client left (mid-request or between requests)
  if (n < 0) {
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return;
    return close(c);
  }
  c.in.append(buffer.data(), static_cast<std::size_t>(n));
  advance(c);
}

void HttpServer::Loop::drain(Connection& c) {
  for (int i = 0; i < kLingerReadsPerEvent; ++i) {
    const ssize_t n = ::recv(c.fd, buffer.data(), buffer.size(), 0);
    if (n > 0) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return;
    return close(c);
  }
}

// Feeds the parser what has arrived and acts on what it found, until it needs more input or the
// connection leaves the Reading phase. Pipelined requests answered at once are served by this
// loop, not by recursion: a response that is written at once comes back here through flush().
void HttpServer::Loop::advance(Connection& c) {
  if (c.advancing) return;
  c.advancing = true;
  while (c.phase == Connection::Phase::Reading) {
    HttpRequestParser& parser = c.parser;
    switch (parser.status()) {
      case HttpRequestParser::Status::NeedMore:
        if (c.in.empty()) {
          c.advancing = false;
          return;
        }
        c.in.erase(0, parser.feed(c.in));
        account_body(c, parser.request().body.capacity());
        if (body_bytes > limits.max_buffered_body_bytes) {
          refuse(c, 503,
                 "the server holds its limit of " +
                     std::to_string(limits.max_buffered_body_bytes) +
                     " bytes of request bodies at once (--max-buffered-bytes); retry later");
          break;
        }
        if (c.idle && parser.started()) {
          c.idle = false;
          c.read_deadline = Clock::now() + seconds(limits.head_timeout_s);
        }
        break;
      case HttpRequestParser::Status::Failed:
        refuse(c, parser.error().status, parser.error().message);
        break;
      case HttpRequestParser::Status::HeadDone:
        on_head(c);
        break;
      case HttpRequestParser::Status::Done:
        on_request(c);
        break;
    }
  }
  c.advancing = false;
}

// The service's answer, or a 500 when it throws: nothing a request does may stop the loop.
template <typename Call>
std::optional<HttpResponse> HttpServer::Loop::ask(Call call) {
  try {
    return call();
  } catch (const std::exception& e) {
    return service.error(500, std::string("internal error: ") + e.what());
  }
}

void HttpServer::Loop::on_head(Connection& c) {
  const HttpRequest& head = c.parser.request();
  if (std::optional<HttpResponse> refusal = ask([&] { return service.check_head(head); })) {
    // A refused request without a body leaves the connection usable; one with a body unread
    // does not.
    const bool head_only = head.method == "HEAD";
    const bool keep_alive = head.keep_alive && !c.parser.expects_body() && !stopping;
    if (keep_alive) {
      c.parser.begin_body();
      c.parser.take();
    }
    return answer(c, *refusal, keep_alive, head_only);
  }
  const bool send_continue = head.expect_continue && c.parser.expects_body() && c.in.empty();
  c.parser.begin_body();
  c.reading_body = true;
  c.read_deadline = Clock::now() + seconds(limits.body_timeout_s);
  if (send_continue) {
    c.out = "HTTP/1.1 100 Continue\r\n\r\n";
    start_flush(c, Connection::Then::ReadBody);
  }
}

void HttpServer::Loop::on_request(Connection& c) {
  HttpRequest request = c.parser.take();
  c.reading_body = false;
  if (std::optional<HttpResponse> response = ask([&] { return service.answer_now(request); })) {
    account_body(c, 0);  // the body goes with `request`, here
    return answer(c, *response, request.keep_alive && !stopping, request.method == "HEAD");
  }
  dispatch(c, std::move(request));
}

void HttpServer::Loop::answer(Connection& c, const HttpResponse& response, bool keep_alive,
                              bool head_only) {
  service.responded(response.status);
  c.out = whole_response(response, keep_alive, head_only);
  start_flush(c, keep_alive ? Connection::Then::NextRequest : Connection::Then::Linger);
}

void HttpServer::Loop::refuse(Connection& c, int status, const std::string& message) {
  answer(c, service.error(status, message), false, false);
}

void HttpServer::Loop::start_flush(Connection& c, Connection::Then then) {
  c.phase = Connection::Phase::Flushing;
  c.then = then;
  c.out_sent = 0;
  c.write_deadline = Clock::now() + seconds(limits.send_timeout_s);
  flush(c);
}

void HttpServer::Loop::flush(Connection& c) {
  while (c.out_sent < c.out.size()) {
    const ssize_t n =
        ::send(c.fd, c.out.data() + c.out_sent, c.out.size() - c.out_sent, MSG_NOSIGNAL);
    if (n > 0) {
      c.out_sent += static_cast<std::size_t>(n);
      c.write_deadline = Clock::now() + seconds(limits.send_timeout_s);
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      return watch(c, EPOLLOUT);
    } else {
      return close(c);
    }
  }
  c.out.clear();
  c.out_sent = 0;
  switch (c.then) {
    case Connection::Then::ReadBody:
      c.phase = Connection::Phase::Reading;
      watch(c, EPOLLIN | EPOLLRDHUP);
      return advance(c);
    case Connection::Then::NextRequest:
      return next_request(c);
    case Connection::Then::Linger:
      return linger(c);
  }
}

// A keep-alive connection after its response: pipelined input already here is served first.
void HttpServer::Loop::next_request(Connection& c) {
  if (stopping) return close(c);
  c.phase = Connection::Phase::Reading;
  c.idle = true;
  c.reading_body = false;
  c.read_deadline = Clock::now() + seconds(limits.keep_alive_timeout_s);
  hold(c, false);
  watch(c, EPOLLIN | EPOLLRDHUP);
  advance(c);
}

void HttpServer::Loop::linger(Connection& c) {
  ::shutdown(c.fd, SHUT_WR);
  c.phase = Connection::Phase::Lingering;
  c.in.clear();
  c.parser = HttpRequestParser(limits.request);  // a refused request's partial body
  account_body(c, 0);
  c.read_deadline = Clock::now() + kLinger;
  hold(c, true);
  watch(c, EPOLLIN | EPOLLRDHUP);
}

void HttpServer::Loop::close(Connection& c) {
  if (c.phase == Connection::Phase::Closed) return;
  unhold(c);
  account_body(c, 0);
  c.phase = Connection::Phase::Closed;
  ::close(c.fd);  // also leaves epoll
  auto it = connections.find(c.fd);
  closed.push_back(std::move(it->second));
  connections.erase(it);
  --open;
}

void HttpServer::Loop::dispatch(Connection& c, HttpRequest request) {
  watch(c, 0);
  unhold(c);
  c.phase = Connection::Phase::Serving;
  c.request = std::move(request);
  ++serving;
  {
    std::lock_guard lock(mutex);
    work.push_back(&c);
  }
  work_ready.notify_one();
}

void HttpServer::Loop::take_returned() {
  std::vector<Connection*> back;
  {
    std::lock_guard lock(mutex);
    back.swap(returned);
  }
  for (Connection* c : back) {
    --serving;
    c->request = HttpRequest();  // its body may be megabytes
    account_body(*c, 0);
    if (stopping || !c->responded)
      close(*c);
    else if (c->reusable)
      next_request(*c);
    else
      linger(*c);
  }
}

void HttpServer::Loop::check_deadlines() {
  const Clock::time_point now = Clock::now();
  for (auto it = order.begin(); it != order.end();) {
    Connection& c = **it;
    ++it;  // c may be closed, or moved to the front, below
    switch (c.phase) {
      case Connection::Phase::Reading:
        if (now < c.read_deadline) break;
        if (!c.parser.started()) {
          close(c);  // nothing was asked: no answer
        } else if (c.reading_body) {
          refuse(c, 408,
                 "the request body did not arrive within " + seconds_text(limits.body_timeout_s) +
                     " s (--body-timeout)");
        } else {
          refuse(c, 408,
                 "the request head did not arrive within " + seconds_text(limits.head_timeout_s) +
                     " s (--head-timeout)");
        }
        break;
      case Connection::Phase::Flushing:
        if (now >= c.write_deadline) close(c);
        break;
      case Connection::Phase::Lingering:
        if (now >= c.read_deadline) close(c);
        break;
      case Connection::Phase::Serving:
      case Connection::Phase::Closed:
        break;
    }
  }
}

void HttpServer::Loop::worker() {
  for (;;) {
    Connection* c = nullptr;
    {
      std::unique_lock lock(mutex);
      work_ready.wait(lock, [&] { return workers_exit || !work.empty(); });
      if (work.empty()) return;
      c = work.front();
      work.pop_front();
    }
    serve_one(*c);
    {
      std::lock_guard lock(mutex);
      returned.push_back(c);
    }
    wake();
  }
}

void HttpServer::Loop::serve_one(Connection& c) {
  HttpExchange exchange(
      c.fd, c.request, c.request.keep_alive && !stopping,
      std::chrono::duration_cast<std::chrono::milliseconds>(seconds(limits.send_timeout_s)));
  try {
    service.serve(c.request, exchange);
  } catch (const std::exception& e) {
    if (exchange.status() == 0)
      exchange.respond(service.error(500, std::string("internal error: ") + e.what()));
  }
  if (exchange.status() != 0) service.responded(exchange.status());
  c.responded = exchange.complete();
  c.reusable = exchange.reusable();
}

// ---- HttpServer ----

HttpServer::HttpServer(HttpService& service, HttpServerLimits limits, int workers)
    : loop_(std::make_unique<Loop>(service, limits, workers)) {}

HttpServer::~HttpServer() = default;

int HttpServer::bind(const std::string& host, int port) {
  const std::string where = host + ":" + std::to_string(port);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const int rc = getaddrinfo(host.empty() ? nullptr : host.c_str(), std::to_string(port).c_str(),
                             &hints, &found);
  if (rc != 0) fail("cannot listen on " + where + " (" + gai_strerror(rc) + ")");
  int fd = -1;
  std::string why = "no address";
  for (addrinfo* a = found; a && fd < 0; a = a->ai_next) {
    fd = ::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    const int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(fd, a->ai_addr, a->ai_addrlen) != 0 || ::listen(fd, SOMAXCONN) != 0) {
      why = std::strerror(errno);
      ::close(fd);
      fd = -1;
    }
  }
  freeaddrinfo(found);
  if (fd < 0)
    fail("cannot listen on " + where +
         " (address in use, or not an address of this machine): " + why);
  sockaddr_storage address{};
  socklen_t length = sizeof address;
  getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length);
  const int bound =
      ntohs(address.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&address)->sin6_port
                                          : reinterpret_cast<sockaddr_in*>(&address)->sin_port);
  Loop& l = *loop_;
  l.listen_fd = fd;
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = fd;
  epoll_ctl(l.epoll_fd, EPOLL_CTL_ADD, fd, &ev);
  return bound;
}

int HttpServer::max_connections() const {
  return loop_->max_connections;
}

int HttpServer::open_connections() const {
  return loop_->open;
}

void HttpServer::serve() {
  loop_->run();
}

void HttpServer::stop() {
  loop_->stop();
}

}  // namespace telos::exec
