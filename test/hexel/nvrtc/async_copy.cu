// Per-thread cp.async copies and their groups.
// RUN: %hexel-nvrtc --arch=compute_90a %s -o %t.90.ptx
// RUN: %ptxas -arch=sm_90a %t.90.ptx -o %t.90.cubin
// RUN: FileCheck %s < %t.90.ptx
// RUN: %hexel-nvrtc --arch=compute_100a %s -o %t.100.ptx
// RUN: %ptxas -arch=sm_100a %t.100.ptx -o %t.100.cubin
// RUN: FileCheck %s < %t.100.ptx
#include "hexel/async_copy.cuh"

extern "C" __global__ void async_copy_kernel(const uint4* in, uint4* out) {
  using namespace hexel;
  __shared__ uint4 buf[2][128];
  async_copy::copy16(smem_addr(&buf[0][threadIdx.x]), in + threadIdx.x);
  async_copy::commit_group();
  async_copy::copy16(smem_addr(&buf[1][threadIdx.x]), in + 128 + threadIdx.x);
  async_copy::copy8(smem_addr(&buf[1][threadIdx.x]) + 8, in + 256 + threadIdx.x);
  async_copy::commit_group();
  async_copy::wait_group<1>();
  out[threadIdx.x] = buf[0][threadIdx.x];
  async_copy::wait_group<0>();
  out[128 + threadIdx.x] = buf[1][threadIdx.x];
}
// CHECK-LABEL: .entry async_copy_kernel
// CHECK: cp.async.cg.shared.global [{{%r[0-9]+}}], [{{%rd[0-9]+}}], 16;
// CHECK: cp.async.commit_group
// CHECK: cp.async.cg.shared.global
// CHECK: cp.async.ca.shared.global [{{%r[0-9]+}}], [{{%rd[0-9]+}}], 8;
// CHECK: cp.async.commit_group
// CHECK: cp.async.wait_group 1
// CHECK: cp.async.wait_group 0
