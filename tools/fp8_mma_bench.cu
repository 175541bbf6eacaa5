// Whether the one-token W8A8 layer could run its e4m3 products on the warp-level mma
// (mma.sync m16n8k32) instead of wgmma, and what that would buy: two measurements in one binary.
//
// bits: per CTA, random e4m3 activation rows A [64 x 128] and weight rows W [64 x 128] in shared
//   memory (128B swizzle, K-major, as TMA writes them); each output y[m][n] = sum_k A[m][k] W[n][k]
//   as the W8A8 kernels form a K block's partial (a chain of four k32 steps from zero) by
//     wgmma     m64n64k32, A the activations, B the weights (the layer's roles);
//     wgmma-sw  m64n64k32, A the weights, B the activations;
//     mma       m16n8k32, A the weights (16 rows a warp), B the activations (8 a column block);
//     mma-act   m16n8k32, A the activations, B the weights.
//   Each is compared with the f64 sum (|y - ref| <= 2^-9 sum |products|: the layout is right) and
//   bit for bit with wgmma's. Operand bytes "wide" (every finite e4m3 byte, subnormals and zeros
//   included) and "quantized" (rows of normal values scaled so that each 128-block's amax maps
//   to 448, as quantize_rows_e4m3 does).
// rate: one CTA of 128 threads an SM consumes 8 KB weight slots already in shared memory the
//   way the layer's K loop does (kernels/decode_layer_w8a8.cuh), then with the warp-level mma:
//     wgmma-bnN   the layer's loop for an N-row tile: a slot is 64 / N K blocks, each a chain of
//                 four m64nNk32 into its own partials, one commit, wait_group 0, the promotions;
//     wgmma-sw    m64n8k32 with the 64 weight rows as A and the token as B (N = 8);
//     mma-bn64    each warp 16 of a 64-row tile's rows: four ldmatrix.x4 + mma m16n8k32 a slot
//                 (one K block), the promotion in registers;
//     mma-bn32    a 32-row tile (two K blocks a slot): warps 0-1 block 0, warps 2-3 block 1, whose
//                 partials reach warps 0-1 through shared memory (one 128-thread barrier a slot)
//                 so that the promotions stay in K order.
//   Reports clock cycles a slot (median CTA) and KB/us a SM against DRAM's share at 4.2 TB/s.
// Build: nvcc -std=c++20 -O3 -gencode=arch=compute_90a,code=sm_90a -I hexel tools/fp8_mma_bench.cu
//        -o fp8-mma-bench   (a benchmark and a hardware probe, run on the GPU machine; no test
//        times anything).
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "hexel/matrix_ldst.cuh"
#include "hexel/mma.cuh"
#include "hexel/wgmma.cuh"

using namespace hexel;

