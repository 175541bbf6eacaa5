// How fast one CTA an SM streams a weight matrix through a ring of shared memory, by where the
// bytes of a ring slot lie in global memory and how they are copied: the question behind the
// persistent decode layer's stream, which stays under the copy rate at 132 CTAs whatever its box
// form (`telos-kernel-bench --stream`), where a plain-load kernel reading contiguous slices comes
// near it (`--read-floor`; figures in docs/performance.md). The layer's weights are
// row-major [N, K]: a ring slot of a 32-row tile is 32 rows x 256 bytes, rows K * 2 bytes apart, so
// 132 CTAs keep ~4000 short runs open at once. Packed forms put a slot's bytes together.
//
// Every form reads the same N x K bf16 buffer once (the 8B's gate/up: 28672 x 4096, 235 MB, far
// more than L2), in 32-row tiles (tile t is CTA t mod G's), K in 8 KB slots of two 64-column K
// blocks (or 16 KB slots of four), a producer thread filling a ring of 24 x 8 KB (12 x 16 KB) and
// four consumer warps only releasing each slot once it lands (no math: the memory side alone).
// The forms differ only in which addresses make up a slot and how they are copied:
//   2d       row-major, two 2D boxes (32 rows x 64 columns, 128B swizzle) a slot: the plan's form;
//   kview    row-major, one box of the K-block view (hexel::encode_k_blocks);
//   g8       8-row groups packed [N / 8][K / 64][8][64] (1 KB runs), one rank-4 box a slot;
//   tile     tile-major [N / 32][K / 64][32][64] (a slot is 8 KB contiguous), one 2D box a slot;
//   bulk     tile-major, one 8 KB cp.async.bulk a slot (no tensor map, no swizzle);
//   tile16   tile-major, 16 KB slots (one box of 128 rows of 128 bytes);
//   bulk16   tile-major, 16 KB slots by cp.async.bulk;
//   ld       plain 16-byte loads, 8 in flight a thread, 512 threads, a contiguous slice a CTA.
// The packed forms address the same buffer with other strides: for bandwidth only the addresses
// matter, so nothing is repacked. The ceiling: a device-to-device copy of 1 GiB in the same
// process ((read + write bytes) / time). Medians of 9 launches after 2, forms interleaved over
// three rounds (so every form sees the same clocks).
// Build: nvcc -std=c++20 -O3 -gencode=arch=compute_90a,code=sm_90a -I hexel
// tools/stream_form_bench.cu
//        -o stream-form-bench   (a benchmark, run on the H200; tests never time anything).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "hexel/mbarrier.cuh"
#include "hexel/tensor_map_encode.h"
#include "hexel/tma.cuh"

using namespace hexel;

constexpr unsigned kN = 28672, kK = 4096, kBn = 32, kTiles = kN / kBn;
constexpr unsigned kRingBytes = 24 * 8192;

enum Form { F2d, FKview, FG8, FTile, FBulk, FTile16, FBulk16, FLd, kForms };
const char* const kFormNames[kForms] = {"2d",   "kview",  "g8",     "tile",
                                        "bulk", "tile16", "bulk16", "ld"};

#define CHECK(x)                                                                       \
  do {                                                                                 \
    cudaError_t e_ = (x);                                                              \
    if (e_ != cudaSuccess) {                                                           \
      std::fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, cudaGetErrorString(e_)); \
      std::exit(1);                                                                    \
    }                                                                                  \
  } while (0)

