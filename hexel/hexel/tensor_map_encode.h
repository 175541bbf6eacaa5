// Host side of TMA: encodes a tiled tensor map (cuTensorMapEncodeTiled) through the runtime's
// driver entry point, so nothing links libcuda. Host-only; device code includes tensor_map.cuh.
#pragma once
#if defined(__CUDACC_RTC__)
#error "hexel/tensor_map_encode.h is host code; device code includes hexel/tensor_map.cuh"
#endif

#include <cudaTypedefs.h>
#include <cuda_runtime.h>

#include <cstring>
#include <stdexcept>
#include <string>

#include "hexel/swizzle.cuh"
#include "hexel/tensor_map.cuh"

namespace hexel {

enum class TmaDtype { U8, BF16, F16, F32 };

inline uint32_t tma_dtype_bytes(TmaDtype t) {
  return t == TmaDtype::U8 ? 1 : t == TmaDtype::F32 ? 4 : 2;
}

// A tiled view of global memory: `rank` dimensions, innermost first, like the PTX coordinates.
struct TensorMapSpec {
  TmaDtype dtype = TmaDtype::BF16;
  uint32_t rank = 2;
  const void* base = nullptr;
  uint64_t dims[5] = {1, 1, 1, 1, 1};        // elements per dimension
  uint64_t strides_bytes[4] = {0, 0, 0, 0};  // byte stride of dimensions 1..rank-1
  uint32_t box[5] = {1, 1, 1, 1, 1};         // elements per box dimension, each <= 256
  Swizzle swizzle = Swizzle::None;
};

namespace detail {
inline PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder() {
  static PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult status{};
    cudaError_t err = cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000,
                                                       cudaEnableDefault, &status);
    if (err != cudaSuccess || status != cudaDriverEntryPointSuccess || p == nullptr)
      throw std::runtime_error(
          "hexel: cuTensorMapEncodeTiled is not available from the driver (needs a CUDA 12+ "
          "driver)");
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(p);
  }();
  return fn;
}

inline void require(bool ok, const std::string& what) {
  if (!ok) throw std::runtime_error("hexel: tensor map: " + what);
}
}  // namespace detail

