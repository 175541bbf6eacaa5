// The proof GEMM compiles through NVRTC for sm_90a, issues m64n256k16 wgmma fed by TMA, uses
// setmaxnreg for its producer/consumer roles, and ptxas reports no stack frame and no spills.
// RUN: %hexel-nvrtc --arch=compute_90a -I %src/hexel/examples %s -o %t.ptx
// RUN: %ptxas -arch=sm_90a -v %t.ptx -o %t.cubin 2>&1 | FileCheck --check-prefix=PTXAS %s
// RUN: FileCheck %s < %t.ptx
#include "gemm_bf16.cuh"

// Both variants: single CTA and the multicast CTA pair.
using hexel::TensorMap;
template __global__ void hexel::examples::gemm_bf16_kernel<1>(const __grid_constant__ TensorMap,
                                                              const __grid_constant__ TensorMap,
                                                              const __grid_constant__ TensorMap,
                                                              uint32_t, uint32_t, uint32_t);
template __global__ void hexel::examples::gemm_bf16_kernel<2>(const __grid_constant__ TensorMap,
                                                              const __grid_constant__ TensorMap,
                                                              const __grid_constant__ TensorMap,
                                                              uint32_t, uint32_t, uint32_t);
// CHECK: .entry _ZN5hexel8examples16gemm_bf16_kernelILj1EEEvNS_9TensorMapES2_S2_jjj
// CHECK-DAG: setmaxnreg.dec.sync.aligned.u32 40
// CHECK-DAG: setmaxnreg.inc.sync.aligned.u32 232
// CHECK-DAG: cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes
// CHECK-DAG: wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16
// CHECK-DAG: wgmma.wait_group.sync.aligned 1
// CHECK-DAG: stmatrix.sync.aligned.m8n8.x4.shared.b16
// CHECK-DAG: cp.async.bulk.tensor.2d.global.shared::cta.bulk_group
// CHECK: .entry _ZN5hexel8examples16gemm_bf16_kernelILj2EEEvNS_9TensorMapES2_S2_jjj
// CHECK-DAG: cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster
// CHECK-DAG: mbarrier.arrive.shared::cluster.b64
// PTXAS-COUNT-2: {{^ *}}0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
