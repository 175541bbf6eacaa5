// telos-kernel-bench: times Telos kernels on the GPU against the copy bandwidth measured in the
// same run (CUDA events, median of repetitions, weights rotated over several copies so L2 does
// not serve them). Prints a table: kernel, shape, median µs, GB/s, % of copy bandwidth.
//   decode GEMMs at M = 1, 8, 64, 256 on Llama-3.1-8B and Llama-3.2-1B shapes, tiled as codegen
//   tiles them: the small-M wgmma GEMM (gemm_small_*: qkv, o, gate_up with SwiGLU, down with the
//   residual add, the LM head's f32 logits and greedy candidates);
//   decode attention (attn_split + attn_combine), head dim 128, GQA 32/8, context 4k-32k (the
//   plan's kernel (PAGE_AHEAD) three blocks an SM, with LOAD_AHEAD too, four blocks an SM, through
//   2-4 BULK ring slots a warp, and at other splits), and batches 16-256 at contexts
//   576 and 4096 in a model of 32 partial slots, attn_split's grid along the slots at 32 and at
//   the plan's attn_grid_slots, the plan's blocks an SM (four from kAttnSplitFourBlocksMinRows
//   rows), the other choice and the BULK variants;
//   prefill attention: one sequence's 512-token chunk at context 8192, one token per block
//   (TPT 1) against the plan's tiles of 4 tokens (TPT 4, three and four blocks an SM), GB/s
//   counting the K/V bytes each block reads (per tile: positions up to the tile's last).
// `telos-kernel-bench --sweep` also times the small GEMM at other tilings than the plan's;
// `telos-kernel-bench --decode-layer` times only the copy bandwidth and the one-token decode
// layers; `telos-kernel-bench --sample` only the copy bandwidth and the sampler;
// `telos-kernel-bench --attention` only the copy bandwidth and decode attention;
// `telos-kernel-bench --read-floor` only the copy bandwidth and the read floor (a kernel that only
// reads, at the decode kernels' sizes);
// `telos-kernel-bench --exchange` only the copy bandwidth and what an exchange between CTAs costs
// (a grid-wide count, a cluster's gather and broadcast) idle and while the weights stream;
// `telos-kernel-bench --gemm` only the copy bandwidth and the decode GEMMs at the full-batch bucket
// (M = 256), swept over weight tiles of 32-256 rows and 2, 4, 6 and 8 stages, with clusters of two
// and, where the plan has one consumer warpgroup, on two (on two, the plan's own: the stages its
// one-warpgroup tiling had, which the sweep's 6 and 8 test);
// `telos-kernel-bench --small-rows` only the copy bandwidth and the decode GEMMs at 1, 8, 16, 32,
// 48 and 64 rows (one M tile), at 8 rows also with the stages the plan gives 16;
// `telos-kernel-bench --gemm-m [--matmul-tflops R]` only the copy bandwidth and the decode GEMMs
// at 64, 128, 192 and 256 rows on both GEMMs a bucket of that many rows may run (the small-M GEMM
// as the plan tiles a decode bucket, the prefill GEMM as it runs a prefill bucket), each with its
// TFLOP/s, the ratio, and the FLOPs' floor at R TFLOP/s (torch.matmul's rate on the same card;
// decode_gemm_torch.py --rate measures it). Any other argument after a mode exits 2, saying why.
// The decode GEMMs' "plan" rows read the weight as the plan does: from the one-token layer's slot
// image through its `timg:` map where the plan has one (the 8B's layer weights), with
// the weight's own map beside it as "own map".
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "codegen/compile_cache.hpp"
#include "codegen/emit_source.hpp"
#include "codegen/kernel_plan.hpp"
#include "codegen/nvrtc_driver.hpp"
#include "hexel/tensor_map_encode.h"
#include "support/slot_image.hpp"
#include "support/slot_image_map.hpp"

namespace {

using namespace telos::codegen;

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "telos-kernel-bench: %s: %s\n", what, cudaGetErrorString(e));
    std::exit(1);
  }
}

// Median time in µs of `fn(i)` over `reps` runs after `warm` warm-ups. With `batch` > 1, each
// run times `batch` consecutive calls and counts their mean: kernels as a graph runs them, back
// to back, without the launch latency of an idle stream in every figure.
double median_us(const std::function<void(int)>& fn, int reps = 30, int warm = 5, int batch = 1) {
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  for (int i = 0; i < warm; ++i) fn(i);
  std::vector<float> t;
  for (int i = 0; i < reps; ++i) {
    cudaEventRecord(a);
    for (int j = 0; j < batch; ++j) fn(i * batch + j);
    cudaEventRecord(b);
    check(cudaEventSynchronize(b), "timing");
    float ms = 0;
    cudaEventElapsedTime(&ms, a, b);
    t.push_back(ms * 1000.f / batch);
  }
  std::sort(t.begin(), t.end());
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return t[t.size() / 2];
}

struct Module {
  std::vector<cudaLibrary_t> libs;
  std::map<std::string, std::pair<cudaLibrary_t, std::string>> entries;  // name -> library, entry
  // `defines`: source lines put before the generated source (TELOS_PHASE_TRACE). `parts`: modules
  // compiled at once (codegen::compile_modules; 0: one a hardware thread); a caller that reads a
  // module's __device__ variable takes 1, so that there is one of it (libs.front()'s).
  explicit Module(const std::vector<std::string>& names, const std::string& defines = "",
                  int parts = 0) {
    KernelPlan plan;
    plan.rope_inv_freq.assign(64, 1.f);  // head dim 128: the QKV epilogue reads 64 frequencies
    const int n =
        parts > 0 ? parts : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    for (const CompiledModule& m : compile_modules(defines + emit_source(plan), "sm_90a", names,
                                                   CompileCache::default_root(), n)) {
      cudaLibrary_t lib = nullptr;
      check(cudaLibraryLoadData(&lib, m.cubin.data(), nullptr, nullptr, 0, nullptr, nullptr, 0),
            "load");
      libs.push_back(lib);
      for (const auto& [name, entry] : m.lowered) entries[name] = {lib, entry};
    }
  }
  // The kernel `name`, allowed `smem` bytes of dynamic shared memory.
  const void* kernel(const std::string& name, int smem) {
    cudaKernel_t k;
    const auto& [lib, entry] = entries.at(name);
    check(cudaLibraryGetKernel(&k, lib, entry.c_str()), "kernel");
    const void* f = reinterpret_cast<const void*>(k);
    if (smem > 48 * 1024)
      check(cudaFuncSetAttribute(f, cudaFuncAttributeMaxDynamicSharedMemorySize, smem), "smem");
    return f;
  }
  // CTAs of `name` the driver places on one SM at once, and its registers a thread (-1: unknown).
  std::pair<int, int> occupancy(const std::string& name, int block, int smem) {
    const void* f = kernel(name, smem);
    // Reported, not required: -1 where the runtime does not answer for a library's kernel.
    int blocks = -1;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, f, block, smem) != cudaSuccess)
      blocks = -1;
    cudaFuncAttributes a{};
    if (cudaFuncGetAttributes(&a, f) != cudaSuccess) a.numRegs = -1;
    cudaGetLastError();
    return {blocks, a.numRegs};
  }
  // `pdl`: with programmatic stream serialization, as the engine launches every kernel of a step
  // but the first (its pre-wait part overlaps the previous kernel).
  void launch(const std::string& name, dim3 grid, dim3 block, std::vector<const void*> args,
              int smem = 0, bool pdl = false) {
    const void* k = kernel(name, smem);
    std::vector<void*> p;
    for (auto& a : args) p.push_back(&a);
    cudaLaunchAttribute attr{};
    attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr.val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t config{};
    config.gridDim = grid;
    config.blockDim = block;
    config.dynamicSmemBytes = static_cast<std::size_t>(smem);
    config.attrs = pdl ? &attr : nullptr;
    config.numAttrs = pdl ? 1 : 0;
    check(cudaLaunchKernelExC(&config, k, p.data()), "launch");
  }
};

// 64 MiB of host bytes, each 16- or 8-bit word one step of a linear congruential generator: `word`
// maps the generator's state to the word.
template <class Word, class F>
std::vector<Word> random_words(unsigned seed, F word) {
  std::vector<Word> h((64u << 20) / sizeof(Word));
  unsigned x = seed;
  for (auto& v : h) {
    x = x * 1664525u + 1013904223u;
    v = static_cast<Word>(word(x));
  }
  return h;
}

// Device memory from `chunk`, repeated.
template <class Word>
void fill_from(void* p, std::size_t bytes, const std::vector<Word>& chunk) {
  const std::size_t chunk_bytes = chunk.size() * sizeof(Word);
  for (std::size_t at = 0; at < bytes; at += chunk_bytes) {
    const std::size_t n = std::min(chunk_bytes, bytes - at);
    check(cudaMemcpy(static_cast<char*>(p) + at, chunk.data(), n, cudaMemcpyHostToDevice), "fill");
  }
}

// Fills device memory with small random bf16 values (never zeros): [2^-7, 2^-6), random mantissa.
void fill(void* p, std::size_t bytes) {
  static const auto chunk =
      random_words<unsigned short>(12345, [](unsigned x) { return 0x3c00u | (x >> 22); });
  fill_from(p, bytes, chunk);
}

// Finite e4m3 bytes (random sign and mantissa, exponent field 4..7: magnitudes 1/8 to 15/8): the
// W8A8 layer's products and activations stay finite, so its quantization divides as on a real
// model's values (fill's bytes hold NaNs, whose divisions take __fdiv_rn's slow path).
void fill_e4m3(void* p, std::size_t bytes) {
  static const auto chunk = random_words<unsigned char>(
      54321, [](unsigned x) { return (x >> 24 & 0x80u) | 0x20u | (x >> 16 & 0x1fu); });
  fill_from(p, bytes, chunk);
}

std::string I(long long v) {
  return std::to_string(v);
}

// A [rows, cols] tensor map (128B swizzle, 128-byte boxes: 64 bf16 or 32 f32 columns) in device
// memory, as the executor builds one for a `tmap:` argument.
// The map of an e4m3 weight as the executor encodes it: one-byte elements, box_rows x 64 bytes, no
// swizzle (gemm_e4m3.cuh).
void* device_map_e4m3(const void* base, int rows, int cols, int box_rows) {
  const hexel::TensorMap m = hexel::encode_2d(
      hexel::TmaDtype::U8, base, static_cast<std::uint64_t>(rows), static_cast<std::uint64_t>(cols),
      static_cast<std::uint64_t>(cols), static_cast<std::uint32_t>(box_rows), 64,
      hexel::Swizzle::None);
  void* p;
  check(cudaMalloc(&p, sizeof m), "alloc");
  check(cudaMemcpy(p, &m, sizeof m, cudaMemcpyHostToDevice), "map");
  return p;
}

void* device_map(const void* base, int rows, int cols, int box_rows,
                 hexel::TmaDtype dtype = hexel::TmaDtype::BF16) {
  const std::uint32_t elem = hexel::tma_dtype_bytes(dtype);
  const hexel::TensorMap m =
      hexel::encode_2d(dtype, base, static_cast<std::uint64_t>(rows),
                       static_cast<std::uint64_t>(cols), static_cast<std::uint64_t>(cols) * elem,
                       static_cast<std::uint32_t>(box_rows), 128 / elem, hexel::Swizzle::B128);
  void* p;
  check(cudaMalloc(&p, sizeof m), "alloc");
  check(cudaMemcpy(p, &m, sizeof m, cudaMemcpyHostToDevice), "map");
  return p;
}

// The 5D tensor map over a weight's slot image (`timg:`) in device memory, as the
// executor builds one: the bench's weight copies hold random bytes, so each serves as an image
// as it is (the timing reads the same bytes in another order; the values do not matter).
void* device_image_map(const void* base, int rows, int cols, int bn, int halves, int box) {
  const hexel::TensorMap m = telos::encode_slot_image_map(base, rows, cols, bn, halves, box);
  void* p;
  check(cudaMalloc(&p, sizeof m), "alloc");
  check(cudaMemcpy(p, &m, sizeof m, cudaMemcpyHostToDevice), "map");
  return p;
}

// Launches a timed run chains (each on another copy of the weights, all but the first with PDL).
constexpr int kBatch = 8;

// Copy bandwidth: 2 GiB device to device, bytes read + written; prints the table's header and
// its first row, and returns the GB/s every other row is a % of.
double bench_copy() {
  const std::size_t copy_bytes = 2ull << 30;
  void *src, *dst;
  check(cudaMalloc(&src, copy_bytes), "alloc");
  check(cudaMalloc(&dst, copy_bytes), "alloc");
  fill(src, copy_bytes);
  const double copy_us =
      median_us([&](int) { cudaMemcpyAsync(dst, src, copy_bytes, cudaMemcpyDeviceToDevice); });
  const double copy_gbs = 2.0 * copy_bytes / copy_us / 1e3;
  cudaFree(src);
  cudaFree(dst);
  std::printf("\n%-34s | %-26s | %9s | %8s | %6s\n", "kernel", "shape", "median us", "GB/s",
              "% copy");
  std::printf("%-34s | %-26s | %9.1f | %8.0f | %6s\n", "cudaMemcpy D2D (read+write)", "2 GiB",
              copy_us, copy_gbs, "100");
  return copy_gbs;
}

