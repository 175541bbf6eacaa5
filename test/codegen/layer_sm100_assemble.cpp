// layer_sm100_assemble: the sm_100a one-token layer (codegen/kernels/decode_layer_sm100.cuh) of the
// given model configs' sm_100a kernel sets (default serving config, as `telosc compile --target
// sm_100a` plans it), through codegen's own NVRTC driver and ptxas: as planned for sm_100a
// (decode_layer_persistent_sm100), or with --twins its Hopper twin for sm_90a
// (decode_layer_persistent_sm100_twin: the same template arguments but the ring's slots, its
// tiling decode_layer_sm100_twin_tiling). Each config's instance compiles in the config's own
// module (its RoPE table: codegen's emitted source) and must use no local memory, spill nothing
// and fit its shared memory in a block's (codegen::check_kernel_resources).
//
//   layer_sm100_assemble [--twins] -o DIR CONFIG.json...
//
// Prints one line per config's instance: the instance, its registers, static and dynamic shared
// memory; writes DIR/N/module_0.ptx and .cubin for config N. Exit codes: 0 every instance
// assembled within the limits; 1 a config, a compile or a limit failed (message on stderr); 2
// usage.
#include <filesystem>
#include <iostream>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "codegen/emit_source.hpp"
#include "codegen/kernel_plan.hpp"
#include "support/error.hpp"
#include "test/codegen/sm100_assemble.hpp"

namespace {

using namespace telos;

constexpr const char* kLayer = "telos_kernels::decode_layer_persistent_sm100<";
constexpr const char* kTwin = "telos_kernels::decode_layer_persistent_sm100_twin<";

// Where template argument `index` (from 0) of `instance` starts and ends.
std::pair<std::size_t, std::size_t> argument(const std::string& instance, int index) {
  std::size_t at = instance.find('<') + 1;
  for (int i = 0; i < index; ++i) at = instance.find(", ", at) + 2;
  return {at, instance.find(", ", at)};
}

// The sm_100a plan's layer instance of the config at `path`, or its twin (the ring's slots from
// decode_layer_sm100_twin_tiling: STAGES, its template argument 15), with its dynamic shared
// memory, assembled into `dir`.
void assemble_config(const std::string& path, bool twins, const std::filesystem::path& dir) {
  const codegen::KernelPlan plan = codegen::plan_config(path, "sm_100a");
  for (const codegen::KernelInstance& k : plan.kernels) {
    if (k.instance.rfind(kLayer, 0) != 0) continue;
    std::string name = k.instance;
    int smem = k.dynamic_smem;
    if (twins) {
      const auto [at, end] = argument(name, 15);
      codegen::PersistentLayerTiling t;
      t.stages = std::stoi(name.substr(at, end - at));
      t.smem = smem;
      t.fits = true;
      const codegen::PersistentLayerTiling twin = codegen::decode_layer_sm100_twin_tiling(t);
      if (!twin.fits) fail("layer_sm100_assemble: " + name + " has no twin that fits");
      name = kTwin + name.substr(std::string(kLayer).size(), at - std::string(kLayer).size()) +
             std::to_string(twin.stages) + name.substr(end);
      smem = twin.smem;
    }
    codegen::assemble_instances("layer_sm100_assemble", codegen::emit_source(plan),
                                twins ? "sm_90a" : "sm_100a", {{name, smem}}, dir);
    return;
  }
  fail("layer_sm100_assemble: the sm_100a plan of " + path + " has no one-token layer");
}

}  // namespace

int main(int argc, char** argv) {
  return codegen::assemble_tool_main(
      argc, argv, "layer_sm100_assemble", true,
      [](const std::string& dir, bool twins, const std::vector<std::string>& configs) {
        for (std::size_t c = 0; c < configs.size(); ++c)
          assemble_config(configs[c], twins, std::filesystem::path(dir) / std::to_string(c));
        std::cout << configs.size() << " layers assembled for " << (twins ? "sm_90a" : "sm_100a")
                  << "\n";
        return 0;
      });
}
