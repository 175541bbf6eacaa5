// Warp-level matrix multiply-accumulate from registers (PTX ISA, "Warp Level Matrix Multiply-
// Accumulate Instructions: mma"; the fragment layouts are that section's figures for
// .m16n8k16 with .bf16). Executed by all 32 lanes of a warp.
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

}  // namespace hexel
#endif
