// Warp-wide 8x8 b16 matrix loads and stores between shared memory and the mma fragment layout
// (PTX ISA, "Warp Level Matrix Instructions: ldmatrix", "stmatrix"). Lane l supplies the row
// address of row l%8 of matrix l/8; after the load, lane l holds elements (l/4, 2(l%4)+{0,1})
// of each matrix (.trans: the transposed matrix). Counts X = 1, 2 or 4 matrices.
#pragma once
#include "hexel/config.cuh"

#if defined(__CUDACC__)
namespace hexel {

template <int X, bool Trans = false>
HEXEL_DEVICE void ldmatrix(uint32_t (&r)[X], uint32_t row_addr) {
  static_assert(X == 1 || X == 2 || X == 4, "ldmatrix loads 1, 2 or 4 matrices");
  if constexpr (X == 1 && !Trans)
    asm volatile("ldmatrix.sync.aligned.m8n8.x1.shared.b16 {%0}, [%1];"
                 : "=r"(r[0])
                 : "r"(row_addr)
                 : "memory");
  if constexpr (X == 1 && Trans)
    asm volatile("ldmatrix.sync.aligned.m8n8.x1.trans.shared.b16 {%0}, [%1];"
                 : "=r"(r[0])
                 : "r"(row_addr)
                 : "memory");
  if constexpr (X == 2 && !Trans)
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];"
                 : "=r"(r[0]), "=r"(r[1])
                 : "r"(row_addr)
                 : "memory");
  if constexpr (X == 2 && Trans)
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];"
                 : "=r"(r[0]), "=r"(r[1])
                 : "r"(row_addr)
                 : "memory");
  if constexpr (X == 4 && !Trans)
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(row_addr)
                 : "memory");
  if constexpr (X == 4 && Trans)
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(row_addr)
                 : "memory");
}

// The inverse of ldmatrix: lane l gives the row address of row l%8 of matrix l/8. A TMA store
// or wgmma reading the result needs fence_proxy_async_smem() first.
template <int X, bool Trans = false>
HEXEL_DEVICE void stmatrix(uint32_t row_addr, const uint32_t (&r)[X]) {
  static_assert(X == 1 || X == 2 || X == 4, "stmatrix stores 1, 2 or 4 matrices");
  if constexpr (X == 1 && !Trans)
    asm volatile("stmatrix.sync.aligned.m8n8.x1.shared.b16 [%0], {%1};" ::"r"(row_addr), "r"(r[0])
                 : "memory");
  if constexpr (X == 1 && Trans)
    asm volatile("stmatrix.sync.aligned.m8n8.x1.trans.shared.b16 [%0], {%1};" ::"r"(row_addr),
                 "r"(r[0])
                 : "memory");
  if constexpr (X == 2 && !Trans)
    asm volatile("stmatrix.sync.aligned.m8n8.x2.shared.b16 [%0], {%1, %2};" ::"r"(row_addr),
                 "r"(r[0]), "r"(r[1])
                 : "memory");
  if constexpr (X == 2 && Trans)
    asm volatile("stmatrix.sync.aligned.m8n8.x2.trans.shared.b16 [%0], {%1, %2};" ::"r"(row_addr),
                 "r"(r[0]), "r"(r[1])
                 : "memory");
  if constexpr (X == 4 && !Trans)
    asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};" ::"r"(row_addr),
                 "r"(r[0]), "r"(r[1]), "r"(r[2]), "r"(r[3])
                 : "memory");
  if constexpr (X == 4 && Trans)
    asm volatile(
        "stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1, %2, %3, %4};" ::"r"(row_addr),
        "r"(r[0]), "r"(r[1]), "r"(r[2]), "r"(r[3])
        : "memory");
}

}  // namespace hexel
#endif
