// telosc: the Telos compiler driver. `telosc compile` lowers a model and a serving config to an
// artifact (docs/artifact.md); `telosc inspect` summarizes and verifies one. Every stage can be
// printed (--emit, --print-after-all) so lit + FileCheck tests pin each one.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <new>
#include <nlohmann/json.hpp>
#include <string>

#include "codegen/codegen.hpp"
#include "codegen/lowering.hpp"
#include "compiler/artifact/artifact_inspector.hpp"
#include "compiler/artifact/artifact_writer.hpp"
#include "compiler/artifact/compact_json.hpp"
#include "compiler/artifact/staging_dir.hpp"
#include "compiler/import/checkpoint.hpp"
#include "compiler/import/json_fields.hpp"
#include "compiler/ir/model_graph.hpp"
#include "compiler/ir/verifier.hpp"
#include "compiler/passes/pass_manager.hpp"
#include "compiler/plan/memory_plan.hpp"
#include "compiler/plan/serving_config.hpp"
#include "support/error.hpp"

namespace {

using namespace telos;
using namespace telos::compiler;
namespace fs = std::filesystem;

constexpr int kExitError = 1;
constexpr int kExitUsage = 2;

struct UsageError : Error {
  using Error::Error;
};

struct CompileOptions {
  std::string model;
  std::string output;
  std::string serving_file;
  std::string targets;
  std::string emit;
  std::string passes;
  std::string quantize;
  bool quantize_lm_head = false;
  bool print_after_all = false;
  bool no_weights = false;
};

volatile std::sig_atomic_t g_interrupted = 0;
void on_signal(int) {
  g_interrupted = 1;
}

// The serving config: model.json's "serving" section, or the --serving file, resolved against the
// model with its defaults; --target replaces its targets and --quantize its "quantize".
ServingConfig serving_config(const CompileOptions& o, const ImportedModel& model) {
  nlohmann::json serving = model.serving;
  std::string serving_where = model.source;
  if (!o.serving_file.empty()) {
    serving = read_json_file(o.serving_file);
    serving_where = o.serving_file;
  }
  ServingConfig config = resolve_serving(serving, model.spec, serving_where);
  if (!o.targets.empty()) config.targets = parse_target_list(o.targets);
  if (!o.quantize.empty() && !parse_quantize(o.quantize, &config.quantize))
    throw UsageError("--quantize: expected " + std::string(kQuantizeChoices) + ", got \"" +
                     o.quantize + "\"");
  if (o.quantize_lm_head) config.quantize_lm_head = true;
  return config;
}

// Quantizes the weights as the serving config asks (the importer then holds them as an FP8
// checkpoint would).
void apply_quantization(const CompileOptions& o, ImportedModel& model,
                        const ServingConfig& config) {
  const std::string serving = !o.serving_file.empty() ? o.serving_file : model.source;
  const std::string where =
      !o.quantize.empty() ? std::string("--quantize") : serving + ": serving.quantize";
  if (config.quantize_lm_head && config.quantize == Quantize::kNone)
    fail((o.quantize_lm_head ? std::string("--quantize-lm-head")
                             : serving + ": serving.quantize_lm_head") +
         ": needs quantize \"fp8\" or \"fp8-channel\" (the LM head is quantized with the linear "
         "weights)");
  quantize_weights(model, config.quantize, config.quantize_lm_head, where);
}

// The importer's IR, verified, through the fusion pipeline (verified after each pass), then, for
// more than one rank, the tensor-parallel pass, and last the W8A8 pass (unless
// serving.fp8_activations is bf16). --passes selects the fusion passes instead (none: the
// importer's unfused IR), for --emit only: an artifact always gets the full pipeline.
ir::Graph optimized_ir(const CompileOptions& o, const ModelSpec& spec,
                       const ServingConfig& config) {
  if (!o.passes.empty() && o.emit.empty())
    throw UsageError("--passes needs --emit (an artifact always gets the full pipeline)");
  ir::Graph graph = ir::build_model_graph(spec);
  ir::verify(graph);
  std::vector<Pass> passes = o.passes.empty()     ? fusion_pipeline()
                             : o.passes == "none" ? std::vector<Pass>{}
                                                  : select_passes(o.passes);
  if (config.tensor_parallel > 1)
    passes.push_back(tensor_parallel_pass(static_cast<int>(config.tensor_parallel)));
  if (config.fp8_activations == DType::E4M3) passes.push_back(w8a8_activations_pass());
  run_passes(graph, passes, o.print_after_all ? &std::cerr : nullptr);
  return graph;
}

// What --emit=kernels prints: per target, whether the module came from the cache and its sizes,
// then the manifest's kernel table (further targets: kernel_sets.ARCH, as in the manifest).
nlohmann::ordered_json kernels_summary(const std::vector<codegen::GeneratedKernels>& sets) {
  nlohmann::ordered_json out;
  for (const codegen::GeneratedKernels& k : sets)
    out["targets"].push_back({{"arch", k.compiled.arch},
                              {"from_cache", k.compiled.from_cache},
                              {"ptx_bytes", k.compiled.ptx.size()},
                              {"cubin_bytes", k.compiled.cubin.size()}});
  out["kernels"] = sets.at(0).kernels;
  for (std::size_t i = 1; i < sets.size(); ++i)
    out["kernel_sets"][sets[i].compiled.arch]["kernels"] = sets[i].kernels;
  return out;
}

void catch_signals() {
  // Ctrl-C while packing stops the write cleanly, so no temporary directory is left behind. A
  // signal the caller chose to ignore (nohup, a background job) stays ignored.
  for (int sig : {SIGINT, SIGTERM})
    if (std::signal(sig, on_signal) == SIG_IGN) std::signal(sig, SIG_IGN);
}

ArtifactOptions artifact_options() {
  return ArtifactOptions{.progress = ::isatty(STDERR_FILENO) == 1, .cancel = &g_interrupted};
}

// --target cpu: no lowering, plan or kernels; the artifact's weights and graph are what the CPU
// reference engine runs.
int write_cpu_artifact(const CompileOptions& o, const ImportedModel& model,
                       const ServingConfig& config, const ir::Graph& graph) {
  if (!o.emit.empty())
    throw UsageError("--emit=" + o.emit + " prints a GPU stage; --target cpu has none");
  check_destination(fs::path(o.output).lexically_normal());
  catch_signals();
  write_artifact(o.output, model, config, graph, {}, artifact_options());
  return 0;
}

// --emit=lowering: each target's lowering, under a line naming it when there are several.
std::string print_lowerings(const std::vector<codegen::KernelPlan>& sets) {
  std::string s;
  for (const codegen::KernelPlan& p : sets)
    s += (sets.size() > 1 ? "target " + p.target + "\n" : "") + codegen::print_lowering(p);
  return s;
}

// The stages in order: import, IR and passes, lowering, plan, codegen, write. Each --emit prints
// its stage and stops there.
int run_compile(const CompileOptions& o) {
  if (o.no_weights && o.emit.empty())
    throw UsageError("--no-weights needs --emit (an artifact always carries its weights)");
  if (o.emit.empty() && o.output.empty())
    throw UsageError(
        "compile needs -o OUT.telos (or --emit=ir|lowering|plan|kernels to print a stage)");

  ImportedModel model = import_model(o.model, ImportOptions{.weights = !o.no_weights});
  const ServingConfig config = serving_config(o, model);
  apply_quantization(o, model, config);
  // Whatever telosc accepts, telos-run runs: the configuration passes the manifest's checks now,
  // before anything is compiled (and the whole manifest again before it is written).
  validate_configuration(model.source, model.spec, config);
  const ir::Graph graph = optimized_ir(o, model.spec, config);
  if (o.emit == "ir") {
    std::cout << ir::print_graph(graph);
    return 0;
  }
  if (!has_gpu_targets(config)) return write_cpu_artifact(o, model, config, graph);
  // The lowering table at work, without NVRTC: every bucket's ops, the rule each took and the
  // launches it made.
  // One kernel set a target (docs/artifact.md, "Kernel sets").
  const std::vector<codegen::KernelPlan> lowered =
      codegen::plan_kernel_sets(graph, codegen_input(model.spec, config));
  if (o.emit == "lowering") {
    std::cout << print_lowerings(lowered);
    return 0;
  }
  std::vector<TargetKernelSet> sets;
  for (const codegen::KernelPlan& p : lowered) sets.push_back({plan_arena(p), {}});
  if (o.emit == "plan") {
    std::cout << compact_json(plan_to_json(sets[0].plan));
    return 0;
  }

  // A destination telosc would not write is refused before the kernels are compiled.
  if (o.emit.empty()) check_destination(fs::path(o.output).lexically_normal());
  std::vector<codegen::GeneratedKernels> kernels = codegen::generate_kernel_sets(lowered);
  if (o.emit == "kernels") {
    std::cout << compact_json(kernels_summary(kernels));
    return 0;
  }
  for (std::size_t i = 0; i < sets.size(); ++i) sets[i].kernels = std::move(kernels[i]);

  catch_signals();
  write_artifact(o.output, model, config, graph, sets, artifact_options());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"telosc: the Telos ahead-of-time LLM compiler", "telosc"};
  app.require_subcommand(1);
  app.footer(
      "Exit codes: 0 success; 1 error (bad model, config, checkpoint or output, or out of memory; "
      "one line on stderr: 'telosc: error: MESSAGE'); 2 usage error (bad command line).");

