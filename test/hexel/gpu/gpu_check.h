// Shared helpers for the Hexel GPU tests: skip (with the reason) where no sm_90 GPU is present,
// check every CUDA call, and seeded random bf16 data.
#pragma once
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#define CUDA_OK(expr)                                                          \
  do {                                                                         \
    cudaError_t err_ = (expr);                                                 \
    ASSERT_EQ(err_, cudaSuccess) << #expr << ": " << cudaGetErrorString(err_); \
  } while (0)

// Launch, then check both the launch and the kernel's completion.
#define LAUNCH_OK()                   \
  do {                                \
    CUDA_OK(cudaGetLastError());      \
    CUDA_OK(cudaDeviceSynchronize()); \
  } while (0)

// The binaries hold sm_90a machine code only, so anything but a compute capability 9.0 device
// is a skip with the reason, never a failure.
#define REQUIRE_SM90()                                                                          \
  do {                                                                                          \
    int count_ = 0;                                                                             \
    if (cudaGetDeviceCount(&count_) != cudaSuccess || count_ == 0)                              \
      GTEST_SKIP() << "no CUDA GPU on this machine";                                            \
    cudaDeviceProp prop_{};                                                                     \
    CUDA_OK(cudaGetDeviceProperties(&prop_, 0));                                                \
    if (prop_.major != 9 || prop_.minor != 0)                                                   \
      GTEST_SKIP() << "needs a compute capability 9.0 GPU (sm_90a code), found " << prop_.major \
                   << "." << prop_.minor;                                                       \
  } while (0)

inline uint16_t f32_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  u += 0x7FFFu + ((u >> 16) & 1u);  // round to nearest even
  return static_cast<uint16_t>(u >> 16);
}

inline float bf16_to_f32(uint16_t h) {
  uint32_t u = uint32_t{h} << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline float f16_to_f32(uint16_t h) {
  const uint32_t s = (h >> 15) & 1u, e = (h >> 10) & 0x1Fu, m = h & 0x3FFu;
  float v = e == 0 ? std::ldexp(float(m), -24) : std::ldexp(float(m | 0x400u), int(e) - 25);
  return s ? -v : v;
}

inline std::vector<uint16_t> random_bf16(size_t n, uint32_t seed, float lo = -1.f, float hi = 1.f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<uint16_t> v(n);
  for (auto& x : v) x = f32_to_bf16(dist(rng));
  return v;
}

// A device buffer that frees itself.
template <class T>
struct DeviceBuffer {
  T* ptr = nullptr;
  size_t count = 0;
  explicit DeviceBuffer(size_t n) : count(n) {
    if (cudaMalloc(&ptr, n * sizeof(T)) != cudaSuccess) ptr = nullptr;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() { cudaFree(ptr); }
  cudaError_t upload(const std::vector<T>& v) {
    return cudaMemcpy(ptr, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice);
  }
  std::vector<T> download() const {
    std::vector<T> v(count);
    cudaMemcpy(v.data(), ptr, count * sizeof(T), cudaMemcpyDeviceToHost);
    return v;
  }
};
