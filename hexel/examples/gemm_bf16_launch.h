// Host launcher for the Hexel proof GEMM (gemm_bf16.cuh): encodes the two tensor maps, sizes a
// persistent grid (one CTA per SM, in clusters of `cluster_m`) and launches. Compile with nvcc
// for sm_90a.
#pragma once
#include <cuda_runtime.h>

#include "gemm_bf16.cuh"
#include "hexel/tensor_map_encode.h"

namespace hexel::examples {

namespace detail {

template <uint32_t ClusterM>
cudaError_t launch_gemm_bf16(const TensorMap& a_map, const TensorMap& b_map, const TensorMap& c_map,
                             uint32_t m, uint32_t n, uint32_t k, cudaStream_t stream) {
  using G = GemmBf16;
  auto kernel = gemm_bf16_kernel<ClusterM>;
  cudaLaunchConfig_t cfg{};
  cudaLaunchAttribute attr{};
  attr.id = cudaLaunchAttributeClusterDimension;
  attr.val.clusterDim.x = ClusterM;
  attr.val.clusterDim.y = 1;
  attr.val.clusterDim.z = 1;
  cfg.blockDim = dim3(G::kThreads);
  cfg.dynamicSmemBytes = G::kSmemBytes;
  cfg.stream = stream;
  cfg.attrs = &attr;
  cfg.numAttrs = 1;
  // How many clusters fit at once (clusters of 2 need SM pairs in one GPC); computed once.
  static const uint32_t max_clusters = [&] {
    cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                         static_cast<int>(G::kSmemBytes));
    int dev = 0, sms = 0, clusters = 0;
    cudaGetDevice(&dev);
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
    cfg.gridDim = dim3(sms - sms % ClusterM);
    if (cudaOccupancyMaxActiveClusters(&clusters, kernel, &cfg) != cudaSuccess || clusters <= 0)
      clusters = sms / ClusterM;
    return static_cast<uint32_t>(clusters);
  }();
  const uint32_t units = ((m + G::kBlockM * ClusterM - 1) / (G::kBlockM * ClusterM)) *
                         ((n + G::kBlockN - 1) / G::kBlockN);
  cfg.gridDim = dim3(ClusterM * (units < max_clusters ? units : max_clusters));
  return cudaLaunchKernelEx(&cfg, kernel, a_map, b_map, c_map, m, n, k);
}

}  // namespace detail

// C[m x n] = A[m x k] * B[n x k]^T, all bf16 (raw uint16 storage), row-major, contiguous.
// Needs k % 8 == 0 and n % 8 == 0 (TMA row strides are multiples of 16 bytes).
// cluster_m: 1, or 2 to share B tiles between vertically adjacent CTAs by TMA multicast.
inline cudaError_t gemm_bf16(const uint16_t* a, const uint16_t* b, uint16_t* c, uint32_t m,
                             uint32_t n, uint32_t k, cudaStream_t stream, uint32_t cluster_m = 1) {
  using G = GemmBf16;
  if (m == 0 || n == 0 || k == 0 || k % 8 != 0 || n % 8 != 0) return cudaErrorInvalidValue;
  if (cluster_m != 1 && cluster_m != 2) return cudaErrorInvalidValue;
  const TensorMap a_map =
      encode_2d(TmaDtype::BF16, a, m, k, uint64_t{k} * 2, G::kBlockM, G::kBlockK, Swizzle::B128);
  const TensorMap b_map = encode_2d(TmaDtype::BF16, b, n, k, uint64_t{k} * 2,
                                    G::kBlockN / cluster_m, G::kBlockK, Swizzle::B128);
  const TensorMap c_map =
      encode_2d(TmaDtype::BF16, c, m, n, uint64_t{n} * 2, 64, G::kChunkCols, Swizzle::B128);
  return cluster_m == 1 ? detail::launch_gemm_bf16<1>(a_map, b_map, c_map, m, n, k, stream)
                        : detail::launch_gemm_bf16<2>(a_map, b_map, c_map, m, n, k, stream);
}

}  // namespace hexel::examples