// The read floor: how fast a kernel that only reads B bytes goes at that size, chained as the
// decode kernels are (8 launches, each on another copy of the bytes, all but the first with PDL),
// by where its loads stand against griddepcontrol.wait. A decode kernel reads as many bytes and
// does more, so these rows bound its % of copy at B:
//   "wait first": the wait before any load (a kernel whose loads all depend on its predecessor);
//   "all before wait": every load before it (the bound for a kernel with nothing to wait for);
//   "first N KB/SM before wait": each thread's first 8 loads (16 bytes each) issued before the
//   wait and used after it, the rest after it, as a decode GEMM prefetches its weights into its
//   ring (o's: 16 stages of 4 KB = 64 KB, one CTA an SM). Grids of 4 CTAs of 256 threads an SM
//   (128 KB an SM in flight), one of 512 (64 KB) or one of 256 (32 KB); "alone" asks for 120 KB
//   of (unused) shared memory, so that no CTA of the next launch fits beside one of this one, as
//   with a full-ring GEMM.
// Beside them cudaMemcpyAsync of the same bytes, 8 back to back (read + written counted). Sizes:
// the 8B's and the 1B's decode GEMM weights (o, qkv, down, gate/up) and one layer's K/V at batch
// 1 (4k, 32k; head dim 128, 8 KV heads).
void bench_read_floor(const cudaDeviceProp& prop, double copy_gbs) {
  const std::string source = R"(
#include "hexel/ld_st.cuh"
#include "hexel/sync.cuh"
template <int MODE>  // 0: wait first; 1: every load before the wait; 2: the first 8 a thread
__global__ void __launch_bounds__(512) telos_bench_read(const uint4* __restrict__ src,
                                                         unsigned long long n16, unsigned* out) {
  hexel::launch_dependents();
  if (MODE == 0) hexel::grid_dependency_wait();
  const unsigned long long per = (n16 + gridDim.x - 1) / gridDim.x;
  const unsigned long long begin = blockIdx.x * per;
  const unsigned long long end = begin + per < n16 ? begin + per : n16;
  unsigned acc = 0;
  bool first = true;
  for (unsigned long long i = begin + threadIdx.x; i < end; i += 8 * blockDim.x) {
    uint4 v[8];
#pragma unroll
    for (int u = 0; u < 8; ++u) {
      const unsigned long long j = i + u * blockDim.x;
      v[u] = make_uint4(0, 0, 0, 0);
      if (j < end) v[u] = hexel::ld_nc_no_allocate_v4(src + j);
    }
    if (MODE == 2 && first) hexel::grid_dependency_wait();
    first = false;
#pragma unroll
    for (int u = 0; u < 8; ++u) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
  }
  if (MODE == 1 || (MODE == 2 && first)) hexel::grid_dependency_wait();
  if (acc == 0x9e3779b9u) out[blockIdx.x] = acc;  // keeps the loads; never true for fill()'s bytes
}
)";
  const std::string k0 = "telos_bench_read<0>", k1 = "telos_bench_read<1>",
                    k2 = "telos_bench_read<2>";
  Module mod({k0, k1, k2}, source, 1);
  constexpr int kChain = 8;
  const int sms = prop.multiProcessorCount;
  struct Form {
    const char* label;
    std::string kernel;
    int grid, block, smem;
  };
  const Form forms[] = {{"read floor, wait first", k0, sms * 4, 256, 0},
                        {"read floor, wait first, 1x512", k0, sms, 512, 0},
                        {"read floor, all before wait", k1, sms * 4, 256, 0},
                        {"read floor, 128 KB/SM before wait", k2, sms * 4, 256, 0},
                        {"read floor, 64 KB/SM before wait", k2, sms, 512, 0},
                        {"read floor, 64 KB/SM before, alone", k2, sms, 512, 120 * 1024},
                        {"read floor, 32 KB/SM before wait", k2, sms, 256, 0}};
  unsigned* out;
  check(cudaMalloc(&out, sms * 4 * sizeof(unsigned)), "alloc");
  struct Size {
    const char* what;
    std::size_t bytes;
  };
  const Size sizes[] = {{"1B o", 2048ull * 2048 * 2},
                        {"1B qkv", 3072ull * 2048 * 2},
                        {"K/V 4k batch 1", 4096ull * 8 * 128 * 4},
                        {"8B o", 4096ull * 4096 * 2},
                        {"8B qkv", 6144ull * 4096 * 2},
                        {"8B down", 4096ull * 14336 * 2},
                        {"K/V 32k batch 1", 32768ull * 8 * 128 * 4},
                        {"8B gate/up", 28672ull * 4096 * 2}};
  for (const Size& sz : sizes) {
    const int copies = std::max<int>(2, static_cast<int>((400ull << 20) / sz.bytes) + 1);
    std::vector<void*> bufs(copies + 1);
    for (auto& p : bufs) {
      check(cudaMalloc(&p, sz.bytes), "alloc");
      fill(p, sz.bytes);
    }
    const unsigned long long n16 = sz.bytes / 16;
    char shape[64];
    std::snprintf(shape, sizeof shape, "%s, %.1f MB", sz.what, sz.bytes / 1e6);
    for (const Form& f : forms) {
      const double us = median_us(
          [&](int i) {
            // The count travels as the 8 bytes of a pointer argument (Module::launch's form).
            mod.launch(f.kernel, dim3(f.grid), dim3(f.block),
                       {bufs[i % copies], reinterpret_cast<const void*>(n16), out}, f.smem,
                       i % kChain != 0);
          },
          30, 5, kChain);
      std::printf("%-34s | %-26s | %9.1f | %8.0f | %6.1f\n", f.label, shape, us,
                  sz.bytes / us / 1e3, 100.0 * sz.bytes / us / 1e3 / copy_gbs);
    }
    const double us = median_us(
        [&](int i) {
          cudaMemcpyAsync(bufs[copies], bufs[i % copies], sz.bytes, cudaMemcpyDeviceToDevice);
        },
        30, 5, kChain);
    std::printf("%-34s | %-26s | %9.1f | %8.0f | %6.1f\n", "cudaMemcpy D2D, same bytes", shape, us,
                2.0 * sz.bytes / us / 1e3, 100.0 * 2.0 * sz.bytes / us / 1e3 / copy_gbs);
    for (void* p : bufs) cudaFree(p);
  }
  for (const Form& f : forms) {
    const auto [blocks, regs] = mod.occupancy(f.kernel, f.block, f.smem);
    std::printf("%-34s: %d CTAs an SM, %d registers a thread\n", f.label, blocks, regs);
  }
  // The 8B's o, qkv and down at M = 1 beside the floor, chained the same way: the plan's tiles
  // (two K blocks a stage: o and down 12 stages of 32 weight rows, qkv 128 CTAs of 8 stages of
  // 48 rows, one an SM) against one K block a stage (16 stages, o two CTAs an SM) and, for o, a
  // deeper ring (one CTA an SM) and 16-row tiles (256 CTAs: twice the rings in flight); for qkv
  // 32-row tiles (192 CTAs on 132 SMs) and 48-row tiles of 12 stages (two an SM); for o and down
  // 64-row tiles (64 CTAs of 8 KB stages: if a CTA's stage trips, not the bytes, set its rate,
  // half the CTAs on twice the bytes a stage keep it); two K blocks a stage at the other depth
  // ("2kb"). Four K blocks a stage, the 1B's o and down on 16-row tiles and the producer's wait
  // before its first weight loads were slower (docs/performance.md). Loads only: the same bits
  // at any BN and depth.
  struct GemmForm {
    const char* epi;
    int n, k, bn, stages, kps;  // bn, stages, kps 0: the plan's
  };
  const GemmForm gemm_forms[] = {
      {"residual", 4096, 4096, 0, 0, 0},    {"residual", 4096, 4096, 32, 16, 1},
      {"residual", 4096, 4096, 32, 24, 1},  {"residual", 4096, 4096, 16, 16, 1},
      {"residual", 4096, 4096, 64, 16, 1},  {"residual", 4096, 4096, 32, 8, 2},
      {"bf16", 6144, 4096, 0, 0, 0},        {"bf16", 6144, 4096, 48, 16, 1},
      {"bf16", 6144, 4096, 32, 16, 1},      {"bf16", 6144, 4096, 48, 12, 1},
      {"bf16", 6144, 4096, 48, 12, 2},      {"residual", 4096, 14336, 0, 0, 0},
      {"residual", 4096, 14336, 32, 16, 1}, {"residual", 4096, 14336, 64, 16, 1},
      {"residual", 4096, 14336, 32, 8, 2}};
  std::vector<std::pair<SmallGemmTiling, std::string>> gemm_tilings;
  for (const GemmForm& g : gemm_forms) {
    const SmallGemmTiling plan = small_gemm_tiling(g.n, g.k, 1, false);
    SmallGemmTiling t = g.bn > 0 ? plan.with_bn(g.bn, g.n, false) : plan;
    if (g.stages > 0) t.stages = g.stages;
    if (g.kps > 0) t.kps = g.kps;
    gemm_tilings.emplace_back(t, t.instance(g.epi, 1, g.n, g.k));
  }
  std::vector<std::string> gemm_names;
  for (const auto& [t, name] : gemm_tilings) gemm_names.push_back(name);
  Module gm(gemm_names);
  void *a, *y;
  check(cudaMalloc(&a, 14336 * 2), "alloc");
  fill(a, 14336 * 2);
  check(cudaMalloc(&y, 6144 * 4), "alloc");
  cudaMemset(y, 0, 6144 * 4);
  for (std::size_t gi = 0; gi < std::size(gemm_forms); ++gi) {
    const GemmForm& g = gemm_forms[gi];
    const auto& [t, name] = gemm_tilings[gi];
    const std::size_t wbytes = static_cast<std::size_t>(g.n) * g.k * 2;
    const int copies = static_cast<int>((400ull << 20) / wbytes) + 1;
    std::vector<void*> w(copies), w_maps;
    for (auto& p : w) {
      check(cudaMalloc(&p, wbytes), "alloc");
      fill(p, wbytes);
    }
    void* a_map = device_map(a, 1, g.k, t.a_box);
    for (void* p : w) w_maps.push_back(device_map(p, g.n, g.k, t.w_box()));
    const double us = median_us(
        [&](int i) {
          gm.launch(name, dim3(t.tiles_m, t.tiles_n), t.threads(), {a_map, w_maps[i % copies], y},
                    t.smem(), i % kChain != 0);
        },
        30, 5, kChain);
    const auto [blocks, regs] = gm.occupancy(name, static_cast<int>(t.threads()), t.smem());
    char label[64], shape[64];
    std::snprintf(label, sizeof label, "gemm_small_%s bn%d st%d %dkb%s", g.epi, t.bn, t.stages,
                  t.kps, g.bn == 0 && g.stages == 0 ? " plan" : "");
    std::snprintf(shape, sizeof shape, "M=1 N=%d K=%d, %d CTAs, %d/SM", g.n, g.k,
                  t.tiles_m * t.tiles_n, blocks);
    std::printf("%-34s | %-26s | %9.1f | %8.0f | %6.1f\n", label, shape, us, wbytes / us / 1e3,
                100.0 * wbytes / us / 1e3 / copy_gbs);
    cudaFree(a_map);
    for (void* p : w_maps) cudaFree(p);
    for (void* p : w) cudaFree(p);
  }
  cudaFree(a);
  cudaFree(y);
  cudaFree(out);
}

