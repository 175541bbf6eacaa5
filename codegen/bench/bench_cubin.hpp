#pragma once
// A bench's kernels travel to the GPU machine compiled: `--compile-only CUBIN` on the build machine
// writes the cubin and, beside it, CUBIN.names (one line an instance: its name, a tab, its lowered
// entry name), so the GPU machine needs no NVRTC to run the bench.
#include <cuda_runtime.h>

#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <vector>

#include "codegen/nvrtc_driver.hpp"

namespace telos::codegen {

inline void save_bench_cubin(const std::string& path, const CompiledModule& m, const std::vector<std::string>& names) {
  std::ofstream(path, std::ios::binary) << m.cubin;
  std::ofstream list(path + ".names");
  for (const auto& n : names) list << n << "\t" << m.lowered.at(n) << "\n";
}

struct BenchCubin {
  cudaError_t status = cudaSuccess;  // of loading the library
  cudaLibrary_t lib = nullptr;
  std::map<std::string, std::string> lowered;  // instance -> entry name
};

inline BenchCubin load_bench_cubin(const std::string& path) {
  BenchCubin b;
  std::ifstream in(path, std::ios::binary);
  const std::string cubin((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::ifstream list(path + ".names");
  for (std::string line; std::getline(list, line);) {
    const auto tab = line.find('\t');
    if (tab != std::string::npos) b.lowered[line.substr(0, tab)] = line.substr(tab + 1);
  }
  b.status = cudaLibraryLoadData(&b.lib, cubin.data(), nullptr, nullptr, 0, nullptr, nullptr, 0);
  return b;
}

}  // namespace telos::codegen
