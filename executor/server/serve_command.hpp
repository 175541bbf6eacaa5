#pragma once
// telos-run serve ARTIFACT: the OpenAI-compatible HTTP server (api_server.hpp), added to
// telos-run's command line like the other subcommands (executor/commands.hpp).
#include <CLI/CLI.hpp>
#include <functional>

namespace telos::exec {

void add_serve_command(CLI::App& app, std::function<int()>& run);

}  // namespace telos::exec