// What an exchange between CTAs costs while the weights stream (--exchange). The one-token
// layer's attention half is a chain of exchanges between CTAs (the QKV tiles' q and K/V rows to
// the attention items, the items' output to o), each a grid-wide count or a polled flag through
// L2, which costs several times more while every SM streams weights than when none does, and
// the ring cannot cover the half (the producers wait for free slots; docs/performance.md). A
// layout that keeps each KV head's QKV tiles and its attention items in one cluster would
// exchange through distributed shared memory instead (docs/performance.md, open questions:
// group clusters); whether that is cheaper under the
// stream, and whether such clusters fit beside the layer's shared memory, is what this measures.
// One 64-thread block an SM (the 8B layer's dynamic shared memory, so one an SM); warp 1 runs 200
// rounds of one exchange and times each (%globaltimer):
//   "grid count": the warp stores 512 bytes, then lane 0 releases (fence.acq_rel.gpu;
//   red.relaxed.gpu.add on one counter) and polls it (ld.acquire.gpu) until every CTA has added:
//   persistent_arrive / persistent_wait's form, on 132 CTAs;
//   "cluster gather+bcast, C": lane 0 stores a word into the cluster's rank-0 CTA's shared memory
//   and arrives on its mbarrier (release.cluster); rank 0 waits for C arrivals (acquire.cluster)
//   and arrives on every CTA's own mbarrier, on which each waits: the exchange a cluster of C
//   would make, on 128 CTAs (fewer if fewer clusters fit);
// idle, and while warp 0 streams 8 KB bulk copies from a 2 GiB buffer through a 16-slot ring
// (128 KB in flight an SM, no consumer: the layer's weight stream). Medians and p90 over every
// CTA's rounds after the first 20, µs; the stream's GB/s over the launch; and how many clusters
// of 8 and 16 fit at once with that shared memory (cudaOccupancyMaxActiveClusters).
void bench_exchange(const cudaDeviceProp& prop, double copy_gbs) {
  const std::string source = R"(
#include "hexel/cluster.cuh"
#include "hexel/mbarrier.cuh"
#include "hexel/memory_order.cuh"
#include "hexel/timer.cuh"
#include "hexel/tma.cuh"
template <int MODE, bool STREAM>  // MODE 0: grid count; 1: cluster gather + broadcast
__global__ void __launch_bounds__(64, 1) telos_bench_exchange(const char* weights,
    unsigned long long slice, unsigned* count, uint4* payload, unsigned long long* lat,
    unsigned long long* streamed, int rounds) {
  using namespace hexel;
  constexpr unsigned kSlots = 16, kSlot = 8192;
  extern __shared__ unsigned char smem_raw[];
  __shared__ volatile int done;
  const unsigned base = (smem_addr(smem_raw) + 1023u) & ~1023u;
  const unsigned full = base + kSlots * kSlot, gather = full + 8 * kSlots, bcast = gather + 8,
                 box = gather + 16;  // a word a rank of the cluster
  if (threadIdx.x == 0) {
    for (unsigned s = 0; s < kSlots; ++s) mbarrier::init(full + 8 * s, 1);
    mbarrier::init(gather, MODE == 1 ? cluster::size() : 1);
    mbarrier::init(bcast, 1);
    done = 0;
    mbarrier::fence_init();
  }
  __syncthreads();
  if constexpr (MODE == 1) cluster::sync();  // every peer's barriers set before a remote arrival
  const unsigned lane = threadIdx.x % 32;
  if (threadIdx.x < 32) {
    if (STREAM && lane == 0) {
      const char* src = weights + blockIdx.x * slice;
      unsigned long long i = 0;
      for (;; ++i) {
        const unsigned s = i % kSlots;
        if (i >= kSlots) mbarrier::wait_parity(full + 8 * s, (i / kSlots - 1) & 1);
        if (done) break;
        mbarrier::arrive_expect_tx(full + 8 * s, kSlot);
        tma::copy_g2s(base + s * kSlot, src + i * kSlot % slice, kSlot, full + 8 * s);
      }
      // The copies still in flight land before the CTA may exit.
      for (unsigned long long j = i >= kSlots ? i - kSlots + 1 : 0; j < i; ++j)
        mbarrier::wait_parity(full + 8 * (j % kSlots), (j / kSlots) & 1);
      streamed[blockIdx.x] = i * kSlot;
    }
  } else {
    for (int r = 0; r < rounds; ++r) {
      const unsigned long long t0 = globaltimer();
      if constexpr (MODE == 0) {
        payload[blockIdx.x * 32 + lane] = make_uint4(r, blockIdx.x, lane, 1u);
        __syncwarp();
        if (lane == 0) {
          red_add_release_gpu(count, 1u);
          while (ld_acquire_gpu(count) < (r + 1) * gridDim.x) {
          }
        }
      } else if (lane == 0) {
        const unsigned rank = cluster::cta_rank();
        cluster::store_u32(cluster::map_shared(box + 4 * rank, 0), static_cast<unsigned>(r));
        mbarrier::arrive_cluster(cluster::map_shared(gather, 0));
        if (rank == 0) {
          mbarrier::wait_parity_cluster(gather, r & 1);
          for (unsigned k = 0; k < cluster::size(); ++k) mbarrier::arrive_cluster(cluster::map_shared(bcast, k));
        }
        mbarrier::wait_parity_cluster(bcast, r & 1);
      }
      __syncwarp();
      const unsigned long long t1 = globaltimer();
      if (lane == 0) lat[static_cast<unsigned long long>(blockIdx.x) * rounds + r] = t1 - t0;
    }
    if (lane == 0) done = 1;
  }
  __syncthreads();
  if constexpr (MODE == 1) cluster::sync();  // no CTA leaves while a peer may still arrive on it
}
)";
  const std::string names[4] = {"telos_bench_exchange<0, false>", "telos_bench_exchange<0, true>",
                                "telos_bench_exchange<1, false>", "telos_bench_exchange<1, true>"};
  Module mod({names[0], names[1], names[2], names[3]}, source, 1);
  const int smem = decode_layer_tiling(4096, 6144, 4096, 14336, 128).smem;
  constexpr int kRounds = 200, kSkip = 20, kMaxGrid = 256;
  const std::size_t weight_bytes = 2ull << 30;
  void *weights, *count, *payload, *lat, *streamed;
  check(cudaMalloc(&weights, weight_bytes), "alloc");
  fill(weights, weight_bytes);
  check(cudaMalloc(&count, 4), "alloc");
  check(cudaMalloc(&payload, 16ull * 32 * kMaxGrid), "alloc");
  check(cudaMalloc(&lat, 8ull * kRounds * kMaxGrid), "alloc");
  check(cudaMalloc(&streamed, 8ull * kMaxGrid), "alloc");
  // The launch of names[k] on `grid` CTAs in clusters of `csize` (1: none).
  const auto config = [&](int grid, int csize, cudaLaunchAttribute& attr) {
    cudaLaunchConfig_t c{};
    c.gridDim = dim3(grid);
    c.blockDim = dim3(64);
    c.dynamicSmemBytes = static_cast<std::size_t>(smem);
    attr.id = cudaLaunchAttributeClusterDimension;
    attr.val.clusterDim.x = static_cast<unsigned>(csize);
    attr.val.clusterDim.y = attr.val.clusterDim.z = 1;
    c.attrs = csize > 1 ? &attr : nullptr;
    c.numAttrs = csize > 1 ? 1 : 0;
    return c;
  };
  const auto kernel = [&](int k) {
    const void* f = mod.kernel(names[k], smem);
    check(cudaFuncSetAttribute(f, cudaFuncAttributeNonPortableClusterSizeAllowed, 1),
          "cluster size");
    return f;
  };
  int fit[17] = {};
  for (int csize : {8, 16}) {
    cudaLaunchAttribute attr{};
    cudaLaunchConfig_t c = config(csize * 8, csize, attr);
    if (cudaOccupancyMaxActiveClusters(&fit[csize], kernel(2), &c) != cudaSuccess) fit[csize] = 0;
    cudaGetLastError();
    std::printf(
        "%-34s | %-26s | %9d | %8s | %6s\n", "exchange: clusters that fit",
        (std::to_string(csize) + " CTAs, " + std::to_string(smem / 1024) + " KB an SM").c_str(),
        fit[csize], "", "");
  }
  struct Form {
    const char* label;
    int mode, grid, csize;
  };
  std::vector<Form> forms = {{"exchange: grid count", 0, prop.multiProcessorCount, 1}};
  for (int csize : {8, 16})
    if (fit[csize] > 0)
      forms.push_back(
          {csize == 8 ? "exchange: cluster 8 gather+bcast" : "exchange: cluster 16 gather+bcast", 1,
           csize * std::min(fit[csize], 128 / csize), csize});
  for (const Form& f : forms)
    for (bool stream : {false, true}) {
      const int k = 2 * f.mode + (stream ? 1 : 0);
      const unsigned long long slice = weight_bytes / static_cast<unsigned>(f.grid) / 8192 * 8192;
      check(cudaMemset(count, 0, 4), "count");
      check(cudaMemset(streamed, 0, 8ull * kMaxGrid), "streamed");
      cudaEvent_t a, b;
      cudaEventCreate(&a);
      cudaEventCreate(&b);
      cudaLaunchAttribute attr{};
      cudaLaunchConfig_t c = config(f.grid, f.csize, attr);
      int rounds = kRounds;
      void* args[] = {
          &weights, const_cast<unsigned long long*>(&slice), &count, &payload, &lat, &streamed,
          &rounds};
      cudaEventRecord(a);
      check(cudaLaunchKernelExC(&c, kernel(k), args), "exchange launch");
      cudaEventRecord(b);
      check(cudaEventSynchronize(b), "exchange run");
      float ms = 0;
      cudaEventElapsedTime(&ms, a, b);
      cudaEventDestroy(a);
      cudaEventDestroy(b);
      std::vector<unsigned long long> l(static_cast<std::size_t>(kRounds) * f.grid), s(f.grid);
      check(cudaMemcpy(l.data(), lat, 8 * l.size(), cudaMemcpyDeviceToHost), "lat");
      check(cudaMemcpy(s.data(), streamed, 8 * s.size(), cudaMemcpyDeviceToHost), "streamed");
      std::vector<double> us;
      for (int g = 0; g < f.grid; ++g)
        for (int r = kSkip; r < kRounds; ++r)
          us.push_back(l[static_cast<std::size_t>(g) * kRounds + r] / 1e3);
      std::sort(us.begin(), us.end());
      double bytes = 0;
      for (unsigned long long v : s) bytes += static_cast<double>(v);
      const double gbs = bytes / (ms * 1e-3) / 1e9;
      char shape[64];
      std::snprintf(shape, sizeof shape, "%d CTAs, %s, p90 %.2f", f.grid,
                    stream ? "streaming" : "idle", us[us.size() * 9 / 10]);
      std::printf("%-34s | %-26s | %9.2f | %8.0f | %6.1f\n", f.label, shape, us[us.size() / 2], gbs,
                  100.0 * gbs / copy_gbs);
    }
  for (void* p : {weights, count, payload, lat, streamed}) cudaFree(p);
}

// The sampler (sample.cuh) at Llama's vocabulary, 128256, with the plan's cluster of 8 blocks of
// 512 threads a row (kernel_plan.cpp): R
// rows that sample, f32 logits in [-8, 8) from a fixed generator, one SampleParams for every row
// in each mode (greedy; temperature 0.8; with top_p 0.9; with top_k 50; with top_k 50, top_p 0.9
// and min_p 0.05), each figure one launch on an idle stream, as bench_suite's profile times a
// step's sample node. Bytes: the logits, read once (greedy reads the candidates: 8 KB a row). The
// batch-1 benchmark samples greedily; a client of an OpenAI-style server usually sends a
// temperature and top_p.
void bench_sample(double copy_gbs) {
  constexpr int V = 128256, kThreads = 512, kCluster = 8;
  struct Params {  // sample.cuh's SampleParams
    float temperature, top_p, min_p;
    int top_k;
    unsigned seed_lo, seed_hi;
    int counter, reserved;
  };
  struct Mode {
    const char* name;
    Params p;
  };
  const Mode modes[] = {{"greedy", {0.f, 1.f, 0.f, 0, 1, 0, 0, 0}},
                        {"temperature 0.8", {0.8f, 1.f, 0.f, 0, 1, 0, 0, 0}},
                        {"t 0.8, top_p 0.9", {0.8f, 0.9f, 0.f, 0, 1, 0, 0, 0}},
                        {"t 0.8, top_k 50", {0.8f, 1.f, 0.f, 50, 1, 0, 0, 0}},
                        {"t 0.8, k 50, p 0.9, min_p 0.05", {0.8f, 0.9f, 0.05f, 50, 1, 0, 0, 0}}};
  // Greedy rows read the LM head's candidates: the 1B plan's 1002 blocks of 128 logits.
  constexpr int G = V / 128;
  const std::string kernel =
      "telos_kernels::sample<" + I(V) + ", " + I(kThreads) + ", " + I(G) + ", " + I(kCluster) + ">";
  Module mod({kernel});
  constexpr int kMaxRows = 64;
  std::vector<float> hl(static_cast<std::size_t>(kMaxRows) * V);
  unsigned x = 2463534242u;
  for (float& v : hl) {
    x ^= x << 13, x ^= x >> 17, x ^= x << 5;
    v = static_cast<float>(x >> 8) * (16.f / 16777216.f) - 8.f;
  }
  std::vector<int> hrows(kMaxRows);
  for (int r = 0; r < kMaxRows; ++r) hrows[r] = r;
  // Candidates as the LM head writes them (common.cuh, greedy_candidate; the logits are finite).
  std::vector<unsigned long long> hc(static_cast<std::size_t>(kMaxRows) * G, 0);
  for (std::size_t i = 0; i < hl.size(); ++i) {
    unsigned u;
    std::memcpy(&u, &hl[i], 4);
    const unsigned long long key = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
    const unsigned j = static_cast<unsigned>(i % V);
    unsigned long long& best = hc[i / V * G + j / (V / G)];
    best = std::max(best, key << 32 | ~j);
  }
  void *logits, *cand, *params, *rows, *out, *out_host;
  check(cudaMalloc(&logits, hl.size() * 4), "alloc");
  check(cudaMalloc(&cand, hc.size() * 8), "alloc");
  check(cudaMemcpy(cand, hc.data(), hc.size() * 8, cudaMemcpyHostToDevice), "upload");
  check(cudaMalloc(&params, sizeof(Params) * kMaxRows), "alloc");
  check(cudaMalloc(&rows, 4 * kMaxRows), "alloc");
  check(cudaMalloc(&out, 4 * kMaxRows), "alloc");
  check(cudaMalloc(&out_host, 4 * kMaxRows), "alloc");
  check(cudaMemcpy(logits, hl.data(), hl.size() * 4, cudaMemcpyHostToDevice), "upload");
  check(cudaMemcpy(rows, hrows.data(), 4 * kMaxRows, cudaMemcpyHostToDevice), "upload");
  for (const Mode& m : modes) {
    const std::vector<Params> hp(kMaxRows, m.p);
    check(cudaMemcpy(params, hp.data(), sizeof(Params) * kMaxRows, cudaMemcpyHostToDevice),
          "upload");
    for (int R : {1, 64}) {
      const double us = median_us([&](int) {
        mod.launch(kernel, dim3(R * kCluster), kThreads,
                   {logits, cand, params, rows, out, out_host});
      });
      char label[64], shape[64];
      std::snprintf(label, sizeof label, "sample %s", m.name);
      std::snprintf(shape, sizeof shape, "V=%d, %d row(s)", V, R);
      std::printf("%-34s | %-26s | %9.1f | %8.0f | %6.1f\n", label, shape, us,
                  4.0 * V * R / us / 1e3, 100.0 * 4.0 * V * R / us / 1e3 / copy_gbs);
    }
  }
  for (void* p : {logits, cand, params, rows, out, out_host}) cudaFree(p);
}

