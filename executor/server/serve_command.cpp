#include "executor/server/serve_command.hpp"

#include <pthread.h>
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>

#include "executor/commands.hpp"
#include "executor/engine.hpp"
#include "executor/server/api_server.hpp"
#include "support/error.hpp"

namespace telos::exec {
namespace {

namespace fs = std::filesystem;

struct ServeOptions {
  std::string artifact;
  std::string api_key_file;
  ServerOptions server;
  EngineChoice engine = EngineChoice::Auto;
  RuntimeLimits limits;
  bool prefix_cache = true;  // --no-prefix-cache: false
};

// The API key, from --api-key, --api-key-file (the file's text, trailing white space dropped) or,
// when neither is given, the environment variable TELOS_API_KEY; "" for none.
std::string api_key(const ServeOptions& o) {
  std::string key = o.server.api_key, from = "--api-key";
  if (!o.api_key_file.empty()) {
    std::ifstream in(o.api_key_file, std::ios::binary);
    if (!in) fail("--api-key-file " + o.api_key_file + ": cannot read the file");
    key.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    while (!key.empty() && std::isspace(static_cast<unsigned char>(key.back()))) key.pop_back();
    if (key.empty()) fail("--api-key-file " + o.api_key_file + ": the file holds no key");
    from = "--api-key-file " + o.api_key_file;
  } else if (const char* env = std::getenv("TELOS_API_KEY"); key.empty() && env) {
    key = env;
    from = "TELOS_API_KEY";
  }
  if (std::any_of(key.begin(), key.end(), [](char c) {
        return static_cast<unsigned char>(c) <= 0x20 || static_cast<unsigned char>(c) == 0x7f;
      }))
    fail(from +
         ": the API key must not hold spaces or control characters (it travels in an "
         "HTTP header)");
  return key;
}

int run_serve(const ServeOptions& o) {
  // One thread takes SIGINT and SIGTERM (sigwait) and shuts the server down. They are blocked
  // here, before any other thread starts, so that every thread inherits the mask.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  // A client that went away must not kill the server with SIGPIPE on the next write.
  std::signal(SIGPIPE, SIG_IGN);

  ServerOptions server_options = o.server;
  server_options.api_key = api_key(o);
  std::shared_ptr<const Artifact> artifact = load_artifact(o.artifact, o.engine);
  const fs::path dir(artifact->dir());
  std::optional<Tokenizer> tokenizer;
  std::optional<ChatTemplate> chat_template;
  if (fs::is_regular_file(dir / "tokenizer.json")) {
    tokenizer = Tokenizer::from_file((dir / "tokenizer.json").string());
    // Base models have no chat template (absent is not an error; a broken one is). It may sit in
    // tokenizer_config.json or, in newer checkpoints, in chat_template.jinja beside it.
    chat_template = ChatTemplate::load_if_present((dir / "tokenizer_config.json").string());
  }

  EngineOptions options;
  options.limits = o.limits;
  options.prefix_cache = o.prefix_cache;
  std::unique_ptr<Engine> engine =
      Engine::create(artifact, make_backend(artifact, o.engine, std::cerr, o.limits), options);
  ApiServer server(
      {engine.get(), tokenizer ? &*tokenizer : nullptr, chat_template ? &*chat_template : nullptr},
      server_options);
  const int port = server.bind();
  if (server.max_connections() < o.server.http.max_connections)
    std::cerr << "telos-run serve: --max-connections lowered from " << o.server.http.max_connections
              << " to " << server.max_connections()
              << " to fit under the open-file limit (ulimit -n); raise that limit to allow more"
              << std::endl;
  std::cerr << "telos-run serve: serving " << artifact->model().name << " on http://"
            << o.server.host << ":" << port << " with the " << engine->stats().backend << " engine"
            << (tokenizer ? "" : " (no tokenizer in the artifact: token-id prompts only)")
            << (tokenizer && !chat_template ? " (no chat template: /v1/chat/completions refused)"
                                            : "")
            << std::endl;

  std::atomic<bool> signalled{false};
  std::thread signal_thread([&] {
    int sig = 0;
    sigwait(&signals, &sig);
    signalled = true;
    server.shutdown();
  });
  server.serve();
  if (!signalled) pthread_kill(signal_thread.native_handle(), SIGTERM);
  signal_thread.join();
  if (!signalled) fail("serve: the HTTP server stopped listening unexpectedly");
  std::cerr << "telos-run serve: shut down" << std::endl;
  return kExitOk;
}

}  // namespace

void add_serve_command(CLI::App& app, std::function<int()>& run) {
  auto o = std::make_shared<ServeOptions>();
  ServerOptions& server = o->server;
  HttpServerLimits& http = server.http;
  CLI::App* cmd =
      app.add_subcommand("serve", "Serve the artifact over an OpenAI-compatible HTTP API");
  cmd->footer(std::string(kExitCodes) +
              " SIGINT and SIGTERM shut the server down gracefully (exit 0). The API key may also "
              "come from the environment variable TELOS_API_KEY, used when neither --api-key nor "
              "--api-key-file is given.");
  cmd->add_option("ARTIFACT", o->artifact, "The artifact directory (NAME.telos)")->required();
  cmd->add_option("--host", server.host,
                  "Address to listen on (default 127.0.0.1: this machine only)");
  cmd->add_option("--port", server.port, "Port (default 8000; 0 picks a free one, said on stderr)")
      ->check(CLI::Range(0, 65535));
  CLI::Option* key =
      cmd->add_option("--api-key", server.api_key,
                      "Require 'Authorization: Bearer KEY' on /v1/ endpoints. A key on the command "
                      "line is visible to every user of this machine (ps): prefer --api-key-file "
                      "or TELOS_API_KEY");
  cmd->add_option("--api-key-file", o->api_key_file,
                  "Read the API key from FILE (its text, trailing white space dropped)")
      ->type_name("FILE")
      ->excludes(key);
  cmd->add_option("--allowed-host", server.allowed_hosts,
                  "Also answer requests whose Host header names NAME (repeatable; '*' answers any "
                  "name). localhost and IP addresses are always answered; other names get 403, "
                  "against DNS rebinding")
      ->type_name("NAME")
      ->allow_extra_args(false);
  cmd->add_option("--served-model-name", server.served_model_name,
                  "The model name clients send (default: the artifact's model name)");
  cmd->add_option("--max-prompt-tokens", server.max_prompt_tokens,
                  "Longest prompt accepted, longer ones get 400 (default: max_seq_len - 1)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--max-concurrent-requests", server.max_concurrent_requests,
                  "Completion and chat requests served at once, more get 429")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  cmd->add_option("--max-body-bytes", http.request.max_body_bytes,
                  "Largest request body, chunked ones included; larger ones get 413")
      ->check(CLI::Range(std::size_t{1}, std::size_t{1} << 40))
      ->capture_default_str();
  cmd->add_option("--max-buffered-bytes", http.max_buffered_body_bytes,
                  "Request bodies held at once, all connections together; the request that "
                  "would pass it gets 503")
      ->check(CLI::Range(std::size_t{1} << 20, std::size_t{1} << 40))
      ->capture_default_str();
  cmd->add_option("--max-head-bytes", http.request.max_head_bytes,
                  "Largest request line plus headers; larger get 431")
      ->check(CLI::Range(std::size_t{256}, std::size_t{1} << 20))
      ->capture_default_str();
  cmd->add_option("--max-header-lines", http.request.max_header_lines,
                  "Most header lines in a request; more get 431")
      ->check(CLI::Range(1, 10000))
      ->capture_default_str();
  cmd->add_option("--head-timeout", http.head_timeout_s,
                  "Seconds for a request's whole head to arrive; later gets 408")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--body-timeout", http.body_timeout_s,
                  "Seconds for a request's whole body to arrive after its head; later gets 408")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--keep-alive-timeout", http.keep_alive_timeout_s,
                  "Seconds an idle keep-alive connection waits for its next request")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--send-timeout", http.send_timeout_s,
                  "Seconds a response write may make no progress before the client counts as "
                  "gone (its requests are cancelled)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--max-connections", http.max_connections,
                  "Open client connections; at the cap a new one closes the slowest waiting one, "
                  "or gets 503 when all are busy. Kept below the open-file limit (ulimit -n)")
      ->check(CLI::Range(1, 1000000))
      ->capture_default_str();
  add_engine_option(*cmd, o->engine);
  add_limit_options(*cmd, o->limits);
  add_prefix_cache_option(*cmd, o->prefix_cache);
  cmd->callback([o, &run] { run = [o] { return run_serve(*o); }; });
}

}  // namespace telos::exec
