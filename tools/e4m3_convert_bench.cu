// e4m3 pairs turned into the bf16x2 MMA operand, by form: whether the e4m3 KV cache's decode
// attention is bound by its conversions, and whether a form on the integer and half-precision
// pipes gives the same bits faster (figures in docs/performance.md).
//   cvt      the form KvE4m3 used: cvt.rn.f16x2.e4m3x2, two cvt.f32.f16, two f32 products,
//            cvt.rn.bf16x2.f32 (four conversions a pair);
//   int      the bytes placed as bf16 bits of q · 2^-120 (byte permute, shift, masks), then one
//            fma.rn.bf16x2 by bf16(scale · 2^120) (exact where that is a bf16);
//   int-nan  int, with the NaN codes (0x7f, 0xff) turned into NaN as cvt does;
//   none     the loop's own work (the input's update, the outputs' xor): subtracted.
// "check" compares int-nan with cvt on all 65536 pairs at several scales, bit for bit (NaN
// against NaN whatever its bits).
// Build: nvcc -std=c++20 -O3 -gencode=arch=compute_90a,code=sm_90a -I hexel
//        tools/e4m3_convert_bench.cu -o e4m3-convert-bench
#include <cuda_runtime.h>

#include <cstdio>
#include <cstring>

#include "hexel/math.cuh"

namespace {

__device__ __forceinline__ unsigned by_cvt(unsigned pair, float s) {
  const unsigned h = hexel::cvt_f16x2_e4m3x2(pair);
  return hexel::pack_bf16x2(__fmul_rn(hexel::cvt_f32_f16(h), s), __fmul_rn(hexel::cvt_f32_f16(h >> 16), s));
}

// The int forms: hexel::e4m3x2_as_bf16x2_scaled, or without its NaN codes' two operations.
template <int HALF, bool KEEP_NAN>
__device__ __forceinline__ unsigned by_int(unsigned w, unsigned s2) {
  unsigned a;
  if constexpr (KEEP_NAN) {
    a = hexel::e4m3x2_as_bf16x2_scaled<HALF>(w);
  } else {
    const unsigned v = hexel::prmt(w, 0, HALF ? 0x3424u : 0x1404u);
    a = ((v >> 4) & 0x07f007f0u) | (v & 0x80008000u);
  }
  return hexel::fma_bf16x2(a, s2, 0x80008000u);
}

template <int FORM>
__device__ __forceinline__ void convert_word(unsigned w, unsigned s2, float s, unsigned& acc) {
  if constexpr (FORM == 0) acc ^= by_cvt(w, s) ^ by_cvt(w >> 16, s);
  if constexpr (FORM == 1) acc ^= by_int<0, false>(w, s2) ^ by_int<1, false>(w, s2);
  if constexpr (FORM == 2) acc ^= by_int<0, true>(w, s2) ^ by_int<1, true>(w, s2);
  if constexpr (FORM == 3) acc ^= w;
}

template <int FORM>
__global__ void __launch_bounds__(256) rate(int iters, unsigned s2, float s, unsigned long long* cycles,
                                            unsigned* sink) {
  unsigned w[8], acc = 0;
#pragma unroll
  for (int i = 0; i < 8; ++i) w[i] = (threadIdx.x * 2654435761u) ^ (i * 0x9e3779b9u);
  __syncthreads();
  const unsigned long long t0 = clock64();
  for (int it = 0; it < iters; ++it)
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      convert_word<FORM>(w[i], s2, s, acc);
      w[i] += 0x01030507u;
    }
  __syncthreads();
  const unsigned long long t1 = clock64();
  if (threadIdx.x == 0) cycles[blockIdx.x] = t1 - t0;
  sink[blockIdx.x * blockDim.x + threadIdx.x] = acc;
}

// Pair p (its two bytes) at scale s: the cvt form against int-nan; one flag a mismatch.
__global__ void check(float s, unsigned s2, unsigned* bad) {
  const unsigned p = blockIdx.x * blockDim.x + threadIdx.x;
  const unsigned want = by_cvt(p, s), got = by_int<0, true>(p, s2);
  for (int h = 0; h < 2; ++h) {
    const unsigned a = want >> (16 * h) & 0xffff, b = got >> (16 * h) & 0xffff;
    const bool a_nan = (a & 0x7f80) == 0x7f80 && (a & 0x7f), b_nan = (b & 0x7f80) == 0x7f80 && (b & 0x7f);
    if (a_nan != b_nan || (!a_nan && a != b)) atomicAdd(bad, 1u);
  }
}

unsigned bf16_bits(float f) {  // f is a bf16 value here: its top half
  unsigned u;
  std::memcpy(&u, &f, 4);
  return u >> 16;
}

}  // namespace

int main() {
  int sms = 0;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  unsigned* bad;
  cudaMalloc(&bad, 4);
  const float scales[] = {1.f, 0.5f, 2.f, 1.5f, 3.f, 0.0078125f, 0.3125f};
  int failures = 0;
  for (float s : scales) {
    const unsigned b = bf16_bits(s * 0x1p120f), s2 = b | b << 16;
    cudaMemset(bad, 0, 4);
    check<<<256, 256>>>(s, s2, bad);
    unsigned n = 0;
    cudaMemcpy(&n, bad, 4, cudaMemcpyDeviceToHost);
    printf("check scale %g: %u of 131072 values differ\n", s, n);
    failures += n != 0;
  }
  unsigned long long* cycles;
  unsigned* sink;
  const int threads = 256, iters = 4096;
  cudaMalloc(&cycles, sms * 8);
  cudaMalloc(&sink, sms * threads * 4);
  const unsigned s2 = 0x7b807b80u;  // bf16(2^120) twice
  const char* names[] = {"cvt", "int", "int-nan", "none"};
  double per_pair[4] = {};
  for (int form = 0; form < 4; ++form) {
    double best = 1e30;
    for (int rep = 0; rep < 5; ++rep) {
      if (form == 0) rate<0><<<sms, threads>>>(iters, s2, 1.f, cycles, sink);
      if (form == 1) rate<1><<<sms, threads>>>(iters, s2, 1.f, cycles, sink);
      if (form == 2) rate<2><<<sms, threads>>>(iters, s2, 1.f, cycles, sink);
      if (form == 3) rate<3><<<sms, threads>>>(iters, s2, 1.f, cycles, sink);
      unsigned long long c[1024];
      cudaMemcpy(c, cycles, sms * 8, cudaMemcpyDeviceToHost);
      double mean = 0;
      for (int i = 0; i < sms; ++i) mean += c[i];
      mean /= sms;
      if (rep > 0 && mean < best) best = mean;
    }
    per_pair[form] = best / (double(threads) * iters * 16);  // SM cycles a pair
  }
  printf("%-8s %12s %14s %16s\n", "form", "cycles/pair", "net of none", "pairs/clk an SM");
  for (int form = 0; form < 4; ++form) {
    const double net = per_pair[form] - per_pair[3];
    printf("%-8s %12.3f %14.3f %16.1f\n", names[form], per_pair[form], net, form == 3 ? 0.0 : 1.0 / net);
  }
  const cudaError_t e = cudaDeviceSynchronize();
  if (e != cudaSuccess) {
    printf("CUDA error: %s\n", cudaGetErrorString(e));
    return 2;
  }
  return failures ? 1 : 0;
}
