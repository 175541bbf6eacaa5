// Host launcher for the tile GEMM (gemm_tile.cuh): encodes the tensor maps of A and W and launches
// one CTA per 128 x BlockN tile of C. Compile with nvcc for the accumulator's target: sm_90a for
// WgmmaAccum, sm_100a for Tcgen05Accum.
#pragma once
#include <cuda_runtime.h>

#include "gemm_tile.cuh"
#include "hexel/tensor_map_encode.h"

namespace hexel::examples {

// C[m x n] = A[m x k] · W[n x k]ᵀ, bf16 (raw uint16 storage), row-major, contiguous. Needs
// k % 8 == 0 (TMA row strides are multiples of 16 bytes) and at most 65535 row tiles; m and n
// are otherwise free. Returns cudaErrorInvalidValue for shapes it cannot run.
template <class Accum>
cudaError_t gemm_tile(const uint16_t* a, const uint16_t* w, uint16_t* c, uint32_t m, uint32_t n,
                      uint32_t k, cudaStream_t stream) {
  using Shape = typename Accum::Shape;
  const uint32_t tiles_m = (m + Shape::kBlockM - 1) / Shape::kBlockM;
  const uint32_t tiles_n = (n + Shape::kBlockN - 1) / Shape::kBlockN;
  if (m == 0 || n == 0 || k == 0 || k % 8 != 0 || tiles_m > 65535) return cudaErrorInvalidValue;
  const TensorMap a_map = encode_2d(TmaDtype::BF16, a, m, k, uint64_t{k} * 2, Shape::kBlockM,
                                    Shape::kBlockK, Swizzle::B128);
  const TensorMap w_map = encode_2d(TmaDtype::BF16, w, n, k, uint64_t{k} * 2, Shape::kBlockN,
                                    Shape::kBlockK, Swizzle::B128);
  auto kernel = gemm_tile_kernel<Accum>;
  const cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                               static_cast<int>(Shape::kSmemBytes));
  if (err != cudaSuccess) return err;
  kernel<<<dim3(tiles_n, tiles_m), Accum::kThreads, Shape::kSmemBytes, stream>>>(a_map, w_map, c, m,
                                                                                 n, k);
  return cudaGetLastError();
}

}  // namespace hexel::examples
