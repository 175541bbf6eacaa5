// Cluster ids, mapa, distributed shared memory access and the cluster barrier.
// RUN: %hexel-nvrtc --arch=compute_90a %s -o %t.90.ptx
// RUN: %ptxas -arch=sm_90a %t.90.ptx -o %t.90.cubin
// RUN: FileCheck %s < %t.90.ptx
// RUN: %hexel-nvrtc --arch=compute_100a %s -o %t.100.ptx
// RUN: %ptxas -arch=sm_100a %t.100.ptx -o %t.100.cubin
// RUN: FileCheck %s < %t.100.ptx
#include "hexel/cluster.cuh"

extern "C" __global__ void __cluster_dims__(2, 1, 1) cluster_kernel(unsigned* out) {
  __shared__ unsigned word;
  using namespace hexel;
  const uint32_t rank = cluster::cta_rank();
  word = rank;
  cluster::sync();
  const uint32_t peer = cluster::map_shared(smem_addr(&word), rank ^ 1);
  const uint32_t v = cluster::load_u32(peer);
  cluster::arrive();
  cluster::wait();
  cluster::store_u32(peer, v + cluster::size() + cluster::id_x() + cluster::cta_id_x());
  cluster::sync();
  out[blockIdx.x] = word;
}
// CHECK-LABEL: .entry cluster_kernel
// CHECK: %cluster_ctarank
// CHECK: barrier.cluster.arrive.release.aligned
// CHECK: barrier.cluster.wait.acquire.aligned
// CHECK: mapa.shared::cluster.u32
// CHECK: ld.shared::cluster.u32
// CHECK-DAG: %cluster_nctarank
// CHECK-DAG: %clusterid.x
// CHECK-DAG: %cluster_ctaid.x
// CHECK: st.shared::cluster.u32