// One-token decode layers as a step runs them: decode_layer_persistent (the plan's tiles and
// ring, decode_layer_tiling, its grid-wide counts), 8 layers back to back with PDL,
// each on its own copy of the weights and of the K/V pages (one sequence at context C,
// max_seq_len 8448 as bench_suite compiles), at the Llama-3.2-1B and Llama-3.1-8B shapes. Bytes:
// the layer's weights and the K/V read. Then the phase timeline of the last layer of one such run
// (the same instances compiled with TELOS_PHASE_TRACE): per event, the median and the latest CTA,
// µs after the first CTA's entry (decode_persistent.cuh, phase_trace), and on the same clock the
// layer before it (its down's end, its producer's last load, its CTAs' exits): a layer's CTAs
// enter only as the previous layer's leave, so the boundary is where a traced layer's gain can
// go. Variants, each a row and a timeline of its own so that they compare within one run: the
// plan's (the QKV epilogue in the QKV tiles, QKV_ROPE; the weights of its `bulk` mask streamed
// from their slot images, a bulk copy a ring slot), and the same with every weight on tensor
// maps (a box a K block and gate/up half), with all four from slot images and with gate/up and
// down's; and decode_layer_persistent_e4m3 on e4m3 copies of the weights (128 x 128 scale blocks;
// bytes: the e4m3 weights and their scales) and decode_layer_persistent_w8a8 on the same bytes
// (no converters: the e4m3 wgmma reads the ring; where its plan puts gate/up on 32-row tiles, also
// on 64-row ones), whose x are their own. Every variant's x after one layer is
// compared with the plan's (DIFF in the output otherwise). The trace also has each CTA's
// arrival after a phase (its release issued). The variants measured here and not kept (K-block
// views, L2 prefetch ahead of the ring, the V0 counts, other tiles, the count between gate/up and
// down, the combine folded into o's A, shorter splits, other releases, caps and gates on the
// ring, two layer launches resident an SM) are listed in docs/performance.md. With
// --decode-layer, only this section (after the copy bandwidth).
void bench_decode_layer(const cudaDeviceProp& prop, double copy_gbs) {
  struct LayerShape {
    const char* name;
    int H, HQ, HKV, D, I;
  };
  const LayerShape shapes[] = {{"1B", 2048, 32, 8, 64, 8192}, {"8B", 4096, 32, 8, 128, 14336}};
  constexpr int kMaxSeq = 8448, kPage = 16, kMaxp = kMaxSeq / kPage, kLayers = 8;
  const int nsplit = attn_partial_slots(kMaxSeq);
  // decode_persistent.cuh's kTraceEvents: these 16, then from 16 + p each CTA's arrival after
  // phase p (0..5; down's is not traced), 22 the producer's wait for free ring slots (a
  // duration), 23 the CTA's exit; two launches' slots of kTraceCtas CTAs each.
  constexpr int kEvents = 24, kFirstArrival = 16, kArrivals = 6, kWaits = 22, kExit = 23,
                kSlotCtas = 256;
  const char* events[kFirstArrival] = {"entry",  "p0 qkv start",   "p0 end", "p1 rope start",
                                       "p1 end", "p2 split start", "p2 end", "p3 combine start",
                                       "p3 end", "p4 o start",     "p4 end", "p5 gate/up start",
                                       "p5 end", "p6 down start",  "p6 end", "producer done"};
  for (const LayerShape& sh : shapes) {
    const int NH = sh.HQ + 2 * sh.HKV, NQKV = NH * sh.D, KO = sh.HQ * sh.D;
    const long long page_elems = 2LL * sh.HKV * kPage * sh.D;
    struct Variant {
      std::string label;
      PersistentLayerTiling lt;  // with or without QKV_ROPE
      int bulk;  // BULK: the weights as slot images, a bulk copy a slot (bit 0 qkv .. 3 down)
      bool e4m3 = false;  // decode_layer_persistent_e4m3 on the e4m3 copies
      bool w8a8 = false;  // decode_layer_persistent_w8a8 on the e4m3 copies (no converters)
      int w8 = 0;         // the W8A8 variant's maps (Copy::w8_maps[w8]: boxes of its tiles)
    };
    const PersistentLayerTiling plan_t = decode_layer_tiling(sh.H, NQKV, KO, sh.I, sh.D, false);
    const PersistentLayerTiling w8a8_t =
        decode_layer_w8a8_tiling(sh.H, NQKV, KO, sh.I, sh.D, false);
    std::vector<Variant> variants = {
        {"V1 plan", plan_t, plan_t.bulk},
        {"V1 tensor maps", plan_t, 0},
        {"V1 bulk all", plan_t, 0b1111},
        {"V1 bulk gate/up+down", plan_t, 0b1100},
        {"V1 e4m3", decode_layer_tiling(sh.H, NQKV, KO, sh.I, sh.D, false, true), 0, true},
        {"V1 w8a8", w8a8_t, 0, false, true, 0}};
    // The W8A8 layer with gate/up on 64-row tiles where the plan takes 32 (the 8B: the busiest CTA
    // 128 slots instead of 112).
    if (w8a8_t.bg != 64) {
      PersistentLayerTiling t = w8a8_t;
      t.bg = 64;
      variants.push_back({"V1 w8a8 gate/up 64", t, 0, false, true, 1});
    }
    const PersistentLayerTiling& lt = variants[0].lt;  // the ring and the other tiles: the same
    std::vector<std::string> names;
    for (const Variant& v : variants)
      names.push_back(
          "telos_kernels::decode_layer_persistent" +
          std::string(v.e4m3   ? "_e4m3<"
                      : v.w8a8 ? "_w8a8<"
                               : "<") +
          I(sh.H) + ", " + I(sh.HQ) + ", " + I(sh.HKV) + ", " + I(sh.D) + ", false, false, " +
          float_literal(1e-5) + ", " + I(kPage) + ", " + I(kMaxp) + ", " + I(page_elems) +
          "ll, telos_rope::Freqs, " + I(kAttnSplit) + ", " + I(nsplit) + ", " +
          float_literal(1.4426950408889634 / std::sqrt(static_cast<double>(sh.D))) + ", " +
          I(sh.I) + ", " + I(v.lt.stages) + ", " + I(v.lt.bq) + ", " + I(v.lt.bo) + ", " +
          I(v.lt.bg) + ", " + I(v.lt.bd) + (v.lt.qkv_rope ? ", true" : ", false") +
          (v.w8a8   ? std::string()
           : v.e4m3 ? ", " + I(v.lt.raw_stages) + ", 128, 128, 128, 128, 128, 128, 128, 128"
                    : ", " + I(v.bulk)) +
          ">");
    const std::string w8a8_include = "#include \"decode_layer_w8a8.cuh\"\n";
    auto plain = std::async(std::launch::async,
                            [&] { return std::make_unique<Module>(names, w8a8_include); });
    Module traced(names, "#define TELOS_PHASE_TRACE 1\n" + w8a8_include, 1);
    const std::unique_ptr<Module> mod = plain.get();
    const std::size_t w_rows[4] = {static_cast<std::size_t>(NQKV), static_cast<std::size_t>(sh.H),
                                   2 * static_cast<std::size_t>(sh.I),
                                   static_cast<std::size_t>(sh.H)};
    const std::size_t w_cols[4] = {static_cast<std::size_t>(sh.H), static_cast<std::size_t>(KO),
                                   static_cast<std::size_t>(sh.H), static_cast<std::size_t>(sh.I)};
    double w_bytes = 0, e4m3_bytes = 0;  // e4m3: a byte an element, an f32 scale a 128 x 128 block
    std::size_t scales[4];
    for (int k = 0; k < 4; ++k) {
      w_bytes += 2.0 * w_rows[k] * w_cols[k];
      scales[k] = (w_rows[k] + 127) / 128 * ((w_cols[k] + 127) / 128);
      e4m3_bytes += 1.0 * w_rows[k] * w_cols[k] + 4.0 * scales[k];
    }
    const std::size_t kv_bytes = static_cast<std::size_t>(kMaxp) * page_elems * 2;
    const int copies = std::max(2, static_cast<int>((400ull << 20) / (w_bytes + kv_bytes)) + 1);
    struct Copy {
      void* w[4];
      void* maps[4];    // 2D, a box a K block (and half)
      void* images[4];  // slot images (support/slot_image.hpp), a bulk copy a ring slot
      void* q[4];       // e4m3 weights (fill_e4m3's finite bytes)
      void* s[4];       // their scales
      void* q_maps[4];  // 2D over the e4m3 bytes, boxes of 64 bytes
      // Over the e4m3 bytes, 128-byte box rows with the swizzle, boxes of each W8A8 variant's
      // tiles.
      void* w8_maps[2][4] = {};
      void* kv;
    };
    std::vector<Copy> cs(copies);
    for (Copy& c : cs) {
      for (int k = 0; k < 4; ++k) {
        check(cudaMalloc(&c.w[k], 2 * w_rows[k] * w_cols[k]), "alloc");
        fill(c.w[k], 2 * w_rows[k] * w_cols[k]);
      }
      const int boxes[4] = {lt.bq, lt.bo, lt.bg / 2, lt.bd};
      const int bn[4] = {lt.bq, lt.bo, lt.bg, lt.bd};
      for (int k = 0; k < 4; ++k) {
        c.maps[k] =
            device_map(c.w[k], static_cast<int>(w_rows[k]), static_cast<int>(w_cols[k]), boxes[k]);
        const auto rows = static_cast<std::int64_t>(w_rows[k]),
                   cols = static_cast<std::int64_t>(w_cols[k]);
        std::vector<std::uint16_t> host(w_rows[k] * w_cols[k]), image(host.size());
        check(cudaMemcpy(host.data(), c.w[k], 2 * host.size(), cudaMemcpyDeviceToHost), "weights");
        const int halves = k == 2 ? 2 : 1;
        const std::string why = telos::slot_image_refusal(rows, cols, bn[k], halves);
        if (!why.empty()) check(cudaErrorInvalidValue, ("slot image: " + why).c_str());
        telos::pack_slot_image(host.data(), rows, cols, bn[k], halves, 0, rows / bn[k],
                               image.data());
        check(cudaMalloc(&c.images[k], 2 * image.size()), "alloc");
        check(cudaMemcpy(c.images[k], image.data(), 2 * image.size(), cudaMemcpyHostToDevice),
              "image");
        check(cudaMalloc(&c.q[k], w_rows[k] * w_cols[k]), "alloc");
        fill_e4m3(c.q[k], w_rows[k] * w_cols[k]);
        check(cudaMalloc(&c.s[k], 4 * scales[k]), "alloc");
        fill(c.s[k], 4 * scales[k]);
        c.q_maps[k] = device_map_e4m3(c.q[k], static_cast<int>(w_rows[k]),
                                      static_cast<int>(w_cols[k]), boxes[k]);
      }
      for (const Variant& v : variants) {
        if (!v.w8a8) continue;
        const int w8_boxes[4] = {v.lt.bq, v.lt.bo, v.lt.bg / 2, v.lt.bd};
        for (int k = 0; k < 4; ++k)
          c.w8_maps[v.w8][k] =
              device_map(c.q[k], static_cast<int>(w_rows[k]), static_cast<int>(w_cols[k]),
                         w8_boxes[k], hexel::TmaDtype::U8);
      }
      check(cudaMalloc(&c.kv, kv_bytes), "alloc");
      fill(c.kv, kv_bytes);
    }
    auto dev = [](std::size_t bytes, bool random) {
      void* p;
      check(cudaMalloc(&p, bytes), "alloc");
      if (random)
        fill(p, bytes);
      else
        cudaMemset(p, 0, bytes);
      return p;
    };
    void *norm_a = dev(4ull * sh.H, true), *norm_m = dev(4ull * sh.H, true), *pos = dev(4, false),
         *seq = dev(4, false), *pt = dev(4ull * kMaxp, false), *x = dev(4ull * sh.H, true),
         *qkv = dev(2ull * NQKV, false), *q = dev(4ull * KO, false),
         *po = dev(4ull * sh.HQ * nsplit * sh.D, false), *pml = dev(8ull * sh.HQ * nsplit, false),
         *attn_out = dev(2ull * KO, false), *act = dev(persistent_w8a8_act_bytes(sh.I), false),
         *sync = dev(8, false);  // the grid-wide counts
    std::vector<int> hpt(kMaxp);
    for (int i = 0; i < kMaxp; ++i) hpt[i] = (i * 7) % kMaxp;  // scattered pages
    cudaMemcpy(pt, hpt.data(), hpt.size() * 4, cudaMemcpyHostToDevice);
    const auto threads = [&](std::size_t vi) { return variants[vi].e4m3 ? 256 : 160; };
    for (std::size_t vi = 0; vi < names.size(); ++vi) {
      const int smem = variants[vi].lt.smem;
      const auto [blocks, regs] = mod->occupancy(names[vi], threads(vi), smem);
      std::printf("  %s %s: %d B of dynamic shared memory, %d registers, %d CTA(s) an SM\n",
                  sh.name, variants[vi].label.c_str(), smem, regs, blocks);
    }
    // Contexts: bench_suite's decode (33-288), then long ones, where the items (four warps an SM)
    // carry more of the layer (docs/performance.md, "Open questions").
    for (int C : {33, 96, 160, 288, 4096, 8192}) {
      const int position = C - 1;
      cudaMemcpy(pos, &position, 4, cudaMemcpyHostToDevice);
      const double kv_read = static_cast<double>(C) * sh.HKV * sh.D * 2 * 2;
      auto launch = [&](Module& m, std::size_t vi, int i, bool pdl) {
        const Copy& c = cs[i % copies];
        const void* null = nullptr;
        std::vector<const void*> args;
        for (int k = 0; k < 4; ++k)
          args.push_back(variants[vi].e4m3            ? c.q_maps[k]
                         : variants[vi].w8a8          ? c.w8_maps[variants[vi].w8][k]
                         : variants[vi].bulk >> k & 1 ? c.images[k]
                                                      : c.maps[k]);
        if (variants[vi].e4m3 || variants[vi].w8a8) args.insert(args.end(), c.s, c.s + 4);
        args.insert(args.end(), {norm_a, norm_m, null, null, null, pos, seq, pt, c.kv, x, qkv, q,
                                 po, pml, attn_out, act, sync});
        m.launch(names[vi], dim3(prop.multiProcessorCount), threads(vi), args,
                 variants[vi].lt.smem, pdl);
      };
      // The same bits whatever the weights' form: x after one layer on the same inputs, every
      // bf16 variant against the first (a slot image is the ring's bytes exactly, so any difference
      // is a packing or addressing error; the e4m3 layer's weights are others).
      {
        std::vector<float> x0(sh.H), first, got(sh.H);
        check(cudaMemcpy(x0.data(), x, 4ull * sh.H, cudaMemcpyDeviceToHost), "x");
        for (std::size_t vi = 0; vi < names.size(); ++vi) {
          check(cudaMemcpy(x, x0.data(), 4ull * sh.H, cudaMemcpyHostToDevice), "x");
          launch(*mod, vi, 0, false);
          check(cudaMemcpy(got.data(), x, 4ull * sh.H, cudaMemcpyDeviceToHost), "x");
          if (vi == 0) first = got;
          if (variants[vi].e4m3 || variants[vi].w8a8) continue;
          const bool same = std::memcmp(first.data(), got.data(), 4ull * sh.H) == 0;
          if (!same)
            std::printf("  DIFF: %s %s ctx=%d x differs from the first variant's\n", sh.name,
                        variants[vi].label.c_str(), C);
        }
        check(cudaMemcpy(x, x0.data(), 4ull * sh.H, cudaMemcpyHostToDevice), "x");
      }
      for (std::size_t vi = 0; vi < names.size(); ++vi) {
        const double us = median_us([&](int i) { launch(*mod, vi, i, i % kLayers != 0); }, 20,
                                    2 * kLayers, kLayers);
        const PersistentLayerTiling& vt = variants[vi].lt;
        const double bytes =
            (variants[vi].e4m3 || variants[vi].w8a8 ? e4m3_bytes : w_bytes) + kv_read;
        char label[64], shape[64];
        std::snprintf(label, sizeof label, "decode layer %s %s", sh.name,
                      variants[vi].label.c_str());
        std::snprintf(shape, sizeof shape, "ctx=%d (%d st, %d/%d/%d/%d)", C,
                      vt.stages + vt.raw_stages, vt.bq, vt.bo, vt.bg, vt.bd);
        std::printf("%-34s | %-26s | %9.1f | %8.0f | %6.1f\n", label, shape, us, bytes / us / 1e3,
                    100.0 * bytes / us / 1e3 / copy_gbs);
      }
      for (std::size_t vi = 0; vi < names.size(); ++vi) {
        void* trace = nullptr;
        std::size_t trace_bytes = 0;
        check(cudaLibraryGetGlobal(&trace, &trace_bytes, traced.libs.front(), "telos_phase_trace"),
              "trace");
        void* launches = nullptr;
        std::size_t launches_bytes = 0;
        check(cudaLibraryGetGlobal(&launches, &launches_bytes, traced.libs.front(),
                                   "telos_trace_launches"),
              "trace");
        // Zero first: an event a variant never reaches (the combine of a one-split context,
        // gate/up's arrival: down polls act) prints as "-", not as another launch's time.
        check(cudaMemset(trace, 0, trace_bytes), "trace");
        check(cudaMemset(launches, 0, launches_bytes), "trace");
        for (int i = 0; i < 2 * kLayers; ++i) launch(traced, vi, i, i % kLayers != 0);
        check(cudaDeviceSynchronize(), "traced run");
        std::vector<unsigned long long> all(trace_bytes / 8);
        check(cudaMemcpy(all.data(), trace, trace_bytes, cudaMemcpyDeviceToHost), "trace");
        // Launch k wrote slot k % 2: the last layer, and the one before it on the same clock.
        const unsigned long long* t = all.data() + (2 * kLayers - 1) % 2 * kSlotCtas * kEvents;
        const unsigned long long* prev = all.data() + (2 * kLayers) % 2 * kSlotCtas * kEvents;
        // From the layer's start: the first CTA past its dependency wait (a CTA enters early
        // where the previous layer left its SM early, and waits).
        const int ctas = prop.multiProcessorCount;
        unsigned long long t0 = ~0ull;
        for (int b = 0; b < ctas; ++b) t0 = std::min(t0, t[b * kEvents + 1]);
        // Median / last CTA of an event of one launch's slot, µs after t0, or as written for a
        // duration ("-" if none).
        auto at = [&](const unsigned long long* slot, int e, bool duration = false) {
          const unsigned long long from = duration ? 0 : t0;
          std::vector<double> v;
          for (int b = 0; b < ctas; ++b)
            if (slot[b * kEvents + e] != 0)
              v.push_back((static_cast<double>(slot[b * kEvents + e]) - static_cast<double>(from)) /
                          1e3);
          std::sort(v.begin(), v.end());
          char out[32] = "-";
          if (!v.empty()) std::snprintf(out, sizeof out, "%.1f/%.1f", v[v.size() / 2], v.back());
          return std::string(out);
        };
        std::printf(
            "  timeline %s ctx=%d %s (µs after the first CTA's phase 0 start: median / last "
            "CTA):",
            sh.name, C, variants[vi].label.c_str());
        for (int e = 0; e < kFirstArrival + kArrivals; ++e) {
          char name[32];
          if (e < kFirstArrival)
            std::snprintf(name, sizeof name, "%s", events[e]);
          else
            std::snprintf(name, sizeof name, "%sp%d", e == kFirstArrival ? "arrived " : "",
                          e - kFirstArrival);
          std::printf("%s %s %s", e % 4 == 0 ? "\n   " : ";", name, at(t, e).c_str());
        }
        // The boundary: the layer before on the same clock (its down's end, its producer's last
        // load, its CTAs' exits), then this layer's exits and its producer's wait for slots.
        std::printf(
            "\n    previous layer: p6 end %s; producer done %s; exit %s; this layer: exit %s; "
            "producer waited for free slots %s µs\n",
            at(prev, 14).c_str(), at(prev, 15).c_str(), at(prev, kExit).c_str(),
            at(t, kExit).c_str(), at(t, kWaits, true).c_str());
      }
    }
    for (Copy& c : cs) {
      for (int k = 0; k < 4; ++k) {
        cudaFree(c.w[k]);
        cudaFree(c.q[k]);
        cudaFree(c.s[k]);
        cudaFree(c.q_maps[k]);
      }
      for (void* m : c.maps) cudaFree(m);
      for (void* m : c.images) cudaFree(m);
      for (auto& maps : c.w8_maps)
        for (void* m : maps) cudaFree(m);
      cudaFree(c.kv);
    }
    for (void* p : {norm_a, norm_m, pos, seq, pt, x, qkv, q, po, pml, attn_out, act, sync})
      cudaFree(p);
  }
}

