// Blackwell tcgen05: TMEM alloc/relinquish/dealloc, mma (f16 and f8f6f4, one CTA and a CTA
// pair, A from TMEM), commit, ld/st/wait and the fences (sm_100a only).
// RUN: %hexel-nvrtc --arch=compute_100a %s -o %t.ptx
// RUN: %ptxas -arch=sm_100a %t.ptx -o %t.cubin
// RUN: FileCheck %s < %t.ptx
#include "hexel/mbarrier.cuh"
#include "hexel/tcgen05.cuh"

using namespace hexel;

extern "C" __global__ void tcgen05_kernel(unsigned* out) {
  extern __shared__ __align__(1024) unsigned char smem[];
  __shared__ unsigned tmem_base;
  __shared__ alignas(8) unsigned long long bar;
  const uint32_t warp = threadIdx.x / 32;
  if (warp == 0) {
    tcgen05::alloc(smem_addr(&tmem_base), 256);
    tcgen05::relinquish_alloc_permit();
  }
  tcgen05::fence_before_thread_sync();
  __syncthreads();
  tcgen05::fence_after_thread_sync();
  const uint32_t d = tmem_base;
  constexpr auto idesc = tcgen05::InstrDesc::make(tcgen05::AbType::BF16, tcgen05::AbType::BF16,
                                                  tcgen05::DType::F32, 128, 256);
  constexpr auto idesc8 = tcgen05::InstrDesc::make(tcgen05::AbType::E4M3, tcgen05::AbType::E4M3,
                                                   tcgen05::DType::F32, 128, 128);
  const auto a = tcgen05::kmajor_desc(smem_addr(smem), Swizzle::B128);
  const auto b = tcgen05::kmajor_desc(smem_addr(smem + 16384), Swizzle::B128);
  if (threadIdx.x == 0) {
    tcgen05::mma<tcgen05::Kind::F16>(d, a, b, idesc, false);
    tcgen05::mma<tcgen05::Kind::F8F6F4>(d, a, b.advanced(32), idesc8, true);
    tcgen05::mma_ts<tcgen05::Kind::F16>(d, d + 128, b, idesc, true);
    tcgen05::commit(smem_addr(&bar));
  }
  mbarrier::wait_parity(smem_addr(&bar), 0);
  tcgen05::fence_after_thread_sync();
  uint32_t r[32], one[1];
  tcgen05::ld_32x32b(r, d + tcgen05::tmem_addr(warp * 32, 0));
  tcgen05::ld_32x32b(one, d);
  tcgen05::wait_ld();
  tcgen05::st_32x32b(d + 64, r);
  tcgen05::wait_st();
  out[threadIdx.x] = r[0] + r[31] + one[0];
  __syncthreads();
  if (warp == 0) tcgen05::dealloc(d, 256);
}
// A CTA pair (cta_group::2) kernel: ptxas rejects mixing the two granularities in one kernel.
extern "C" __global__ void __cluster_dims__(2, 1, 1) tcgen05_pair_kernel(unsigned* out) {
  extern __shared__ __align__(1024) unsigned char smem[];
  __shared__ unsigned tmem_base;
  __shared__ alignas(8) unsigned long long bar;
  if (threadIdx.x / 32 == 0) {
    tcgen05::alloc<2>(smem_addr(&tmem_base), 128);
    tcgen05::relinquish_alloc_permit<2>();
  }
  tcgen05::fence_before_thread_sync();
  __syncthreads();
  tcgen05::fence_after_thread_sync();
  constexpr auto idesc = tcgen05::InstrDesc::make(tcgen05::AbType::BF16, tcgen05::AbType::BF16,
                                                  tcgen05::DType::F32, 256, 128);
  const auto a = tcgen05::kmajor_desc(smem_addr(smem), Swizzle::B128);
  if (threadIdx.x == 0) {
    tcgen05::mma<tcgen05::Kind::F16, 2>(tmem_base, a, a.advanced(32), idesc, false);
    tcgen05::commit<2>(smem_addr(&bar));
    tcgen05::commit_multicast(smem_addr(&bar), 0x3);
  }
  mbarrier::wait_parity(smem_addr(&bar), 0);
  out[threadIdx.x] = tmem_base;
  if (threadIdx.x / 32 == 0) tcgen05::dealloc<2>(tmem_base, 128);
}

// CHECK-LABEL: .entry tcgen05_kernel
// CHECK: tcgen05.alloc.cta_group::1.sync.aligned.shared::cta.b32
// CHECK: tcgen05.relinquish_alloc_permit.cta_group::1.sync.aligned
// CHECK: tcgen05.fence::before_thread_sync
// CHECK: tcgen05.fence::after_thread_sync
// CHECK: tcgen05.mma.cta_group::1.kind::f16
// CHECK: tcgen05.mma.cta_group::1.kind::f8f6f4
// CHECK: tcgen05.mma.cta_group::1.kind::f16 [%r{{[0-9]+}}], [%r{{[0-9]+}}]
// CHECK: tcgen05.commit.cta_group::1.mbarrier::arrive::one.shared::cluster.b64
// CHECK: tcgen05.ld.sync.aligned.32x32b.x32.b32
// CHECK: tcgen05.ld.sync.aligned.32x32b.x1.b32
// CHECK: tcgen05.wait::ld.sync.aligned
// CHECK: tcgen05.st.sync.aligned.32x32b.x32.b32
// CHECK: tcgen05.wait::st.sync.aligned
// CHECK: tcgen05.dealloc.cta_group::1.sync.aligned.b32
// CHECK-LABEL: .entry tcgen05_pair_kernel
// CHECK: tcgen05.alloc.cta_group::2.sync.aligned.shared::cta.b32
// CHECK: tcgen05.relinquish_alloc_permit.cta_group::2.sync.aligned
// CHECK: tcgen05.mma.cta_group::2.kind::f16
// CHECK: tcgen05.commit.cta_group::2.mbarrier::arrive::one.shared::cluster.b64
// CHECK: tcgen05.commit.cta_group::2.mbarrier::arrive::one.shared::cluster.multicast::cluster.b64
// CHECK: tcgen05.dealloc.cta_group::2.sync.aligned.b32
