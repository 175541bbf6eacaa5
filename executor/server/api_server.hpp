#pragma once
// The OpenAI-compatible HTTP server behind `telos-run serve`:
//   POST /v1/completions, POST /v1/chat/completions (JSON or server-sent events),
//   GET /v1/models, GET /health, GET /metrics (Prometheus text).
// Each HTTP request runs on a thread of the HTTP library's pool and talks to the engine through
// RequestStreams; one completion with n choices over k prompts is n*k engine requests.
//
// Limits answer with OpenAI-style JSON errors: a wrong or missing Bearer key 401, a body over
// max_body_bytes 413, a prompt over max_prompt_tokens 400, more than max_concurrent_requests
// generation requests at once 429, an unknown model 404. A streaming client that goes away has
// its engine requests cancelled, which returns their KV pages (noticed on the next write). A
// non-streaming request runs to its end (bounded by max_tokens) even when its client left: the
// HTTP library gives a handler no way to see that before it answers. shutdown() stops admitting
// (503), cancels what runs, lets the handlers finish their responses, and makes serve() return.
#include <cstddef>
#include <memory>
#include <string>

#include "executor/engine.hpp"
#include "executor/tokenizer/chat_template.hpp"
#include "executor/tokenizer/tokenizer.hpp"

namespace telos::exec {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8000;      // 0: any free port (bind() says which)
  std::string api_key;  // empty: no authentication
  std::string served_model_name;
  std::size_t max_body_bytes = 4u << 20;
  int max_prompt_tokens = 0;  // 0: the artifact's max_seq_len - 1
  int max_concurrent_requests = 128;
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
  // Serves until shutdown(); call after bind().
  void serve();
  // Safe from any thread, any number of times.
  void shutdown();

  struct State;

 private:
  std::unique_ptr<State> state_;
};

}  // namespace telos::exec
