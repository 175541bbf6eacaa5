// sm100_twin_assemble: codegen's sm_100a GEMMs and prefill attention
// (codegen/kernels/gemm_small_sm100.cuh with its norm and folded-QKV forms, gemm_prefill_sm100.cuh,
// attention_prefill_sm100.cuh) at every instance the given model configs' sm_100a kernel sets hold
// (default serving config, as `telosc compile --target sm_100a` plans them), through codegen's own
// NVRTC driver and ptxas: as planned for sm_100a, or with --twins their Hopper twins
// (gemm_small_sm100_twin_*,
// gemm_prefill_sm100_twin_*, gemm_prefill_sm100_pair_twin_*, attn_prefill_sm100_twin: the same
// template arguments; the small GEMM's, the CTA pair's and the attention's twins their own dynamic
// shared memory, the one-CTA prefill twin's the same) for sm_90a. Each
// instance must use no local memory, spill nothing and fit its static and dynamic shared memory in
// a block's (codegen::check_kernel_resources). A SwiGLU instance whose token tile is over 128 has
// no twin (its accumulator does not fit two warpgroups' registers) and is listed as such.
//
//   sm100_twin_assemble [--twins] [--serving SERVING.json] -o DIR CONFIG.json...
//
// --serving plans every config with that serving config instead of its default (as telosc's
// --serving does): an e4m3 KV cache or tensor parallelism, for instance, moves one-token buckets
// to the small-M rules, whose QKV GEMM then folds the epilogue (gemm_small_sm100_norm_qkv).
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
#include <utility>
#include <vector>

#include "codegen/emit_source.hpp"
#include "codegen/kernel_plan.hpp"
#include "codegen/kernels/gemm_small_sm100.cuh"
#include "support/error.hpp"
#include "test/codegen/sm100_assemble.hpp"

