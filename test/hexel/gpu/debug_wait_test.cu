// The debug wait limit: built with HEXEL_DEBUG_WAIT_LIMIT, a wait on a phase that never
// completes must trap (a failed launch) instead of hanging. Its own binary, because the trap
// leaves the CUDA context unusable for anything after it.
#include "gpu_check.h"
#include "hexel/mbarrier.cuh"

#if !defined(HEXEL_DEBUG_WAIT_LIMIT)
#error "build this test with -DHEXEL_DEBUG_WAIT_LIMIT"
#endif

namespace {

__global__ void never_completes() {
  __shared__ alignas(8) unsigned long long bar;
  using namespace hexel;
  if (threadIdx.x == 0) {
    mbarrier::init(smem_addr(&bar), 2);  // two arrivals expected, only one ever comes
    mbarrier::fence_init();
  }
  __syncthreads();
  if (threadIdx.x == 0) mbarrier::arrive(smem_addr(&bar));
  mbarrier::wait_parity(smem_addr(&bar), 0);
}

TEST(DebugWait, DeadlockTrapsInsteadOfHanging) {
  REQUIRE_SM90();
  never_completes<<<1, 32>>>();
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  const cudaError_t err = cudaDeviceSynchronize();
  EXPECT_NE(err, cudaSuccess) << "the wait returned although the phase never completed";
  EXPECT_TRUE(err == cudaErrorLaunchFailure || err == cudaErrorIllegalInstruction)
      << cudaGetErrorString(err);
}

}  // namespace
