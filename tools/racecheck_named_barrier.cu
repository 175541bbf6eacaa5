// Does compute-sanitizer's racecheck follow `bar.sync 1, 128` among four warps of a CTA whose
// fifth warp has exited, or waits at another named barrier? The persistent decode layer has that
// shape (four consumer warps meeting at barrier 1, a producer warp that streams and returns), and
// racecheck reports RAW hazards across its barrier 1 that grow from 36 to 732 when the producer
// waits at barrier 3 instead (docs/performance.md, "Open questions"), while every bit-for-bit test
// passes. This kernel is that pattern alone: warps 0-3 each store one value in shared memory, meet
// at barrier 1, every thread reads all four and checks their sum, and they meet again before the
// next round overwrites them. The host checks each CTA's sums, so the exit code says whether the
// barrier worked; racecheck's report says whether it saw that it did.
//
//   nvcc -std=c++20 -O3 -gencode=arch=compute_90a,code=sm_90a -I hexel \
//       tools/racecheck_named_barrier.cu -o racecheck-named-barrier
//   for m in alone exit park ring; do
//     compute-sanitizer --tool racecheck --racecheck-report hazard ./racecheck-named-barrier $m
//   done
//
// alone: 128 threads, no fifth warp (the control); exit: 160 threads, warp 4 returns at once;
// park: 160 threads, warp 4 waits at `bar.sync 3, 160` until warps 0-3 arrive there at the end.
// alone, exit and park report no hazard (H100, 2026-12-08). ring adds the layer's weight stream:
// warp 4's lane 0 fills a ring of two 1 KB slots by bulk copies (cp.async.bulk completing on a
// full mbarrier, each slot reused once the four warps have arrived on its empty one) and returns;
// each round warps 0-3 wait for their slot, check its bytes, then run the barrier-1 pattern and
// release the slot.
#include <cuda_runtime.h>

#include <cstdio>
#include <cstring>
#include <vector>

#include "hexel/mbarrier.cuh"
#include "hexel/sync.cuh"
#include "hexel/tma.cuh"

namespace {

constexpr int kRounds = 8, kBlocks = 132;

enum Mode : int { kAlone = 0, kExit = 1, kPark = 2, kRing = 3 };
constexpr int kSlotInts = 256;  // a ring slot: 1 KB

// Round r's sum of the four warps' values (warp w stores 4 r + w + 1).
__host__ __device__ constexpr int round_sum(int r) {
  return 16 * r + 10;
}

// ring: warp 4's lane 0 streams round r's kSlotInts ints of `src` (src[i] = i) into slot r % 2.
__device__ void ring_producer(const int* src, int (&slot)[2][kSlotInts], unsigned long long* full,
                              unsigned long long* empty) {
  using namespace hexel;
  for (int r = 0; r < kRounds; ++r) {
    const int s = r % 2;
    if (r >= 2) mbarrier::wait_parity(smem_addr(&empty[s]), (r / 2 - 1) % 2);
    mbarrier::arrive_expect_tx(smem_addr(&full[s]), kSlotInts * 4);
    tma::copy_g2s(smem_addr(slot[s]), src + r * kSlotInts, kSlotInts * 4, smem_addr(&full[s]));
  }
}

template <int MODE>
__global__ void four_warps_at_barrier_1(int* bad, const int* src) {
  __shared__ int value[4];
  __shared__ alignas(128) int slot[2][kSlotInts];
  __shared__ alignas(8) unsigned long long full[2], empty[2];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if constexpr (MODE == kRing) {
    if (threadIdx.x == 0) {
      for (int s = 0; s < 2; ++s) {
        hexel::mbarrier::init(hexel::smem_addr(&full[s]), 1);
        hexel::mbarrier::init(hexel::smem_addr(&empty[s]), 4);
      }
      hexel::mbarrier::fence_init();
    }
    __syncthreads();
  }
  if (warp == 4) {
    if constexpr (MODE == kPark) hexel::named_barrier_sync(3, 160);
    if constexpr (MODE == kRing)
      if (lane == 0) ring_producer(src, slot, full, empty);
    return;
  }
  int wrong = 0;
  for (int r = 0; r < kRounds; ++r) {
    if constexpr (MODE == kRing) {
      hexel::mbarrier::wait_parity(hexel::smem_addr(&full[r % 2]), (r / 2) % 2);
      for (int i = threadIdx.x; i < kSlotInts; i += 128)
        wrong += slot[r % 2][i] != r * kSlotInts + i;
    }
    if (lane == 0) value[warp] = 4 * r + warp + 1;
    hexel::named_barrier_sync(1, 128);
    wrong += value[0] + value[1] + value[2] + value[3] != round_sum(r);
    hexel::named_barrier_sync(1, 128);  // every read done before the next round's stores
    if constexpr (MODE == kRing)
      if (lane == 0) hexel::mbarrier::arrive(hexel::smem_addr(&empty[r % 2]));
  }
  if (wrong) atomicAdd(bad + blockIdx.x, wrong);
  if constexpr (MODE == kPark) hexel::named_barrier_arrive(3, 160);
}

int fail(const char* what, cudaError_t e) {
  std::fprintf(stderr, "racecheck_named_barrier: %s: %s\n", what, cudaGetErrorString(e));
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  const char* names[] = {"alone", "exit", "park", "ring"};
  int mode = -1;
  for (int m = 0; m < 4; ++m)
    if (argc == 2 && std::strcmp(argv[1], names[m]) == 0) mode = m;
  if (mode < 0) {
    std::fprintf(stderr, "usage: %s alone|exit|park|ring\n", argv[0]);
    return 2;
  }
  int* bad = nullptr;
  if (cudaError_t e = cudaMalloc(&bad, kBlocks * sizeof(int)); e != cudaSuccess)
    return fail("cudaMalloc", e);
  cudaMemset(bad, 0, kBlocks * sizeof(int));
  std::vector<int> ints(kRounds * kSlotInts);
  for (int i = 0; i < kRounds * kSlotInts; ++i) ints[i] = i;
  int* src = nullptr;
  if (cudaError_t e = cudaMalloc(&src, ints.size() * sizeof(int)); e != cudaSuccess)
    return fail("cudaMalloc", e);
  cudaMemcpy(src, ints.data(), ints.size() * sizeof(int), cudaMemcpyHostToDevice);
  if (mode == kAlone) four_warps_at_barrier_1<kAlone><<<kBlocks, 128>>>(bad, src);
  if (mode == kExit) four_warps_at_barrier_1<kExit><<<kBlocks, 160>>>(bad, src);
  if (mode == kPark) four_warps_at_barrier_1<kPark><<<kBlocks, 160>>>(bad, src);
  if (mode == kRing) four_warps_at_barrier_1<kRing><<<kBlocks, 160>>>(bad, src);
  if (cudaError_t e = cudaDeviceSynchronize(); e != cudaSuccess) return fail("the kernel", e);
  std::vector<int> host(kBlocks);
  cudaMemcpy(host.data(), bad, kBlocks * sizeof(int), cudaMemcpyDeviceToHost);
  long wrong = 0;
  for (int b : host) wrong += b;
  std::printf("%s: %d CTAs, %d rounds, %ld wrong sums\n", names[mode], kBlocks, kRounds, wrong);
  cudaFree(bad);
  cudaFree(src);
  return wrong == 0 ? 0 : 1;
}