  CompileOptions co;
  CLI::App* compile = app.add_subcommand("compile", "Compile a model into an artifact directory");
  compile->add_option("MODEL", co.model, "Telos model.json, HF config.json or checkpoint directory")
      ->required();
  compile->add_option("-o,--output", co.output, "Artifact directory to write (NAME.telos)");
  compile->add_option("--serving", co.serving_file,
                      "JSON serving config; replaces model.json's \"serving\" section");
  compile->add_option("--target", co.targets,
                      "GPU architectures to compile kernels for, comma-separated: sm_90a (Hopper, "
                      "the default), sm_100a (Blackwell B200), or sm_90a,sm_100a for one artifact "
                      "with both kernel sets; or cpu: no kernels, for the CPU reference engine");
  compile->add_option("--emit", co.emit, "Print a stage to stdout instead of writing an artifact")
      ->check(CLI::IsMember({"ir", "lowering", "plan", "kernels"}));
  compile->add_option(
      "--passes", co.passes,
      "Run only these passes, comma-separated, or none (with --emit; for testing one pass)");
  compile->add_option("--quantize", co.quantize,
                      "none, fp8 (E4M3 weights, one f32 scale a 128x128 block) or fp8-channel "
                      "(one scale a row); replaces the serving config's \"quantize\"");
  compile->add_flag("--quantize-lm-head", co.quantize_lm_head,
                    "Quantize the LM head too (a tied model's as a copy of the embedding); sets "
                    "the serving config's \"quantize_lm_head\"");
  compile->add_flag("--print-after-all", co.print_after_all,
                    "Print the IR to stderr after each pass");
  compile->add_flag("--no-weights", co.no_weights,
                    "Read config.json only (planning mode; needs --emit)");

  std::string inspect_path;
  bool verify = false;
  CLI::App* inspect = app.add_subcommand("inspect", "Summarize an artifact");
  inspect->add_option("ARTIFACT", inspect_path, "Artifact directory (NAME.telos)")->required();
  inspect->add_flag("--verify", verify, "Recompute and check every checksum");

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "telosc: error: %s\n", e.what());
    return kExitUsage;
  }

  try {
    if (compile->parsed()) return run_compile(co);
    if (inspect->parsed()) {
      std::cout << inspect_artifact(inspect_path, verify);
      return 0;
    }
  } catch (const UsageError& e) {
    std::fprintf(stderr, "telosc: error: %s\n", e.what());
    return kExitUsage;
  } catch (const Error& e) {
    std::fprintf(stderr, "telosc: error: %s\n", e.what());
    return kExitError;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "telosc: error: out of memory\n");
    return kExitError;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "telosc: error: internal: %s\n", e.what());
    return kExitError;
  }
  return 0;
}
