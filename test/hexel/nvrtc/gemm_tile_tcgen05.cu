// The tile GEMM's Blackwell form (hexel/examples/gemm_tile.cuh with tcgen05) compiles through
// NVRTC for compute_100a and assembles for sm_100a with no stack frame and no spills, for the
// 128 x 128 and 128 x 256 tiles. Per K block the MMA thread's loop waits for the stage and issues
// four tcgen05.mma (K = 16 each) and one tcgen05.commit; the producer's loop issues the two TMA
// boxes; the epilogue reads the accumulator with one tcgen05.ld .32x32b.x32 per 32 columns and
// frees the Tensor Memory it allocated.
// RUN: %hexel-nvrtc --arch=compute_100a -I %src/hexel/examples %s -o %t.ptx
// RUN: %ptxas -arch=sm_100a -v %t.ptx -o %t.cubin 2>&1 | FileCheck --check-prefix=PTXAS %s
// RUN: %python %S/../ptx_loops.py %t.ptx | FileCheck --check-prefix=LOOPS %s
// RUN: FileCheck %s < %t.ptx
#include "gemm_tile.cuh"

using hexel::TensorMap;
using hexel::uint16_t;
using hexel::uint32_t;
using hexel::examples::Tcgen05Accum;
template __global__ void hexel::examples::gemm_tile_kernel<Tcgen05Accum<128>>(
    const __grid_constant__ TensorMap, const __grid_constant__ TensorMap, uint16_t*, uint32_t,
    uint32_t, uint32_t);
template __global__ void hexel::examples::gemm_tile_kernel<Tcgen05Accum<256>>(
    const __grid_constant__ TensorMap, const __grid_constant__ TensorMap, uint16_t*, uint32_t,
    uint32_t, uint32_t);

// PTXAS-COUNT-2: {{^ *}}0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads

// LOOPS: Tcgen05AccumILj128{{.*}}: loop mbarrier.try_wait.parity.shared::cta.b64 x1, mbarrier.arrive.expect_tx.shared::cta.b64 x1, cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes x2{{$}}
// LOOPS: Tcgen05AccumILj128{{.*}}: loop mbarrier.try_wait.parity.shared::cta.b64 x1, tcgen05.fence::after_thread_sync x1, tcgen05.mma.cta_group::1.kind::f16 x4, tcgen05.commit.cta_group::1.mbarrier::arrive::one.shared::cluster.b64 x1{{$}}
// LOOPS: Tcgen05AccumILj256{{.*}}: loop mbarrier.try_wait.parity.shared::cta.b64 x1, mbarrier.arrive.expect_tx.shared::cta.b64 x1, cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes x2{{$}}
// LOOPS: Tcgen05AccumILj256{{.*}}: loop mbarrier.try_wait.parity.shared::cta.b64 x1, tcgen05.fence::after_thread_sync x1, tcgen05.mma.cta_group::1.kind::f16 x4, tcgen05.commit.cta_group::1.mbarrier::arrive::one.shared::cluster.b64 x1{{$}}

// CHECK-LABEL: .entry _ZN5hexel8examples16gemm_tile_kernelINS0_12Tcgen05AccumILj128EEEEEvNS_9TensorMapES4_Ptjjj
// CHECK: tcgen05.alloc.cta_group::1.sync.aligned.shared::cta.b32
// CHECK: tcgen05.relinquish_alloc_permit.cta_group::1.sync.aligned
// CHECK-COUNT-4: tcgen05.ld.sync.aligned.32x32b.x32.b32
// CHECK-NOT: tcgen05.ld
// CHECK: tcgen05.dealloc.cta_group::1.sync.aligned.b32
// CHECK-LABEL: .entry _ZN5hexel8examples16gemm_tile_kernelINS0_12Tcgen05AccumILj256EEEEEvNS_9TensorMapES4_Ptjjj
// CHECK-COUNT-8: tcgen05.ld.sync.aligned.32x32b.x32.b32
// CHECK-NOT: tcgen05.ld
// CHECK: tcgen05.dealloc.cta_group::1.sync.aligned.b32
