// Every kernel template against an f64 CPU reference on fresh random inputs, over shapes that
// include ragged ones (M not a multiple of the tile, contexts ending mid-page, padding rows),
// outputs poisoned first, plus bit-for-bit batch invariance. The modules are compiled for GPU 0's
// target (sm_90a or sm_100a): the portable kernels' tests run on both, the wgmma kernels' (the
// sm_100a kernels' Hopper twins among them) on sm_90 only, the tcgen05 kernels' on sm_100 only;
// each skips elsewhere saying why.
#include <algorithm>
#include <chrono>
#include <memory>
#include <numeric>
#include <optional>
#include <set>
#include <thread>
#include <tuple>

#include "codegen/compile_cache.hpp"
#include "codegen/emit_source.hpp"
#include "codegen/kernel_plan.hpp"
#include "codegen/kernels/gemm_prefill_shape.cuh"
#include "codegen/kernels/gemm_small_sm100.cuh"
#include "codegen/nvrtc_driver.hpp"
#include "codegen/rope_table.hpp"
#include "executor/w8a8_reference.hpp"
#include "hexel/tensor_map_encode.h"
#include "support/dtype.hpp"
#include "support/qkv_layout.hpp"
#include "support/slot_image_map.hpp"
#include "test/codegen/gpu_test_support.hpp"

namespace telos::gpu_test {
namespace {

// Kernel instances compiled for GPU 0's target through codegen's NVRTC driver (cached under
// $TELOS_CACHE_DIR, so a second run, e.g. under compute-sanitizer, compiles nothing) and loaded
// from the cubin.
class TestModule {
 public:
  TestModule(const std::string& source, const std::vector<std::string>& instances) {
    // One module a hardware thread (codegen::compile_modules): the compiles, not the kernels, are
    // most of this binary's time on the GPU machine when the kernel cache is cold.
    const auto modules = codegen::compile_modules(
        source, gpu_target(), instances, codegen::CompileCache::default_root(),
        static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
    for (const codegen::CompiledModule& m : modules) {
      cudaLibrary_t lib = nullptr;
      if (cudaLibraryLoadData(&lib, m.cubin.data(), nullptr, nullptr, 0, nullptr, nullptr, 0) !=
          cudaSuccess)
        throw std::runtime_error("cannot load the test cubin");
      libs_.push_back(lib);
      for (const auto& [name, entry] : m.lowered) {
        cudaKernel_t k = nullptr;
        if (cudaLibraryGetKernel(&k, lib, entry.c_str()) != cudaSuccess)
          throw std::runtime_error("no kernel " + name);
        kernels_[name] = k;
      }
    }
  }
  ~TestModule() {
    for (cudaLibrary_t lib : libs_) cudaLibraryUnload(lib);
  }
  TestModule(const TestModule&) = delete;
  TestModule& operator=(const TestModule&) = delete;

  // Launches and waits; returns the first error.
  cudaError_t launch(const std::string& instance, dim3 grid, dim3 block, std::vector<const void*> args,
                     int dynamic_smem = 0) {
    std::vector<void*> params;
    for (auto& a : args) params.push_back(&a);
    const void* k = reinterpret_cast<const void*>(kernels_.at(instance));
    if (dynamic_smem > 48 * 1024) {
      const cudaError_t e = cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, dynamic_smem);
      if (e != cudaSuccess) return e;
    }
    cudaError_t e = cudaLaunchKernel(k, grid, block, params.data(), static_cast<std::size_t>(dynamic_smem), nullptr);
    if (e != cudaSuccess) return e;
    return cudaDeviceSynchronize();
  }
  // Queues a launch on `stream` and returns (kernels that meet other launches: the all-reduce).
  cudaError_t launch_on(cudaStream_t stream, const std::string& instance, dim3 grid, dim3 block,
                        std::vector<const void*> args) {
    std::vector<void*> params;
    for (auto& a : args) params.push_back(&a);
    return cudaLaunchKernel(reinterpret_cast<const void*>(kernels_.at(instance)), grid, block,
                            params.data(), 0, stream);
  }

 private:
  std::vector<cudaLibrary_t> libs_;
  std::map<std::string, cudaKernel_t> kernels_;
};

using bf16v = std::vector<std::uint16_t>;
using codegen::float_literal;

std::string source_with_rope(const std::vector<float>& inv_freq = {1.f}, int ranks = 1) {
  codegen::KernelPlan plan;
  plan.rope_inv_freq = inv_freq;
  plan.ranks = ranks;  // above 1 the source includes all_reduce.cuh
  return codegen::emit_source(plan);
}
std::string I(long long v) { return std::to_string(v); }

// What the tests that run on one target only test (their skips' reasons).
const char* const kWgmmaKernels = "wgmma kernels";
const char* const kTwinKernels = "the sm_100a kernels' Hopper twins (wgmma kernels)";
const char* const kTcgen05Kernels = "tcgen05 kernels";

// Which form of an sm_100a kernel a test runs: its Hopper twin (sm_90a: the same kernel body with
// wgmma for tcgen05, checked bit for bit against the Hopper kernels) or the tcgen05 kernel itself
// (sm_100a: checked against f64 and against the other sm_100a kernels that must give the same
// bits). One description of each check, run in both forms.
enum class Sm100Form { Twin, Tcgen05 };
const char* form_name(Sm100Form form) {
  return form == Sm100Form::Twin ? "twin" : "tcgen05";
}

// ---- embedding and RMSNorm -------------------------------------------------------------------

TEST(GpuKernels, EmbedAndRmsNorm) {
  TELOS_SKIP_WITHOUT_GPU();
  for (int H : {128, 1536, 2048, 4096}) {
    const int threads = codegen::kNormThreads, embed_threads = std::clamp(H / 8 / 32 * 32, 32, 256), V = 100,
              T = 5;
    const std::string eps = float_literal(1e-6);
    const std::string embed = "telos_kernels::embed_gather<" + I(H) + ", " + I(embed_threads) + ">";
    const std::string norm = "telos_kernels::rmsnorm<" + I(H) + ", " + eps + ", false>";
    const std::string gather = "telos_kernels::rmsnorm<" + I(H) + ", " + eps + ", true>";
    TestModule mod(source_with_rope(), {embed, norm, gather});
    std::vector<float> table_f, w = random_floats(H, 1.f);
    const bf16v table = random_bf16(static_cast<std::size_t>(V) * H, 1.f, table_f);
    // What the rows embed; the device gets row 2 as a fed token: -2, row 1 of `sampled`.
    const std::vector<int> tokens = {3, 99, 0, 3, 42}, fed = {3, 99, -2, 3, 42}, sampled = {7, 0};
    const std::vector<int> rows = {4, -1, 0};
    DeviceBuffer<std::uint16_t> d_table(table);
    DeviceBuffer<int> d_tokens(fed), d_sampled(sampled), d_rows(rows);
    DeviceBuffer<float> d_x(static_cast<std::size_t>(T) * H), d_w(w);
    DeviceBuffer<std::uint16_t> d_h(static_cast<std::size_t>(T) * H), d_hf(3 * static_cast<std::size_t>(H));
    CUDA_OK(mod.launch(embed, T, embed_threads, {d_table.get(), d_tokens.get(), d_sampled.get(), d_x.get()}));
    CUDA_OK(mod.launch(norm, T, threads, {d_x.get(), d_w.get(), nullptr, d_h.get()}));
    CUDA_OK(mod.launch(gather, 3, threads, {d_x.get(), d_w.get(), d_rows.get(), d_hf.get()}));
    const auto x = d_x.download();
    const auto h = d_h.download();
    const auto hf = d_hf.download();
    auto norm_ref = [&](int t) {
      double ss = 0;
      for (int i = 0; i < H; ++i) ss += double(table_f[tokens[t] * H + i]) * table_f[tokens[t] * H + i];
      const double inv = 1.0 / std::sqrt(ss / H + 1e-6);
      std::vector<double> r(H);
      for (int i = 0; i < H; ++i) r[i] = table_f[tokens[t] * H + i] * inv * w[i];
      return r;
    };
    for (int t = 0; t < T; ++t) {
      for (int i = 0; i < H; ++i) ASSERT_EQ(x[t * H + i], table_f[tokens[t] * H + i]);
      std::vector<float> row(H);
      for (int i = 0; i < H; ++i) row[i] = from_bf16(h[t * H + i]);
      EXPECT_LT(rel_l2(row, norm_ref(t)), 1e-2) << "H=" << H << " row " << t;
    }
    for (int r = 0; r < 3; ++r) {
      std::vector<float> row(H);
      for (int i = 0; i < H; ++i) row[i] = from_bf16(hf[r * H + i]);
      if (rows[r] < 0) {
        for (float v : row) ASSERT_EQ(v, 0.f);
      } else {
        EXPECT_LT(rel_l2(row, norm_ref(rows[r])), 1e-2) << "gathered row " << r;
      }
    }
  }
}

// ---- the small-M GEMM and its epilogues -------------------------------------------------------

// y = A · Wᵀ in f64 from the bf16 values.
std::vector<double> gemm_ref(const std::vector<float>& A, const std::vector<float>& W, int M, int N, int K) {
  std::vector<double> y(static_cast<std::size_t>(M) * N);
  for (int m = 0; m < M; ++m)
    for (int n = 0; n < N; ++n) {
      double s = 0;
      for (int k = 0; k < K; ++k) s += double(A[static_cast<std::size_t>(m) * K + k]) * W[static_cast<std::size_t>(n) * K + k];
      y[static_cast<std::size_t>(m) * N + n] = s;
    }
  return y;
}

// The greedy candidates on the host (common.cuh): per row and block of N / G logits, the largest,
// lowest index among equals (-0 as +0), as (order key << 32 | ~index); 0 where the block has only
// NaN and -inf.
std::vector<std::uint64_t> greedy_candidates(const std::vector<float>& logits, int rows, int n,
                                             int g) {
  std::vector<std::uint64_t> c(static_cast<std::size_t>(rows) * g, 0);
  for (int m = 0; m < rows; ++m)
    for (int j = 0; j < n; ++j) {
      const float v = logits[static_cast<std::size_t>(m) * n + j] + 0.f;
      if (!(v > -INFINITY)) continue;
      std::uint32_t u;
      std::memcpy(&u, &v, 4);
      const std::uint32_t key = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
      const std::uint64_t k =
          (static_cast<std::uint64_t>(key) << 32) | static_cast<std::uint32_t>(~j);
      std::uint64_t& best = c[static_cast<std::size_t>(m) * g + j / (n / g)];
      best = std::max(best, k);
    }
  return c;
}

// ---- the prefill GEMM (wgmma + TMA) and its epilogues ------------------------------------------

// What the plan gives the prefill GEMM (kernel_plan.cpp): 384 threads, its dynamic shared memory,
// a persistent grid of at most one CTA per SM, operands as tensor maps in device memory.
constexpr int kPrefillThreads = 384;
const int kPrefillSmem = codegen::prefill_gemm_smem(0);
int prefill_grid(int rows, int cols, int tile_cols) {
  return std::min(((rows + 127) / 128) * ((cols + tile_cols - 1) / tile_cols), 132);
}

// A [rows, cols] tensor map in device memory, as the executor builds one for `tmap:`: bf16 in
// box_rows x 64 boxes, or f32 (the residual stream x) in box_rows x 32 boxes.
class DeviceMap {
 public:
  DeviceMap(const void* base, int rows, int cols, int box_rows, hexel::TmaDtype dtype = hexel::TmaDtype::BF16)
      : buf_(std::vector<hexel::TensorMap>{hexel::encode_2d(
            dtype, base, static_cast<std::uint64_t>(rows), static_cast<std::uint64_t>(cols),
            static_cast<std::uint64_t>(cols) * hexel::tma_dtype_bytes(dtype), static_cast<std::uint32_t>(box_rows),
            128 / hexel::tma_dtype_bytes(dtype), hexel::Swizzle::B128)}) {}
  const void* get() const { return buf_.get(); }

 private:
  DeviceBuffer<hexel::TensorMap> buf_;
};

struct PrefillShape {
  int M, N, K;
};

// Every epilogue on ragged shapes (M, N and K not multiples of the 128 x 256 x 64 tile), outputs
// poisoned, plus 128 guard rows past M that must stay poisoned (stores clip at M).
TEST(GpuKernels, PrefillGemmEpilogues) {
  TELOS_SKIP_UNLESS_SM90(kWgmmaKernels);
  for (const PrefillShape& s : {PrefillShape{200, 384, 264}, PrefillShape{401, 520, 128},
                                PrefillShape{128, 128, 64}, PrefillShape{130, 136, 1000}}) {
    const std::string dims = "<" + I(s.M) + ", " + I(s.N) + ", " + I(s.K) + ">";
    const std::string res = "telos_kernels::gemm_prefill_residual" + dims;
    const std::string out = "telos_kernels::gemm_prefill_bf16" + dims;
    const std::string glu = "telos_kernels::gemm_prefill_swiglu" + dims;
    TestModule mod(source_with_rope(), {res, out, glu});
    const std::size_t MN = static_cast<std::size_t>(s.M) * s.N, guard = 128 * static_cast<std::size_t>(s.N);
    std::vector<float> Af, Wf;
    const bf16v A = random_bf16(static_cast<std::size_t>(s.M) * s.K, 1.f, Af);
    const bf16v W = random_bf16(2 * static_cast<std::size_t>(s.N) * s.K, 0.05f, Wf);  // [2N, K]
    std::vector<float> x0 = random_floats(MN);
    DeviceBuffer<std::uint16_t> dA(A), dW(W), dy(MN + guard), dact(MN + guard);
    DeviceBuffer<float> dx(MN + guard);
    dx.upload(x0);
    const DeviceMap a_map(dA.get(), s.M, s.K, 128), w_map(dW.get(), s.N, s.K, 256),
        gu_map(dW.get(), 2 * s.N, s.K, 128), y_map(dy.get(), s.M, s.N, 64), act_map(dact.get(), s.M, s.N, 64),
        x_map(dx.get(), s.M, s.N, 64, hexel::TmaDtype::F32);
    CUDA_OK(mod.launch(res, prefill_grid(s.M, s.N, 256), kPrefillThreads, {a_map.get(), w_map.get(), x_map.get()},
                       kPrefillSmem));
    CUDA_OK(mod.launch(out, prefill_grid(s.M, s.N, 256), kPrefillThreads, {a_map.get(), w_map.get(), y_map.get()},
                       kPrefillSmem));
    CUDA_OK(mod.launch(glu, prefill_grid(s.M, s.N, 128), kPrefillThreads,
                       {a_map.get(), gu_map.get(), act_map.get()}, kPrefillSmem));
    const std::vector<double> ref = gemm_ref(Af, Wf, s.M, 2 * s.N, s.K);  // [M, 2N]: gate, then up
    std::vector<double> y(MN), xr(MN), act(MN);
    for (int m = 0; m < s.M; ++m)
      for (int n = 0; n < s.N; ++n) {
        const std::size_t i = static_cast<std::size_t>(m) * s.N + n, r = static_cast<std::size_t>(m) * 2 * s.N;
        const double g = ref[r + n], u = ref[r + s.N + n];
        y[i] = g;
        xr[i] = x0[i] + g;
        act[i] = g / (1.0 + std::exp(-g)) * u;
      }
    const std::string what = "M=" + I(s.M) + " N=" + I(s.N) + " K=" + I(s.K);
    const auto x_out = dx.download();
    const auto y_out = dy.download();
    const auto act_out = dact.download();
    std::vector<float> yf(MN), actf(MN);
    for (std::size_t i = 0; i < MN; ++i) {
      yf[i] = from_bf16(y_out[i]);
      actf[i] = from_bf16(act_out[i]);
    }
    EXPECT_LT(rel_l2(std::vector<float>(x_out.begin(), x_out.begin() + MN), xr), 1e-5) << "residual " << what;
    EXPECT_LT(rel_l2(yf, y), 1e-2) << "bf16 " << what;
    EXPECT_LT(rel_l2(actf, act), 1e-2) << "swiglu " << what;
    for (std::size_t i = MN; i < MN + guard; ++i) {
      ASSERT_TRUE(std::isnan(x_out[i])) << "residual wrote past M, " << what;
      ASSERT_EQ(y_out[i], 0xffff) << "bf16 store wrote past M, " << what;
      ASSERT_EQ(act_out[i], 0xffff) << "swiglu store wrote past M, " << what;
    }
  }
}

// More tiles than SMs, so each CTA loops over several tiles and the stage ring wraps across tiles;
// checked on a sample of rows against f64.
TEST(GpuKernels, PrefillGemmPersistentTiles) {
  TELOS_SKIP_UNLESS_SM90(kWgmmaKernels);
  constexpr int M = 2100, N = 3072, K = 512;
  const std::string out = "telos_kernels::gemm_prefill_bf16<" + I(M) + ", " + I(N) + ", " + I(K) + ">";
  TestModule mod(source_with_rope(), {out});
  std::vector<float> Af, Wf;
  DeviceBuffer<std::uint16_t> dA(random_bf16(static_cast<std::size_t>(M) * K, 1.f, Af)),
      dW(random_bf16(static_cast<std::size_t>(N) * K, 0.05f, Wf)), dy(static_cast<std::size_t>(M) * N);
  const DeviceMap a_map(dA.get(), M, K, 128), w_map(dW.get(), N, K, 256), y_map(dy.get(), M, N, 64);
  CUDA_OK(mod.launch(out, prefill_grid(M, N, 256), kPrefillThreads, {a_map.get(), w_map.get(), y_map.get()},
                     kPrefillSmem));
  const auto y = dy.download();
  for (int m = 0; m < M; m += 37) {
    std::vector<float> got(N);
    std::vector<double> want(N);
    for (int n = 0; n < N; ++n) {
      double acc = 0;
      for (int k = 0; k < K; ++k) acc += double(Af[static_cast<std::size_t>(m) * K + k]) * Wf[static_cast<std::size_t>(n) * K + k];
      want[n] = acc;
      got[n] = from_bf16(y[static_cast<std::size_t>(m) * N + n]);
    }
    ASSERT_LT(rel_l2(got, want), 1e-2) << "row " << m;
  }
}

// A row's result does not depend on how many rows the bucket has (batch invariance).
TEST(GpuKernels, PrefillGemmRowsDoNotDependOnM) {
  TELOS_SKIP_UNLESS_SM90(kWgmmaKernels);
  constexpr int N = 512, K = 320;
  const std::string small = "telos_kernels::gemm_prefill_residual<200, " + I(N) + ", " + I(K) + ">";
  const std::string large = "telos_kernels::gemm_prefill_residual<401, " + I(N) + ", " + I(K) + ">";
  TestModule mod(source_with_rope(), {small, large});
  std::vector<float> Af, Wf;
  DeviceBuffer<std::uint16_t> dA(random_bf16(401 * K, 1.f, Af)), dW(random_bf16(N * K, 0.05f, Wf));
  const std::vector<float> x0 = random_floats(401 * N);
  DeviceBuffer<float> x_small(x0), x_large(x0);
  const DeviceMap a200(dA.get(), 200, K, 128), a401(dA.get(), 401, K, 128), w_map(dW.get(), N, K, 256),
      x200(x_small.get(), 200, N, 64, hexel::TmaDtype::F32), x401(x_large.get(), 401, N, 64, hexel::TmaDtype::F32);
  CUDA_OK(mod.launch(small, prefill_grid(200, N, 256), kPrefillThreads, {a200.get(), w_map.get(), x200.get()},
                     kPrefillSmem));
  CUDA_OK(mod.launch(large, prefill_grid(401, N, 256), kPrefillThreads, {a401.get(), w_map.get(), x401.get()},
                     kPrefillSmem));
  const auto s = x_small.download(), l = x_large.download();
  EXPECT_EQ(0, std::memcmp(s.data(), l.data(), 200 * N * sizeof(float)));
  for (std::size_t i = 200 * N; i < s.size(); ++i) ASSERT_EQ(s[i], x0[i]) << "rows past M=200 were touched";
}

// The residual epilogue is one f32 add of the accumulator per element, rounded to nearest even
// (the TMA reduction; it would flush subnormals, which these values never are): into zeros it
// leaves the accumulator itself, into x0 exactly the host's f32 x0 + acc. The small-M GEMM's
// residual rows must match these bits.
TEST(GpuKernels, PrefillResidualIsOneF32Add) {
  TELOS_SKIP_UNLESS_SM90(kWgmmaKernels);
  constexpr int M = 200, N = 384, K = 264;
  const std::string res = "telos_kernels::gemm_prefill_residual<" + I(M) + ", " + I(N) + ", " + I(K) + ">";
  TestModule mod(source_with_rope(), {res});
  std::vector<float> Af, Wf;
  DeviceBuffer<std::uint16_t> dA(random_bf16(M * K, 1.f, Af)), dW(random_bf16(N * K, 0.05f, Wf));
  const std::vector<float> x0 = random_floats(M * N);
  DeviceBuffer<float> acc(std::vector<float>(M * N, 0.f)), x(x0);
  const DeviceMap a_map(dA.get(), M, K, 128), w_map(dW.get(), N, K, 256),
      acc_map(acc.get(), M, N, 64, hexel::TmaDtype::F32), x_map(x.get(), M, N, 64, hexel::TmaDtype::F32);
  CUDA_OK(mod.launch(res, prefill_grid(M, N, 256), kPrefillThreads, {a_map.get(), w_map.get(), acc_map.get()},
                     kPrefillSmem));
  CUDA_OK(mod.launch(res, prefill_grid(M, N, 256), kPrefillThreads, {a_map.get(), w_map.get(), x_map.get()},
                     kPrefillSmem));
  const auto a = acc.download(), got = x.download();
  std::vector<float> want(a.size());
  for (std::size_t i = 0; i < a.size(); ++i) want[i] = x0[i] + a[i];
  EXPECT_LT(rel_l2(a, gemm_ref(Af, Wf, M, N, K)), 1e-5);
  EXPECT_EQ(0, std::memcmp(got.data(), want.data(), want.size() * sizeof(float)));
}

// ---- the small-M GEMM (wgmma + TMA, 64-row tiles, narrow weight tiles) ---------------------------

// The tiling `t`, then the same tiles on the other clusters of 1, 2 and 4 M tiles (sharing each
// weight tile by multicast) that divide its M tiles and its weight rows.
std::vector<codegen::SmallGemmTiling> with_clusters(const codegen::SmallGemmTiling& t) {
  std::vector<codegen::SmallGemmTiling> ts = {t};
  for (int cl : {1, 2, 4})
    if (cl != t.cluster && t.cluster_fits(cl)) {
      ts.push_back(t);
      ts.back().cluster = cl;
    }
  return ts;
}

// A CTA an SM (at most) whose whole dynamic shared memory becomes 0xff bytes (bf16 and f32 NaNs):
// launched before a kernel, it leaves NaNs where that kernel reads shared memory nothing wrote.
const std::string kPoisonShared = R"(
extern "C" __global__ void poison_shared() {
  extern __shared__ uint4 poison_words[];
  unsigned bytes;
  asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(bytes));
  for (unsigned i = threadIdx.x; i < bytes / 16; i += blockDim.x)
    poison_words[i] = make_uint4(~0u, ~0u, ~0u, ~0u);
}
)";
int sm_count() {
  int n = 0;
  if (cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, 0) != cudaSuccess || n <= 0)
    throw std::runtime_error("no multiprocessor count");
  return n;
}

// Batch invariance across the two GEMMs: for every epilogue, the small-M GEMM's output is
// the prefill GEMM's, bit for bit, on the same inputs, at ragged M (1 to 200: one to four 64-row
// tiles, one or two 128-row tiles) and N, K not multiples of either's tiles (a row in any 64-row
// slab of a 128-row tile); the stage ring wraps
// (K = 2000: 32 blocks, at most 16 stages). The small GEMM runs at the plan's tiling and, from 100
// rows on, also at wider weight tiles (64-256 rows, 4 stages: the full-batch buckets' tiles),
// each bit for bit the prefill GEMM's, and each of those on
// clusters of 2 and 4 M tiles sharing the weight tiles by multicast (the _cl kernels) where they
// divide the M tiles (100 rows: two; 200: four), and on two consumer warpgroups a CTA (128-row M
// tiles, WG = 2; 100 rows: one M tile whose last 28 rows no load writes). It is also checked
// against f64, and its stores must stop at M (64 guard rows stay poisoned).
TEST(GpuKernels, SmallGemmMatchesPrefillGemmBitForBit) {
  TELOS_SKIP_UNLESS_SM90(kWgmmaKernels);
  struct Shape {
    int N, K;
    std::vector<int> ms;
  };
  // The small GEMM's tilings run for M rows: the plan's, and from 100 rows on the one-warpgroup
  // tiling and wider ones.
  auto tilings = [](int N, int K, int M, bool swiglu) {
    const codegen::SmallGemmTiling actual = codegen::small_gemm_tiling(N, K, M, swiglu);
    if (M < 100) {
      // And the other count of K blocks a stage (one or two; whole stages of K), in the same
      // shared memory.
      std::vector<codegen::SmallGemmTiling> ts = {actual};
      if (!swiglu && (K + 63) / 64 % 2 == 0 && actual.cluster == 1 && actual.warpgroups == 1) {
        codegen::SmallGemmTiling other = actual;
        other.kps = 3 - actual.kps;
        other.stages = actual.kps == 2 ? 2 * actual.stages : std::max(2, actual.stages / 2);
        ts.push_back(other);
      }
      return ts;
    }
    codegen::SmallGemmLimits one;
    one.warpgroups = 1;
    const codegen::SmallGemmTiling plan = codegen::small_gemm_tiling(N, K, M, swiglu, false, one);
    std::vector<codegen::SmallGemmTiling> ts = with_clusters(plan);
    for (int bn : swiglu ? std::vector<int>{128, 256} : std::vector<int>{64, 128, 256}) {
      codegen::SmallGemmTiling t = plan.with_bn(bn, N, swiglu);
      t.stages = 4;
      if (t.bn != plan.bn)
        for (const codegen::SmallGemmTiling& c : with_clusters(t)) ts.push_back(c);
    }
    // The plan's tiles and the last wider ones also on two consumer warpgroups (128-row M tiles),
    // the plan's also on clusters of two of those where they fit.
    codegen::SmallGemmTiling two = codegen::small_gemm_two_warpgroups(plan, M), wide = ts.back();
    two.cluster = 1;
    ts.push_back(two);
    if (two.cluster_fits(2)) {
      two.cluster = 2;
      ts.push_back(two);
    }
    wide.cluster = 1;
    if (wide.bn != plan.bn) ts.push_back(codegen::small_gemm_two_warpgroups(wide, M));
    // The plan's own two-warpgroup tiles where they are none of the above.
    const std::string mine = actual.instance("bf16", M, N, K);
    if (std::none_of(ts.begin(), ts.end(), [&](const codegen::SmallGemmTiling& t) {
          return t.instance("bf16", M, N, K) == mine;
        }))
      ts.push_back(actual);
    return ts;
  };
  // N = 8448: SwiGLU on 128-row weight tiles (64 gate + 64 up rows, kernel_plan.cpp). N = 4320
  // up to 64 rows: 48-row weight tiles (90 CTAs where 32-row ones would make 135). Below 64 rows
  // the A slots' rows past M are never loaded (1, 5, 20 rows): before each small GEMM every SM's
  // shared memory is filled with NaNs, which must not reach a stored row.
  for (const Shape& shape :
       {Shape{520, 2000, {1, 5, 8, 20, 64, 100, 200}}, Shape{136, 264, {8, 100}},
        Shape{8448, 264, {1, 70}}, Shape{4320, 264, {1, 64}}}) {
    const int N = shape.N, K = shape.K;
    const std::vector<int>& ms = shape.ms;
    std::vector<std::string> names;
    for (int M : ms)
      for (const std::string epi : {"bf16", "residual", "swiglu"}) {
        names.push_back("telos_kernels::gemm_prefill_" + epi + "<" + I(M) + ", " + I(N) + ", " + I(K) + ">");
        for (const codegen::SmallGemmTiling& t : tilings(N, K, M, epi == "swiglu"))
          names.push_back(t.instance(epi, M, N, K));
      }
    names.push_back("poison_shared");
    TestModule mod(source_with_rope() + kPoisonShared, names);
    constexpr int MAXM = 200, GUARD = 64;
    std::vector<float> Af, Wf;
    DeviceBuffer<std::uint16_t> dA(random_bf16(static_cast<std::size_t>(MAXM) * K, 1.f, Af));
    DeviceBuffer<std::uint16_t> dW(random_bf16(2 * static_cast<std::size_t>(N) * K, 0.05f, Wf));  // [2N, K]
    const std::vector<double> ref = gemm_ref(Af, Wf, MAXM, 2 * N, K);  // [M, 2N]: gate, then up
    const std::vector<float> x0 = random_floats(static_cast<std::size_t>(MAXM + GUARD) * N);
    std::size_t i = 0;
    for (int M : ms) {
      const std::size_t MN = static_cast<std::size_t>(M) * N,
                        total = MN + static_cast<std::size_t>(GUARD) * N;
      for (const std::string epi : {"bf16", "residual", "swiglu"}) {
        const bool swiglu = epi == "swiglu", residual = epi == "residual";
        const std::string& big = names[i++];
        DeviceBuffer<std::uint16_t> y_big(total);
        DeviceBuffer<float> x_big(std::vector<float>(x0.begin(), x0.begin() + total));
        const DeviceMap a128(dA.get(), M, K, 128),
            w_big(dW.get(), swiglu ? 2 * N : N, K, swiglu ? 128 : 256),
            y_map(y_big.get(), M, N, 64), x_map(x_big.get(), M, N, 64, hexel::TmaDtype::F32);
        CUDA_OK(mod.launch(big, prefill_grid(M, N, swiglu ? 128 : 256), kPrefillThreads,
                           {a128.get(), w_big.get(), residual ? x_map.get() : y_map.get()},
                           kPrefillSmem));
        const auto b16 = y_big.download();
        const auto b32 = x_big.download();
        for (const codegen::SmallGemmTiling& t : tilings(N, K, M, swiglu)) {
          const std::string& small = names[i++];
          const std::string what = "M=" + I(M) + " N=" + I(N) + " K=" + I(K) + " BN=" + I(t.bn) +
                                   " st" + I(t.stages) + " cl" + I(t.cluster) + " wg" +
                                   I(t.warpgroups) + " kps" + I(t.kps);
          DeviceBuffer<std::uint16_t> y_small(total);
          DeviceBuffer<float> x_small(std::vector<float>(x0.begin(), x0.begin() + total));
          const DeviceMap a64(dA.get(), M, K, t.a_box),
              w_small(dW.get(), swiglu ? 2 * N : N, K, t.w_box());
          const void* small_out =
              residual ? static_cast<const void*>(x_small.get()) : y_small.get();
          CUDA_OK(mod.launch("poison_shared", sm_count(), 1024, {}, codegen::kMaxSmemPerBlock));
          CUDA_OK(mod.launch(small, dim3(t.tiles_m, t.tiles_n), t.threads(),
                             {a64.get(), w_small.get(), small_out}, t.smem()));
          std::vector<float> got(MN);
          std::vector<double> want(MN);
          if (residual) {
            const auto sm = x_small.download();
            EXPECT_EQ(0, std::memcmp(b32.data(), sm.data(), MN * sizeof(float)))
                << "residual " << what;
            for (std::size_t e = MN; e < total; ++e)
              ASSERT_EQ(sm[e], x0[e]) << "residual wrote past M, " << what;
            for (std::size_t e = 0; e < MN; ++e) {
              got[e] = sm[e];
              want[e] = x0[e] + ref[e / N * 2 * N + e % N];
            }
            EXPECT_LT(rel_l2(got, want), 1e-5) << "residual vs f64, " << what;
          } else {
            const auto sm = y_small.download();
            EXPECT_EQ(0, std::memcmp(b16.data(), sm.data(), MN * sizeof(std::uint16_t)))
                << epi << " " << what;
            for (std::size_t e = MN; e < total; ++e)
              ASSERT_EQ(sm[e], 0xffff) << epi << " wrote past M, " << what;
            for (std::size_t e = 0; e < MN; ++e) {
              const std::size_t r = e / N * 2 * N + e % N;
              const double g = ref[r], u = ref[r + N];
              got[e] = from_bf16(sm[e]);
              want[e] = swiglu ? g / (1.0 + std::exp(-g)) * u : g;
            }
            EXPECT_LT(rel_l2(got, want), 1e-2) << epi << " vs f64, " << what;
          }
        }
      }
    }
  }
}

// The GEMMs reading their weight from its slot image (`timg:`) give the bits they give
// through the weight's own 2D map, in every form the plan can take: the prefill GEMM (one box a
// stage where its rows are whole image tiles; where they cut the tiles, as the 8B's 48-row qkv
// tiles do, one box of the tiles that cover them, from an offset, and 16-row boxes), the small GEMM
// on its own, wider, two-warpgroup and multicast tiles (5D multicast), SwiGLU's two halves; the
// rows past M stay poisoned.
TEST(GpuKernels, GemmsReadSlotImagesBitForBit) {
  TELOS_SKIP_UNLESS_SM90(kWgmmaKernels);
  struct Case {
    int N, K, bn, halves;  // N output columns (SwiGLU: W has 2N rows); the image's tiles
    std::vector<int> ms;
  };
  // 768 rows in 48-row tiles: the prefill GEMM's three 256-row tiles start 0, 16 and 32 rows into
  // an image tile.
  for (const Case& c : {Case{768, 256, 48, 1, {1, 20, 64, 200}}, Case{512, 256, 32, 1, {5, 130}},
                        Case{256, 512, 64, 2, {1, 64, 200}}}) {
    const bool swiglu = c.halves == 2;
    const std::string epis[] = {swiglu ? "swiglu" : "bf16", swiglu ? "swiglu" : "residual"};
    const int rows = swiglu ? 2 * c.N : c.N, K = c.K;
    ASSERT_EQ(slot_image_refusal(rows, K, c.bn, c.halves), "");
    const codegen::WeightImage img{c.bn, c.halves};
    // (plain instance, image instance, tiling or none for the prefill GEMM, box rows) a launch.
    struct Run {
      std::string plain, image;
      std::optional<codegen::SmallGemmTiling> t;
      int M, box;
      std::string epi;
    };
    std::vector<Run> runs;
    for (int M : c.ms)
      for (const std::string& epi : epis) {
        const std::string dims = "<" + I(M) + ", " + I(c.N) + ", " + I(K);
        if (M >= 128) {
          // The plan's boxes (one covering box where the image's tiles cut the 256 rows) and
          // image_box_rows's several boxes, where they differ.
          const int cols = swiglu ? 128 : 256;
          std::vector<int> boxes = {codegen::prefill_image_box_rows(img, cols)};
          if (codegen::image_box_rows(img, cols) != boxes[0])
            boxes.push_back(codegen::image_box_rows(img, cols));
          for (int box : boxes)
            runs.push_back({"telos_kernels::gemm_prefill_" + epi + dims + ">",
                            "telos_kernels::gemm_prefill_" + epi + dims + ", " +
                                I(img.half_rows()) + ", " + I(box) + ">",
                            std::nullopt, M, box, epi});
        }
        codegen::SmallGemmTiling plan = codegen::small_gemm_tiling(c.N, K, M, swiglu);
        std::vector<codegen::SmallGemmTiling> ts = with_clusters(plan);
        if (M > 64)
          ts.push_back(codegen::small_gemm_two_warpgroups(plan.with_bn(64, c.N, swiglu), M));
        for (const codegen::SmallGemmTiling& t : ts) {
          const codegen::SmallGemmTiling image = t.reading(img);
          if (image.image_box == 0) continue;
          runs.push_back({t.instance(epi, M, c.N, K), image.instance(epi, M, c.N, K), image, M,
                          image.image_box, epi});
        }
      }
    std::vector<std::string> names = {"poison_shared"};
    for (const Run& r : runs) names.insert(names.end(), {r.plain, r.image});
    std::sort(names.begin(), names.end());
    names.erase(std::unique(names.begin(), names.end()), names.end());
    TestModule mod(source_with_rope() + kPoisonShared, names);
    constexpr int MAXM = 200, GUARD = 64;
    std::vector<float> Af, Wf;
    const bf16v W = random_bf16(static_cast<std::size_t>(rows) * K, 0.05f, Wf);
    bf16v image(W.size());
    pack_slot_image(W.data(), rows, K, c.bn, c.halves, 0, rows / c.bn, image.data());
    DeviceBuffer<std::uint16_t> dA(random_bf16(static_cast<std::size_t>(MAXM) * K, 1.f, Af)), dW(W),
        dImage(image);
    const std::vector<float> x0 = random_floats(static_cast<std::size_t>(MAXM + GUARD) * c.N);
    const std::vector<double> ref = gemm_ref(Af, Wf, MAXM, rows, K);  // [M, rows]
    for (const Run& r : runs) {
      const bool residual = r.epi == "residual";
      const std::size_t MN = static_cast<std::size_t>(r.M) * c.N,
                        total = MN + static_cast<std::size_t>(GUARD) * c.N;
      DeviceBuffer<hexel::TensorMap> image_map(std::vector<hexel::TensorMap>{
          encode_slot_image_map(dImage.get(), rows, K, c.bn, c.halves, r.box)});
      std::vector<float> outs[2];
      for (int with_image = 0; with_image < 2; ++with_image) {
        DeviceBuffer<std::uint16_t> y(total);
        DeviceBuffer<float> x(std::vector<float>(x0.begin(), x0.begin() + total));
        const void* out = residual ? static_cast<const void*>(x.get()) : y.get();
        const std::string& name = with_image ? r.image : r.plain;
        CUDA_OK(mod.launch("poison_shared", sm_count(), 1024, {}, codegen::kMaxSmemPerBlock));
        if (!r.t) {
          const int cols = swiglu ? 128 : 256;
          const DeviceMap a(dA.get(), r.M, K, 128), w(dW.get(), rows, K, cols),
              y_map(y.get(), r.M, c.N, 64), x_map(x.get(), r.M, c.N, 64, hexel::TmaDtype::F32);
          CUDA_OK(mod.launch(name, prefill_grid(r.M, c.N, cols), kPrefillThreads,
                             {a.get(), with_image ? image_map.get() : w.get(),
                              residual ? x_map.get() : y_map.get()},
                             codegen::prefill_gemm_smem(with_image ? r.box : 0)));
        } else {
          const codegen::SmallGemmTiling& t = *r.t;
          const DeviceMap a(dA.get(), r.M, K, t.a_box), w(dW.get(), rows, K, t.w_box());
          CUDA_OK(mod.launch(name, dim3(t.tiles_m, t.tiles_n), t.threads(),
                             {a.get(), with_image ? image_map.get() : w.get(), out}, t.smem()));
        }
        if (residual) {
          outs[with_image] = x.download();
        } else {
          const auto b = y.download();
          for (std::size_t e = MN; e < total; ++e)
            ASSERT_EQ(b[e], 0xffff) << name << " wrote past M";
          outs[with_image].assign(b.begin(), b.end());
        }
      }
      ASSERT_EQ(outs[0].size(), outs[1].size());
      EXPECT_EQ(0, std::memcmp(outs[0].data(), outs[1].data(), outs[0].size() * sizeof(float)))
          << r.image << " against " << r.plain;
      // And both right (so that two equal wrong answers, NaN included, do not pass).
      std::vector<float> got(MN);
      std::vector<double> want(MN);
      for (std::size_t e = 0; e < MN; ++e) {
        const std::size_t m = e / c.N, n = e % c.N;
        const double g = ref[m * rows + n], u = swiglu ? ref[m * rows + c.N + n] : 0.0;
        got[e] = residual ? outs[1][e] : from_bf16(static_cast<std::uint16_t>(outs[1][e]));
        want[e] = residual ? x0[e] + g : swiglu ? g / (1.0 + std::exp(-g)) * u : g;
      }
      EXPECT_LT(rel_l2(got, want), residual ? 1e-5 : 1e-2) << r.image << " vs f64";
    }
  }
}

// The LM head on the small GEMM (gemm_small_f32cand): f32 logits against f64 and each tile's greedy
// candidates against those of the logits it wrote (the first stage of greedy sampling), at
// ragged M (1 to 200: one to four 64-row tiles), weight tiles of 32 to 256 rows (at 200 rows also
// on clusters of 2 and 4 M tiles sharing them by multicast), K not a multiple of 64 with the ring
// wrapping; rows past M stay poisoned; a row's bits are the same at every M, tile width and
// cluster (batch invariance), and a null cand writes the logits alone.
TEST(GpuKernels, SmallGemmLmHeadLogitsAndCandidates) {
  TELOS_SKIP_UNLESS_SM90(kWgmmaKernels);
  constexpr int N = 1024, K = 2000, MAXM = 200, GUARD = 64;
  const std::vector<int> ms = {1, 7, 64, 130, 200}, bns = {32, 128, 256};
  codegen::SmallGemmLimits one;
  one.warpgroups = 1;
  auto tiling = [&](int M, int bn) {
    codegen::SmallGemmTiling t =
        codegen::small_gemm_tiling(N, K, M, false, false, one).with_bn(bn, N, false);
    t.kps = 1;  // f32cand takes one K block a stage (the plan's LM head: lm_head_tiling)
    t.stages = std::min(t.stages, 4);
    return t;
  };
  // The tilings of M rows at a weight tile: on clusters, and from 130 rows at 128- and 256-row
  // weight tiles also on two consumer warpgroups (128-row M tiles).
  auto variants = [&](int M, int bn) {
    std::vector<codegen::SmallGemmTiling> ts = with_clusters(tiling(M, bn));
    if (M > 64 && bn >= 128) ts.push_back(codegen::small_gemm_two_warpgroups(tiling(M, bn), M));
    return ts;
  };
  std::vector<std::string> names;
  for (int M : ms)
    for (int bn : bns)
      for (const codegen::SmallGemmTiling& t : variants(M, bn))
        names.push_back(t.instance("f32cand", M, N, K));
  TestModule mod(source_with_rope(), names);
  std::vector<float> Af, Wf;
  DeviceBuffer<std::uint16_t> dA(random_bf16(static_cast<std::size_t>(MAXM) * K, 1.f, Af));
  DeviceBuffer<std::uint16_t> dW(random_bf16(static_cast<std::size_t>(N) * K, 0.05f, Wf));
  const std::vector<double> ref = gemm_ref(Af, Wf, MAXM, N, K);
  std::vector<float> first_row;
  std::size_t i = 0;
  for (int M : ms)
    for (int bn : bns)
      for (const codegen::SmallGemmTiling& t : variants(M, bn)) {
        const std::string what =
            "M=" + I(M) + " BN=" + I(bn) + " cl" + I(t.cluster) + " wg" + I(t.warpgroups);
        const std::size_t MN = static_cast<std::size_t>(M) * N,
                          total = MN + static_cast<std::size_t>(GUARD) * N;
        DeviceBuffer<float> y(total);
        DeviceBuffer<std::uint64_t> cand(static_cast<std::size_t>(M) * (N / bn));
        const DeviceMap a(dA.get(), M, K, t.a_box), w(dW.get(), N, K, t.w_box());
        CUDA_OK(mod.launch(names[i], dim3(t.tiles_m, t.tiles_n), t.threads(),
                           {a.get(), w.get(), y.get(), cand.get()}, t.smem()));
        const std::vector<float> out = y.download();
        for (std::size_t e = MN; e < total; ++e) {
          std::uint32_t u;
          std::memcpy(&u, &out[e], 4);
          ASSERT_EQ(u, 0xffffffffu) << "wrote past M, " << what;
        }
        const std::vector<float> got(out.begin(), out.begin() + MN);
        EXPECT_LT(rel_l2(got, std::vector<double>(ref.begin(), ref.begin() + MN)), 1e-5) << what;
        EXPECT_EQ(cand.download(), greedy_candidates(got, M, N, N / bn)) << what;
        if (first_row.empty()) first_row.assign(got.begin(), got.begin() + N);
        EXPECT_EQ(0, std::memcmp(first_row.data(), got.data(), N * sizeof(float)))
            << "row 0, " << what;
        if (M == 7 && bn == 128) {
          DeviceBuffer<float> y2(MN);
          CUDA_OK(mod.launch(names[i], dim3(t.tiles_m, t.tiles_n), t.threads(),
                             {a.get(), w.get(), y2.get(), nullptr}, t.smem()));
          const std::vector<float> alone = y2.download();
          EXPECT_EQ(0, std::memcmp(alone.data(), got.data(), MN * sizeof(float)))
              << "null cand, " << what;
        }
        ++i;
      }
}

// The norm prologue (decode buckets up to 8 tokens): gemm_small_norm_{bf16,swiglu} on x must give
// the bits of rmsnorm into h then gemm_small_{bf16,swiglu} on h, at every M up to 8, with K not a
// multiple of 64 (the last block's tail is zeros) and the ring wrapping; rows past M stay
// poisoned.
// (The QKV GEMM's fold, which also carries the epilogue, is QkvFoldedMatchesGemmThenRows.)
TEST(GpuKernels, SmallGemmNormPrologueMatchesRmsNormThenGemm) {
  TELOS_SKIP_UNLESS_SM90(kWgmmaKernels);
  struct Shape {
    int N, K;
  };
  const std::string eps = float_literal(1e-5);
  for (const Shape& shape : {Shape{520, 2000}, Shape{8448, 1024}, Shape{96, 4096}}) {
    const int N = shape.N, K = shape.K;
    const std::vector<int> ms = {1, 3, 8};
    std::vector<std::string> names = {"telos_kernels::rmsnorm<" + I(K) + ", " + eps + ", false>"};
    for (int M : ms)
      for (const std::string epi : {"bf16", "swiglu"}) {
        const bool swiglu = epi == "swiglu";
        names.push_back(codegen::small_gemm_tiling(N, K, M, swiglu).instance(epi, M, N, K));
        const codegen::SmallGemmTiling t = codegen::small_gemm_tiling(N, K, M, swiglu, true);
        names.push_back("telos_kernels::gemm_small_norm_" + epi + "<" + I(M) + ", " + I(N) + ", " + I(K) + ", " +
                        I(t.bn) + ", " + I(t.stages) + ", " + eps + ">");
      }
    TestModule mod(source_with_rope(), names);
    constexpr int MAXM = 8, GUARD = 8;
    const std::vector<float> x = random_floats(static_cast<std::size_t>(MAXM) * K, 2.f);
    const std::vector<float> nw = random_floats(K, 1.f);
    std::vector<float> Wf;
    DeviceBuffer<std::uint16_t> dW(random_bf16(2 * static_cast<std::size_t>(N) * K, 0.05f, Wf));
    DeviceBuffer<float> dx(x), dnw(nw);
    std::size_t i = 1;
    for (int M : ms) {
      DeviceBuffer<std::uint16_t> h(static_cast<std::size_t>(M) * K);
      CUDA_OK(mod.launch(names[0], M, codegen::kNormThreads, {dx.get(), dnw.get(), nullptr, h.get()}));
      for (const std::string epi : {"bf16", "swiglu"}) {
        const bool swiglu = epi == "swiglu";
        const std::string& plain = names[i++];
        const std::string& fused = names[i++];
        const std::string what = epi + " M=" + I(M) + " N=" + I(N) + " K=" + I(K);
        const codegen::SmallGemmTiling tp = codegen::small_gemm_tiling(N, K, M, swiglu),
                                       tf = codegen::small_gemm_tiling(N, K, M, swiglu, true);
        const std::size_t MN = static_cast<std::size_t>(M) * N, total = MN + static_cast<std::size_t>(GUARD) * N;
        DeviceBuffer<std::uint16_t> y_plain(total), y_fused(total);
        const int w_rows = swiglu ? 2 * N : N;
        const DeviceMap a_map(h.get(), M, K, tp.a_box), wp(dW.get(), w_rows, K, tp.cols), wf(dW.get(), w_rows, K, tf.cols);
        CUDA_OK(mod.launch(plain, dim3(tp.tiles_m, tp.tiles_n), codegen::kSmallGemmThreads,
                           {a_map.get(), wp.get(), y_plain.get()}, tp.smem()));
        CUDA_OK(mod.launch(fused, dim3(tf.tiles_m, tf.tiles_n), codegen::kSmallGemmThreads,
                           {dx.get(), dnw.get(), wf.get(), y_fused.get()}, tf.smem()));
        const auto a = y_plain.download(), b = y_fused.download();
        EXPECT_EQ(0, std::memcmp(a.data(), b.data(), MN * sizeof(std::uint16_t))) << what;
        for (std::size_t e = MN; e < total; ++e) ASSERT_EQ(b[e], 0xffff) << "wrote past M, " << what;
        std::size_t nans = 0;
        for (std::size_t e = 0; e < MN; ++e) nans += std::isnan(from_bf16(b[e]));
        EXPECT_EQ(nans, 0u) << what;
      }
    }
  }
}

// The MLP half of decode_layer_persistent (MlpPhases), run alone by a test kernel, gives the bits
// of the kernels it replaces: gemm_small_residual (o), rmsnorm, gemm_small_swiglu (gate/up),
// gemm_small_residual (down), for x and act, at the tiny, Llama-3.2-1B, Qwen2.5-1.5B, Qwen3-0.6B
// and Llama-3.1-8B shapes (the plan's tiles, decode_layer_tiling; down polls act, which the host
// sets pending first as decode_layer_persistent does on the device), and its counters are zero
// after each launch (a second launch from
// the same inputs gives the same bits). The whole layer is
// checked through the models: one-token steps (decode_layer_persistent) against the same rows in
// larger buckets, bit for bit (gpu_model_test).
const char* kMlpTestKernel = R"(
namespace telos_kernels {
template <int M, int H, int KO, int I, int STAGES, int BO, int BG, int BD, float EPS>
__global__ void __launch_bounds__(LayerGemms::kThreads, 1)
    mlp_phases_test(const TensorMap* o_map, const TensorMap* gu_map, const TensorMap* down_map, const bf16* attn,
                    const float* norm_w, float* x, bf16* act, unsigned* sync) {
  using Mlp = MlpPhases<H, KO, I, BO, BG, BD>;
  constexpr unsigned kMaxK = KO > H ? (KO > I ? KO : I) : (H > I ? H : I);
  extern __shared__ unsigned char smem_raw[];
  const PersistentSmem<M, kMaxK, STAGES> sm(smem_raw);
  hexel::mbarrier::StageRing<STAGES> ring;
  if (hexel::warp_index() == 4) {
    if (threadIdx.x % 32 == 0) Mlp::stream(ring, sm.ring_base, sm.full, sm.empty, o_map, gu_map, down_map, 0);
    return;
  }
  Mlp::template run<M, EPS>(ring, sm.base, sm.ring_base, sm.full, sm.empty, attn, norm_w, x, act, sync, 0, 0);
  persistent_finish(sync);
}
}  // namespace telos_kernels
)";

TEST(GpuKernels, PersistentMlpPhasesMatchSeparateKernels) {
  TELOS_SKIP_UNLESS_SM90(kWgmmaKernels);
  struct Shape {
    int H, KO, I;
  };
  const std::string eps = float_literal(1e-5);
  const int sms = sm_count();
  for (const Shape& s : {Shape{128, 128, 256}, Shape{2048, 2048, 8192}, Shape{1536, 1536, 8960}, Shape{1024, 2048, 3072},
                         Shape{4096, 4096, 14336}}) {
    const std::string what = "H=" + I(s.H) + " KO=" + I(s.KO) + " I=" + I(s.I);
    // The QKV rows do not matter here: nqkv = H, head dim 64.
    const codegen::PersistentLayerTiling mt = codegen::decode_layer_tiling(s.H, s.H, s.KO, s.I, 64);
    ASSERT_TRUE(mt.fits) << what;
    const codegen::SmallGemmTiling to = codegen::small_gemm_tiling(s.H, s.KO, 1, false),
                                   tg = codegen::small_gemm_tiling(s.I, s.H, 1, true),
                                   td = codegen::small_gemm_tiling(s.H, s.I, 1, false);
    const std::string persistent = "telos_kernels::mlp_phases_test<1, " + I(s.H) + ", " + I(s.KO) +
                                   ", " + I(s.I) + ", " + I(mt.stages) + ", " + I(mt.bo) + ", " +
                                   I(mt.bg) + ", " + I(mt.bd) + ", " + eps + ">";
    const std::vector<std::string> names = {
        to.instance("residual", 1, s.H, s.KO),
        "telos_kernels::rmsnorm<" + I(s.H) + ", " + eps + ", false>",
        tg.instance("swiglu", 1, s.I, s.H), td.instance("residual", 1, s.H, s.I), persistent};
    TestModule mod(source_with_rope() + kMlpTestKernel, names);
    std::vector<float> f;
    const std::vector<float> x = random_floats(s.H, 2.f), nw = random_floats(s.H, 1.f);
    DeviceBuffer<std::uint16_t> attn(random_bf16(s.KO, 1.f, f));
    DeviceBuffer<std::uint16_t> wo(random_bf16(static_cast<std::size_t>(s.H) * s.KO, 0.05f, f));
    DeviceBuffer<std::uint16_t> wgu(random_bf16(2 * static_cast<std::size_t>(s.I) * s.H, 0.05f, f));
    DeviceBuffer<std::uint16_t> wd(random_bf16(static_cast<std::size_t>(s.H) * s.I, 0.05f, f));
    DeviceBuffer<float> dnw(nw);

    // The separate kernels, as a bucket of more tokens runs them (one token here).
    DeviceBuffer<float> x_sep(x);
    DeviceBuffer<std::uint16_t> h(s.H), act_sep(s.I);
    {
      const DeviceMap a(attn.get(), 1, s.KO, to.a_box), w(wo.get(), s.H, s.KO, to.cols);
      CUDA_OK(mod.launch(names[0], dim3(to.tiles_m, to.tiles_n), codegen::kSmallGemmThreads, {a.get(), w.get(), x_sep.get()},
                         to.smem()));
    }
    CUDA_OK(mod.launch(names[1], 1, codegen::kNormThreads, {x_sep.get(), dnw.get(), nullptr, h.get()}));
    {
      const DeviceMap a(h.get(), 1, s.H, tg.a_box), w(wgu.get(), 2 * s.I, s.H, tg.cols);
      CUDA_OK(mod.launch(names[2], dim3(tg.tiles_m, tg.tiles_n), codegen::kSmallGemmThreads,
                         {a.get(), w.get(), act_sep.get()}, tg.smem()));
    }
    {
      const DeviceMap a(act_sep.get(), 1, s.I, td.a_box), w(wd.get(), s.H, s.I, td.cols);
      CUDA_OK(mod.launch(names[3], dim3(td.tiles_m, td.tiles_n), codegen::kSmallGemmThreads, {a.get(), w.get(), x_sep.get()},
                         td.smem()));
    }
    const std::vector<float> want_x = x_sep.download();
    const std::vector<std::uint16_t> want_act = act_sep.download();
    std::size_t nans = 0;
    for (float v : want_x) nans += std::isnan(v);
    ASSERT_EQ(nans, 0u) << what;

    // The persistent launch, twice from the same inputs (its counters must be back at zero).
    const DeviceMap mo(wo.get(), s.H, s.KO, mt.bo), mg(wgu.get(), 2 * s.I, s.H, mt.bg / 2), md(wd.get(), s.H, s.I, mt.bd);
    DeviceBuffer<unsigned> sync(std::vector<unsigned>{0u, 0u});
    for (int run = 0; run < 2; ++run) {
      DeviceBuffer<float> x_p(x);
      DeviceBuffer<std::uint16_t> act_p(std::vector<std::uint16_t>(s.I, 0xffff));  // pending
      CUDA_OK(mod.launch(
          persistent, sms, codegen::kPersistentThreads,
          {mo.get(), mg.get(), md.get(), attn.get(), dnw.get(), x_p.get(), act_p.get(), sync.get()},
          mt.smem));
      const auto got_x = x_p.download();
      const auto got_act = act_p.download();
      const std::string at = what + " run " + I(run);
      EXPECT_EQ(0, std::memcmp(got_x.data(), want_x.data(), want_x.size() * sizeof(float))) << at;
      EXPECT_EQ(0, std::memcmp(got_act.data(), want_act.data(), want_act.size() * 2)) << at;
      EXPECT_EQ(sync.download(), (std::vector<unsigned>{0u, 0u})) << at;
    }
  }
}

// The persistent layer's weight stream and tiles at every QKV tile height the plan can pick
// (decode_layer_tiling: 24 and 48 rows, a 6 KB slot of one or two K blocks; and 16 and 32): the
// QKV phase alone (persistent_stream, layer_gemm_tile), run by a test kernel, gives
// gemm_small_bf16's bits for one token at the tiny, Qwen3-0.6B, Llama-3.2-1B and Llama-3.1-8B
// shapes, output poisoned first.
// The producer of the QKV-phase test kernels below: the tiles of BQ rows of qkv_map into the ring
// (its lane 0; the other lanes return).
const char* kQkvTestProducer = R"(
namespace telos_kernels {
template <int H, int BQ, int STAGES>
__device__ void qkv_test_producer(hexel::mbarrier::StageRing<STAGES>& ring,
                                  const PersistentSmem<1, H, STAGES>& sm, const TensorMap* qkv_map,
                                  unsigned tiles) {
  if (threadIdx.x % 32 != 0) return;
  __shared__ StreamPhase phase[1];
  phase[0] = {qkv_map, H, BQ, tiles, 0, 0};
  persistent_stream(ring, sm.ring_base, sm.full, sm.empty, phase, 1);
}
}  // namespace telos_kernels
)";

const char* kQkvPhaseTestKernel = R"(
namespace telos_kernels {
template <int H, int NQKV, int STAGES, int BQ>
__global__ void __launch_bounds__(LayerGemms::kThreads, 1)
    qkv_phase_test(const TensorMap* qkv_map, const bf16* h, bf16* qkv) {
  static_assert(persistent_tile_ok(BQ, H) && NQKV % BQ == 0, "QKV tiles");
  constexpr unsigned kTiles = NQKV / BQ;
  extern __shared__ unsigned char smem_raw[];
  const PersistentSmem<1, H, STAGES> sm(smem_raw);
  hexel::mbarrier::StageRing<STAGES> ring;
  if (hexel::warp_index() == 4) return qkv_test_producer<H, BQ, STAGES>(ring, sm, qkv_map, kTiles);
  const unsigned first = persistent_first_tile(0);
  if (first >= kTiles) return;
  persistent_load_a<1>(sm.base, h, H);
  for (unsigned t = first; t < kTiles; t += gridDim.x)
    layer_gemm_tile<1, BQ, SmallEpi::StoreBf16>(ring, sm.base, sm.ring_base, sm.full, sm.empty, t, H, NQKV, qkv);
}
}  // namespace telos_kernels
)";

TEST(GpuKernels, PersistentQkvTilesMatchSmallGemm) {
  TELOS_SKIP_UNLESS_SM90(kWgmmaKernels);
  struct Shape {
    int H, NQKV;
  };
  const int sms = sm_count();
  for (const Shape& s :
       {Shape{128, 256}, Shape{1024, 4096}, Shape{2048, 3072}, Shape{4096, 6144}}) {
    const std::string what = "H=" + I(s.H) + " NQKV=" + I(s.NQKV);
    const codegen::PersistentLayerTiling mt =
        codegen::decode_layer_tiling(s.H, s.NQKV, s.H, s.H, 64);
    ASSERT_TRUE(mt.fits) << what;
    std::vector<int> heights = {mt.bq};
    for (int bq : {16, 32})
      if (bq != mt.bq && codegen::persistent_tile_fits(bq, s.H, s.NQKV)) heights.push_back(bq);
    const codegen::SmallGemmTiling ts = codegen::small_gemm_tiling(s.NQKV, s.H, 1, false);
    std::vector<std::string> names = {ts.instance("bf16", 1, s.NQKV, s.H)};
    for (int bq : heights)
      names.push_back("telos_kernels::qkv_phase_test<" + I(s.H) + ", " + I(s.NQKV) + ", " +
                      I(mt.stages) + ", " + I(bq) + ">");
    TestModule mod(source_with_rope() + kQkvTestProducer + kQkvPhaseTestKernel, names);
    std::vector<float> f;
    DeviceBuffer<std::uint16_t> h(random_bf16(s.H, 1.f, f));
    DeviceBuffer<std::uint16_t> w(random_bf16(static_cast<std::size_t>(s.NQKV) * s.H, 0.05f, f));
    DeviceBuffer<std::uint16_t> want_d(s.NQKV);  // poisoned
    {
      const DeviceMap a(h.get(), 1, s.H, ts.a_box), wm(w.get(), s.NQKV, s.H, ts.cols);
      CUDA_OK(mod.launch(names[0], dim3(ts.tiles_m, ts.tiles_n), codegen::kSmallGemmThreads,
                         {a.get(), wm.get(), want_d.get()}, ts.smem()));
    }
    const std::vector<std::uint16_t> want = want_d.download();
    std::size_t nans = 0;
    for (std::uint16_t v : want) nans += std::isnan(from_bf16(v));
    ASSERT_EQ(nans, 0u) << what;
    for (std::size_t k = 0; k < heights.size(); ++k) {
      const DeviceMap wm(w.get(), s.NQKV, s.H, heights[k]);
      DeviceBuffer<std::uint16_t> got_d(s.NQKV);  // poisoned
      CUDA_OK(mod.launch(names[1 + k], sms, codegen::kPersistentThreads,
                         {wm.get(), h.get(), got_d.get()}, mt.smem));
      const std::vector<std::uint16_t> got = got_d.download();
      EXPECT_EQ(0, std::memcmp(got.data(), want.data(), want.size() * 2))
          << what << " BQ=" << heights[k];
    }
  }
}

// A QKV weight [rows, k] in the checkpoint's row order, packed as telosc packs it
// (docs/artifact.md, layout qkv_rope_pairs): every kernel that reads the projection reads it in
// that order.
std::vector<std::uint16_t> qkv_pair_rows(const std::vector<std::uint16_t>& w, int rows, int k,
                                         int d) {
  std::vector<std::uint16_t> out(w.size());
  for (int p = 0; p < rows; ++p)
    std::copy_n(w.begin() + telos::qkv_pair_row(p, d) * k, k,
                out.begin() + static_cast<std::size_t>(p) * k);
  return out;
}

// decode_layer_persistent's QKV_ROPE: the QKV phase's tiles, each running the QKV epilogue on its
// accumulators (qkv_rope_pairs: the weights' pair order puts a rotated pair in one 8-row group, a
// lane's partner 2 lanes away), give q and the appended K/V the bits of gemm_small_bf16 then
// qkv_rope_append_rows, for one token at the tiny (bias), Llama-3.2-1B (llama3 RoPE), Qwen2.5-1.5B
// (bias, D 128, G 6) and Llama-3.1-8B shapes at the plan's tiles (24 and 48 rows at the 1B and the
// 8B), at positions in the first page, mid-page and past a split, outputs poisoned first.
const char* kQkvRopePhaseTestKernel = R"(
namespace telos_kernels {
template <int H, int HQ, int HKV, int D, bool BIAS, int PAGE, int MAXP, long long PAGE_ELEMS, int STAGES, int BQ>
__global__ void __launch_bounds__(LayerGemms::kThreads, 1)
    qkv_rope_phase_test(const TensorMap* qkv_map, const bf16* h, const float* bias, const int* positions,
                        const int* token_seq, const int* page_tables, bf16* kv_layer, float* q) {
  constexpr unsigned kTiles = (HQ + 2 * HKV) * D / BQ;
  extern __shared__ unsigned char smem_raw[];
  const PersistentSmem<1, H, STAGES> sm(smem_raw);
  hexel::mbarrier::StageRing<STAGES> ring;
  if (hexel::warp_index() == 4) return qkv_test_producer<H, BQ, STAGES>(ring, sm, qkv_map, kTiles);
  const unsigned first = persistent_first_tile(0);
  if (first >= kTiles) return;
  const int pos = positions[0], page = pos >= 0 ? page_tables[token_seq[0] * MAXP + pos / PAGE] : 0;
  persistent_load_a<1>(sm.base, h, H);
  __shared__ float2 sc[BQ / 2];
  for (unsigned t = first; t < kTiles; t += gridDim.x) {
    hexel::named_barrier_sync(1, 128);
    if (threadIdx.x < BQ / 2) sc[threadIdx.x] = qkv_rope_angle<D, telos_rope::Freqs, BQ>(t, threadIdx.x, pos);
    hexel::named_barrier_sync(1, 128);
    float d[BQ / 2];
    layer_gemm_tile_mma<1, BQ>(ring, sm.base, sm.ring_base, sm.full, sm.empty, H, d);
    qkv_rope_pairs<HQ, HKV, D, BIAS, PAGE, PAGE_ELEMS, telos_rope::Freqs, BQ>(d, t, pos, page, bias, kv_layer, q, sc);
  }
}
}  // namespace telos_kernels
)";

TEST(GpuKernels, PersistentQkvRopeTilesMatchSeparateKernels) {
  TELOS_SKIP_UNLESS_SM90(kWgmmaKernels);
  const codegen::RopeInput llama3{"llama3", 500000.0, 8.0, 1.0, 4.0, 64};
  const codegen::RopeInput plain{"default", 1000000.0};
  struct Shape {
    int H, HQ, HKV, D;
    bool bias;
    codegen::RopeInput rope;
  };
  constexpr int PAGE = 16, MAXP = 32, POOL = 40;
  const int sms = sm_count();
  for (const Shape& s :
       {Shape{128, 4, 2, 32, true, plain}, Shape{2048, 32, 8, 64, false, llama3},
        Shape{1536, 12, 2, 128, true, plain}, Shape{4096, 32, 8, 128, false, llama3}}) {
    const int NH = s.HQ + 2 * s.HKV, NQKV = NH * s.D;
    const std::string what = "H=" + I(s.H) + " D=" + I(s.D);
    const codegen::PersistentLayerTiling mt =
        codegen::decode_layer_tiling(s.H, NQKV, s.HQ * s.D, s.H, s.D, false);
    ASSERT_TRUE(mt.qkv_rope) << what;
    const long long page_elems = 2LL * s.HKV * PAGE * s.D;
    const std::string epi =
        I(s.HQ) + ", " + I(s.HKV) + ", " + I(s.D) + ", " + (s.bias ? "true" : "false");
    const codegen::SmallGemmTiling ts = codegen::small_gemm_tiling(NQKV, s.H, 1, false);
    const std::vector<std::string> names = {
        ts.instance("bf16", 1, NQKV, s.H),
        "telos_kernels::qkv_rope_append_rows<" + epi + ", false, " + float_literal(1e-6) + ", " +
            I(PAGE) + ", " + I(MAXP) + ", " + I(page_elems) + "ll, telos_rope::Freqs>",
        "telos_kernels::qkv_rope_phase_test<" + I(s.H) + ", " + epi + ", " + I(PAGE) + ", " +
            I(MAXP) + ", " + I(page_elems) + "ll, " + I(mt.stages) + ", " + I(mt.bq) + ">"};
    TestModule mod(source_with_rope(codegen::rope_inv_freq(s.rope, s.D)) + kQkvTestProducer +
                       kQkvRopePhaseTestKernel,
                   names);
    std::vector<float> f;
    DeviceBuffer<std::uint16_t> h(random_bf16(s.H, 1.f, f));
    DeviceBuffer<std::uint16_t> w(
        qkv_pair_rows(random_bf16(static_cast<std::size_t>(NQKV) * s.H, 0.05f, f), NQKV, s.H, s.D));
    DeviceBuffer<float> bias(random_floats(NQKV, 0.5f));
    std::vector<int> pool(POOL);
    std::iota(pool.begin(), pool.end(), 0);
    std::shuffle(pool.begin(), pool.end(), rng());
    DeviceBuffer<int> pt(std::vector<int>(pool.begin(), pool.begin() + MAXP)),
        seq(std::vector<int>{0});
    for (int position : {3, 37, 300}) {
      const std::string at = what + " pos=" + I(position);
      DeviceBuffer<int> pos(std::vector<int>{position});
      const void* b = s.bias ? bias.get() : nullptr;
      // The separate kernels.
      DeviceBuffer<std::uint16_t> qkv(NQKV),
          kv_want(static_cast<std::size_t>(POOL) * page_elems);  // poisoned
      DeviceBuffer<float> q_want(static_cast<std::size_t>(s.HQ) * s.D);
      {
        const DeviceMap a(h.get(), 1, s.H, ts.a_box), wm(w.get(), NQKV, s.H, ts.cols);
        CUDA_OK(mod.launch(names[0], dim3(ts.tiles_m, ts.tiles_n), codegen::kSmallGemmThreads,
                           {a.get(), wm.get(), qkv.get()}, ts.smem()));
      }
      CUDA_OK(mod.launch(names[1], dim3(NH, 1), s.D,
                         {qkv.get(), b, nullptr, nullptr, pos.get(), seq.get(), pt.get(),
                          kv_want.get(), q_want.get()}));
      // The QKV phase with the epilogue in its tiles.
      DeviceBuffer<std::uint16_t> kv_got(static_cast<std::size_t>(POOL) * page_elems);  // poisoned
      DeviceBuffer<float> q_got(static_cast<std::size_t>(s.HQ) * s.D);
      const DeviceMap wm(w.get(), NQKV, s.H, mt.bq);
      CUDA_OK(mod.launch(
          names[2], sms, codegen::kPersistentThreads,
          {wm.get(), h.get(), b, pos.get(), seq.get(), pt.get(), kv_got.get(), q_got.get()},
          mt.smem));
      const std::vector<float> qw = q_want.download(), qg = q_got.download();
      std::size_t nans = 0;
      for (float v : qw) nans += std::isnan(v);
      ASSERT_EQ(nans, 0u) << at;
      EXPECT_EQ(0, std::memcmp(qg.data(), qw.data(), qw.size() * sizeof(float))) << at;
      const std::vector<std::uint16_t> kw = kv_want.download(), kg = kv_got.download();
      EXPECT_EQ(0, std::memcmp(kg.data(), kw.data(), kw.size() * 2)) << at;
      // The token's K/V were written (not left poisoned) in both.
      const int page = pool[position / PAGE];
      const std::size_t row = page * page_elems + static_cast<std::size_t>(position % PAGE) * s.D;
      EXPECT_NE(kw[row], 0xffff) << at;
    }
  }
}

// ---- QKV with bias, QK norm, RoPE and the KV append -------------------------------------------

struct QkvShape {
  int K, HQ, HKV, D, M;
  bool bias, qk_norm;
  codegen::RopeInput rope;
};

// The QKV path: the GEMM the plan picks for M (gemm_prefill_bf16 from kPrefillGemmMinRows rows,
// else gemm_small_bf16) projects into a bf16 buffer (the weights packed in RoPE's pair order, so
// the projection is too), qkv_rope_append_rows adds the bias, normalizes,
// rotates, writes q and appends k / v (ragged M, a padding row, distinct positions per sequence so
// no two rows write one KV slot).
TEST(GpuKernels, QkvGemmThenRows) {
  TELOS_SKIP_UNLESS_SM90(kWgmmaKernels);
  const codegen::RopeInput llama3{"llama3", 500000.0, 8.0, 1.0, 4.0, 64};
  const codegen::RopeInput plain{"default", 1000000.0};
  constexpr int PAGE = 16, MAXP = 32, LAYERS = 2, POOL = 72, LAYER = 1;
  for (const QkvShape& s : {QkvShape{128, 4, 2, 32, 200, true, false, llama3},
                            QkvShape{256, 4, 2, 32, 401, false, true, plain},
                            QkvShape{256, 4, 2, 32, 601, true, true, llama3},
                            QkvShape{512, 8, 2, 128, 130, true, false, plain},
                            QkvShape{128, 4, 2, 32, 5, false, false, llama3},
                            QkvShape{256, 4, 2, 64, 40, false, true, llama3},
                            QkvShape{1536, 12, 2, 128, 100, true, false, plain}}) {
    const long long page_elems = 2LL * LAYERS * s.HKV * PAGE * s.D;
    const int NH = s.HQ + 2 * s.HKV, ROWS = NH * s.D;
    const bool big = s.M >= codegen::kPrefillGemmMinRows;
    const codegen::SmallGemmTiling t = codegen::small_gemm_tiling(ROWS, s.K, s.M, false);
    const std::string gemm =
        big ? "telos_kernels::gemm_prefill_bf16<" + I(s.M) + ", " + I(ROWS) + ", " + I(s.K) + ">"
            : t.instance("bf16", s.M, ROWS, s.K);
    const std::string rows = "telos_kernels::qkv_rope_append_rows<" + I(s.HQ) + ", " + I(s.HKV) + ", " + I(s.D) +
                             ", " + (s.bias ? "true" : "false") + ", " + (s.qk_norm ? "true" : "false") + ", " +
                             float_literal(1e-6) + ", " + I(PAGE) + ", " + I(MAXP) + ", " + I(page_elems) +
                             "ll, telos_rope::Freqs>";
    const std::vector<float> inv_freq = codegen::rope_inv_freq(s.rope, s.D);
    TestModule mod(source_with_rope(inv_freq), {gemm, rows});
    std::vector<float> Af, Wf;
    DeviceBuffer<std::uint16_t> dA(random_bf16(static_cast<std::size_t>(s.M) * s.K, 1.f, Af));
    DeviceBuffer<std::uint16_t> dW(qkv_pair_rows(
        random_bf16(static_cast<std::size_t>(ROWS) * s.K, 0.05f, Wf), ROWS, s.K, s.D));
    DeviceBuffer<std::uint16_t> dqkv(static_cast<std::size_t>(s.M) * ROWS);
    const std::vector<float> bias = random_floats(ROWS, 0.5f), qn = random_floats(s.D), kn = random_floats(s.D);
    DeviceBuffer<float> dbias(bias), dqn(qn), dkn(kn);
    std::vector<int> positions(s.M), token_seq(s.M);
    for (int m = 0; m < s.M; ++m) {
      positions[m] = m == s.M - 1 ? -1 : m / 2;
      token_seq[m] = m % 2;
    }
    std::vector<int> pool(POOL);
    std::iota(pool.begin(), pool.end(), 0);
    std::shuffle(pool.begin(), pool.end(), rng());
    std::vector<int> page_tables(pool.begin(), pool.begin() + 2 * MAXP);
    DeviceBuffer<int> dpos(positions), dseq(token_seq), dpt(page_tables);
    DeviceBuffer<std::uint16_t> dkv(static_cast<std::size_t>(POOL) * page_elems);
    DeviceBuffer<float> dq(static_cast<std::size_t>(s.M) * s.HQ * s.D);
    if (big) {
      const DeviceMap a_map(dA.get(), s.M, s.K, 128), w_map(dW.get(), ROWS, s.K, 256), y_map(dqkv.get(), s.M, ROWS, 64);
      CUDA_OK(mod.launch(gemm, prefill_grid(s.M, ROWS, 256), kPrefillThreads, {a_map.get(), w_map.get(), y_map.get()},
                         kPrefillSmem));
    } else {
      const DeviceMap a_map(dA.get(), s.M, s.K, t.a_box), w_map(dW.get(), ROWS, s.K, t.w_box());
      CUDA_OK(mod.launch(gemm, dim3(t.tiles_m, t.tiles_n), t.threads(),
                         {a_map.get(), w_map.get(), dqkv.get()}, t.smem()));
    }
    CUDA_OK(mod.launch(rows, dim3(NH, s.M), s.D,
                       {dqkv.get(), s.bias ? dbias.get() : nullptr, s.qk_norm ? dqn.get() : nullptr,
                        s.qk_norm ? dkn.get() : nullptr, dpos.get(), dseq.get(), dpt.get(),
                        dkv.get() + LAYER * 2LL * s.HKV * PAGE * s.D, dq.get()}));

    const std::vector<double> y = gemm_ref(Af, Wf, s.M, ROWS, s.K);
    std::vector<double> qref(static_cast<std::size_t>(s.M) * s.HQ * s.D);
    std::vector<float> kv_expect(static_cast<std::size_t>(POOL) * page_elems, NAN);
    std::vector<char> written(kv_expect.size(), 0);
    for (int m = 0; m < s.M; ++m)
      for (int h = 0; h < NH; ++h) {
        std::vector<double> v(y.begin() + static_cast<std::size_t>(m) * ROWS + h * s.D,
                              y.begin() + static_cast<std::size_t>(m) * ROWS + (h + 1) * s.D);
        if (s.bias)
          for (int d = 0; d < s.D; ++d) v[d] += bias[h * s.D + d];
        const bool is_q = h < s.HQ, is_k = !is_q && h < s.HQ + s.HKV;
        if (s.qk_norm && (is_q || is_k)) {
          double ss = 0;
          for (double e : v) ss += e * e;
          const double inv = 1 / std::sqrt(ss / s.D + 1e-6);
          for (int d = 0; d < s.D; ++d) v[d] *= inv * (is_q ? qn[d] : kn[d]);
        }
        const int pos = std::max(positions[m], 0);
        if (is_q || is_k) {
          std::vector<double> r(v);
          for (int j = 0; j < s.D / 2; ++j) {
            const double a = static_cast<double>(static_cast<float>(pos) * inv_freq[j]);
            r[j] = v[j] * std::cos(a) - v[j + s.D / 2] * std::sin(a);
            r[j + s.D / 2] = v[j + s.D / 2] * std::cos(a) + v[j] * std::sin(a);
          }
          v = r;
        }
        if (is_q) {
          for (int d = 0; d < s.D; ++d) qref[(static_cast<std::size_t>(m) * s.HQ + h) * s.D + d] = v[d];
        } else if (positions[m] >= 0) {
          const int kv = is_k ? 0 : 1, kvh = h - s.HQ - kv * s.HKV;
          const int page = page_tables[token_seq[m] * MAXP + positions[m] / PAGE];
          for (int d = 0; d < s.D; ++d) {
            const std::size_t at = page * page_elems + LAYER * 2LL * s.HKV * PAGE * s.D +
                                   (static_cast<long long>(kv * s.HKV + kvh) * PAGE + positions[m] % PAGE) * s.D + d;
            kv_expect[at] = static_cast<float>(v[d]);
            written[at] = 1;
          }
        }
      }
    // The projection is rounded to bf16 (as transformers' is) before the epilogue: bf16 tolerance.
    EXPECT_LT(rel_l2(dq.download(), qref), 1e-2) << "M=" << s.M << " D=" << s.D;
    const auto kvb = dkv.download();
    std::vector<float> got, want;
    for (std::size_t i = 0; i < kvb.size(); ++i) {
      if (written[i]) {
        got.push_back(from_bf16(kvb[i]));
        want.push_back(kv_expect[i]);
      } else {
        ASSERT_EQ(kvb[i], 0xffff) << "KV element " << i << " written but should not be";
      }
    }
    ASSERT_FALSE(got.empty());
    EXPECT_LT(rel_l2(got, want), 1e-2) << "M=" << s.M << " D=" << s.D;
  }
}

// The folded QKV projection (gemm_small_norm_qkv: norm, GEMM and epilogue in one launch, the
// epilogue run by each head's last CTA; the plan uses it for one-token buckets, the kernel takes up
// to 8 tokens and is checked at 1, 3, 5 and 8) against rmsnorm, then gemm_small_bf16, then
// qkv_rope_append_rows: q and the KV pool must be the same bits, every arrival counter back to
// zero, and a second launch (counters reused) the same again. Bias, QK norm, D 32 / 64 / 128, a
// padding row, two sequences.
TEST(GpuKernels, QkvFoldedMatchesGemmThenRows) {
  TELOS_SKIP_UNLESS_SM90(kWgmmaKernels);
  const codegen::RopeInput llama3{"llama3", 500000.0, 8.0, 1.0, 4.0, 64};
  const codegen::RopeInput plain{"default", 1000000.0};
  constexpr int PAGE = 16, MAXP = 16, LAYERS = 2, POOL = 40, LAYER = 1;
  const std::string eps = float_literal(1e-6);
  for (const QkvShape& s : {QkvShape{128, 4, 2, 32, 5, true, false, llama3},
                           QkvShape{256, 4, 2, 64, 8, false, true, llama3},
                           QkvShape{2000, 8, 2, 128, 1, true, true, plain},
                           QkvShape{4096, 32, 8, 128, 3, false, false, llama3}}) {
    const long long page_elems = 2LL * LAYERS * s.HKV * PAGE * s.D;
    const int NH = s.HQ + 2 * s.HKV, ROWS = NH * s.D;
    // The template arguments both take after D.
    const std::string epi = std::string(s.bias ? "true" : "false") + ", " + (s.qk_norm ? "true" : "false") + ", " +
                            eps + ", " + I(PAGE) + ", " + I(MAXP) + ", " + I(page_elems) + "ll, telos_rope::Freqs>";
    const codegen::SmallGemmTiling tp = codegen::small_gemm_tiling(ROWS, s.K, s.M, false),
                                   tf = codegen::small_gemm_tiling(ROWS, s.K, s.M, false, true);
    const std::string norm = "telos_kernels::rmsnorm<" + I(s.K) + ", " + eps + ", false>";
    const std::string gemm = tp.instance("bf16", s.M, ROWS, s.K);
    const std::string rows = "telos_kernels::qkv_rope_append_rows<" + I(s.HQ) + ", " + I(s.HKV) + ", " + I(s.D) +
                             ", " + epi;
    const std::string folded = "telos_kernels::gemm_small_norm_qkv<" + I(s.M) + ", " + I(s.K) + ", " + I(tf.bn) +
                               ", " + I(tf.stages) + ", " + I(s.HQ) + ", " + I(s.HKV) + ", " + I(s.D) + ", " + epi;
    TestModule mod(source_with_rope(codegen::rope_inv_freq(s.rope, s.D)), {norm, gemm, rows, folded});
    const std::vector<float> x = random_floats(static_cast<std::size_t>(s.M) * s.K, 2.f), nw = random_floats(s.K);
    std::vector<float> Wf;
    DeviceBuffer<std::uint16_t> dW(random_bf16(static_cast<std::size_t>(ROWS) * s.K, 0.05f, Wf));
    DeviceBuffer<float> dx(x), dnw(nw), dbias(random_floats(ROWS, 0.5f)), dqn(random_floats(s.D)),
        dkn(random_floats(s.D));
    std::vector<int> positions(s.M), token_seq(s.M);
    for (int m = 0; m < s.M; ++m) {
      positions[m] = m == s.M - 1 && s.M > 1 ? -1 : 37 + 5 * m;
      token_seq[m] = m % 2;
    }
    std::vector<int> pool(POOL);
    std::iota(pool.begin(), pool.end(), 0);
    std::shuffle(pool.begin(), pool.end(), rng());
    DeviceBuffer<int> dpos(positions), dseq(token_seq), dpt(std::vector<int>(pool.begin(), pool.begin() + 2 * MAXP));
    const std::size_t pool_elems = static_cast<std::size_t>(POOL) * page_elems;
    DeviceBuffer<std::uint16_t> kv_ref(pool_elems), kv_got(pool_elems), h(static_cast<std::size_t>(s.M) * s.K),
        qkv_ref(static_cast<std::size_t>(s.M) * ROWS), qkv_got(static_cast<std::size_t>(s.M) * ROWS);
    DeviceBuffer<float> q_ref(static_cast<std::size_t>(s.M) * s.HQ * s.D), q_got(static_cast<std::size_t>(s.M) * s.HQ * s.D);
    DeviceBuffer<unsigned> arrivals(std::vector<unsigned>(NH, 0u));
    const void* bias = s.bias ? dbias.get() : nullptr;
    const void* qn = s.qk_norm ? dqn.get() : nullptr;
    const void* kn = s.qk_norm ? dkn.get() : nullptr;
    const long long layer_off = LAYER * 2LL * s.HKV * PAGE * s.D;
    CUDA_OK(mod.launch(norm, s.M, codegen::kNormThreads, {dx.get(), dnw.get(), nullptr, h.get()}));
    const DeviceMap a_map(h.get(), s.M, s.K, tp.a_box), wp(dW.get(), ROWS, s.K, tp.cols), wf(dW.get(), ROWS, s.K, tf.cols);
    CUDA_OK(mod.launch(gemm, dim3(tp.tiles_m, tp.tiles_n), codegen::kSmallGemmThreads,
                       {a_map.get(), wp.get(), qkv_ref.get()}, tp.smem()));
    CUDA_OK(mod.launch(rows, dim3(NH, s.M), s.D,
                       {qkv_ref.get(), bias, qn, kn, dpos.get(), dseq.get(), dpt.get(), kv_ref.get() + layer_off,
                        q_ref.get()}));
    const auto want_q = q_ref.download();
    const auto want_kv = kv_ref.download();
    const std::string what = "M=" + I(s.M) + " D=" + I(s.D) + " K=" + I(s.K);
    for (int launch = 0; launch < 2; ++launch) {
      q_got.poison();
      CUDA_OK(mod.launch(folded, dim3(tf.tiles_m, tf.tiles_n), codegen::kSmallGemmThreads,
                         {dx.get(), dnw.get(), wf.get(), qkv_got.get(), bias, qn, kn, dpos.get(), dseq.get(),
                          dpt.get(), kv_got.get() + layer_off, q_got.get(), arrivals.get()},
                         tf.smem()));
      const auto got_q = q_got.download();
      const auto got_kv = kv_got.download();
      EXPECT_EQ(0, std::memcmp(got_q.data(), want_q.data(), want_q.size() * sizeof(float))) << what;
      EXPECT_EQ(0, std::memcmp(got_kv.data(), want_kv.data(), want_kv.size() * 2)) << what;
      for (unsigned c : arrivals.download()) ASSERT_EQ(c, 0u) << "an arrival counter left non-zero, " << what;
      std::size_t nans = 0;
      for (float v : got_q) nans += std::isnan(v);
      EXPECT_EQ(nans, 0u) << what;
    }
  }
}

// ---- the e4m3 KV cache (docs/fp8.md, "FP8 KV cache") ----------------------------------------

// Random e4m3 K and V scales of a test case, up to k_max and v_max: not powers of two.
std::pair<float, float> random_kv_scales(float k_max = 6.f, float v_max = 6.f) {
  std::uniform_real_distribution<float> k(0.05f, k_max), v(0.05f, v_max);
  return {k(rng()), v(rng())};
}

// The QKV epilogue appending to an e4m3 cache (qkv_rope_append_rows with KvE4m3<K_SCALE, V_SCALE>)
// writes exactly the bytes support/dtype.hpp's f32_to_e4m3 (the CPU reference engine's) gives the
// appended value over the layer's scale, and nothing else. The value a K head appends is the one a
// Q head with the same projection, bias and norm weight writes to q (the same arithmetic in f32):
// each K head's projection row is Q head 0's, so q gives the expected f32; a V head appends its
// bf16 projection plus the bias. The projection's magnitudes span 2^-16 to 2^13, so the quotients
// reach e4m3's subnormals and saturation (some of each over the test), and with scale 1 its
// rounding ties; scales 1 and random ones; a padding row; two sequences.
TEST(GpuKernels, E4m3KvAppendWritesTheHostsBytes) {
  TELOS_SKIP_WITHOUT_GPU();
  constexpr int HQ = 4, HKV = 2, PAGE = 16, MAXP = 8, LAYERS = 2, POOL = 20, LAYER = 1, M = 37;
  const codegen::RopeInput rope{"default", 10000.0};
  std::size_t saturated = 0, subnormal = 0;
  for (const int D : {64, 128})
    for (const bool bias : {false, true})
      for (const bool qk_norm : {false, true})
        for (const auto& [ks, vs] : {std::pair<float, float>{1.f, 1.f}, random_kv_scales()}) {
          const long long page_elems = 2LL * LAYERS * HKV * PAGE * D;
          const int NH = HQ + 2 * HKV, N = NH * D;
          const std::string kv = codegen::kv_format(true, ks, vs);
          const std::string rows = "telos_kernels::qkv_rope_append_rows<" + I(HQ) + ", " + I(HKV) +
                                   ", " + I(D) + ", " + (bias ? "true" : "false") + ", " +
                                   (qk_norm ? "true" : "false") + ", " + float_literal(1e-6) +
                                   ", " + I(PAGE) + ", " + I(MAXP) + ", " + I(page_elems) +
                                   "ll, telos_rope::Freqs, " + kv + ">";
          TestModule mod(source_with_rope(codegen::rope_inv_freq(rope, D)), {rows});
          // Projection values ±2^e · (1 + u), e in [-16, 12], rounded to bf16; each K head's row
          // a copy of Q head 0's.
          std::uniform_int_distribution<int> e(-16, 12);
          std::uniform_real_distribution<float> u(0.f, 1.f);
          std::vector<std::uint16_t> qkv(static_cast<std::size_t>(M) * N);
          for (auto& x : qkv)
            x = to_bf16((u(rng()) < 0.5f ? -1.f : 1.f) * std::ldexp(1.f + u(rng()), e(rng())));
          for (int m = 0; m < M; ++m)
            for (int k = 0; k < HKV; ++k)
              std::copy_n(qkv.begin() + static_cast<std::size_t>(m) * N, D,
                          qkv.begin() + static_cast<std::size_t>(m) * N + (HQ + k) * D);
          std::vector<float> bias_v = random_floats(N, 0.25f);
          for (int k = 0; k < HKV; ++k)
            std::copy_n(bias_v.begin(), D, bias_v.begin() + (HQ + k) * D);
          const std::vector<float> norm_w = random_floats(D);
          std::vector<int> positions(M), token_seq(M);
          for (int m = 0; m < M; ++m) {
            positions[m] = m == 17 ? -1 : m / 2 + 3;
            token_seq[m] = m % 2;
          }
          std::vector<int> pool(POOL);
          std::iota(pool.begin(), pool.end(), 0);
          std::shuffle(pool.begin(), pool.end(), rng());
          const std::vector<int> page_tables(pool.begin(), pool.begin() + 2 * MAXP);
          DeviceBuffer<std::uint16_t> dqkv(qkv);
          DeviceBuffer<float> dbias(bias_v), dnorm(norm_w),
              dq(static_cast<std::size_t>(M) * HQ * D);
          DeviceBuffer<int> dpos(positions), dseq(token_seq), dpt(page_tables);
          DeviceBuffer<std::uint8_t> dkv(static_cast<std::size_t>(POOL) * page_elems);
          const long long layer_off = LAYER * 2LL * HKV * PAGE * D;
          CUDA_OK(mod.launch(rows, dim3(NH, M), D,
                             {dqkv.get(), bias ? dbias.get() : nullptr,
                              qk_norm ? dnorm.get() : nullptr, qk_norm ? dnorm.get() : nullptr,
                              dpos.get(), dseq.get(), dpt.get(), dkv.get() + layer_off, dq.get()}));
          const auto q = dq.download();
          const auto got = dkv.download();
          std::vector<std::uint8_t> want(got.size(),
                                         0xff);  // the poison, where nothing is appended
          for (int m = 0; m < M; ++m) {
            if (positions[m] < 0) continue;
            const int page = page_tables[token_seq[m] * MAXP + positions[m] / PAGE];
            for (int kv_i = 0; kv_i < 2; ++kv_i)
              for (int k = 0; k < HKV; ++k)
                for (int d = 0; d < D; ++d) {
                  const int head = HQ + kv_i * HKV + k;
                  const float x = kv_i == 0 ? q[(static_cast<std::size_t>(m) * HQ) * D + d]
                                            : from_bf16(qkv[static_cast<std::size_t>(m) * N +
                                                            head * D + telos::qkv_pair_pos(d, D)]) +
                                                  (bias ? bias_v[head * D + d] : 0.f);
                  want[page * page_elems + layer_off +
                       (static_cast<long long>(kv_i * HKV + k) * PAGE + positions[m] % PAGE) * D +
                       d] = f32_to_e4m3(x / (kv_i == 0 ? ks : vs));
                }
          }
          const std::string what = "D=" + I(D) + (bias ? " bias" : "") +
                                   (qk_norm ? " qk-norm" : "") + " scales " + float_literal(ks) +
                                   ", " + float_literal(vs);
          for (std::size_t i = 0; i < got.size(); ++i)
            if (got[i] != want[i]) {
              ADD_FAILURE() << what << ": pool byte " << i << " is 0x" << std::hex << int(got[i])
                            << ", f32_to_e4m3 gives 0x" << int(want[i]) << std::dec;
              break;
            }
          for (std::uint8_t b : got)
            saturated += (b & 0x7f) == 0x7e, subnormal += (b & 0x78) == 0 && (b & 7) != 0;
        }
  EXPECT_GT(saturated, 0u);
  EXPECT_GT(subnormal, 0u);
}

// The operands attention takes from an e4m3 cache (KvE4m3's k_operand and v_pair) are the f16
// values of the bytes, exactly and whatever the scales (attention applies them outside the MMAs),
// for every pair of bytes (the subnormals and ±448 included), NaN codes giving NaN; and KvE4m3's
// pack rounds to f16 to nearest even, saturating at ±65504 (infinity included), NaN giving NaN.
TEST(GpuKernels, E4m3KvOperandsAreTheF16ValuesOfEveryByte) {
  TELOS_SKIP_WITHOUT_GPU();
  const std::string kernel = R"(
template <float K_SCALE, float V_SCALE>
__global__ void kv_e4m3_operands(unsigned* out, const float* x, unsigned* packed) {
  using KV = telos_kernels::KvE4m3<K_SCALE, V_SCALE>;
  const unsigned p = blockIdx.x * blockDim.x + threadIdx.x;  // the pair's two bytes
  const unsigned words[2] = {p, p << 16};
  const uint4 k = KV::k_operand(make_uint2(words[0], words[1]));
  // V: two rows, the pair's first byte element n of one and its second element n of the other,
  // at n = 0 (the first word's low byte) and n = 7 (the second word's high byte).
  const unsigned a0[2] = {p & 0xffu, 0}, b0[2] = {p >> 8, 0};
  const unsigned a7[2] = {0, p << 24}, b7[2] = {0, (p >> 8) << 24};
  out[4 * p] = k.x, out[4 * p + 1] = k.w, out[4 * p + 2] = KV::v_pair(a0, b0, 0),
  out[4 * p + 3] = KV::v_pair(a7, b7, 7);
  packed[p] = KV::pack(x[2 * p], x[2 * p + 1]);
}
)";
  const std::vector<std::pair<float, float>> scales = {
      {1.f, 1.f}, {0.3125f, 100.f}, random_kv_scales()};
  std::vector<std::string> names;
  for (const auto& [ks, vs] : scales)
    names.push_back("kv_e4m3_operands<" + float_literal(ks) + ", " + float_literal(vs) + ">");
  TestModule mod(source_with_rope() + kernel, names);
  // pack's inputs: random magnitudes over f16's range and past it, the special values first.
  std::vector<float> x = random_floats(2 * 65536);
  std::mt19937 gen(rng()());
  std::uniform_real_distribution<float> exponent(-30.f, 20.f);
  for (float& v : x) v = std::ldexp(v, static_cast<int>(exponent(gen)));
  const float inf = std::numeric_limits<float>::infinity();
  const float specials[] = {0.f,   -0.f, 65504.f, -65504.f,      65519.f,  65520.f,
                            1e30f, inf,  -inf,    std::nanf(""), 0x1p-24f, 0x1p-26f};
  std::copy(std::begin(specials), std::end(specials), x.begin());
  const DeviceBuffer<float> dx(x);
  for (std::size_t c = 0; c < scales.size(); ++c) {
    DeviceBuffer<unsigned> out(4 * 65536), packed(65536);  // poisoned: 0xffff halves, NaN
    CUDA_OK(mod.launch(names[c], dim3(256), dim3(256), {out.get(), dx.get(), packed.get()}));
    const std::vector<unsigned> got = out.download(), got_packed = packed.download();
    std::size_t bad = 0, nans = 0;
    for (unsigned p = 0; p < 65536; ++p)
      for (int i = 0; i < 8; ++i) {  // K then V, each two words of two halves
        const std::uint8_t q = static_cast<std::uint8_t>(p >> (8 * (i % 2)));
        const std::uint16_t want = telos::f32_to_f16(e4m3_to_f32(q));
        const std::uint16_t h = static_cast<std::uint16_t>(got[4 * p + i / 2] >> (16 * (i % 2)));
        const bool want_nan = (q & 0x7f) == 0x7f, got_nan = (h & 0x7c00) == 0x7c00 && (h & 0x3ff);
        nans += got_nan;
        if (want_nan ? !got_nan : h != want) {
          if (bad++ == 0)
            ADD_FAILURE() << names[c] << ": byte 0x" << std::hex << int(q) << " gives 0x" << h
                          << ", f16(float(q)) is 0x" << want << std::dec;
        }
      }
    EXPECT_EQ(bad, 0u) << names[c];
    EXPECT_EQ(nans, 8u * 2 * 256) << names[c];  // a NaN code in one byte of each pair's two
    std::size_t bad_pack = 0;
    for (std::size_t i = 0; i < x.size(); ++i) {
      const float v = std::isnan(x[i]) ? x[i] : std::clamp(x[i], -65504.f, 65504.f);
      const std::uint16_t want = telos::f32_to_f16(v);
      const std::uint16_t h = static_cast<std::uint16_t>(got_packed[i / 2] >> (16 * (i % 2)));
      const bool ok = std::isnan(v) ? (h & 0x7c00) == 0x7c00 && (h & 0x3ff) : h == want;
      if (!ok && bad_pack++ == 0)
        ADD_FAILURE() << names[c] << ": pack(" << x[i] << ") gives 0x" << std::hex << h
                      << ", f16 saturated is 0x" << want << std::dec;
    }
    EXPECT_EQ(bad_pack, 0u) << names[c];
  }
}

// gemm_small_norm_qkv (the QKV epilogue folded into the one-token GEMM) appends the same e4m3 bytes
// as rmsnorm, gemm_small_bf16 and qkv_rope_append_rows with the same KvE4m3, scales 1 and random.
TEST(GpuKernels, E4m3KvFoldedAppendMatchesGemmThenRows) {
  TELOS_SKIP_UNLESS_SM90(kWgmmaKernels);
  constexpr int K = 256, HQ = 4, HKV = 2, D = 64, M = 5, PAGE = 16, MAXP = 16, LAYERS = 2,
                POOL = 40, LAYER = 1;
  const codegen::RopeInput rope{"llama3", 500000.0, 8.0, 1.0, 4.0, 64};
  for (const auto& [ks, vs] : {std::pair<float, float>{1.f, 1.f}, random_kv_scales()}) {
    const long long page_elems = 2LL * LAYERS * HKV * PAGE * D;
    const int NH = HQ + 2 * HKV, ROWS = NH * D;
    const std::string eps = float_literal(1e-6), kv = codegen::kv_format(true, ks, vs);
    const std::string epi = "true, true, " + eps + ", " + I(PAGE) + ", " + I(MAXP) + ", " +
                            I(page_elems) + "ll, telos_rope::Freqs";
    const codegen::SmallGemmTiling tp = codegen::small_gemm_tiling(ROWS, K, M, false),
                                   tf = codegen::small_gemm_tiling(ROWS, K, M, false, true);
    const std::string norm = "telos_kernels::rmsnorm<" + I(K) + ", " + eps + ", false>";
    const std::string gemm = tp.instance("bf16", M, ROWS, K);
    const std::string rows = "telos_kernels::qkv_rope_append_rows<" + I(HQ) + ", " + I(HKV) + ", " +
                             I(D) + ", " + epi + ", " + kv + ">";
    const std::string folded = "telos_kernels::gemm_small_norm_qkv<" + I(M) + ", " + I(K) + ", " +
                               I(tf.bn) + ", " + I(tf.stages) + ", " + I(HQ) + ", " + I(HKV) +
                               ", " + I(D) + ", " + epi + ", 0, 0, " + kv + ">";
    TestModule mod(source_with_rope(codegen::rope_inv_freq(rope, D)), {norm, gemm, rows, folded});
    const std::vector<float> x = random_floats(static_cast<std::size_t>(M) * K, 2.f),
                             nw = random_floats(K);
    std::vector<float> Wf;
    DeviceBuffer<std::uint16_t> dW(random_bf16(static_cast<std::size_t>(ROWS) * K, 0.05f, Wf));
    DeviceBuffer<float> dx(x), dnw(nw), dbias(random_floats(ROWS, 0.5f)), dqn(random_floats(D)),
        dkn(random_floats(D));
    std::vector<int> positions(M), token_seq(M);
    for (int m = 0; m < M; ++m) {
      positions[m] = m == M - 1 ? -1 : 37 + 5 * m;
      token_seq[m] = m % 2;
    }
    std::vector<int> pool(POOL);
    std::iota(pool.begin(), pool.end(), 0);
    std::shuffle(pool.begin(), pool.end(), rng());
    DeviceBuffer<int> dpos(positions), dseq(token_seq),
        dpt(std::vector<int>(pool.begin(), pool.begin() + 2 * MAXP));
    const std::size_t pool_elems = static_cast<std::size_t>(POOL) * page_elems;
    DeviceBuffer<std::uint8_t> kv_ref(pool_elems), kv_got(pool_elems);
    DeviceBuffer<std::uint16_t> h(static_cast<std::size_t>(M) * K),
        qkv_ref(static_cast<std::size_t>(M) * ROWS), qkv_got(static_cast<std::size_t>(M) * ROWS);
    DeviceBuffer<float> q_ref(static_cast<std::size_t>(M) * HQ * D),
        q_got(static_cast<std::size_t>(M) * HQ * D);
    DeviceBuffer<unsigned> arrivals(std::vector<unsigned>(NH, 0u));
    const long long layer_off = LAYER * 2LL * HKV * PAGE * D;
    CUDA_OK(mod.launch(norm, M, codegen::kNormThreads, {dx.get(), dnw.get(), nullptr, h.get()}));
    const DeviceMap a_map(h.get(), M, K, tp.a_box), wp(dW.get(), ROWS, K, tp.cols),
        wf(dW.get(), ROWS, K, tf.cols);
    CUDA_OK(mod.launch(gemm, dim3(tp.tiles_m, tp.tiles_n), codegen::kSmallGemmThreads,
                       {a_map.get(), wp.get(), qkv_ref.get()}, tp.smem()));
    CUDA_OK(mod.launch(rows, dim3(NH, M), D,
                       {qkv_ref.get(), dbias.get(), dqn.get(), dkn.get(), dpos.get(), dseq.get(),
                        dpt.get(), kv_ref.get() + layer_off, q_ref.get()}));
    CUDA_OK(mod.launch(
        folded, dim3(tf.tiles_m, tf.tiles_n), codegen::kSmallGemmThreads,
        {dx.get(), dnw.get(), wf.get(), qkv_got.get(), dbias.get(), dqn.get(), dkn.get(),
         dpos.get(), dseq.get(), dpt.get(), kv_got.get() + layer_off, q_got.get(), arrivals.get()},
        tf.smem()));
    const auto want = kv_ref.download(), got = kv_got.download();
    EXPECT_EQ(0, std::memcmp(got.data(), want.data(), want.size()))
        << "scales " << ks << ", " << vs;
    EXPECT_NE(std::count(want.begin(), want.end(), std::uint8_t{0xff}),
              static_cast<std::ptrdiff_t>(want.size()));
  }
}

// ---- paged attention --------------------------------------------------------------------------

struct AttnShape {
  int HQ, HKV, D, PAGE, MAXP, SPLIT, NSPLIT;  // NSPLIT partial slots, splits dealt round-robin
};

// The attn_split instance for `s` (pages of a 2-layer pool) in tiles of `tpt` tokens, loading
// ahead (LOAD_AHEAD) or not, with a split's page ids loaded at its start (PAGE_AHEAD) or not, at
// `blocks` blocks an SM (0: the default), through `bulk` BULK ring slots a warp (0: none) and
// with the PDL wait inside each item (EARLY) or at entry.
std::string attn_split_instance(const AttnShape& s, long long page_elems, int tpt,
                                bool ahead = false, bool pages = false, int blocks = 0,
                                int bulk = 0, bool early = false) {
  return codegen::AttnSplitKernel{s.HQ,     s.HKV, s.D,   s.PAGE, s.MAXP, page_elems, s.SPLIT,
                                  s.NSPLIT, tpt,   ahead, pages,  blocks, bulk,       early}
      .instance();
}
std::string attn_combine_instance(const AttnShape& s) {
  return "telos_kernels::attn_combine<" + I(s.HQ) + ", " + I(s.D) + ", " + I(s.NSPLIT) + ", " + I(s.SPLIT) + ">";
}

// One step's attention on the device: q, positions, token_seq and page tables in, the slots'
// partials and the output (poisoned) for T = positions.size() tokens.
struct AttnStep {
  DeviceBuffer<float> q, part_o, part_ml;
  DeviceBuffer<int> pos, seq, pt;
  DeviceBuffer<std::uint16_t> out;
  AttnStep(const AttnShape& s, const std::vector<float>& qv, const std::vector<int>& positions,
           const std::vector<int>& token_seq, const std::vector<int>& page_tables)
      : q(qv),
        part_o(positions.size() * s.HQ * s.NSPLIT * s.D),
        part_ml(positions.size() * s.HQ * s.NSPLIT * 2),
        pos(positions),
        seq(token_seq),
        pt(page_tables),
        out(positions.size() * s.HQ * s.D) {}
};

// softmax(q·kᵀ / sqrt(D))·v in f64 for every row of a step (bf16 [T, HQ, D] order; zeros for
// padding rows) over positions [0, position] of each token's sequence, q as given (f32), K/V from
// layer `layer` of the paged pool `kv_f` (the bf16 values as f32) through `page_tables`.
std::vector<double> attention_f64(const AttnShape& s, int layers, int layer, const std::vector<float>& kv_f,
                                  const std::vector<int>& page_tables, const std::vector<int>& positions,
                                  const std::vector<int>& token_seq, const std::vector<float>& q) {
  const int PAGE = s.PAGE, T = static_cast<int>(positions.size());
  const long long page_elems = 2LL * layers * s.HKV * PAGE * s.D;
  auto kv_at = [&](int seq, int p, int kv, int kvh, int d) {
    const int page = page_tables[seq * s.MAXP + p / PAGE];
    return kv_f[page * page_elems + layer * 2LL * s.HKV * PAGE * s.D +
                (static_cast<long long>(kv * s.HKV + kvh) * PAGE + p % PAGE) * s.D + d];
  };
  std::vector<double> out(static_cast<std::size_t>(T) * s.HQ * s.D, 0.0);
  for (int t = 0; t < T; ++t)
    for (int h = 0; h < s.HQ; ++h) {
      if (positions[t] < 0) continue;
      const int kvh = h / (s.HQ / s.HKV);
      const std::size_t row = static_cast<std::size_t>(t) * s.HQ + h;
      std::vector<double> sc(positions[t] + 1);
      double* ref = out.data() + row * s.D;
      double mx = -INFINITY, sum = 0;
      for (int p = 0; p <= positions[t]; ++p) {
        double dot = 0;
        for (int d = 0; d < s.D; ++d) dot += double(q[row * s.D + d]) * kv_at(token_seq[t], p, 0, kvh, d);
        sc[p] = dot / std::sqrt(double(s.D));
        mx = std::max(mx, sc[p]);
      }
      for (int p = 0; p <= positions[t]; ++p) {
        const double w = std::exp(sc[p] - mx);
        sum += w;
        for (int d = 0; d < s.D; ++d) ref[d] += w * kv_at(token_seq[t], p, 1, kvh, d);
      }
      for (int d = 0; d < s.D; ++d) ref[d] /= sum;
    }
  return out;
}

// `out` (bf16 [T, HQ, D]) against attention_f64, 1e-2 relative L2 a row; padding rows must be
// zeros.
void expect_attention_matches_f64(const AttnShape& s, int layers, int layer, const std::vector<float>& kv_f,
                                  const std::vector<int>& page_tables, const std::vector<int>& positions,
                                  const std::vector<int>& token_seq, const std::vector<float>& q, const bf16v& out) {
  const std::vector<double> ref = attention_f64(s, layers, layer, kv_f, page_tables, positions, token_seq, q);
  for (std::size_t t = 0; t < positions.size(); ++t)
    for (int h = 0; h < s.HQ; ++h) {
      const std::size_t row = t * s.HQ + h;
      std::vector<float> got(s.D);
      for (int d = 0; d < s.D; ++d) got[d] = from_bf16(out[row * s.D + d]);
      if (positions[t] < 0) {
        for (float v : got) ASSERT_EQ(v, 0.f) << "padding row " << t;
        continue;
      }
      const std::vector<double> want(ref.begin() + row * s.D, ref.begin() + (row + 1) * s.D);
      EXPECT_LT(rel_l2(got, want), 1e-2) << "D=" << s.D << " token " << t << " head " << h;
    }
}

// GQA 1..16 (odd groups included), D 32..128, pages of 16 and of 7 positions (chunks and splits
// cross page boundaries), a slot per split and splits sharing slots, and the plan's split and
// slots on Llama-3.1-8B's head shape (at context 4800: 38 splits on 32 slots), also at the serving
// config's longer split (kAttnSplitLong: 10 splits of 512 at 4800, on 10 slots and on 4).
TEST(GpuKernels, PagedAttentionSplitAndCombine) {
  TELOS_SKIP_WITHOUT_GPU();
  constexpr int LAYERS = 2, LAYER = 1;
  constexpr int SPLIT = codegen::kAttnSplit;
  for (const AttnShape& s :
       {AttnShape{4, 2, 32, 16, 16, 64, 4}, AttnShape{32, 8, 64, 16, 64, 128, 3},
        AttnShape{12, 2, 128, 16, 32, 64, 8}, AttnShape{8, 8, 64, 7, 20, 64, 2},
        AttnShape{32, 8, 128, 16, 64, SPLIT, codegen::attn_partial_slots(64 * 16)},
        AttnShape{32, 8, 128, 16, 300, SPLIT, codegen::attn_partial_slots(300 * 16)},
        AttnShape{16, 2, 128, 7, 100, 256, 2}, AttnShape{6, 2, 96, 16, 12, 64, 3},
        AttnShape{32, 2, 64, 16, 24, 64, 6},
        AttnShape{32, 8, 128, 16, 300, codegen::kAttnSplitLong,
                  codegen::attn_partial_slots(300 * 16, codegen::kAttnSplitLong)},
        AttnShape{32, 8, 64, 16, 300, codegen::kAttnSplitLong, 4}}) {
    const int PAGE = s.PAGE;
    const long long page_elems = 2LL * LAYERS * s.HKV * PAGE * s.D;
    const int NSPLIT = s.NSPLIT;
    const std::string split = attn_split_instance(s, page_elems, 1), combine = attn_combine_instance(s);
    TestModule mod(source_with_rope(), {split, combine});
    const int POOL = 2 * s.MAXP + 3, ctx = s.MAXP * PAGE;
    std::vector<float> kv_f;
    DeviceBuffer<std::uint16_t> dkv(random_bf16(static_cast<std::size_t>(POOL) * page_elems, 1.f, kv_f));
    std::vector<int> pool(POOL);
    std::iota(pool.begin(), pool.end(), 0);
    std::shuffle(pool.begin(), pool.end(), rng());
    const std::vector<int> page_tables(pool.begin(), pool.begin() + 2 * s.MAXP);
    // Sequence 0 decodes near the end of the context (several splits); sequence 1 prefills a
    // chunk that ends mid-page; one padding row; one first position; contexts of one split
    // exactly, one split plus one position, and two splits plus a part of one.
    const std::vector<int> positions = {ctx - 3, 70, 71, 72, 73, 77, -1, 0, s.SPLIT - 1, s.SPLIT,
                                        std::min(2 * s.SPLIT + 37, ctx - 1)};
    const std::vector<int> token_seq = {0, 1, 1, 1, 1, 1, 0, 0, 1, 0, 1};
    const int T = static_cast<int>(positions.size());
    const std::vector<float> q = random_floats(static_cast<std::size_t>(T) * s.HQ * s.D);
    AttnStep a(s, q, positions, token_seq, page_tables);
    const std::uint16_t* kv_layer = dkv.get() + LAYER * 2LL * s.HKV * PAGE * s.D;
    CUDA_OK(mod.launch(split, dim3(T, s.HKV, NSPLIT), 128,
                       {a.q.get(), a.pos.get(), a.seq.get(), a.pt.get(), kv_layer, a.part_o.get(), a.part_ml.get()}));
    CUDA_OK(mod.launch(combine, dim3(T, s.HQ), s.D, {a.part_o.get(), a.part_ml.get(), a.pos.get(), a.out.get()}));
    const auto out = a.out.download();
    expect_attention_matches_f64(s, LAYERS, LAYER, kv_f, page_tables, positions, token_seq, q, out);

    // A decode row and a row several splits long alone give the same bits as inside the batch.
    for (const int r : {0, 10}) {
      DeviceBuffer<int> dpos1(std::vector<int>{positions[r]}), dseq1(std::vector<int>{token_seq[r]});
      DeviceBuffer<std::uint16_t> dout1(static_cast<std::size_t>(s.HQ) * s.D);
      const float* q1 = a.q.get() + static_cast<std::size_t>(r) * s.HQ * s.D;
      CUDA_OK(mod.launch(split, dim3(1, s.HKV, NSPLIT), 128,
                         {q1, dpos1.get(), dseq1.get(), a.pt.get(), kv_layer, a.part_o.get(), a.part_ml.get()}));
      CUDA_OK(mod.launch(combine, dim3(1, s.HQ), s.D, {a.part_o.get(), a.part_ml.get(), dpos1.get(), dout1.get()}));
      const auto alone = dout1.download();
      EXPECT_EQ(0, std::memcmp(alone.data(), out.data() + static_cast<std::size_t>(r) * s.HQ * s.D, alone.size() * 2))
          << "D=" << s.D << " row " << r;
    }
  }
}

// Prefill buckets run attn_split in tiles of TPT tokens (K and V read once per tile; the plan's
// attn_tokens_per_tile), decode buckets one token per block, and a decode token can share a
// prefill bucket: a token's bits must not depend on TPT. For G = 1, 2, 4, 8 at D 64 and 128 (and
// the plan's split and slots on Llama-3.1-8B's head shape past 32 splits), 32 rows of nine
// sequences with ragged positions: contexts shorter than a split, ending mid-page, several
// splits long, past NSPLIT · SPLIT (slots wrap: rows of a tile whose slot's last split lies past
// some of them), chunks crossing a split boundary and a warp's first chunk lying past some rows
// of its tile, tiles straddling two, three and more sequences, padding rows (position -1) inside
// a tile and at the end. TPT = 1, 2 and 16 / G against each other: partials and outputs
// memcmp-identical (partials poisoned first, so a tile must write exactly the entries TPT = 1
// writes), and TPT = 1 against the f64 reference. TPT = 1 with LOAD_AHEAD (loads moved, the
// arithmetic untouched) memcmp-identical too, and grids of fewer blocks along the slots than
// NSPLIT (attn_grid_slots: a block runs slots z, z + S, ...; S = 1 and NSPLIT - 1), and with pages
// of 16 positions PAGE_AHEAD (a split's page ids loaded at its start) with and without LOAD_AHEAD
// and in tiles, and BULK (a warp's chunks through 2-4 ring slots of shared memory filled by bulk
// copies; on one block along the slots, the items of every slot through the same ring, each
// item's last chunks beside the next one's first; the
// shape of 270 pages gives a warp more than 32 chunks in an item, past its first window of page
// ids; Qwen2.5-1.5B's G = 6, which the plan runs on BULK from 16 rows; and the serving config's
// 512-position split, 10 splits on 4 slots), and EARLY (the decode buckets' PDL wait inside each
// item) with LOAD_AHEAD, with BULK and with neither.
TEST(GpuKernels, AttentionTilesMatchSingleTokensBitForBit) {
  TELOS_SKIP_WITHOUT_GPU();
  constexpr int LAYERS = 2, LAYER = 1;
  for (const AttnShape& s :
       {AttnShape{2, 2, 64, 16, 40, 64, 3}, AttnShape{2, 2, 128, 7, 90, 128, 2},
        AttnShape{4, 2, 64, 7, 90, 64, 3}, AttnShape{4, 2, 128, 16, 40, 128, 2},
        AttnShape{8, 2, 64, 16, 40, 64, 4}, AttnShape{8, 2, 128, 7, 90, 64, 3},
        AttnShape{16, 2, 64, 16, 40, 64, 3}, AttnShape{16, 2, 128, 7, 90, 128, 2},
        AttnShape{32, 8, 128, 16, 520, codegen::kAttnSplit, codegen::attn_partial_slots(520 * 16)},
        AttnShape{8, 2, 64, 16, 270, 64, 2}, AttnShape{12, 2, 128, 16, 40, 128, 2},
        AttnShape{32, 8, 128, 16, 300, codegen::kAttnSplitLong, 4}}) {
    const int G = s.HQ / s.HKV, PAGE = s.PAGE, NSPLIT = s.NSPLIT, SPLIT = s.SPLIT;
    const long long page_elems = 2LL * LAYERS * s.HKV * PAGE * s.D;
    struct Variant {
      int tpt;
      bool ahead;
      int slots;  // the grid's z
      bool pages = false;
      int blocks = 0;
      int bulk = 0;
      bool early = false;
    };
    std::vector<Variant> variants = {{1, false, NSPLIT}, {1, true, NSPLIT},     {2, false, NSPLIT},
                                     {1, false, 1},      {1, true, NSPLIT - 1}, {2, false, 1}};
    if (16 / G != 2)
      variants.push_back({16 / G, false, NSPLIT}), variants.push_back({16 / G, false, 1});
    if (PAGE % 16 == 0)
      for (const Variant& v : std::vector<Variant>{{1, false, NSPLIT, true},
                                                   {1, true, NSPLIT, true},
                                                   {1, true, 1, true},
                                                   {16 / G, false, NSPLIT, true}})
        variants.push_back(v);
    for (const Variant& v :
         std::vector<Variant>{{1, false, NSPLIT, PAGE % 16 == 0, 4}, {16 / G, false, 1, false, 4}})
      variants.push_back(v);
    if (PAGE == 16)
      for (const Variant& v : std::vector<Variant>{{1, false, NSPLIT, false, 3, 2},
                                                   {1, false, 1, false, 3, 2},
                                                   {1, false, 1, false, 2, 3},
                                                   {1, false, NSPLIT - 1, false, 2, 4},
                                                   {1, false, 1, false, 3, 2, true},
                                                   {1, false, NSPLIT - 1, false, 2, 4, true}})
        variants.push_back(v);
    // EARLY (the wait inside each item; a plain launch here, so the wait is a no-op and what is
    // checked is the loads' new order): as the decode buckets take it.
    variants.push_back({1, true, NSPLIT, PAGE % 16 == 0, 0, 0, true});
    variants.push_back({1, false, NSPLIT - 1, false, 0, 0, true});
    std::vector<std::string> instances = {attn_combine_instance(s)};
    for (const Variant& v : variants)
      instances.push_back(
          attn_split_instance(s, page_elems, v.tpt, v.ahead, v.pages, v.blocks, v.bulk, v.early));
    // BULK's slots are waited for on mbarriers: a wait that never completes traps (a failed
    // launch) instead of hanging the run.
    TestModule mod("#define HEXEL_DEBUG_WAIT_LIMIT 100000000\n" + source_with_rope(), instances);

    const int ctx = s.MAXP * PAGE, wrap = NSPLIT * SPLIT;
    ASSERT_GT(ctx, wrap + 16) << "the shape's context must reach past NSPLIT * SPLIT";
    ASSERT_GT(ctx, 3 * SPLIT + 8);
    // Pages: a pool a few pages larger than one sequence; each sequence's table is its own
    // shuffle of it, so sequences see different K/V.
    constexpr int SEQS = 9;
    const int POOL = s.MAXP + 5;
    std::vector<float> kv_f;
    DeviceBuffer<std::uint16_t> dkv(random_bf16(static_cast<std::size_t>(POOL) * page_elems, 1.f, kv_f));
    std::vector<int> page_tables;
    for (int i = 0; i < SEQS; ++i) {
      std::vector<int> pool(POOL);
      std::iota(pool.begin(), pool.end(), 0);
      std::shuffle(pool.begin(), pool.end(), rng());
      page_tables.insert(page_tables.end(), pool.begin(), pool.begin() + s.MAXP);
    }
    std::vector<int> positions, token_seq;
    auto add = [&](int seq, int first, int n) {
      for (int j = 0; j < n; ++j) positions.push_back(first + j), token_seq.push_back(seq);
    };
    auto pad = [&](int n) {  // as the engine pads: position -1, sequence 0
      for (int j = 0; j < n; ++j) positions.push_back(-1), token_seq.push_back(0);
    };
    add(0, ctx - 3, 1);             //  0     decode, several splits (wrapped slots)
    add(1, SPLIT + 13, 5);          //  1-5   prefill chunk across a 16-position chunk of a
                                    //        split's first four: the slot's warp 1 starts at a
                                    //        chunk past rows 1-3 (running max still -inf)
    add(2, 0, 1);                   //  6     first position
    add(3, SPLIT - 1, 2);           //  7-8   one split exactly, one split plus one
    pad(1);                         //  9     padding inside the step (tiles of 2: with seq 3)
    add(4, wrap - 5, 11);           // 10-20  prefill chunk across NSPLIT * SPLIT
    add(5, 2 * SPLIT + 37, 1);      // 21     two splits and a part
    add(6, 20, 1);                  // 22     shorter than a split, mid-page
    add(7, ctx - 1, 1);             // 23     the whole context
    add(8, 3 * SPLIT - 3, 6);       // 24-29  prefill chunk across a split boundary
    pad(2);                         // 30-31  bucket padding
    const int T = static_cast<int>(positions.size());
    ASSERT_EQ(T, 32);
    const std::vector<float> q = random_floats(static_cast<std::size_t>(T) * s.HQ * s.D);
    AttnStep a(s, q, positions, token_seq, page_tables);
    const std::uint16_t* kv_layer = dkv.get() + LAYER * 2LL * s.HKV * PAGE * s.D;

    std::vector<float> po1, ml1;
    bf16v out1;
    for (const Variant& v : variants) {
      const int tpt = v.tpt;
      a.part_o.poison();
      a.part_ml.poison();
      a.out.poison();
      const std::string split =
          attn_split_instance(s, page_elems, tpt, v.ahead, v.pages, v.blocks, v.bulk, v.early);
      CUDA_OK(mod.launch(split, dim3(T / tpt, s.HKV, v.slots), 128,
                         {a.q.get(), a.pos.get(), a.seq.get(), a.pt.get(), kv_layer, a.part_o.get(),
                          a.part_ml.get()},
                         v.bulk ? codegen::attn_split_ring_bytes(PAGE, s.D, v.bulk) : 0));
      CUDA_OK(mod.launch(attn_combine_instance(s), dim3(T, s.HQ), s.D,
                         {a.part_o.get(), a.part_ml.get(), a.pos.get(), a.out.get()}));
      const auto po = a.part_o.download(), ml = a.part_ml.download();
      const auto out = a.out.download();
      const std::string opts =
          std::string(v.ahead ? " load-ahead" : "") + (v.pages ? " page-ahead" : "") +
          (v.bulk ? " bulk " + I(v.bulk) : "") + (v.blocks ? " blocks " + I(v.blocks) : "") +
          (v.slots != NSPLIT ? " slots " + I(v.slots) : "") + (v.early ? " early" : "");
      if (tpt == 1 && !v.ahead && !v.pages && !v.blocks && !v.bulk && !v.early &&
          v.slots == NSPLIT) {
        expect_attention_matches_f64(s, LAYERS, LAYER, kv_f, page_tables, positions, token_seq, q, out);
        po1 = po, ml1 = ml, out1 = out;
        continue;
      }
      EXPECT_EQ(0, std::memcmp(out.data(), out1.data(), out.size() * 2))
          << "G=" << G << " D=" << s.D << " TPT=" << tpt << opts;
      EXPECT_EQ(0, std::memcmp(ml.data(), ml1.data(), ml.size() * 4))
          << "G=" << G << " D=" << s.D << " TPT=" << tpt << opts;
      EXPECT_EQ(0, std::memcmp(po.data(), po1.data(), po.size() * 4))
          << "G=" << G << " D=" << s.D << " TPT=" << tpt << opts;
      // The first differing output, to say which token and head.
      for (std::size_t i = 0; i < out.size(); ++i)
        if (out[i] != out1[i]) {
          ADD_FAILURE() << "G=" << G << " D=" << s.D << " TPT=" << tpt << opts << ": token "
                        << i / (s.HQ * s.D) << " head " << i / s.D % s.HQ << " dim " << i % s.D
                        << ": " << from_bf16(out[i]) << " vs " << from_bf16(out1[i])
                        << " with TPT = 1";
          break;
        }
    }
  }
}

// ---- decode attention on an e4m3 KV cache ----------------------------------------------------

// A random e4m3 KV pool of `pages` pages (page_elems elements each, layers of 2 · HKV · PAGE · D:
// K then V) on the device, finite values up to ±1.875 before the scale (no NaN byte), and its
// elements as the kernels read them, in f32: float(q) · k_scale for K, · v_scale for V (every
// layer's, so layer LAYER's as the kernels take it).
struct E4m3Pool {
  std::unique_ptr<DeviceBuffer<std::uint8_t>> dev;
  std::vector<float> f32;
};
E4m3Pool random_e4m3_pool(int pages, long long page_elems, long long layer_half, float ks,
                          float vs) {
  std::uniform_int_distribution<int> b(0, 255);
  std::vector<std::uint8_t> q(static_cast<std::size_t>(pages) * page_elems);
  E4m3Pool p;
  p.f32.resize(q.size());
  for (std::size_t i = 0; i < q.size(); ++i) {
    const int r = b(rng());
    q[i] = static_cast<std::uint8_t>((r & 0x80) | (r & 0x7f) % 0x40);  // exponent field up to 7
    const bool v = static_cast<long long>(i) % (2 * layer_half) >= layer_half;
    p.f32[i] = e4m3_to_f32(q[i]) * (v ? vs : ks);
  }
  p.dev = std::make_unique<DeviceBuffer<std::uint8_t>>(q);
  return p;
}

// attn_split + attn_combine reading an e4m3 cache (KvE4m3<K_SCALE, V_SCALE>, scales 1 and random)
// against the f64 reference on the dequantized cache (float(q) · scale: bf16 tolerance, the
// operands' rounding), outputs poisoned first: head dims 32, 64, 96 and 128 (each of the V loads'
// widths), groups 2 to 6, pages of 16 and 7, contexts that wrap the slots, ragged rows and padding.
// Every load scheme and tile size gives the plain TPT = 1 form's bits (LOAD_AHEAD, PAGE_AHEAD,
// BULK, four blocks, EARLY, tiles of 2 and 16 / G), and a row alone gives its bits in the batch.
TEST(GpuKernels, E4m3KvAttentionMatchesF64AndIsBatchInvariant) {
  TELOS_SKIP_WITHOUT_GPU();
  constexpr int LAYERS = 2, LAYER = 1;
  for (const AttnShape& s :
       {AttnShape{4, 2, 32, 16, 16, 64, 4}, AttnShape{8, 2, 64, 16, 40, 64, 3},
        AttnShape{12, 2, 128, 7, 32, 64, 8}, AttnShape{6, 2, 96, 16, 12, 64, 3},
        AttnShape{32, 8, 128, 16, 64, codegen::kAttnSplit, 4}})
    // K scales up to 1.5 keep the scores' spread near the bf16 tests' (K's RMS about 0.6 before
    // the scale); the V scale only scales the output.
    for (const auto& [ks, vs] : {std::pair<float, float>{1.f, 1.f}, random_kv_scales(1.5f, 6.f)}) {
      const int G = s.HQ / s.HKV, PAGE = s.PAGE, NSPLIT = s.NSPLIT, SPLIT = s.SPLIT;
      const long long page_elems = 2LL * LAYERS * s.HKV * PAGE * s.D;
      const std::string kv = codegen::kv_format(true, ks, vs);
      struct Variant {
        int tpt = 1;
        bool ahead = false, pages = false;
        int blocks = 0, bulk = 0;
        bool early = false;
      };
      // Tiles of 2 and 16 / G tokens where they divide the step's 16 rows.
      std::vector<Variant> variants = {{}, {1, true}, {2}, {1, true, false, 0, 0, true}};
      if (16 % (16 / G) == 0) variants.push_back({16 / G});
      if (codegen::attn_split_four_blocks(s.D, G)) variants.push_back({1, false, false, 4});
      if (PAGE % 16 == 0)
        variants.push_back({1, true, true}), variants.push_back({16 / G, false, true});
      if (PAGE == 16 && G <= 6)
        variants.push_back({1, false, false, 3, 2}),
            variants.push_back({1, false, false, 3, 2, true});
      auto instance = [&](const Variant& v) {
        codegen::AttnSplitKernel k{s.HQ,   s.HKV, s.D,     PAGE,    s.MAXP,   page_elems, SPLIT,
                                   NSPLIT, v.tpt, v.ahead, v.pages, v.blocks, v.bulk,     v.early};
        k.kv = kv;
        return k;
      };
      std::vector<std::string> instances = {attn_combine_instance(s)};
      for (const Variant& v : variants) instances.push_back(instance(v).instance());
      TestModule mod("#define HEXEL_DEBUG_WAIT_LIMIT 100000000\n" + source_with_rope(), instances);

      const int POOL = 2 * s.MAXP + 3, ctx = s.MAXP * PAGE;
      const E4m3Pool kvp =
          random_e4m3_pool(POOL, page_elems, static_cast<long long>(s.HKV) * PAGE * s.D, ks, vs);
      std::vector<int> pool(POOL);
      std::iota(pool.begin(), pool.end(), 0);
      std::shuffle(pool.begin(), pool.end(), rng());
      const std::vector<int> page_tables(pool.begin(), pool.begin() + 2 * s.MAXP);
      // Sequence 0 decodes near the end of the context; sequence 1 prefills a chunk that ends
      // mid-page; padding inside and at the end; a first position; one split exactly, one split
      // plus one position, two splits and a part.
      const std::vector<int> positions = {
          ctx - 3, 70, 71, 72, 73, 77, -1, 0, SPLIT - 1, SPLIT, std::min(2 * SPLIT + 37, ctx - 1),
          -1,      -1, -1, -1, -1};
      const std::vector<int> token_seq = {0, 1, 1, 1, 1, 1, 0, 0, 1, 0, 1, 0, 0, 0, 0, 0};
      const int T = static_cast<int>(positions.size());
      const std::vector<float> q = random_floats(static_cast<std::size_t>(T) * s.HQ * s.D);
      AttnStep a(s, q, positions, token_seq, page_tables);
      const std::uint8_t* kv_layer = kvp.dev->get() + LAYER * 2LL * s.HKV * PAGE * s.D;
      auto run = [&](const Variant& v, int rows, const float* qp, const int* pos, const int* seq,
                     std::uint16_t* out) {
        const codegen::AttnSplitKernel k = instance(v);
        CUDA_OK(mod.launch(k.instance(), dim3(rows / v.tpt, s.HKV, NSPLIT), 128,
                           {qp, pos, seq, a.pt.get(), kv_layer, a.part_o.get(), a.part_ml.get()},
                           k.smem()));
        CUDA_OK(mod.launch(attn_combine_instance(s), dim3(rows, s.HQ), s.D,
                           {a.part_o.get(), a.part_ml.get(), pos, out}));
      };
      const std::string what = "G=" + I(G) + " D=" + I(s.D) + " PAGE=" + I(PAGE) + " scales " +
                               float_literal(ks) + ", " + float_literal(vs);
      bf16v out1;
      for (const Variant& v : variants) {
        a.part_o.poison();
        a.part_ml.poison();
        a.out.poison();
        run(v, T, a.q.get(), a.pos.get(), a.seq.get(), a.out.get());
        const auto out = a.out.download();
        if (out1.empty()) {
          expect_attention_matches_f64(s, LAYERS, LAYER, kvp.f32, page_tables, positions, token_seq,
                                       q, out);
          out1 = out;
          continue;
        }
        EXPECT_EQ(0, std::memcmp(out.data(), out1.data(), out.size() * 2))
            << what << ": " << instance(v).instance();
      }
      // The decode row and the row two splits long alone give their bits in the batch.
      for (const int r : {0, 10}) {
        DeviceBuffer<int> pos1(std::vector<int>{positions[r]}),
            seq1(std::vector<int>{token_seq[r]});
        DeviceBuffer<std::uint16_t> out(static_cast<std::size_t>(s.HQ) * s.D);
        run({}, 1, a.q.get() + static_cast<std::size_t>(r) * s.HQ * s.D, pos1.get(), seq1.get(),
            out.get());
        const auto alone = out.download();
        EXPECT_EQ(0,
                  std::memcmp(alone.data(), out1.data() + static_cast<std::size_t>(r) * s.HQ * s.D,
                              alone.size() * 2))
            << what << ": row " << r;
      }
    }
}

// ---- prefill attention on wgmma (attention_prefill.cuh) ----------------------------------------

// The attn_prefill instance for `s` (pages of a 2-layer pool) in tiles of `tpt` tokens, its launch
// (grid (HKV, T / TPT), 384 threads) and its dynamic shared memory (codegen::attn_prefill_smem, the
// plan's statement of AttnPrefill<D>::kSmemBytes). NT > 0: the persistent form over NT tiles of
// each KV head.
std::string attn_prefill_instance(const AttnShape& s, long long page_elems, int tpt, int nt = 0) {
  return codegen::attn_prefill_instance(s.HQ, s.HKV, s.D, s.PAGE, s.MAXP, page_elems, tpt, nt);
}
// The tests' source: a wait that never completes traps (a failed launch) instead of hanging the
// run.
const char* kAttnPrefillSource =
    "#define HEXEL_DEBUG_WAIT_LIMIT 100000000\n#include \"attention_prefill.cuh\"\n";

// A paged KV pool of `pages` pages (2 layers, attention reads layer 1) with random bf16 K/V and
// `seqs` sequences on disjoint pages (each its own shuffle), so one sequence's unwritten tail can
// hold NaN without touching another's keys.
struct PagedKv {
  static constexpr int kLayers = 2, kLayer = 1;
  AttnShape s;
  long long page_elems;
  std::vector<int> page_tables;
  std::vector<float> kv_f;  // the bf16 values as f32, for the reference
  bf16v kv;
  PagedKv(const AttnShape& shape, int seqs)
      : s(shape), page_elems(2LL * kLayers * shape.HKV * shape.PAGE * shape.D) {
    const int pages = seqs * s.MAXP + 3;
    kv = random_bf16(static_cast<std::size_t>(pages) * page_elems, 1.f, kv_f);
    std::vector<int> pool(pages);
    std::iota(pool.begin(), pool.end(), 0);
    std::shuffle(pool.begin(), pool.end(), rng());
    page_tables.assign(pool.begin(), pool.begin() + seqs * s.MAXP);
  }
  long long layer_offset() const { return kLayer * 2LL * s.HKV * s.PAGE * s.D; }
  // The pool's bits with NaN in layer kLayer at every position >= end[seq] of each sequence (what a
  // kernel must never read: not yet written in a real step) and in pages of no sequence.
  bf16v with_nan_tails(const std::vector<int>& end) const {
    bf16v bits = kv;
    std::vector<bool> used(kv.size() / page_elems, false);
    for (std::size_t seq = 0; seq < end.size(); ++seq)
      for (int p = 0; p < s.MAXP * s.PAGE; ++p) {
        const int page = page_tables[seq * s.MAXP + p / s.PAGE];
        used[page] = true;
        if (p < end[seq]) continue;
        for (int kv2 = 0; kv2 < 2; ++kv2)
          for (int h = 0; h < s.HKV; ++h)
            for (int d = 0; d < s.D; ++d)
              bits[page * page_elems + layer_offset() +
                   (static_cast<long long>(kv2 * s.HKV + h) * s.PAGE + p % s.PAGE) * s.D + d] =
                  0x7fc0;
      }
    for (std::size_t page = 0; page < used.size(); ++page)
      if (!used[page]) std::fill_n(bits.begin() + page * page_elems, page_elems, 0x7fc0);
    return bits;
  }
};

// The tests' source for the sm_100a prefill attention and its Hopper twin
// (attention_prefill_sm100.cuh, which includes attention_prefill.cuh: one module holds every form),
// with poison_shared.
const std::string kAttnPrefillSm100Source =
    "#define HEXEL_DEBUG_WAIT_LIMIT 100000000\n#include \"attention_prefill_sm100.cuh\"\n" +
    kPoisonShared;

// Which prefill attention a run launches: attn_prefill (a tile a CTA, or persistent on `ctas`
// CTAs), or the sm_100a form, attn_prefill_sm100 or its Hopper twin attn_prefill_sm100_twin (a tile
// a CTA, its shared memory poisoned first).
enum class AttnPrefillKernel { Hopper, Sm100Twin, Sm100 };
AttnPrefillKernel attn_prefill_kernel(Sm100Form form) {
  return form == Sm100Form::Twin ? AttnPrefillKernel::Sm100Twin : AttnPrefillKernel::Sm100;
}
struct PrefillForm {
  AttnPrefillKernel kernel = AttnPrefillKernel::Hopper;
  int ctas = 0;
  bool sm100() const { return kernel != AttnPrefillKernel::Hopper; }
  bool twin() const { return kernel == AttnPrefillKernel::Sm100Twin; }
};

std::string prefill_instance(const PagedKv& pool, int tpt, const PrefillForm& form, int T) {
  const AttnShape& s = pool.s;
  if (form.sm100())
    return codegen::attn_prefill_sm100_instance(s.HQ, s.HKV, s.D, s.PAGE, s.MAXP, pool.page_elems,
                                                tpt, form.twin());
  return attn_prefill_instance(s, pool.page_elems, tpt, form.ctas > 0 ? T / tpt : 0);
}

// One prefill attention launch over a step (T = positions.size(), a multiple of tpt) with the
// pool's bits `kv` and the map the engine builds for `tmap:kv:1:...` (rows of D from layer 1's base
// to the pool's end, boxes of a page); returns the output (poisoned before the launch).
bf16v run_attn_prefill(TestModule& mod, const PagedKv& pool, const bf16v& kv, int tpt,
                       const std::vector<float>& q, const std::vector<int>& positions,
                       const std::vector<int>& token_seq, const PrefillForm& form = {}) {
  const AttnShape& s = pool.s;
  const int T = static_cast<int>(positions.size());
  EXPECT_EQ(T % tpt, 0);
  DeviceBuffer<std::uint16_t> dkv(kv);
  DeviceBuffer<float> dq(q);
  DeviceBuffer<int> dpos(positions), dseq(token_seq), dpt(pool.page_tables);
  DeviceBuffer<std::uint16_t> out(static_cast<std::size_t>(T) * s.HQ * s.D);
  const DeviceMap kv_map(
      dkv.get() + pool.layer_offset(),
      static_cast<int>((static_cast<long long>(kv.size()) - pool.layer_offset()) / s.D), s.D,
      s.PAGE);
  if (form.sm100()) {
    EXPECT_EQ(mod.launch("poison_shared", sm_count(), 1024, {}, codegen::kMaxSmemPerBlock),
              cudaSuccess);
  }
  const cudaError_t e = mod.launch(
      prefill_instance(pool, tpt, form, T), form.ctas > 0 ? dim3(form.ctas) : dim3(s.HKV, T / tpt),
      form.sm100() ? codegen::kAttnPrefillSm100Threads : codegen::kAttnPrefillThreads,
      {dq.get(), dpos.get(), dseq.get(), dpt.get(), dkv.get() + pool.layer_offset(), kv_map.get(),
       out.get()},
      form.sm100() ? codegen::attn_prefill_sm100_smem(s.D, form.twin())
                   : codegen::attn_prefill_smem(s.D));
  EXPECT_EQ(e, cudaSuccess) << cudaGetErrorString(e);
  return out.download();
}

// A ragged step in tiles of `tpt`: a chunk of sequence 0 that starts at a position > 0 mid-page
// (the previous chunks' K/V in the pages) and runs past a tile; a padding row; sequence 1 from
// position 0 starting mid-tile, two key blocks long and ending mid-page; sequence 2's single row
// with the whole context; padding to a whole tile. `ends`: each sequence's positions written.
struct RaggedStep {
  std::vector<int> positions, token_seq, ends;
};
RaggedStep ragged_prefill_step(const AttnShape& s, int tpt) {
  RaggedStep r;
  const int ctx = s.MAXP * s.PAGE;
  auto add = [&](int seq, int first, int n) {
    for (int j = 0; j < n; ++j) r.positions.push_back(first + j), r.token_seq.push_back(seq);
  };
  auto pad = [&](int n) {
    for (int j = 0; j < n; ++j) r.positions.push_back(-1), r.token_seq.push_back(0);
  };
  const int first0 = 3 * s.PAGE + 5, n0 = tpt + 13, n1 = 150;
  add(0, first0, n0);
  pad(1);
  add(1, 0, n1);
  add(2, ctx - 1, 1);
  pad((tpt - static_cast<int>(r.positions.size()) % tpt) % tpt);
  r.ends = {first0 + n0, n1, ctx};
  return r;
}

// The head shapes and tiles of the prefill attention tests: GQA 1, 2, 4, 6 (Qwen2.5-1.5B's 12/2),
// 8 at D 64 and 128, pages of 16 and of 7 positions, in the tile the plan would use (128 / G
// tokens, rounded down to a power of two).
struct PrefillCase {
  AttnShape s;
  int tpt;
};
const std::vector<PrefillCase> kPrefillCases = {
    {{8, 8, 64, 16, 40, 0, 0}, 128},  {{32, 8, 128, 16, 40, 0, 0}, 32},
    {{8, 2, 64, 7, 60, 0, 0}, 32},    {{16, 2, 128, 16, 40, 0, 0}, 16},
    {{12, 2, 128, 16, 40, 0, 0}, 16}, {{4, 2, 128, 7, 60, 0, 0}, 64}};

// Against f64 on ragged_prefill_step's step, every position a sequence has not reached holding NaN,
// and so does every page of no sequence. Pages of 16 load K/V by TMA (whole pages) and cp.async
// (the page of a sequence's last position, zero-filled past it); pages of 7 by cp.async alone. With
// pages of 16 also the persistent form on 3 CTAs, each running its tiles in turn (both segment
// tables, the ring across tiles).
TEST(GpuKernels, PrefillAttentionMatchesF64) {
  TELOS_SKIP_UNLESS_SM90(kWgmmaKernels);
  for (const PrefillCase& c : kPrefillCases) {
    const AttnShape& s = c.s;
    PagedKv pool(s, 3);
    const RaggedStep st = ragged_prefill_step(s, c.tpt);
    const int T = static_cast<int>(st.positions.size());
    const bool persistent = codegen::attn_prefill_persistent_fits(s.D, s.PAGE, c.tpt);
    std::vector<std::string> names = {attn_prefill_instance(s, pool.page_elems, c.tpt)};
    if (persistent) names.push_back(attn_prefill_instance(s, pool.page_elems, c.tpt, T / c.tpt));
    TestModule mod(kAttnPrefillSource, names);
    const std::vector<float> q = random_floats(static_cast<std::size_t>(T) * s.HQ * s.D);
    const bf16v kv = pool.with_nan_tails(st.ends);
    for (const int ctas : {0, 3}) {
      if (ctas > 0 && !persistent) continue;
      SCOPED_TRACE(ctas > 0 ? "persistent on 3 CTAs" : "a tile a CTA");
      const bf16v out = run_attn_prefill(mod, pool, kv, c.tpt, q, st.positions, st.token_seq,
                                         {AttnPrefillKernel::Hopper, ctas});
      expect_attention_matches_f64(s, PagedKv::kLayers, PagedKv::kLayer, pool.kv_f,
                                   pool.page_tables, st.positions, st.token_seq, q, out);
    }
  }
}

// The twin's output against attn_prefill's row by row: within the f64 tolerance (the two sum a
// row's weights in different orders), padding rows identical.
void expect_rows_match_hopper(const AttnShape& s, const std::vector<int>& positions,
                              const bf16v& twin, const bf16v& hopper) {
  for (std::size_t t = 0; t < positions.size(); ++t)
    for (int h = 0; h < s.HQ; ++h) {
      const std::size_t at = (t * s.HQ + h) * s.D;
      std::vector<float> got(s.D);
      std::vector<double> want(s.D);
      for (int d = 0; d < s.D; ++d)
        got[d] = from_bf16(twin[at + d]), want[d] = from_bf16(hopper[at + d]);
      if (positions[t] < 0) {
        EXPECT_EQ(0, std::memcmp(twin.data() + at, hopper.data() + at, s.D * 2)) << "row " << t;
      } else {
        EXPECT_LT(rel_l2(got, want), 1e-2) << "token " << t << " head " << h;
      }
    }
}

// The sm_100a prefill attention (attn_prefill_sm100; on sm_90 its Hopper twin, attn_prefill_sm100_
// twin: the tcgen05 kernel's body, producer, softmax, masks, barriers and shared-memory layout,
// with wgmma for tcgen05.mma and an image of Tensor Memory in shared memory) on
// PrefillAttentionMatchesF64's shapes and ragged step, its shared memory and output poisoned:
// against f64; the twin also against attn_prefill on the same inputs within the same tolerance row
// by row (the two sum a row's weights in different orders: not bit for bit); padding rows are
// zeros in both.
void check_prefill_attention_sm100(Sm100Form form) {
  const PrefillForm tested{attn_prefill_kernel(form), 0};
  for (const PrefillCase& c : kPrefillCases) {
    const AttnShape& s = c.s;
    SCOPED_TRACE(std::string(form_name(form)) + " HQ " + I(s.HQ) + " HKV " + I(s.HKV) + " D " +
                 I(s.D) + " page " + I(s.PAGE));
    PagedKv pool(s, 3);
    const RaggedStep st = ragged_prefill_step(s, c.tpt);
    const int T = static_cast<int>(st.positions.size());
    std::vector<std::string> names = {"poison_shared", prefill_instance(pool, c.tpt, tested, T)};
    if (tested.twin()) names.push_back(prefill_instance(pool, c.tpt, {}, T));
    TestModule mod(kAttnPrefillSm100Source, names);
    const std::vector<float> q = random_floats(static_cast<std::size_t>(T) * s.HQ * s.D);
    const bf16v kv = pool.with_nan_tails(st.ends);
    const bf16v got = run_attn_prefill(mod, pool, kv, c.tpt, q, st.positions, st.token_seq, tested);
    std::optional<bf16v> hopper;
    if (tested.twin())
      hopper = run_attn_prefill(mod, pool, kv, c.tpt, q, st.positions, st.token_seq);
    expect_attention_matches_f64(s, PagedKv::kLayers, PagedKv::kLayer, pool.kv_f, pool.page_tables,
                                 st.positions, st.token_seq, q, got);
    if (hopper) expect_rows_match_hopper(s, st.positions, got, *hopper);
  }
}

TEST(GpuKernels, Sm100TwinPrefillAttentionMatchesF64AndHopper) {
  TELOS_SKIP_UNLESS_SM90(kTwinKernels);
  check_prefill_attention_sm100(Sm100Form::Twin);
}

TEST(GpuKernels, Sm100PrefillAttentionMatchesF64) {
  TELOS_SKIP_UNLESS_SM100(kTcgen05Kernels);
  check_prefill_attention_sm100(Sm100Form::Tcgen05);
}

// A row's bits depend only on its own position and data: one prompt of 300 tokens (three
// key blocks, ending mid-block and mid-page) computed as one step must give the same bits as the
// same prompt in chunks of 64 + 77 + 159 tokens, each chunk its own step with NaN in every position
// it has not reached, the second chunk behind another sequence's 37 tokens (so its first row is
// mid-tile), and with the whole prompt and the chunks in tiles of 128 / G and of 32 / G tokens;
// and (attn_prefill, pages of 16) the persistent form on 3 CTAs and on a CTA a tile gives the same
// bits. `kernel`: attn_prefill, or the sm_100a kernel or its Hopper twin.
void check_prefill_batch_invariance(AttnPrefillKernel kernel) {
  struct Case {
    AttnShape s;
    int tpt_big, tpt_small;
  };
  for (const Case& c :
       {Case{{32, 8, 128, 16, 24, 0, 0}, 32, 8}, Case{{8, 8, 64, 7, 50, 0, 0}, 128, 32},
        Case{{16, 2, 128, 16, 24, 0, 0}, 16, 4}}) {
    const AttnShape& s = c.s;
    const int G = s.HQ / s.HKV, L = 300, NY = 37;
    PagedKv pool(s, 2);  // sequence 0: the prompt; 1: the other sequence
    const PrefillForm plain{kernel, 0};
    std::vector<std::string> names = {"poison_shared", prefill_instance(pool, c.tpt_big, plain, 0),
                                      prefill_instance(pool, c.tpt_small, plain, 0)};
    // The whole prompt's tiles, for the persistent form.
    const int nt = (L + c.tpt_big - 1) / c.tpt_big;
    const bool persistent =
        !plain.sm100() && codegen::attn_prefill_persistent_fits(s.D, s.PAGE, c.tpt_big);
    if (persistent) names.push_back(attn_prefill_instance(s, pool.page_elems, c.tpt_big, nt));
    TestModule mod(kAttnPrefillSm100Source, names);
    const std::size_t row = static_cast<std::size_t>(s.HQ) * s.D;
    const std::vector<float> qx = random_floats(L * row), qy = random_floats(NY * row);

    // A step: optionally the other sequence's NY rows (positions 10 ..), then prompt rows [a, b),
    // then padding to a whole tile; returns the prompt rows' outputs.
    auto step = [&](int tpt, int a, int b, bool other, int ctas = 0) {
      std::vector<int> positions, token_seq;
      std::vector<float> q;
      if (other)
        for (int j = 0; j < NY; ++j) {
          positions.push_back(10 + j), token_seq.push_back(1);
          q.insert(q.end(), qy.begin() + j * row, qy.begin() + (j + 1) * row);
        }
      const std::size_t first = positions.size();
      for (int p = a; p < b; ++p) {
        positions.push_back(p), token_seq.push_back(0);
        q.insert(q.end(), qx.begin() + p * row, qx.begin() + (p + 1) * row);
      }
      while (positions.size() % tpt) {
        positions.push_back(-1), token_seq.push_back(0);
        q.insert(q.end(), row, 0.f);
      }
      const bf16v out = run_attn_prefill(mod, pool, pool.with_nan_tails({b, other ? 10 + NY : 0}),
                                         tpt, q, positions, token_seq, {kernel, ctas});
      return bf16v(out.begin() + first * row, out.begin() + (first + (b - a)) * row);
    };
    const bf16v whole = step(c.tpt_big, 0, L, false);
    std::size_t nans = 0;
    for (std::uint16_t v : whole) nans += (v & 0x7fffu) > 0x7f80u;
    ASSERT_EQ(nans, 0u) << "G=" << G << " D=" << s.D;
    bf16v chunked;
    for (const auto& [a, b, tpt, other] :
         {std::tuple{0, 64, c.tpt_small, false}, std::tuple{64, 141, c.tpt_big, true},
          std::tuple{141, L, c.tpt_small, false}}) {
      const bf16v part = step(tpt, a, b, other);
      chunked.insert(chunked.end(), part.begin(), part.end());
    }
    const bf16v small_tiles = step(c.tpt_small, 0, L, true);
    std::vector<std::pair<const char*, const bf16v*>> others = {{"chunked", &chunked},
                                                                {"small tiles", &small_tiles}};
    // Persistent: 3 CTAs, and a CTA a tile.
    bf16v persistent3, persistent_all;
    if (persistent) {
      persistent3 = step(c.tpt_big, 0, L, false, 3);
      persistent_all = step(c.tpt_big, 0, L, false, s.HKV * nt);
      others.push_back({"persistent on 3 CTAs", &persistent3});
      others.push_back({"persistent, a CTA a tile", &persistent_all});
    }
    for (const auto& [name, got] : others) {
      ASSERT_EQ(got->size(), whole.size());
      for (std::size_t i = 0; i < whole.size(); ++i)
        if ((*got)[i] != whole[i]) {
          ADD_FAILURE() << "G=" << G << " D=" << s.D << " " << name << ": token " << i / row
                        << " head " << i / s.D % s.HQ << " dim " << i % s.D << ": "
                        << from_bf16((*got)[i]) << " vs " << from_bf16(whole[i]) << " in one step";
          break;
        }
    }
  }
}

TEST(GpuKernels, PrefillAttentionIsBatchInvariant) {
  TELOS_SKIP_UNLESS_SM90(kWgmmaKernels);
  check_prefill_batch_invariance(AttnPrefillKernel::Hopper);
}

// The same of the sm_100a kernel and its Hopper twin: the rows' bits do not depend on the tile,
// the other rows in it or the chunking (the tcgen05 kernel's argument, docs/hexel.md,
// "Blackwell").
TEST(GpuKernels, Sm100TwinPrefillAttentionIsBatchInvariant) {
  TELOS_SKIP_UNLESS_SM90(kTwinKernels);
  check_prefill_batch_invariance(AttnPrefillKernel::Sm100Twin);
}

TEST(GpuKernels, Sm100PrefillAttentionIsBatchInvariant) {
  TELOS_SKIP_UNLESS_SM100(kTcgen05Kernels);
  check_prefill_batch_invariance(AttnPrefillKernel::Sm100);
}

// ---- sampling ---------------------------------------------------------------------------------

struct SampleParams {
  float temperature, top_p, min_p;
  int top_k;
  unsigned seed_lo, seed_hi;
  int counter, reserved;
};

// The exact distribution of the sample kernel's rules, in f64.
// NaN logits count as -inf.
std::vector<double> sample_distribution(std::vector<float> lg, const SampleParams& p) {
  const int V = static_cast<int>(lg.size());
  for (float& x : lg)
    if (std::isnan(x)) x = -INFINITY;
  std::vector<int> order(V);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return lg[a] > lg[b]; });
  const double mx = lg[order[0]];
  std::vector<double> w(V, 0.0);
  const float kth = p.top_k > 0 && p.top_k < V ? lg[order[p.top_k - 1]] : -INFINITY;
  for (int i = 0; i < V; ++i) {
    const double wi = std::exp((lg[i] - mx) / p.temperature);
    if (lg[i] >= kth && wi >= p.min_p) w[i] = wi;
  }
  if (p.top_p < 1) {
    const double total = std::accumulate(w.begin(), w.end(), 0.0);
    double run = 0;
    float cut = -INFINITY;
    for (int i : order) {
      if (w[i] == 0) continue;
      run += w[i];
      if (run >= p.top_p * total) {
        cut = lg[i];
        break;
      }
    }
    for (int i = 0; i < V; ++i)
      if (lg[i] < cut) w[i] = 0;
  }
  const double total = std::accumulate(w.begin(), w.end(), 0.0);
  for (double& v : w) v /= total;
  return w;
}

TEST(GpuKernels, SampleGreedyExactAndSeededDrawsMatchTheDistribution) {
  TELOS_SKIP_WITHOUT_GPU();
  // Greedy rows read the LM head's candidates (gemm_small_f32cand): 16 tiles of 32 logits a row
  // here, and the 1B plan's 1002 tiles of 128 at the real vocabulary. The real vocabulary's
  // instance is the plan's: a cluster of 8 blocks of 512 threads a row (kernel_plan.cpp).
  constexpr int V = 512, R = 16384, G = 16, kBigV = 128256, kBigG = 1002, kBigC = 8;
  const std::string k = "telos_kernels::sample<" + I(V) + ", 128, " + I(G) + ", 1>";
  const std::string big =
      "telos_kernels::sample<" + I(kBigV) + ", 512, " + I(kBigG) + ", " + I(kBigC) + ">";
  TestModule mod(source_with_rope(), {k, big});

  // Greedy: the lowest index among tied maxima (also across blocks, and -0 tied with +0); NaN and
  // -inf never chosen, and a row of nothing else gives 0; padding rows give 0.
  {
    std::vector<float> lg = random_floats(5 * V);
    lg[V + 7] = lg[V + 300] = 50.f;
    for (int i = 0; i < V; ++i) lg[2 * V + i] = i % 3 == 0 ? -0.f : -1.f;
    lg[2 * V + 1] = 0.f;  // +0 after -0 at index 0: index 0 wins
    for (int i = 0; i < V; ++i) lg[3 * V + i] = i % 2 ? NAN : -INFINITY;
    lg[V * 4 + 9] = NAN;
    std::vector<SampleParams> params(5, SampleParams{0.f, 1.f, 0.f, 0, 1, 0, 5, 0});
    DeviceBuffer<float> dl(lg);
    DeviceBuffer<std::uint64_t> dc(greedy_candidates(lg, 5, V, G));
    DeviceBuffer<SampleParams> dp(params);
    DeviceBuffer<int> rows(std::vector<int>{0, 1, 2, 3, -1}), out(5), out_host(5);
    CUDA_OK(mod.launch(k, 5, 128,
                       {dl.get(), dc.get(), dp.get(), rows.get(), out.get(), out_host.get()}));
    const auto tok = out.download();
    EXPECT_EQ(tok[0], std::max_element(lg.begin(), lg.begin() + V) - lg.begin());
    EXPECT_EQ(tok[1], 7);
    EXPECT_EQ(tok[2], 0);
    EXPECT_EQ(tok[3], 0);
    EXPECT_EQ(tok[4], 0);
    EXPECT_EQ(out_host.download(), tok) << "the host's copy of the tokens (tokens_host)";
  }
  // Greedy over a real vocabulary; a padding row beside it.
  {
    std::vector<float> lg = random_floats(2 * kBigV);
    DeviceBuffer<float> dl(lg);
    DeviceBuffer<std::uint64_t> dc(greedy_candidates(lg, 2, kBigV, kBigG));
    DeviceBuffer<SampleParams> dp(std::vector<SampleParams>(2, {0.f, 1.f, 0.f, 0, 1, 0, 5, 0}));
    DeviceBuffer<int> rows(std::vector<int>{0, -1}), out(std::vector<int>{-5, -5}),
        out_host(std::vector<int>{-5, -5});
    CUDA_OK(mod.launch(big, 2 * kBigC, 512,
                       {dl.get(), dc.get(), dp.get(), rows.get(), out.get(), out_host.get()}));
    EXPECT_EQ(
        out.download(),
        (std::vector<int>{
            static_cast<int>(std::max_element(lg.begin(), lg.begin() + kBigV) - lg.begin()), 0}));
    EXPECT_EQ(out_host.download(), out.download());
  }
  // Seeded draws: `rows` rows of the same logits with counters 0..rows-1. Every token is in the
  // kept set, the histogram matches the exact distribution within `tv_max` (total variation), and
  // a row alone gives the same token.
  auto draws = [&](const std::string& kernel, int vocab, int cluster, int threads,
                   const std::vector<float>& one, const SampleParams& base, int n_rows,
                   double tv_max) {
    SCOPED_TRACE(kernel + " temperature " + std::to_string(base.temperature) + " top_p " +
                 std::to_string(base.top_p) + " min_p " + std::to_string(base.min_p) + " top_k " +
                 std::to_string(base.top_k));
    std::vector<float> lg;
    lg.reserve(static_cast<std::size_t>(n_rows) * vocab);
    std::vector<SampleParams> params(n_rows, base);
    std::vector<int> rows(n_rows);
    for (int r = 0; r < n_rows; ++r) {
      lg.insert(lg.end(), one.begin(), one.end());
      params[r].counter = r;
      rows[r] = r;
    }
    DeviceBuffer<float> dl(lg);
    // The greedy candidates, not read: no row is greedy.
    const std::size_t n_cand = static_cast<std::size_t>(n_rows) * (vocab == V ? G : kBigG);
    DeviceBuffer<std::uint64_t> dc(std::vector<std::uint64_t>(n_cand, 0));
    DeviceBuffer<SampleParams> dp(params);
    DeviceBuffer<int> drows(rows), out(std::vector<int>(n_rows, -5)), out_host(n_rows);
    CUDA_OK(mod.launch(kernel, n_rows * cluster, threads,
                       {dl.get(), dc.get(), dp.get(), drows.get(), out.get(), out_host.get()}));
    const auto tok = out.download();
    EXPECT_EQ(out_host.download(), tok);
    const std::vector<double> want = sample_distribution(one, base);
    // The kept set's edges, computed here in f64 and by the kernel in f32, may differ by a value
    // or two where a row keeps most of its vocabulary: the membership check uses a set a hair
    // wider (top_p + 1e-4 of the mass, min_p less 1e-4 of itself).
    SampleParams wider = base;
    wider.top_p = std::min(1.f, base.top_p + 1e-4f), wider.min_p = base.min_p * (1 - 1e-4f);
    const std::vector<double> kept = sample_distribution(one, wider);
    std::vector<double> hist(vocab, 0.0);
    for (int t : tok) {
      ASSERT_TRUE(t >= 0 && t < vocab) << t;
      ASSERT_GT(kept[t], 0.0) << "token " << t << " is outside the kept set";
      hist[t] += 1.0 / n_rows;
    }
    double tv = 0;
    for (int i = 0; i < vocab; ++i) tv += std::abs(hist[i] - want[i]) / 2;
    EXPECT_LT(tv, tv_max) << "total variation between the draws and the exact distribution";

    DeviceBuffer<SampleParams> dp1(std::vector<SampleParams>{params[123]});
    DeviceBuffer<int> drow1(std::vector<int>{0}), out1(1), out1_host(1);
    CUDA_OK(mod.launch(kernel, cluster, threads,
                       {dl.get(), dc.get(), dp1.get(), drow1.get(), out1.get(), out1_host.get()}));
    EXPECT_EQ(out1.download()[0], tok[123]);
    EXPECT_EQ(out1_host.download()[0], tok[123]);
  };
  for (const SampleParams& base :
       {SampleParams{0.8f, 1.f, 0.f, 20, 7, 1, 0, 0}, SampleParams{1.0f, 0.9f, 0.f, 0, 9, 0, 0, 0},
        SampleParams{1.3f, 0.95f, 0.01f, 40, 3, 3, 0, 0},
        SampleParams{0.7f, 1.f, 0.f, 0, 5, 0, 0, 0}}) {
    draws(k, V, 1, 128, random_floats(V, 2.f), base, R, 0.04);
  }
  // The real vocabulary over a cluster. Peaked logits (a few large ones over a wide, flat rest,
  // ties among the large ones, a NaN and -inf) keep a small set, so 1024 draws test its shape; a
  // flat row keeps most of the vocabulary (top_p 0.95 alone: the longest search) and tests the
  // kept set and alone vs in a batch.
  std::vector<float> peaked = random_floats(kBigV, 1.f), flat = random_floats(kBigV, 0.5f);
  for (int i = 0; i < 6; ++i) peaked[1000 + 20011 * i] = 19.f + 0.25f * static_cast<float>(i % 4);
  peaked[5] = NAN, peaked[6] = -INFINITY, peaked[kBigV - 1] = 20.f;
  for (const SampleParams& base :
       {SampleParams{1.0f, 1.f, 0.f, 4, 11, 0, 0, 0}, SampleParams{0.8f, 0.9f, 0.f, 0, 12, 0, 0, 0},
        SampleParams{1.2f, 0.95f, 0.02f, 50, 13, 0, 0, 0}}) {
    draws(big, kBigV, kBigC, 512, peaked, base, 1024, 0.08);
  }
  draws(big, kBigV, kBigC, 512, flat, SampleParams{0.8f, 0.95f, 0.f, 0, 14, 0, 0, 0}, 256, 1.0);
}

// The cluster sampler at the real vocabulary in one small launch (compute-sanitizer's racecheck and
// synccheck run this one: tools/gpu_check.sh): rows of different parameters side by side, each
// token in its row's kept set, a padding row and a row of only NaN give 0.
TEST(GpuKernels, ClusterDrawsStayInTheKeptSet) {
  TELOS_SKIP_WITHOUT_GPU();
  constexpr int V = 128256, G = 1002, C = 8;
  const std::string k = "telos_kernels::sample<" + I(V) + ", 512, " + I(G) + ", " + I(C) + ">";
  TestModule mod(source_with_rope(), {k});
  std::vector<float> peaked = random_floats(V, 1.f), flat = random_floats(V, 0.5f);
  for (int i = 0; i < 6; ++i) peaked[77 + 19001 * i] = 19.f + 0.5f * static_cast<float>(i);
  const std::vector<SampleParams> params = {
      {1.0f, 1.f, 0.f, 4, 1, 0, 3, 0},   {0.8f, 0.9f, 0.f, 0, 2, 0, 4, 0},
      {0.8f, 0.95f, 0.f, 0, 3, 0, 5, 0}, {1.2f, 0.95f, 0.02f, 50, 4, 0, 6, 0},
      {0.7f, 1.f, 0.f, 0, 5, 0, 7, 0},   {1.0f, 0.9f, 0.f, 0, 6, 0, 8, 0},
      {1.0f, 0.9f, 0.f, 0, 7, 0, 9, 0}};
  const std::vector<const std::vector<float>*> row_logits = {&peaked, &peaked, &flat, &flat, &flat};
  std::vector<float> lg;
  for (const auto* row : row_logits) lg.insert(lg.end(), row->begin(), row->end());
  lg.insert(lg.end(), V, NAN);                    // row 5: only NaN
  lg.insert(lg.end(), flat.begin(), flat.end());  // row 6: padding
  DeviceBuffer<float> dl(lg);
  DeviceBuffer<std::uint64_t> dc(std::vector<std::uint64_t>(7 * G, 0));
  DeviceBuffer<SampleParams> dp(params);
  DeviceBuffer<int> rows(std::vector<int>{0, 1, 2, 3, 4, 5, -1}), out(std::vector<int>(7, -5)),
      out_host(7);
  CUDA_OK(mod.launch(k, 7 * C, 512,
                     {dl.get(), dc.get(), dp.get(), rows.get(), out.get(), out_host.get()}));
  const auto tok = out.download();
  EXPECT_EQ(out_host.download(), tok);
  for (int r = 0; r < 5; ++r) {
    SampleParams wider = params[r];  // as in the test above: the f32 kept set's edges
    wider.top_p = std::min(1.f, wider.top_p + 1e-4f), wider.min_p *= 1 - 1e-4f;
    const std::vector<double> kept = sample_distribution(*row_logits[r], wider);
    ASSERT_TRUE(tok[r] >= 0 && tok[r] < V) << "row " << r << ": " << tok[r];
    EXPECT_GT(kept[tok[r]], 0.0) << "row " << r << ": token " << tok[r] << " outside the kept set";
  }
  EXPECT_EQ(tok[5], 0) << "a row of only NaN";
  EXPECT_EQ(tok[6], 0) << "a padding row";
}

}  // namespace
}  // namespace telos::gpu_test

// ---- the tensor-parallel all-reduce (all_reduce.cuh) --------------------------------------------

namespace telos::gpu_test {
namespace {

// Whether every stream's work ends within `seconds`: a barrier that never opens fails the test
// instead of hanging it.
bool finished_within(const std::vector<cudaStream_t>& streams, double seconds) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  for (cudaStream_t st : streams) {
    cudaError_t e;
    while ((e = cudaStreamQuery(st)) == cudaErrorNotReady)
      if (std::chrono::steady_clock::now() > deadline) return false;
    if (e != cudaSuccess) return false;
  }
  return true;
}

// RANKS ranks on this one GPU, each with its own partial, x and flags, its kernels on its own
// stream (plain launches: no kernel waits resident for another, so the ranks' grids, at most
// kAllReduceMaxBlocks blocks each, run side by side). Each buffer holds M x H floats and a guard
// of poisoned words past them, which no kernel may write.
class RankSet {
 public:
  static constexpr std::size_t kGuard = 64;

  RankSet(int M, int H, int ranks) : n(static_cast<std::size_t>(M) * H) {
    std::vector<float*> partial_ptrs;
    std::vector<unsigned*> flag_ptrs;
    const std::size_t flag_words = static_cast<std::size_t>(codegen::kAllReduceMaxBlocks) * ranks;
    for (int r = 0; r < ranks; ++r) {
      partial.push_back(std::make_unique<DeviceBuffer<float>>(n + kGuard));
      x.push_back(std::make_unique<DeviceBuffer<float>>(n + kGuard));
      flags_.push_back(std::make_unique<DeviceBuffer<unsigned>>(flag_words));
      cudaMemset(flags_.back()->get(), 0, sizeof(unsigned) * flag_words);
      rank_index_.push_back(std::make_unique<DeviceBuffer<int>>(std::vector<int>{r}));
      partial_ptrs.push_back(partial.back()->get());
      flag_ptrs.push_back(flags_.back()->get());
      cudaStream_t st = nullptr;
      cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking);
      streams.push_back(st);
    }
    partial_table_ = std::make_unique<DeviceBuffer<float*>>(partial_ptrs);
    flag_table_ = std::make_unique<DeviceBuffer<unsigned*>>(flag_ptrs);
  }
  ~RankSet() {
    for (cudaStream_t st : streams) cudaStreamDestroy(st);
  }
  RankSet(const RankSet&) = delete;
  RankSet& operator=(const RankSet&) = delete;

  // Rank r's x becomes `values` (n floats); the guard past them stays poisoned.
  void set_x(int r, const std::vector<float>& values) {
    x[static_cast<std::size_t>(r)]->upload(values);
  }
  // Rank r's partial becomes `values` (n floats); the guard past them stays poisoned.
  void set_partial(int r, const std::vector<float>& values) {
    partial[static_cast<std::size_t>(r)]->upload(values);
  }
  // The all-reduce's first four arguments for rank r: the ranks' partials, their flags, r, its x.
  std::vector<const void*> args(int r) const {
    return {partial_table_->get(), flag_table_->get(),
            rank_index_[static_cast<std::size_t>(r)]->get(), x[static_cast<std::size_t>(r)]->get()};
  }
  cudaStream_t stream(int r) const { return streams[static_cast<std::size_t>(r)]; }
  // Rank r's flag words, kAllReduceMaxBlocks x ranks: word [b][s] is block b's from rank s.
  DeviceBuffer<unsigned>& flags(int r) const { return *flags_[static_cast<std::size_t>(r)]; }

  const std::size_t n;
  std::vector<std::unique_ptr<DeviceBuffer<float>>> partial, x;
  std::vector<cudaStream_t> streams;

 private:
  std::vector<std::unique_ptr<DeviceBuffer<unsigned>>> flags_;
  std::vector<std::unique_ptr<DeviceBuffer<int>>> rank_index_;
  std::unique_ptr<DeviceBuffer<float*>> partial_table_;
  std::unique_ptr<DeviceBuffer<unsigned*>> flag_table_;
};

// ((p0 + p1) + p2) + ... at element i, in f32: the order every form of the kernel adds in.
float rank_order_sum(const std::vector<std::vector<float>>& p, std::size_t i) {
  float sum = p[0][i];
  for (std::size_t q = 1; q < p.size(); ++q) sum += p[q][i];
  return sum;
}

std::string all_reduce_instance(const std::string& form, int M, int H, int ranks) {
  return "telos_kernels::" + form + "<" + I(M) + ", " + I(H) + ", " + I(ranks) + ", " +
         I(codegen::kAllReduceThreads) + ">";
}

// The all-reduce form `form` (all_reduce_residual or all_reduce_residual_two_shot) over `ranks`
// ranks, three launches in a row on fresh partials: every rank's x gains exactly
// ((p0 + p1) + p2) + ... in f32 (the same adds in the same order: bit for bit), every partial is
// zero after, and the poisoned words past each buffer's M x H floats stay poisoned.
void check_all_reduce(TestModule& mod, const std::string& form, int M, int H, int ranks) {
  const std::string name = all_reduce_instance(form, M, H, ranks);
  const int blocks = codegen::all_reduce_blocks(M, H);
  RankSet set(M, H, ranks);
  const std::size_t n = set.n;
  std::vector<std::vector<float>> x_host;
  for (int r = 0; r < ranks; ++r) {
    x_host.push_back(random_floats(n, 1.f));
    set.set_x(r, x_host.back());
  }
  const std::string label =
      form + " M=" + I(M) + " H=" + I(H) + " ranks=" + I(ranks) + " blocks=" + I(blocks);
  for (int round = 0; round < 3; ++round) {
    std::vector<std::vector<float>> p;
    for (int r = 0; r < ranks; ++r) {
      p.push_back(random_floats(n, 1.f));
      set.set_partial(r, p.back());
    }
    for (int r = 0; r < ranks; ++r)
      CUDA_OK(mod.launch_on(set.stream(r), name, blocks, codegen::kAllReduceThreads, set.args(r)));
    ASSERT_TRUE(finished_within(set.streams, 10.0))
        << label << " round " << round << ": the ranks' barrier did not open";
    for (int r = 0; r < ranks; ++r) {
      std::vector<float>& want = x_host[static_cast<std::size_t>(r)];
      for (std::size_t i = 0; i < n; ++i) want[i] += rank_order_sum(p, i);
      const std::vector<float> got = set.x[static_cast<std::size_t>(r)]->download();
      const std::vector<float> left = set.partial[static_cast<std::size_t>(r)]->download();
      for (std::size_t i = 0; i < n; ++i) {
        ASSERT_EQ(std::memcmp(&got[i], &want[i], 4), 0)
            << label << " rank " << r << " x[" << i << "] " << got[i] << " want " << want[i];
        ASSERT_EQ(left[i], 0.f) << label << " rank " << r << ": partial[" << i << "] not zeroed";
      }
      for (std::size_t i = n; i < n + RankSet::kGuard; ++i) {
        ASSERT_TRUE(std::isnan(got[i]))
            << label << " rank " << r << ": x written past its rows at " << i;
        ASSERT_TRUE(std::isnan(left[i]))
            << label << " rank " << r << ": partial written past its rows at " << i;
      }
    }
  }
}

// Every launch shape the plan gives the all-reduce: one block (a decode row of a small model) to
// kAllReduceMaxBlocks with several float4 a thread (a prefill chunk), hidden sizes that leave the
// last block partly idle, over 2, 4 and 8 ranks.
TEST(GpuKernels, AllReduceAddsEveryRanksPartialInRankOrder) {
  TELOS_SKIP_WITHOUT_GPU();
  struct Shape {
    int M, H, ranks;
  };
  const std::vector<Shape> shapes = {{1, 128, 2},   {1, 4096, 2},   {3, 2052, 2},   {8, 4096, 2},
                                     {64, 4096, 2}, {200, 1540, 2}, {512, 8192, 2}, {1, 4096, 4},
                                     {37, 2052, 4}, {256, 8192, 4}, {1, 8192, 8},   {64, 8192, 8}};
  std::vector<std::string> instances;
  for (const Shape& s : shapes)
    instances.push_back(all_reduce_instance("all_reduce_residual", s.M, s.H, s.ranks));
  TestModule mod(source_with_rope({1.f}, 2), instances);
  for (const Shape& s : shapes) {
    check_all_reduce(mod, "all_reduce_residual", s.M, s.H, s.ranks);
    if (HasFatalFailure()) return;
  }
}

// The two-shot form (reduce-scatter, then all-gather) gives the one-shot's bits: at sizes on both
// sides of the plan's threshold over 4 and 8 ranks (all_reduce_two_shot), at 2 ranks (which the
// plan never gives it, and telos-allreduce-bench times), with slices of unequal size (float4 counts
// that the ranks do not divide) and blocks that take several float4s of each slice.
TEST(GpuKernels, AllReduceTwoShotAddsEveryRanksPartialInRankOrder) {
  TELOS_SKIP_WITHOUT_GPU();
  struct Shape {
    int M, H, ranks;
  };
  const std::vector<Shape> shapes = {{1, 128, 2},   {3, 2052, 2},  {64, 4096, 2},  {54, 4096, 4},
                                     {55, 4096, 4}, {57, 4100, 4}, {512, 8192, 4}, {15, 4096, 8},
                                     {16, 4096, 8}, {37, 2052, 8}, {256, 8192, 8}};
  // The shapes hold sizes on both sides of the threshold at 4 and at 8 ranks.
  for (int ranks : {4, 8}) {
    int one = 0, two = 0;
    for (const Shape& s : shapes)
      if (s.ranks == ranks) (codegen::all_reduce_two_shot(s.M, s.H, ranks) ? two : one) += 1;
    ASSERT_TRUE(one > 0 && two > 0) << ranks << " ranks: shapes on one side of the threshold only";
  }
  std::vector<std::string> instances;
  for (const Shape& s : shapes)
    instances.push_back(all_reduce_instance("all_reduce_residual_two_shot", s.M, s.H, s.ranks));
  TestModule mod(source_with_rope({1.f}, 2), instances);
  for (const Shape& s : shapes) {
    check_all_reduce(mod, "all_reduce_residual_two_shot", s.M, s.H, s.ranks);
    if (HasFatalFailure()) return;
  }
}

// gather_sum_residual<M, H, RANKS>, the NCCL form's kernel after ncclAllGather, on a gather buffer
// [RANKS, M, H] of random partials as the all-gather leaves it (rank r's at row block r): x gains
// exactly ((g0 + g1) + g2) + ... in f32, the one-shot's adds in its order (bit for bit), its own
// partial is zero after, the gather buffer is unchanged, and the poisoned words past x and the
// partial stay poisoned. Three rounds on the same x. Shapes: one row, rows whose float4 count
// leaves the last block partly idle (ragged M, H not a multiple of 1024), the grid's cap with
// several float4s a thread (the 8B's 512-token chunk), a tiny model's 8192-token chunk; 2, 4 and 8
// ranks.
void check_gather_sum(TestModule& mod, int M, int H, int ranks) {
  const std::string name =
      "telos_kernels::gather_sum_residual<" + I(M) + ", " + I(H) + ", " + I(ranks) + ">";
  const std::size_t n = static_cast<std::size_t>(M) * H, guard = 64;
  const int blocks = codegen::gather_sum_blocks(M, H);
  const std::string label = name + " blocks=" + I(blocks);
  DeviceBuffer<float> x(n + guard), partial(n + guard), gather(n * ranks);
  std::vector<float> want = random_floats(n, 1.f);
  x.upload(want);
  for (int round = 0; round < 3; ++round) {
    std::vector<std::vector<float>> p;
    std::vector<float> all;
    for (int r = 0; r < ranks; ++r) {
      p.push_back(random_floats(n, 1.f));
      all.insert(all.end(), p.back().begin(), p.back().end());
    }
    gather.upload(all);
    partial.upload(p[0]);  // this rank's own, which the all-gather sent
    CUDA_OK(mod.launch(name, blocks, codegen::kAllReduceThreads,
                       {gather.get(), partial.get(), x.get()}));
    for (std::size_t i = 0; i < n; ++i) want[i] += rank_order_sum(p, i);
    const std::vector<float> got = x.download(), left = partial.download(),
                             kept = gather.download();
    for (std::size_t i = 0; i < n; ++i) {
      ASSERT_EQ(std::memcmp(&got[i], &want[i], 4), 0)
          << label << " round " << round << " x[" << i << "] " << got[i] << " want " << want[i];
      ASSERT_EQ(left[i], 0.f) << label << ": partial[" << i << "] not zeroed";
    }
    ASSERT_EQ(std::memcmp(kept.data(), all.data(), 4 * all.size()), 0)
        << label << ": the gather buffer changed";
    for (std::size_t i = n; i < n + guard; ++i) {
      ASSERT_TRUE(std::isnan(got[i])) << label << ": x written past its rows at " << i;
      ASSERT_TRUE(std::isnan(left[i])) << label << ": partial written past its rows at " << i;
    }
  }
}

TEST(GpuKernels, GatherSumResidualAddsTheGatheredPartialsInRankOrder) {
  TELOS_SKIP_WITHOUT_GPU();
  struct Shape {
    int M, H, ranks;
  };
  const std::vector<Shape> shapes = {{1, 128, 2},    {3, 2052, 2},  {200, 1540, 2}, {512, 4096, 2},
                                     {8192, 128, 2}, {1, 4096, 4},  {37, 2052, 4},  {256, 4096, 4},
                                     {1, 8192, 8},   {57, 4100, 8}, {128, 4096, 8}};
  std::vector<std::string> instances;
  for (const Shape& s : shapes)
    instances.push_back("telos_kernels::gather_sum_residual<" + I(s.M) + ", " + I(s.H) + ", " +
                        I(s.ranks) + ">");
  TestModule mod(source_with_rope({1.f}, 2), instances);
  for (const Shape& s : shapes) {
    check_gather_sum(mod, s.M, s.H, s.ranks);
    if (HasFatalFailure()) return;
  }
}

// all_reduce_residual_rmsnorm against the unfused path it replaces, all_reduce_residual and then
// rmsnorm<H, EPS, false>, on the same x, partials and norm weight: x and h bit for bit on every
// rank, x equal to the host's rank-order sum, every partial zero after, the guards past x and h
// poisoned. Shapes: a decode row of the 1B, 8B and 70B, rows that leave the last thread's chunk
// partly past H (H / 8 not a multiple of 128), 128 rows in 64 blocks (two rows a block), over 2, 4
// and 8 ranks.
TEST(GpuKernels, AllReduceWithNormMatchesUnfusedBitForBit) {
  TELOS_SKIP_WITHOUT_GPU();
  struct Shape {
    int M, H, ranks;
  };
  const std::vector<Shape> shapes = {{1, 2048, 2},  {1, 4096, 2}, {3, 1544, 2}, {128, 4096, 2},
                                     {16, 4096, 4}, {1, 8192, 8}, {33, 8192, 8}};
  const std::string eps = float_literal(1e-5);
  auto fused = [&](const Shape& s) {
    return "telos_kernels::all_reduce_residual_rmsnorm<" + I(s.M) + ", " + I(s.H) + ", " +
           I(s.ranks) + ", " + eps + ">";
  };
  auto norm = [&](int H) { return "telos_kernels::rmsnorm<" + I(H) + ", " + eps + ", false>"; };
  std::vector<std::string> instances;
  for (const Shape& s : shapes) {
    instances.push_back(fused(s));
    instances.push_back(all_reduce_instance("all_reduce_residual", s.M, s.H, s.ranks));
    if (std::find(instances.begin(), instances.end(), norm(s.H)) == instances.end())
      instances.push_back(norm(s.H));
  }
  TestModule mod(source_with_rope({1.f}, 2), instances);
  for (const Shape& s : shapes) {
    const std::string label = "M=" + I(s.M) + " H=" + I(s.H) + " ranks=" + I(s.ranks);
    const std::size_t n = static_cast<std::size_t>(s.M) * s.H, guard = 64;
    RankSet unfused(s.M, s.H, s.ranks), with_norm(s.M, s.H, s.ranks);
    const DeviceBuffer<float> w(random_floats(static_cast<std::size_t>(s.H), 1.f));
    std::vector<std::unique_ptr<DeviceBuffer<std::uint16_t>>> h_unfused, h_fused;
    std::vector<std::vector<float>> x0, p;
    for (int r = 0; r < s.ranks; ++r) {
      x0.push_back(random_floats(n, 1.f));
      p.push_back(random_floats(n, 1.f));
      for (RankSet* set : {&unfused, &with_norm}) {
        set->set_x(r, x0.back());
        set->set_partial(r, p.back());
      }
      h_unfused.push_back(std::make_unique<DeviceBuffer<std::uint16_t>>(n + guard));
      h_fused.push_back(std::make_unique<DeviceBuffer<std::uint16_t>>(n + guard));
    }
    for (int r = 0; r < s.ranks; ++r)
      CUDA_OK(mod.launch_on(
          unfused.stream(r), all_reduce_instance("all_reduce_residual", s.M, s.H, s.ranks),
          codegen::all_reduce_blocks(s.M, s.H), codegen::kAllReduceThreads, unfused.args(r)));
    ASSERT_TRUE(finished_within(unfused.streams, 10.0))
        << label << ": the unfused barrier did not open";
    for (int r = 0; r < s.ranks; ++r)
      CUDA_OK(mod.launch(norm(s.H), s.M, codegen::kNormThreads,
                         {unfused.x[static_cast<std::size_t>(r)]->get(), w.get(), nullptr,
                          h_unfused[static_cast<std::size_t>(r)]->get()}));
    for (int r = 0; r < s.ranks; ++r) {
      std::vector<const void*> args = with_norm.args(r);
      args.push_back(w.get());
      args.push_back(h_fused[static_cast<std::size_t>(r)]->get());
      CUDA_OK(mod.launch_on(with_norm.stream(r), fused(s), codegen::all_reduce_norm_blocks(s.M),
                            codegen::kNormThreads, args));
    }
    ASSERT_TRUE(finished_within(with_norm.streams, 10.0))
        << label << ": the fused barrier did not open";
    for (int r = 0; r < s.ranks; ++r) {
      const std::size_t ri = static_cast<std::size_t>(r);
      const std::vector<float> x_want = unfused.x[ri]->download(),
                               x_got = with_norm.x[ri]->download(),
                               left = with_norm.partial[ri]->download();
      const std::vector<std::uint16_t> h_want = h_unfused[ri]->download(),
                                       h_got = h_fused[ri]->download();
      for (std::size_t i = 0; i < n; ++i) {
        const float sum = x0[ri][i] + rank_order_sum(p, i);
        ASSERT_EQ(std::memcmp(&x_want[i], &sum, 4), 0)
            << label << " rank " << r << " unfused x[" << i << "]";
        ASSERT_EQ(std::memcmp(&x_got[i], &sum, 4), 0)
            << label << " rank " << r << " x[" << i << "] " << x_got[i] << " want " << sum;
        ASSERT_EQ(h_got[i], h_want[i]) << label << " rank " << r << " h[" << i << "] "
                                       << from_bf16(h_got[i]) << " want " << from_bf16(h_want[i]);
        ASSERT_EQ(left[i], 0.f) << label << " rank " << r << ": partial[" << i << "] not zeroed";
      }
      for (std::size_t i = n; i < n + guard; ++i) {
        ASSERT_TRUE(std::isnan(x_got[i])) << label << " rank " << r << ": x written past its rows";
        ASSERT_TRUE(std::isnan(left[i]))
            << label << " rank " << r << ": partial written past its rows";
        ASSERT_EQ(h_got[i], 0xffff) << label << " rank " << r << ": h written past its rows";
      }
    }
  }
}

// ---- the all-reduce one rank at a time: the form compute-sanitizer runs ------------------------
//
// compute-sanitizer runs one kernel at a time, so the side-by-side ranks above never pass their
// first barrier under it. Here each rank's launch runs alone: before it, the host raises the words
// that every other rank writes into this rank's flags to the launch's last epoch (as if they had
// arrived), and puts every other rank's partial in the state this rank reads it in (the
// projection's partial; for the two-shot, that rank's own slice already summed). Each launch is
// the plan's instance on the plan's grid, so memcheck sees every address the kernel reads and
// writes (its x and partial, every rank's partial and flag words, the norm weight and h) and
// racecheck its shared memory (the epoch, the norm's scratch) across its __syncthreads; the
// results are checked as above, bit for bit. What this form cannot show is the ranks' timing
// against each other, which the side-by-side tests above hold. (Not one grid of every rank's
// blocks: the kernels take their rank from memory and their flag words from blockIdx.x, so that
// form would need a template switch the plan never takes, and co-resident blocks under the
// sanitizer's instrumentation besides; docs/multi-gpu.md.)

// An all-reduce form as the plan launches it: its instance, grid and block, its barriers (each
// raises a block's epoch by one), and whether the other ranks' own slices are summed in place
// before this rank reads them (the two-shot's reduce-scatter).
struct AllReduceLaunch {
  std::string instance;
  int blocks, threads, barriers;
  bool two_shot;
  std::string norm;  // the unfused rmsnorm instance the fused form's h is checked against, or ""
};

std::string all_reduce_norm_instance(int M, int H, int ranks, const std::string& eps) {
  return "telos_kernels::all_reduce_residual_rmsnorm<" + I(M) + ", " + I(H) + ", " + I(ranks) +
         ", " + eps + ">";
}

// What rank q's partial holds while another rank's launch reads it.
std::vector<float> partial_as_read(const std::vector<std::vector<float>>& p, int q, bool two_shot) {
  std::vector<float> v = p[static_cast<std::size_t>(q)];
  if (!two_shot) return v;
  const long long vectors = static_cast<long long>(v.size() / 4),
                  ranks = static_cast<long long>(p.size());
  for (long long i = 4 * (vectors * q / ranks); i < 4 * (vectors * (q + 1) / ranks); ++i)
    v[static_cast<std::size_t>(i)] = rank_order_sum(p, static_cast<std::size_t>(i));
  return v;
}

// Rank q's flag words before rank r's launch from epoch e: r's words from every other rank at the
// launch's last epoch, every other word at e (block b's epoch is its own word [b][r]).
std::vector<unsigned> flags_before(int q, int r, int ranks, unsigned e, int barriers) {
  std::vector<unsigned> f(static_cast<std::size_t>(codegen::kAllReduceMaxBlocks) * ranks, e);
  if (q != r) return f;
  for (int b = 0; b < codegen::kAllReduceMaxBlocks; ++b)
    for (int s = 0; s < ranks; ++s)
      if (s != r) f[static_cast<std::size_t>(b * ranks + s)] = e + static_cast<unsigned>(barriers);
  return f;
}

// Two rounds of `ranks` launches, one rank at a time, on fresh x and partials, the epochs starting
// two below the wrap-around (so the barriers' comparison crosses it): after rank r's launch its x
// gains exactly ((p0 + p1) + p2) + ..., its partial is zero, every other rank's partial is as it
// was, each of its blocks raised word [b][r] of every rank's flags to the last epoch and touched no
// other word, the fused form's h has the unfused rmsnorm's bits, and every guard stays poisoned.
void check_one_rank_at_a_time(TestModule& mod, const AllReduceLaunch& l, int M, int H, int ranks) {
  RankSet set(M, H, ranks);
  const std::size_t n = set.n, guard = RankSet::kGuard;
  const DeviceBuffer<float> w(random_floats(static_cast<std::size_t>(H), 1.f));
  DeviceBuffer<std::uint16_t> h(n + guard), h_want(n + guard);
  const std::string label = l.instance + " blocks=" + I(l.blocks);
  unsigned e = 0xfffffffeu;
  for (int round = 0; round < 2; ++round, e += static_cast<unsigned>(l.barriers)) {
    std::vector<std::vector<float>> p;
    for (int r = 0; r < ranks; ++r) p.push_back(random_floats(n, 1.f));
    for (int r = 0; r < ranks; ++r) {
      const std::string at = label + " round " + I(round) + " rank " + I(r);
      const std::vector<float> x0 = random_floats(n, 1.f);
      set.set_x(r, x0);
      std::vector<std::vector<float>> as_read;
      for (int q = 0; q < ranks; ++q) {
        as_read.push_back(q == r ? p[static_cast<std::size_t>(q)]
                                 : partial_as_read(p, q, l.two_shot));
        set.set_partial(q, as_read.back());
        set.flags(q).upload(flags_before(q, r, ranks, e, l.barriers));
      }
      h.poison();
      std::vector<const void*> args = set.args(r);
      if (!l.norm.empty()) args.insert(args.end(), {w.get(), h.get()});
      CUDA_OK(mod.launch_on(set.stream(r), l.instance, l.blocks, l.threads, args));
      ASSERT_TRUE(finished_within({set.stream(r)}, 120.0)) << at << ": a barrier did not open";

      const std::vector<float> x = set.x[static_cast<std::size_t>(r)]->download();
      for (std::size_t i = 0; i < n; ++i) {
        const float want = x0[i] + rank_order_sum(p, i);
        ASSERT_EQ(std::memcmp(&x[i], &want, 4), 0)
            << at << " x[" << i << "] " << x[i] << " want " << want;
      }
      for (std::size_t i = n; i < n + guard; ++i)
        ASSERT_TRUE(std::isnan(x[i])) << at << ": x written past its rows at " << i;
      for (int q = 0; q < ranks; ++q) {
        const std::vector<float> left = set.partial[static_cast<std::size_t>(q)]->download();
        for (std::size_t i = 0; i < n; ++i) {
          const float want = q == r ? 0.f : as_read[static_cast<std::size_t>(q)][i];
          ASSERT_EQ(std::memcmp(&left[i], &want, 4), 0)
              << at << ": partial " << q << "[" << i << "] " << left[i] << " want " << want;
        }
        for (std::size_t i = n; i < n + guard; ++i)
          ASSERT_TRUE(std::isnan(left[i])) << at << ": partial " << q << " written past its rows";
        std::vector<unsigned> want = flags_before(q, r, ranks, e, l.barriers);
        for (int b = 0; b < l.blocks; ++b)
          want[static_cast<std::size_t>(b * ranks + r)] = e + static_cast<unsigned>(l.barriers);
        ASSERT_EQ(set.flags(q).download(), want) << at << ": rank " << q << "'s flag words";
      }
      if (l.norm.empty()) continue;
      h_want.poison();
      CUDA_OK(
          mod.launch(l.norm, M, codegen::kNormThreads,
                     {set.x[static_cast<std::size_t>(r)]->get(), w.get(), nullptr, h_want.get()}));
      const std::vector<std::uint16_t> got = h.download(), ref = h_want.download();
      for (std::size_t i = 0; i < n + guard; ++i)
        ASSERT_EQ(got[i], ref[i]) << at << " h[" << i << "] " << from_bf16(got[i]) << " want "
                                  << from_bf16(ref[i]) << (i >= n ? " (past its rows)" : "");
    }
  }
}

// Every form over 2, 4 and 8 ranks on shapes the side-by-side tests take: one block to
// kAllReduceMaxBlocks with several float4s a thread, hidden sizes that leave a block partly idle,
// two-shot slices of unequal size, fused rows whose last chunk passes H, two rows a block.
TEST(GpuKernels, AllReduceOneRankAtATime) {
  TELOS_SKIP_WITHOUT_GPU();
  struct Shape {
    int M, H, ranks;
  };
  const std::string eps = float_literal(1e-5);
  std::vector<std::pair<AllReduceLaunch, Shape>> cases;
  for (const Shape& s :
       std::vector<Shape>{{1, 128, 2}, {3, 2052, 2}, {512, 8192, 2}, {37, 2052, 4}, {1, 8192, 8}})
    cases.push_back(
        {{all_reduce_instance("all_reduce_residual", s.M, s.H, s.ranks),
          codegen::all_reduce_blocks(s.M, s.H), codegen::kAllReduceThreads, 2, false, ""},
         s});
  for (const Shape& s : std::vector<Shape>{
           {3, 2052, 2}, {55, 4096, 4}, {57, 4100, 4}, {512, 8192, 4}, {37, 2052, 8}})
    cases.push_back(
        {{all_reduce_instance("all_reduce_residual_two_shot", s.M, s.H, s.ranks),
          codegen::all_reduce_blocks(s.M, s.H), codegen::kAllReduceThreads, 3, true, ""},
         s});
  for (const Shape& s :
       std::vector<Shape>{{1, 2048, 2}, {3, 1544, 2}, {128, 4096, 2}, {16, 4096, 4}, {33, 8192, 8}})
    cases.push_back({{all_reduce_norm_instance(s.M, s.H, s.ranks, eps),
                      codegen::all_reduce_norm_blocks(s.M), codegen::kNormThreads, 2, false,
                      "telos_kernels::rmsnorm<" + I(s.H) + ", " + eps + ", false>"},
                     s});
  std::vector<std::string> instances;
  for (const auto& [l, s] : cases)
    for (const std::string& name : {l.instance, l.norm})
      if (!name.empty() && std::find(instances.begin(), instances.end(), name) == instances.end())
        instances.push_back(name);
  TestModule mod(source_with_rope({1.f}, 2), instances);
  for (const auto& [l, s] : cases) {
    check_one_rank_at_a_time(mod, l, s.M, s.H, s.ranks);
    if (HasFatalFailure()) return;
  }
}

// ---- e4m3 weights (gemm_e4m3.cuh) -----------------------------------------------------------

// A random e4m3 weight of [rows, k] (every finite byte: NaN's 0x7f and 0xff left out) with f32
// scales of sbr x sbc blocks between 0.008 and 0.024 (not powers of two), and its dequantized form
// W' = bf16(float(q) · s), on which the kernels' arithmetic is defined (as bf16 and as f32).
struct E4m3Weight {
  std::vector<std::uint8_t> q;
  std::vector<float> scale;
  bf16v w;
  std::vector<float> wf;
};
E4m3Weight random_e4m3(int rows, int k, int sbr, int sbc) {
  E4m3Weight e;
  const int srows = (rows + sbr - 1) / sbr, scols = (k + sbc - 1) / sbc;
  std::uniform_int_distribution<int> byte(0, 253);
  std::uniform_real_distribution<float> sd(0.008f, 0.024f);
  e.q.resize(static_cast<std::size_t>(rows) * k);
  for (auto& b : e.q) {
    const int v = byte(rng());
    b = static_cast<std::uint8_t>(v < 0x7f ? v : v + 1);  // 0 .. 0x7e, 0x80 .. 0xfe
  }
  e.scale.resize(static_cast<std::size_t>(srows) * scols);
  for (auto& x : e.scale) x = sd(rng());
  e.w.resize(e.q.size());
  e.wf.resize(e.q.size());
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < k; ++c) {
      const std::size_t i = static_cast<std::size_t>(r) * k + c;
      const float s = e.scale[static_cast<std::size_t>(r / sbr) * scols + c / sbc];
      e.w[i] = f32_to_bf16(e4m3_to_f32(e.q[i]) * s);
      e.wf[i] = bf16_to_f32(e.w[i]);
    }
  return e;
}

// The map the executor encodes for `tmap:w:NAME` over an e4m3 weight: one-byte elements, boxes of
// box_rows x 64 bytes, no swizzle.
class E4m3Map {
 public:
  E4m3Map(const void* base, int rows, int cols, int box_rows)
      : buf_(std::vector<hexel::TensorMap>{
            hexel::encode_2d(hexel::TmaDtype::U8, base, static_cast<std::uint64_t>(rows),
                             static_cast<std::uint64_t>(cols), static_cast<std::uint64_t>(cols),
                             static_cast<std::uint32_t>(box_rows), 64, hexel::Swizzle::None)}) {}
  const void* get() const { return buf_.get(); }

 private:
  DeviceBuffer<hexel::TensorMap> buf_;
};

// Every e4m3 GEMM form (small-M and prefill; bf16 store, residual, SwiGLU) on ragged shapes (M
// from 1 to 200, N and K not multiples of the tiles, a partial last K block, a ring that wraps)
// and each scale layout the importer writes (128 x 128 blocks, the QKV weight's 64-row blocks, one
// scale a row): the output is, bit for bit, the bf16 prefill GEMM's on the dequantized W' =
// bf16(float(q) · s), so the small and the prefill e4m3 GEMMs equal each other and a token's row
// is the same in every bucket; it is within bf16 tolerance of f64 on W' (residual: 1e-5), and the
// 64 guard rows past M stay poisoned. Before each small GEMM every SM's shared memory is NaNs.
TEST(GpuKernels, E4m3GemmsMatchBf16GemmOfDequantizedWeights) {
  TELOS_SKIP_UNLESS_SM90(kWgmmaKernels);
  struct Case {
    int N, K, sbr, sbc;
    std::vector<int> ms;
  };
  // K as codegen allows it (a multiple of 32: check_model), its last 64-wide block ragged; an e4m3
  // row is then a multiple of 16 bytes, as TMA requires.
  for (const Case& c : {Case{520, 2016, 128, 128, {1, 5, 64, 130}},
                        Case{384, 288, 64, 128, {1, 8, 200}}, Case{136, 288, 1, 288, {3, 100}}}) {
    const int N = c.N, K = c.K;
    const std::string blocks = ", " + I(c.sbr) + ", " + I(c.sbc) + ">";
    std::vector<std::string> names;
    for (int M : c.ms)
      for (const std::string epi : {"bf16", "residual", "swiglu"}) {
        const std::string dims = "<" + I(M) + ", " + I(N) + ", " + I(K);
        const codegen::SmallGemmTiling t =
            codegen::small_gemm_e4m3_tiling(N, K, M, epi == "swiglu");
        names.push_back("telos_kernels::gemm_prefill_" + epi + dims + ">");
        names.push_back("telos_kernels::gemm_prefill_e4m3_" + epi + dims + blocks);
        names.push_back("telos_kernels::gemm_small_e4m3_" + epi + dims + ", " + I(t.bn) + ", " +
                        I(t.stages) + blocks);
      }
    names.push_back("poison_shared");
    TestModule mod(source_with_rope() + kPoisonShared, names);
    constexpr int MAXM = 200, GUARD = 64;
    std::vector<float> Af;
    DeviceBuffer<std::uint16_t> dA(random_bf16(static_cast<std::size_t>(MAXM) * K, 1.f, Af));
    const E4m3Weight w = random_e4m3(2 * N, K, c.sbr, c.sbc);  // [2N, K]: SwiGLU's gate and up
    DeviceBuffer<std::uint8_t> dq(w.q);
    DeviceBuffer<float> dscale(w.scale);
    DeviceBuffer<std::uint16_t> dw(w.w);
    const std::vector<double> ref = gemm_ref(Af, w.wf, MAXM, 2 * N, K);
    const std::vector<float> x0 = random_floats(static_cast<std::size_t>(MAXM + GUARD) * N);
    std::size_t i = 0;
    for (int M : c.ms) {
      const std::size_t MN = static_cast<std::size_t>(M) * N,
                        total = MN + static_cast<std::size_t>(GUARD) * N;
      for (const std::string epi : {"bf16", "residual", "swiglu"}) {
        const bool swiglu = epi == "swiglu", residual = epi == "residual";
        const std::string &bf16_gemm = names[i], &prefill = names[i + 1], &small = names[i + 2];
        i += 3;
        const int rows = swiglu ? 2 * N : N, cols = swiglu ? 128 : 256;
        const codegen::SmallGemmTiling t = codegen::small_gemm_e4m3_tiling(N, K, M, swiglu);
        // The outputs of the bf16 GEMM of W', the e4m3 prefill and the e4m3 small GEMM: poisoned
        // (bf16) or x0 (residual).
        DeviceBuffer<std::uint16_t> y0(total), y1(total), y2(total);
        const std::vector<float> x_init(x0.begin(), x0.begin() + total);
        DeviceBuffer<float> x0d(x_init), x1d(x_init), x2d(x_init);
        const DeviceMap a128(dA.get(), M, K, 128), a_small(dA.get(), M, K, t.a_box),
            w_bf16(dw.get(), rows, K, cols);
        const E4m3Map q_prefill(dq.get(), rows, K, cols), q_small(dq.get(), rows, K, t.w_box());
        const DeviceMap m0 = residual ? DeviceMap(x0d.get(), M, N, 64, hexel::TmaDtype::F32)
                                      : DeviceMap(y0.get(), M, N, 64);
        const DeviceMap m1 = residual ? DeviceMap(x1d.get(), M, N, 64, hexel::TmaDtype::F32)
                                      : DeviceMap(y1.get(), M, N, 64);
        CUDA_OK(mod.launch(bf16_gemm, prefill_grid(M, N, cols), kPrefillThreads,
                           {a128.get(), w_bf16.get(), m0.get()}, kPrefillSmem));
        CUDA_OK(mod.launch(prefill, prefill_grid(M, N, cols), kPrefillThreads,
                           {a128.get(), q_prefill.get(), dscale.get(), m1.get()},
                           codegen::prefill_gemm_e4m3_smem()));
        const void* small_out = residual ? static_cast<const void*>(x2d.get()) : y2.get();
        CUDA_OK(mod.launch("poison_shared", sm_count(), 1024, {}, codegen::kMaxSmemPerBlock));
        CUDA_OK(mod.launch(small, dim3(t.tiles_m, t.tiles_n),
                           t.threads() + codegen::kSmallGemmConverterThreads,
                           {a_small.get(), q_small.get(), dscale.get(), small_out},
                           codegen::small_gemm_e4m3_smem(t)));
        const std::string what = epi + " M=" + I(M) + " N=" + I(N) + " K=" + I(K) + " blocks " +
                                 I(c.sbr) + "x" + I(c.sbc) + " BN=" + I(t.bn) + " st" + I(t.stages);
        std::vector<float> got(MN);
        std::vector<double> want(MN);
        if (residual) {
          const auto bits = x0d.download(), pre = x1d.download(), sm = x2d.download();
          EXPECT_EQ(0, std::memcmp(bits.data(), pre.data(), MN * sizeof(float)))
              << "prefill " << what;
          EXPECT_EQ(0, std::memcmp(bits.data(), sm.data(), MN * sizeof(float))) << "small " << what;
          for (std::size_t e = MN; e < total; ++e) {
            ASSERT_EQ(pre[e], x0[e]) << "prefill wrote past M, " << what;
            ASSERT_EQ(sm[e], x0[e]) << "small wrote past M, " << what;
          }
          for (std::size_t e = 0; e < MN; ++e) {
            got[e] = pre[e];
            want[e] = x0[e] + ref[e / N * 2 * N + e % N];
          }
          EXPECT_LT(rel_l2(got, want), 1e-5) << "vs f64, " << what;
        } else {
          const auto bits = y0.download(), pre = y1.download(), sm = y2.download();
          EXPECT_EQ(0, std::memcmp(bits.data(), pre.data(), MN * 2)) << "prefill " << what;
          EXPECT_EQ(0, std::memcmp(bits.data(), sm.data(), MN * 2)) << "small " << what;
          for (std::size_t e = MN; e < total; ++e) {
            ASSERT_EQ(pre[e], 0xffff) << "prefill wrote past M, " << what;
            ASSERT_EQ(sm[e], 0xffff) << "small wrote past M, " << what;
          }
          for (std::size_t e = 0; e < MN; ++e) {
            const std::size_t r = e / N * 2 * N + e % N;
            const double g = ref[r], u = ref[r + N];
            got[e] = from_bf16(pre[e]);
            want[e] = swiglu ? g / (1.0 + std::exp(-g)) * u : g;
          }
          EXPECT_LT(rel_l2(got, want), 1e-2) << "vs f64, " << what;
        }
      }
    }
  }
}

// ---- the sm_100a GEMMs and their Hopper twins (docs/hexel.md, "Blackwell") -------------------

// The sm_100a small GEMM that small_gemm_sm100_tiling plans for M tokens, or its Hopper twin
// (gemm_small_sm100.cuh, SmallWgmmaTwin): the instance, block and dynamic shared memory, or an
// empty name where the twin cannot hold the tile's accumulator (SwiGLU token tiles over 128).
// With `norm_eps` (the epsilon's literal) the norm form, gemm_small_sm100[_twin]_norm_<epi>.
struct SmallSm100 {
  codegen::SmallGemmSm100Tiling t;
  std::string name;
  int smem = 0, threads = 0;
};
SmallSm100 small_sm100(const std::string& epi, int M, int N, int K,
                       Sm100Form form = Sm100Form::Twin, const std::string& norm_eps = "") {
  using Twin = telos_kernels::SmallGemmSm100Twin;
  SmallSm100 s{codegen::small_gemm_sm100_tiling(N, K, M, epi == "swiglu", !norm_eps.empty()), "", 0,
               0};
  const std::string name = s.t.instance(epi, M, N, K, norm_eps);
  if (form == Sm100Form::Tcgen05) {
    s.name = name;
    s.smem = s.t.smem();
    s.threads = codegen::kSmallGemmSm100Threads;
    return s;
  }
  const unsigned accum = (epi == "swiglu" ? 2u : 1u) * static_cast<unsigned>(s.t.mma_n);
  if (accum > Twin::kMaxAccumColumns) return s;
  const std::string prefix = "telos_kernels::gemm_small_sm100_";
  s.name = prefix + "twin_" + name.substr(prefix.size());
  s.smem = static_cast<int>(Twin::smem(static_cast<unsigned>(s.t.stages),
                                       static_cast<unsigned>(s.t.stage_bytes()), accum,
                                       static_cast<unsigned>(s.t.resident_bytes())));
  s.threads = Twin::kThreads;
  return s;
}
const std::string kSm100Twins =
    "#include \"gemm_small_sm100.cuh\"\n#include \"gemm_prefill_sm100.cuh\"\n";

// The sm_100a prefill GEMMs' instances: gemm_prefill_sm100_<epi> (one CTA a 128 x 256 tile) and
// gemm_prefill_sm100_pair_<epi> (a CTA pair a 256 x 256 tile) at M x N x K.
std::string prefill_sm100_instance(const std::string& epi, int M, int N, int K, bool pair) {
  return std::string("telos_kernels::gemm_prefill_sm100_") + (pair ? "pair_" : "") + epi + "<" +
         I(M) + ", " + I(N) + ", " + I(K) + ">";
}
// One launch of an sm_100a prefill GEMM (one CTA or the pair) as the plan makes it: A [M, K] in
// 128-row boxes, W [N, K] (SwiGLU: [2N, K], gate then up) in boxes of the tile's W rows (the pair:
// a CTA's 128), into y (bf16) or the residual x (f32), both M x N in 64-row boxes.
cudaError_t launch_prefill_sm100(TestModule& mod, const std::string& epi, int M, int N, int K,
                                 bool pair, const void* a, const void* w, void* out) {
  const bool swiglu = epi == "swiglu";
  const int cols = swiglu ? 128 : 256;
  const DeviceMap a_map(a, M, K, 128), w_map(w, swiglu ? 2 * N : N, K, pair ? 128 : cols),
      out_map(out, M, N, 64, epi == "residual" ? hexel::TmaDtype::F32 : hexel::TmaDtype::BF16);
  return mod.launch(prefill_sm100_instance(epi, M, N, K, pair),
                    pair ? codegen::prefill_pair_grid(M, N, cols) : prefill_grid(M, N, cols),
                    kPrefillThreads, {a_map.get(), w_map.get(), out_map.get()},
                    pair ? codegen::prefill_pair_smem(128) : codegen::prefill_gemm_smem(0));
}

// A run's output (outs[0]: the kernel under test; outs[1 ..]: the kernels that must give its bits,
// named in `refs`): M x N elements (bf16 bits as floats, or the residual's f32), then `guard`
// poisoned ones past M. outs[0] against f64 (ref [M, 2N]: gate, then up; x0 the residual's input),
// the guard untouched, and each other output bit for bit.
void check_sm100_outputs(const std::vector<std::vector<float>>& outs,
                         const std::vector<std::string>& refs, const std::vector<double>& ref,
                         const std::vector<float>& x0, const std::string& epi, int M, int N,
                         std::size_t guard, const std::string& what) {
  const bool swiglu = epi == "swiglu", residual = epi == "residual";
  const std::size_t MN = static_cast<std::size_t>(M) * N, n = static_cast<std::size_t>(N);
  std::vector<float> got(MN);
  std::vector<double> want(MN);
  for (std::size_t e = 0; e < MN; ++e) {
    const std::size_t r = e / n * 2 * n + e % n;
    const double g = ref[r], u = ref[r + n];
    got[e] = residual ? outs[0][e] : from_bf16(static_cast<std::uint16_t>(outs[0][e]));
    want[e] = residual ? x0[e] + g : swiglu ? g / (1.0 + std::exp(-g)) * u : g;
  }
  EXPECT_LT(rel_l2(got, want), residual ? 1e-5 : 1e-2) << "vs f64, " << what;
  for (std::size_t e = MN; e < MN + guard; ++e) {
    if (residual)
      ASSERT_EQ(outs[0][e], x0[e]) << "wrote past M, " << what;
    else
      ASSERT_EQ(outs[0][e], 0xffff) << "wrote past M, " << what;
  }
  for (std::size_t i = 1; i < outs.size(); ++i)
    EXPECT_EQ(0, std::memcmp(outs[0].data(), outs[i].data(), (MN + guard) * sizeof(float)))
        << "vs " << refs[i - 1] << ", " << what;
}

// The sm_100a small GEMM (gemm_small_sm100_*; on sm_90 its twin): every epilogue against f64 at
// ragged M (1 to 300: one to two token tiles, 16 to 256 tokens an MMA, the last tile part-filled),
// N not a multiple of the 128-row weight tile and K not of 64 with the ring wrapping (K = 2000: 32
// blocks), every SM's shared memory filled with NaNs first (the token rows no box writes) and
// outputs poisoned, 64 guard rows past M that must stay so. Each element is one MMA chain over K
// from zero, as in the prefill GEMMs, with the weights as A and the tokens as B; the products are
// exact in f32, so unless the tensor core's dot product depends on which operand is A the small
// GEMM gives the prefill GEMM's bits, whatever the bucket, which this checks too: the twin against
// the Hopper gemm_small at its plan's tiling (which equals gemm_prefill's:
// SmallGemmMatchesPrefillGemmBitForBit; SwiGLU up to the twin's 128-token tiles), the tcgen05
// kernel against the sm_100a prefill GEMM on one CTA and on the CTA pair (docs/hexel.md,
// "Blackwell": the question the first B200 run answers).
void check_small_sm100(Sm100Form form) {
  struct Shape {
    int N, K;
    std::vector<int> ms;
  };
  const bool twin = form == Sm100Form::Twin;
  const std::vector<std::string> epis = {"bf16", "residual", "swiglu"};
  const std::vector<std::string> refs =
      twin ? std::vector<std::string>{"Hopper gemm_small"}
           : std::vector<std::string>{"gemm_prefill_sm100", "gemm_prefill_sm100_pair"};
  for (const Shape& shape :
       {Shape{520, 2000, {1, 5, 20, 64, 100, 128, 200, 300}}, Shape{136, 264, {8, 130}}}) {
    const int N = shape.N, K = shape.K;
    std::vector<std::string> names = {"poison_shared"};
    for (int M : shape.ms)
      for (const std::string& epi : epis) {
        const SmallSm100 tw = small_sm100(epi, M, N, K, form);
        if (tw.name.empty()) continue;
        names.push_back(tw.name);
        if (twin) {
          names.push_back(
              codegen::small_gemm_tiling(N, K, M, epi == "swiglu").instance(epi, M, N, K));
        } else {
          for (const bool pair : {false, true})
            names.push_back(prefill_sm100_instance(epi, M, N, K, pair));
        }
      }
    std::sort(names.begin(), names.end());
    names.erase(std::unique(names.begin(), names.end()), names.end());
    TestModule mod(source_with_rope() + kSm100Twins + kPoisonShared, names);
    constexpr int MAXM = 300, GUARD = 64;
    std::vector<float> Af, Wf;
    DeviceBuffer<std::uint16_t> dA(random_bf16(static_cast<std::size_t>(MAXM) * K, 1.f, Af));
    DeviceBuffer<std::uint16_t> dW(random_bf16(2 * static_cast<std::size_t>(N) * K, 0.05f, Wf));
    const std::vector<double> ref = gemm_ref(Af, Wf, MAXM, 2 * N, K);  // [M, 2N]: gate, then up
    const std::vector<float> x0 = random_floats(static_cast<std::size_t>(MAXM + GUARD) * N);
    for (int M : shape.ms)
      for (const std::string& epi : epis) {
        const SmallSm100 tw = small_sm100(epi, M, N, K, form);
        if (tw.name.empty()) continue;
        const bool swiglu = epi == "swiglu", residual = epi == "residual";
        const std::size_t MN = static_cast<std::size_t>(M) * N,
                          total = MN + static_cast<std::size_t>(GUARD) * N;
        const std::string what =
            std::string(form_name(form)) + " " + epi + " M=" + I(M) + " N=" + I(N) + " K=" + I(K);
        // The kernel under test, then each kernel that must give its bits, on the same inputs.
        std::vector<std::vector<float>> outs(1 + refs.size());
        for (std::size_t run = 0; run < outs.size(); ++run) {
          DeviceBuffer<std::uint16_t> y(total);
          DeviceBuffer<float> x(std::vector<float>(x0.begin(), x0.begin() + total));
          void* out = residual ? static_cast<void*>(x.get()) : y.get();
          if (run == 0) {
            const DeviceMap a(dA.get(), M, K, tw.t.a_box),
                w(dW.get(), swiglu ? 2 * N : N, K, codegen::kSmallGemmSm100Rows);
            CUDA_OK(mod.launch("poison_shared", sm_count(), 1024, {}, codegen::kMaxSmemPerBlock));
            CUDA_OK(mod.launch(tw.name, dim3(tw.t.tiles_m, tw.t.tiles_n), tw.threads,
                               {a.get(), w.get(), out}, tw.smem));
          } else if (twin) {  // its shared memory poisoned in SmallGemmMatchesPrefillGemmBitForBit
            const codegen::SmallGemmTiling t = codegen::small_gemm_tiling(N, K, M, swiglu);
            const DeviceMap a(dA.get(), M, K, t.a_box),
                w(dW.get(), swiglu ? 2 * N : N, K, t.w_box());
            CUDA_OK(mod.launch(t.instance(epi, M, N, K), dim3(t.tiles_m, t.tiles_n), t.threads(),
                               {a.get(), w.get(), out}, t.smem()));
          } else {
            CUDA_OK(launch_prefill_sm100(mod, epi, M, N, K, run == 2, dA.get(), dW.get(), out));
          }
          if (residual) {
            outs[run] = x.download();
          } else {
            const auto b = y.download();
            outs[run].assign(b.begin(), b.end());
          }
        }
        ASSERT_NO_FATAL_FAILURE(
            check_sm100_outputs(outs, refs, ref, x0, epi, M, N, total - MN, what));
      }
  }
}

TEST(GpuKernels, Sm100TwinSmallGemmMatchesF64AndHopperBitForBit) {
  TELOS_SKIP_UNLESS_SM90(kTwinKernels);
  check_small_sm100(Sm100Form::Twin);
}

TEST(GpuKernels, Sm100SmallGemmMatchesF64AndPrefillGemmsBitForBit) {
  TELOS_SKIP_UNLESS_SM100(kTcgen05Kernels);
  check_small_sm100(Sm100Form::Tcgen05);
}

// The bf16 rows of an activation on the device, as f32 (the values a GEMM reads).
std::vector<float> bf16_floats(const DeviceBuffer<std::uint16_t>& b) {
  std::vector<float> f;
  for (std::uint16_t v : b.download()) f.push_back(from_bf16(v));
  return f;
}

// The sm_100a small GEMM's norm forms (gemm_small_sm100_norm_{bf16,swiglu}; on sm_90 their twins)
// on x, every SM's shared memory poisoned first (the resident tokens' rows past M and the stages'
// bytes nothing writes) and the outputs past M poisoned: against f64 (the GEMM of the rmsnorm
// kernel's h), and bit for bit against what an unfolded bucket on the same target runs, rmsnorm
// into h then gemm_small_sm100_{bf16,swiglu} (or their twins). The twin also against both Hopper
// paths, rmsnorm + gemm_small_{bf16,swiglu} and gemm_small_norm_{bf16,swiglu}: a token's bits do
// not depend on whether its bucket folds the norm (gemm_small_sm100.cuh, small_sm100_body). M 1 to
// 8, K not a multiple of 64 (zeros past K in the last block), N not one of the 128-row tile, the
// ring wrapping, and the 8B's K.
void check_small_sm100_norm(Sm100Form form) {
  struct Shape {
    int N, K;
  };
  const bool twin = form == Sm100Form::Twin;
  const std::string eps = float_literal(1e-5);
  const std::vector<int> ms = {1, 3, 8};
  const std::vector<std::string> epis = {"bf16", "swiglu"};
  const std::vector<std::string> refs =
      twin ? std::vector<std::string>{"rmsnorm + twin", "rmsnorm + Hopper gemm_small",
                                      "Hopper gemm_small_norm"}
           : std::vector<std::string>{"rmsnorm + gemm_small_sm100"};
  auto hopper_norm = [&](const std::string& epi, int M, int N, int K) {
    const codegen::SmallGemmTiling t = codegen::small_gemm_tiling(N, K, M, epi == "swiglu", true);
    return std::pair{t, "telos_kernels::gemm_small_norm_" + epi + "<" + I(M) + ", " + I(N) + ", " +
                            I(K) + ", " + I(t.bn) + ", " + I(t.stages) + ", " + eps + ">"};
  };
  for (const Shape& shape : {Shape{520, 2000}, Shape{136, 264}, Shape{2048, 4096}}) {
    const int N = shape.N, K = shape.K;
    const std::string rmsnorm = "telos_kernels::rmsnorm<" + I(K) + ", " + eps + ", false>";
    std::vector<std::string> names = {"poison_shared", rmsnorm};
    for (int M : ms)
      for (const std::string& epi : epis) {
        names.push_back(small_sm100(epi, M, N, K, form, eps).name);
        names.push_back(small_sm100(epi, M, N, K, form).name);
        if (!twin) continue;
        names.push_back(
            codegen::small_gemm_tiling(N, K, M, epi == "swiglu").instance(epi, M, N, K));
        names.push_back(hopper_norm(epi, M, N, K).second);
      }
    TestModule mod(source_with_rope() + kSm100Twins + kPoisonShared, names);
    constexpr int GUARD = 8;
    const std::vector<float> x = random_floats(static_cast<std::size_t>(ms.back()) * K, 2.f);
    std::vector<float> Wf;
    DeviceBuffer<std::uint16_t> dW(random_bf16(2 * static_cast<std::size_t>(N) * K, 0.05f, Wf));
    DeviceBuffer<float> dx(x), dnw(random_floats(K, 1.f));
    for (int M : ms) {
      DeviceBuffer<std::uint16_t> h(static_cast<std::size_t>(M) * K);
      CUDA_OK(
          mod.launch(rmsnorm, M, codegen::kNormThreads, {dx.get(), dnw.get(), nullptr, h.get()}));
      const std::vector<double> ref = gemm_ref(bf16_floats(h), Wf, M, 2 * N, K);  // gate, then up
      for (const std::string& epi : epis) {
        const bool swiglu = epi == "swiglu";
        const int w_rows = swiglu ? 2 * N : N;
        const std::size_t MN = static_cast<std::size_t>(M) * N,
                          total = MN + static_cast<std::size_t>(GUARD) * N;
        const std::string what = std::string(form_name(form)) + " norm " + epi + " M=" + I(M) +
                                 " N=" + I(N) + " K=" + I(K);
        std::vector<std::vector<float>> outs;
        auto run = [&](auto launch) {
          DeviceBuffer<std::uint16_t> y(total);
          CUDA_OK(launch(y.get()));
          const auto b = y.download();
          outs.emplace_back(b.begin(), b.end());
        };
        const SmallSm100 fused = small_sm100(epi, M, N, K, form, eps),
                         plain = small_sm100(epi, M, N, K, form);
        const DeviceMap w(dW.get(), w_rows, K, codegen::kSmallGemmSm100Rows),
            a(h.get(), M, K, plain.t.a_box);
        run([&](void* y) {
          const cudaError_t e =
              mod.launch("poison_shared", sm_count(), 1024, {}, codegen::kMaxSmemPerBlock);
          if (e != cudaSuccess) return e;
          return mod.launch(fused.name, dim3(fused.t.tiles_m, fused.t.tiles_n), fused.threads,
                            {dx.get(), dnw.get(), w.get(), y}, fused.smem);
        });
        run([&](void* y) {
          return mod.launch(plain.name, dim3(plain.t.tiles_m, plain.t.tiles_n), plain.threads,
                            {a.get(), w.get(), y}, plain.smem);
        });
        if (twin) {
          const codegen::SmallGemmTiling tp = codegen::small_gemm_tiling(N, K, M, swiglu);
          const auto [tf, norm_name] = hopper_norm(epi, M, N, K);
          const DeviceMap ha(h.get(), M, K, tp.a_box), hw(dW.get(), w_rows, K, tp.w_box()),
              fw(dW.get(), w_rows, K, tf.cols);
          run([&](void* y) {
            return mod.launch(tp.instance(epi, M, N, K), dim3(tp.tiles_m, tp.tiles_n), tp.threads(),
                              {ha.get(), hw.get(), y}, tp.smem());
          });
          run([&](void* y) {
            return mod.launch(norm_name, dim3(tf.tiles_m, tf.tiles_n), codegen::kSmallGemmThreads,
                              {dx.get(), dnw.get(), fw.get(), y}, tf.smem());
          });
        }
        ASSERT_NO_FATAL_FAILURE(
            check_sm100_outputs(outs, refs, ref, {}, epi, M, N, total - MN, what));
      }
    }
  }
}

TEST(GpuKernels, Sm100TwinSmallGemmNormMatchesF64AndUnfoldedBitForBit) {
  TELOS_SKIP_UNLESS_SM90(kTwinKernels);
  check_small_sm100_norm(Sm100Form::Twin);
}

TEST(GpuKernels, Sm100SmallGemmNormMatchesF64AndUnfoldedBitForBit) {
  TELOS_SKIP_UNLESS_SM100(kTcgen05Kernels);
  check_small_sm100_norm(Sm100Form::Tcgen05);
}

// The sm_100a folded QKV projection (gemm_small_sm100_norm_qkv; on sm_90 its twin: the norm, the
// GEMM and the QKV epilogue in one launch, the epilogue run by the CTA that completes each head)
// against the unfolded path, rmsnorm, then the QKV GEMM (gemm_small_sm100_bf16 on sm_100; on sm_90
// the Hopper gemm_small_bf16, which the twin must match as every sm_100a GEMM twin does), then
// qkv_rope_append_rows: qkv against f64 and bit for bit, q and the KV pool bit for bit, every
// arrival counter back to zero, and a second launch (counters reused) the same again. Shared
// memory poisoned first. Head dim 32, 64 and 128 (a 128-row tile holds four, two or one heads),
// QKV bias, QK norm, M 1 to 8 (the plan folds at 1), a padding row, two sequences.
void check_qkv_fold_sm100(Sm100Form form) {
  const bool twin = form == Sm100Form::Twin;
  const codegen::RopeInput llama3{"llama3", 500000.0, 8.0, 1.0, 4.0, 64};
  const codegen::RopeInput plain{"default", 1000000.0};
  constexpr int PAGE = 16, MAXP = 16, LAYERS = 2, POOL = 40, LAYER = 1;
  const std::string eps = float_literal(1e-6);
  for (const QkvShape& s : {QkvShape{128, 4, 2, 32, 5, true, false, llama3},
                            QkvShape{256, 4, 2, 64, 8, false, true, llama3},
                            QkvShape{2048, 32, 8, 64, 1, false, false, llama3},
                            QkvShape{2000, 8, 2, 128, 1, true, true, plain},
                            QkvShape{4096, 32, 8, 128, 3, false, false, llama3}}) {
    const long long page_elems = 2LL * LAYERS * s.HKV * PAGE * s.D;
    const int NH = s.HQ + 2 * s.HKV, ROWS = NH * s.D;
    const std::string epi = std::string(s.bias ? "true" : "false") + ", " +
                            (s.qk_norm ? "true" : "false") + ", " + eps + ", " + I(PAGE) + ", " +
                            I(MAXP) + ", " + I(page_elems) + "ll, telos_rope::Freqs>";
    // The fold's threads, shared memory and stages are its bf16 norm form's.
    const SmallSm100 fold = small_sm100("bf16", s.M, ROWS, s.K, form, eps);
    const std::string folded = std::string("telos_kernels::gemm_small_sm100_") +
                               (twin ? "twin_" : "") + "norm_qkv<" + I(s.M) + ", " + I(s.K) + ", " +
                               I(fold.t.stages) + ", " + I(s.HQ) + ", " + I(s.HKV) + ", " + I(s.D) +
                               ", " + epi;
    const codegen::SmallGemmTiling tp = codegen::small_gemm_tiling(ROWS, s.K, s.M, false);
    const SmallSm100 sp = small_sm100("bf16", s.M, ROWS, s.K, Sm100Form::Tcgen05);
    const std::string gemm = twin ? tp.instance("bf16", s.M, ROWS, s.K) : sp.name;
    const std::string norm = "telos_kernels::rmsnorm<" + I(s.K) + ", " + eps + ", false>";
    const std::string rows = "telos_kernels::qkv_rope_append_rows<" + I(s.HQ) + ", " + I(s.HKV) +
                             ", " + I(s.D) + ", " + epi;
    TestModule mod(
        source_with_rope(codegen::rope_inv_freq(s.rope, s.D)) + kSm100Twins + kPoisonShared,
        {"poison_shared", norm, gemm, rows, folded});
    const std::vector<float> x = random_floats(static_cast<std::size_t>(s.M) * s.K, 2.f),
                             nw = random_floats(s.K);
    std::vector<float> Wf;
    DeviceBuffer<std::uint16_t> dW(random_bf16(static_cast<std::size_t>(ROWS) * s.K, 0.05f, Wf));
    DeviceBuffer<float> dx(x), dnw(nw), dbias(random_floats(ROWS, 0.5f)), dqn(random_floats(s.D)),
        dkn(random_floats(s.D));
    std::vector<int> positions(s.M), token_seq(s.M);
    for (int m = 0; m < s.M; ++m) {
      positions[m] = m == s.M - 1 && s.M > 1 ? -1 : 37 + 5 * m;
      token_seq[m] = m % 2;
    }
    std::vector<int> pool(POOL);
    std::iota(pool.begin(), pool.end(), 0);
    std::shuffle(pool.begin(), pool.end(), rng());
    DeviceBuffer<int> dpos(positions), dseq(token_seq),
        dpt(std::vector<int>(pool.begin(), pool.begin() + 2 * MAXP));
    const std::size_t pool_elems = static_cast<std::size_t>(POOL) * page_elems;
    const std::size_t qkv_elems = static_cast<std::size_t>(s.M) * ROWS,
                      q_elems = static_cast<std::size_t>(s.M) * s.HQ * s.D;
    DeviceBuffer<std::uint16_t> kv_ref(pool_elems), kv_got(pool_elems),
        h(static_cast<std::size_t>(s.M) * s.K), qkv_ref(qkv_elems), qkv_got(qkv_elems);
    DeviceBuffer<float> q_ref(q_elems), q_got(q_elems);
    DeviceBuffer<unsigned> arrivals(std::vector<unsigned>(NH, 0u));
    const void* bias = s.bias ? dbias.get() : nullptr;
    const void* qn = s.qk_norm ? dqn.get() : nullptr;
    const void* kn = s.qk_norm ? dkn.get() : nullptr;
    const long long layer_off = LAYER * 2LL * s.HKV * PAGE * s.D;
    CUDA_OK(mod.launch(norm, s.M, codegen::kNormThreads, {dx.get(), dnw.get(), nullptr, h.get()}));
    const DeviceMap a_map(h.get(), s.M, s.K, twin ? tp.a_box : sp.t.a_box),
        wp(dW.get(), ROWS, s.K, twin ? tp.w_box() : codegen::kSmallGemmSm100Rows),
        wf(dW.get(), ROWS, s.K, codegen::kSmallGemmSm100Rows);
    if (twin)
      CUDA_OK(mod.launch(gemm, dim3(tp.tiles_m, tp.tiles_n), tp.threads(),
                         {a_map.get(), wp.get(), qkv_ref.get()}, tp.smem()));
    else
      CUDA_OK(mod.launch(gemm, dim3(sp.t.tiles_m, sp.t.tiles_n), sp.threads,
                         {a_map.get(), wp.get(), qkv_ref.get()}, sp.smem));
    CUDA_OK(mod.launch(rows, dim3(NH, s.M), s.D,
                       {qkv_ref.get(), bias, qn, kn, dpos.get(), dseq.get(), dpt.get(),
                        kv_ref.get() + layer_off, q_ref.get()}));
    const auto want_qkv = qkv_ref.download();
    const auto want_q = q_ref.download();
    const auto want_kv = kv_ref.download();
    const std::vector<double> y = gemm_ref(bf16_floats(h), Wf, s.M, ROWS, s.K);
    const std::string what =
        std::string(form_name(form)) + " M=" + I(s.M) + " D=" + I(s.D) + " K=" + I(s.K);
    for (int launch = 0; launch < 2; ++launch) {
      q_got.poison();
      qkv_got.poison();
      CUDA_OK(mod.launch("poison_shared", sm_count(), 1024, {}, codegen::kMaxSmemPerBlock));
      CUDA_OK(
          mod.launch(folded, dim3(fold.t.tiles_m, fold.t.tiles_n), fold.threads,
                     {dx.get(), dnw.get(), wf.get(), qkv_got.get(), bias, qn, kn, dpos.get(),
                      dseq.get(), dpt.get(), kv_got.get() + layer_off, q_got.get(), arrivals.get()},
                     fold.smem));
      const auto got_qkv = qkv_got.download();
      const auto got_q = q_got.download();
      const auto got_kv = kv_got.download();
      std::vector<float> qkv_f;
      for (std::uint16_t v : got_qkv) qkv_f.push_back(from_bf16(v));
      EXPECT_LT(rel_l2(qkv_f, y), 1e-2) << "qkv vs f64, " << what;
      EXPECT_EQ(0, std::memcmp(got_qkv.data(), want_qkv.data(), want_qkv.size() * 2))
          << "qkv, " << what;
      EXPECT_EQ(0, std::memcmp(got_q.data(), want_q.data(), want_q.size() * sizeof(float)))
          << "q, " << what;
      EXPECT_EQ(0, std::memcmp(got_kv.data(), want_kv.data(), want_kv.size() * 2))
          << "KV pool, " << what;
      for (unsigned c : arrivals.download())
        ASSERT_EQ(c, 0u) << "an arrival counter left non-zero, " << what;
      std::size_t nans = 0;
      for (float v : got_q) nans += std::isnan(v);
      EXPECT_EQ(nans, 0u) << what;
    }
  }
}

TEST(GpuKernels, Sm100TwinQkvFoldedMatchesF64AndUnfoldedBitForBit) {
  TELOS_SKIP_UNLESS_SM90(kTwinKernels);
  check_qkv_fold_sm100(Sm100Form::Twin);
}

TEST(GpuKernels, Sm100QkvFoldedMatchesF64AndUnfoldedBitForBit) {
  TELOS_SKIP_UNLESS_SM100(kTcgen05Kernels);
  check_qkv_fold_sm100(Sm100Form::Tcgen05);
}

// The sm_100a LM head (gemm_small_sm100_f32cand; on sm_90 its twin): f32 logits against f64, each
// weight tile's greedy candidates against those of the logits it wrote, at M from 1 to 300 (the
// 256-token tile's image is larger than the twin's ring), K not a multiple of 64; rows past M stay
// poisoned, and a null cand writes the logits alone. The twin's logits and candidates bit for bit
// against the Hopper gemm_small_f32cand on 128-row weight tiles; the tcgen05 kernel's against its
// own at M = 300: a row's bits do not depend on the bucket.
void check_lm_head_sm100(Sm100Form form) {
  constexpr int N = 1024, K = 2000, MAXM = 300, GUARD = 64;
  const bool twin = form == Sm100Form::Twin;
  const std::vector<int> ms = {1, 7, 64, 130, 256, 300};
  codegen::SmallGemmLimits one;
  one.warpgroups = 1;
  auto hopper = [&](int M) {
    codegen::SmallGemmTiling t =
        codegen::small_gemm_tiling(N, K, M, false, false, one).with_bn(128, N, false);
    t.kps = 1;  // f32cand takes one K block a stage (lm_head_tiling)
    t.stages = std::min(t.stages, 4);
    return t;
  };
  std::vector<std::string> names;
  for (int M : ms) {
    names.push_back(small_sm100("f32cand", M, N, K, form).name);
    if (twin) names.push_back(hopper(M).instance("f32cand", M, N, K));
  }
  TestModule mod(source_with_rope() + kSm100Twins, names);
  std::vector<float> Af, Wf;
  DeviceBuffer<std::uint16_t> dA(random_bf16(static_cast<std::size_t>(MAXM) * K, 1.f, Af));
  DeviceBuffer<std::uint16_t> dW(random_bf16(static_cast<std::size_t>(N) * K, 0.05f, Wf));
  const std::vector<double> ref = gemm_ref(Af, Wf, MAXM, N, K);
  std::vector<std::vector<float>> logits;  // each M's
  std::vector<std::vector<std::uint64_t>> cands;
  for (int M : ms) {
    const SmallSm100 tw = small_sm100("f32cand", M, N, K, form);
    const std::string what = std::string(form_name(form)) + " M=" + I(M);
    const std::size_t MN = static_cast<std::size_t>(M) * N,
                      total = MN + static_cast<std::size_t>(GUARD) * N;
    const int tiles_n = N / codegen::kSmallGemmSm100Rows;
    ASSERT_EQ(tw.t.tiles_n, tiles_n);
    DeviceBuffer<float> y(total), y_alone(MN);
    DeviceBuffer<std::uint64_t> cand(MN / codegen::kSmallGemmSm100Rows);
    const DeviceMap a(dA.get(), M, K, tw.t.a_box), w(dW.get(), N, K, codegen::kSmallGemmSm100Rows);
    const dim3 grid(tw.t.tiles_m, tw.t.tiles_n);
    CUDA_OK(
        mod.launch(tw.name, grid, tw.threads, {a.get(), w.get(), y.get(), cand.get()}, tw.smem));
    CUDA_OK(
        mod.launch(tw.name, grid, tw.threads, {a.get(), w.get(), y_alone.get(), nullptr}, tw.smem));
    const std::vector<float> out = y.download();
    for (std::size_t e = MN; e < total; ++e) {
      std::uint32_t u;
      std::memcpy(&u, &out[e], 4);
      ASSERT_EQ(u, 0xffffffffu) << "wrote past M, " << what;
    }
    const std::vector<float> got(out.begin(), out.begin() + MN);
    EXPECT_LT(rel_l2(got, std::vector<double>(ref.begin(), ref.begin() + MN)), 1e-5) << what;
    EXPECT_EQ(cand.download(), greedy_candidates(got, M, N, tiles_n)) << what;
    EXPECT_EQ(0, std::memcmp(y_alone.download().data(), got.data(), MN * sizeof(float)))
        << "null cand, " << what;
    if (twin) {
      const codegen::SmallGemmTiling ht = hopper(M);
      DeviceBuffer<float> y_hopper(MN);
      DeviceBuffer<std::uint64_t> cand_hopper(MN / codegen::kSmallGemmSm100Rows);
      const DeviceMap ha(dA.get(), M, K, ht.a_box), hw(dW.get(), N, K, ht.w_box());
      CUDA_OK(mod.launch(ht.instance("f32cand", M, N, K), dim3(ht.tiles_m, ht.tiles_n),
                         ht.threads(), {ha.get(), hw.get(), y_hopper.get(), cand_hopper.get()},
                         ht.smem()));
      EXPECT_EQ(cand.download(), cand_hopper.download()) << "candidates vs Hopper, " << what;
      EXPECT_EQ(0, std::memcmp(y_hopper.download().data(), got.data(), MN * sizeof(float)))
          << "logits vs Hopper gemm_small_f32cand, " << what;
    }
    logits.push_back(got);
    cands.push_back(cand.download());
  }
  if (twin) return;
  for (std::size_t i = 0; i + 1 < ms.size(); ++i) {
    EXPECT_EQ(0, std::memcmp(logits[i].data(), logits.back().data(), logits[i].size() * 4))
        << "logits of M=" << ms[i] << " vs the same rows at M=" << ms.back();
    EXPECT_TRUE(std::equal(cands[i].begin(), cands[i].end(), cands.back().begin()))
        << "candidates of M=" << ms[i] << " vs the same rows at M=" << ms.back();
  }
}

TEST(GpuKernels, Sm100TwinSmallGemmLmHeadLogitsAndCandidates) {
  TELOS_SKIP_UNLESS_SM90(kTwinKernels);
  check_lm_head_sm100(Sm100Form::Twin);
}

TEST(GpuKernels, Sm100SmallGemmLmHeadLogitsCandidatesAndBuckets) {
  TELOS_SKIP_UNLESS_SM100(kTcgen05Kernels);
  check_lm_head_sm100(Sm100Form::Tcgen05);
}

// One prefill GEMM case of the sm_100a checks: A [M, K], W [2N, K] (gate rows, then up rows), the
// residual stream's start x0 with 128 guard rows past M, and the f64 reference [M, 2N].
struct PrefillGemmCase {
  PrefillShape s;
  std::size_t MN, guard;
  std::vector<float> Af, Wf, x0;
  bf16v A, W;
  std::vector<double> ref;
  explicit PrefillGemmCase(PrefillShape shape)
      : s(shape),
        MN(static_cast<std::size_t>(s.M) * s.N),
        guard(128 * static_cast<std::size_t>(s.N)),
        x0(random_floats(MN + guard)),
        A(random_bf16(static_cast<std::size_t>(s.M) * s.K, 1.f, Af)),
        W(random_bf16(2 * static_cast<std::size_t>(s.N) * s.K, 0.05f, Wf)),
        ref(gemm_ref(Af, Wf, s.M, 2 * s.N, s.K)) {}
};

// The outputs of two launches on fresh outputs each (y poisoned bf16 [M + 128, N], x the f32
// residual stream from x0): run 0 the kernel under test, run 1 the one that must give its bits;
// `launch(run, y, x)` launches one. The residual epilogue's output is x, the others' y.
template <class Launch>
std::vector<std::vector<float>> prefill_two_runs(const PrefillGemmCase& c, bool residual,
                                                 Launch&& launch) {
  std::vector<std::vector<float>> outs(2);
  for (int run = 0; run < 2; ++run) {
    DeviceBuffer<std::uint16_t> y(c.MN + c.guard);
    DeviceBuffer<float> x(c.x0);
    launch(run, y, x);
    if (residual) {
      outs[run] = x.download();
    } else {
      const auto b = y.download();
      outs[run].assign(b.begin(), b.end());
    }
  }
  return outs;
}

// The sm_100a prefill GEMM on one CTA (gemm_prefill_sm100_*; on sm_90 its twin: the same producer,
// stage ring, persistent tile loop, epilogue chunks, swizzled stores and TMA hand-off, wgmma for
// tcgen05): every epilogue at ragged M, N and K, outputs poisoned with 128 guard rows past M that
// must stay so, against f64. The twin bit for bit against the Hopper gemm_prefill (the twin's
// chains are its chains: the tokens as A, one wgmma chain over K from zero per element, N 128 or
// 64 instead of 256); the tcgen05 kernel against the CTA pair's (gemm_prefill_sm100_pair_*, 256-row
// tiles of M = 256 MMAs): a row's bits do not depend on its tile. Also on a grid of 3 CTAs (each
// loops over several tiles, the ring wrapping across them) and reading a slot image whose 48-row
// tiles cut the 256-row weight tiles (one covering box a stage, the tile's rows from an offset).
void check_prefill_sm100(Sm100Form form) {
  struct Case {
    PrefillShape s;
    int grid;      // 0: the plan's (prefill_grid)
    int image_bn;  // 0: the weight's own map; else a one-half slot image of 48-row tiles
  };
  const bool twin = form == Sm100Form::Twin;
  const std::vector<Case> cases = {{{200, 384, 264}, 0, 0}, {{401, 520, 128}, 0, 0},
                                   {{128, 128, 64}, 0, 0},  {{130, 136, 1000}, 0, 0},
                                   {{401, 520, 128}, 3, 0}, {{200, 768, 256}, 0, 48}};
  const std::vector<std::string> epis = {"bf16", "residual", "swiglu"};
  auto dims = [](const Case& c, const std::string& epi, bool image_args) {
    std::string d = "<" + I(c.s.M) + ", " + I(c.s.N) + ", " + I(c.s.K);
    if (image_args && c.image_bn > 0 && epi != "swiglu") {
      const codegen::WeightImage img{c.image_bn, 1};
      d += ", " + I(img.half_rows()) + ", " + I(codegen::prefill_image_box_rows(img, 256));
    }
    return d + ">";
  };
  // The kernel under test, and the one that must give its bits.
  const std::string tested =
      twin ? "telos_kernels::gemm_prefill_sm100_twin_" : "telos_kernels::gemm_prefill_sm100_";
  const std::string reference = twin ? "Hopper gemm_prefill" : "gemm_prefill_sm100_pair";
  std::vector<std::string> names;
  for (const Case& c : cases)
    for (const std::string& epi : epis) {
      names.push_back(tested + epi + dims(c, epi, true));
      names.push_back(twin ? "telos_kernels::gemm_prefill_" + epi + dims(c, epi, false)
                           : prefill_sm100_instance(epi, c.s.M, c.s.N, c.s.K, true));
    }
  std::sort(names.begin(), names.end());
  names.erase(std::unique(names.begin(), names.end()), names.end());
  TestModule mod(source_with_rope() + kSm100Twins, names);
  for (const Case& c : cases) {
    const PrefillGemmCase g(c.s);
    const PrefillShape& s = c.s;
    DeviceBuffer<std::uint16_t> dA(g.A), dW(g.W);
    std::optional<DeviceBuffer<std::uint16_t>> dImage;
    std::optional<DeviceBuffer<hexel::TensorMap>> image_map;
    int image_box = 0;
    if (c.image_bn > 0) {
      ASSERT_EQ(slot_image_refusal(s.N, s.K, c.image_bn, 1), "");
      bf16v image(static_cast<std::size_t>(s.N) * s.K);
      pack_slot_image(g.W.data(), s.N, s.K, c.image_bn, 1, 0, s.N / c.image_bn, image.data());
      image_box = codegen::prefill_image_box_rows(codegen::WeightImage{c.image_bn, 1}, 256);
      dImage.emplace(image);
      image_map.emplace(std::vector<hexel::TensorMap>{
          encode_slot_image_map(dImage->get(), s.N, s.K, c.image_bn, 1, image_box)});
    }
    for (const std::string& epi : epis) {
      const bool swiglu = epi == "swiglu", residual = epi == "residual",
                 image = c.image_bn > 0 && !swiglu;
      const int cols = swiglu ? 128 : 256;
      const std::string what = std::string(form_name(form)) + " " + epi + " M=" + I(s.M) +
                               " N=" + I(s.N) + " K=" + I(s.K) + " grid " + I(c.grid) +
                               (image ? " slot image" : "");
      // Run 0 the tested kernel, run 1 the reference.
      const auto outs = prefill_two_runs(g, residual, [&](int run, auto& y, auto& x) {
        void* out = residual ? static_cast<void*>(x.get()) : y.get();
        if (run == 1 && !twin) {
          CUDA_OK(launch_prefill_sm100(mod, epi, s.M, s.N, s.K, true, dA.get(), dW.get(), out));
          return;
        }
        const DeviceMap a_map(dA.get(), s.M, s.K, 128),
            w_map(dW.get(), swiglu ? 2 * s.N : s.N, s.K, cols), y_map(y.get(), s.M, s.N, 64),
            x_map(x.get(), s.M, s.N, 64, hexel::TmaDtype::F32);
        const bool tested_image = image && run == 0;
        const std::string name = run ? "telos_kernels::gemm_prefill_" + epi + dims(c, epi, false)
                                     : tested + epi + dims(c, epi, true);
        const int grid = run || c.grid == 0 ? prefill_grid(s.M, s.N, cols) : c.grid;
        CUDA_OK(mod.launch(name, grid, kPrefillThreads,
                           {a_map.get(), tested_image ? image_map->get() : w_map.get(),
                            residual ? x_map.get() : y_map.get()},
                           codegen::prefill_gemm_smem(tested_image ? image_box : 0)));
      });
      ASSERT_NO_FATAL_FAILURE(
          check_sm100_outputs(outs, {reference}, g.ref, g.x0, epi, s.M, s.N, g.guard, what));
    }
  }
}

TEST(GpuKernels, Sm100TwinPrefillGemmMatchesF64AndHopperBitForBit) {
  TELOS_SKIP_UNLESS_SM90(kTwinKernels);
  check_prefill_sm100(Sm100Form::Twin);
}

TEST(GpuKernels, Sm100PrefillGemmMatchesF64AndPairBitForBit) {
  TELOS_SKIP_UNLESS_SM100(kTcgen05Kernels);
  check_prefill_sm100(Sm100Form::Tcgen05);
}

// The sm_100a CTA-pair prefill GEMM (gemm_prefill_sm100_pair_*; on sm_90 its twin,
// gemm_prefill_sm100_pair_twin_*: the pair's 256-row tiles and tile order over clusters of two,
// each CTA's producer loading its 128 A rows and multicasting its half of the W rows, SwiGLU's gate
// rows from rank 0 and up rows from rank 1, stages released to both CTAs' empty barriers, each
// CTA's epilogue writing its own 128 rows): every epilogue against f64, at M not a multiple of 256
// (M 300 and 100: the last tile's rank-1 rows all padding), odd N tile counts (N 520: 3 tiles of
// 256), a ragged K, outputs poisoned with 128 guard rows past M; and on one cluster (grid 2) that
// loops over every tile, the ring wrapping across them. Bit for bit against the one-CTA GEMM at the
// plan's grid: the twin against the Hopper gemm_prefill, the tcgen05 pair against
// gemm_prefill_sm100 (M = 256 cta_group::2 MMAs against M = 128 cta_group::1 ones).
void check_pair_sm100(Sm100Form form) {
  struct Case {
    PrefillShape s;
    int grid;  // 0: the plan's (prefill_pair_grid)
  };
  const bool twin = form == Sm100Form::Twin;
  const std::vector<Case> cases = {{{300, 520, 128}, 0}, {{100, 384, 264}, 0},
                                   {{401, 520, 128}, 2}, {{130, 136, 1000}, 0},
                                   {{512, 256, 192}, 0}, {{256, 128, 64}, 2}};
  const std::vector<std::string> epis = {"bf16", "residual", "swiglu"};
  auto dims = [](const PrefillShape& s) {
    return "<" + I(s.M) + ", " + I(s.N) + ", " + I(s.K) + ">";
  };
  // The pair kernel under test and the one-CTA kernel that must give its bits.
  const std::string tested = twin ? "telos_kernels::gemm_prefill_sm100_pair_twin_"
                                  : "telos_kernels::gemm_prefill_sm100_pair_";
  const std::string one_cta =
      twin ? "telos_kernels::gemm_prefill_" : "telos_kernels::gemm_prefill_sm100_";
  // A stage's W rows: the twin's the whole tile's (each CTA's wgmma reads them all), tcgen05's a
  // CTA's half.
  const int pair_smem = codegen::prefill_pair_smem(twin ? 256 : 128);
  std::vector<std::string> names;
  for (const Case& c : cases)
    for (const std::string& epi : epis) {
      names.push_back(one_cta + epi + dims(c.s));
      names.push_back(tested + epi + dims(c.s));
    }
  std::sort(names.begin(), names.end());
  names.erase(std::unique(names.begin(), names.end()), names.end());
  TestModule mod(source_with_rope() + kSm100Twins, names);
  for (const Case& c : cases) {
    const PrefillGemmCase g(c.s);
    const PrefillShape& s = c.s;
    DeviceBuffer<std::uint16_t> dA(g.A), dW(g.W);
    for (const std::string& epi : epis) {
      const bool swiglu = epi == "swiglu", residual = epi == "residual";
      const int cols = swiglu ? 128 : 256;
      const std::string what = std::string(form_name(form)) + " " + epi + " M=" + I(s.M) +
                               " N=" + I(s.N) + " K=" + I(s.K) + " grid " + I(c.grid);
      // Run 0 the pair, run 1 the one-CTA GEMM.
      const auto outs = prefill_two_runs(g, residual, [&](int run, auto& y, auto& x) {
        // The pair's weight boxes are a CTA's half of the tile: 128 rows (SwiGLU: gate or up).
        const DeviceMap a_map(dA.get(), s.M, s.K, 128),
            w_map(dW.get(), swiglu ? 2 * s.N : s.N, s.K, run ? cols : 128),
            y_map(y.get(), s.M, s.N, 64), x_map(x.get(), s.M, s.N, 64, hexel::TmaDtype::F32);
        const std::string name = (run ? one_cta : tested) + epi + dims(s);
        const int grid = run          ? prefill_grid(s.M, s.N, cols)
                         : c.grid > 0 ? c.grid
                                      : codegen::prefill_pair_grid(s.M, s.N, cols);
        if (run == 0) {
          ASSERT_EQ(grid % 2, 0) << "the pair's grid is whole clusters, " << what;
        }
        CUDA_OK(mod.launch(name, grid, kPrefillThreads,
                           {a_map.get(), w_map.get(), residual ? x_map.get() : y_map.get()},
                           run ? codegen::prefill_gemm_smem(0) : pair_smem));
      });
      ASSERT_NO_FATAL_FAILURE(
          check_sm100_outputs(outs, {one_cta + epi}, g.ref, g.x0, epi, s.M, s.N, g.guard, what));
    }
  }
}

TEST(GpuKernels, Sm100PairTwinPrefillGemmMatchesF64AndHopperBitForBit) {
  TELOS_SKIP_UNLESS_SM90(kTwinKernels);
  check_pair_sm100(Sm100Form::Twin);
}

TEST(GpuKernels, Sm100PairPrefillGemmMatchesF64AndOneCtaBitForBit) {
  TELOS_SKIP_UNLESS_SM100(kTcgen05Kernels);
  check_pair_sm100(Sm100Form::Tcgen05);
}

// ---- the persistent layer on e4m3 weights (decode_layer_persistent_e4m3) ----------------------

// The e4m3 layer's QKV phase alone, as decode_layer_persistent_e4m3 runs it (its warps 4-7: the
// converters and the producer, PersistentConverters; the consumers' tiles as the bf16 phase's).
const char* kE4m3QkvPhaseTestKernel = R"(
namespace telos_kernels {
template <int H, int NQKV, int STAGES, int RAW_STAGES, int BQ, unsigned SBR, unsigned SBC>
__global__ void __launch_bounds__(LayerE4m3::kThreads, 1)
    qkv_phase_e4m3_test(const TensorMap* qkv_map, const float* scale, const bf16* h, bf16* qkv) {
  static_assert(persistent_tile_ok(BQ, H) && NQKV % BQ == 0, "QKV tiles");
  constexpr unsigned kTiles = NQKV / BQ;
  extern __shared__ unsigned char smem_raw[];
  const PersistentSmem<1, H, STAGES, RAW_STAGES> sm(smem_raw);
  hexel::mbarrier::StageRing<STAGES> ring;
  if (hexel::warp_index() >= 4) {
    __shared__ StreamPhase phase[1];
    if (threadIdx.x == 128) phase[0] = {qkv_map, H, BQ, kTiles, 0, 0};
    PersistentConverters<RAW_STAGES> conv(sm, phase, 1);
    persistent_convert_phase<E4m3Weight<NQKV, H, SBR, SBC>, BQ, false>(conv, ring, sm, H, kTiles, 0,
                                                                       0, scale);
    return;
  }
  const unsigned first = persistent_first_tile(0);
  if (first >= kTiles) return;
  persistent_load_a<1>(sm.base, h, H);
  for (unsigned t = first; t < kTiles; t += gridDim.x)
    layer_gemm_tile<1, BQ, SmallEpi::StoreBf16>(ring, sm.base, sm.ring_base, sm.full, sm.empty, t,
                                                H, NQKV, qkv);
}
}  // namespace telos_kernels
)";

// The sm_100a one-token layer (decode_layer_persistent_sm100; on sm_90 its Hopper twin,
// decode_layer_persistent_sm100_twin, decode_layer_sm100.cuh: the sm_100a layer's phases, 128-row
// tiles, 32 KB slots, accumulator hand-off and per-element epilogues, with wgmma and the weights as
// A where sm_100a issues tcgen05) at the tiny (QKV bias), Llama-3.2-1B, Qwen3-0.6B (QK norm: the
// QKV epilogue's own phase) and Llama-3.1-8B shapes, at ragged context lengths (the first
// position, mid-page, past one split, several splits); outputs poisoned first, every SM's shared
// memory NaNs before each launch, the counters back at zero after it. The twin against the sm_90a
// plan's decode_layer_persistent from the same inputs: x, the appended K/V, the attention output
// and act bit for bit (each element one chain over K from zero in both, the operands' roles
// exchanged, as Sm100TwinSmallGemmMatchesF64AndHopperBitForBit asks of wgmma); the tcgen05 layer's
// attention output against f64 instead. Both against the sm_100a small-M path's kernels a
// one-token bucket runs (gemm_small_sm100_*, or their twins), bit for bit: q and the appended K/V
// (rmsnorm, the small GEMM's bf16 form, qkv_rope_append_rows), and from the layer's own attention
// output (the attention half is the split kernels' code) x and act (its residual form, rmsnorm,
// its swiglu form, its residual form); that MLP half against f64 too.
void check_decode_layer_sm100(Sm100Form form) {
  const bool twin = form == Sm100Form::Twin;
  struct Shape {
    int H, HQ, HKV, D, I;
    bool bias, qk_norm;
  };
  constexpr int PAGE = 16, MAXP = 72, POOL = MAXP + 8;
  const std::string eps = float_literal(1e-5);
  const int sms = sm_count(), nsplit = codegen::attn_partial_slots(MAXP * PAGE);
  for (const Shape& s :
       {Shape{128, 4, 2, 32, 256, true, false}, Shape{2048, 32, 8, 64, 8192, false, false},
        Shape{1024, 16, 8, 128, 3072, false, true}, Shape{4096, 32, 8, 128, 14336, false, false}}) {
    const int NH = s.HQ + 2 * s.HKV, NQKV = NH * s.D, KO = s.HQ * s.D;
    const long long page_elems = 2LL * s.HKV * PAGE * s.D;
    const std::string what = "H=" + I(s.H) + " D=" + I(s.D) + " I=" + I(s.I);
    const codegen::PersistentLayerTiling lt =
        codegen::decode_layer_tiling(s.H, NQKV, KO, s.I, s.D, s.qk_norm);
    const codegen::PersistentLayerTiling t100 =
        codegen::decode_layer_sm100_tiling(s.H, NQKV, KO, s.I, s.D, s.qk_norm);
    const codegen::PersistentLayerTiling tt =
        twin ? codegen::decode_layer_sm100_twin_tiling(t100) : t100;
    ASSERT_TRUE(lt.fits && tt.fits) << what;
    // The four weights (qkv, o, gate/up, down): rows, K, each layer's box rows (gate/up: a half).
    const int rows[4] = {NQKV, s.H, 2 * s.I, s.H}, cols[4] = {s.H, KO, s.H, s.I};
    const int boxes[2][4] = {{lt.bq, lt.bo, lt.bg / 2, lt.bd}, {tt.bq, tt.bo, tt.bg / 2, tt.bd}};
    const std::string model =
        I(s.H) + ", " + I(s.HQ) + ", " + I(s.HKV) + ", " + I(s.D) + ", " +
        (s.bias ? "true" : "false") + ", " + (s.qk_norm ? "true" : "false") + ", " + eps + ", " +
        I(PAGE) + ", " + I(MAXP) + ", " + I(page_elems) + "ll, telos_rope::Freqs, " +
        I(codegen::kAttnSplit) + ", " + I(nsplit) + ", " +
        float_literal(1.4426950408889634 / std::sqrt(static_cast<double>(s.D))) + ", " + I(s.I) +
        ", ";
    const auto tiles = [](const codegen::PersistentLayerTiling& t) {
      return I(t.stages) + ", " + I(t.bq) + ", " + I(t.bo) + ", " + I(t.bg) + ", " + I(t.bd) +
             (t.qkv_rope ? ", true" : ", false") + ", 0>";
    };
    const SmallSm100 tq = small_sm100("bf16", 1, NQKV, s.H, form),
                     to = small_sm100("residual", 1, s.H, KO, form),
                     tg = small_sm100("swiglu", 1, s.I, s.H, form),
                     td = small_sm100("residual", 1, s.H, s.I, form);
    // names[0]: the Hopper layer (the twin's reference; none on sm_100a); names[1]: the layer
    // under test.
    std::vector<std::string> names = {
        "telos_kernels::decode_layer_persistent<" + model + tiles(lt),
        std::string("telos_kernels::decode_layer_persistent_sm100") + (twin ? "_twin<" : "<") +
            model + tiles(tt),
        to.name,
        "telos_kernels::rmsnorm<" + I(s.H) + ", " + eps + ", false>",
        tg.name,
        td.name,
        "poison_shared",
        tq.name,
        "telos_kernels::qkv_rope_append_rows<" + I(s.HQ) + ", " + I(s.HKV) + ", " + I(s.D) + ", " +
            (s.bias ? "true" : "false") + ", " + (s.qk_norm ? "true" : "false") + ", " + eps +
            ", " + I(PAGE) + ", " + I(MAXP) + ", " + I(page_elems) + "ll, telos_rope::Freqs>"};
    std::vector<std::string> instances(names.begin() + (twin ? 0 : 1), names.end());
    const codegen::RopeInput plain{"default", 1000000.0};
    TestModule mod(source_with_rope(codegen::rope_inv_freq(plain, s.D)) + kSm100Twins +
                       "#include \"decode_layer_sm100.cuh\"\n" + kPoisonShared,
                   instances);

    std::vector<std::vector<float>> wf(4);
    std::vector<std::unique_ptr<DeviceBuffer<std::uint16_t>>> dw;
    std::vector<std::unique_ptr<DeviceMap>> maps[2];
    for (int k = 0; k < 4; ++k) {
      const float scale = 1.f / std::sqrt(static_cast<float>(cols[k]));
      dw.push_back(std::make_unique<DeviceBuffer<std::uint16_t>>(
          random_bf16(static_cast<std::size_t>(rows[k]) * cols[k], scale, wf[k])));
      for (int l = 0; l < 2; ++l)
        maps[l].push_back(std::make_unique<DeviceMap>(dw[k]->get(), rows[k], cols[k], boxes[l][k]));
    }
    const std::vector<float> x0 = random_floats(s.H, 2.f), mlp_w = random_floats(s.H, 1.f);
    DeviceBuffer<float> x_in(x0), attn_norm(random_floats(s.H, 1.f)), mlp_norm(mlp_w),
        bias(random_floats(NQKV, 0.5f)), q_norm(random_floats(s.D, 1.f)),
        k_norm(random_floats(s.D, 1.f));
    std::vector<float> f;
    const bf16v kv0 = random_bf16(static_cast<std::size_t>(POOL) * page_elems, 1.f, f);
    std::vector<int> pool(POOL);
    std::iota(pool.begin(), pool.end(), 0);
    std::shuffle(pool.begin(), pool.end(), rng());
    DeviceBuffer<int> pt(std::vector<int>(pool.begin(), pool.begin() + MAXP)),
        seq(std::vector<int>{0});
    DeviceBuffer<unsigned> sync(std::vector<unsigned>{0u, 0u});
    for (int position : {0, 37, 300, 1061}) {
      const std::string at = what + " pos=" + I(position);
      DeviceBuffer<int> pos(std::vector<int>{position});
      struct Outputs {
        std::vector<float> x, q;
        bf16v kv, attn, act;
      };
      // One layer launch (kernel 0: decode_layer_persistent; 1: the twin) and its outputs.
      const auto run = [&](int kernel) {
        DeviceBuffer<float> x(x0), q(static_cast<std::size_t>(KO)),
            part_o(static_cast<std::size_t>(KO) * nsplit),
            part_ml(static_cast<std::size_t>(s.HQ) * nsplit * 2);
        DeviceBuffer<std::uint16_t> kv(kv0), qkv(NQKV), attn(KO), act(s.I);  // poisoned
        std::vector<const void*> args;
        for (int k = 0; k < 4; ++k) args.push_back(maps[kernel][k]->get());
        args.insert(args.end(),
                    {attn_norm.get(), mlp_norm.get(), s.bias ? bias.get() : nullptr,
                     s.qk_norm ? q_norm.get() : nullptr, s.qk_norm ? k_norm.get() : nullptr,
                     pos.get(), seq.get(), pt.get(), kv.get(), x.get(), qkv.get(), q.get(),
                     part_o.get(), part_ml.get(), attn.get(), act.get(), sync.get()});
        EXPECT_EQ(mod.launch("poison_shared", sms, 1024, {}, codegen::kMaxSmemPerBlock),
                  cudaSuccess);
        EXPECT_EQ(mod.launch(names[kernel], sms, codegen::kPersistentThreads, args,
                             kernel == 0 ? lt.smem : tt.smem),
                  cudaSuccess)
            << cudaGetErrorString(cudaGetLastError()) << ", " << names[kernel];
        EXPECT_EQ(sync.download(), (std::vector<unsigned>{0u, 0u})) << at;
        return Outputs{x.download(), q.download(), kv.download(), attn.download(), act.download()};
      };
      std::optional<Outputs> want;  // the Hopper layer's (the twin's reference)
      if (twin) want = run(0);
      const Outputs got = run(1);
      if (::testing::Test::HasFailure()) return;
      std::size_t nans = 0;
      for (float v : got.x) nans += std::isnan(v);
      for (std::uint16_t v : got.attn) nans += std::isnan(from_bf16(v));
      for (std::uint16_t v : got.act) nans += std::isnan(from_bf16(v));
      ASSERT_EQ(nans, 0u) << at;
      if (want) {
        EXPECT_EQ(0, std::memcmp(got.x.data(), want->x.data(), got.x.size() * sizeof(float))) << at;
        EXPECT_EQ(0, std::memcmp(got.q.data(), want->q.data(), got.q.size() * sizeof(float))) << at;
        EXPECT_EQ(0, std::memcmp(got.kv.data(), want->kv.data(), got.kv.size() * 2)) << at;
        EXPECT_EQ(0, std::memcmp(got.attn.data(), want->attn.data(), got.attn.size() * 2)) << at;
        EXPECT_EQ(0, std::memcmp(got.act.data(), want->act.data(), got.act.size() * 2)) << at;
      } else {
        // The token's attention over positions 0 .. position of the pool the layer appended to.
        std::vector<float> kv_f(got.kv.size());
        for (std::size_t e = 0; e < kv_f.size(); ++e) kv_f[e] = from_bf16(got.kv[e]);
        const AttnShape as{s.HQ, s.HKV, s.D, PAGE, MAXP, codegen::kAttnSplit, nsplit};
        SCOPED_TRACE("attention vs f64, " + at);
        expect_attention_matches_f64(as, 1, 0, kv_f,
                                     std::vector<int>(pool.begin(), pool.begin() + MAXP),
                                     {position}, {0}, got.q, got.attn);
      }
      // The token's K was appended: its slot no longer holds the pool's first bits.
      const std::size_t row = static_cast<std::size_t>(pool[position / PAGE]) * page_elems +
                              static_cast<std::size_t>(position % PAGE) * s.D;
      EXPECT_NE(0, std::memcmp(got.kv.data() + row, kv0.data() + row, s.D * 2)) << at;

      // The attention half's front against the sm_100a small-M path's kernels, one token:
      // rmsnorm into h, gemm_small_sm100_twin_bf16 into qkv, qkv_rope_append_rows: q and the K/V
      // pool.
      {
        DeviceBuffer<std::uint16_t> h(s.H), qkv(NQKV), kv(kv0);
        DeviceBuffer<float> q(static_cast<std::size_t>(KO));
        const DeviceMap ah(h.get(), 1, s.H, tq.t.a_box),
            wq(dw[0]->get(), NQKV, s.H, codegen::kSmallGemmSm100Rows);
        CUDA_OK(mod.launch(names[3], 1, codegen::kNormThreads,
                           {x_in.get(), attn_norm.get(), nullptr, h.get()}));
        CUDA_OK(mod.launch(tq.name, dim3(tq.t.tiles_m, tq.t.tiles_n), tq.threads,
                           {ah.get(), wq.get(), qkv.get()}, tq.smem));
        CUDA_OK(mod.launch(names[8], dim3(NH, 1), s.D,
                           {qkv.get(), s.bias ? bias.get() : nullptr,
                            s.qk_norm ? q_norm.get() : nullptr, s.qk_norm ? k_norm.get() : nullptr,
                            pos.get(), seq.get(), pt.get(), kv.get(), q.get()}));
        const std::vector<float> qs = q.download();
        const bf16v kvs = kv.download();
        EXPECT_EQ(0, std::memcmp(got.q.data(), qs.data(), qs.size() * sizeof(float)))
            << "q vs the small GEMMs, " << at;
        EXPECT_EQ(0, std::memcmp(got.kv.data(), kvs.data(), kvs.size() * 2))
            << "K/V vs the small GEMMs, " << at;
      }

      // The MLP half in f64 from x0 and the layer's attention output: x1 = x0 + o(attn), act =
      // SwiGLU(gate_up(RMSNorm(x1))) against the layer's act, x1 + down(act) (the layer's act)
      // against its x.
      std::vector<float> attn_f(KO), act_f(s.I);
      for (int e = 0; e < KO; ++e) attn_f[e] = from_bf16(got.attn[e]);
      for (int e = 0; e < s.I; ++e) act_f[e] = from_bf16(got.act[e]);
      const std::vector<double> o = gemm_ref(attn_f, wf[1], 1, s.H, KO);
      std::vector<double> x1(s.H);
      double ss = 0;
      for (int e = 0; e < s.H; ++e) x1[e] = x0[e] + o[e], ss += x1[e] * x1[e];
      const double inv = 1.0 / std::sqrt(ss / s.H + 1e-5);
      std::vector<float> hn(s.H);
      for (int e = 0; e < s.H; ++e) hn[e] = static_cast<float>(x1[e] * inv * mlp_w[e]);
      const std::vector<double> gu = gemm_ref(hn, wf[2], 1, 2 * s.I, s.H);
      std::vector<double> act_ref(s.I), x2(s.H);
      for (int e = 0; e < s.I; ++e) act_ref[e] = gu[e] / (1.0 + std::exp(-gu[e])) * gu[s.I + e];
      const std::vector<double> down = gemm_ref(act_f, wf[3], 1, s.H, s.I);
      for (int e = 0; e < s.H; ++e) x2[e] = x1[e] + down[e];
      EXPECT_LT(rel_l2(act_f, act_ref), 2e-2) << "act vs f64, " << at;
      EXPECT_LT(rel_l2(got.x, x2), 1e-3) << "x vs f64, " << at;

      // The MLP half against the sm_100a small-M path's kernels (or twins), one token.
      DeviceBuffer<float> x_sep(x0);
      DeviceBuffer<std::uint16_t> attn_in(got.attn), h(s.H), act_sep(s.I);
      const DeviceMap ao(attn_in.get(), 1, KO, to.t.a_box), ag(h.get(), 1, s.H, tg.t.a_box),
          ad(act_sep.get(), 1, s.I, td.t.a_box);
      constexpr int kBox = codegen::kSmallGemmSm100Rows;
      const DeviceMap wo(dw[1]->get(), s.H, KO, kBox), wg(dw[2]->get(), 2 * s.I, s.H, kBox),
          wd(dw[3]->get(), s.H, s.I, kBox);
      CUDA_OK(mod.launch(to.name, dim3(to.t.tiles_m, to.t.tiles_n), to.threads,
                         {ao.get(), wo.get(), x_sep.get()}, to.smem));
      CUDA_OK(mod.launch(names[3], 1, codegen::kNormThreads,
                         {x_sep.get(), mlp_norm.get(), nullptr, h.get()}));
      CUDA_OK(mod.launch(tg.name, dim3(tg.t.tiles_m, tg.t.tiles_n), tg.threads,
                         {ag.get(), wg.get(), act_sep.get()}, tg.smem));
      CUDA_OK(mod.launch(td.name, dim3(td.t.tiles_m, td.t.tiles_n), td.threads,
                         {ad.get(), wd.get(), x_sep.get()}, td.smem));
      const std::vector<float> xs = x_sep.download();
      const bf16v as = act_sep.download();
      EXPECT_EQ(0, std::memcmp(got.x.data(), xs.data(), xs.size() * sizeof(float)))
          << "vs the small GEMMs, " << at;
      EXPECT_EQ(0, std::memcmp(got.act.data(), as.data(), as.size() * 2))
          << "vs the small GEMMs, " << at;
    }
  }
}

TEST(GpuKernels, DecodeLayerSm100TwinMatchesHopperLayerF64AndSmallTwins) {
  TELOS_SKIP_UNLESS_SM90(kTwinKernels);
  check_decode_layer_sm100(Sm100Form::Twin);
}

TEST(GpuKernels, DecodeLayerSm100MatchesF64AndSmallGemms) {
  TELOS_SKIP_UNLESS_SM100(kTcgen05Kernels);
  check_decode_layer_sm100(Sm100Form::Tcgen05);
}

// The e4m3 QKV phase (its converters writing W' into the ring, raw slots of 64-byte rows) at every
// QKV tile height the plan can pick (24 and 48 rows: one K block a slot; 16 and 32: four and two)
// and each scale layout the importer writes (128 x 128 blocks, 64-row blocks, one scale a row),
// at the tiny, Qwen3-0.6B, Llama-3.2-1B and Llama-3.1-8B shapes: its output is, bit for bit,
// gemm_small_e4m3_bf16's for one token and the bf16 QKV phase's on W' = bf16(float(q) · s), output
// poisoned first and every SM's shared memory NaNs before each launch.
TEST(GpuKernels, E4m3PersistentQkvTilesMatchSmallGemm) {
  TELOS_SKIP_UNLESS_SM90(kWgmmaKernels);
  struct Shape {
    int H, NQKV, sbr, sbc;
  };
  const int sms = sm_count();
  for (const Shape& s : {Shape{128, 256, 64, 128}, Shape{1024, 4096, 128, 128},
                         Shape{2048, 3072, 1, 2048}, Shape{4096, 6144, 128, 128}}) {
    const std::string what =
        "H=" + I(s.H) + " NQKV=" + I(s.NQKV) + " blocks " + I(s.sbr) + "x" + I(s.sbc);
    const codegen::PersistentLayerTiling mt =
        codegen::decode_layer_tiling(s.H, s.NQKV, s.H, s.H, 64);
    const codegen::PersistentLayerTiling me =
        codegen::decode_layer_tiling(s.H, s.NQKV, s.H, s.H, 64, true, true);
    ASSERT_TRUE(me.fits) << what;
    std::vector<int> heights = {me.bq};
    for (int bq : {16, 32})
      if (bq != me.bq && codegen::persistent_tile_fits(bq, s.H, s.NQKV)) heights.push_back(bq);
    const codegen::SmallGemmTiling ts = codegen::small_gemm_e4m3_tiling(s.NQKV, s.H, 1, false);
    const std::string blocks = I(s.sbr) + ", " + I(s.sbc) + ">";
    std::vector<std::string> names = {"telos_kernels::gemm_small_e4m3_bf16<1, " + I(s.NQKV) + ", " +
                                          I(s.H) + ", " + I(ts.bn) + ", " + I(ts.stages) + ", " +
                                          blocks,
                                      "poison_shared"};
    for (int bq : heights) {
      names.push_back("telos_kernels::qkv_phase_test<" + I(s.H) + ", " + I(s.NQKV) + ", " +
                      I(mt.stages) + ", " + I(bq) + ">");
      names.push_back("telos_kernels::qkv_phase_e4m3_test<" + I(s.H) + ", " + I(s.NQKV) + ", " +
                      I(me.stages) + ", " + I(me.raw_stages) + ", " + I(bq) + ", " + blocks);
    }
    TestModule mod(source_with_rope() + kPoisonShared + kQkvTestProducer + kQkvPhaseTestKernel +
                       kE4m3QkvPhaseTestKernel,
                   names);
    std::vector<float> f;
    DeviceBuffer<std::uint16_t> h(random_bf16(s.H, 1.f, f));
    const E4m3Weight w = random_e4m3(s.NQKV, s.H, s.sbr, s.sbc);
    DeviceBuffer<std::uint8_t> dq(w.q);
    DeviceBuffer<float> dscale(w.scale);
    DeviceBuffer<std::uint16_t> dw(w.w);
    DeviceBuffer<std::uint16_t> want_d(s.NQKV);  // poisoned
    {
      const DeviceMap a(h.get(), 1, s.H, ts.a_box);
      const E4m3Map wm(dq.get(), s.NQKV, s.H, ts.w_box());
      CUDA_OK(mod.launch("poison_shared", sms, 1024, {}, codegen::kMaxSmemPerBlock));
      CUDA_OK(mod.launch(names[0], dim3(ts.tiles_m, ts.tiles_n),
                         ts.threads() + codegen::kSmallGemmConverterThreads,
                         {a.get(), wm.get(), dscale.get(), want_d.get()},
                         codegen::small_gemm_e4m3_smem(ts)));
    }
    const std::vector<std::uint16_t> want = want_d.download();
    std::size_t nans = 0;
    for (std::uint16_t v : want) nans += std::isnan(from_bf16(v));
    ASSERT_EQ(nans, 0u) << what;
    for (std::size_t k = 0; k < heights.size(); ++k) {
      const std::string at = what + " BQ=" + I(heights[k]);
      const DeviceMap wb(dw.get(), s.NQKV, s.H, heights[k]);
      const E4m3Map we(dq.get(), s.NQKV, s.H, heights[k]);
      DeviceBuffer<std::uint16_t> bf16_d(s.NQKV), e4m3_d(s.NQKV);  // poisoned
      CUDA_OK(mod.launch("poison_shared", sms, 1024, {}, codegen::kMaxSmemPerBlock));
      CUDA_OK(mod.launch(names[2 + 2 * k], sms, codegen::kPersistentThreads,
                         {wb.get(), h.get(), bf16_d.get()}, mt.smem));
      CUDA_OK(mod.launch("poison_shared", sms, 1024, {}, codegen::kMaxSmemPerBlock));
      CUDA_OK(mod.launch(names[3 + 2 * k], sms, codegen::kPersistentE4m3Threads,
                         {we.get(), dscale.get(), h.get(), e4m3_d.get()}, me.smem));
      const std::vector<std::uint16_t> got_bf16 = bf16_d.download(), got = e4m3_d.download();
      EXPECT_EQ(0, std::memcmp(got.data(), want.data(), want.size() * 2)) << "vs small, " << at;
      EXPECT_EQ(0, std::memcmp(got.data(), got_bf16.data(), want.size() * 2)) << "vs W', " << at;
    }
  }
}

// The whole one-token layer on e4m3 weights (decode_layer_persistent_e4m3, the plan's tiles and
// rings) gives, bit for bit, decode_layer_persistent's x, appended K/V, attention output and act on
// W' = bf16(float(q) · s) (so the bf16 layer's checks carry over: its bits are the separate
// kernels'), at the tiny (QKV bias), Llama-3.2-1B, Qwen3-0.6B (QK norm: the QKV epilogue's own
// phase) and Llama-3.1-8B shapes, at ragged context lengths (the first position, mid-page, past one
// split, several splits), with 128 x 128 scale blocks and, at the 1B, one scale a row; outputs
// poisoned first, every SM's shared memory NaNs before each launch, the counters back at zero
// after it. Its MLP half gives the bits of the small-M e4m3 kernels a bucket of more tokens runs
// (gemm_small_e4m3_residual, rmsnorm, gemm_small_e4m3_swiglu, gemm_small_e4m3_residual) from the
// layer's own attention output.
TEST(GpuKernels, E4m3PersistentLayerMatchesBf16LayerOnDequantizedWeights) {
  TELOS_SKIP_UNLESS_SM90(kWgmmaKernels);
  struct Shape {
    int H, HQ, HKV, D, I;
    bool bias, qk_norm;
    int sbr, sbc;  // 0, 0: one scale a row
  };
  constexpr int PAGE = 16, MAXP = 72, POOL = MAXP + 8;
  const std::string eps = float_literal(1e-5);
  const int sms = sm_count(), nsplit = codegen::attn_partial_slots(MAXP * PAGE);
  for (const Shape& s : {Shape{128, 4, 2, 32, 256, true, false, 128, 128},
                         Shape{2048, 32, 8, 64, 8192, false, false, 0, 0},
                         Shape{1024, 16, 8, 128, 3072, false, true, 128, 128},
                         Shape{4096, 32, 8, 128, 14336, false, false, 128, 128}}) {
    const int NH = s.HQ + 2 * s.HKV, NQKV = NH * s.D, KO = s.HQ * s.D;
    const long long page_elems = 2LL * s.HKV * PAGE * s.D;
    const std::string what = "H=" + I(s.H) + " D=" + I(s.D) + " I=" + I(s.I);
    const codegen::PersistentLayerTiling lt =
        codegen::decode_layer_tiling(s.H, NQKV, KO, s.I, s.D, s.qk_norm);
    const codegen::PersistentLayerTiling le =
        codegen::decode_layer_tiling(s.H, NQKV, KO, s.I, s.D, s.qk_norm, true);
    ASSERT_TRUE(lt.fits && le.fits) << what;
    // The four weights (qkv, o, gate/up, down): rows, K, the tile's box rows (gate/up: a half),
    // their scale blocks, and their e4m3 forms.
    const int rows[4] = {NQKV, s.H, 2 * s.I, s.H}, cols[4] = {s.H, KO, s.H, s.I},
              boxes[4] = {lt.bq, lt.bo, lt.bg / 2, lt.bd};
    std::string blocks[4], all_blocks;
    std::vector<E4m3Weight> w;
    for (int k = 0; k < 4; ++k) {
      const int sbr = s.sbr ? s.sbr : 1, sbc = s.sbc ? s.sbc : cols[k];
      w.push_back(random_e4m3(rows[k], cols[k], sbr, sbc));
      blocks[k] = I(sbr) + ", " + I(sbc);
      all_blocks += ", " + blocks[k];
    }
    const std::string model =
        I(s.H) + ", " + I(s.HQ) + ", " + I(s.HKV) + ", " + I(s.D) + ", " +
        (s.bias ? "true" : "false") + ", " + (s.qk_norm ? "true" : "false") + ", " + eps + ", " +
        I(PAGE) + ", " + I(MAXP) + ", " + I(page_elems) + "ll, telos_rope::Freqs, " +
        I(codegen::kAttnSplit) + ", " + I(nsplit) + ", " +
        float_literal(1.4426950408889634 / std::sqrt(static_cast<double>(s.D))) + ", " + I(s.I) +
        ", ";
    const auto tiles = [](const codegen::PersistentLayerTiling& t) {
      return I(t.stages) + ", " + I(t.bq) + ", " + I(t.bo) + ", " + I(t.bg) + ", " + I(t.bd) +
             (t.qkv_rope ? ", true" : ", false");
    };
    const codegen::SmallGemmTiling to = codegen::small_gemm_e4m3_tiling(s.H, KO, 1, false),
                                   tg = codegen::small_gemm_e4m3_tiling(s.I, s.H, 1, true),
                                   td = codegen::small_gemm_e4m3_tiling(s.H, s.I, 1, false);
    const auto small = [&](const std::string& epi, const codegen::SmallGemmTiling& t, int n,
                           int weight) {
      return "telos_kernels::gemm_small_e4m3_" + epi + "<1, " + I(n) + ", " + I(cols[weight]) +
             ", " + I(t.bn) + ", " + I(t.stages) + ", " + blocks[weight] + ">";
    };
    const std::vector<std::string> names = {
        "telos_kernels::decode_layer_persistent<" + model + tiles(lt) + ", 0>",
        "telos_kernels::decode_layer_persistent_e4m3<" + model + tiles(le) + ", " +
            I(le.raw_stages) + all_blocks + ">",
        small("residual", to, s.H, 1),
        "telos_kernels::rmsnorm<" + I(s.H) + ", " + eps + ", false>",
        small("swiglu", tg, s.I, 2),
        small("residual", td, s.H, 3),
        "poison_shared"};
    const codegen::RopeInput plain{"default", 1000000.0};
    TestModule mod(source_with_rope(codegen::rope_inv_freq(plain, s.D)) + kPoisonShared, names);

    std::vector<std::unique_ptr<DeviceBuffer<std::uint8_t>>> dq;
    std::vector<std::unique_ptr<DeviceBuffer<float>>> dscale;
    std::vector<std::unique_ptr<DeviceBuffer<std::uint16_t>>> dw;
    std::vector<std::unique_ptr<DeviceMap>> bf16_maps;
    std::vector<std::unique_ptr<E4m3Map>> e4m3_maps;
    for (int k = 0; k < 4; ++k) {
      dq.push_back(std::make_unique<DeviceBuffer<std::uint8_t>>(w[k].q));
      dscale.push_back(std::make_unique<DeviceBuffer<float>>(w[k].scale));
      dw.push_back(std::make_unique<DeviceBuffer<std::uint16_t>>(w[k].w));
      bf16_maps.push_back(std::make_unique<DeviceMap>(dw[k]->get(), rows[k], cols[k], boxes[k]));
      e4m3_maps.push_back(std::make_unique<E4m3Map>(dq[k]->get(), rows[k], cols[k], boxes[k]));
    }
    const std::vector<float> x0 = random_floats(s.H, 2.f);
    DeviceBuffer<float> attn_norm(random_floats(s.H, 1.f)), mlp_norm(random_floats(s.H, 1.f)),
        bias(random_floats(NQKV, 0.5f)), q_norm(random_floats(s.D, 1.f)),
        k_norm(random_floats(s.D, 1.f));
    std::vector<float> f;
    const bf16v kv0 = random_bf16(static_cast<std::size_t>(POOL) * page_elems, 1.f, f);
    std::vector<int> pool(POOL);
    std::iota(pool.begin(), pool.end(), 0);
    std::shuffle(pool.begin(), pool.end(), rng());
    DeviceBuffer<int> pt(std::vector<int>(pool.begin(), pool.begin() + MAXP)),
        seq(std::vector<int>{0});
    DeviceBuffer<unsigned> sync(std::vector<unsigned>{0u, 0u});
    for (int position : {0, 37, 300, 1061}) {
      const std::string at = what + " pos=" + I(position);
      DeviceBuffer<int> pos(std::vector<int>{position});
      // One layer launch (kernel 0: bf16 on W'; 1: e4m3) from the same inputs, and its outputs.
      struct Outputs {
        std::vector<float> x;
        bf16v kv, attn, act;
      };
      const auto run = [&](int kernel) {
        const bool e4m3 = kernel == 1;
        DeviceBuffer<float> x(x0), q(static_cast<std::size_t>(KO)),
            part_o(static_cast<std::size_t>(KO) * nsplit),
            part_ml(static_cast<std::size_t>(s.HQ) * nsplit * 2);
        DeviceBuffer<std::uint16_t> kv(kv0), qkv(NQKV), attn(KO), act(s.I);  // poisoned
        std::vector<const void*> args;
        for (int k = 0; k < 4; ++k)
          args.push_back(e4m3 ? e4m3_maps[k]->get() : bf16_maps[k]->get());
        if (e4m3)
          for (int k = 0; k < 4; ++k) args.push_back(dscale[k]->get());
        args.insert(args.end(),
                    {attn_norm.get(), mlp_norm.get(), s.bias ? bias.get() : nullptr,
                     s.qk_norm ? q_norm.get() : nullptr, s.qk_norm ? k_norm.get() : nullptr,
                     pos.get(), seq.get(), pt.get(), kv.get(), x.get(), qkv.get(), q.get(),
                     part_o.get(), part_ml.get(), attn.get(), act.get(), sync.get()});
        EXPECT_EQ(mod.launch("poison_shared", sms, 1024, {}, codegen::kMaxSmemPerBlock),
                  cudaSuccess);
        EXPECT_EQ(mod.launch(names[kernel], sms,
                             e4m3 ? codegen::kPersistentE4m3Threads : codegen::kPersistentThreads,
                             args, e4m3 ? le.smem : lt.smem),
                  cudaSuccess)
            << cudaGetErrorString(cudaGetLastError()) << ", " << names[kernel];
        EXPECT_EQ(sync.download(), (std::vector<unsigned>{0u, 0u})) << at;
        return Outputs{x.download(), kv.download(), attn.download(), act.download()};
      };
      const Outputs want = run(0), got = run(1);
      if (HasFailure()) return;
      std::size_t nans = 0;
      for (float v : want.x) nans += std::isnan(v);
      for (std::uint16_t v : want.attn) nans += std::isnan(from_bf16(v));
      for (std::uint16_t v : want.act) nans += std::isnan(from_bf16(v));
      ASSERT_EQ(nans, 0u) << at;
      EXPECT_EQ(0, std::memcmp(got.x.data(), want.x.data(), want.x.size() * sizeof(float))) << at;
      EXPECT_EQ(0, std::memcmp(got.kv.data(), want.kv.data(), want.kv.size() * 2)) << at;
      EXPECT_EQ(0, std::memcmp(got.attn.data(), want.attn.data(), want.attn.size() * 2)) << at;
      EXPECT_EQ(0, std::memcmp(got.act.data(), want.act.data(), want.act.size() * 2)) << at;
      // The token's K was appended: its slot no longer holds the pool's first bits.
      const std::size_t row = static_cast<std::size_t>(pool[position / PAGE]) * page_elems +
                              static_cast<std::size_t>(position % PAGE) * s.D;
      EXPECT_NE(0, std::memcmp(got.kv.data() + row, kv0.data() + row, s.D * 2)) << at;

      // The MLP half against the small-M e4m3 kernels, from x0 and the layer's attention output.
      DeviceBuffer<float> x_sep(x0);
      DeviceBuffer<std::uint16_t> attn_in(got.attn), h(s.H), act_sep(s.I);
      const DeviceMap ao(attn_in.get(), 1, KO, to.a_box), ag(h.get(), 1, s.H, tg.a_box),
          ad(act_sep.get(), 1, s.I, td.a_box);
      const E4m3Map wo(dq[1]->get(), s.H, KO, to.w_box()),
          wg(dq[2]->get(), 2 * s.I, s.H, tg.w_box()), wd(dq[3]->get(), s.H, s.I, td.w_box());
      const int conv = codegen::kSmallGemmConverterThreads;
      CUDA_OK(mod.launch(names[2], dim3(to.tiles_m, to.tiles_n), to.threads() + conv,
                         {ao.get(), wo.get(), dscale[1]->get(), x_sep.get()},
                         codegen::small_gemm_e4m3_smem(to)));
      CUDA_OK(mod.launch(names[3], 1, codegen::kNormThreads,
                         {x_sep.get(), mlp_norm.get(), nullptr, h.get()}));
      CUDA_OK(mod.launch(names[4], dim3(tg.tiles_m, tg.tiles_n), tg.threads() + conv,
                         {ag.get(), wg.get(), dscale[2]->get(), act_sep.get()},
                         codegen::small_gemm_e4m3_smem(tg)));
      CUDA_OK(mod.launch(names[5], dim3(td.tiles_m, td.tiles_n), td.threads() + conv,
                         {ad.get(), wd.get(), dscale[3]->get(), x_sep.get()},
                         codegen::small_gemm_e4m3_smem(td)));
      const std::vector<float> xs = x_sep.download();
      const bf16v as = act_sep.download();
      EXPECT_EQ(0, std::memcmp(got.x.data(), xs.data(), xs.size() * sizeof(float)))
          << "vs small, " << at;
      EXPECT_EQ(0, std::memcmp(got.act.data(), as.data(), as.size() * 2)) << "vs small, " << at;
    }
  }
}

// The e4m3 norm prologue (decode buckets up to 8 tokens): gemm_small_e4m3_norm_{bf16,swiglu} on x
// give the bits of rmsnorm into h then gemm_small_e4m3_{bf16,swiglu} on h, at M 1, 3 and 8, with K
// not a multiple of 64 (the last block's tail is zeros), the ring wrapping, 128 x 128 and 64-row
// scale blocks and one scale a row; rows past M stay poisoned, and every SM's shared memory is
// NaNs before each launch.
TEST(GpuKernels, E4m3SmallGemmNormPrologueMatchesRmsNormThenGemm) {
  TELOS_SKIP_UNLESS_SM90(kWgmmaKernels);
  struct Shape {
    int N, K, sbr, sbc;
  };
  const std::string eps = float_literal(1e-5);
  const int sms = sm_count();
  for (const Shape& shape : {Shape{520, 2000, 128, 128}, Shape{384, 1024, 64, 128},
                             Shape{96, 4096, 1, 4096}}) {
    const int N = shape.N, K = shape.K;
    const std::string blocks = ", " + I(shape.sbr) + ", " + I(shape.sbc) + ">";
    const std::vector<int> ms = {1, 3, 8};
    std::vector<std::string> names = {"telos_kernels::rmsnorm<" + I(K) + ", " + eps + ", false>",
                                      "poison_shared"};
    for (int M : ms)
      for (const std::string epi : {"bf16", "swiglu"}) {
        const bool swiglu = epi == "swiglu";
        const std::string dims = "<" + I(M) + ", " + I(N) + ", " + I(K) + ", ";
        const codegen::SmallGemmTiling tp = codegen::small_gemm_e4m3_tiling(N, K, M, swiglu),
                                       tf = codegen::small_gemm_e4m3_tiling(N, K, M, swiglu, true);
        names.push_back("telos_kernels::gemm_small_e4m3_" + epi + dims + I(tp.bn) + ", " +
                        I(tp.stages) + blocks);
        names.push_back("telos_kernels::gemm_small_e4m3_norm_" + epi + dims + I(tf.bn) + ", " +
                        I(tf.stages) + ", " + eps + blocks);
      }
    TestModule mod(source_with_rope() + kPoisonShared, names);
    constexpr int MAXM = 8, GUARD = 8;
    const std::vector<float> x = random_floats(static_cast<std::size_t>(MAXM) * K, 2.f);
    DeviceBuffer<float> dx(x), dnw(random_floats(K, 1.f));
    const E4m3Weight w = random_e4m3(2 * N, K, shape.sbr, shape.sbc);  // SwiGLU's gate and up
    DeviceBuffer<std::uint8_t> dq(w.q);
    DeviceBuffer<float> dscale(w.scale);
    std::size_t i = 2;
    for (int M : ms) {
      DeviceBuffer<std::uint16_t> h(static_cast<std::size_t>(M) * K);
      CUDA_OK(mod.launch(names[0], M, codegen::kNormThreads,
                         {dx.get(), dnw.get(), nullptr, h.get()}));
      for (const std::string epi : {"bf16", "swiglu"}) {
        const bool swiglu = epi == "swiglu";
        const std::string &plain = names[i], &fused = names[i + 1];
        i += 2;
        const std::string what = epi + " M=" + I(M) + " N=" + I(N) + " K=" + I(K) + " blocks " +
                                 I(shape.sbr) + "x" + I(shape.sbc);
        const codegen::SmallGemmTiling tp = codegen::small_gemm_e4m3_tiling(N, K, M, swiglu),
                                       tf = codegen::small_gemm_e4m3_tiling(N, K, M, swiglu, true);
        const std::size_t MN = static_cast<std::size_t>(M) * N,
                          total = MN + static_cast<std::size_t>(GUARD) * N;
        DeviceBuffer<std::uint16_t> y_plain(total), y_fused(total);  // poisoned
        const int rows = swiglu ? 2 * N : N, conv = codegen::kSmallGemmConverterThreads;
        const DeviceMap a(h.get(), M, K, tp.a_box);
        const E4m3Map wp(dq.get(), rows, K, tp.w_box()), wf(dq.get(), rows, K, tf.w_box());
        CUDA_OK(mod.launch("poison_shared", sms, 1024, {}, codegen::kMaxSmemPerBlock));
        CUDA_OK(mod.launch(plain, dim3(tp.tiles_m, tp.tiles_n), tp.threads() + conv,
                           {a.get(), wp.get(), dscale.get(), y_plain.get()},
                           codegen::small_gemm_e4m3_smem(tp)));
        CUDA_OK(mod.launch("poison_shared", sms, 1024, {}, codegen::kMaxSmemPerBlock));
        CUDA_OK(mod.launch(fused, dim3(tf.tiles_m, tf.tiles_n), tf.threads() + conv,
                           {dx.get(), dnw.get(), wf.get(), dscale.get(), y_fused.get()},
                           codegen::small_gemm_e4m3_smem(tf)));
        const auto p = y_plain.download(), f = y_fused.download();
        EXPECT_EQ(0, std::memcmp(p.data(), f.data(), MN * sizeof(std::uint16_t))) << what;
        for (std::size_t e = MN; e < total; ++e)
          ASSERT_EQ(f[e], 0xffff) << "wrote past M, " << what;
        std::size_t nans = 0;
        for (std::size_t e = 0; e < MN; ++e) nans += std::isnan(from_bf16(f[e]));
        EXPECT_EQ(nans, 0u) << what;
      }
    }
  }
}

// ---- W8A8: e4m3 activations and weights (gemm_w8a8.cuh) ----------------------------------------

const std::string kW8a8Source = "#include \"gemm_w8a8.cuh\"\n";
const int kW8a8Smem = static_cast<int>(telos_kernels::PrefillW8a8Gemm::smem());
using exec::w8a8_k_blocks;

// Random bf16 activations [m, k] with an outlier (x100) about every 50th element, so blocks' scales
// differ; row 1 all zeros and row 2's second K block zeros (scale 1); with `bad`, row 3 holds a NaN
// and row 4 an infinity (their outputs must be NaN).
bf16v w8a8_activations(int m, int k, bool bad, std::vector<float>& as_f32) {
  bf16v a = random_bf16(static_cast<std::size_t>(m) * k, 1.f, as_f32);
  std::uniform_int_distribution<int> pick(0, 49);
  for (std::size_t i = 0; i < a.size(); ++i)
    if (pick(rng()) == 0) a[i] = to_bf16(from_bf16(a[i]) * 100.f);
  auto set = [&](int r, int c, std::uint16_t v) {
    if (r < m && c < k) a[static_cast<std::size_t>(r) * k + c] = v;
  };
  for (int c = 0; c < k; ++c) set(1, c, 0);
  for (int c = 128; c < 256; ++c) set(2, c, 0x8000);  // -0
  if (bad) {
    set(3, 5, 0x7fc0);
    set(4, k - 1, 0x7f80);
  }
  for (std::size_t i = 0; i < a.size(); ++i) as_f32[i] = from_bf16(a[i]);
  return a;
}

// The host's quantization of each row (executor/w8a8_reference.hpp).
struct W8a8Rows {
  std::vector<std::uint8_t> q;
  std::vector<float> scale;
};
W8a8Rows host_quantize(const std::vector<float>& x, int m, int k) {
  W8a8Rows r{std::vector<std::uint8_t>(static_cast<std::size_t>(m) * k),
             std::vector<float>(static_cast<std::size_t>(m) * w8a8_k_blocks(k))};
  for (int t = 0; t < m; ++t)
    exec::quantize_row_e4m3(x.data() + static_cast<std::size_t>(t) * k, k,
                            r.q.data() + static_cast<std::size_t>(t) * k,
                            r.scale.data() + static_cast<std::size_t>(t) * w8a8_k_blocks(k));
  return r;
}

std::string quantize_instance(int m, int k) {
  return "telos_kernels::quantize_rows_e4m3<" + I(m) + ", " + I(k) + ">";
}
cudaError_t launch_quantize(TestModule& mod, int m, int k, const void* x, void* q, void* scale) {
  const int units = m * w8a8_k_blocks(k), warps = 8;  // kQuantizeWarps
  return mod.launch(quantize_instance(m, k), (units + warps - 1) / warps, 32 * warps,
                    {x, q, scale});
}

bool e4m3_nan(std::uint8_t b) {
  return (b & 0x7f) == 0x7f;
}

// quantize_rows_e4m3 writes the host's bytes and scales bit for bit (a NaN byte as any NaN
// pattern: the host writes 0x7f), on ragged K (a last block of 16 columns), zero rows and blocks,
// outliers, a NaN and an infinity; the outputs' guard bytes past M stay poisoned.
TEST(GpuKernels, W8a8QuantizeRowsMatchesHostBytes) {
  TELOS_SKIP_WITHOUT_GPU();
  struct Case {
    int m, k;
  };
  const std::vector<Case> cases = {{1, 2048}, {37, 4112}, {200, 144}};
  std::vector<std::string> names;
  for (const Case& c : cases) names.push_back(quantize_instance(c.m, c.k));
  TestModule mod(kW8a8Source, names);
  for (const Case& c : cases) {
    const int kb = w8a8_k_blocks(c.k), guard = 256;
    std::vector<float> xf;
    const bf16v x = w8a8_activations(c.m, c.k, true, xf);
    DeviceBuffer<std::uint16_t> dx(x);
    DeviceBuffer<std::uint8_t> dq(static_cast<std::size_t>(c.m) * c.k + guard);
    DeviceBuffer<float> ds(static_cast<std::size_t>(c.m) * kb + guard);
    CUDA_OK(launch_quantize(mod, c.m, c.k, dx.get(), dq.get(), ds.get()));
    const W8a8Rows want = host_quantize(xf, c.m, c.k);
    const auto q = dq.download();
    const auto s = ds.download();
    const std::string what = "M=" + I(c.m) + " K=" + I(c.k);
    for (std::size_t i = 0; i < want.q.size(); ++i) {
      if (e4m3_nan(want.q[i])) {
        ASSERT_TRUE(e4m3_nan(q[i])) << what << " byte " << i;
      } else {
        ASSERT_EQ(q[i], want.q[i]) << what << " byte " << i;
      }
    }
    for (std::size_t i = 0; i < want.scale.size(); ++i) {
      if (std::isnan(want.scale[i])) {
        ASSERT_TRUE(std::isnan(s[i])) << what << " scale " << i;
      } else {
        ASSERT_EQ(s[i], want.scale[i]) << what << " scale " << i;
      }
    }
    for (std::size_t i = want.q.size(); i < q.size(); ++i) ASSERT_EQ(q[i], 0xff) << what;
    for (std::size_t i = want.scale.size(); i < s.size(); ++i) ASSERT_TRUE(std::isnan(s[i]));
  }
}

// What the host says of one output: the reference's value (executor/w8a8_reference.hpp), the f64
// dot product of the dequantized operands, and the kernels' bound against the reference
// (gemm_w8a8.cuh): 2^-9 · Σ_kb |sa · sw| · Σ_k |float(qa) · float(qw)|, the tensor cores' order and
// rounding inside a block's 128 products. The reference is within 2^-16 of the same sum of
// magnitudes of the f64 value (its f32 sums; test/executor/w8a8_reference_test.cpp).
struct W8a8Expected {
  float ref;
  double exact, bound, magnitude;
};
W8a8Expected w8a8_expected(const W8a8Rows& a, int m, const E4m3Weight& w, int n, int k) {
  const int kb = w8a8_k_blocks(k);
  const std::uint8_t* qa = a.q.data() + static_cast<std::size_t>(m) * k;
  const float* sa = a.scale.data() + static_cast<std::size_t>(m) * kb;
  const std::uint8_t* qw = w.q.data() + static_cast<std::size_t>(n) * k;
  const float* sw = w.scale.data() + static_cast<std::size_t>(n / 128) * kb;
  W8a8Expected e{exec::w8a8_dot(qa, sa, qw, sw, k), 0, 0, 0};
  for (int b = 0; b < kb; ++b) {
    double block = 0;
    const double s = static_cast<double>(sa[b]) * sw[b];
    for (int c = b * 128; c < std::min(k, b * 128 + 128); ++c) {
      const double p = static_cast<double>(e4m3_to_f32(qa[c])) * e4m3_to_f32(qw[c]);
      e.exact += p * s;
      block += std::abs(p);
    }
    e.magnitude += block * std::abs(s);
  }
  e.bound = std::ldexp(e.magnitude, -9);
  return e;
}

bool within(double got, double want, double bound) {
  return std::abs(got - want) <= bound;
}

// Each W8A8 epilogue against the host: ragged M, N and K (a last K block of 16 columns), a
// persistent case with more tiles than SMs (every 37th row checked), activations quantized on the
// device (the bytes the quantization test pins). bf16 store: within the bound of the reference
// plus the bf16 rounding, and within bf16 tolerance of f64 on the dequantized operands; residual:
// x0 + y within the bound plus two f32 roundings; SwiGLU: within bf16 tolerance of f64. Rows with
// a NaN or an infinity give NaN everywhere; the guard rows past M stay poisoned.
TEST(GpuKernels, W8a8GemmsMatchReferenceAndF64) {
  TELOS_SKIP_UNLESS_SM90(kWgmmaKernels);
  for (const PrefillShape& c : {PrefillShape{200, 384, 272}, PrefillShape{401, 136, 128},
                                PrefillShape{130, 640, 1040}, PrefillShape{2100, 3072, 512}}) {
    const std::string dims = "<" + I(c.M) + ", " + I(c.N) + ", " + I(c.K) + ">";
    const bool swiglu = c.N % 64 == 0;  // a tile's up rows in one scale block
    std::vector<std::string> names = {quantize_instance(c.M, c.K),
                                      "telos_kernels::gemm_prefill_w8a8_bf16" + dims,
                                      "telos_kernels::gemm_prefill_w8a8_residual" + dims};
    if (swiglu) names.push_back("telos_kernels::gemm_prefill_w8a8_swiglu" + dims);
    TestModule mod(kW8a8Source, names);
    const int kb = w8a8_k_blocks(c.K), guard = 64;
    const std::size_t MN = static_cast<std::size_t>(c.M) * c.N, total = MN + guard * c.N;
    std::vector<float> xf;
    DeviceBuffer<std::uint16_t> dx(w8a8_activations(c.M, c.K, true, xf));
    DeviceBuffer<std::uint8_t> dq(static_cast<std::size_t>(c.M) * c.K);
    DeviceBuffer<float> dsa(static_cast<std::size_t>(c.M) * kb);
    CUDA_OK(launch_quantize(mod, c.M, c.K, dx.get(), dq.get(), dsa.get()));
    const E4m3Weight w = random_e4m3(2 * c.N, c.K, 128, 128);  // [2N, K]: SwiGLU's gate and up
    DeviceBuffer<std::uint8_t> dw(w.q);
    DeviceBuffer<float> dsw(w.scale);
    const std::vector<float> x0 = random_floats(total);
    DeviceBuffer<std::uint16_t> dy(total), dact(total);
    DeviceBuffer<float> dres(total);
    dres.upload(x0);
    const auto u8 = hexel::TmaDtype::U8;
    const DeviceMap a_map(dq.get(), c.M, c.K, 128, u8), w_map(dw.get(), c.N, c.K, 128, u8),
        gu_map(dw.get(), 2 * c.N, c.K, 64, u8), y_map(dy.get(), c.M, c.N, 64),
        act_map(dact.get(), c.M, c.N, 64), x_map(dres.get(), c.M, c.N, 64, hexel::TmaDtype::F32);
    CUDA_OK(mod.launch(names[1], prefill_grid(c.M, c.N, 128), kPrefillThreads,
                       {a_map.get(), dsa.get(), w_map.get(), dsw.get(), y_map.get()}, kW8a8Smem));
    CUDA_OK(mod.launch(names[2], prefill_grid(c.M, c.N, 128), kPrefillThreads,
                       {a_map.get(), dsa.get(), w_map.get(), dsw.get(), x_map.get()}, kW8a8Smem));
    if (swiglu) {
      CUDA_OK(mod.launch(names[3], prefill_grid(c.M, c.N, 64), kPrefillThreads,
                         {a_map.get(), dsa.get(), gu_map.get(), dsw.get(), act_map.get()},
                         kW8a8Smem));
    }
    const W8a8Rows a = host_quantize(xf, c.M, c.K);
    const auto y = dy.download();
    const auto res = dres.download();
    const auto act = dact.download();
    const std::string what = "M=" + I(c.M) + " N=" + I(c.N) + " K=" + I(c.K);
    const int step = c.M > 1000 ? 37 : 1;
    std::vector<float> y_got, act_got;
    std::vector<double> y_want, act_want;
    for (int m = 0; m < c.M; m += step) {
      const bool bad = m == 3 || m == 4;
      for (int n = 0; n < c.N; ++n) {
        const std::size_t i = static_cast<std::size_t>(m) * c.N + n;
        const float yv = from_bf16(y[i]);
        if (bad) {
          ASSERT_TRUE(std::isnan(yv) && std::isnan(res[i])) << what << " row " << m;
          if (swiglu) {
            ASSERT_TRUE(std::isnan(from_bf16(act[i]))) << what << " row " << m;
          }
          continue;
        }
        const W8a8Expected g = w8a8_expected(a, m, w, n, c.K);
        ASSERT_TRUE(within(yv, g.ref, g.bound + std::ldexp(std::abs(g.ref), -8)))
            << what << " bf16 (" << m << ", " << n << "): " << yv << " vs " << g.ref;
        ASSERT_TRUE(within(res[i], x0[i] + static_cast<double>(g.ref),
                           g.bound + std::ldexp(std::abs(x0[i]) + std::abs(g.ref), -23)))
            << what << " residual (" << m << ", " << n << "): " << res[i] << " vs "
            << x0[i] + g.ref;
        y_got.push_back(yv);
        y_want.push_back(g.exact);
        if (swiglu) {
          const double gate = g.exact, up = w8a8_expected(a, m, w, c.N + n, c.K).exact;
          act_got.push_back(from_bf16(act[i]));
          act_want.push_back(gate / (1.0 + std::exp(-gate)) * up);
        }
      }
    }
    EXPECT_LT(rel_l2(y_got, y_want), 1e-2) << "bf16 against f64, " << what;
    if (swiglu) {
      EXPECT_LT(rel_l2(act_got, act_want), 1e-2) << "swiglu against f64, " << what;
    }
    for (std::size_t i = MN; i < total; ++i) {
      ASSERT_EQ(y[i], 0xffff) << "bf16 store wrote past M, " << what;
      ASSERT_EQ(res[i], x0[i]) << "residual wrote past M, " << what;
      if (swiglu) {
        ASSERT_EQ(act[i], 0xffff) << "swiglu store wrote past M, " << what;
      }
    }
  }
}

// Batch invariance: a row's outputs are the same bits whichever bucket (M) computes it and
// wherever it lands in a tile: the same quantized rows from row `off` on, for offsets that move a
// row to another warp (16), the other consumer warpgroup (64, 72) and another M tile (144).
TEST(GpuKernels, W8a8GemmRowsDoNotDependOnTheTile) {
  TELOS_SKIP_UNLESS_SM90(kWgmmaKernels);
  constexpr int R = 300, N = 384, K = 272;
  const std::vector<int> offsets = {0, 16, 64, 72, 144};
  std::vector<std::string> names = {quantize_instance(R, K)};
  for (int off : offsets)
    for (const std::string epi : {"bf16", "swiglu"})
      names.push_back("telos_kernels::gemm_prefill_w8a8_" + epi + "<" + I(R - off) + ", " + I(N) +
                      ", " + I(K) + ">");
  TestModule mod(kW8a8Source, names);
  const int kb = w8a8_k_blocks(K);
  std::vector<float> xf;
  DeviceBuffer<std::uint16_t> dx(w8a8_activations(R, K, false, xf));
  DeviceBuffer<std::uint8_t> dq(static_cast<std::size_t>(R) * K);
  DeviceBuffer<float> dsa(static_cast<std::size_t>(R) * kb);
  CUDA_OK(launch_quantize(mod, R, K, dx.get(), dq.get(), dsa.get()));
  const E4m3Weight w = random_e4m3(2 * N, K, 128, 128);
  DeviceBuffer<std::uint8_t> dw(w.q);
  DeviceBuffer<float> dsw(w.scale);
  const auto u8 = hexel::TmaDtype::U8;
  const DeviceMap w_map(dw.get(), N, K, 128, u8), gu_map(dw.get(), 2 * N, K, 64, u8);
  std::vector<bf16v> first(2);
  for (std::size_t o = 0; o < offsets.size(); ++o) {
    const int off = offsets[o], m = R - off;
    const DeviceMap a_map(dq.get() + static_cast<std::size_t>(off) * K, m, K, 128, u8);
    const float* sa = dsa.get() + static_cast<std::size_t>(off) * kb;
    for (int e = 0; e < 2; ++e) {
      DeviceBuffer<std::uint16_t> dy(static_cast<std::size_t>(m) * N);
      const DeviceMap y_map(dy.get(), m, N, 64);
      CUDA_OK(
          mod.launch(names[1 + 2 * o + e], prefill_grid(m, N, e == 0 ? 128 : 64), kPrefillThreads,
                     {a_map.get(), sa, e == 0 ? w_map.get() : gu_map.get(), dsw.get(), y_map.get()},
                     kW8a8Smem));
      const bf16v y = dy.download();
      if (off == 0) {
        first[e] = y;
        continue;
      }
      for (std::size_t i = 0; i < y.size(); ++i)
        ASSERT_EQ(y[i], first[e][static_cast<std::size_t>(off) * N + i])
            << names[1 + 2 * o + e] << " row " << i / N << " (row " << off + i / N << " at M=" << R
            << ")";
    }
  }
}

// ---- small-M W8A8 (gemm_small_w8a8.cuh) -------------------------------------------------------

const std::string kSmallW8a8Source = "#include \"gemm_small_w8a8.cuh\"\n" + kPoisonShared;

// The small-M W8A8 tiles a test runs: the plan's (codegen::small_gemm_w8a8_tiling), then 16 and
// 128 weight rows a tile where they differ from it and fit (SwiGLU: n a multiple of the half), each
// with as many of the plan's stages as fit a block: wgmma m64n16 to m64n128.
std::vector<codegen::SmallGemmTiling> w8a8_small_tilings(int n, int k, int tokens, bool swiglu) {
  const codegen::SmallGemmTiling plan = codegen::small_gemm_w8a8_tiling(n, k, tokens, swiglu);
  std::vector<codegen::SmallGemmTiling> ts = {plan};
  for (int bn : {16, 128}) {
    if (bn == plan.bn || (swiglu && n % (bn / 2) != 0)) continue;
    codegen::SmallGemmTiling t = plan.with_bn(bn, n, swiglu);
    while (t.smem() > codegen::kMaxSmemPerBlock) --t.stages;
    ts.push_back(t);
  }
  return ts;
}

// Launches small-M W8A8 form `name` (tiles t) on the quantized rows at q (their scales at sa, m
// rows of k), the e4m3 weight at w (rows of it, k columns; its scales at sw) into `out`, after
// poisoning every SM's shared memory with NaNs.
cudaError_t launch_w8a8_small(TestModule& mod, const std::string& name,
                              const codegen::SmallGemmTiling& t, const std::uint8_t* q,
                              const float* sa, int m, const std::uint8_t* w, const float* sw,
                              int rows, int k, const void* out) {
  const auto u8 = hexel::TmaDtype::U8;
  const DeviceMap a_map(q, m, k, t.a_box, u8), w_map(w, rows, k, t.w_box(), u8);
  const cudaError_t e =
      mod.launch("poison_shared", sm_count(), 1024, {}, codegen::kMaxSmemPerBlock);
  if (e != cudaSuccess) return e;
  return mod.launch(name, dim3(t.tiles_m, t.tiles_n), t.threads(),
                    {a_map.get(), sa, w_map.get(), sw, out}, t.smem());
}

// The operands of a small-M W8A8 case: m rows of w8a8_activations (rows 3 and 4 hold a NaN and an
// infinity) quantized on the host (a), a random e4m3 weight of `rows` rows of k in 128 x 128 scale
// blocks (w), and both on the device.
struct W8a8SmallOperands {
  W8a8Rows a;
  E4m3Weight w;
  DeviceBuffer<std::uint8_t> dq;
  DeviceBuffer<float> dsa;
  DeviceBuffer<std::uint8_t> dw;
  DeviceBuffer<float> dsw;
  W8a8SmallOperands(int m, int k, int rows)
      : a(quantized_activations(m, k)),
        w(random_e4m3(rows, k, 128, 128)),
        dq(a.q),
        dsa(a.scale),
        dw(w.q),
        dsw(w.scale) {}
  static W8a8Rows quantized_activations(int m, int k) {
    std::vector<float> xf;
    w8a8_activations(m, k, true, xf);
    return host_quantize(xf, m, k);
  }
};

// Each small-M W8A8 form against the host, with the W8A8 prefill GEMM's bounds
// (W8a8GemmsMatchReferenceAndF64): ragged T, N and K (a last K block of 16 columns), the plan's
// tiles and others (w8a8_small_tilings), one 8-row A group (T <= 8: rows T..7 never written, the
// shared memory NaNs) and whole 64-row tiles; bf16 within the bound of the reference plus the bf16
// rounding and within bf16 tolerance of f64; residual x0 + y within the bound plus two f32
// roundings; SwiGLU within bf16 tolerance of f64. Rows with a NaN or an infinity give NaN
// everywhere; the outputs' 64 guard rows past T stay poisoned (x0 for the residual).
TEST(GpuKernels, W8a8SmallGemmsMatchReference) {
  TELOS_SKIP_UNLESS_SM90(kWgmmaKernels);
  for (const PrefillShape& c :
       {PrefillShape{1, 384, 272}, PrefillShape{5, 136, 1040}, PrefillShape{8, 520, 144},
        PrefillShape{64, 256, 2064}, PrefillShape{200, 640, 400}}) {
    std::vector<std::string> names = {"poison_shared"};
    for (const std::string epi : {"bf16", "residual", "swiglu"})
      for (const codegen::SmallGemmTiling& t : w8a8_small_tilings(c.N, c.K, c.M, epi == "swiglu"))
        names.push_back(codegen::small_gemm_w8a8_instance(t, epi, c.M, c.N, c.K));
    TestModule mod(kSmallW8a8Source, names);
    const int guard = 64;
    const std::size_t MN = static_cast<std::size_t>(c.M) * c.N, total = MN + guard * c.N;
    const W8a8SmallOperands ops(c.M, c.K, 2 * c.N);  // the weight [2N, K]: SwiGLU's gate and up
    const W8a8Rows& a = ops.a;
    const E4m3Weight& w = ops.w;
    const std::vector<float> x0 = random_floats(total);
    // The host's values: the reference, f64 and the bound of each output, and SwiGLU's f64.
    std::vector<W8a8Expected> want(MN);
    std::vector<double> act_want(MN);
    for (int m = 0; m < c.M; ++m)
      for (int n = 0; n < c.N; ++n) {
        const std::size_t i = static_cast<std::size_t>(m) * c.N + n;
        want[i] = w8a8_expected(a, m, w, n, c.K);
        const double gate = want[i].exact, up = w8a8_expected(a, m, w, c.N + n, c.K).exact;
        act_want[i] = gate / (1.0 + std::exp(-gate)) * up;
      }
    for (const std::string epi : {"bf16", "residual", "swiglu"}) {
      const bool swiglu = epi == "swiglu", residual = epi == "residual";
      for (const codegen::SmallGemmTiling& t : w8a8_small_tilings(c.N, c.K, c.M, swiglu)) {
        const std::string what = codegen::small_gemm_w8a8_instance(t, epi, c.M, c.N, c.K);
        DeviceBuffer<std::uint16_t> dy(total);
        DeviceBuffer<float> dx(x0);
        CUDA_OK(launch_w8a8_small(mod, what, t, ops.dq.get(), ops.dsa.get(), c.M, ops.dw.get(),
                                  ops.dsw.get(), swiglu ? 2 * c.N : c.N, c.K,
                                  residual ? static_cast<const void*>(dx.get()) : dy.get()));
        const auto y = dy.download();
        const auto x = dx.download();
        std::vector<float> got;
        std::vector<double> exact;
        for (int m = 0; m < c.M; ++m) {
          const bool bad = m == 3 || m == 4;
          for (int n = 0; n < c.N; ++n) {
            const std::size_t i = static_cast<std::size_t>(m) * c.N + n;
            const W8a8Expected& g = want[i];
            const float v = residual ? x[i] : from_bf16(y[i]);
            if (bad) {
              ASSERT_TRUE(std::isnan(v)) << what << " row " << m;
              continue;
            }
            if (residual) {
              ASSERT_TRUE(within(v, x0[i] + static_cast<double>(g.ref),
                                 g.bound + std::ldexp(std::abs(x0[i]) + std::abs(g.ref), -23)))
                  << what << " (" << m << ", " << n << "): " << v << " vs " << x0[i] + g.ref;
              continue;
            }
            if (!swiglu) {
              ASSERT_TRUE(within(v, g.ref, g.bound + std::ldexp(std::abs(g.ref), -8)))
                  << what << " (" << m << ", " << n << "): " << v << " vs " << g.ref;
            }
            got.push_back(v);
            exact.push_back(swiglu ? act_want[i] : g.exact);
          }
        }
        if (!residual) {
          ASSERT_FALSE(got.empty()) << what;
          EXPECT_LT(rel_l2(got, exact), 1e-2) << "against f64, " << what;
        }
        for (std::size_t i = MN; i < total; ++i) {
          ASSERT_EQ(y[i], 0xffff) << what << " wrote past T";
          ASSERT_EQ(x[i], x0[i]) << what << " wrote past T";
        }
      }
    }
  }
}

// The LM head on W8A8 (gemm_small_w8a8_f32cand, an FP8 LM head's kernel): f32 logits within the
// W8A8 bound of the host reference, the bf16 form's bits once rounded (the same accumulators: the
// epilogue is all that differs), each row's greedy candidate of every weight tile that of the
// logits it wrote (NaN rows: NaN logits, no candidate), at the plan's tiles (lm_head_w8a8_tiling)
// and the projections' (w8a8_small_tilings) whose rows divide the vocabulary; the 64 guard rows
// past T stay poisoned.
TEST(GpuKernels, W8a8LmHeadLogitsAndCandidates) {
  TELOS_SKIP_UNLESS_SM90(kWgmmaKernels);
  for (const PrefillShape& c :
       {PrefillShape{1, 1024, 2064}, PrefillShape{5, 384, 272}, PrefillShape{70, 512, 400}}) {
    const codegen::SmallGemmTiling plan = codegen::lm_head_w8a8_tiling(c.N, c.K, c.M);
    std::vector<codegen::SmallGemmTiling> tilings = {plan};
    for (const codegen::SmallGemmTiling& t : w8a8_small_tilings(c.N, c.K, c.M, false))
      if (c.N % t.bn == 0 && (t.bn != plan.bn || t.stages != plan.stages)) tilings.push_back(t);
    std::vector<std::string> names = {"poison_shared"};
    for (const codegen::SmallGemmTiling& t : tilings)
      for (const std::string epi : {"f32cand", "bf16"})
        names.push_back(codegen::small_gemm_w8a8_instance(t, epi, c.M, c.N, c.K));
    TestModule mod(kSmallW8a8Source, names);
    const int guard = 64;
    const std::size_t MN = static_cast<std::size_t>(c.M) * c.N, total = MN + guard * c.N;
    const W8a8SmallOperands ops(c.M, c.K, c.N);
    const W8a8Rows& a = ops.a;
    const E4m3Weight& w = ops.w;
    const auto u8 = hexel::TmaDtype::U8;
    for (const codegen::SmallGemmTiling& t : tilings) {
      const std::string what = codegen::small_gemm_w8a8_instance(t, "f32cand", c.M, c.N, c.K);
      DeviceBuffer<float> dy(total);
      DeviceBuffer<std::uint64_t> dc(static_cast<std::size_t>(c.M) * (c.N / t.bn));
      const DeviceMap a_map(ops.dq.get(), c.M, c.K, t.a_box, u8),
          w_map(ops.dw.get(), c.N, c.K, t.w_box(), u8);
      CUDA_OK(mod.launch("poison_shared", sm_count(), 1024, {}, codegen::kMaxSmemPerBlock));
      CUDA_OK(mod.launch(
          what, dim3(t.tiles_m, t.tiles_n), t.threads(),
          {a_map.get(), ops.dsa.get(), w_map.get(), ops.dsw.get(), dy.get(), dc.get()}, t.smem()));
      DeviceBuffer<std::uint16_t> db(MN);
      CUDA_OK(launch_w8a8_small(mod, codegen::small_gemm_w8a8_instance(t, "bf16", c.M, c.N, c.K), t,
                                ops.dq.get(), ops.dsa.get(), c.M, ops.dw.get(), ops.dsw.get(), c.N,
                                c.K, db.get()));
      const std::vector<float> y = dy.download();
      const std::vector<std::uint16_t> b = db.download();
      for (int m = 0; m < c.M; ++m)
        for (int n = 0; n < c.N; ++n) {
          const std::size_t i = static_cast<std::size_t>(m) * c.N + n;
          if (m == 3 || m == 4) {
            ASSERT_TRUE(std::isnan(y[i]) && std::isnan(from_bf16(b[i]))) << what << " row " << m;
            continue;
          }
          ASSERT_EQ(to_bf16(y[i]), b[i]) << what << " (" << m << ", " << n << ") against bf16";
          const W8a8Expected g = w8a8_expected(a, m, w, n, c.K);
          ASSERT_TRUE(within(y[i], g.ref, g.bound + std::ldexp(std::abs(g.ref), -23)))
              << what << " (" << m << ", " << n << "): " << y[i] << " vs " << g.ref;
        }
      const std::vector<float> logits(y.begin(), y.begin() + MN);
      EXPECT_EQ(dc.download(), greedy_candidates(logits, c.M, c.N, c.N / t.bn)) << what;
      for (std::size_t i = MN; i < total; ++i) {
        std::uint32_t u;
        std::memcpy(&u, &y[i], 4);
        ASSERT_EQ(u, 0xffffffffu) << what << " wrote past T";
      }
    }
  }
}

// Batch invariance across the GEMM classes: T rows taken out of the W8A8 prefill GEMM's R (T = 1,
// 7, 64 and 200, at offsets that put them in other tiles, warps and consumer warpgroups of the
// prefill GEMM than of the small-M form) give, in every small-M form and tiling, the prefill GEMM's
// bits for those rows: bf16, the residual (both from the same x0) and SwiGLU.
TEST(GpuKernels, W8a8SmallGemmRowsMatchPrefillGemm) {
  TELOS_SKIP_UNLESS_SM90(kWgmmaKernels);
  constexpr int R = 300, N = 384, K = 1040;
  struct Rows {
    int t, off;
  };
  const std::vector<Rows> takes = {{1, 5}, {7, 64}, {64, 100}, {200, 90}};
  const std::vector<std::string> epis = {"bf16", "residual", "swiglu"};
  std::vector<std::string> names = {"poison_shared"};
  for (const std::string& epi : epis) {
    names.push_back("telos_kernels::gemm_prefill_w8a8_" + epi + "<" + I(R) + ", " + I(N) + ", " +
                    I(K) + ">");
    for (const Rows& r : takes)
      for (const codegen::SmallGemmTiling& t : w8a8_small_tilings(N, K, r.t, epi == "swiglu"))
        names.push_back(codegen::small_gemm_w8a8_instance(t, epi, r.t, N, K));
  }
  TestModule mod(kSmallW8a8Source, names);  // gemm_small_w8a8.cuh includes gemm_w8a8.cuh
  const int kb = w8a8_k_blocks(K);
  std::vector<float> xf;
  w8a8_activations(R, K, false, xf);
  const W8a8Rows a = host_quantize(xf, R, K);
  DeviceBuffer<std::uint8_t> dq(a.q);
  DeviceBuffer<float> dsa(a.scale);
  const E4m3Weight w = random_e4m3(2 * N, K, 128, 128);
  DeviceBuffer<std::uint8_t> dw(w.q);
  DeviceBuffer<float> dsw(w.scale);
  const std::vector<float> x0 = random_floats(static_cast<std::size_t>(R) * N);
  const auto u8 = hexel::TmaDtype::U8;
  const DeviceMap a_map(dq.get(), R, K, 128, u8), w_map(dw.get(), N, K, 128, u8),
      gu_map(dw.get(), 2 * N, K, 64, u8);
  for (const std::string& epi : epis) {
    const bool swiglu = epi == "swiglu", residual = epi == "residual";
    // The prefill GEMM's outputs: bf16 (bf16 store, SwiGLU) or x0 + y (residual).
    DeviceBuffer<std::uint16_t> dy(static_cast<std::size_t>(R) * N);
    DeviceBuffer<float> dx(x0);
    const DeviceMap out_map = residual ? DeviceMap(dx.get(), R, N, 64, hexel::TmaDtype::F32)
                                       : DeviceMap(dy.get(), R, N, 64);
    CUDA_OK(mod.launch(
        "telos_kernels::gemm_prefill_w8a8_" + epi + "<" + I(R) + ", " + I(N) + ", " + I(K) + ">",
        prefill_grid(R, N, swiglu ? 64 : 128), kPrefillThreads,
        {a_map.get(), dsa.get(), swiglu ? gu_map.get() : w_map.get(), dsw.get(), out_map.get()},
        kW8a8Smem));
    const auto prefill_y = dy.download();
    const auto prefill_x = dx.download();
    for (const Rows& r : takes) {
      const std::size_t first = static_cast<std::size_t>(r.off) * N,
                        count = static_cast<std::size_t>(r.t) * N;
      for (const codegen::SmallGemmTiling& t : w8a8_small_tilings(N, K, r.t, swiglu)) {
        const std::string name = codegen::small_gemm_w8a8_instance(t, epi, r.t, N, K),
                          what = name + " rows " + I(r.off) + "..";
        DeviceBuffer<std::uint16_t> sy(count);
        DeviceBuffer<float> sx(std::vector<float>(x0.begin() + first, x0.begin() + first + count));
        CUDA_OK(launch_w8a8_small(mod, name, t, dq.get() + static_cast<std::size_t>(r.off) * K,
                                  dsa.get() + static_cast<std::size_t>(r.off) * kb, r.t, dw.get(),
                                  dsw.get(), swiglu ? 2 * N : N, K,
                                  residual ? static_cast<const void*>(sx.get()) : sy.get()));
        const auto y = sy.download();
        const auto x = sx.download();
        for (std::size_t i = 0; i < count; ++i) {
          if (residual) {
            ASSERT_EQ(std::memcmp(&x[i], &prefill_x[first + i], sizeof(float)), 0)
                << what << " row " << r.off + i / N << " column " << i % N;
          } else {
            ASSERT_EQ(y[i], prefill_y[first + i])
                << what << " row " << r.off + i / N << " column " << i % N;
          }
        }
      }
    }
  }
}

// ---- the persistent layer on W8A8 (decode_layer_persistent_w8a8) -------------------------------

// The whole one-token layer on W8A8 (decode_layer_persistent_w8a8, decode_layer_w8a8_tiling's tiles
// and ring) against the same token through the kernels a bucket of more tokens runs, bit for bit:
// q and the appended K/V (rmsnorm, quantize_rows_e4m3, gemm_prefill_w8a8_bf16,
// qkv_rope_append_rows), the attention output (attn_split and attn_combine on those q and K/V),
// and from the layer's own attention output x, act and act's e4m3 form (quantize_rows_e4m3 before
// each of gemm_prefill_w8a8_residual (o), rmsnorm, gemm_prefill_w8a8_swiglu,
// gemm_prefill_w8a8_residual (down)). At the tiny (QKV bias, head dim 32), Llama-3.2-1B, Qwen3-0.6B (QK norm: the QKV
// epilogue's own phase) and Llama-3.1-8B shapes, at ragged context lengths (the first position,
// mid-page, past one split, several splits), with 128 x 128 weight scale blocks; outputs poisoned
// first, every SM's shared memory NaNs before each launch, the counters back at zero after it.
// Against f64 on the quantized operands (host_quantize of the layer's own act): each element of
// x = x1 + down(act) within 2^-8 · Σ_kb |sa · sw| · Σ_k |qa · qw| + 2^-23 · (|x1| + |down|) (the
// tensor cores' sum inside a block, gemm_w8a8.cuh's 2^-9, and the f32 promotion and add).
TEST(GpuKernels, W8a8PersistentLayerMatchesPrefillW8a8Kernels) {
  TELOS_SKIP_UNLESS_SM90(kWgmmaKernels);
  struct Shape {
    int H, HQ, HKV, D, I;
    bool bias, qk_norm;
  };
  constexpr int PAGE = 16, MAXP = 72, POOL = MAXP + 8;
  const std::string eps = float_literal(1e-5);
  const int sms = sm_count(), nsplit = codegen::attn_partial_slots(MAXP * PAGE);
  for (const Shape& s :
       {Shape{128, 4, 2, 32, 256, true, false}, Shape{2048, 32, 8, 64, 8192, false, false},
        Shape{1024, 16, 8, 128, 3072, false, true}, Shape{4096, 32, 8, 128, 14336, false, false}}) {
    const int NH = s.HQ + 2 * s.HKV, NQKV = NH * s.D, KO = s.HQ * s.D;
    const long long page_elems = 2LL * s.HKV * PAGE * s.D;
    const auto u8 = hexel::TmaDtype::U8;
    const std::string what = "H=" + I(s.H) + " D=" + I(s.D) + " I=" + I(s.I);
    const codegen::PersistentLayerTiling lw =
        codegen::decode_layer_w8a8_tiling(s.H, NQKV, KO, s.I, s.D, s.qk_norm);
    ASSERT_TRUE(lw.fits) << what;
    // The four weights (qkv, o, gate/up, down): rows, K, the layer's box rows (gate/up: a half).
    const int rows[4] = {NQKV, s.H, 2 * s.I, s.H}, cols[4] = {s.H, KO, s.H, s.I},
              boxes[4] = {lw.bq, lw.bo, lw.bg / 2, lw.bd};
    const std::string model =
        I(s.H) + ", " + I(s.HQ) + ", " + I(s.HKV) + ", " + I(s.D) + ", " +
        (s.bias ? "true" : "false") + ", " + (s.qk_norm ? "true" : "false") + ", " + eps + ", " +
        I(PAGE) + ", " + I(MAXP) + ", " + I(page_elems) + "ll, telos_rope::Freqs, " +
        I(codegen::kAttnSplit) + ", " + I(nsplit) + ", " +
        float_literal(1.4426950408889634 / std::sqrt(static_cast<double>(s.D))) + ", " + I(s.I) +
        ", ";
    const std::string layer = "telos_kernels::decode_layer_persistent_w8a8<" + model +
                              I(lw.stages) + ", " + I(lw.bq) + ", " + I(lw.bo) + ", " + I(lw.bg) +
                              ", " + I(lw.bd) + (lw.qkv_rope ? ", true>" : ", false>");
    const auto prefill = [](const std::string& epi, int n, int k) {
      return "telos_kernels::gemm_prefill_w8a8_" + epi + "<1, " + I(n) + ", " + I(k) + ">";
    };
    const std::string norm = "telos_kernels::rmsnorm<" + I(s.H) + ", " + eps + ", false>",
                      g_qkv = prefill("bf16", NQKV, s.H), g_o = prefill("residual", s.H, KO),
                      g_gu = prefill("swiglu", s.I, s.H), g_down = prefill("residual", s.H, s.I),
                      rope = "telos_kernels::qkv_rope_append_rows<" + I(s.HQ) + ", " + I(s.HKV) +
                             ", " + I(s.D) + ", " + (s.bias ? "true" : "false") + ", " +
                             (s.qk_norm ? "true" : "false") + ", " + eps + ", " + I(PAGE) + ", " +
                             I(MAXP) + ", " + I(page_elems) + "ll, telos_rope::Freqs>";
    const AttnShape as{s.HQ, s.HKV, s.D, PAGE, MAXP, codegen::kAttnSplit, nsplit};
    const std::string split = attn_split_instance(as, page_elems, 1),
                      combine = attn_combine_instance(as);
    const std::set<std::string> unique = {layer,
                                          norm,
                                          "poison_shared",
                                          quantize_instance(1, s.H),
                                          quantize_instance(1, KO),
                                          quantize_instance(1, s.I),
                                          g_qkv,
                                          g_o,
                                          g_gu,
                                          g_down,
                                          rope,
                                          split,
                                          combine};
    const codegen::RopeInput plain{"default", 1000000.0};
    TestModule mod(source_with_rope(codegen::rope_inv_freq(plain, s.D)) + kPoisonShared +
                       "#include \"decode_layer_w8a8.cuh\"\n",
                   std::vector<std::string>(unique.begin(), unique.end()));

    std::vector<E4m3Weight> w;
    std::vector<std::unique_ptr<DeviceBuffer<std::uint8_t>>> dq;
    std::vector<std::unique_ptr<DeviceBuffer<float>>> dscale;
    std::vector<std::unique_ptr<DeviceMap>> layer_maps;
    for (int k = 0; k < 4; ++k) {
      w.push_back(random_e4m3(rows[k], cols[k], 128, 128));
      dq.push_back(std::make_unique<DeviceBuffer<std::uint8_t>>(w[k].q));
      dscale.push_back(std::make_unique<DeviceBuffer<float>>(w[k].scale));
      // The e4m3 bytes in 128-byte box rows, one K block a row (decode_layer_w8a8.cuh), as the
      // executor encodes `tmap:w:NAME:ROWS:COLS:BN:128`.
      layer_maps.push_back(std::make_unique<DeviceMap>(dq[k]->get(), rows[k], cols[k], boxes[k],
                                                       hexel::TmaDtype::U8));
    }
    const DeviceMap wq(dq[0]->get(), NQKV, s.H, 128, u8), wo(dq[1]->get(), s.H, KO, 128, u8),
        wg(dq[2]->get(), 2 * s.I, s.H, 64, u8), wd(dq[3]->get(), s.H, s.I, 128, u8);
    const std::vector<float> x0 = random_floats(s.H, 2.f);
    DeviceBuffer<float> x_in(x0), attn_norm(random_floats(s.H, 1.f)),
        mlp_norm(random_floats(s.H, 1.f)), bias(random_floats(NQKV, 0.5f)),
        q_norm(random_floats(s.D, 1.f)), k_norm(random_floats(s.D, 1.f));
    std::vector<float> f;
    const bf16v kv0 = random_bf16(static_cast<std::size_t>(POOL) * page_elems, 1.f, f);
    std::vector<int> pool(POOL);
    std::iota(pool.begin(), pool.end(), 0);
    std::shuffle(pool.begin(), pool.end(), rng());
    DeviceBuffer<int> pt(std::vector<int>(pool.begin(), pool.begin() + MAXP)),
        seq(std::vector<int>{0});
    DeviceBuffer<unsigned> sync(std::vector<unsigned>{0u, 0u});
    // x (f32 [1, n]) as the residual epilogue's map, and quantize_rows_e4m3 of a bf16 row of k
    // into q and its scales.
    const auto quantize = [&](const void* row, int k, DeviceBuffer<std::uint8_t>& q,
                              DeviceBuffer<float>& sc) {
      CUDA_OK(launch_quantize(mod, 1, k, row, q.get(), sc.get()));
    };
    for (int position : {0, 37, 300, 1061}) {
      const std::string at = what + " pos=" + I(position);
      DeviceBuffer<int> pos(std::vector<int>{position});
      DeviceBuffer<float> x(x0), q(static_cast<std::size_t>(KO)),
          part_o(static_cast<std::size_t>(KO) * nsplit),
          part_ml(static_cast<std::size_t>(s.HQ) * nsplit * 2);
      DeviceBuffer<std::uint16_t> kv(kv0), qkv(NQKV), attn(KO),
          act(codegen::persistent_w8a8_act_bytes(s.I) / 2);  // poisoned
      std::vector<const void*> args;
      for (int k = 0; k < 4; ++k) args.push_back(layer_maps[k]->get());
      for (int k = 0; k < 4; ++k) args.push_back(dscale[k]->get());
      args.insert(args.end(),
                  {attn_norm.get(), mlp_norm.get(), s.bias ? bias.get() : nullptr,
                   s.qk_norm ? q_norm.get() : nullptr, s.qk_norm ? k_norm.get() : nullptr,
                   pos.get(), seq.get(), pt.get(), kv.get(), x.get(), qkv.get(), q.get(),
                   part_o.get(), part_ml.get(), attn.get(), act.get(), sync.get()});
      CUDA_OK(mod.launch("poison_shared", sms, 1024, {}, codegen::kMaxSmemPerBlock));
      ASSERT_EQ(mod.launch(layer, sms, codegen::kPersistentThreads, args, lw.smem), cudaSuccess)
          << cudaGetErrorString(cudaGetLastError()) << ", " << layer;
      EXPECT_EQ(sync.download(), (std::vector<unsigned>{0u, 0u})) << at;
      const std::vector<float> got_x = x.download(), got_q = q.download();
      const bf16v got_kv = kv.download(), got_attn = attn.download();
      const bf16v act_all = act.download();  // the bf16 row, its e4m3 form (W8a8Act)
      const bf16v got_act(act_all.begin(), act_all.begin() + s.I);
      std::size_t nans = 0;
      for (float v : got_x) nans += std::isnan(v);
      for (std::uint16_t v : got_attn) nans += std::isnan(from_bf16(v));
      for (std::uint16_t v : got_act) nans += std::isnan(from_bf16(v));
      ASSERT_EQ(nans, 0u) << at;
      // The token's K was appended: its slot no longer holds the pool's first bits.
      const std::size_t row = static_cast<std::size_t>(pool[position / PAGE]) * page_elems +
                              static_cast<std::size_t>(position % PAGE) * s.D;
      EXPECT_NE(0, std::memcmp(got_kv.data() + row, kv0.data() + row, s.D * 2)) << at;

      // The attention half: rmsnorm into h, its quantization, gemm_prefill_w8a8_bf16 into qkv,
      // qkv_rope_append_rows (q and the K/V pool), then the splits and the combine.
      {
        DeviceBuffer<std::uint16_t> h(s.H), qkv_ref(NQKV), kv_ref(kv0), attn_ref(KO);
        DeviceBuffer<std::uint8_t> qh(s.H);
        DeviceBuffer<float> sh(w8a8_k_blocks(s.H)), q_ref(static_cast<std::size_t>(KO)),
            po(static_cast<std::size_t>(KO) * nsplit),
            pml(static_cast<std::size_t>(s.HQ) * nsplit * 2);
        CUDA_OK(mod.launch(norm, 1, codegen::kNormThreads,
                           {x_in.get(), attn_norm.get(), nullptr, h.get()}));
        quantize(h.get(), s.H, qh, sh);
        const DeviceMap ah(qh.get(), 1, s.H, 128, u8), yq(qkv_ref.get(), 1, NQKV, 64);
        CUDA_OK(mod.launch(g_qkv, prefill_grid(1, NQKV, 128), kPrefillThreads,
                           {ah.get(), sh.get(), wq.get(), dscale[0]->get(), yq.get()}, kW8a8Smem));
        CUDA_OK(mod.launch(rope, dim3(NH, 1), s.D,
                           {qkv_ref.get(), s.bias ? bias.get() : nullptr,
                            s.qk_norm ? q_norm.get() : nullptr, s.qk_norm ? k_norm.get() : nullptr,
                            pos.get(), seq.get(), pt.get(), kv_ref.get(), q_ref.get()}));
        CUDA_OK(mod.launch(
            split, dim3(1, s.HKV, nsplit), 128,
            {q_ref.get(), pos.get(), seq.get(), pt.get(), kv_ref.get(), po.get(), pml.get()}));
        CUDA_OK(mod.launch(combine, dim3(1, s.HQ), s.D,
                           {po.get(), pml.get(), pos.get(), attn_ref.get()}));
        const std::vector<float> qs = q_ref.download();
        const bf16v kvs = kv_ref.download(), attns = attn_ref.download();
        EXPECT_EQ(0, std::memcmp(got_q.data(), qs.data(), qs.size() * sizeof(float)))
            << "q, " << at;
        EXPECT_EQ(0, std::memcmp(got_kv.data(), kvs.data(), kvs.size() * 2)) << "K/V, " << at;
        EXPECT_EQ(0, std::memcmp(got_attn.data(), attns.data(), attns.size() * 2))
            << "attn, " << at;
      }

      // The MLP half from x0 and the layer's attention output, each GEMM's input quantized first.
      DeviceBuffer<float> x_sep(x0);
      DeviceBuffer<std::uint16_t> attn_in(got_attn), h(s.H), act_sep(s.I);
      DeviceBuffer<std::uint8_t> qa(KO), qh(s.H), qd(s.I);
      DeviceBuffer<float> sa(w8a8_k_blocks(KO)), sh(w8a8_k_blocks(s.H)), sd(w8a8_k_blocks(s.I));
      const DeviceMap aa(qa.get(), 1, KO, 128, u8), ah(qh.get(), 1, s.H, 128, u8),
          ad(qd.get(), 1, s.I, 128, u8), xm(x_sep.get(), 1, s.H, 64, hexel::TmaDtype::F32),
          am(act_sep.get(), 1, s.I, 64);
      quantize(attn_in.get(), KO, qa, sa);
      CUDA_OK(mod.launch(g_o, prefill_grid(1, s.H, 128), kPrefillThreads,
                         {aa.get(), sa.get(), wo.get(), dscale[1]->get(), xm.get()}, kW8a8Smem));
      const std::vector<float> x1 = x_sep.download();
      CUDA_OK(mod.launch(norm, 1, codegen::kNormThreads,
                         {x_sep.get(), mlp_norm.get(), nullptr, h.get()}));
      quantize(h.get(), s.H, qh, sh);
      CUDA_OK(mod.launch(g_gu, prefill_grid(1, s.I, 64), kPrefillThreads,
                         {ah.get(), sh.get(), wg.get(), dscale[2]->get(), am.get()}, kW8a8Smem));
      quantize(act_sep.get(), s.I, qd, sd);
      CUDA_OK(mod.launch(g_down, prefill_grid(1, s.H, 128), kPrefillThreads,
                         {ad.get(), sd.get(), wd.get(), dscale[3]->get(), xm.get()}, kW8a8Smem));
      const std::vector<float> xs = x_sep.download();
      const bf16v acts = act_sep.download();
      EXPECT_EQ(0, std::memcmp(got_x.data(), xs.data(), xs.size() * sizeof(float))) << "x, " << at;
      EXPECT_EQ(0, std::memcmp(got_act.data(), acts.data(), acts.size() * 2)) << "act, " << at;
      // act's e4m3 form, quantized a block by the gate/up tile completing it: quantize_rows_e4m3's
      // bytes and scales.
      const std::vector<std::uint8_t> qds = qd.download();
      const std::vector<float> sds = sd.download();
      const auto* got_q8 = reinterpret_cast<const std::uint8_t*>(act_all.data()) + 2 * s.I;
      EXPECT_EQ(0, std::memcmp(got_q8, qds.data(), qds.size())) << "act e4m3, " << at;
      EXPECT_EQ(0, std::memcmp(got_q8 + s.I, sds.data(), sds.size() * 4)) << "act scales, " << at;

      // down against f64 on the layer's own quantized act.
      std::vector<float> act_f(s.I);
      for (int e = 0; e < s.I; ++e) act_f[e] = from_bf16(got_act[e]);
      const W8a8Rows a = host_quantize(act_f, 1, s.I);
      for (int n = 0; n < s.H; ++n) {
        const W8a8Expected g = w8a8_expected(a, 0, w[3], n, s.I);
        const double want = static_cast<double>(x1[n]) + g.exact;
        ASSERT_TRUE(within(
            got_x[n], want,
            std::ldexp(g.magnitude, -8) + std::ldexp(std::abs(x1[n]) + std::abs(g.exact), -23)))
            << "x vs f64 (" << n << "): " << got_x[n] << " vs " << want << ", " << at;
      }
    }
  }
}

}  // namespace
}  // namespace telos::gpu_test