// Checks the PTX/driver constraints first so a bad spec is an error naming the field, then
// encodes. Throws std::runtime_error.
inline TensorMap encode_tiled(const TensorMapSpec& s) {
  using detail::require;
  require(s.rank >= 1 && s.rank <= 5, "rank must be 1..5, got " + std::to_string(s.rank));
  require(reinterpret_cast<uintptr_t>(s.base) % 16 == 0, "base address must be 16-byte aligned");
  const uint32_t esize = tma_dtype_bytes(s.dtype);
  for (uint32_t i = 0; i < s.rank; ++i) {
    require(s.box[i] >= 1 && s.box[i] <= 256,
            "box[" + std::to_string(i) + "] must be 1..256, got " + std::to_string(s.box[i]));
    require(s.dims[i] >= 1, "dims[" + std::to_string(i) + "] must be >= 1");
  }
  for (uint32_t i = 0; i + 1 < s.rank; ++i)
    require(s.strides_bytes[i] % 16 == 0, "strides_bytes[" + std::to_string(i) +
                                              "] must be a multiple of 16, got " +
                                              std::to_string(s.strides_bytes[i]));
  require((s.box[0] * esize) % 16 == 0, "box[0] must span a multiple of 16 bytes");
  if (s.swizzle != Swizzle::None)
    require(s.box[0] * esize <= static_cast<uint32_t>(s.swizzle),
            "box[0] spans " + std::to_string(s.box[0] * esize) +
                " bytes, more than the swizzle span of " +
                std::to_string(static_cast<uint32_t>(s.swizzle)));

  CUtensorMapDataType dt = s.dtype == TmaDtype::U8     ? CU_TENSOR_MAP_DATA_TYPE_UINT8
                           : s.dtype == TmaDtype::BF16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
                           : s.dtype == TmaDtype::F16  ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16
                                                       : CU_TENSOR_MAP_DATA_TYPE_FLOAT32;
  CUtensorMapSwizzle sw = s.swizzle == Swizzle::B128  ? CU_TENSOR_MAP_SWIZZLE_128B
                          : s.swizzle == Swizzle::B64 ? CU_TENSOR_MAP_SWIZZLE_64B
                          : s.swizzle == Swizzle::B32 ? CU_TENSOR_MAP_SWIZZLE_32B
                                                      : CU_TENSOR_MAP_SWIZZLE_NONE;
  cuuint64_t dims[5];
  cuuint64_t strides[4];
  cuuint32_t box[5];
  cuuint32_t elem_strides[5] = {1, 1, 1, 1, 1};
  for (uint32_t i = 0; i < 5; ++i) {
    dims[i] = s.dims[i];
    box[i] = s.box[i];
  }
  for (uint32_t i = 0; i < 4; ++i) strides[i] = s.strides_bytes[i];

  CUtensorMap raw;
  CUresult r = detail::tensor_map_encoder()(
      &raw, dt, s.rank, const_cast<void*>(s.base), dims, strides, box, elem_strides,
      CU_TENSOR_MAP_INTERLEAVE_NONE, sw, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
      CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  require(r == CUDA_SUCCESS, "cuTensorMapEncodeTiled failed with CUresult " + std::to_string(r));
  static_assert(sizeof(CUtensorMap) == sizeof(TensorMap), "TensorMap must mirror CUtensorMap");
  TensorMap m;
  std::memcpy(&m, &raw, sizeof m);
  return m;
}

// The common case: a row-major matrix of `rows` x `cols` elements with `row_stride_bytes`
// between rows, read in boxes of box_rows x box_cols.
inline TensorMap encode_2d(TmaDtype dtype, const void* base, uint64_t rows, uint64_t cols,
                           uint64_t row_stride_bytes, uint32_t box_rows, uint32_t box_cols,
                           Swizzle swizzle) {
  TensorMapSpec s;
  s.dtype = dtype;
  s.rank = 2;
  s.base = base;
  s.dims[0] = cols;
  s.dims[1] = rows;
  s.strides_bytes[0] = row_stride_bytes;
  s.box[0] = box_cols;
  s.box[1] = box_rows;
  s.swizzle = swizzle;
  return encode_tiled(s);
}

// A row-major bf16 matrix of `rows` x `cols` (cols a multiple of 64, rows packed) viewed with its
// 64-column K blocks as the outermost dimension: rank 3, [cols / 64][rows][64], or with halves = 2
// rank 4, [cols / 64][2][rows / 2][64] (the second half of the rows after the first, a SwiGLU
// gate/up weight), the 128-byte swizzle. A box of box_rows rows (of each half) by k_blocks K blocks
// lands in shared memory as its K blocks one after another, each its rows (the first half's, then
// the second's), as k_blocks · halves boxes of the 2D map (encode_2d, 64 columns) would place them:
// one copy instead of several (a copy costs the issuing SM about the same whatever its size;
// docs/performance.md). The K-block stride (128 bytes) is below the row stride: the view's
// dimensions are not ordered by stride, which the PTX tensor copy allows (a tensor map's strides
// are per dimension).
inline TensorMap encode_k_blocks(const void* base, uint64_t rows, uint64_t cols, uint32_t box_rows,
                                 uint32_t k_blocks, uint32_t halves) {
  detail::require(cols % 64 == 0, "K-block view: cols must be whole 64-column blocks");
  detail::require(halves == 1 || (halves == 2 && rows % 2 == 0),
                  "K-block view: halves must be 1, or 2 with an even row count");
  TensorMapSpec s;
  s.dtype = TmaDtype::BF16;
  s.base = base;
  s.swizzle = Swizzle::B128;
  s.rank = halves == 1 ? 3 : 4;
  const uint64_t rows_per_half = rows / halves;
  s.dims[0] = 64;
  s.dims[1] = rows_per_half;
  s.strides_bytes[0] = cols * 2;
  s.box[0] = 64;
  s.box[1] = box_rows;
  if (halves == 1) {
    s.dims[2] = cols / 64;
    s.strides_bytes[1] = 128;
    s.box[2] = k_blocks;
  } else {
    s.dims[2] = 2;
    s.dims[3] = cols / 64;
    s.strides_bytes[1] = rows_per_half * cols * 2;
    s.strides_bytes[2] = 128;
    s.box[2] = 2;
    s.box[3] = k_blocks;
  }
  return encode_tiled(s);
}

}  // namespace hexel
