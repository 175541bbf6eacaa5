// The TMA tensor map as Hexel code sees it: 128 opaque bytes, 64-byte aligned, built on the host
// (hexel/tensor_map_encode.h) and passed to kernels as `const __grid_constant__ TensorMap`.
// Declared here rather than taken from <cuda.h> so device code compiles under NVRTC.
#pragma once
#include "hexel/config.cuh"

namespace hexel {

struct alignas(64) TensorMap {
  uint64_t opaque[16];
};
static_assert(sizeof(TensorMap) == 128, "a CUtensorMap is 128 bytes");

}  // namespace hexel
