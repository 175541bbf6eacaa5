// sm100_twin_assemble: codegen's sm_100a GEMMs (codegen/kernels/gemm_small_sm100.cuh,
// gemm_prefill_sm100.cuh) at every instance the given model configs' sm_100a kernel sets hold
// (default serving config, as `telosc compile --target sm_100a` plans them), through codegen's own
// NVRTC driver and ptxas: as planned for sm_100a, or with --twins their Hopper twins
// (gemm_small_sm100_twin_*, gemm_prefill_sm100_twin_*: the same template arguments; the small
// twin's own block and dynamic shared memory, the prefill twin's the same) for sm_90a. Each
// instance must use no local memory, spill nothing and fit its static and dynamic shared memory in
// a block's (codegen::check_kernel_resources). A SwiGLU instance whose token tile is over 128 has
// no twin (its accumulator does not fit two warpgroups' registers) and is listed as such.
//
//   sm100_twin_assemble [--twins] -o DIR CONFIG.json...
//
// Prints one line per instance (sorted, each once): the instance, then its registers, static
// shared memory and dynamic shared memory; writes DIR/module_N.ptx and DIR/module_N.cubin, one
// module per compile thread. Exit codes: 0 every instance assembled within the limits; 1 a config,
// a compile or a limit failed (message on stderr); 2 usage.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "codegen/compile_cache.hpp"
#include "codegen/kernel_plan.hpp"
#include "codegen/kernels/gemm_small_sm100.cuh"
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

constexpr const char* kPrefix = "telos_kernels::gemm_small_sm100_";
constexpr const char* kTwinPrefix = "telos_kernels::gemm_small_sm100_twin_";
constexpr const char* kPrefillPrefix = "telos_kernels::gemm_prefill_sm100_";
constexpr const char* kPrefillTwinPrefix = "telos_kernels::gemm_prefill_sm100_twin_";
constexpr int kCompileThreads = 2;

// The twin of sm_100a instance `name` (gemm_small_sm100_EPI<M, N, K, STAGES>, planned with
// `smem` bytes), with its dynamic shared memory; an empty name where it has none.
std::pair<std::string, int> twin_of(const std::string& name, int smem) {
  const std::string rest = name.substr(std::string(kPrefix).size());
  const std::string epi = rest.substr(0, rest.find('<'));
  int m = 0, n = 0, k = 0, stages = 0;
  if (std::sscanf(rest.c_str() + epi.size(), "<%d, %d, %d, %d>", &m, &n, &k, &stages) != 4)
    fail("sm100_twin_assemble: cannot read the template arguments of " + name);
  const bool swiglu = epi == "swiglu";
  const codegen::SmallGemmSm100Tiling t = codegen::small_gemm_sm100_tiling(n, k, m, swiglu);
  if (t.stages != stages || t.smem() != smem)
    fail("sm100_twin_assemble: " + name + " is not small_gemm_sm100_tiling's instance");
  const unsigned accum_columns = (swiglu ? 2u : 1u) * static_cast<unsigned>(t.mma_n);
  if (accum_columns > telos_kernels::SmallGemmSm100Twin::kMaxAccumColumns) return {"", 0};
  return {kTwinPrefix + rest, static_cast<int>(telos_kernels::SmallGemmSm100Twin::smem(
                                  static_cast<unsigned>(stages),
                                  static_cast<unsigned>(t.stage_bytes()), accum_columns))};
}

// The sm_100a plan's GEMM instances of the config at `path` (or their twins), with their dynamic
// shared memory; `untwinned` collects those without a twin.
void add_instances(const std::string& path, bool twins, std::map<std::string, int>& instances,
                   std::map<std::string, int>& untwinned) {
  const compiler::ImportedModel model = compiler::import_model(path, {.weights = false});
  const compiler::ServingConfig serving =
      compiler::resolve_serving(model.serving, model.spec, model.source);
  compiler::ir::Graph graph = compiler::ir::build_model_graph(model.spec);
  compiler::run_passes(graph, compiler::fusion_pipeline(), nullptr);
  const codegen::KernelPlan plan =
      codegen::plan_kernels(graph, compiler::codegen_input(model.spec, serving), "sm_100a");
  const std::size_t prefill = std::string(kPrefillPrefix).size();
  for (const codegen::KernelInstance& k : plan.kernels) {
    if (k.instance.rfind(kPrefillPrefix, 0) == 0) {
      instances[twins ? kPrefillTwinPrefix + k.instance.substr(prefill) : k.instance] =
          k.dynamic_smem;
      continue;
    }
    if (k.instance.rfind(kPrefix, 0) != 0) continue;
    if (!twins) {
      instances[k.instance] = k.dynamic_smem;
      continue;
    }
    const auto [twin, smem] = twin_of(k.instance, k.dynamic_smem);
    if (twin.empty())
      untwinned[k.instance] = k.dynamic_smem;
    else
      instances[twin] = smem;
  }
}

void write_file(const std::filesystem::path& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  if (!(out << bytes)) fail("sm100_twin_assemble: cannot write " + path.string());
}

int run(const std::filesystem::path& dir, bool twins, const std::vector<std::string>& configs) {
  const std::string arch = twins ? "sm_90a" : "sm_100a";
  std::map<std::string, int> instances, untwinned;
  for (const std::string& c : configs) add_instances(c, twins, instances, untwinned);
  if (instances.empty()) fail("sm100_twin_assemble: the configs plan no sm_100a GEMM");
  std::vector<std::string> names;
  for (const auto& [name, smem] : instances) names.push_back(name);
  const std::vector<codegen::CompiledModule> modules = codegen::compile_modules(
      "#include \"gemm_prefill_sm100.cuh\"\n"
      "#include \"gemm_small_sm100.cuh\"\n",
      arch, names, codegen::CompileCache::default_root(), kCompileThreads);
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
      if (r == m.resources.end()) fail("sm100_twin_assemble: ptxas reported nothing for " + name);
      codegen::check_kernel_resources(name, entry->second, arch, r->second, smem);
      std::cout << name << ": " << r->second.registers << " registers, " << r->second.shared_static
                << " + " << smem << " bytes shared\n";
    }
  for (const auto& [name, smem] : untwinned) std::cout << name << ": no twin\n";
  std::cout << instances.size() << " instances assembled for " << arch << "\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string dir;
  bool twins = false;
  std::vector<std::string> configs;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "-o" && i + 1 < argc)
      dir = argv[++i];
    else if (a == "--twins")
      twins = true;
    else
      configs.push_back(a);
  }
  if (dir.empty() || configs.empty()) {
    std::cerr << "usage: sm100_twin_assemble [--twins] -o DIR CONFIG.json...\n";
    return 2;
  }
  try {
    return run(dir, twins, configs);
  } catch (const std::exception& e) {
    std::cerr << "sm100_twin_assemble: error: " << e.what() << "\n";
    return 1;
  }
}