namespace {

constexpr unsigned kRow = 128;  // bytes a row: one K block of e4m3

// Byte (r, k) of a [rows x 128] e4m3 operand in the 128B swizzle: 16-byte chunk k / 16 of row r
// at chunk (k / 16) ^ (r % 8).
__host__ __device__ constexpr unsigned swz(unsigned r, unsigned k) {
  return r * kRow + (((k / 16) ^ (r % 8)) * 16) + k % 16;
}

// Rows [r0, r0 + 16) x bytes [32 kk, 32 kk + 32) of a swizzled operand at `base` as an mma A
// fragment (or, for 8 rows, lanes 0-15's addresses, a B fragment by ldmatrix.x2).
__device__ __forceinline__ void frag_a(uint32_t (&a)[4], unsigned base, unsigned r0, unsigned kk) {
  const unsigned l = threadIdx.x % 32, q = l / 8;
  const unsigned r = r0 + (q & 1) * 8 + l % 8;
  ldmatrix<4>(a, base + swz(r, 32 * kk + 16 * (q >> 1)));
}
__device__ __forceinline__ void frag_b(uint32_t (&b)[2], unsigned base, unsigned r0, unsigned kk) {
  const unsigned l = threadIdx.x % 32, q = (l / 8) & 1;
  ldmatrix<2>(b, base + swz(r0 + l % 8, 32 * kk + 16 * q));
}

// mma chains of four k32 steps from -0 (so that D = A·B exactly as wgmma's scale-d 0 gives it):
// rows of X (16 a warp) against column blocks of Y (8 rows each), written as out[x_row][y_row].
__device__ void mma_rows(unsigned x, unsigned y, float* out) {
  const unsigned w = threadIdx.x / 32, l = threadIdx.x % 32, g = l / 4, c = l % 4;
  for (unsigned nb = 0; nb < 8; ++nb) {
    float d[4] = {-0.f, -0.f, -0.f, -0.f};
    for (unsigned kk = 0; kk < 4; ++kk) {
      uint32_t a[4], b[2];
      frag_a(a, x, 16 * w, kk);
      frag_b(b, y, 8 * nb, kk);
      mma_m16n8k32_e4m3(d, a, b[0], b[1]);
    }
    const unsigned r = 16 * w + g, col = 8 * nb + 2 * c;
    out[r * 64 + col] = d[0], out[r * 64 + col + 1] = d[1];
    out[(r + 8) * 64 + col] = d[2], out[(r + 8) * 64 + col + 1] = d[3];
  }
}

// wgmma m64n64k32 x 4 from zero, A = X rows, B = Y rows: out[x_row][y_row].
__device__ void wgmma_rows(unsigned x, unsigned y, float* out) {
  const unsigned w = threadIdx.x / 32, l = threadIdx.x % 32, g = l / 4, c = l % 4;
  float d[32];
  const auto a = wgmma::kmajor_desc(x, Swizzle::B128), b = wgmma::kmajor_desc(y, Swizzle::B128);
  wgmma::fence();
#pragma unroll
  for (unsigned kk = 0; kk < 4; ++kk)
    wgmma::mma_ss<64, wgmma::AbType::E4M3>(d, a.advanced(32 * kk), b.advanced(32 * kk), kk > 0);
  wgmma::commit_group();
  wgmma::wait_group<0>();
  wgmma::fence_operand(d);
  for (unsigned j = 0; j < 8; ++j) {
    const unsigned r = 16 * w + g, col = 8 * j + 2 * c;
    out[r * 64 + col] = d[4 * j], out[r * 64 + col + 1] = d[4 * j + 1];
    out[(r + 8) * 64 + col] = d[4 * j + 2], out[(r + 8) * 64 + col + 1] = d[4 * j + 3];
  }
}

// out: four [64][64] arrays a CTA: wgmma, wgmma-sw (transposed), mma (transposed), mma-act.
__global__ void __launch_bounds__(128, 1)
    bits(const unsigned char* act, const unsigned char* wt, float* out) {
  extern __shared__ unsigned char smem_raw[];
  const unsigned raw = static_cast<unsigned>(__cvta_generic_to_shared(smem_raw));
  unsigned char* smem = smem_raw + (((raw + 1023) & ~1023u) - raw);  // the 128B swizzle's 1024
  const unsigned char* a_g = act + blockIdx.x * 64 * kRow;
  const unsigned char* w_g = wt + blockIdx.x * 64 * kRow;
  for (unsigned i = threadIdx.x; i < 64 * kRow; i += 128) {
    smem[swz(i / kRow, i % kRow)] = a_g[i];
    smem[64 * kRow + swz(i / kRow, i % kRow)] = w_g[i];
  }
  __syncthreads();
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  __syncthreads();
  const unsigned a_s = static_cast<unsigned>(__cvta_generic_to_shared(smem)), w_s = a_s + 64 * kRow;
  float* o = out + blockIdx.x * 4 * 4096;
  wgmma_rows(a_s, w_s, o);
  wgmma_rows(w_s, a_s, o + 4096);
  mma_rows(w_s, a_s, o + 2 * 4096);
  mma_rows(a_s, w_s, o + 3 * 4096);
}

float e4m3_value(unsigned char b) {
  const int e = (b >> 3) & 15, m = b & 7;
  const float v = e == 0 ? std::ldexp(float(m) / 8.f, -6) : std::ldexp(1.f + float(m) / 8.f, e - 7);
  return b & 0x80 ? -v : v;
}

unsigned char e4m3_of(float x) {  // nearest e4m3 byte (ties to the even byte), saturated
  const float m = std::fabs(x);
  int lo = 0;  // the largest positive byte whose value is <= m (bytes 0..0x7e ascend)
  for (int step = 64; step > 0; step /= 2)
    if (lo + step <= 0x7e && e4m3_value(static_cast<unsigned char>(lo + step)) <= m) lo += step;
  int b = lo;
  if (lo < 0x7e) {
    const float dl = m - e4m3_value(static_cast<unsigned char>(lo)),
                dh = e4m3_value(static_cast<unsigned char>(lo + 1)) - m;
    if (dh < dl || (dh == dl && (lo & 1))) b = lo + 1;
  }
  return static_cast<unsigned char>(b | (x < 0 ? 0x80 : 0));
}

void run_bits(int ctas) {
  const std::size_t n = static_cast<std::size_t>(ctas) * 64 * kRow;
  unsigned char *da, *dw;
  float* dout;
  cudaMalloc(&da, n);
  cudaMalloc(&dw, n);
  cudaMalloc(&dout, static_cast<std::size_t>(ctas) * 4 * 4096 * 4);
  cudaFuncSetAttribute(bits, cudaFuncAttributeMaxDynamicSharedMemorySize, 2 * 64 * kRow + 1024);
  std::mt19937 rng(2026);
  const char* forms[4] = {"wgmma", "wgmma-sw", "mma", "mma-act"};
  for (int dist = 0; dist < 2; ++dist) {
    std::vector<unsigned char> a(n), w(n);
    if (dist == 0) {
      for (auto* v : {&a, &w})
        for (auto& b : *v) do
            b = static_cast<unsigned char>(rng());
          while ((b & 0x7f) == 0x7f);
    } else {
      std::normal_distribution<float> nd;
      for (auto* v : {&a, &w})
        for (std::size_t r = 0; r < n / kRow; ++r) {
          float x[kRow], amax = 0;
          const float spread = std::ldexp(1.f, static_cast<int>(rng() % 12) - 6);
          for (auto& e : x) e = nd(rng) * spread, amax = std::max(amax, std::fabs(e));
          for (unsigned k = 0; k < kRow; ++k) (*v)[r * kRow + k] = e4m3_of(x[k] / (amax / 448.f));
        }
    }
    cudaMemset(dout, 0xff, static_cast<std::size_t>(ctas) * 4 * 4096 * 4);  // NaN poison
    cudaMemcpy(da, a.data(), n, cudaMemcpyHostToDevice);
    cudaMemcpy(dw, w.data(), n, cudaMemcpyHostToDevice);
    bits<<<ctas, 128, 2 * 64 * kRow + 1024>>>(da, dw, dout);
    if (cudaDeviceSynchronize() != cudaSuccess) {
      std::printf("bits: launch failed: %s\n", cudaGetErrorString(cudaGetLastError()));
      return;
    }
    std::vector<float> o(static_cast<std::size_t>(ctas) * 4 * 4096);
    cudaMemcpy(o.data(), dout, o.size() * 4, cudaMemcpyDeviceToHost);
    long long off_ref[4] = {}, diff_bits[4] = {}, outputs = 0;
    double worst[4] = {};
    for (int cta = 0; cta < ctas; ++cta)
      for (int m = 0; m < 64; ++m)
        for (int j = 0; j < 64; ++j) {
          double ref = 0, mag = 0;
          for (unsigned k = 0; k < kRow; ++k) {
            const double p = double(e4m3_value(a[(cta * 64 + m) * kRow + k])) *
                             e4m3_value(w[(cta * 64 + j) * kRow + k]);
            ref += p, mag += std::fabs(p);
          }
          const float* base = &o[static_cast<std::size_t>(cta) * 4 * 4096];
          const float got[4] = {base[m * 64 + j], base[4096 + j * 64 + m],
                                base[2 * 4096 + j * 64 + m], base[3 * 4096 + m * 64 + j]};
          ++outputs;
          for (int f = 0; f < 4; ++f) {
            const double err = std::fabs(got[f] - ref);
            if (!(err <= std::ldexp(mag, -9) + 1e-30)) ++off_ref[f];
            if (mag > 0) worst[f] = std::max(worst[f], err / mag);
            unsigned u0, u1;
            std::memcpy(&u0, &got[0], 4), std::memcpy(&u1, &got[f], 4);
            if (u0 != u1) ++diff_bits[f];
          }
        }
    std::printf("bits, %s operands, %lld outputs (chains of four k32 from zero)\n",
                dist == 0 ? "wide" : "quantized", outputs);
    std::printf("form      | beyond 2^-9 of sum|p| | worst |y-ref|/sum|p| | bits != wgmma's\n");
    for (int f = 0; f < 4; ++f)
      std::printf("%-9s | %21lld | %20.3g | %lld\n", forms[f], off_ref[f], worst[f], diff_bits[f]);
  }
  cudaFree(da), cudaFree(dw), cudaFree(dout);
}

// ---- rate ----------------------------------------------------------------------------------

constexpr unsigned kRegion = 32768, kSlot = 8192, kK = 4096;  // 4 slots; the token's K

// FORM 0: wgmma, the layer's loop for BN-row tiles; 1: wgmma-sw (BN 64); 2: mma (BN 64); 3: mma
// (BN 32, two K blocks a slot, partials through shared memory).
template <int FORM, int BN>
__global__ void __launch_bounds__(128, 1) rate(int slots, unsigned long long* cycles, float* sink) {
  extern __shared__ unsigned char smem_raw[];
  const unsigned raw = static_cast<unsigned>(__cvta_generic_to_shared(smem_raw));
  unsigned char* smem = smem_raw + (((raw + 1023) & ~1023u) - raw);  // the 128B swizzle's 1024
  const unsigned base = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  const unsigned q = base + kRegion;  // the token's e4m3 row (and the bytes after it)
  float* xbuf = reinterpret_cast<float*>(smem + kRegion + kK + 1024);  // mma-bn32's partials
  for (unsigned i = threadIdx.x; i < (kRegion + kK + 1024) / 4; i += 128)
    reinterpret_cast<unsigned*>(smem)[i] = 0x38383838u ^ ((i * 2654435761u) & 0x07070707u);
  __syncthreads();
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  __syncthreads();
  const unsigned w = threadIdx.x / 32, l = threadIdx.x % 32, c = l % 4;
  constexpr unsigned kAcc = FORM == 0 ? BN / 2 : 4;
  float acc[kAcc];
#pragma unroll
  for (unsigned i = 0; i < kAcc; ++i) acc[i] = 0.f;
  const float sc = 1.f / 4096.f;  // a scale product
  const unsigned long long t0 = clock64();
  for (int s = 0; s < slots; ++s) {
    const unsigned slot = base + (s % 4) * kSlot;
    if constexpr (FORM == 0) {
      constexpr unsigned kBlocks = 64 / BN;
      float part[kBlocks][BN / 2];
      wgmma::fence();
#pragma unroll
      for (unsigned j = 0; j < kBlocks; ++j) {
        const unsigned kb = (s * kBlocks + j) % (kK / 128);
        const auto a = wgmma::SmemDesc::make(q + kb * 128, Swizzle::None, 16, 0);
        const auto b = wgmma::kmajor_desc(slot + j * BN * 128, Swizzle::B128);
#pragma unroll
        for (unsigned kk = 0; kk < 4; ++kk)
          wgmma::mma_ss<BN, wgmma::AbType::E4M3>(part[j], a.advanced(32 * kk), b.advanced(32 * kk),
                                                 kk > 0);
      }
      wgmma::commit_group();
      wgmma::wait_group<0>();
#pragma unroll
      for (unsigned j = 0; j < kBlocks; ++j) {
        wgmma::fence_operand(part[j]);
#pragma unroll
        for (unsigned i = 0; i < BN / 2; ++i) acc[i] = __fmaf_rn(part[j][i], sc, acc[i]);
        wgmma::fence_operand(part[j]);
      }
    } else if constexpr (FORM == 1) {
      float part[4];
      const unsigned kb = s % (kK / 128);
      const auto a = wgmma::kmajor_desc(slot, Swizzle::B128);
      const auto b = wgmma::SmemDesc::make(q + kb * 128, Swizzle::None, 16, 0);
      wgmma::fence();
#pragma unroll
      for (unsigned kk = 0; kk < 4; ++kk)
        wgmma::mma_ss<8, wgmma::AbType::E4M3>(part, a.advanced(32 * kk), b.advanced(32 * kk),
                                              kk > 0);
      wgmma::commit_group();
      wgmma::wait_group<0>();
      wgmma::fence_operand(part);
#pragma unroll
      for (unsigned i = 0; i < 4; ++i) acc[i] = __fmaf_rn(part[i], sc, acc[i]);
      wgmma::fence_operand(part);
    } else {
      // mma: this warp's 16 rows of K block `blk` of the slot (BN 64: one block, warp w's rows
      // 16w; BN 32: block w / 2, rows 16 (w % 2)).
      const unsigned blk = FORM == 2 ? 0 : w / 2, r0 = FORM == 2 ? 16 * w : 16 * (w % 2);
      const unsigned kb = (s * (FORM == 2 ? 1 : 2) + blk) % (kK / 128);
      const unsigned rows = slot + blk * BN * 128;
      float part[4] = {-0.f, -0.f, -0.f, -0.f};
#pragma unroll
      for (unsigned kk = 0; kk < 4; ++kk) {
        uint32_t a[4];
        frag_a(a, rows, r0, kk);
        unsigned b0, b1;  // the token's bytes 4c .. of the step, in every column
        asm volatile("ld.shared.u32 %0, [%1];" : "=r"(b0) : "r"(q + kb * 128 + 32 * kk + 4 * c));
        asm volatile("ld.shared.u32 %0, [%1];"
                     : "=r"(b1)
                     : "r"(q + kb * 128 + 32 * kk + 16 + 4 * c));
        mma_m16n8k32_e4m3(part, a, b0, b1);
      }
      if constexpr (FORM == 3) {
        float* x = xbuf + (s & 1) * 256 + (w % 2) * 128 + 4 * l;
        if (w >= 2) *reinterpret_cast<float4*>(x) = make_float4(part[0], part[1], part[2], part[3]);
        asm volatile("bar.sync 1, 128;" ::: "memory");
        if (w < 2) {
#pragma unroll
          for (unsigned i = 0; i < 4; ++i) acc[i] = __fmaf_rn(part[i], sc, acc[i]);
          const float4 p = *reinterpret_cast<const float4*>(x);
          acc[0] = __fmaf_rn(p.x, sc, acc[0]), acc[1] = __fmaf_rn(p.y, sc, acc[1]);
          acc[2] = __fmaf_rn(p.z, sc, acc[2]), acc[3] = __fmaf_rn(p.w, sc, acc[3]);
        }
      } else {
#pragma unroll
        for (unsigned i = 0; i < 4; ++i) acc[i] = __fmaf_rn(part[i], sc, acc[i]);
      }
    }
  }
  const unsigned long long t1 = clock64();
  float sum = 0.f;
#pragma unroll
  for (unsigned i = 0; i < kAcc; ++i) sum += acc[i];
  if (threadIdx.x == 0) cycles[blockIdx.x] = t1 - t0;
  if (sum == 12345.f) sink[threadIdx.x] = sum;  // keeps the chains alive
}

template <int FORM, int BN>
void run_rate(const char* name, int sms, unsigned long long* cycles, float* sink) {
  const int slots = 8192;
  auto kernel = rate<FORM, BN>;
  const int smem = kRegion + kK + 1024 + 2048 + 1024;
  cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  kernel<<<sms, 128, smem>>>(slots, cycles, sink);  // warm
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  cudaEventRecord(a);
  kernel<<<sms, 128, smem>>>(slots, cycles, sink);
  cudaEventRecord(b);
  if (cudaEventSynchronize(b) != cudaSuccess) {
    std::printf("%-11s | launch failed: %s\n", name, cudaGetErrorString(cudaGetLastError()));
    return;
  }
  float ms = 0;
  cudaEventElapsedTime(&ms, a, b);
  std::vector<unsigned long long> cyc(sms);
  cudaMemcpy(cyc.data(), cycles, sizeof(unsigned long long) * sms, cudaMemcpyDeviceToHost);
  std::sort(cyc.begin(), cyc.end());
  std::printf("%-11s | %8.1f | %8.1f\n", name, static_cast<double>(cyc[sms / 2]) / slots,
              static_cast<double>(kSlot) * slots / (ms * 1e3) / 1e3);
}

}  // namespace

int main(int argc, char** argv) {
  int sms = 0;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  run_bits(argc > 1 ? std::atoi(argv[1]) : 256);
  unsigned long long* cycles;
  float* sink;
  cudaMalloc(&cycles, sizeof(unsigned long long) * sms);
  cudaMalloc(&sink, 512);
  std::printf(
      "\nrate: 8 KB e4m3 weight slots from shared memory, one CTA of 128 threads an SM, "
      "%d SMs; DRAM's share a SM at 4.2 TB/s: %.1f KB/us\n",
      sms, 4.2e6 / sms);
  std::printf("form        | cycles a slot | KB/us a SM (event time)\n");
  run_rate<0, 16>("wgmma-bn16", sms, cycles, sink);
  run_rate<0, 32>("wgmma-bn32", sms, cycles, sink);
  run_rate<0, 64>("wgmma-bn64", sms, cycles, sink);
  run_rate<1, 64>("wgmma-sw", sms, cycles, sink);
  run_rate<2, 64>("mma-bn64", sms, cycles, sink);
  run_rate<3, 32>("mma-bn32", sms, cycles, sink);
  return 0;
}
