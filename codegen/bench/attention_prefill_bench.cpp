// telos-attn-prefill-bench: attn_prefill (codegen/kernels/attention_prefill.cuh), causal prefill
// attention on Llama-3.1-8B's head shape (32 query heads, 8 KV heads, D = 128), one sequence of
// T = 4096, 8192, 16384 prompt tokens (positions 0 .. T-1, K/V in 16-position pages placed in a
// shuffled order), in the tiles a prefill bucket would use (32 tokens: 128 rows at G = 4), K/V
// through the tensor map the engine builds for `tmap:kv:` (docs/artifact.md). `--compile-only`
// writes the cubin that codegen/bench/attention_prefill_torch.py loads to time our kernels beside
// torch SDPA in one process (the prefill attention target's figure). The timing mode runs ours
// alone: the first and last token's heads 0 and 31 checked against f64 (relative L2 error printed),
// then timed under load (bench_support.hpp, steady_event_ms), one line per case and variant: "telos
// VARIANT T HQ HKV D MS REL_ERR", VARIANT attn_prefill_plain_persistent (NT = T / 32 on
// attn_prefill_persistent_grid CTAs: what the plan runs) or attn_prefill_plain (a tile a CTA), the
// reference from q rounded to bf16 as the kernel rounds it: a process of our kernels only, for
// profilers (ncu).
//
//   telos-attn-prefill-bench --compile-only CUBIN [--page N]
//                                                   NVRTC only (no GPU): compiles the instances
//                                                   (for a pool of N-position pages, 16 unless
//                                                   given), writes CUBIN and CUBIN.names
//   telos-attn-prefill-bench CUBIN [T]              loads them and times (T: that prompt length
//                                                   only, 4096, 8192 or 16384)
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <numeric>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "codegen/bench/bench_support.hpp"
#include "codegen/compile_cache.hpp"
#include "codegen/kernel_plan.hpp"
#include "codegen/nvrtc_driver.hpp"
#include "hexel/tensor_map_encode.h"

namespace {

using namespace telos::codegen;

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "telos-attn-prefill-bench: %s: %s\n", what, cudaGetErrorString(e));
    std::exit(1);
  }
}

constexpr int kHQ = 32, kHKV = 8, kD = 128, kPage = 16, kTpt = 32;
constexpr int kMaxT = 16384, kMaxP = kMaxT / kPage;
constexpr long long kPageElems = 2LL * kHKV * kPage * kD;  // a one-layer pool
// AttnPrefill<128>'s launch, as the plan states it (codegen/kernel_plan.hpp).
constexpr int kThreads = telos::codegen::kAttnPrefillThreads;
const int kSmem = telos::codegen::attn_prefill_smem(kD);

// A tile a CTA (nt 0) or persistent for T = NT · 32. `page`: positions a page of the pool (the
// timing mode's pool has kPage; --compile-only may name another, for the paired script's pools).
std::string instance(int nt = 0, int page = kPage) {
  return telos::codegen::attn_prefill_instance(kHQ, kHKV, kD, page, kMaxT / page,
                                               2LL * kHKV * page * kD, kTpt, nt);
}
constexpr int kTs[] = {4096, 8192, 16384};

float from_bf16(std::uint16_t h) {
  const std::uint32_t u = static_cast<std::uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
std::uint16_t to_bf16(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<std::uint16_t>(u >> 16);
}

}  // namespace

