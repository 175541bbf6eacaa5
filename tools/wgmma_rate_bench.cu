// How fast one consumer warpgroup turns weight bytes already in shared memory into a one-row
// product, by wgmma form: whether the one-token decode layer's narrow tiles can consume weights
// faster than DRAM's share of an SM delivers them (figures in docs/performance.md).
// Each CTA (one per SM, 128 threads) holds a 32 KB weight region (rows of 64 K-values, 128B
// swizzle, as TMA writes them) and an A operand, and runs `steps` k16 wgmma steps over it in the
// decode layer's pattern (4 per 64-wide K block, one commit a block, wait_group<DEPTH>), then
// reports clock64 cycles a step and the weight bytes a step consumes (N · 32 B). Variants:
//   ss-nN-dD   A from shared memory (interleaved, 8 rows repeated: SBO 0, as the small GEMM's
//              M <= 8), B = N weight rows; wait_group<D> after each commit;
//   rs-nN      A from registers (row 0 real, the other rows zero), B as above;
//   ss-n16-x2  two accumulators over alternate K blocks (a different reduction order: shows what
//              independent chains would buy, not usable as is for batch invariance);
//   sw-n8      weights as the A operand (64 rows, 128B swizzle) and the activation as B (N = 8):
//              2 KB of weights a step.
// Build: nvcc -std=c++20 -O3 -gencode=arch=compute_90a,code=sm_90a -I hexel tools/wgmma_rate_bench.cu
//        -o wgmma-rate-bench   (no timing in tests: this is a benchmark, run on the H200).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <vector>

#include "hexel/wgmma.cuh"

using namespace hexel;

constexpr unsigned kRegion = 32768;  // weight bytes a CTA cycles through (in shared memory)

template <int N, int DEPTH, int FORM>  // FORM 0: ss, 1: rs, 2: ss two accumulators, 3: swapped
__global__ void __launch_bounds__(128, 1) rate(int steps, unsigned long long* cycles, float* sink) {
  extern __shared__ __align__(1024) unsigned char smem[];
  const unsigned base = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  // Weights: random-ish bf16 (small values, so the sums stay finite); A region after them.
  for (unsigned i = threadIdx.x; i < (kRegion + 4096) / 4; i += 128)
    reinterpret_cast<unsigned*>(smem)[i] = 0x3c003c00u ^ ((i * 2654435761u) & 0x00ff00ffu);
  __syncthreads();
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  __syncthreads();
  float d[N / 2], e[N / 2];
#pragma unroll
  for (int i = 0; i < N / 2; ++i) d[i] = e[i] = 0.f;
  uint32_t areg[4] = {0, 0, 0, 0};
  if (threadIdx.x < 4) areg[0] = areg[1] = areg[2] = areg[3] = 0x3c003c00u;
  // Weight rows of 128 bytes (64 K values), N rows a tile: a K block of 64 is N · 128 bytes; the
  // region holds kRegion / (N · 128) blocks, cycled.
  const unsigned block_bytes = (FORM == 3 ? 64 : N) * 128, blocks = kRegion / block_bytes;
  const unsigned a_base = base + kRegion;
  const unsigned long long t0 = clock64();
  for (int s = 0, kb = 0; s < steps; s += FORM == 2 ? 8 : 4, kb += FORM == 2 ? 2 : 1) {
    const unsigned w = base + (kb % (blocks - 1)) * block_bytes;
    const auto b = wgmma::kmajor_desc(w, Swizzle::B128);
    const auto a = wgmma::SmemDesc::make(a_base, Swizzle::None, 128, 0);
    wgmma::fence();
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
      if constexpr (FORM == 0) wgmma::mma_ss<N>(d, a.advanced(kk * 256), b.advanced(kk * 32), true);
      if constexpr (FORM == 1) wgmma::mma_rs<N>(d, areg, b.advanced(kk * 32), true);
      if constexpr (FORM == 2) {  // this block into d, the next into e (steps counted: 8)
        wgmma::mma_ss<N>(d, a.advanced(kk * 256), b.advanced(kk * 32), true);
        wgmma::mma_ss<N>(e, a.advanced(kk * 256), b.advanced(block_bytes + kk * 32), true);
      }
      if constexpr (FORM == 3)  // A = 64 weight rows (swizzled), B = the activation's 8 columns
        wgmma::mma_ss<N>(d, b.advanced(kk * 32), wgmma::SmemDesc::make(a_base + kk * 256, Swizzle::None, 128, 0), true);
    }
    wgmma::commit_group();
    wgmma::wait_group<DEPTH>();
  }
  wgmma::wait_group<0>();
  wgmma::fence_operand(d);
  wgmma::fence_operand(e);
  const unsigned long long t1 = clock64();
  float acc = 0.f;
