// w8a8_layer_assemble: the W8A8 one-token layer (decode_layer_persistent_w8a8, codegen/kernels/
// decode_layer_w8a8.cuh) for the given model configs, through codegen's own NVRTC driver and
// ptxas for sm_90a. Each config is planned as telosc plans it for sm_90a (default serving config);
// its one-token layer's model arguments (decode_layer_persistent's first 15: H .. I) give the W8A8
// layer with decode_layer_w8a8_tiling's tiles and ring and its dynamic shared memory, compiled in
// the config's own module (its RoPE table: codegen's emitted source). Each instance must use no
// local memory, spill nothing and fit its shared memory in a block's
// (codegen::check_kernel_resources).
//
//   w8a8_layer_assemble -o DIR CONFIG.json...
//
// Prints one line per config's instance: the instance, its registers, static and dynamic shared
// memory; writes DIR/N/module_0.ptx and .cubin for config N. Exit codes: 0 every instance
// assembled within the limits; 1 a config, a compile or a limit failed (message on stderr); 2
// usage.
#include <filesystem>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "codegen/emit_source.hpp"
#include "codegen/kernel_plan.hpp"
#include "support/error.hpp"
#include "test/codegen/sm100_assemble.hpp"

namespace {

using namespace telos;

constexpr const char* kLayer = "telos_kernels::decode_layer_persistent<";

// Template arguments 0 .. n - 1 of `instance`, as written.
std::vector<std::string> arguments(const std::string& instance, int n) {
  std::vector<std::string> args;
  std::size_t at = instance.find('<') + 1;
  for (int i = 0; i < n; ++i) {
    const std::size_t end = instance.find(", ", at);
    if (end == std::string::npos)
      fail("w8a8_layer_assemble: too few template arguments in " + instance);
    args.push_back(instance.substr(at, end - at));
    at = end + 2;
  }
  return args;
}

// The W8A8 layer of the sm_90a plan's one-token layer of the config at `path`, assembled into
// `dir`.
void assemble_config(const std::string& path, const std::filesystem::path& dir) {
  const codegen::KernelPlan plan = codegen::plan_config(path, "sm_90a");
  for (const codegen::KernelInstance& k : plan.kernels) {
    if (k.instance.rfind(kLayer, 0) != 0) continue;
    const std::vector<std::string> a = arguments(k.instance, 15);
    const int h = std::stoi(a[0]), hq = std::stoi(a[1]), hkv = std::stoi(a[2]), d = std::stoi(a[3]),
              i = std::stoi(a[14]);
    const codegen::PersistentLayerTiling t =
        codegen::decode_layer_w8a8_tiling(h, (hq + 2 * hkv) * d, hq * d, i, d, a[5] == "true");
    if (!t.fits) fail("w8a8_layer_assemble: the W8A8 layer does not fit " + path);
    std::string name = "telos_kernels::decode_layer_persistent_w8a8<";
    for (const std::string& arg : a) name += arg + ", ";
    name += std::to_string(t.stages) + ", " + std::to_string(t.bq) + ", " + std::to_string(t.bo) +
            ", " + std::to_string(t.bg) + ", " + std::to_string(t.bd) +
            (t.qkv_rope ? ", true>" : ", false>");
    codegen::assemble_instances("w8a8_layer_assemble",
                                codegen::emit_source(plan) + "#include \"decode_layer_w8a8.cuh\"\n",
                                "sm_90a", {{name, t.smem}}, dir);
    return;
  }
  fail("w8a8_layer_assemble: the sm_90a plan of " + path + " has no one-token layer");
}

}  // namespace

int main(int argc, char** argv) {
  return codegen::assemble_tool_main(
      argc, argv, "w8a8_layer_assemble", false,
      [](const std::string& dir, bool, const std::vector<std::string>& configs) {
        for (std::size_t c = 0; c < configs.size(); ++c)
          assemble_config(configs[c], std::filesystem::path(dir) / std::to_string(c));
        std::cout << configs.size() << " layers assembled for sm_90a\n";
        return 0;
      });
}
