// telos-kernel-bench: times Telos kernels on the GPU against the copy bandwidth measured in the
// same run (CUDA events, median of repetitions, weights rotated over several copies so L2 does
// not serve them). Prints a table: kernel, shape, median µs, GB/s, % of copy bandwidth.
//   decode GEMM (linear_f32, and the QKV kernel with its epilogue) at M = 1, 8, 64 on
//   Llama-3.1-8B shapes, tiled as codegen tiles them;
//   decode attention (attn_split + attn_combine), head dim 128, GQA 32/8, context 4k-32k.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "codegen/compile_cache.hpp"
#include "codegen/emit_source.hpp"
#include "codegen/kernel_plan.hpp"
#include "codegen/nvrtc_driver.hpp"

namespace {

using namespace telos::codegen;

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "telos-kernel-bench: %s: %s\n", what, cudaGetErrorString(e));
    std::exit(1);
  }
}

// Median time in µs of `fn(i)` over `reps` runs after `warm` warm-ups.
double median_us(const std::function<void(int)>& fn, int reps = 30, int warm = 5) {
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  for (int i = 0; i < warm; ++i) fn(i);
  std::vector<float> t;
  for (int i = 0; i < reps; ++i) {
    cudaEventRecord(a);
    fn(i);
    cudaEventRecord(b);
    check(cudaEventSynchronize(b), "timing");
    float ms = 0;
    cudaEventElapsedTime(&ms, a, b);
    t.push_back(ms * 1000.f);
  }
  std::sort(t.begin(), t.end());
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return t[t.size() / 2];
}

struct Module {
  cudaLibrary_t lib = nullptr;
  CompiledModule m;
  Module(const std::vector<std::string>& names) {
    KernelPlan plan;
    plan.rope_inv_freq.assign(64, 1.f);  // head dim 128: the QKV epilogue reads 64 frequencies
    m = compile_module(emit_source(plan), "sm_90a", names, CompileCache::default_root());
    check(cudaLibraryLoadData(&lib, m.cubin.data(), nullptr, nullptr, 0, nullptr, nullptr, 0), "load");
  }
  void launch(const std::string& name, dim3 grid, dim3 block, std::vector<const void*> args) {
    cudaKernel_t k;
    check(cudaLibraryGetKernel(&k, lib, m.lowered.at(name).c_str()), "kernel");
    std::vector<void*> p;
    for (auto& a : args) p.push_back(&a);
    check(cudaLaunchKernel(reinterpret_cast<const void*>(k), grid, block, p.data(), 0, nullptr), "launch");
  }
};

// Fills device memory with small random bf16 values (never zeros), 64 MiB at a time.
void fill(void* p, std::size_t bytes) {
  static const std::vector<unsigned short> chunk = [] {
    std::vector<unsigned short> h(32u << 20);
    unsigned x = 12345;
    for (auto& v : h) {
      x = x * 1664525u + 1013904223u;
      v = static_cast<unsigned short>(0x3c00 | (x >> 22));  // bf16 in [2^-7, 2^-6), random mantissa
    }
    return h;
  }();
  for (std::size_t at = 0; at < bytes; at += chunk.size() * 2) {
    const std::size_t n = std::min(chunk.size() * 2, bytes - at);
    check(cudaMemcpy(static_cast<char*>(p) + at, chunk.data(), n, cudaMemcpyHostToDevice), "fill");
  }
}

std::string I(long long v) { return std::to_string(v); }

}  // namespace

