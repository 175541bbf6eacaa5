// telos-run check: load and verify an artifact without running it (the manifest's every field and
// bound, every checksum, tensor shapes, and the target architecture), so that a copied or
// downloaded artifact can be checked anywhere. It refuses what `generate` would refuse before
// running: the artifact and, where generate would run the CPU reference engine (no GPU, or no
// kernels), a KV pool larger than the host's memory and a graph that engine cannot run.
#include <iostream>
#include <memory>

#include "executor/commands.hpp"
#include "executor/cpu_reference_model.hpp"
#include "support/error.hpp"

namespace telos::exec {
namespace {

struct CheckOptions {
  std::string artifact;
  std::string arch;
};

int run_check(const CheckOptions& o) {
  std::shared_ptr<const Artifact> a = Artifact::load(o.artifact, WeightChecks::kEveryByte);
  std::string arch = o.arch;
  std::string why_not;
  const std::optional<GpuDevice> gpu = detect_gpu(&why_not);
  // generate runs the CPU reference engine where there is no GPU, no kernels, or tensor-parallel
  // ranks the GPU engine does not drive.
  if (!gpu || !a->has_kernels() || !gpu_engine_refusal(*a, gpu->count).empty()) {
    CpuReferenceModel::check_kv_pool(*a, 0);
    CpuReferenceModel::check_graph(*a);
  }
  if (arch.empty()) {
    if (gpu)
      arch = gpu->arch;
    else
      std::cerr << "telos-run: " << why_not << "; not checking the target architecture\n";
  }
  if (!arch.empty()) a->check_target(arch);
  std::size_t weight_bytes = 0, tensors = 0;
  for (int r = 0; r < a->ranks(); ++r)
    for (const WeightTensor& t : a->tensors(r)) weight_bytes += t.bytes, ++tensors;
  const ModelConfig& m = a->model();
  std::cout << o.artifact << ": ok: " << m.name << " (" << m.family << ", " << m.num_layers
            << " layers, vocabulary " << m.vocab_size << "), ";
  if (a->ranks() > 1) std::cout << a->ranks() << " tensor-parallel ranks, ";
  std::cout << tensors << " tensors, " << weight_bytes << " weight bytes, checksums verified";
  if (!arch.empty()) std::cout << ", runs on " << arch;
  std::cout << "\n";
  return kExitOk;
}

}  // namespace

void add_check_command(CLI::App& app, std::function<int()>& run) {
  auto o = std::make_shared<CheckOptions>();
  CLI::App* cmd = app.add_subcommand(
      "check", "Verify an artifact: schema, checksums of every file and tensor, target arch");
  cmd->footer(kExitCodes);
  cmd->add_option("ARTIFACT", o->artifact, "The artifact directory (NAME.telos)")->required();
  cmd->add_option("--arch", o->arch,
                  "Check the artifact runs on this architecture, e.g. sm_90a (default: GPU 0's)");
  cmd->callback([o, &run] { run = [o] { return run_check(*o); }; });
}

}  // namespace telos::exec
