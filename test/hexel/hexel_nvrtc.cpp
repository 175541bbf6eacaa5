// hexel_nvrtc: compiles one CUDA source through NVRTC the way the Telos codegen will (C++20,
// -default-device, Hexel's include directory) and writes the PTX. The lit tests then assemble
// it with ptxas and FileCheck it for the intended instructions.
//
//   hexel_nvrtc --arch=compute_90a [-DNAME[=V]]... -I DIR... INPUT.cu -o OUT.ptx
// Exit codes: 0 success, 1 compile error (log on stderr), 2 usage or I/O error.
#include <nvrtc.h>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

namespace {

int usage(const std::string& why) {
  std::cerr << "hexel_nvrtc: " << why
            << "\nusage: hexel_nvrtc --arch=compute_XXa [-DNAME[=V]]... [-I DIR]... INPUT.cu -o "
               "OUT.ptx\n";
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  std::string arch, input, output;
  std::vector<std::string> opts = {"--std=c++20", "-default-device"};
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a.rfind("--arch=", 0) == 0) {
      arch = a.substr(7);
    } else if (a == "-o" && i + 1 < argc) {
      output = argv[++i];
    } else if (a == "-I" && i + 1 < argc) {
      opts.push_back(std::string("-I") + argv[++i]);
    } else if (a.rfind("-I", 0) == 0 || a.rfind("-D", 0) == 0) {
      opts.push_back(a);
    } else if (!a.empty() && a[0] != '-' && input.empty()) {
      input = a;
    } else {
      return usage("unexpected argument '" + a + "'");
    }
  }
  if (arch.rfind("compute_", 0) != 0) return usage("--arch=compute_XXa is required (PTX output)");
  if (input.empty() || output.empty()) return usage("an input and -o OUTPUT are required");
  opts.push_back("--gpu-architecture=" + arch);
  opts.push_back("-I" HEXEL_INCLUDE_DIR);

  std::ifstream in(input);
  if (!in) return usage("cannot read '" + input + "'");
  std::stringstream src;
  src << in.rdbuf();
  const std::string text = src.str();

  nvrtcProgram prog;
  if (nvrtcCreateProgram(&prog, text.c_str(), input.c_str(), 0, nullptr, nullptr) != NVRTC_SUCCESS)
    return usage("nvrtcCreateProgram failed");
  std::vector<const char*> copts;
  for (const auto& o : opts) copts.push_back(o.c_str());
  nvrtcResult r = nvrtcCompileProgram(prog, static_cast<int>(copts.size()), copts.data());
  size_t log_size = 0;
  nvrtcGetProgramLogSize(prog, &log_size);
  if (log_size > 1) {
    std::string log(log_size, '\0');
    nvrtcGetProgramLog(prog, log.data());
    std::cerr << log;
  }
  if (r != NVRTC_SUCCESS) {
    std::cerr << "hexel_nvrtc: " << input << ": " << nvrtcGetErrorString(r) << "\n";
    nvrtcDestroyProgram(&prog);
    return 1;
  }
  size_t ptx_size = 0;
  nvrtcGetPTXSize(prog, &ptx_size);
  std::string ptx(ptx_size, '\0');
  nvrtcGetPTX(prog, ptx.data());
  nvrtcDestroyProgram(&prog);
  if (!ptx.empty() && ptx.back() == '\0') ptx.pop_back();
  std::ofstream out(output, std::ios::binary);
  if (!out || !(out << ptx)) return usage("cannot write '" + output + "'");
  return 0;
}