int main() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
    std::printf("telos-kernel-bench: no CUDA GPU\n");
    return 0;
  }
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, 0);
  std::printf("%s, %d SMs\n", prop.name, prop.multiProcessorCount);

  // Copy bandwidth: 2 GiB device to device, bytes read + written.
  const std::size_t copy_bytes = 2ull << 30;
  void *src, *dst;
  check(cudaMalloc(&src, copy_bytes), "alloc");
  check(cudaMalloc(&dst, copy_bytes), "alloc");
  fill(src, copy_bytes);
  const double copy_us = median_us([&](int) { cudaMemcpyAsync(dst, src, copy_bytes, cudaMemcpyDeviceToDevice); });
  const double copy_gbs = 2.0 * copy_bytes / copy_us / 1e3;
  cudaFree(src);
  cudaFree(dst);
  std::printf("\n%-34s | %-26s | %9s | %8s | %6s\n", "kernel", "shape", "median us", "GB/s", "% copy");
  std::printf("%-34s | %-26s | %9.1f | %8.0f | %6s\n", "cudaMemcpy D2D (read+write)", "2 GiB", copy_us, copy_gbs, "100");

  // Decode GEMMs, Llama-3.1-8B: qkv [6144, 4096], gate_up [28672, 4096], down [4096, 14336],
  // LM head [128256, 4096], each tiled as codegen tiles it (kernel_plan.hpp); and the QKV kernel
  // the model runs (a cluster per head of 128 rows, RoPE and the KV append in its epilogue).
  struct Gemm { const char* name; int N, K; };
  const Gemm gemms[] = {{"qkv", 6144, 4096}, {"gate_up", 28672, 4096}, {"down", 4096, 14336}, {"lm_head", 128256, 4096}};
  constexpr int QKV_HQ = 32, QKV_HKV = 8, QKV_D = 128, QKV_PAGE = 16;
  constexpr long long QKV_PAGE_ELEMS = 2LL * QKV_HKV * QKV_PAGE * QKV_D;
  for (int M : {1, 8, 64}) {
    std::vector<std::string> names;
    std::vector<GemmLaunch> launches;
    for (const Gemm& g : gemms) {
      launches.push_back(gemm_launch(gemm_tiling(g.N, g.K), g.N, M, true));
      names.push_back("telos_kernels::linear_f32<" + I(g.K) + ", " + I(g.N) + ", " + launches.back().args() + ">");
    }
    const GemmLaunch qkv = gemm_launch(gemm_qkv_tiling(QKV_D, 4096, QKV_HQ + 2 * QKV_HKV), 6144, M, false);
    const std::string qkv_name = "telos_kernels::qkv_rope_append<4096, " + I(QKV_HQ) + ", " + I(QKV_HKV) + ", " +
                                 qkv.args() + ", " + I(qkv.tiling.cluster) + ", false, false, 1e-05f, " + I(QKV_PAGE) + ", 1, " +
                                 I(QKV_PAGE_ELEMS) + "ll, telos_rope::Freqs>";
    std::vector<std::string> all = names;
    all.push_back(qkv_name);
    Module mod(all);
    for (std::size_t gi = 0; gi <= 4; ++gi) {
      const Gemm& g = gemms[gi == 4 ? 0 : gi];
      const std::size_t wbytes = static_cast<std::size_t>(g.N) * g.K * 2;
      const int copies = std::max<int>(2, static_cast<int>((400ull << 20) / wbytes) + 1);
      std::vector<void*> w(copies);
      for (auto& p : w) { check(cudaMalloc(&p, wbytes), "alloc"); fill(p, wbytes); }
      void *a, *y;
      check(cudaMalloc(&a, static_cast<std::size_t>(M) * g.K * 2), "alloc");
      fill(a, static_cast<std::size_t>(M) * g.K * 2);
      check(cudaMalloc(&y, static_cast<std::size_t>(M) * g.N * 4), "alloc");
      double us = 0;
      if (gi < 4) {
        const GemmLaunch& l = launches[gi];
        us = median_us([&](int i) {
          mod.launch(names[gi], dim3(g.N / l.tiling.rows, M / l.m_tile), l.tiling.threads(), {w[i % copies], a, y});
        });
      } else {
        // Token m is sequence m at position m % PAGE: one KV page per sequence, page m.
        std::vector<int> hpos(M), hseq(M);
        for (int m = 0; m < M; ++m) {
          hpos[m] = m % QKV_PAGE;
          hseq[m] = m;
        }
        void *pos, *seq, *kv;
        check(cudaMalloc(&pos, M * 4), "alloc");
        check(cudaMalloc(&seq, M * 4), "alloc");
        check(cudaMalloc(&kv, static_cast<std::size_t>(M) * QKV_PAGE_ELEMS * 2), "alloc");
        cudaMemcpy(pos, hpos.data(), M * 4, cudaMemcpyHostToDevice);
        cudaMemcpy(seq, hseq.data(), M * 4, cudaMemcpyHostToDevice);
        const void* none = nullptr;
        us = median_us([&](int i) {
          mod.launch(qkv_name, dim3((QKV_HQ + 2 * QKV_HKV) * qkv.tiling.cluster, M / qkv.m_tile), qkv.tiling.threads(),
                     {w[i % copies], a, none, none, none, pos, seq, seq, kv, y});
        });
        for (void* p : {pos, seq, kv}) cudaFree(p);
      }
      const double bytes = wbytes + static_cast<double>(M) * g.K * 2 + static_cast<double>(M) * g.N * 4;
      char shape[64];
      std::snprintf(shape, sizeof shape, "M=%d N=%d K=%d", M, g.N, g.K);
      const std::string label = gi < 4 ? std::string("linear_f32 ") + g.name : "qkv_rope_append llama3-8b";
      std::printf("%-34s | %-26s | %9.1f | %8.0f | %6.1f\n", label.c_str(), shape, us, bytes / us / 1e3,
                  100.0 * bytes / us / 1e3 / copy_gbs);
      for (auto& p : w) cudaFree(p);
      cudaFree(a);
      cudaFree(y);
    }
  }

  // Decode attention: HQ 32, HKV 8, D 128, page 16, batch B, every sequence at context C, the
  // plan's split and partial slots.
  constexpr int HQ = 32, HKV = 8, D = 128, PAGE = 16, L = 1;
  for (int C : {4096, 32768}) {
    const int MAXP = C / PAGE;
    const int split = kAttnSplit, nsplit = attn_partial_slots(C);
    const long long page_elems = 2LL * L * HKV * PAGE * D;
    const std::string sk = "telos_kernels::attn_split<" + I(HQ) + ", " + I(HKV) + ", " + I(D) + ", " + I(PAGE) + ", " +
                           I(MAXP) + ", " + I(page_elems) + "ll, " + I(split) + ", " + I(nsplit) + ", " + float_literal(1.4426950408889634 / std::sqrt(128.0)) + ">";
    const std::string ck = "telos_kernels::attn_combine<" + I(HQ) + ", " + I(D) + ", " + I(nsplit) + ", " + I(split) + ">";
    Module mod({sk, ck});
    for (int B : {1, 16, 64}) {
      const std::size_t pages = static_cast<std::size_t>(B) * MAXP;
      void *kv, *q, *po, *pml, *out, *pos, *seq, *pt;
      check(cudaMalloc(&kv, pages * page_elems * 2), "alloc");
      fill(kv, pages * page_elems * 2);
      check(cudaMalloc(&q, static_cast<std::size_t>(B) * HQ * D * 4), "alloc");
      cudaMemset(q, 0x3c, static_cast<std::size_t>(B) * HQ * D * 4);
      check(cudaMalloc(&po, static_cast<std::size_t>(B) * HQ * nsplit * D * 4), "alloc");
      check(cudaMalloc(&pml, static_cast<std::size_t>(B) * HQ * nsplit * 2 * 4), "alloc");
      check(cudaMalloc(&out, static_cast<std::size_t>(B) * HQ * D * 2), "alloc");
      std::vector<int> hpos(B, C - 1), hseq(B), hpt(pages);
      for (int b = 0; b < B; ++b) hseq[b] = b;
      for (std::size_t i = 0; i < pages; ++i) hpt[i] = static_cast<int>((i * 7919) % pages);
      check(cudaMalloc(&pos, B * 4), "alloc");
      check(cudaMalloc(&seq, B * 4), "alloc");
      check(cudaMalloc(&pt, pages * 4), "alloc");
      cudaMemcpy(pos, hpos.data(), B * 4, cudaMemcpyHostToDevice);
      cudaMemcpy(seq, hseq.data(), B * 4, cudaMemcpyHostToDevice);
      cudaMemcpy(pt, hpt.data(), pages * 4, cudaMemcpyHostToDevice);
      const double us = median_us([&](int) {
        mod.launch(sk, dim3(B, HKV, nsplit), 128, {q, pos, seq, pt, kv, po, pml});
        mod.launch(ck, dim3(B, HQ), D, {po, pml, pos, out});
      });
      const double bytes = static_cast<double>(B) * C * HKV * D * 2 * 2;
      char shape[64];
      std::snprintf(shape, sizeof shape, "B=%d ctx=%d", B, C);
      std::printf("%-34s | %-26s | %9.1f | %8.0f | %6.1f\n", "attn_split+combine D128 GQA4", shape, us, bytes / us / 1e3,
                  100.0 * bytes / us / 1e3 / copy_gbs);
      for (void* p : {kv, q, po, pml, out, pos, seq, pt}) cudaFree(p);
    }
  }
  check(cudaGetLastError(), "bench");
  return 0;
}