int main(int argc, char** argv) {
  if ((argc == 3 || (argc == 5 && std::string(argv[3]) == "--page")) &&
      std::string(argv[1]) == "--compile-only") {
    const int page = argc == 5 ? std::atoi(argv[4]) : kPage;
    if (page <= 0 || !attn_prefill_persistent_fits(kD, page, kTpt)) {
      std::fprintf(stderr,
                   "telos-attn-prefill-bench: --page %s: not a multiple of 8 dividing 128\n",
                   argv[4]);
      return 2;
    }
    std::vector<std::string> names = {instance(0, page)};
    for (const int T : kTs) names.push_back(instance(T / kTpt, page));
    const CompiledModule m = compile_module("#include \"attention_prefill.cuh\"\n", "sm_90a", names,
                                            CompileCache::default_root());
    save_bench_cubin(argv[2], m, names);
    return 0;
  }
  // CUBIN [T]: one prompt length only (for a profiler's kernel filter).
  const int only_t = argc == 3 ? std::atoi(argv[2]) : 0;
  if (argc != 2 &&
      !(argc == 3 && std::find(std::begin(kTs), std::end(kTs), only_t) != std::end(kTs))) {
    std::fprintf(stderr,
                 "usage: telos-attn-prefill-bench --compile-only CUBIN [--page N] | CUBIN [T]\n");
    return 2;
  }
  const BenchCubin loaded = load_bench_cubin(argv[1]);
  check(loaded.status, "load");
  cudaLibrary_t lib = loaded.lib;
  const std::map<std::string, std::string>& lowered = loaded.lowered;
  auto kernel = [&](int nt) {
    cudaKernel_t k = nullptr;
    check(cudaLibraryGetKernel(&k, lib, lowered.at(instance(nt)).c_str()), "kernel");
    const void* fn = reinterpret_cast<const void*>(k);
    check(cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem), "smem");
    return fn;
  };

  // Inputs at the largest T: q ~ N(0, 1) in f32, K/V ~ N(0, 1) in bf16, pages shuffled.
  std::mt19937 rng(12345);
  std::normal_distribution<float> nd(0.f, 1.f);
  const std::size_t q_elems = static_cast<std::size_t>(kMaxT) * kHQ * kD;
  std::vector<float> q(q_elems);
  for (auto& v : q) v = nd(rng);
  std::vector<std::uint16_t> kv(static_cast<std::size_t>(kMaxP) * kPageElems);
  for (auto& v : kv) v = to_bf16(nd(rng));
  std::vector<int> pages(kMaxP);
  std::iota(pages.begin(), pages.end(), 0);
  std::shuffle(pages.begin(), pages.end(), rng);
  std::vector<int> positions(kMaxT), token_seq(kMaxT, 0);
  std::iota(positions.begin(), positions.end(), 0);

  float* dq = nullptr;
  std::uint16_t *dkv = nullptr, *dout = nullptr;
  int *dpos = nullptr, *dseq = nullptr, *dpt = nullptr;
  check(cudaMalloc(&dq, q_elems * 4), "q");
  check(cudaMalloc(&dkv, kv.size() * 2), "kv");
  check(cudaMalloc(&dout, q_elems * 2), "out");
  check(cudaMalloc(&dpos, kMaxT * 4), "positions");
  check(cudaMalloc(&dseq, kMaxT * 4), "token_seq");
  check(cudaMalloc(&dpt, kMaxP * 4), "page table");
  check(cudaMemcpy(dq, q.data(), q_elems * 4, cudaMemcpyHostToDevice), "q upload");
  check(cudaMemcpy(dkv, kv.data(), kv.size() * 2, cudaMemcpyHostToDevice), "kv upload");
  check(cudaMemcpy(dpos, positions.data(), kMaxT * 4, cudaMemcpyHostToDevice), "positions upload");
  check(cudaMemcpy(dseq, token_seq.data(), kMaxT * 4, cudaMemcpyHostToDevice), "token_seq upload");
  check(cudaMemcpy(dpt, pages.data(), kMaxP * 4, cudaMemcpyHostToDevice), "page table upload");
  // The pool in rows of one position of one head, boxes of a page, as the engine encodes it.
  const std::vector<hexel::TensorMap> map = {hexel::encode_2d(
      hexel::TmaDtype::BF16, dkv, kv.size() / kD, kD, kD * 2, kPage, 64, hexel::Swizzle::B128)};
  hexel::TensorMap* dmap = nullptr;
  check(cudaMalloc(&dmap, sizeof(hexel::TensorMap)), "tensor map");
  check(cudaMemcpy(dmap, map.data(), sizeof(hexel::TensorMap), cudaMemcpyHostToDevice),
        "tensor map upload");

  auto kv_at = [&](int p, int which, int kvh, int d) {
    return from_bf16(kv[pages[p / kPage] * kPageElems +
                        (static_cast<long long>(which * kHKV + kvh) * kPage + p % kPage) * kD + d]);
  };
  for (const int T : kTs) {
    if (only_t && T != only_t) continue;
    // Rows (t, h) for t = 0, T - 1 and h = 0, 31 in f64, q rounded to bf16 as the kernel does.
    std::vector<std::pair<std::size_t, std::vector<double>>> refs;
    for (const int t : {0, T - 1})
      for (const int h : {0, kHQ - 1}) {
        const int kvh = h / (kHQ / kHKV);
        const std::size_t row = static_cast<std::size_t>(t) * kHQ + h;
        std::vector<double> sc(t + 1), ref(kD, 0.0);
        double mx = -INFINITY, sum = 0;
        for (int p = 0; p <= t; ++p) {
          double dot = 0;
          for (int d = 0; d < kD; ++d)
            dot += double(from_bf16(to_bf16(q[row * kD + d]))) * kv_at(p, 0, kvh, d);
          sc[p] = dot / std::sqrt(double(kD));
          mx = std::max(mx, sc[p]);
        }
        for (int p = 0; p <= t; ++p) {
          const double w = std::exp(sc[p] - mx);
          sum += w;
          for (int d = 0; d < kD; ++d) ref[d] += w * kv_at(p, 1, kvh, d);
        }
        for (double& r : ref) r /= sum;
        refs.emplace_back(row, std::move(ref));
      }
    for (const bool persistent : {true, false}) {
      const int nt = persistent ? T / kTpt : 0;
      const void* fn = kernel(nt);
      std::vector<const void*> args = {dq, dpos, dseq, dpt, dkv, dmap, dout};
      std::vector<void*> params;
      for (auto& a : args) params.push_back(&a);
      const dim3 grid =
          persistent ? dim3(attn_prefill_persistent_grid(kHKV, nt)) : dim3(kHKV, T / kTpt);
      auto launch = [&] {
        check(cudaLaunchKernel(fn, grid, kThreads, params.data(), kSmem, nullptr), "launch");
      };
      check(cudaMemset(dout, 0xff, static_cast<std::size_t>(T) * kHQ * kD * 2), "poison");
      launch();
      check(cudaDeviceSynchronize(), "first launch");
      double num = 0, den = 0;
      for (const auto& [row, ref] : refs) {
        std::vector<std::uint16_t> got(kD);
        check(cudaMemcpy(got.data(), dout + row * kD, kD * 2, cudaMemcpyDeviceToHost),
              "row download");
        for (int d = 0; d < kD; ++d) {
          const double g = from_bf16(got[d]);
          num += std::isfinite(g) ? (g - ref[d]) * (g - ref[d]) : INFINITY;
          den += ref[d] * ref[d];
        }
      }
      const float ms = steady_event_ms(launch, check);
      std::printf("telos %s %d %d %d %d %.4f %.2e\n",
                  persistent ? "attn_prefill_plain_persistent" : "attn_prefill_plain", T, kHQ, kHKV,
                  kD, ms, std::sqrt(num / den));
      std::fflush(stdout);
    }
  }
  cudaLibraryUnload(lib);
  return 0;
}