namespace {

using namespace telos;

constexpr const char* kPrefix = "telos_kernels::gemm_small_sm100_";
constexpr const char* kTwinPrefix = "telos_kernels::gemm_small_sm100_twin_";
constexpr const char* kPrefillPrefix = "telos_kernels::gemm_prefill_sm100_";
constexpr const char* kPrefillTwinPrefix = "telos_kernels::gemm_prefill_sm100_twin_";
constexpr const char* kPairPrefix = "telos_kernels::gemm_prefill_sm100_pair_";
constexpr const char* kPairTwinPrefix = "telos_kernels::gemm_prefill_sm100_pair_twin_";
constexpr const char* kAttnPrefix = "telos_kernels::attn_prefill_sm100<";
constexpr const char* kAttnTwinPrefix = "telos_kernels::attn_prefill_sm100_twin<";

// The twin of attention instance `name` (attn_prefill_sm100<HQ, HKV, D, ...>), with its dynamic
// shared memory.
std::pair<std::string, int> attn_twin_of(const std::string& name) {
  const std::string args = name.substr(std::string(kAttnPrefix).size());
  int hq = 0, hkv = 0, d = 0;
  if (std::sscanf(args.c_str(), "%d, %d, %d", &hq, &hkv, &d) != 3)
    fail("sm100_twin_assemble: cannot read the template arguments of " + name);
  return {kAttnTwinPrefix + args, codegen::attn_prefill_sm100_smem(d, true)};
}

// The small GEMM's tiling that sm_100a instance `name` states: gemm_small_sm100_EPI<M, N, K,
// STAGES>, its norm forms gemm_small_sm100_norm_EPI<M, N, K, STAGES, EPS> (EPI bf16 or swiglu) and
// gemm_small_sm100_norm_qkv<M, K, STAGES, HQ, HKV, D, ...> (N = (HQ + 2 HKV) D); with SwiGLU's
// accumulator columns (gate and up) in `swiglu`. It must be small_gemm_sm100_tiling's, planned with
// `smem` bytes.
codegen::SmallGemmSm100Tiling tiling_of(const std::string& name, int smem, bool& swiglu) {
  const std::string rest = name.substr(std::string(kPrefix).size());
  const std::string epi = rest.substr(0, rest.find('<'));
  const char* args = rest.c_str() + epi.size();
  const bool norm = epi.rfind("norm_", 0) == 0;
  swiglu = epi.ends_with("swiglu");
  int m = 0, n = 0, k = 0, stages = 0, hq = 0, hkv = 0, d = 0;
  const bool read =
      epi == "norm_qkv"
          ? std::sscanf(args, "<%d, %d, %d, %d, %d, %d", &m, &k, &stages, &hq, &hkv, &d) == 6
          : std::sscanf(args, "<%d, %d, %d, %d", &m, &n, &k, &stages) == 4;
  if (!read) fail("sm100_twin_assemble: cannot read the template arguments of " + name);
  if (epi == "norm_qkv") n = (hq + 2 * hkv) * d;
  const codegen::SmallGemmSm100Tiling t = codegen::small_gemm_sm100_tiling(n, k, m, swiglu, norm);
  if (t.stages != stages || t.smem() != smem)
    fail("sm100_twin_assemble: " + name + " is not small_gemm_sm100_tiling's instance");
  return t;
}

// The twin of sm_100a small GEMM instance `name` (planned with `smem` bytes; tiling_of), with its
// dynamic shared memory; an empty name where it has none.
std::pair<std::string, int> twin_of(const std::string& name, int smem) {
  bool swiglu = false;
  const codegen::SmallGemmSm100Tiling t = tiling_of(name, smem, swiglu);
  const unsigned accum_columns = (swiglu ? 2u : 1u) * static_cast<unsigned>(t.mma_n);
  if (accum_columns > telos_kernels::SmallGemmSm100Twin::kMaxAccumColumns) return {"", 0};
  return {kTwinPrefix + name.substr(std::string(kPrefix).size()),
          static_cast<int>(telos_kernels::SmallGemmSm100Twin::smem(
              static_cast<unsigned>(t.stages), static_cast<unsigned>(t.stage_bytes()),
              accum_columns, static_cast<unsigned>(t.resident_bytes())))};
}

// The sm_100a plan's GEMM instances of the config at `path` (or their twins) under the serving
// config `serving` (a file; empty: the default), with their dynamic shared memory; `untwinned`
// collects those without a twin.
void add_instances(const std::string& path, const std::string& serving, bool twins,
                   std::map<std::string, int>& instances, std::map<std::string, int>& untwinned) {
  const codegen::KernelPlan plan = codegen::plan_config(path, "sm_100a", serving);
  const std::size_t prefill = std::string(kPrefillPrefix).size();
  for (const codegen::KernelInstance& k : plan.kernels) {
    if (k.instance.rfind(kAttnPrefix, 0) == 0) {
      const auto [twin, smem] = attn_twin_of(k.instance);
      if (twins)
        instances[twin] = smem;
      else
        instances[k.instance] = k.dynamic_smem;
      continue;
    }
    if (k.instance.rfind(kPairPrefix, 0) == 0) {
      const std::string rest = k.instance.substr(std::string(kPairPrefix).size());
      if (twins)
        instances[kPairTwinPrefix + rest] = codegen::prefill_pair_smem(256);
      else
        instances[k.instance] = k.dynamic_smem;
      continue;
    }
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

// The modules' source: codegen's, with every sm_100a kernel header and a RoPE table as long as the
// longest head's (the folded QKV epilogue reads it; its values do not change the code).
std::string module_source() {
  codegen::KernelPlan plan;
  plan.target = "sm_100a";
  plan.rope_inv_freq.assign(64, 1.f);
  return codegen::emit_source(plan);
}

std::string serving;  // --serving

int run(const std::filesystem::path& dir, bool twins, const std::vector<std::string>& configs) {
  const std::string arch = twins ? "sm_90a" : "sm_100a";
  std::map<std::string, int> instances, untwinned;
  for (const std::string& c : configs) add_instances(c, serving, twins, instances, untwinned);
  if (instances.empty()) fail("sm100_twin_assemble: the configs plan no sm_100a GEMM");
  codegen::assemble_instances("sm100_twin_assemble", module_source(), arch, instances, dir);
  for (const auto& [name, smem] : untwinned) std::cout << name << ": no twin\n";
  std::cout << instances.size() << " instances assembled for " << arch << "\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return codegen::assemble_tool_main(argc, argv, "sm100_twin_assemble", true, run, &serving);
}
