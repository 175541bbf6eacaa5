#pragma once
// What the assembly tools (prefill_sm100_assemble, sm100_twin_assemble, layer_sm100_assemble,
// w8a8_assemble, w8a8_layer_assemble) share: their command line, planning a model config as telosc
// plans it, and assembling a set of kernel instances through codegen's own NVRTC driver and ptxas
// with its resource check.
#include <exception>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "codegen/compile_cache.hpp"
#include "codegen/lowering.hpp"
#include "codegen/nvrtc_driver.hpp"
#include "compiler/artifact/artifact_writer.hpp"
#include "compiler/import/checkpoint.hpp"
#include "compiler/import/json_fields.hpp"
#include "compiler/ir/model_graph.hpp"
#include "compiler/passes/pass_manager.hpp"
#include "compiler/plan/serving_config.hpp"
#include "support/error.hpp"

namespace telos::codegen {

// A tool's command line, `TOOL [--twins] [--serving FILE] -o DIR CONFIG.json...` (--twins where
// `takes_twins`; --serving where `serving` is not null, which then receives the file): runs
// `run(dir, twins, configs)` and returns its status; a bad command line prints the usage and
// returns 2, an error prints `TOOL: error: ...` and returns 1.
inline int assemble_tool_main(
    int argc, char** argv, const std::string& tool, bool takes_twins,
    const std::function<int(const std::string&, bool, const std::vector<std::string>&)>& run,
    std::string* serving = nullptr) {
  std::string dir;
  bool twins = false;
  std::vector<std::string> configs;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "-o" && i + 1 < argc)
      dir = argv[++i];
    else if (takes_twins && a == "--twins")
      twins = true;
    else if (serving != nullptr && a == "--serving" && i + 1 < argc)
      *serving = argv[++i];
    else
      configs.push_back(a);
  }
  if (dir.empty() || configs.empty()) {
    std::cerr << "usage: " << tool << (takes_twins ? " [--twins]" : "")
              << (serving != nullptr ? " [--serving FILE]" : "") << " -o DIR CONFIG.json...\n";
    return 2;
  }
  try {
    return run(dir, twins, configs);
  } catch (const std::exception& e) {
    std::cerr << tool << ": error: " << e.what() << "\n";
    return 1;
  }
}

// The kernel set of the config at `path` on `target` (default serving config, or the one in the
// JSON file `serving_file` as telosc's --serving gives it), planned from the fully fused IR as
// telosc plans it.
inline KernelPlan plan_config(const std::string& path, const std::string& target,
                              const std::string& serving_file = "") {
  const compiler::ImportedModel model = compiler::import_model(path, {.weights = false});
  const compiler::ServingConfig serving =
      serving_file.empty() ? compiler::resolve_serving(model.serving, model.spec, model.source)
                           : compiler::resolve_serving(compiler::read_json_file(serving_file),
                                                       model.spec, serving_file);
  compiler::ir::Graph graph = compiler::ir::build_model_graph(model.spec);
  compiler::run_passes(graph, compiler::fusion_pipeline(), nullptr);
  return plan_kernels(graph, compiler::codegen_input(model.spec, serving), target);
}

// Compiles `instances` (each with its dynamic shared memory) from `source` for `arch`, two modules
// on two compile threads, and writes DIR/module_N.ptx and DIR/module_N.cubin. Each instance must
// use no local memory, spill nothing and fit its static and dynamic shared memory in a block's
// (check_kernel_resources), and ptxas must not serialize any module's wgmma; prints one line per instance: its registers, static shared memory and
// dynamic shared memory. Errors begin with `tool`.
inline void assemble_instances(const std::string& tool, const std::string& source,
                               const std::string& arch, const std::map<std::string, int>& instances,
                               const std::filesystem::path& dir) {
  constexpr int kCompileThreads = 2;
  std::vector<std::string> names;
  for (const auto& [name, smem] : instances) names.push_back(name);
  const std::vector<CompiledModule> modules =
      compile_modules(source, arch, names, CompileCache::default_root(), kCompileThreads);
  std::filesystem::create_directories(dir);
  auto write_file = [&](const std::filesystem::path& path, const std::string& bytes) {
    std::ofstream out(path, std::ios::binary);
    if (!(out << bytes)) fail(tool + ": cannot write " + path.string());
  };
  for (std::size_t m = 0; m < modules.size(); ++m) {
    write_file(dir / ("module_" + std::to_string(m) + ".ptx"), modules[m].ptx);
    write_file(dir / ("module_" + std::to_string(m) + ".cubin"), modules[m].cubin);
    // ptxas's advisories that it serializes a kernel's wgmma (C7511, C7513, C7514: each wgmma
    // waited for before the next issues), which cost a kernel its tensor-core overlap without
    // failing it.
    for (const char* code : {"C7511", "C7513", "C7514"})
      if (const std::size_t at = modules[m].log.find(code); at != std::string::npos)
        fail(tool + ": ptxas serializes wgmma in module " + std::to_string(m) + ": " +
             modules[m].log.substr(at, modules[m].log.find('\n', at) - at));
  }
  for (const auto& [name, smem] : instances)
    for (const CompiledModule& m : modules) {
      const auto entry = m.lowered.find(name);
      if (entry == m.lowered.end()) continue;
      const auto r = m.resources.find(entry->second);
      if (r == m.resources.end()) fail(tool + ": ptxas reported nothing for " + name);
      check_kernel_resources(name, entry->second, arch, r->second, smem);
      std::cout << name << ": " << r->second.registers << " registers, " << r->second.shared_static
                << " + " << smem << " bytes shared\n";
    }
}

}  // namespace telos::codegen
