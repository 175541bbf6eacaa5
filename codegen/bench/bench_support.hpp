#pragma once
// What the prefill benches (telos-prefill-bench, telos-attn-prefill-bench) share:
//  - their kernels travel to the GPU machine compiled: `--compile-only CUBIN` on the build machine
//    writes the cubin and, beside it, CUBIN.names (one line an instance: its name, a tab, its
//    lowered entry name), so the GPU machine needs no NVRTC to run the bench;
//  - their timing: CUDA events around single launches, the median after warm-up.
#include <cuda_runtime.h>

#include <algorithm>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <vector>

#include "codegen/nvrtc_driver.hpp"

namespace telos::codegen {

inline void save_bench_cubin(const std::string& path, const CompiledModule& m,
                             const std::vector<std::string>& names) {
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

// Median milliseconds of `reps` single launches, each between two events, after `warm` launches.
// `check(error, what)` reports a failed wait.
template <class Launch, class Check>
float median_event_ms(Launch launch, Check check, int warm = 3, int reps = 20) {
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  for (int i = 0; i < warm; ++i) launch();
  std::vector<float> times;
  for (int i = 0; i < reps; ++i) {
    cudaEventRecord(e0);
    launch();
    cudaEventRecord(e1);
    check(cudaEventSynchronize(e1), "timing");
    float ms = 0;
    cudaEventElapsedTime(&ms, e0, e1);
    times.push_back(ms);
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

}  // namespace telos::codegen
