#pragma once
// The OpenAI-compatible HTTP server behind `telos-run serve`:
//   POST /v1/completions, POST /v1/chat/completions (JSON or server-sent events),
//   GET /v1/models, GET /health, GET /metrics (Prometheus text).
// HTTP is our own small server (http_server.hpp): an event loop reads every request and answers
// health, metrics, models and every refusal itself, so they never wait behind generation; a
// completion or chat request runs on a worker and talks to the engine through RequestStreams (one
// completion with n choices over k prompts is n*k engine requests).
//
// Refusals are OpenAI-style JSON errors. Decided by the head alone, before any body is read: a
// Host that is a name other than localhost or an --allowed-host 403 (DNS rebinding; IP literals
// always pass), a wrong or missing Bearer key on /v1/ 401, an unknown path 404, a method the path
// does not take 405 with Allow, a POST body not sent as application/json 415 (a browser page
// cannot send that cross-origin without a preflight, which is never granted). The HTTP layer adds
// 400 for malformed requests, 408 for missed deadlines, 413 for bodies over max_body_bytes
// (chunked ones too), 431 for heads over their limits, and 503 over the connection cap. Then a
// prompt over max_prompt_tokens 400, more than max_concurrent_requests generation requests at
// once 429, an unknown model 404.
//
// A client that goes away has its engine requests cancelled, which returns their KV pages: a
// stream notices on its next write or within 100 ms when idle, a non-streaming request (n > 1
// included) within 100 ms while it waits for its choices. shutdown() stops admitting (503),
// cancels what runs, lets the handlers finish their responses, and makes serve() return.
#include <memory>
#include <string>
#include <vector>

#include "executor/engine.hpp"
#include "executor/server/http_server.hpp"
#include "executor/tokenizer/chat_template.hpp"
#include "executor/tokenizer/tokenizer.hpp"

namespace telos::exec {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8000;      // 0: any free port (bind() says which)
  std::string api_key;  // empty: no authentication
  // Host names answered besides localhost and IP literals; "*" answers any.
  std::vector<std::string> allowed_hosts;
  std::string served_model_name;
  int max_prompt_tokens = 0;  // 0: the artifact's max_seq_len - 1
  int max_concurrent_requests = 128;
  HttpServerLimits http;  // body and head sizes, deadlines, the connection cap
};

// What is served. The tokenizer and chat template are null when the artifact has none: then only
// token-id prompts work, and text prompts and chat are refused with a 400 that says why.
struct ServedModel {
  Engine* engine = nullptr;
  const Tokenizer* tokenizer = nullptr;
  const ChatTemplate* chat_template = nullptr;
};

class ApiServer {
 public:
  ApiServer(ServedModel model, ServerOptions options);
  ~ApiServer();
  ApiServer(const ApiServer&) = delete;
  ApiServer& operator=(const ApiServer&) = delete;

  // Binds the listening socket and returns its port. Throws telos::Error naming the address when
  // it cannot.
  int bind();
  // The connection cap in force (ServerOptions::http.max_connections, or less where the open-file
  // limit is lower).
  int max_connections() const;
  // Serves until shutdown(); call after bind().
  void serve();
  // Safe from any thread, any number of times.
  void shutdown();

  struct State;

 private:
  std::unique_ptr<State> state_;
};

}  // namespace telos::exec