template <int FORM>
__global__ void __launch_bounds__(160, 1)
    stream(const __grid_constant__ TensorMap map, const char* w, unsigned tiles) {
  constexpr unsigned kSlot = FORM == FTile16 || FORM == FBulk16 ? 16384 : 8192;
  constexpr unsigned kStages = kRingBytes / kSlot, kBlocksPerSlot = kSlot / (kBn * 128);
  constexpr unsigned kSlotsPerTile = kK / 64 / kBlocksPerSlot;
  extern __shared__ __align__(1024) unsigned char smem[];
  const unsigned base = (static_cast<unsigned>(__cvta_generic_to_shared(smem)) + 1023u) & ~1023u;
  const unsigned full = base + kRingBytes, empty = full + 8 * kStages;
  if (threadIdx.x == 0) {
    for (unsigned s = 0; s < kStages; ++s) {
      mbarrier::init(full + 8 * s, 1);
      mbarrier::init(empty + 8 * s, 4);
    }
    mbarrier::fence_init();
  }
  __syncthreads();
  mbarrier::StageRing<kStages> ring;
  if (threadIdx.x >= 128) {
    if (threadIdx.x != 128) return;
    for (unsigned t = blockIdx.x; t < tiles; t += gridDim.x)
      for (unsigned sl = 0; sl < kSlotsPerTile; ++sl) {
        const unsigned slot = base + ring.index * kSlot, bar = full + 8 * ring.index;
        const unsigned kb = sl * kBlocksPerSlot;  // first K block of the slot
        mbarrier::wait_parity(empty + 8 * ring.index, ring.phase ^ 1u);
        mbarrier::arrive_expect_tx(bar, kSlot);
        if constexpr (FORM == F2d) {
          for (unsigned j = 0; j < kBlocksPerSlot; ++j)
            tma::load(slot + j * kBn * 128, &map, bar, (kb + j) * 64, t * kBn);
        } else if constexpr (FORM == FKview) {
          tma::load(slot, &map, bar, 0u, t * kBn, kb);
        } else if constexpr (FORM == FG8) {
          tma::load(slot, &map, bar, 0u, 0u, t * kBn / 8, kb);
        } else if constexpr (FORM == FTile || FORM == FTile16) {
          tma::load(slot, &map, bar, 0u, (t * (kK / 64) + kb) * kBn);
        } else {
          tma::copy_g2s(slot, w + (static_cast<size_t>(t) * (kK / 64) + kb) * kBn * 128, kSlot,
                        bar);
        }
        ring.advance();
      }
    return;
  }
  // Consumers: each warp's lane 0 waits for every slot and releases it.
  if (threadIdx.x % 32 != 0) return;
  for (unsigned t = blockIdx.x; t < tiles; t += gridDim.x)
    for (unsigned sl = 0; sl < kSlotsPerTile; ++sl) {
      mbarrier::wait_parity(full + 8 * ring.index, ring.phase);
      mbarrier::arrive(empty + 8 * ring.index);
      ring.advance();
    }
}

// The read floor's form: a contiguous slice a CTA, 16-byte loads, 8 in flight a thread.
__global__ void __launch_bounds__(512, 1) read_plain(const uint4* w, size_t n16, unsigned* sink) {
  const size_t per = (n16 + gridDim.x - 1) / gridDim.x, lo = blockIdx.x * per,
               hi = min(n16, lo + per);
  uint4 acc = {0, 0, 0, 0};
  for (size_t i = lo + threadIdx.x; i < hi; i += 8 * 512) {
    uint4 v[8];
#pragma unroll
    for (int j = 0; j < 8; ++j)
      v[j] = i + j * 512 < hi ? __ldg(w + i + j * 512) : uint4{0, 0, 0, 0};
#pragma unroll
    for (int j = 0; j < 8; ++j) acc.x ^= v[j].x, acc.y ^= v[j].y, acc.z ^= v[j].z, acc.w ^= v[j].w;
  }
  if ((acc.x ^ acc.y ^ acc.z ^ acc.w) == 0x12345678u) *sink = 1;  // keeps the loads
}

