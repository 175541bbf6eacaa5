#pragma once
// What the prefill benches (telos-prefill-bench, telos-attn-prefill-bench) share:
//  - their kernels travel to the GPU machine compiled: `--compile-only CUBIN` on the build machine
//    writes the cubin and, beside it, CUBIN.names (one line an instance: its name, a tab, its
//    lowered entry name), so the GPU machine needs no NVRTC to run the bench;
//  - their timing: back-to-back launches with an event between each two, the median after a
//    warm-up at load (steady_event_ms; the issue-4 figures come from the paired scripts,
//    prefill_gemm_torch.py's interleaved_ms, which time ours beside torch's in one process).
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

// Median milliseconds of `reps` launches issued back to back with an event between each two (no
// host wait between them, so the GPU does not idle), after back-to-back launches for about
// `warm_ms` of GPU time: every case is timed at the clocks a sustained load runs at. (Single
// launches between host waits let the clocks follow what ran before, and the same shape moves by
// more than the differences timed.) `check(error, what)` reports a failed wait.
template <class Launch, class Check>
float steady_event_ms(Launch launch, Check check, float warm_ms = 100.f, int reps = 20) {
  std::vector<cudaEvent_t> ev(reps + 1);
  for (auto& e : ev) cudaEventCreate(&e);
  cudaEventRecord(ev[0]);
  launch();
  cudaEventRecord(ev[1]);
  check(cudaEventSynchronize(ev[1]), "timing");
  float once = 0;
  cudaEventElapsedTime(&once, ev[0], ev[1]);
  const int warm = std::max(3, static_cast<int>(warm_ms / std::max(once, 1e-3f)));
  for (int i = 0; i < warm; ++i) launch();
  cudaEventRecord(ev[0]);
  for (int i = 0; i < reps; ++i) {
    launch();
    cudaEventRecord(ev[i + 1]);
  }
  check(cudaEventSynchronize(ev[reps]), "timing");
  std::vector<float> times(reps);
  for (int i = 0; i < reps; ++i) cudaEventElapsedTime(&times[i], ev[i], ev[i + 1]);
  for (auto& e : ev) cudaEventDestroy(e);
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

}  // namespace telos::codegen