// Decode GEMMs at M = 1, 8, 64, 256, Llama-3.1-8B: qkv [6144, 4096], o [4096, 4096], gate_up
// [28672, 4096], down [4096, 14336], LM head [128256, 4096]; Llama-3.2-1B's (suffix _1b): LM
// head [128256, 2048], qkv [3072, 2048], o [2048, 2048], gate_up [16384, 2048], down [2048,
// 8192] (its o and down have 64 CTAs of 32 rows for 132 SMs). gemm_small_* as the plan launches
// it (SwiGLU: N is I, W is [2I, K]; bf16 out for qkv, the f32 residual for o and down, the LM
// head's f32 logits and greedy candidates). Bytes: weights, activations read, outputs written.
// With --sweep, also at other weight tiles and stage depths (the plan's choice is marked "plan").
// Every figure: 8 launches back to back, each on another copy of the weights, all but the first
// with programmatic dependent launch as in a step's graph.
// `rows`: the M timed; --sweep (`sweep`), --gemm (`gemm_only`) and --small-rows (`small_rows`)
// add their variants.
void bench_decode_gemms(const std::vector<int>& rows, bool sweep, bool gemm_only, bool small_rows,
                        double copy_gbs) {
  struct Gemm {
    const char* name;
    const char* epi;
    int N, K;
  };
  const Gemm gemms[] = {
      {"qkv", "bf16", 6144, 4096},          {"o", "residual", 4096, 4096},
      {"gate_up", "swiglu", 14336, 4096},   {"down", "residual", 4096, 14336},
      {"lm_head", "f32cand", 128256, 4096}, {"lm_head_1b", "f32cand", 128256, 2048},
      {"qkv_1b", "bf16", 3072, 2048},       {"o_1b", "residual", 2048, 2048},
      {"gate_up_1b", "swiglu", 8192, 2048}, {"down_1b", "residual", 2048, 8192}};
  for (int M : rows) {
    // Per shape: (label, tiling, instance) of each small-GEMM variant timed.
    struct Variant {
      std::string label;
      SmallGemmTiling t;
      std::string instance;
    };
    std::vector<std::vector<Variant>> variants(std::size(gemms));
    for (std::size_t gi = 0; gi < std::size(gemms); ++gi) {
      const Gemm& g = gemms[gi];
      const bool swiglu = std::string(g.epi) == "swiglu", f32cand = std::string(g.epi) == "f32cand";
      auto add = [&](const std::string& label, const SmallGemmTiling& t) {
        variants[gi].push_back({label, t, t.instance(g.epi, M, g.N, g.K)});
      };
      const SmallGemmTiling plan =
          f32cand ? lm_head_tiling(g.N, g.K, M) : small_gemm_tiling(g.N, g.K, M, swiglu);
      // Where the plan reads the weight from the one-token layer's slot image (the 8B's layer
      // weights), "plan" is that and "own map" the weight's 2D map.
      const std::string name = g.name;
      const bool is_1b = name.size() > 3 && name.substr(name.size() - 3) == "_1b";
      const std::string base_name = is_1b ? name.substr(0, name.size() - 3) : name;
      const PersistentLayerTiling lt =
          is_1b ? decode_layer_tiling(2048, 3072, 2048, 8192, 64, false)
                : decode_layer_tiling(4096, 6144, 4096, 14336, 128, false);
      const SmallGemmTiling plan_image =
          f32cand ? plan : plan.reading(layer_weight_image(lt, base_name));
      if (plan_image.image_rows > 0) {
        add("plan", plan_image);
        add("own map", plan);
      } else {
        add("plan", plan);
      }
      // --small-rows at 8 tokens: the plan's tiles with the stages it gives 16 tokens, whose
      // 64-row A slots (8 rows up to 8 tokens) leave room for fewer: what the stage count alone
      // costs between 8 and 16 rows.
      if (small_rows && M == 8 && !swiglu && !f32cand) {
        SmallGemmTiling t = plan;
        t.stages = small_gemm_tiling(g.N, g.K, 16, false).stages;
        if (t.stages != plan.stages) add("st" + I(t.stages) + " (16 rows' ring)", t);
      }
      // The LM head's 128-row tiles where the plan takes 256, timed beside them.
      if (f32cand && plan.bn == 256 && !sweep && !gemm_only) {
        SmallGemmLimits narrow;
        narrow.bn = 128;
        add("bn128", small_gemm_tiling(g.N, g.K, M, false, false, narrow));
      }
      // Where the plan runs two consumer warpgroups a CTA, its one-warpgroup tiles
      // ("wg1"); where it runs one on more than 64 rows (the downs, K > 4096), two on 128-row M
      // tiles at the plan's weight tile and at half of it (as many CTAs as the plan's), without
      // clusters and on clusters of two (each weight tile multicast to both CTAs' 128 rows).
      if (plan.warpgroups == 2) {
        SmallGemmLimits one;
        one.warpgroups = 1;
        add("wg1", f32cand ? lm_head_tiling(g.N, g.K, M, 1)
                           : small_gemm_tiling(g.N, g.K, M, swiglu, false, one));
      } else if (M > kSmallGemmBlockM && plan.norm_blocks == 0)
        for (int bn : {plan.bn, plan.bn / 2}) {
          SmallGemmTiling t = plan.with_bn(bn, g.N, swiglu);
          t.cluster = 1;
          if (t.cols < 16 || (f32cand && g.N % bn != 0)) continue;
          SmallGemmTiling two = small_gemm_two_warpgroups(t, M);
          add("wg2 bn" + I(bn), two);
          if (two.cluster_fits(2)) {
            two.cluster = 2;
            add("wg2 bn" + I(bn) + " cl2", two);
          }
        }
      // The plan's tiles on the other clusters of 1, 2 and 4 M tiles (sharing each weight tile by
      // multicast); outside --gemm and --sweep (gpu_check's run) only without, where the plan
      // has one.
      for (int cl : {1, 2, 4})
        if (cl != plan.cluster && plan.cluster_fits(cl) && (cl == 1 || sweep || gemm_only)) {
          SmallGemmTiling t = plan;
          t.cluster = cl;
          add("plan cl" + I(cl), t);
        }
      if (!sweep && !gemm_only) continue;
      const std::vector<int> bns = gemm_only ? std::vector<int>{32, 64, 128, 256}
                                   : swiglu  ? std::vector<int>{32, 64, 128}
                                   : f32cand ? std::vector<int>{64, 128, 256}
                                             : std::vector<int>{16, 32, 64};
      for (int bn : bns)
        for (int stages : gemm_only ? std::vector<int>{2, 4, 6, 8} : std::vector<int>{4, 8, 16}) {
          SmallGemmTiling t = plan.with_bn(bn, g.N, swiglu);
          t.cluster = 1;
          t.stages = stages;
          if (t.smem() > kMaxSmemPerBlock) continue;
          if (bn != plan.bn || stages != plan.stages) add("bn" + I(bn) + " st" + I(stages), t);
          // --gemm: each tiling also on clusters of two M tiles (weight multicast).
          if (gemm_only && t.cluster_fits(2) && (bn != plan.bn || stages != plan.stages)) {
            t.cluster = 2;
            add("bn" + I(bn) + " st" + I(stages) + " cl2", t);
          }
          // --gemm, where the plan has one warpgroup on more than 64 rows (the downs): each
          // tiling also on two (128-row M tiles) where its stages fit, alone and on clusters of
          // two.
          if (gemm_only && plan.warpgroups == 1 && M > kSmallGemmBlockM && plan.norm_blocks == 0) {
            t.cluster = 1;
            SmallGemmTiling two = small_gemm_two_warpgroups(t, M);
            if (two.stages != stages) continue;
            add("wg2 bn" + I(bn) + " st" + I(stages), two);
            if (two.cluster_fits(2)) {
              two.cluster = 2;
              add("wg2 bn" + I(bn) + " st" + I(stages) + " cl2", two);
            }
          }
        }
    }
    std::vector<std::string> all;
    for (const auto& v : variants)
      for (const Variant& x : v) all.push_back(x.instance);
    Module mod(all);
    for (std::size_t gi = 0; gi < std::size(gemms); ++gi) {
      const Gemm& g = gemms[gi];
      const bool swiglu = std::string(g.epi) == "swiglu", f32cand = std::string(g.epi) == "f32cand";
      const int rows = swiglu ? 2 * g.N : g.N;
      const std::size_t wbytes = static_cast<std::size_t>(rows) * g.K * 2;
      const int copies = std::max<int>(2, static_cast<int>((400ull << 20) / wbytes) + 1);
      std::vector<void*> w(copies);
      for (auto& p : w) {
        check(cudaMalloc(&p, wbytes), "alloc");
        fill(p, wbytes);
      }
      void *a, *y;
      check(cudaMalloc(&a, static_cast<std::size_t>(M) * g.K * 2), "alloc");
      fill(a, static_cast<std::size_t>(M) * g.K * 2);
      check(cudaMalloc(&y, static_cast<std::size_t>(M) * rows * 4), "alloc");
      cudaMemset(y, 0, static_cast<std::size_t>(M) * rows * 4);
      // The greedy candidates (the LM heads'): a 16-row tile's at most.
      void* cand;
      check(cudaMalloc(&cand, 8ull * M * (rows / 16)), "alloc");
      auto row = [&](const std::string& label, double us, double out_bytes) {
        const double bytes = wbytes + static_cast<double>(M) * g.K * 2 + out_bytes;
        char shape[64];
        std::snprintf(shape, sizeof shape, "M=%d N=%d K=%d", M, rows, g.K);
        std::printf("%-34s | %-26s | %9.1f | %8.0f | %6.1f\n", label.c_str(), shape, us,
                    bytes / us / 1e3, 100.0 * bytes / us / 1e3 / copy_gbs);
      };
      for (const Variant& v : variants[gi]) {
        const SmallGemmTiling& t = v.t;
        void* a_map = device_map(a, M, g.K, t.a_box);
        std::vector<void*> w_maps;
        const int halves = swiglu ? 2 : 1;
        for (void* p : w)
          w_maps.push_back(t.image_rows > 0 ? device_image_map(p, rows, g.K, t.image_rows * halves,
                                                               halves, t.image_box)
                                            : device_map(p, rows, g.K, t.w_box()));
        const double us = median_us(
            [&](int i) {
              std::vector<const void*> args = {a_map, w_maps[i % copies], y};
              if (f32cand) args.push_back(cand);
              mod.launch(v.instance, dim3(t.tiles_m, t.tiles_n), t.threads(), args, t.smem(),
                         i % kBatch != 0);
            },
            30, 5, kBatch);
        // The residual reads and writes x (f32), the LM head writes f32; the others write bf16.
        const double out = std::string(g.epi) == "residual" ? 8.0 * M * g.N
                           : f32cand                        ? 4.0 * M * g.N
                                                            : 2.0 * M * g.N;
        row("gemm_small_" + std::string(g.epi) + " " + g.name + " " + v.label, us, out);
        cudaFree(a_map);
        for (void* p : w_maps) cudaFree(p);
      }
      for (auto& p : w) cudaFree(p);
      cudaFree(a);
      cudaFree(y);
      cudaFree(cand);
    }
  }
}

