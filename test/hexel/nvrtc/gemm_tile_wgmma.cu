// The tile GEMM's Hopper twin (hexel/examples/gemm_tile.cuh with wgmma) compiles through NVRTC for
// compute_90a and assembles for sm_90a with no stack frame and no spills. Per K block the
// accumulator warpgroup waits for the stage, issues eight wgmma m64n128k16 (two 64-row halves,
// four K slices), keeps one group in flight and releases the previous stage; the producer's
// loop is the Blackwell form's.
// RUN: %hexel-nvrtc --arch=compute_90a -I %src/hexel/examples %s -o %t.ptx
// RUN: %ptxas -arch=sm_90a -v %t.ptx -o %t.cubin 2>&1 | FileCheck --check-prefix=PTXAS %s
// RUN: %python %S/../ptx_loops.py %t.ptx | FileCheck %s
#include "gemm_tile.cuh"

using hexel::TensorMap;
using hexel::uint16_t;
using hexel::uint32_t;
using hexel::examples::WgmmaAccum;
template __global__ void hexel::examples::gemm_tile_kernel<WgmmaAccum<128>>(
    const __grid_constant__ TensorMap, const __grid_constant__ TensorMap, uint16_t*, uint32_t,
    uint32_t, uint32_t);

// PTXAS: {{^ *}}0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads

// CHECK: WgmmaAccumILj128{{.*}}: loop mbarrier.try_wait.parity.shared::cta.b64 x1, mbarrier.arrive.expect_tx.shared::cta.b64 x1, cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes x2{{$}}
// CHECK: WgmmaAccumILj128{{.*}}: loop mbarrier.try_wait.parity.shared::cta.b64 x1, wgmma.fence.sync.aligned x1, wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 x8, wgmma.commit_group.sync.aligned x1, wgmma.wait_group.sync.aligned x1, mbarrier.arrive.shared::cta.b64 x1{{$}}
