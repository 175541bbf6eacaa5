// prefill_sm100_assemble: the Blackwell prefill GEMM (codegen/kernels/gemm_prefill_sm100.cuh) at
// every shape the given model configs need, through codegen's own NVRTC driver for sm_100a (PTX
// for compute_100a, assembled by ptxas for sm_100a) and its resource check. The shapes are the
// sm_90a lowering's: each config is planned as telosc plans it (default serving config: prefill
// buckets up to 512 tokens), and every prefill GEMM instance (gemm_prefill_{bf16,residual,swiglu}
// <M, N, K[, W_BH, W_BOX]>, buckets of kPrefillGemmMinRows tokens and more) is renamed to its
// sm_100a one-CTA form with the same template arguments and dynamic shared memory; and each config
// is planned for sm_100a too, whose prefill GEMM rows name the CTA-pair form
// (gemm_prefill_sm100_pair_{bf16,residual,swiglu}<M, N, K>), each instance of it with its own. Each
// instance must use no local memory, spill nothing and fit its static and dynamic shared memory in
// a block's (codegen::check_kernel_resources).
//
//   prefill_sm100_assemble -o DIR CONFIG.json...
//
// Prints one line per instance (sorted, each once): the instance, then its registers, static
// shared memory and dynamic shared memory; writes DIR/module_N.ptx and DIR/module_N.cubin, one
// module per compile thread. Exit codes: 0 every instance assembled within the limits; 1 a config,
// a compile or a limit failed (message on stderr); 2 usage.
#include <filesystem>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "support/error.hpp"
#include "test/codegen/sm100_assemble.hpp"

namespace {

using namespace telos;

constexpr const char* kHopperPrefix = "telos_kernels::gemm_prefill_";
constexpr const char* kBlackwellPrefix = "telos_kernels::gemm_prefill_sm100_";
constexpr const char* kPairPrefix = "telos_kernels::gemm_prefill_sm100_pair_";

// The sm_90a plan's prefill GEMM instances of the config at `path`, renamed to their sm_100a
// one-CTA forms, and the sm_100a plan's CTA-pair instances (gemm_prefill_sm100_pair_*), with their
// dynamic shared memory.
void add_instances(const std::string& path, std::map<std::string, int>& instances) {
  const codegen::KernelPlan plan = codegen::plan_config(path, "sm_90a");
  const std::size_t prefix = std::string(kHopperPrefix).size();
  for (const codegen::KernelInstance& k : plan.kernels)
    if (k.instance.rfind(kHopperPrefix, 0) == 0)
      instances[kBlackwellPrefix + k.instance.substr(prefix)] = k.dynamic_smem;
  for (const codegen::KernelInstance& k : codegen::plan_config(path, "sm_100a").kernels)
    if (k.instance.rfind(kPairPrefix, 0) == 0) instances[k.instance] = k.dynamic_smem;
}

int run(const std::filesystem::path& dir, const std::vector<std::string>& configs) {
  std::map<std::string, int> instances;
  for (const std::string& c : configs) add_instances(c, instances);
  if (instances.empty()) fail("prefill_sm100_assemble: the configs plan no prefill GEMM");
  codegen::assemble_instances("prefill_sm100_assemble", "#include \"gemm_prefill_sm100.cuh\"\n",
                              "sm_100a", instances, dir);
  std::cout << instances.size() << " instances assembled for sm_100a\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return codegen::assemble_tool_main(
      argc, argv, "prefill_sm100_assemble", false,
      [](const std::string& dir, bool, const std::vector<std::string>& configs) {
        return run(dir, configs);
      });
}
