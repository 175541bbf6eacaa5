// telos-run: loads a Telos artifact and runs it. Subcommands live in their own files
// (commands.hpp); main only parses and maps errors to exit codes.
#include <unistd.h>

#include <iostream>
#include <new>

#include "executor/commands.hpp"
#include "support/error.hpp"
#ifdef TELOS_RUN_HAS_SERVE
#include "executor/server/serve_command.hpp"
#endif
#ifdef TELOS_RUN_HAS_GPU_ENGINE
#include "executor/gpu/gpu_rank_group.hpp"
#endif

int main(int argc, char** argv) {
  using namespace telos::exec;
#ifdef TELOS_RUN_HAS_GPU_ENGINE
  register_gpu_backend([](std::shared_ptr<const Artifact> artifact, const GpuDevice& device,
                          const RuntimeLimits& limits) {
    GpuExecutorOptions options;
    options.device = device.index;
    options.kv_pages = limits.kv_pages;
    options.max_batch = limits.max_batch;
    options.prefill_chunk = limits.prefill_chunk;
    // The load log (upload, graph capture, memory report) on stderr, with a progress line when
    // someone watches it.
    options.log = &std::cerr;
    options.progress = ::isatty(STDERR_FILENO) != 0;
    return make_gpu_engine(std::move(artifact), options);
  });
#endif
  CLI::App app{"telos-run: run a compiled Telos artifact", "telos-run"};
  app.footer(kExitCodes);
  app.require_subcommand(1);
  std::function<int()> run;
  add_generate_command(app, run);
  add_check_command(app, run);
  add_bench_command(app, run);
#ifdef TELOS_RUN_HAS_SERVE
  add_serve_command(app, run);
#endif
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return kExitUsage;
  }
  // Nothing escapes as an abort: an allocation the checks before it did not foresee, or any other
  // exception, is one line on stderr and exit code 1 (kExitCodes).
  try {
    return run();
  } catch (const telos::Error& e) {
    std::cerr << "telos-run: " << e.what() << "\n";
    return kExitError;
  } catch (const std::bad_alloc&) {
    std::cerr << "telos-run: error: out of memory (a smaller --kv-pages or --max-batch asks for "
                 "less)\n";
    return kExitError;
  } catch (const std::exception& e) {
    std::cerr << "telos-run: error: internal: " << e.what() << "\n";
    return kExitError;
  }
}