#pragma unroll
  for (int i = 0; i < N / 2; ++i) acc += d[i] + e[i];
  if (threadIdx.x == 0) cycles[blockIdx.x] = t1 - t0;
  if (acc == 12345.f) sink[threadIdx.x] = acc;  // keeps the chain alive
}

template <int N, int DEPTH, int FORM>
void run(const char* name, int sms, unsigned long long* cycles, float* sink) {
  const int steps = 4096;
  auto kernel = rate<N, DEPTH, FORM>;
  const int smem = kRegion + 4096 + 1024;
  cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  kernel<<<sms, 128, smem>>>(steps, cycles, sink);  // warm
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  cudaEventRecord(a);
  kernel<<<sms, 128, smem>>>(steps, cycles, sink);
  cudaEventRecord(b);
  if (cudaEventSynchronize(b) != cudaSuccess) {
    std::printf("%-12s | launch failed: %s\n", name, cudaGetErrorString(cudaGetLastError()));
    return;
  }
  float ms = 0;
  cudaEventElapsedTime(&ms, a, b);
  std::vector<unsigned long long> c(sms);
  cudaMemcpy(c.data(), cycles, sizeof(unsigned long long) * sms, cudaMemcpyDeviceToHost);
  std::sort(c.begin(), c.end());
  const double cyc = static_cast<double>(c[sms / 2]) / steps;
  const double bytes = (FORM == 3 ? 64 : N) * 32.0;  // weight bytes a k16 step
  const double us = ms * 1e3;
  std::printf("%-12s | %6.1f cycles/step | %5.0f B/step | %6.1f B/cycle | %6.1f KB/us a SM (event time)\n", name,
              cyc, bytes, bytes / cyc, bytes * steps / us / 1e3);
}

int main() {
  int sms = 0;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  unsigned long long* cycles;
  float* sink;
  cudaMalloc(&cycles, sizeof(unsigned long long) * sms);
  cudaMalloc(&sink, 512);
  std::printf("wgmma rate, one warpgroup a SM, %d SMs; DRAM share a SM at 4.3 TB/s: %.1f KB/us\n", sms,
              4.3e6 / sms);
  std::printf("form         | cycles a k16 step | weight bytes | bytes a cycle | KB/us a SM\n");
  run<16, 1, 0>("ss-n16-d1", sms, cycles, sink);
  run<16, 3, 0>("ss-n16-d3", sms, cycles, sink);
  run<16, 0, 0>("ss-n16-d0", sms, cycles, sink);
  run<16, 1, 1>("rs-n16", sms, cycles, sink);
  run<16, 1, 2>("ss-n16-x2", sms, cycles, sink);
  run<32, 1, 0>("ss-n32-d1", sms, cycles, sink);
  run<32, 1, 1>("rs-n32", sms, cycles, sink);
  run<64, 1, 0>("ss-n64-d1", sms, cycles, sink);
  run<64, 1, 1>("rs-n64", sms, cycles, sink);
  run<8, 1, 3>("sw-n8", sms, cycles, sink);
  return 0;
}
