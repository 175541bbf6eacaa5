// mbarrier primitives and the stage ring, for Hopper and Blackwell.
// RUN: %hexel-nvrtc --arch=compute_90a %s -o %t.90.ptx
// RUN: %ptxas -arch=sm_90a %t.90.ptx -o %t.90.cubin
// RUN: FileCheck %s < %t.90.ptx
// RUN: %hexel-nvrtc --arch=compute_100a %s -o %t.100.ptx
// RUN: %ptxas -arch=sm_100a %t.100.ptx -o %t.100.cubin
// RUN: FileCheck %s < %t.100.ptx
// The debug build traps in the wait loop:
// RUN: %hexel-nvrtc --arch=compute_90a -DHEXEL_DEBUG_WAIT_LIMIT=1000 %s -o %t.dbg.ptx
// RUN: FileCheck --check-prefix=DEBUG %s < %t.dbg.ptx
#include "hexel/mbarrier.cuh"

extern "C" __global__ void mbarrier_kernel(unsigned* out) {
  __shared__ alignas(8) unsigned long long bars[4];
  using namespace hexel;
  const uint32_t bar = smem_addr(&bars[0]);
  if (threadIdx.x == 0) {
    mbarrier::init(bar, 1);
    mbarrier::fence_init();
  }
  __syncthreads();
  mbarrier::StageRing<4> ring;
  for (int i = 0; i < 10; ++i) {
    if (threadIdx.x == 0) {
      mbarrier::arrive_expect_tx(bar, 0);
      mbarrier::expect_tx(bar, 0);
      mbarrier::arrive(bar);
    }
    mbarrier::wait_parity(bar, ring.phase);
    ring.advance();
  }
  mbarrier::arrive_cluster(bar);
  mbarrier::arrive_remote(bar);
  mbarrier::arrive_remote_ranks<2>(bar);
  mbarrier::wait_parity_cluster(bar, 0);
  out[threadIdx.x] = mbarrier::try_wait_parity(bar, 1) ? ring.index : 0;
}
// CHECK-LABEL: .entry mbarrier_kernel
// CHECK: mbarrier.init.shared::cta.b64
// CHECK: fence.mbarrier_init.release.cluster
// CHECK: mbarrier.arrive.expect_tx.shared::cta.b64 _,
// CHECK: mbarrier.expect_tx.relaxed.cta.shared::cta.b64
// CHECK: mbarrier.arrive.shared::cta.b64 _,
// CHECK: mbarrier.try_wait.parity.shared::cta.b64
// CHECK: mbarrier.arrive.release.cluster.shared::cluster.b64
// CHECK: mbarrier.arrive.shared::cluster.b64 _,
// CHECK: mapa.shared::cluster.u32 [[PEER0:%r[0-9]+]],
// CHECK: mbarrier.arrive.shared::cluster.b64 _, {{\[}}[[PEER0]]{{\]}};
// CHECK: mapa.shared::cluster.u32 [[PEER1:%r[0-9]+]],
// CHECK: mbarrier.arrive.shared::cluster.b64 _, {{\[}}[[PEER1]]{{\]}};
// CHECK: mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64
// DEBUG: trap;
