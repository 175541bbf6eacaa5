#pragma once
// What the GPU tests share: GPU 0's kernel target and the skips without one (or without the one
// a test's kernels need), device buffers, bf16 on the host, fresh random inputs, relative L2
// error.
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>


namespace telos::gpu_test {

// GPU 0's kernel target: "sm_90a" (compute capability 9.0: H100, H200) or "sm_100a" (10.0: B200,
// GB200); empty where there is none, and then `missing` says why.
struct GpuTarget {
  std::string target, missing;
};
inline const GpuTarget& gpu_target_of_device() {
  static const GpuTarget t = [] {
    int n = 0;
    const cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess)
      return GpuTarget{
          "", std::string("no usable CUDA driver or device (") + cudaGetErrorString(e) + ")"};
    if (n == 0) return GpuTarget{"", "no CUDA device"};
    cudaDeviceProp p{};
    cudaGetDeviceProperties(&p, 0);
    if (p.major == 9 && p.minor == 0) return GpuTarget{"sm_90a", ""};
    if (p.major == 10 && p.minor == 0) return GpuTarget{"sm_100a", ""};
    return GpuTarget{"", "GPU 0 has compute capability " + std::to_string(p.major) + "." +
                             std::to_string(p.minor) +
                             ", neither sm_90 (Hopper) nor sm_100 (B200)"};
  }();
  return t;
}
inline const std::string& gpu_target() {
  return gpu_target_of_device().target;
}
inline const std::string& gpu_missing_reason() {
  return gpu_target_of_device().missing;
}

// Why a test of `what` (kernels that only `target` runs) cannot run on GPU 0, or empty where it
// can.
inline std::string gpu_skip_reason(const std::string& what, const std::string& target) {
  if (!gpu_missing_reason().empty()) return gpu_missing_reason();
  if (gpu_target() == target) return std::string();
  return what + ": GPU 0 is " + gpu_target().substr(0, gpu_target().size() - 1) + ", they run on " +
         target.substr(0, target.size() - 1) + " only";
}

// Skips without a GPU that one of the two targets runs on (portable kernels, the model tests).
#define TELOS_SKIP_WITHOUT_GPU()                                                        \
  do {                                                                                  \
    if (!::telos::gpu_test::gpu_missing_reason().empty())                               \
      GTEST_SKIP() << "skipped: " << ::telos::gpu_test::gpu_missing_reason();           \
  } while (0)

// Skips unless GPU 0 is sm_90 (WHAT: e.g. "wgmma kernels", which include the sm_100a kernels'
// Hopper twins) or sm_100 ("tcgen05 kernels"), saying why.
#define TELOS_SKIP_UNLESS_TARGET(what, target)                                              \
  do {                                                                                      \
    const std::string telos_skip_reason = ::telos::gpu_test::gpu_skip_reason(what, target); \
    if (!telos_skip_reason.empty()) GTEST_SKIP() << "skipped: " << telos_skip_reason;       \
  } while (0)
#define TELOS_SKIP_UNLESS_SM90(what) TELOS_SKIP_UNLESS_TARGET(what, "sm_90a")
#define TELOS_SKIP_UNLESS_SM100(what) TELOS_SKIP_UNLESS_TARGET(what, "sm_100a")

#define CUDA_OK(expr) ASSERT_EQ((expr), cudaSuccess) << cudaGetErrorString(cudaGetLastError())

inline std::uint16_t to_bf16(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fc0;
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<std::uint16_t>(u >> 16);
}
inline float from_bf16(std::uint16_t h) {
  const std::uint32_t u = static_cast<std::uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Fresh randomness per run; the seed is printed so a failure can be replayed.
inline std::mt19937_64& rng() {
  static std::mt19937_64 g = [] {
    const std::uint64_t seed = std::random_device{}();
    std::printf("gpu test seed %llu\n", static_cast<unsigned long long>(seed));
    return std::mt19937_64(seed);
  }();
  return g;
}
inline std::vector<float> random_floats(std::size_t n, float scale = 1.f) {
  std::normal_distribution<float> d(0.f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng());
  return v;
}
// Random bf16 values, and the same values as f32 (what the reference computes with).
inline std::vector<std::uint16_t> random_bf16(std::size_t n, float scale, std::vector<float>& as_f32) {
  std::vector<std::uint16_t> v(n);
  as_f32.resize(n);
  std::normal_distribution<float> d(0.f, scale);
  for (std::size_t i = 0; i < n; ++i) {
    v[i] = to_bf16(d(rng()));
    as_f32[i] = from_bf16(v[i]);
  }
  return v;
}

// ||out - ref|| / ||ref||; NaN or Inf anywhere in `out` gives infinity.
template <class A, class B>
double rel_l2(const A& out, const B& ref) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < ref.size(); ++i) {
    const double o = static_cast<double>(out[i]);
    if (!std::isfinite(o)) return INFINITY;
    num += (o - ref[i]) * (o - ref[i]);
    den += static_cast<double>(ref[i]) * ref[i];
  }
  return std::sqrt(num / std::max(den, 1e-300));
}

template <class T>
class DeviceBuffer {
 public:
  explicit DeviceBuffer(std::size_t n) : n_(n) {
    if (cudaMalloc(&p_, std::max<std::size_t>(n, 1) * sizeof(T)) != cudaSuccess) p_ = nullptr;
    poison();
  }
  explicit DeviceBuffer(const std::vector<T>& v) : DeviceBuffer(v.size()) { upload(v); }
  ~DeviceBuffer() { cudaFree(p_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  T* get() const { return p_; }
  void upload(const std::vector<T>& v) { cudaMemcpy(p_, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice); }
  std::vector<T> download() const {
    std::vector<T> v(n_);
    cudaMemcpy(v.data(), p_, n_ * sizeof(T), cudaMemcpyDeviceToHost);
    return v;
  }
  // All bits set: NaN as f32 and as bf16, -1 as an integer.
  void poison() { cudaMemset(p_, 0xff, n_ * sizeof(T)); }

 private:
  T* p_ = nullptr;
  std::size_t n_ = 0;
};

}  // namespace telos::gpu_test
