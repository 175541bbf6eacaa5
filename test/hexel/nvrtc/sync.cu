// setmaxnreg, the async-proxy fence, named barriers, elect.sync and griddepcontrol.
// RUN: %hexel-nvrtc --arch=compute_90a %s -o %t.90.ptx
// RUN: %ptxas -arch=sm_90a %t.90.ptx -o %t.90.cubin
// RUN: FileCheck %s < %t.90.ptx
// RUN: %hexel-nvrtc --arch=compute_100a %s -o %t.100.ptx
// RUN: %ptxas -arch=sm_100a %t.100.ptx -o %t.100.cubin
// RUN: FileCheck %s < %t.100.ptx
#include "hexel/sync.cuh"

extern "C" __global__ void __launch_bounds__(256, 1) sync_kernel(unsigned* out) {
  using namespace hexel;
  hexel::grid_dependency_wait();
  if (warp_index() / 4 == 0) {
    setmaxnreg_dec<40>();
    named_barrier_arrive(1, 256);
  } else {
    setmaxnreg_inc<232>();
    named_barrier_sync(1, 256);
  }
  fence_proxy_async_smem();
  if (elect_one()) out[threadIdx.x / 32] = 1;
  launch_dependents();
}
// CHECK-LABEL: .entry sync_kernel
// CHECK: griddepcontrol.wait
// CHECK-DAG: setmaxnreg.dec.sync.aligned.u32 40
// CHECK-DAG: setmaxnreg.inc.sync.aligned.u32 232
// CHECK-DAG: bar.arrive
// CHECK-DAG: bar.sync
// CHECK: fence.proxy.async.shared::cta
// CHECK: elect.sync
// CHECK: griddepcontrol.launch_dependents
