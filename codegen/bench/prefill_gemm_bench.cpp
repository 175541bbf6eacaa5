// telos-prefill-bench: the prefill GEMM (codegen/kernels/gemm_prefill.cuh) on the Llama-3.1-8B
// prefill shapes at M = 2048, 4096, 8192, 16384, each with the epilogue the plan gives it (qkv:
// bf16 store; o and down: residual add into f32 x, and the bf16 store for a like-for-like
// comparison; gate/up: SwiGLU), and with --compile-only each again reading its weight from the
// one-token layer's slot image (`timg:`). `--compile-only` writes the cubin that
// codegen/bench/prefill_gemm_torch.py loads to time our kernels beside torch.matmul in one
// process (the issue-4 figure); the timing mode times ours alone under load (bench_support.hpp,
// steady_event_ms: the median of 20 back-to-back launches after ~100 ms of them), one line per
// case, "telos SHAPE M EPILOGUE N K MS": a process of our kernels only, for profilers (ncu).
// `--compile-only-w8a8` writes the cubin of prefill_gemm_torch.py's --w8a8 mode: at M = 4096,
// 8192, 16384, each case's W8A8 GEMM (codegen/kernels/gemm_w8a8.cuh), its activations'
// quantization and the bf16 GEMM of the same shape, to time beside torch._scaled_mm.
//
//   telos-prefill-bench --compile-only CUBIN       NVRTC only (no GPU): compiles every instance
//                                                  and writes CUBIN and CUBIN.names (instance →
//                                                  entry)
//   telos-prefill-bench --compile-only-w8a8 CUBIN  the same for the W8A8 comparison
//   telos-prefill-bench CUBIN                      loads the first and times
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "codegen/bench/bench_support.hpp"
#include "codegen/compile_cache.hpp"
#include "codegen/emit_source.hpp"
#include "codegen/kernel_plan.hpp"
#include "codegen/nvrtc_driver.hpp"
#include "hexel/tensor_map_encode.h"

namespace {

using namespace telos::codegen;

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "telos-prefill-bench: %s: %s\n", what, cudaGetErrorString(e));
    std::exit(1);
  }
}

struct Case {
  std::string shape, epilogue;
  int M, N, K;  // N: output columns of the GEMM (gate/up: 2I, the SwiGLU writes I)
  // The weight from its slot image (`timg:`): a tile-half's rows and the box rows; 0:
  // the weight's own map.
  int image_rows = 0, image_box = 0;
  std::string instance() const {
    const std::string tmpl = epilogue == "residual" ? "gemm_prefill_residual"
                             : epilogue == "swiglu" ? "gemm_prefill_swiglu"
                                                    : "gemm_prefill_bf16";
    const int n = epilogue == "swiglu" ? N / 2 : N;
    return "telos_kernels::" + tmpl + "<" + std::to_string(M) + ", " + std::to_string(n) + ", " +
           std::to_string(K) +
           (image_rows > 0 ? ", " + std::to_string(image_rows) + ", " + std::to_string(image_box)
                           : std::string()) +
           ">";
  }
};

std::vector<Case> cases() {
  std::vector<Case> out;
  for (int m : {2048, 4096, 8192, 16384}) {
    out.push_back({"qkv", "bf16", m, 6144, 4096});
    out.push_back({"o", "bf16", m, 4096, 4096});
    out.push_back({"o", "residual", m, 4096, 4096});
    out.push_back({"gate_up", "swiglu", m, 28672, 4096});
    out.push_back({"down", "bf16", m, 4096, 14336});
    out.push_back({"down", "residual", m, 4096, 14336});
  }
  return out;
}

// The W8A8 comparison's instances, in order (prefill_gemm_torch.py --w8a8 pairs them by shape):
// per case at M >= 4096, the bf16 GEMM, the W8A8 GEMM of the same epilogue and the quantization
// of its activations (once a shape of A).
std::vector<std::string> w8a8_instances() {
  std::vector<std::string> names;
  std::set<std::string> quantize;
  for (const Case& c : cases()) {
    if (c.M < 4096) continue;
    const std::string bf16 = c.instance(), prefix = "telos_kernels::gemm_prefill_";
    names.push_back(bf16);
    names.push_back(prefix + "w8a8_" + bf16.substr(prefix.size()));
    const std::string q = "telos_kernels::quantize_rows_e4m3<" + std::to_string(c.M) + ", " +
                          std::to_string(c.K) + ">";
    if (quantize.insert(q).second) names.push_back(q);
  }
  return names;
}

// The same cases reading the weight from the slot image the plan gives the 8B's one-token layer
// (decode_layer_tiling's tiles; prefill_image_box_rows as kernel_plan.cpp), for --compile-only:
// their instances end in ", W_BH, W_BOX" (prefill_gemm_torch.py packs the image and encodes its
// map).
std::vector<Case> image_cases() {
  const PersistentLayerTiling lt = decode_layer_tiling(4096, 6144, 4096, 14336, 128, false);
  std::vector<Case> out;
  for (Case c : cases()) {
    const WeightImage img = layer_weight_image(lt, c.shape);
    c.image_rows = img.half_rows();
    c.image_box = prefill_image_box_rows(img, c.epilogue == "swiglu" ? 128 : 256);
    if (c.image_box > 0) out.push_back(c);
  }
  return out;
}

// The plan's launch shape (kernel_plan.cpp) through the weight's own map.
constexpr int kThreads = 384;
const int kSmem = prefill_gemm_smem(0);

