// prefill_sm100_assemble: the Blackwell prefill GEMM (codegen/kernels/gemm_prefill_sm100.cuh) at
// every shape the given model configs need, through codegen's own NVRTC driver for sm_100a (PTX
// for compute_100a, assembled by ptxas for sm_100a) and its resource check. The shapes are the
// sm_90a lowering's: each config is planned as telosc plans it (default serving config: prefill
// buckets up to 512 tokens), and every prefill GEMM instance (gemm_prefill_{bf16,residual,swiglu}
// <M, N, K[, W_BH, W_BOX]>, buckets of 128 tokens and more) is renamed to its sm_100a twin with the
// same template arguments and dynamic shared memory, which is all an sm_100a lowering row will
// change. Each instance must use no local memory, spill nothing and fit its static and dynamic
// shared memory in a block's (codegen::check_kernel_resources).
//
//   prefill_sm100_assemble -o DIR CONFIG.json...
//
// Prints one line per instance (sorted, each once): the instance, then its registers, static
// shared memory and dynamic shared memory; writes DIR/module_N.ptx and DIR/module_N.cubin, one
// module per compile thread. Exit codes: 0 every instance assembled within the limits; 1 a config,
// a compile or a limit failed (message on stderr); 2 usage.
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "codegen/compile_cache.hpp"
#include "codegen/lowering.hpp"
#include "codegen/nvrtc_driver.hpp"
#include "compiler/artifact/artifact_writer.hpp"
#include "compiler/import/checkpoint.hpp"
#include "compiler/ir/model_graph.hpp"
#include "compiler/passes/pass_manager.hpp"
#include "compiler/plan/serving_config.hpp"
#include "support/error.hpp"

namespace {

using namespace telos;

constexpr const char* kHopperPrefix = "telos_kernels::gemm_prefill_";
constexpr const char* kBlackwellPrefix = "telos_kernels::gemm_prefill_sm100_";
constexpr int kCompileThreads = 2;

// The sm_90a plan's prefill GEMM instances of the config at `path`, renamed to their sm_100a
// twins, with their dynamic shared memory.
void add_instances(const std::string& path, std::map<std::string, int>& instances) {
  const compiler::ImportedModel model = compiler::import_model(path, {.weights = false});
  const compiler::ServingConfig serving =
      compiler::resolve_serving(model.serving, model.spec, model.source);
  compiler::ir::Graph graph = compiler::ir::build_model_graph(model.spec);
  compiler::run_passes(graph, compiler::fusion_pipeline(), nullptr);
  const codegen::KernelPlan plan =
      codegen::plan_kernels(graph, compiler::codegen_input(model.spec, serving));
  const std::size_t prefix = std::string(kHopperPrefix).size();
  for (const codegen::KernelInstance& k : plan.kernels)
    if (k.instance.rfind(kHopperPrefix, 0) == 0)
      instances[kBlackwellPrefix + k.instance.substr(prefix)] = k.dynamic_smem;
}

void write_file(const std::filesystem::path& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  if (!(out << bytes)) fail("prefill_sm100_assemble: cannot write " + path.string());
}

int run(const std::filesystem::path& dir, const std::vector<std::string>& configs) {
  std::map<std::string, int> instances;
  for (const std::string& c : configs) add_instances(c, instances);
  if (instances.empty()) fail("prefill_sm100_assemble: the configs plan no prefill GEMM");
  std::vector<std::string> names;
  for (const auto& [name, smem] : instances) names.push_back(name);
  const std::vector<codegen::CompiledModule> modules =
      codegen::compile_modules("#include \"gemm_prefill_sm100.cuh\"\n", "sm_100a", names,
                               codegen::CompileCache::default_root(), kCompileThreads);
  std::filesystem::create_directories(dir);
  for (std::size_t m = 0; m < modules.size(); ++m) {
    write_file(dir / ("module_" + std::to_string(m) + ".ptx"), modules[m].ptx);
    write_file(dir / ("module_" + std::to_string(m) + ".cubin"), modules[m].cubin);
  }
  for (const auto& [name, smem] : instances)
    for (const codegen::CompiledModule& m : modules) {
      const auto entry = m.lowered.find(name);
      if (entry == m.lowered.end()) continue;
      const auto r = m.resources.find(entry->second);
      if (r == m.resources.end())
        fail("prefill_sm100_assemble: ptxas reported nothing for " + name);
      codegen::check_kernel_resources(name, entry->second, "sm_100a", r->second, smem);
      std::cout << name << ": " << r->second.registers << " registers, " << r->second.shared_static
                << " + " << smem << " bytes shared\n";
    }
  std::cout << instances.size() << " instances assembled for sm_100a\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string dir;
  std::vector<std::string> configs;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "-o" && i + 1 < argc)
      dir = argv[++i];
    else
      configs.push_back(a);
  }
  if (dir.empty() || configs.empty()) {
    std::cerr << "usage: prefill_sm100_assemble -o DIR CONFIG.json...\n";
    return 2;
  }
  try {
    return run(dir, configs);
  } catch (const std::exception& e) {
    std::cerr << "prefill_sm100_assemble: error: " << e.what() << "\n";
    return 1;
  }
}
