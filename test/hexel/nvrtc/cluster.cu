// Cluster ids, mapa, distributed shared memory access, st.async onto a peer's mbarrier and the
// cluster barrier.
// RUN: %hexel-nvrtc --arch=compute_90a %s -o %t.90.ptx
// RUN: %ptxas -arch=sm_90a %t.90.ptx -o %t.90.cubin
// RUN: FileCheck %s < %t.90.ptx
// RUN: %hexel-nvrtc --arch=compute_100a %s -o %t.100.ptx
// RUN: %ptxas -arch=sm_100a %t.100.ptx -o %t.100.cubin
// RUN: FileCheck %s < %t.100.ptx
#include "hexel/cluster.cuh"
#include "hexel/mbarrier.cuh"

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
  // Each CTA pushes four words into its peer's box and waits for its own box to fill.
  __shared__ alignas(16) unsigned box[4];
  __shared__ alignas(8) unsigned long long bar;
  if (threadIdx.x == 0) {
    mbarrier::init(smem_addr(&bar), 1);
    mbarrier::fence_init();
  }
  cluster::sync();
  if (threadIdx.x == 0) {
    mbarrier::arrive_expect_tx(smem_addr(&bar), 16);
    cluster::store_async_v4(cluster::map_shared(smem_addr(box), rank ^ 1), 1, 2, 3, rank,
                            cluster::map_shared(smem_addr(&bar), rank ^ 1));
    mbarrier::wait_parity_cluster(smem_addr(&bar), 0);
    out[gridDim.x + blockIdx.x] = box[3];
  }
  cluster::sync();
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
// CHECK: st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.b32