// One decode layer's four GEMMs as a step's graph chains them (qkv; o with the residual; gate/up
// with SwiGLU; down with the residual; the small kernels between them left out), 8 layers per
// timed run, each layer on another copy of the weights, all but the first launch with PDL: what
// the GEMMs lose at their boundaries. Configurations: the plan's tiles; stages cut to half an
// SM's shared memory, so that the next GEMM's CTAs fit beside them ("half"); up to 48 stages
// instead of 16 where the shared memory allows ("deep": more of the weights in flight before the
// wait); and 16-row weight tiles for qkv, o and down with deep rings ("bn16 deep": twice the
// CTAs; the 1B shape's o and down have 64 CTAs of 32 rows for 132 SMs). None beats the plan,
// nor does prefetching weight boxes to L2 before the wait (docs/performance.md).
void bench_layer_gemms(double copy_gbs) {
  struct Shape {
    const char* name;
    int H, QKV, I;
  };
  const Shape shapes[] = {{"8B", 4096, 6144, 14336}, {"1B", 2048, 3072, 8192}};
  struct Cfg {
    const char* label;
    SmallGemmLimits limits;
  };
  const Cfg cfgs[] = {{"plan", {}},
                      {"half", {114 * 1024, 16, 0}},
                      {"deep", {228 * 1024, 48, 0}},
                      {"bn16 deep", {228 * 1024, 48, 16}}};
  constexpr int kLayers = 8;
  struct Op {
    std::string epi;
    int N, K, rows;
  };
  auto layer_ops = [](const Shape& sh) {
    return std::array<Op, 4>{Op{"bf16", sh.QKV, sh.H, sh.QKV}, Op{"residual", sh.H, sh.H, sh.H},
                             Op{"swiglu", sh.I, sh.H, 2 * sh.I}, Op{"residual", sh.H, sh.I, sh.H}};
  };
  // Per (shape, M): every configuration's four tilings and instances, compiled side by side.
  struct Chain {
    const Shape* sh;
    int M;
    std::vector<SmallGemmTiling> tiles;
    std::vector<std::string> names;
  };
  std::vector<Chain> chains;
  for (const Shape& sh : shapes)
    for (int M : {1, 8}) {
      Chain ch{&sh, M, {}, {}};
      for (const Cfg& c : cfgs)
        for (const Op& op : layer_ops(sh)) {
          // bn16 leaves SwiGLU's tiles as the plan has them (16 rows would be 8 gate + 8 up).
          SmallGemmLimits limits = c.limits;
          if (op.epi == "swiglu") limits.bn = 0;
          ch.tiles.push_back(small_gemm_tiling(op.N, op.K, M, op.epi == "swiglu", false, limits));
          ch.names.push_back(ch.tiles.back().instance(op.epi, M, op.N, op.K));
        }
      chains.push_back(std::move(ch));
    }
  std::vector<std::future<std::unique_ptr<Module>>> modules;
  for (const Chain& ch : chains)
    modules.push_back(
        std::async(std::launch::async, [&ch] { return std::make_unique<Module>(ch.names); }));
  for (std::size_t chi = 0; chi < chains.size(); ++chi) {
    {
      const Shape& sh = *chains[chi].sh;
      const int M = chains[chi].M;
      const auto ops = layer_ops(sh);
      const std::vector<SmallGemmTiling>& tiles = chains[chi].tiles;
      const std::vector<std::string>& names = chains[chi].names;
      const std::unique_ptr<Module> module = modules[chi].get();  // get() hands the module over
      Module& mod = *module;
      double layer_bytes = 0;
      for (const Op& op : ops) layer_bytes += 2.0 * op.rows * op.K;
      const int copies = std::max(2, static_cast<int>((400ull << 20) / layer_bytes) + 1);
      std::vector<std::vector<void*>> w(copies, std::vector<void*>(4));
      for (auto& layer : w)
        for (int k = 0; k < 4; ++k) {
          const std::size_t bytes = static_cast<std::size_t>(ops[k].rows) * ops[k].K * 2;
          check(cudaMalloc(&layer[k], bytes), "alloc");
          fill(layer[k], bytes);
        }
      void *a_h, *act, *qkv, *x;
      check(cudaMalloc(&a_h, static_cast<std::size_t>(M) * sh.H * 2), "alloc");
      fill(a_h, static_cast<std::size_t>(M) * sh.H * 2);
      check(cudaMalloc(&act, static_cast<std::size_t>(M) * sh.I * 2), "alloc");
      fill(act, static_cast<std::size_t>(M) * sh.I * 2);
      check(cudaMalloc(&qkv, static_cast<std::size_t>(M) * sh.QKV * 2), "alloc");
      check(cudaMalloc(&x, static_cast<std::size_t>(M) * sh.H * 4), "alloc");
      cudaMemset(x, 0, static_cast<std::size_t>(M) * sh.H * 4);
      void* outs[4] = {qkv, x, act, x};
      for (std::size_t ci = 0; ci < std::size(cfgs); ++ci) {
        std::vector<void*> a_maps(4);
        std::vector<std::vector<void*>> w_maps(copies, std::vector<void*>(4));
        for (int k = 0; k < 4; ++k) {
          const SmallGemmTiling& t = tiles[ci * 4 + k];
          a_maps[k] = device_map(k == 3 ? act : a_h, M, ops[k].K, t.a_box);
          for (int c = 0; c < copies; ++c)
            w_maps[c][k] = device_map(w[c][k], ops[k].rows, ops[k].K, t.w_box());
        }
        auto launch = [&](int i) {
          const int k = i % 4, c = (i / 4) % copies;
          const SmallGemmTiling& t = tiles[ci * 4 + k];
          mod.launch(names[ci * 4 + k], dim3(t.tiles_m, t.tiles_n), kSmallGemmThreads,
                     {a_maps[k], w_maps[c][k], outs[k]}, t.smem(), i % (4 * kLayers) != 0);
        };
        const double us = median_us(launch, 20, 4 * kLayers, 4 * kLayers);
        const double layer_us = 4 * us;
        char label[64], shape[64];
        std::snprintf(label, sizeof label, "layer GEMMs %s %s", sh.name, cfgs[ci].label);
        std::snprintf(shape, sizeof shape, "M=%d (%d+%d+%d+%d st)", M, tiles[ci * 4].stages,
                      tiles[ci * 4 + 1].stages, tiles[ci * 4 + 2].stages, tiles[ci * 4 + 3].stages);
        std::printf("%-34s | %-26s | %9.1f | %8.0f | %6.1f\n", label, shape, layer_us,
                    layer_bytes / layer_us / 1e3, 100.0 * layer_bytes / layer_us / 1e3 / copy_gbs);
        for (void* p : a_maps) cudaFree(p);
        for (auto& l : w_maps)
          for (void* p : l) cudaFree(p);
      }
      for (auto& layer : w)
        for (void* p : layer) cudaFree(p);
      for (void* p : {a_h, act, qkv, x}) cudaFree(p);
    }
  }
}

// --gemm-m: the decode GEMMs of a bucket of 64-256 rows on both GEMMs the lowering may give it
// (docs/performance.md, open question "Throughput at batch 256"). They give every row the same
// bits (GPU test GpuKernels.SmallGemmMatchesPrefillGemmBitForBit), so the choice is speed only:
//   small: gemm_small_* as the plan tiles a decode bucket of M rows (small_gemm_tiling: its
//   tiles, clusters, warpgroups and stages; the weight from the one-token layer's slot image
//   where its boxes are whole);
//   prefill: gemm_prefill_* as the plan runs a prefill bucket of M tokens (128-row tiles of 256
//   weight rows, SwiGLU 128 gate + 128 up, on the persistent grid prefill_gemm_grid; the slot
//   image's box prefill_image_box_rows; outputs through maps);
// each with the epilogue the plan gives the projection (qkv bf16, o and down the residual add
// into f32 x, gate/up SwiGLU). Each figure as a step runs the kernel: 8 launches back to back,
// each on another copy of the weights, all but the first with PDL; the median of 30 such runs.
// TFLOP/s count 2 · M · N · K (N: the weight's rows, SwiGLU's gate and up together); "floor" is
// those FLOPs at `matmul_tflops` (--matmul-tflops R: torch.matmul's rate on the same card; 0:
// none printed). A "layer" row per model and M sums its four GEMMs.
struct GemmMShape {
  const char* model;
  const char* name;  // the layer weight (layer_weight_image's name)
  const char* epi;
  int N, K;  // N: output columns (SwiGLU: I, of a [2I, K] weight)
};
constexpr GemmMShape kGemmMShapes[] = {
    {"8B", "qkv", "bf16", 6144, 4096},        {"8B", "o", "residual", 4096, 4096},
    {"8B", "gate_up", "swiglu", 14336, 4096}, {"8B", "down", "residual", 4096, 14336},
    {"1B", "qkv", "bf16", 3072, 2048},        {"1B", "o", "residual", 2048, 2048},
    {"1B", "gate_up", "swiglu", 8192, 2048},  {"1B", "down", "residual", 2048, 8192}};
constexpr int kGemmMRows[] = {64, 128, 192, 256};

// One shape at M rows on both GEMMs, launched as lowering.cpp's choose_gemm launches them.
struct GemmMCase {
  const GemmMShape* s = nullptr;
  int M = 0;
  WeightImage img;  // the one-token layer's slot image of the weight (bn 0: none)
  SmallGemmTiling small;
  std::string small_instance;
  int prefill_cols = 0, prefill_box = 0, prefill_grid = 0;
  std::string prefill_instance;
  bool swiglu() const { return std::string(s->epi) == "swiglu"; }
  int w_rows() const { return swiglu() ? 2 * s->N : s->N; }
  double flop() const { return 2.0 * M * w_rows() * s->K; }
};

GemmMCase gemm_m_case(const GemmMShape& s, int M) {
  GemmMCase c;
  c.s = &s;
  c.M = M;
  const PersistentLayerTiling lt = std::string(s.model) == "8B"
                                       ? decode_layer_tiling(4096, 6144, 4096, 14336, 128, false)
                                       : decode_layer_tiling(2048, 3072, 2048, 8192, 64, false);
  c.img = layer_weight_image(lt, s.name);
  c.small = small_gemm_tiling(s.N, s.K, M, c.swiglu()).reading(c.img);
  c.small_instance = c.small.instance(s.epi, M, s.N, s.K);
  c.prefill_cols = c.swiglu() ? 128 : 256;
  c.prefill_box = prefill_image_box_rows(c.img, c.prefill_cols);
  c.prefill_grid = prefill_gemm_grid(M, s.N, c.prefill_cols);
  c.prefill_instance =
      "telos_kernels::gemm_prefill_" + std::string(s.epi) + "<" + I(M) + ", " + I(s.N) + ", " +
      I(s.K) +
      (c.prefill_box > 0 ? ", " + I(c.img.half_rows()) + ", " + I(c.prefill_box) : std::string()) +
      ">";
  return c;
}

// Median µs of one launch of `name` in chains of kBatch (PDL after the first), the weight map
// rotating over `w_maps` (one a weight copy).
double time_gemm_chain(Module& mod, const std::string& name, dim3 grid, int threads, int smem,
                       const void* a_map, const std::vector<void*>& w_maps, const void* out) {
  return median_us(
      [&](int i) {
        mod.launch(name, grid, threads, {a_map, w_maps[i % w_maps.size()], out}, smem,
                   i % kBatch != 0);
      },
      30, 5, kBatch);
}

