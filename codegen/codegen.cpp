#include "codegen/codegen.hpp"

#include <future>

#include "codegen/emit_source.hpp"
#include "codegen/kernel_plan.hpp"
#include "codegen/lowering.hpp"
#include "codegen/nvrtc_driver.hpp"
#include "support/error.hpp"

namespace telos::codegen {
namespace {

std::string bucket_name(const BucketProgram& b) { return b.kind + ":" + std::to_string(b.size); }

nlohmann::ordered_json launches_json(const std::vector<Launch>& launches);

// A kernel launch, or a collective entry (docs/artifact.md, "Collectives").
nlohmann::ordered_json launch_json(const Launch& l) {
  if (l.collective.empty()) return {{"kernel", l.kernel}, {"grid", l.grid}, {"args", l.args}};
  return {{"collective", l.collective},
          {"send", l.send},
          {"recv", l.recv},
          {"count", l.count},
          {"then", launches_json(l.then)},
          {"fallback", launches_json(l.fallback)}};
}

nlohmann::ordered_json launches_json(const std::vector<Launch>& launches) {
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  for (const Launch& l : launches) out.push_back(launch_json(l));
  return out;
}

// Whether `l` (a collective's launches too) launches kernel `k`; its grid into `grid`.
bool launches_kernel(const Launch& l, int k, std::array<int, 3>& grid) {
  if (l.collective.empty() && l.kernel == k) {
    grid = l.grid;
    return true;
  }
  for (const std::vector<Launch>* nested : {&l.then, &l.fallback})
    for (const Launch& n : *nested)
      if (launches_kernel(n, k, grid)) return true;
  return false;
}

nlohmann::ordered_json programs_json(const KernelPlan& plan) {
  nlohmann::ordered_json p;
  p["descriptor"] = {{"max_tokens", plan.max_tokens}, {"max_sample_rows", plan.max_sample_rows}};
  p["buckets"] = nlohmann::ordered_json::array();
  for (const auto& b : plan.buckets) {
    nlohmann::ordered_json launches = launches_json(b.launches);
    p["buckets"].push_back({{"kind", b.kind},
                            {"size", b.size},
                            {"tokens", b.tokens},
                            {"sample_rows", b.sample_rows},
                            {"launches", std::move(launches)}});
  }
  return p;
}

}  // namespace

GeneratedKernels generate_kernels(const KernelPlan& plan, const CodegenOptions& options) {
  const std::string& arch = plan.target;
  if (arch.empty()) fail("codegen: the kernel plan names no target");
  GeneratedKernels out;
  out.source = emit_source(plan);
  std::vector<std::string> names;
  for (const auto& k : plan.kernels) names.push_back(k.instance);
  CompiledModule module = compile_module(out.source, arch, names, options.cache_dir);

  out.kernels = nlohmann::ordered_json::array();
  for (std::size_t i = 0; i < plan.kernels.size(); ++i) {
    const KernelInstance& k = plan.kernels[i];
    const std::string& entry = module.lowered.at(k.instance);
    auto it = module.resources.find(entry);
    // NVRTC serves a program from its own cache without the report (compile_options passes
    // --no-cache against that): the message says how much of the report there was, to tell a
    // short log from a garbled one.
    if (it == module.resources.end())
      fail("codegen: ptxas reported nothing for kernel " + k.instance + " (" + arch +
           "); its report (" + std::to_string(module.log.size()) + " bytes of NVRTC's log) named " +
           std::to_string(module.resources.size()) + " of the " +
           std::to_string(plan.kernels.size()) + " kernels" +
           (module.from_cache ? ", read from the kernel cache" : ""));
    const KernelResources& r = it->second;
    check_kernel_resources(k.instance, entry, arch, r, k.dynamic_smem);
    nlohmann::ordered_json resources = nlohmann::ordered_json::object();
    resources[arch] = {{"registers", r.registers},
                       {"shared_static", r.shared_static},
                       {"stack_frame", r.stack_frame},
                       {"spill_stores", r.spill_stores},
                       {"spill_loads", r.spill_loads}};
    nlohmann::ordered_json grids = nlohmann::ordered_json::object();
    for (const auto& b : plan.buckets)
      for (const auto& l : b.launches)
        if (std::array<int, 3> grid{}; launches_kernel(l, static_cast<int>(i), grid)) {
          grids[bucket_name(b)] = grid;
          break;
        }
    out.kernels.push_back({{"entry", entry},
                           {"instance", k.instance},
                           {"block", {k.block, 1, 1}},
                           {"dynamic_smem", k.dynamic_smem},
                           {"args", k.params},
                           {"grids", std::move(grids)},
                           {"resources", std::move(resources)}});
  }
  out.compiled = {arch, std::move(module.ptx), std::move(module.cubin), std::move(module.log),
                  module.from_cache};
  out.programs = programs_json(plan);
  return out;
}

std::vector<GeneratedKernels> generate_kernel_sets(const std::vector<KernelPlan>& plans,
                                                   const CodegenOptions& options) {
  std::vector<std::future<GeneratedKernels>> jobs;
  for (const KernelPlan& plan : plans)
    jobs.push_back(std::async(std::launch::async,
                              [&plan, &options] { return generate_kernels(plan, options); }));
  std::vector<GeneratedKernels> sets;
  for (auto& j : jobs) sets.push_back(j.get());
  return sets;
}

}  // namespace telos::codegen
