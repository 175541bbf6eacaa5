#pragma once
// telos-run's subcommands. Each adds itself to the command line and, when the user picks it, sets
// `run` to the function main calls; the function returns the exit code (see kExitCodes). The HTTP
// server adds `serve` the same way (executor/server/serve_command.hpp, add_serve_command).
#include <CLI/CLI.hpp>
#include <climits>
#include <functional>
#include <string>

#include "executor/backend_selection.hpp"
#include "executor/runtime_limits.hpp"

namespace telos::exec {

// Documented in --help; tests check them.
inline constexpr int kExitOk = 0;
// A run that fails for want of memory is an error too (exit 1, "telos-run: error: out of memory").
inline constexpr int kExitError = 1;  // a refused artifact or request, or a failed run
inline constexpr int kExitUsage = 2;  // the command line itself is wrong
inline constexpr const char* kExitCodes =
    "Exit codes: 0 success; 1 error (artifact refused, request rejected or failed); "
    "2 usage error.";

void add_generate_command(CLI::App& app, std::function<int()>& run);
void add_check_command(CLI::App& app, std::function<int()>& run);
void add_bench_command(CLI::App& app, std::function<int()>& run);

// --engine gpu|cpu, the same on every subcommand that runs a model.
inline void add_engine_option(CLI::App& command, EngineChoice& choice) {
  command
      .add_option_function<std::string>(
          "--engine",
          [&choice](const std::string& name) {
            choice = name == "gpu" ? EngineChoice::Gpu : EngineChoice::Cpu;
          },
          "gpu or cpu (default: gpu when a supported GPU and the artifact's kernels are present, "
          "else cpu, said on stderr)")
      ->check(CLI::IsMember({"gpu", "cpu"}));
}

// --no-prefix-cache (EngineOptions::prefix_cache), the same on every subcommand that runs a model.
inline void add_prefix_cache_option(CLI::App& command, bool& prefix_cache) {
  command.add_flag_callback(
      "--no-prefix-cache", [&prefix_cache] { prefix_cache = false; },
      "Compute every prompt in full (default: requests with the same cache_salt share the KV "
      "pages of the prompt prefixes they have in common)");
}

// --max-batch, --max-seq-len, --kv-pages, --prefill-chunk and --mixed-chunk: the runtime limits
// (runtime_limits.hpp), the same on every subcommand that runs a model.
inline void add_limit_options(CLI::App& command, RuntimeLimits& limits) {
  const struct {
    const char* name;
    int* value;
    const char* help;
  } options[] = {
      {"--max-batch", &limits.max_batch,
       "Sequences a step, at most the artifact's serving.max_batch (default: that)"},
      {"--max-seq-len", &limits.max_seq_len,
       "Prompt plus generated tokens of one request, at most the artifact's serving.max_seq_len "
       "(default: that)"},
      {"--kv-pages", &limits.kv_pages,
       "Pages of the KV pool, at most the artifact's serving.kv_pool.pages where it fixes them "
       "(default: the artifact's pool)"},
      {"--prefill-chunk", &limits.prefill_chunk,
       "Prompt tokens a step (the token budget), at most the artifact's serving.prefill_chunk "
       "(default: that)"},
      {"--mixed-chunk", &limits.mixed_chunk,
       "Tokens a step holds while requests decode, decode tokens included (at least half of it "
       "prompt tokens), at most the prefill chunk (default: 128 or the prefill chunk if less)"},
  };
  for (const auto& o : options)
    command.add_option(o.name, *o.value, o.help)->check(CLI::Range(1, INT_MAX));
}

}  // namespace telos::exec
