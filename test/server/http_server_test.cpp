// HttpServer in-process, with a service whose worker handler the test writes: what a handler sees
// of a client that hangs up or stops reading. (The limits and deadlines are exercised end to end,
// against the real server, by hostile_http.test.mjs.)
#include "executor/server/http_server.hpp"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <future>
#include <thread>

namespace telos::exec {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

struct ScriptedService : HttpService {
  std::function<void(HttpExchange&)> handler;
  std::optional<HttpResponse> check_head(const HttpRequest&) override { return std::nullopt; }
  std::optional<HttpResponse> answer_now(const HttpRequest&) override { return std::nullopt; }
  void serve(const HttpRequest&, HttpExchange& exchange) override { handler(exchange); }
  HttpResponse error(int status, const std::string& message) override {
    return {status, "text/plain", message, {}};
  }
  void responded(int) override {}
};

class HttpServerTest : public ::testing::Test {
 protected:
  void start(HttpServerLimits limits) {
    server_ = std::make_unique<HttpServer>(service_, limits, 2);
    port_ = server_->bind("127.0.0.1", 0);
    thread_ = std::thread([this] { server_->serve(); });
  }
  void TearDown() override {
    if (!server_) return;
    server_->stop();
    thread_.join();
  }
  // A client connection that has sent a request for the worker's handler.
  int send_request(int receive_buffer = 0) {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    if (receive_buffer > 0)
      setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &receive_buffer, sizeof receive_buffer);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(static_cast<std::uint16_t>(port_));
    inet_pton(AF_INET, "127.0.0.1", &address.sin_addr);
    EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address), 0);
    const std::string request = "GET /work HTTP/1.1\r\nHost: localhost\r\n\r\n";
    EXPECT_EQ(::send(fd, request.data(), request.size(), 0), static_cast<ssize_t>(request.size()));
    return fd;
  }

  ScriptedService service_;
  std::unique_ptr<HttpServer> server_;
  std::thread thread_;
  int port_ = 0;
};

TEST_F(HttpServerTest, AHandlerSeesItsClientHangUp) {
  std::promise<Clock::time_point> seen;
  std::future<Clock::time_point> result = seen.get_future();
  service_.handler = [&](HttpExchange& exchange) {
    const Clock::time_point give_up = Clock::now() + std::chrono::seconds(5);
    while (!exchange.peer_closed() && Clock::now() < give_up)
      std::this_thread::sleep_for(milliseconds(5));
    seen.set_value(Clock::now());
  };
  start({});
  const int fd = send_request();
  EXPECT_EQ(result.wait_for(milliseconds(200)), std::future_status::timeout)
      << "the client is still there";
  const Clock::time_point closed = Clock::now();
  ::close(fd);
  ASSERT_EQ(result.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  EXPECT_LT(result.get() - closed, milliseconds(500));
}

TEST_F(HttpServerTest, ASendTimeoutEndsAStreamToAClientThatStopsReading) {
  std::promise<double> ended;  // seconds the handler streamed before a write failed
  service_.handler = [&](HttpExchange& exchange) {
    const Clock::time_point began = Clock::now();
    const std::string piece(16 << 10, 'x');
    bool ok = exchange.begin_stream(200, "text/plain", {});
    while (ok && Clock::now() - began < std::chrono::seconds(20)) ok = exchange.stream(piece);
    ended.set_value(std::chrono::duration<double>(Clock::now() - began).count());
  };
  HttpServerLimits limits;
  limits.send_timeout_s = 0.3;
  start(limits);
  const int fd = send_request(4096);  // and never reads
  std::future<double> result = ended.get_future();
  ASSERT_EQ(result.wait_for(std::chrono::seconds(15)), std::future_status::ready);
  EXPECT_LT(result.get(), 5.0);
  ::close(fd);
}

}  // namespace
}  // namespace telos::exec
