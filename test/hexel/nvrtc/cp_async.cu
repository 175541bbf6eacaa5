// cp.async 16-byte copies (with the zero-filling source size), their mbarrier arrival and the
// wait, for Hopper and Blackwell.
// RUN: %hexel-nvrtc --arch=compute_90a %s -o %t.90.ptx
// RUN: %ptxas -arch=sm_90a %t.90.ptx -o %t.90.cubin
// RUN: FileCheck %s < %t.90.ptx
// RUN: %hexel-nvrtc --arch=compute_100a %s -o %t.100.ptx
// RUN: %ptxas -arch=sm_100a %t.100.ptx -o %t.100.cubin
// RUN: FileCheck %s < %t.100.ptx
#include "hexel/cp_async.cuh"
#include "hexel/mbarrier.cuh"

extern "C" __global__ void cp_async_kernel(const uint4* in, unsigned* out) {
  __shared__ alignas(16) uint4 buf[128];
  __shared__ alignas(8) unsigned long long bar;
  using namespace hexel;
  const uint32_t b = smem_addr(&bar);
  if (threadIdx.x == 0) {
    mbarrier::init(b, 128);
    mbarrier::fence_init();
  }
  __syncthreads();
  cp_async::copy_16(smem_addr(&buf[threadIdx.x]), in + threadIdx.x, threadIdx.x % 2 ? 16u : 0u);
  cp_async::arrive_noinc(b);
  mbarrier::wait_parity(b, 0);
  cp_async::wait_all();
  out[threadIdx.x] = buf[127 - threadIdx.x].x;
}
// CHECK-LABEL: .entry cp_async_kernel
// CHECK: cp.async.cg.shared.global [{{%r[0-9]+}}], [{{%rd[0-9]+}}], 16, {{%r[0-9]+}};
// CHECK: cp.async.mbarrier.arrive.noinc.shared::cta.b64
// CHECK: cp.async.wait_all;
