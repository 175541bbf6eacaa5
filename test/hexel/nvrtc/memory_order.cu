// Global accesses with a memory-model order and scope: the release pattern and its acquire, the
// relaxed polls and stores, the reductions (register and immediate forms), for Hopper and
// Blackwell.
// RUN: %hexel-nvrtc --arch=compute_90a %s -o %t.90.ptx
// RUN: %ptxas -arch=sm_90a %t.90.ptx -o %t.90.cubin
// RUN: FileCheck %s < %t.90.ptx
// RUN: %hexel-nvrtc --arch=compute_100a %s -o %t.100.ptx
// RUN: %ptxas -arch=sm_100a %t.100.ptx -o %t.100.cubin
// RUN: FileCheck %s < %t.100.ptx
#include "hexel/memory_order.cuh"

extern "C" __global__ void memory_order_kernel(unsigned* count, float* x, uint4* words,
                                               unsigned* out) {
  using namespace hexel;
  red_add_relaxed_gpu(x + 2 * threadIdx.x, 1.f, 2.f);
  st_relaxed_gpu(count + 1 + threadIdx.x, threadIdx.x);
  if (threadIdx.x == 0) {
    red_add_release_gpu(count, 3u);
    fence_acq_rel_gpu();
    red_add_relaxed_gpu<1>(count);
    while (ld_acquire_gpu(count) < 4u) {
    }
  }
  const uint4 v = ld_relaxed_gpu_v4(words + threadIdx.x);
  const uint2 u = ld_relaxed_gpu_v2(reinterpret_cast<const uint2*>(words + 64) + threadIdx.x);
  out[threadIdx.x] = v.x + v.y + v.z + v.w + u.x + u.y;
}
// CHECK-LABEL: .entry memory_order_kernel
// CHECK: red.relaxed.gpu.global.add.v2.f32 [{{%rd[0-9]+}}], {{{%f[0-9]+}}, {{%f[0-9]+}}};
// CHECK: st.relaxed.gpu.global.b32
// CHECK: fence.acq_rel.gpu;
// CHECK-NEXT: red.relaxed.gpu.global.add.u32 [{{%rd[0-9]+}}], {{%r[0-9]+}};
// CHECK: fence.acq_rel.gpu;
// CHECK: red.relaxed.gpu.global.add.u32 [{{%rd[0-9]+}}], 1;
// CHECK: ld.acquire.gpu.global.u32
// CHECK: ld.relaxed.gpu.global.v4.b32
// CHECK: ld.relaxed.gpu.global.v2.b32