// Times case `c` on both GEMMs over `w` (the weight's copies), A `a` [M, K] bf16 and output `y`
// (room for [M, N] f32): {µs small, µs prefill}.
std::pair<double, double> time_gemm_m_case(Module& mod, const GemmMCase& c,
                                           const std::vector<void*>& w, void* a, void* y) {
  const GemmMShape& s = *c.s;
  const int halves = c.swiglu() ? 2 : 1;
  const SmallGemmTiling& t = c.small;
  std::vector<void*> small_w, prefill_w;
  for (void* p : w) {
    small_w.push_back(t.image_rows > 0 ? device_image_map(p, c.w_rows(), s.K, t.image_rows * halves,
                                                          halves, t.image_box)
                                       : device_map(p, c.w_rows(), s.K, t.w_box()));
    prefill_w.push_back(c.prefill_box > 0 ? device_image_map(p, c.w_rows(), s.K, c.img.bn,
                                                             c.img.halves, c.prefill_box)
                                          : device_map(p, c.w_rows(), s.K, c.prefill_cols));
  }
  void* small_a = device_map(a, c.M, s.K, t.a_box);
  void* prefill_a = device_map(a, c.M, s.K, 128);
  void* prefill_out = std::string(s.epi) == "residual"
                          ? device_map(y, c.M, s.N, 64, hexel::TmaDtype::F32)
                          : device_map(y, c.M, s.N, 64);
  const double small_us = time_gemm_chain(mod, c.small_instance, dim3(t.tiles_m, t.tiles_n),
                                          t.threads(), t.smem(), small_a, small_w, y);
  const double prefill_us =
      time_gemm_chain(mod, c.prefill_instance, dim3(c.prefill_grid), kPrefillGemmThreads,
                      prefill_gemm_smem(c.prefill_box), prefill_a, prefill_w, prefill_out);
  for (void* p : small_w) cudaFree(p);
  for (void* p : prefill_w) cudaFree(p);
  for (void* p : {small_a, prefill_a, prefill_out}) cudaFree(p);
  return {small_us, prefill_us};
}

// One row of --gemm-m's table; N, K and the prefill CTAs 0 (the layer rows) print as "-".
void print_gemm_m_row(const std::string& label, int M, int N, int K, const std::string& tiles,
                      double small_us, int prefill_ctas, double prefill_us, double flop,
                      double matmul_tflops) {
  auto dash = [](int v) { return v > 0 ? I(v) : std::string("-"); };
  char floor[16] = "-";
  if (matmul_tflops > 0) std::snprintf(floor, sizeof floor, "%.1f", flop / matmul_tflops / 1e6);
  std::printf(
      "%-20s | %3d | %6s | %5s | %-22s | %8.1f | %4s | %10.1f | %7.0f | %7.0f | %6.3f | "
      "%8s\n",
      label.c_str(), M, dash(N).c_str(), dash(K).c_str(), tiles.c_str(), small_us,
      dash(prefill_ctas).c_str(), prefill_us, flop / small_us / 1e6, flop / prefill_us / 1e6,
      small_us / prefill_us, floor);
}

void bench_gemm_m(double matmul_tflops) {
  std::vector<GemmMCase> cases;
  for (const GemmMShape& s : kGemmMShapes)
    for (int M : kGemmMRows) cases.push_back(gemm_m_case(s, M));
  std::vector<std::string> names;
  for (const GemmMCase& c : cases) {
    names.push_back(c.small_instance);
    names.push_back(c.prefill_instance);
  }
  Module mod(names);
  std::printf("\n%-20s | %3s | %6s | %5s | %-22s | %8s | %4s | %10s | %7s | %7s | %6s | %8s\n",
              "gemm-m GEMM", "M", "N", "K", "small tiles", "small us", "CTAs", "prefill us",
              "small TF", "pref TF", "s/p", "floor us");
  // Per (model, M): the layer's four GEMMs summed.
  std::map<std::pair<std::string, int>, std::array<double, 3>> layer;  // small us, prefill us, flop
  for (const GemmMShape& s : kGemmMShapes) {
    const int w_rows = std::string(s.epi) == "swiglu" ? 2 * s.N : s.N;
    const std::size_t wbytes = static_cast<std::size_t>(w_rows) * s.K * 2;
    std::vector<void*> w(std::max<int>(2, static_cast<int>((400ull << 20) / wbytes) + 1));
    for (auto& p : w) {
      check(cudaMalloc(&p, wbytes), "alloc");
      fill(p, wbytes);
    }
    const int max_m = *std::max_element(std::begin(kGemmMRows), std::end(kGemmMRows));
    void *a, *y;
    check(cudaMalloc(&a, static_cast<std::size_t>(max_m) * s.K * 2), "alloc");
    fill(a, static_cast<std::size_t>(max_m) * s.K * 2);
    check(cudaMalloc(&y, static_cast<std::size_t>(max_m) * s.N * 4), "alloc");
    check(cudaMemset(y, 0, static_cast<std::size_t>(max_m) * s.N * 4), "memset");
    for (const GemmMCase& c : cases) {
      if (c.s != &s) continue;
      const auto [small_us, prefill_us] = time_gemm_m_case(mod, c, w, a, y);
      const SmallGemmTiling& t = c.small;
      const std::string tiles = "bn" + I(t.bn) + " st" + I(t.stages) + " cl" + I(t.cluster) +
                                " wg" + I(t.warpgroups) + (t.image_rows > 0 ? " img" : "");
      print_gemm_m_row(std::string(s.model) + " " + s.name + " (" + s.epi + ")", c.M, w_rows, s.K,
                       tiles, small_us, c.prefill_grid, prefill_us, c.flop(), matmul_tflops);
      auto& sum = layer[{s.model, c.M}];
      sum[0] += small_us;
      sum[1] += prefill_us;
      sum[2] += c.flop();
    }
    for (void* p : w) cudaFree(p);
    cudaFree(a);
    cudaFree(y);
  }
  for (const auto& [key, sum] : layer)
    print_gemm_m_row(key.first + " layer", key.second, 0, 0, "4 GEMMs", sum[0], 0, sum[1], sum[2],
                     matmul_tflops);
}

