#pragma once
// What the GPU tests share: a skip when there is no CUDA device, device buffers, bf16 on the host,
// fresh random inputs, relative L2 error.
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

inline const std::string& gpu_missing_reason() {
  static const std::string reason = [] {
    int n = 0;
    const cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) return std::string("no usable CUDA driver or device (") + cudaGetErrorString(e) + ")";
    if (n == 0) return std::string("no CUDA device");
    cudaDeviceProp p{};
    cudaGetDeviceProperties(&p, 0);
    if (p.major != 9 || p.minor != 0) return std::string("GPU 0 is not sm_90 (Hopper)");
    return std::string();
  }();
  return reason;
}

#define TELOS_SKIP_WITHOUT_GPU()                                                        \
  do {                                                                                  \
    if (!::telos::gpu_test::gpu_missing_reason().empty())                               \
      GTEST_SKIP() << "skipped: " << ::telos::gpu_test::gpu_missing_reason();           \
  } while (0)

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