int main() {
  cudaDeviceProp prop{};
  CHECK(cudaGetDeviceProperties(&prop, 0));
  const unsigned sms = prop.multiProcessorCount;
  const size_t bytes = static_cast<size_t>(kN) * kK * 2;
  char* w = nullptr;
  unsigned* sink = nullptr;
  CHECK(cudaMalloc(&w, bytes));
  CHECK(cudaMalloc(&sink, 4));
  CHECK(cudaMemset(w, 0x3c, bytes));
  const size_t copy_bytes = 1ull << 30;
  char *ca = nullptr, *cb = nullptr;
  CHECK(cudaMalloc(&ca, copy_bytes));
  CHECK(cudaMalloc(&cb, copy_bytes));
  CHECK(cudaMemset(ca, 1, copy_bytes));

  // The maps, one per form that uses one.
  TensorMap maps[kForms]{};
  maps[F2d] = encode_2d(TmaDtype::BF16, w, kN, kK, kK * 2, kBn, 64, Swizzle::B128);
  maps[FKview] = encode_k_blocks(w, kN, kK, kBn, 2, 1);
  {
    TensorMapSpec s;  // [N / 8][K / 64][8][64] seen as (col, row of 8, group, K block)
    s.rank = 4;
    s.base = w;
    s.swizzle = Swizzle::B128;
    s.dims[0] = 64, s.dims[1] = 8, s.dims[2] = kN / 8, s.dims[3] = kK / 64;
    s.strides_bytes[0] = 128, s.strides_bytes[1] = kK * 16, s.strides_bytes[2] = 1024;
    s.box[0] = 64, s.box[1] = 8, s.box[2] = kBn / 8, s.box[3] = 2;
    maps[FG8] = encode_tiled(s);
  }
  // Tile-major: rows of 128 bytes, (tile, K block, row) flattened; a box of 64 (128) rows is a
  // slot.
  const uint64_t flat_rows = static_cast<uint64_t>(kN) * (kK / 64);
  maps[FTile] = encode_2d(TmaDtype::BF16, w, flat_rows, 64, 128, 64, 64, Swizzle::B128);
  maps[FTile16] = encode_2d(TmaDtype::BF16, w, flat_rows, 64, 128, 128, 64, Swizzle::B128);

  const size_t smem = kRingBytes + 24 * 16 + 1024;
  using StreamKernel = void (*)(TensorMap, const char*, unsigned);
  const StreamKernel kernels[FLd] = {stream<F2d>,   stream<FKview>,  stream<FG8>,    stream<FTile>,
                                     stream<FBulk>, stream<FTile16>, stream<FBulk16>};
  for (StreamKernel k : kernels)
    CHECK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  auto launch = [&](int f, unsigned grid, unsigned tiles) {
    if (f < FLd)
      kernels[f]<<<grid, 160, smem>>>(maps[f], w, tiles);
    else
      read_plain<<<grid, 512>>>(reinterpret_cast<const uint4*>(w), tiles * (kBn * kK * 2 / 16),
                                sink);
  };

  cudaEvent_t a, b;
  CHECK(cudaEventCreate(&a));
  CHECK(cudaEventCreate(&b));
  auto median_ms = [&](auto&& fn, int reps) {
    for (int i = 0; i < 2; ++i) fn();
    std::vector<float> ms;
    for (int i = 0; i < reps; ++i) {
      CHECK(cudaEventRecord(a));
      fn();
      CHECK(cudaEventRecord(b));
      CHECK(cudaEventSynchronize(b));
      float t = 0;
      CHECK(cudaEventElapsedTime(&t, a, b));
      ms.push_back(t);
    }
    CHECK(cudaGetLastError());
    std::sort(ms.begin(), ms.end());
    return ms[ms.size() / 2];
  };
  // Grids: every SM, half of them, and 13 (a lone CTA's ceiling without one CTA's noise), each
  // streaming 7 tiles a CTA at most (all 896 at 132).
  const unsigned grids[3] = {sms, sms / 2, 13};
  std::printf("device %s, %u SMs; buffer %zu MB; 32-row tiles, 8 KB slots (16 KB for *16)\n",
              prop.name, sms, bytes >> 20);
  std::vector<double> gbs(3 * kForms * 3, 0.0), copy(3, 0.0);
  for (int round = 0; round < 3; ++round) {
    const float cms = median_ms(
        [&] { CHECK(cudaMemcpyAsync(cb, ca, copy_bytes, cudaMemcpyDeviceToDevice)); }, 10);
    copy[round] = 2.0 * copy_bytes / (cms * 1e6);
    for (int g = 0; g < 3; ++g) {
      const unsigned tiles = std::min(kTiles, grids[g] * 7);
      const double read = static_cast<double>(tiles) * kBn * kK * 2;
      for (int f = 0; f < kForms; ++f) {
        const float ms = median_ms([&] { launch(f, grids[g], tiles); }, 9);
        gbs[(round * 3 + g) * kForms + f] = read / (ms * 1e6);
      }
    }
  }
  std::printf("copy GB/s by round: %.0f %.0f %.0f\n", copy[0], copy[1], copy[2]);
  std::printf(
      "| form | CTAs | GB/s (rounds) | GB/s a CTA | %% of copy |\n| --- | --- | --- | --- | --- "
      "|\n");
  for (int g = 0; g < 3; ++g)
    for (int f = 0; f < kForms; ++f) {
      double r[3], pct = 0;
      for (int round = 0; round < 3; ++round) {
        r[round] = gbs[(round * 3 + g) * kForms + f];
        pct += 100.0 * r[round] / copy[round] / 3;
      }
      std::sort(r, r + 3);
      std::printf("| %s | %u | %.0f (%.0f-%.0f) | %.1f | %.1f |\n", kFormNames[f], grids[g], r[1],
                  r[0], r[2], r[1] / grids[g], pct);
    }
  return 0;
}