// Attention, HQ 32, HKV 8, D 128, page 16, the plan's split and partial slots for context C.
void bench_attention(bool sweep, double copy_gbs) {
  constexpr int HQ = 32, HKV = 8, D = 128, PAGE = 16;
  struct Attn {
    int C, MAXP, split, nsplit;
    long long page_elems;
    bool ahead = false;                        // attn_split's LOAD_AHEAD
    bool pages = attn_split_page_ahead(PAGE);  // and PAGE_AHEAD, as the plan takes it
    int blocks = 0;                            // blocks an SM (0: the kernel's default)
    int bulk = 0;                              // BULK ring slots a warp (no PAGE_AHEAD), 0: none
    bool early = false;  // EARLY: the PDL wait inside each item (one token a tile)
    std::string kv{};    // the cache's element format (kv_format): "" for bf16
    AttnSplitKernel kernel(int tpt) const {
      return {HQ,  HKV,   D,     PAGE,   MAXP, page_elems,        split, nsplit,
              tpt, ahead, pages, blocks, bulk, early && tpt == 1, kv};
    }
    std::string split_kernel(int tpt) const { return kernel(tpt).instance(); }
    int smem() const { return kernel(1).smem(); }
    Attn with_blocks(int b) const {  // the same kernel at b blocks an SM
      Attn a = *this;
      a.blocks = b;
      return a;
    }
    // The same attention as the plan loads it in a decode bucket of `rows` tokens
    // (attn_split_for_rows).
    Attn planned_for(int rows) const {
      const AttnSplitKernel k = attn_split_for_rows(kernel(1), rows, true);
      Attn a = *this;
      a.ahead = k.ahead, a.pages = k.pages, a.blocks = k.blocks, a.bulk = k.bulk, a.early = k.early;
      return a;
    }
    Attn with_early(bool e) const {
      Attn a = *this;
      a.early = e;
      return a;
    }
    // The same attention through BULK ring slots a warp at b blocks an SM.
    Attn with_bulk(int slots, int b) const {
      Attn a = with_blocks(b);
      a.pages = false;
      a.bulk = slots;
      return a;
    }
    std::string combine_kernel() const {
      return "telos_kernels::attn_combine<" + I(HQ) + ", " + I(D) + ", " + I(nsplit) + ", " +
             I(split) + ">";
    }
  };
  // attn_split through BULK ring slots (not with --sweep), {slots a warp, blocks an
  // SM}: 2 slots at three blocks (the shared memory's limit at head dim 128), 3 at two, 4 (128 KB:
  // one block an SM).
  constexpr std::pair<int, int> kBulkVariants[] = {{2, 3}, {3, 2}, {4, 2}};
  auto attn = [](int C) {
    return Attn{C, C / PAGE, kAttnSplit, attn_partial_slots(C), 2LL * HKV * PAGE * D};
  };
  // Device buffers of `rows` query tokens at positions `hpos` of sequences `hseq`, each with
  // MAXP pages of random K/V (pages scattered over the pool).
  struct AttnBuffers {
    void *kv = nullptr, *q = nullptr, *po = nullptr, *pml = nullptr, *out = nullptr, *pos = nullptr,
         *seq = nullptr, *pt = nullptr;
    std::size_t layer_bytes = 0;  // one copy of the K/V pages (a layer's)
    // `copies` copies of the pages, as consecutive layers (kv_layer(c)).
    AttnBuffers(const Attn& at, const std::vector<int>& hpos, const std::vector<int>& hseq,
                int seqs, int copies = 1) {
      const std::size_t rows = hpos.size(), pages = static_cast<std::size_t>(seqs) * at.MAXP;
      layer_bytes = pages * at.page_elems * 2;
      check(cudaMalloc(&kv, layer_bytes * copies), "alloc");
      fill(kv, layer_bytes * copies);
      check(cudaMalloc(&q, rows * HQ * D * 4), "alloc");
      cudaMemset(q, 0x3c, rows * HQ * D * 4);
      check(cudaMalloc(&po, rows * HQ * at.nsplit * D * 4), "alloc");
      check(cudaMalloc(&pml, rows * HQ * at.nsplit * 2 * 4), "alloc");
      check(cudaMalloc(&out, rows * HQ * D * 2), "alloc");
      std::vector<int> hpt(pages);
      for (std::size_t i = 0; i < pages; ++i) hpt[i] = static_cast<int>((i * 7919) % pages);
      check(cudaMalloc(&pos, rows * 4), "alloc");
      check(cudaMalloc(&seq, rows * 4), "alloc");
      check(cudaMalloc(&pt, pages * 4), "alloc");
      cudaMemcpy(pos, hpos.data(), rows * 4, cudaMemcpyHostToDevice);
      cudaMemcpy(seq, hseq.data(), rows * 4, cudaMemcpyHostToDevice);
      cudaMemcpy(pt, hpt.data(), pages * 4, cudaMemcpyHostToDevice);
    }
    ~AttnBuffers() {
      for (void* p : {kv, q, po, pml, out, pos, seq, pt}) cudaFree(p);
    }
    void* kv_layer(int c) const { return static_cast<char*>(kv) + layer_bytes * c; }
  };
  auto attn_row = [&](const char* label, const char* shape, double us, double bytes) {
    std::printf("%-34s | %-26s | %9.1f | %8.0f | %6.1f\n", label, shape, us, bytes / us / 1e3,
                100.0 * bytes / us / 1e3 / copy_gbs);
  };
  // µs a layer of `a`'s split + combine for `rows` tokens as a step's graph chains them: layers
  // back to back, each on the next of `copies` copies of the K/V pages, with PDL (but each
  // kBatch's first split), `z` blocks along the slots.
  auto attn_chain_us = [&](Module& mod, const Attn& a, const AttnBuffers& m, int rows, int z,
                           int copies) {
    return median_us(
        [&](int i) {
          mod.launch(a.split_kernel(1), dim3(rows, HKV, z), 128,
                     {m.q, m.pos, m.seq, m.pt, m.kv_layer(i % copies), m.po, m.pml}, a.smem(),
                     i % kBatch != 0);
          mod.launch(a.combine_kernel(), dim3(rows, HQ), D, {m.po, m.pml, m.pos, m.out}, 0, true);
        },
        30, 5, kBatch);
  };

  // Decode: batch B, every sequence at context C. "alone": one split + combine at a time on an
  // idle stream; the others as a step's graph runs them: 8 layers back to back, each on another
  // copy of the K/V pages (400 MB or more in all, so L2 does not serve them), with PDL, at the
  // plan's split (positions per split, partial slots) and at other splits.
  for (int C : {4096, 32768}) {
    const Attn plan = attn(C);
    std::vector<std::pair<std::string, Attn>> vars{{"", plan}};
    Attn ahead = plan;
    ahead.ahead = true;
    vars.push_back({" load-ahead", ahead});
    vars.push_back({" load-ahead early", ahead.with_early(true)});
    vars.push_back({" 4 blocks", plan.with_blocks(4)});
    if (!sweep)
      for (auto [slots, blocks] : kBulkVariants)
        vars.push_back({" bulk" + I(slots), plan.with_bulk(slots, blocks)});
    vars.push_back({" bulk" + I(kAttnSplitBulk) + " early",
                    plan.with_bulk(kAttnSplitBulk, 3).with_early(true)});
    // Four slots a warp (one block an SM): at 4k and batch 1 a warp's four chunks of its split
    // are all in flight before the wait.
    vars.push_back({" bulk4 early", plan.with_bulk(4, 2).with_early(true)});
    for (auto [split, nsplit] : {std::pair{64, 32}, std::pair{128, 32}, std::pair{512, 32}}) {
      Attn v = plan;
      v.split = split;
      v.nsplit = std::min(nsplit, (C + split - 1) / split);
      vars.push_back({" split" + I(split) + "x" + I(v.nsplit), v});
    }
    std::vector<std::string> names;
    for (const auto& [label, v] : vars) {
      names.push_back(v.split_kernel(1));
      names.push_back(v.combine_kernel());
    }
    // The plan's kernel for each batch (attn_split_for_rows) on the engine's grid
    // (attn_grid_slots), at the default split and at the serving config's attention_split 512.
    Attn plan512 = plan;
    plan512.split = kAttnSplitLong;
    plan512.nsplit = attn_partial_slots(C, kAttnSplitLong);
    // And the plan's kernel on an e4m3 cache (scales 1: the same instructions as any other
    // scale), whose bytes are half the bf16 cache's.
    Attn plan_e4m3 = plan;
    plan_e4m3.kv = kv_format(true, 1.0f, 1.0f);
    // The same at 512 positions a split: a split's bytes on an e4m3 cache are then a bf16 256's.
    Attn plan_e4m3_512 = plan512;
    plan_e4m3_512.kv = plan_e4m3.kv;
    // The e4m3 cache through BULK ring slots a warp at b blocks an SM, {slots, b} (a slot holds
    // half a bf16 page's bytes, so twice the slots fit), EARLY as the plan's decode buckets here.
    constexpr std::pair<int, int> kE4m3BulkVariants[] = {{2, 3}, {4, 3}, {6, 2}};
    auto e4m3_bulk = [&](int slots, int b) {
      return plan_e4m3.with_bulk(slots, b).with_early(true);
    };
    constexpr int kAttnBatches[] = {1, 16, 64};
    std::vector<std::string> plan_names = names;
    plan_names.push_back(plan512.combine_kernel());
    for (int B : kAttnBatches)
      for (const Attn& a : {plan, plan512, plan_e4m3, plan_e4m3_512})
        plan_names.push_back(a.planned_for(B).split_kernel(1));
    for (auto [slots, b] : kE4m3BulkVariants)
      plan_names.push_back(e4m3_bulk(slots, b).split_kernel(1));
    Module mod(plan_names);
    for (int B : kAttnBatches) {
      std::vector<int> hpos(B, C - 1), hseq(B);
      for (int b = 0; b < B; ++b) hseq[b] = b;
      const double bytes = static_cast<double>(B) * C * HKV * D * 2 * 2;
      const int copies = std::max(1, static_cast<int>(std::ceil((400 << 20) / bytes)));
      Attn widest = plan;  // partials for the most slots of any variant
      for (const auto& v : vars) widest.nsplit = std::max(widest.nsplit, v.second.nsplit);
      const AttnBuffers m(widest, hpos, hseq, B, copies);
      char shape[64];
      std::snprintf(shape, sizeof shape, "B=%d ctx=%d", B, C);
      // The plan's kernels one split + combine at a time on an idle stream, then every variant
      // chained with PDL.
      attn_row("attn_split+combine alone", shape, median_us([&](int i) {
                 mod.launch(plan.split_kernel(1), dim3(B, HKV, plan.nsplit), 128,
                            {m.q, m.pos, m.seq, m.pt, m.kv_layer(i % copies), m.po, m.pml},
                            plan.smem());
                 mod.launch(plan.combine_kernel(), dim3(B, HQ), D, {m.po, m.pml, m.pos, m.out});
               }),
               bytes);
      for (const auto& [label, at] : vars)
        attn_row(("attn_split+combine PDL" + label).c_str(), shape,
                 attn_chain_us(mod, at, m, B, at.nsplit, copies), bytes);
      for (const Attn& base : {plan, plan512}) {
        const Attn a = base.planned_for(B);
        const int z = attn_grid_slots(B, HKV, a.nsplit);
        const std::string label = "attn_split+combine PDL plan s" + I(a.split) + " z=" + I(z);
        attn_row(label.c_str(), shape, attn_chain_us(mod, a, m, B, z, copies), bytes);
      }
      {  // on the bf16 pages' copies, each read for its first half's bytes
        for (const Attn& base : {plan_e4m3, plan_e4m3_512}) {
          const Attn a = base.planned_for(B);
          const int z = attn_grid_slots(B, HKV, a.nsplit);
          const std::string label =
              "attn_split+combine PDL plan e4m3 s" + I(a.split) + " z=" + I(z);
          attn_row(label.c_str(), shape, attn_chain_us(mod, a, m, B, z, copies), bytes / 2);
        }
        const Attn a = plan_e4m3.planned_for(B);
        const int z = attn_grid_slots(B, HKV, a.nsplit);
        for (auto [slots, b] : kE4m3BulkVariants) {
          const std::string bulk_label =
              "attn_split+combine PDL e4m3 bulk" + I(slots) + " z=" + I(z);
          attn_row(bulk_label.c_str(), shape,
                   attn_chain_us(mod, e4m3_bulk(slots, b), m, B, z, copies), bytes / 2);
        }
      }
    }
  }

  // Decode in a model of 32 partial slots (max_seq_len 8192 or more, as bench_suite's artifacts),
  // batches 16-256 at contexts of 160 positions (bench_suite's decode runs: 32-token prompts, 256
  // generated), 576 (its throughput runs: 512-token prompts and half of the 128 outputs) and 4096:
  // attn_split's grid along the slots at 32 (a block a slot, most of them empty at 576) and at the
  // plan's attn_grid_slots (a block runs slots z, z + S, ...); with --sweep at every power of two
  // from 32 down to 1. 8 layers back to back with PDL, as above; the bytes are the K/V read.
  for (int C : {160, 576, 4096}) {
    Attn at = attn(C);
    at.nsplit = attn_partial_slots(8192);
    const Attn four = at.with_blocks(4);
    // Also through BULK ring slots (not with --sweep), at the plan's slots.
    std::vector<std::pair<std::string, Attn>> bulks;
    if (!sweep)
      for (auto [slots, blocks] : kBulkVariants)
        bulks.push_back({" bulk" + I(slots), at.with_bulk(slots, blocks)});
    // And the plan's kernels at the serving config's attention_split 512 (16 slots): half the
    // items at ctx 576 (2 a row instead of 3), so half their fixed chains (Q, page ids, the first
    // chunk, the warps' merge, the partials) for the same chunks (docs/performance.md).
    Attn at512 = at;
    at512.split = kAttnSplitLong;
    at512.nsplit = attn_partial_slots(8192, kAttnSplitLong);
    constexpr int kBatches[] = {16, 64, 256};
    std::vector<std::string> names = {at.combine_kernel(), at512.combine_kernel()};
    auto add_name = [&](const std::string& n) {
      if (std::find(names.begin(), names.end(), n) == names.end()) names.push_back(n);
    };
    for (const Attn& a : {at, four}) add_name(a.split_kernel(1));
    for (int B : kBatches) {
      for (const Attn& a : {at, at512}) add_name(a.planned_for(B).split_kernel(1));
      add_name(at.planned_for(B).with_early(false).split_kernel(1));
    }
    for (const auto& b : bulks) add_name(b.second.split_kernel(1));
    Module mod(names);
    for (int B : kBatches) {
      std::vector<int> hpos(B, C - 1), hseq(B);
      for (int b = 0; b < B; ++b) hseq[b] = b;
      const double bytes = static_cast<double>(B) * C * HKV * D * 2 * 2;
      const int copies = std::max(1, static_cast<int>(std::ceil((400 << 20) / bytes)));
      const AttnBuffers m(at, hpos, hseq, B, copies);
      char shape[64];
      std::snprintf(shape, sizeof shape, "B=%d ctx=%d of 32 slots", B, C);
      const int plan_slots = attn_grid_slots(B, HKV, at.nsplit);
      std::vector<int> zs = {plan_slots};
      if (sweep) {
        for (int z = at.nsplit; z >= 1; z /= 2)
          if (z != plan_slots) zs.push_back(z);
      } else if (plan_slots != at.nsplit) {
        zs.insert(zs.begin(), at.nsplit);
      }
      // The plan's kernel (attn_split_for_rows: four blocks an SM or the BULK ring at these
      // rows), and at the plan's slots the lanes' own loads at the other block count.
      const Attn planned = at.planned_for(B);
      const bool four_plan = planned.blocks == 4, bulk_plan = planned.bulk > 0;
      const Attn& other = four_plan ? at : four;
      auto row = [&](const Attn& a, int slots, const std::string& note) {
        const std::string label = "attn_split+combine PDL z=" + I(slots) + note;
        attn_row(label.c_str(), shape, attn_chain_us(mod, a, m, B, slots, copies), bytes);
      };
      for (int slots : zs) row(planned, slots, slots == plan_slots ? " plan" : "");
      // The plan's kernel waiting at entry (without EARLY).
      row(planned.with_early(false), plan_slots, " plan, wait at entry");
      if (bulk_plan) row(at, plan_slots, " lanes");  // the lanes' own loads, not the ring
      row(other, plan_slots, four_plan ? " 3 blocks" : " 4 blocks");
      for (const auto& [label, b] : bulks)
        if (!(bulk_plan && b.bulk == kAttnSplitBulk)) row(b, plan_slots, label);
      if (!sweep) {
        // The ring at fewer blocks along the slots: each block's items stream through one ring,
        // the next item's first chunks in flight behind the current one's.
        for (int z = plan_slots / 2; z >= std::max(1, plan_slots / 4); z /= 2)
          row(at.with_bulk(kAttnSplitBulk, 3), z, " bulk" + I(kAttnSplitBulk));
        row(at512.planned_for(B), attn_grid_slots(B, HKV, at512.nsplit), " plan split512");
      }
    }
  }

  // Prefill: one sequence, a 512-token chunk at positions 7680..8191 (context 8192), split +
  // combine as a prefill bucket launches them, one token per block (TPT 1) and in tiles of
  // attn_tokens_per_tile's 4 tokens. Bytes: the K/V a block reads, positions 0 .. the last of its
  // tile, per tile and KV head (TPT 1 reads the context once per token, TPT 4 once per 4 tokens).
  // The two outputs must be the same bits.
  {
    constexpr int C = 8192, T = 512;
    const Attn at = attn(C), four = at.with_blocks(4);
    const int tiled = attn_tokens_per_tile(true, T, HQ / HKV);
    const std::string ck = at.combine_kernel();
    Module mod({at.split_kernel(1), at.split_kernel(tiled), four.split_kernel(tiled), ck});
    std::vector<int> hpos(T), hseq(T, 0);
    for (int t = 0; t < T; ++t) hpos[t] = C - T + t;
    const AttnBuffers m(at, hpos, hseq, 1);
    std::vector<unsigned short> first_out;
    for (auto [tpt, a] : {std::pair<int, const Attn*>{1, &at}, {tiled, &at}, {tiled, &four}}) {
      const std::string sk = a->split_kernel(tpt);
      const double us = median_us([&](int) {
        mod.launch(sk, dim3(T / tpt, HKV, at.nsplit), 128,
                   {m.q, m.pos, m.seq, m.pt, m.kv, m.po, m.pml});
        mod.launch(ck, dim3(T, HQ), D, {m.po, m.pml, m.pos, m.out});
      });
      double bytes = 0;
      for (int t0 = 0; t0 < T; t0 += tpt)
        bytes += static_cast<double>(hpos[t0 + tpt - 1] + 1) * HKV * D * 2 * 2;
      std::vector<unsigned short> o(static_cast<std::size_t>(T) * HQ * D);
      check(cudaMemcpy(o.data(), m.out, o.size() * 2, cudaMemcpyDeviceToHost), "download");
      if (first_out.empty()) first_out = o;
      char label[64], shape[64];
      std::snprintf(label, sizeof label, "attn prefill D128 GQA4 TPT=%d%s%s", tpt,
                    a->blocks ? " 4 blocks" : "", tpt == 1 || o == first_out ? "" : " DIFF");
      std::snprintf(shape, sizeof shape, "T=%d pos %d..%d", T, C - T, C - 1);
      attn_row(label, shape, us, bytes);
    }
  }
}

// The arguments after the mode: only --gemm-m takes one, `--matmul-tflops R` (R > 0, TFLOP/s;
// `tflops` stays 0 without it). On anything else, says what was expected and returns false.
bool parse_matmul_tflops(int argc, char** argv, double& tflops) {
  if (argc <= 2) return true;
  if (std::string(argv[1]) != "--gemm-m" || std::string(argv[2]) != "--matmul-tflops") {
    std::fprintf(stderr,
                 "telos-kernel-bench: unexpected argument \"%s\" after \"%s\" (only --gemm-m "
                 "takes one: --matmul-tflops R)\n",
                 argv[2], argv[1]);
    return false;
  }
  const char* value = argc == 4 ? argv[3] : "";
  char* end = nullptr;
  tflops = std::strtod(value, &end);
  if (argc != 4 || end == value || *end != '\0' || !std::isfinite(tflops) || tflops <= 0) {
    std::fprintf(stderr,
                 "telos-kernel-bench: --matmul-tflops: expected one positive number of TFLOP/s "
                 "after it, got %s\n",
                 argc == 4   ? ("\"" + std::string(value) + "\"").c_str()
                 : argc == 3 ? "nothing"
                             : "more than one argument");
    return false;
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  double matmul_tflops = 0;
  if (!parse_matmul_tflops(argc, argv, matmul_tflops)) return 2;
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
    std::printf("telos-kernel-bench: no CUDA GPU\n");
    return 0;
  }
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // every row reaches the log before a later failure
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, 0);
  std::printf("%s, %d SMs\n", prop.name, prop.multiProcessorCount);
  const double copy_gbs = bench_copy();
  if (mode == "--read-floor") {
    bench_read_floor(prop, copy_gbs);
  } else if (mode == "--exchange") {
    bench_exchange(prop, copy_gbs);
  } else if (mode == "--sample") {
    bench_sample(copy_gbs);
  } else if (mode == "--decode-layer") {
    bench_decode_layer(prop, copy_gbs);
  } else if (mode == "--gemm") {
    bench_decode_gemms({256}, false, true, false, copy_gbs);
  } else if (mode == "--small-rows") {
    bench_decode_gemms({1, 8, 16, 32, 48, 64}, false, false, true, copy_gbs);
  } else if (mode == "--attention") {
    bench_attention(false, copy_gbs);
  } else if (mode == "--gemm-m") {
    bench_gemm_m(matmul_tflops);
  } else {  // every section; --sweep adds the sweeps' variants
    const bool sweep = mode == "--sweep";
    bench_sample(copy_gbs);
    bench_decode_layer(prop, copy_gbs);
    bench_decode_gemms({1, 8, 64, 256}, sweep, false, false, copy_gbs);
    bench_layer_gemms(copy_gbs);
    bench_attention(sweep, copy_gbs);
  }
  check(cudaGetLastError(), "bench");
  return 0;
}