// A tensor map as the executor encodes one for `tmap:` (docs/artifact.md): bf16 in 64-column
// boxes, or f32 (the residual stream x) in 32-column boxes.
hexel::TensorMap* device_map(const void* base, int rows, int cols, int box_rows,
                             hexel::TmaDtype dtype = hexel::TmaDtype::BF16) {
  const std::uint32_t elem = hexel::tma_dtype_bytes(dtype);
  const hexel::TensorMap map =
      hexel::encode_2d(dtype, base, static_cast<std::uint64_t>(rows),
                       static_cast<std::uint64_t>(cols), static_cast<std::uint64_t>(cols) * elem,
                       static_cast<std::uint32_t>(box_rows), 128 / elem, hexel::Swizzle::B128);
  hexel::TensorMap* d = nullptr;
  check(cudaMalloc(&d, sizeof map), "tensor map");
  check(cudaMemcpy(d, &map, sizeof map, cudaMemcpyHostToDevice), "tensor map upload");
  return d;
}

}  // namespace

int main(int argc, char** argv) {
  const std::vector<Case> all = cases();
  if (argc == 3 && std::string(argv[1]) == "--compile-only") {
    std::vector<std::string> names;
    for (const Case& c : all) names.push_back(c.instance());
    for (const Case& c : image_cases()) names.push_back(c.instance());
    KernelPlan plan;
    plan.rope_inv_freq = {1.f};
    const CompiledModule m =
        compile_module(emit_source(plan), "sm_90a", names, CompileCache::default_root());
    save_bench_cubin(argv[2], m, names);
    return 0;
  }
  if (argc == 3 && std::string(argv[1]) == "--compile-only-w8a8") {
    const std::vector<std::string> names = w8a8_instances();
    KernelPlan plan;
    plan.rope_inv_freq = {1.f};
    const CompiledModule m = compile_module(emit_source(plan) + "#include \"gemm_w8a8.cuh\"\n",
                                            "sm_90a", names, CompileCache::default_root());
    save_bench_cubin(argv[2], m, names);
    return 0;
  }
  if (argc != 2) {
    std::fprintf(stderr,
                 "usage: telos-prefill-bench [--compile-only | --compile-only-w8a8] CUBIN\n");
    return 2;
  }
  const BenchCubin loaded = load_bench_cubin(argv[1]);
  check(loaded.status, "load");
  cudaLibrary_t lib = loaded.lib;
  const std::map<std::string, std::string>& lowered = loaded.lowered;

  // One set of buffers at the largest sizes, A and W filled with bf16 of N(0, 1) samples, as
  // torch.randn fills the peer's operands (the operands' bits move the tensor cores' power, and
  // with it the clocks a sustained run holds).
  std::size_t a_elems = 0, w_elems = 0, y_elems = 0;
  for (const Case& c : all) {
    a_elems = std::max(a_elems, static_cast<std::size_t>(c.M) * c.K);
    w_elems = std::max(w_elems, static_cast<std::size_t>(c.N) * c.K);
    y_elems = std::max(y_elems, static_cast<std::size_t>(c.M) * c.N);
  }
  std::uint16_t *A = nullptr, *W = nullptr, *Y = nullptr;
  float* X = nullptr;
  check(cudaMalloc(&A, a_elems * 2), "A");
  check(cudaMalloc(&W, w_elems * 2), "W");
  check(cudaMalloc(&Y, y_elems * 2), "Y");
  check(cudaMalloc(&X, y_elems * 4), "X");
  {
    std::mt19937 rng(12345);
    std::normal_distribution<float> normal;
    auto fill = [&](std::uint16_t* dst, std::size_t n, const char* what) {
      std::vector<std::uint16_t> h(n);
      for (auto& v : h) {
        std::uint32_t u;
        const float f = normal(rng);
        std::memcpy(&u, &f, 4);
        v = static_cast<std::uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);  // round to bf16
      }
      check(cudaMemcpy(dst, h.data(), n * 2, cudaMemcpyHostToDevice), what);
    };
    fill(A, a_elems, "A upload");
    fill(W, w_elems, "W upload");
    check(cudaMemset(X, 0, y_elems * 4), "X init");
  }

  for (const Case& c : all) {
    const std::string inst = c.instance();
    cudaKernel_t k = nullptr;
    check(cudaLibraryGetKernel(&k, lib, lowered.at(inst).c_str()), inst.c_str());
    const void* fn = reinterpret_cast<const void*>(k);
    check(cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem), "smem");
    const bool glu = c.epilogue == "swiglu";
    const int out_cols = glu ? c.N / 2 : c.N, tile_cols = glu ? 128 : 256;
    hexel::TensorMap* a_map = device_map(A, c.M, c.K, 128);
    hexel::TensorMap* w_map = device_map(W, c.N, c.K, glu ? 128 : 256);
    const bool residual = c.epilogue == "residual";
    hexel::TensorMap* y_map = residual ? device_map(X, c.M, out_cols, 64, hexel::TmaDtype::F32)
                                       : device_map(Y, c.M, out_cols, 64);
    std::vector<const void*> args = {a_map, w_map, y_map};
    std::vector<void*> params;
    for (auto& a : args) params.push_back(&a);
    const int tiles = ((c.M + 127) / 128) * ((out_cols + tile_cols - 1) / tile_cols);
    const dim3 grid(std::min(tiles, 132));
    auto launch = [&] {
      check(cudaLaunchKernel(fn, grid, kThreads, params.data(), kSmem, nullptr), inst.c_str());
    };
    std::printf("telos %s %d %s %d %d %.4f\n", c.shape.c_str(), c.M, c.epilogue.c_str(), c.N, c.K,
                steady_event_ms(launch, check));
    std::fflush(stdout);
    cudaFree(a_map);
    cudaFree(w_map);
    cudaFree(y_map);
  }
  cudaLibraryUnload(lib);
  return 0;
}
