// TMA tiled loads of every rank, multicast, stores, bulk copies and prefetches (sm_90a, sm_100a).
// RUN: %hexel-nvrtc --arch=compute_90a %s -o %t.90.ptx
// RUN: %ptxas -arch=sm_90a %t.90.ptx -o %t.90.cubin
// RUN: FileCheck %s < %t.90.ptx
// RUN: %hexel-nvrtc --arch=compute_100a %s -o %t.100.ptx
// RUN: %ptxas -arch=sm_100a %t.100.ptx -o %t.100.cubin
// RUN: FileCheck %s < %t.100.ptx
#include "hexel/tma.cuh"

extern "C" __global__ void tma_kernel(const __grid_constant__ hexel::TensorMap map, int* g) {
  extern __shared__ __align__(1024) unsigned char smem[];
  using namespace hexel;
  const uint32_t dst = smem_addr(smem);
  const uint32_t bar = smem_addr(smem + 65536);
  tma::prefetch_map(&map);
  tma::acquire_map(&map);
  tma::load(dst, &map, bar, 1);
  tma::load(dst, &map, bar, 1, 2);
  tma::load(dst, &map, bar, 1, 2, 3);
  tma::load(dst, &map, bar, 1, 2, 3, 4);
  tma::load(dst, &map, bar, 1, 2, 3, 4, 5);
  tma::load_multicast(dst, &map, bar, 0x3, 7, 8);
  tma::prefetch_tile(&map, 9, 10);
  tma::copy_g2s(dst, g, 256, bar);
  tma::store(&map, dst, 1);
  tma::store(&map, dst, 1, 2);
  tma::store(&map, dst, 1, 2, 3);
  tma::store(&map, dst, 1, 2, 3, 4);
  tma::store(&map, dst, 1, 2, 3, 4, 5);
  tma::copy_s2g(g, dst, 256);
  tma::commit_group();
  tma::wait_group_read<0>();
  tma::wait_group<1>();
  static_assert(tma::tile_bytes<unsigned short>(64, 128) == 16384, "64x128 bf16 box");
}
// CHECK-LABEL: .entry tma_kernel
// CHECK: prefetch.tensormap
// CHECK: fence.proxy.tensormap::generic.acquire.sys
// CHECK: cp.async.bulk.tensor.1d.shared::cluster.global.mbarrier::complete_tx::bytes
// CHECK: cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes
// CHECK: cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes
// CHECK: cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes
// CHECK: cp.async.bulk.tensor.5d.shared::cluster.global.mbarrier::complete_tx::bytes
// CHECK: cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster
// CHECK: cp.async.bulk.prefetch.tensor.2d.L2.global
// CHECK: cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes
// CHECK: cp.async.bulk.tensor.1d.global.shared::cta.bulk_group
// CHECK: cp.async.bulk.tensor.2d.global.shared::cta.bulk_group
// CHECK: cp.async.bulk.tensor.3d.global.shared::cta.bulk_group
// CHECK: cp.async.bulk.tensor.4d.global.shared::cta.bulk_group
// CHECK: cp.async.bulk.tensor.5d.global.shared::cta.bulk_group
// CHECK: cp.async.bulk.global.shared::cta.bulk_group
// CHECK: cp.async.bulk.commit_group
// CHECK: cp.async.bulk.wait_group.read 0
// CHECK: cp.async.bulk.wait_group 1
