// The global nanosecond timer, for Hopper and Blackwell.
// RUN: %hexel-nvrtc --arch=compute_90a %s -o %t.90.ptx
// RUN: %ptxas -arch=sm_90a %t.90.ptx -o %t.90.cubin
// RUN: FileCheck %s < %t.90.ptx
// RUN: %hexel-nvrtc --arch=compute_100a %s -o %t.100.ptx
// RUN: %ptxas -arch=sm_100a %t.100.ptx -o %t.100.cubin
// RUN: FileCheck %s < %t.100.ptx
#include "hexel/timer.cuh"

extern "C" __global__ void timer_kernel(unsigned long long* out) {
  const unsigned long long t0 = hexel::globaltimer();
  out[threadIdx.x] = hexel::globaltimer() - t0;
}
// CHECK-LABEL: .entry timer_kernel
// CHECK-COUNT-2: mov.u64 {{%rd[0-9]+}}, %globaltimer;
