#include "executor/server/serve_command.hpp"

#include <pthread.h>
#include <signal.h>

#include <atomic>
#include <csignal>
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
  ServerOptions server;
  EngineChoice engine = EngineChoice::Auto;
  RuntimeLimits limits;
};

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
  std::unique_ptr<Engine> engine =
      Engine::create(artifact, make_backend(artifact, o.engine, std::cerr, o.limits), options);
  ApiServer server(
      {engine.get(), tokenizer ? &*tokenizer : nullptr, chat_template ? &*chat_template : nullptr},
      o.server);
  const int port = server.bind();
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
  CLI::App* cmd =
      app.add_subcommand("serve", "Serve the artifact over an OpenAI-compatible HTTP API");
  cmd->footer(std::string(kExitCodes) +
              " SIGINT and SIGTERM shut the server down gracefully (exit 0).");
  cmd->add_option("ARTIFACT", o->artifact, "The artifact directory (NAME.telos)")->required();
  cmd->add_option("--host", o->server.host,
                  "Address to listen on (default 127.0.0.1: this machine only)");
  cmd->add_option("--port", o->server.port,
                  "Port (default 8000; 0 picks a free one, said on stderr)")
      ->check(CLI::Range(0, 65535));
  cmd->add_option("--api-key", o->server.api_key,
                  "Require 'Authorization: Bearer KEY' on /v1/ endpoints");
  cmd->add_option("--served-model-name", o->server.served_model_name,
                  "The model name clients send (default: the artifact's model name)");
  cmd->add_option("--max-body-bytes", o->server.max_body_bytes,
                  "Largest request body accepted, larger ones get 413 (default 4 MiB)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--max-prompt-tokens", o->server.max_prompt_tokens,
                  "Longest prompt accepted, longer ones get 400 (default: max_seq_len - 1)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--max-concurrent-requests", o->server.max_concurrent_requests,
                  "Completion and chat requests served at once, more get 429 (default 128)")
      ->check(CLI::Range(1, 4096));
  add_engine_option(*cmd, o->engine);
  add_limit_options(*cmd, o->limits);
  cmd->callback([o, &run] { run = [o] { return run_serve(*o); }; });
}

}  // namespace telos::exec
