// Warp-level matrix multiply-accumulate from registers (PTX ISA, "Warp Level Matrix Multiply-
// Accumulate Instructions: mma"; the fragment layouts are that section's figures for
// .m16n8k16 with .bf16 / .f16 and .m16n8k32 with .e4m3). Executed by all 32 lanes of a warp.
#pragma once
#include "hexel/config.cuh"

#if defined(__CUDACC__)
namespace hexel {

// Warp: d += a · b, A 16×16 bf16 (row-major), B 16×8 bf16 (column-major), f32 accumulators. Lane
// l (g = l / 4, c = l % 4): a[0..3] hold A[g (+8)][2c (+8) + {0, 1}] (a0: rows g, cols 2c; a1: row
// g + 8; a2: cols + 8; a3: both), b0 / b1 hold B[2c (+8) + {0, 1}][g], d[0..3] hold D[g (+8)][2c
// + {0, 1}]. PTX: mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32.
HEXEL_DEVICE void mma_m16n8k16_bf16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                    uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, "
      "{%0, %1, %2, %3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Warp: d += a · b as mma_m16n8k16_bf16, the operands f16 (the same fragment layout).
// PTX: mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32.
HEXEL_DEVICE void mma_m16n8k16_f16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                   uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, "
      "{%0, %1, %2, %3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Warp: d += a · b, A 16×32 e4m3 (row-major), B 32×8 e4m3 (column-major), f32 accumulators (sm_89
// and later). Lane l (g = l / 4, c = l % 4), each register four elements, the lowest k in the low
// byte: a0 holds A[g][4c .. 4c + 3], a1 row g + 8, a2 columns 16 + 4c .., a3 both; b0 holds
// B[4c .. 4c + 3][g], b1 rows 16 + 4c ..; d as the bf16 form's. So a row of A or a column of B is
// 32 consecutive bytes of K, which ldmatrix (8x8 b16 matrices = 8 rows of 16 bytes) loads as is.
// PTX: mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32.
HEXEL_DEVICE void mma_m16n8k32_e4m3(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                    uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, "
      "{%0, %1, %2, %3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

}  // namespace hexel
#endif
