// Cluster launch control: try_cancel and query_cancel (sm_100a only).
// RUN: %hexel-nvrtc --arch=compute_100a %s -o %t.ptx
// RUN: %ptxas -arch=sm_100a %t.ptx -o %t.cubin
// RUN: FileCheck %s < %t.ptx
#include "hexel/cluster_launch_control.cuh"
#include "hexel/mbarrier.cuh"

using namespace hexel;

extern "C" __global__ void clc_kernel(unsigned* out) {
  __shared__ alignas(16) unsigned response[4];
  __shared__ alignas(8) unsigned long long bar;
  const uint32_t b = smem_addr(&bar);
  if (threadIdx.x == 0) {
    mbarrier::init(b, 1);
    mbarrier::fence_init();
  }
  __syncthreads();
  unsigned x = blockIdx.x;
  if (threadIdx.x == 0) {
    mbarrier::arrive_expect_tx(b, clc::kResponseBytes);
    clc::try_cancel(smem_addr(response), b);
  }
  mbarrier::wait_parity(b, 0);
  uint32_t next = 0;
  if (clc::query_cancel(smem_addr(response), next)) x = next;
  out[threadIdx.x] = x;
}
// CHECK-LABEL: .entry clc_kernel
// CHECK: clusterlaunchcontrol.try_cancel.async.shared::cta.mbarrier::complete_tx::bytes.b128
// CHECK: clusterlaunchcontrol.query_cancel.is_canceled.pred.b128
// CHECK: clusterlaunchcontrol.query_cancel.get_first_ctaid::x.b32.b128
