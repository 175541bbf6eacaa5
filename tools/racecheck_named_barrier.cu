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
//   for m in alone exit park; do
//     compute-sanitizer --tool racecheck --racecheck-report hazard ./racecheck-named-barrier $m
//   done
//
// alone: 128 threads, no fifth warp (the control); exit: 160 threads, warp 4 returns at once;
// park: 160 threads, warp 4 waits at `bar.sync 3, 160` until warps 0-3 arrive there at the end.
#include <cuda_runtime.h>

#include <cstdio>
#include <cstring>
#include <vector>

#include "hexel/sync.cuh"

namespace {

constexpr int kRounds = 8, kBlocks = 132;

enum Mode : int { kAlone = 0, kExit = 1, kPark = 2 };

// Round r's sum of the four warps' values (warp w stores 4 r + w + 1).
__host__ __device__ constexpr int round_sum(int r) {
  return 16 * r + 10;
}

template <int MODE>
__global__ void four_warps_at_barrier_1(int* bad) {
  __shared__ int value[4];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (warp == 4) {
    if constexpr (MODE == kPark) hexel::named_barrier_sync(3, 160);
    return;
  }
  int wrong = 0;
  for (int r = 0; r < kRounds; ++r) {
    if (lane == 0) value[warp] = 4 * r + warp + 1;
    hexel::named_barrier_sync(1, 128);
    wrong += value[0] + value[1] + value[2] + value[3] != round_sum(r);
    hexel::named_barrier_sync(1, 128);  // every read done before the next round's stores
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
  const char* names[] = {"alone", "exit", "park"};
  int mode = -1;
  for (int m = 0; m < 3; ++m)
    if (argc == 2 && std::strcmp(argv[1], names[m]) == 0) mode = m;
  if (mode < 0) {
    std::fprintf(stderr, "usage: %s alone|exit|park\n", argv[0]);
    return 2;
  }
  int* bad = nullptr;
  if (cudaError_t e = cudaMalloc(&bad, kBlocks * sizeof(int)); e != cudaSuccess)
    return fail("cudaMalloc", e);
  cudaMemset(bad, 0, kBlocks * sizeof(int));
  if (mode == kAlone) four_warps_at_barrier_1<kAlone><<<kBlocks, 128>>>(bad);
  if (mode == kExit) four_warps_at_barrier_1<kExit><<<kBlocks, 160>>>(bad);
  if (mode == kPark) four_warps_at_barrier_1<kPark><<<kBlocks, 160>>>(bad);
  if (cudaError_t e = cudaDeviceSynchronize(); e != cudaSuccess) return fail("the kernel", e);
  std::vector<int> host(kBlocks);
  cudaMemcpy(host.data(), bad, kBlocks * sizeof(int), cudaMemcpyDeviceToHost);
  long wrong = 0;
  for (int b : host) wrong += b;
  std::printf("%s: %d CTAs, %d rounds, %ld wrong sums\n", names[mode], kBlocks, kRounds, wrong);
  cudaFree(bad);
  return wrong == 0 ? 0 : 1;
}
