// w8a8_assemble: the W8A8 GEMMs and the activation quantization (codegen/kernels/gemm_w8a8.cuh,
// gemm_small_w8a8.cuh) at every shape the given model configs' prefill GEMMs have, through
// codegen's own NVRTC driver and ptxas for sm_90a. The shapes are the sm_90a lowering's: each
// config is planned as telosc plans it (default serving config), and every prefill GEMM instance
// (gemm_prefill_{bf16,residual,swiglu}<M, N, K[, W_BH, W_BOX]>) gives gemm_prefill_w8a8_EPI<M, N,
// K> with PrefillW8a8Gemm::smem() bytes of dynamic shared memory, quantize_rows_e4m3<M, K>, the
// quantization of its activations, and at each small-M bucket size T of kSmallTokens the small-M
// form gemm_small_w8a8_EPI<T, N, K, BN, STAGES> (codegen::small_gemm_w8a8_tiling, its smem()).
// Each instance must use no local memory, spill nothing and fit its static and dynamic shared
// memory in a block's (codegen::check_kernel_resources).
//
//   w8a8_assemble -o DIR CONFIG.json...
//
// Prints one line per instance (sorted, each once): the instance, then its registers, static
// shared memory and dynamic shared memory; writes DIR/module_N.ptx and DIR/module_N.cubin, one
// module per compile thread. Exit codes: 0 every instance assembled within the limits; 1 a config,
// a compile or a limit failed (message on stderr); 2 usage.
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "codegen/kernels/gemm_prefill_shape.cuh"
#include "support/error.hpp"
#include "test/codegen/sm100_assemble.hpp"

namespace {

using namespace telos;

constexpr const char* kPrefix = "telos_kernels::gemm_prefill_";
// The small-M buckets' token counts the small-M forms are assembled at (below
// kPrefillGemmMinRows).
constexpr int kSmallTokens[] = {1, 2, 8, 64, 128, 256};

// The W8A8 instances of the config at `path`'s sm_90a prefill GEMMs, with their dynamic shared
// memory.
void add_instances(const std::string& path, std::map<std::string, int>& instances) {
  const codegen::KernelPlan plan = codegen::plan_config(path, "sm_90a");
  const std::size_t prefix = std::string(kPrefix).size();
  for (const codegen::KernelInstance& k : plan.kernels) {
    if (k.instance.rfind(kPrefix, 0) != 0) continue;
    const std::string rest = k.instance.substr(prefix);
    const std::string epi = rest.substr(0, rest.find('<'));
    if (epi != "bf16" && epi != "residual" && epi != "swiglu") continue;
    int m = 0, n = 0, kk = 0;
    if (std::sscanf(rest.c_str() + epi.size(), "<%d, %d, %d", &m, &n, &kk) != 3)
      fail("w8a8_assemble: cannot read the template arguments of " + k.instance);
    const std::string dims =
        std::to_string(m) + ", " + std::to_string(n) + ", " + std::to_string(kk) + ">";
    instances[std::string(kPrefix) + "w8a8_" + epi + "<" + dims] =
        static_cast<int>(telos_kernels::PrefillW8a8Gemm::smem());
    instances["telos_kernels::quantize_rows_e4m3<" + std::to_string(m) + ", " + std::to_string(kk) +
              ">"] = 0;
    for (int t : kSmallTokens) {
      const codegen::SmallGemmTiling s = codegen::small_gemm_w8a8_tiling(n, kk, t, epi == "swiglu");
      instances[codegen::small_gemm_w8a8_instance(s, epi, t, n, kk)] = s.smem();
    }
  }
}

int run(const std::filesystem::path& dir, const std::vector<std::string>& configs) {
  std::map<std::string, int> instances;
  for (const std::string& c : configs) add_instances(c, instances);
  if (instances.empty()) fail("w8a8_assemble: the configs plan no prefill GEMM");
  codegen::assemble_instances("w8a8_assemble", "#include \"gemm_small_w8a8.cuh\"\n", "sm_90a",
                              instances, dir);
  std::cout << instances.size() << " instances assembled for sm_90a\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return codegen::assemble_tool_main(
      argc, argv, "w8a8_assemble", false,
      [](const std::string& dir, bool, const std::vector<std::string>& configs) {
        return run(dir, configs);
      });
}
