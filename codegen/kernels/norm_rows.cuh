#pragma once
// The norm prologue's resident rows: up to 8 rows of RMSNorm(x) (or of any bf16 activation that a
// kernel keeps for the whole K) in shared memory, in the interleaved layout a K-major MMA operand
// without swizzle reads. Chunk c (eight bf16) of row r lies at byte 16 (c M + r), so a core matrix
// (8 rows of 16 bytes, PTX ISA "Shared Memory Matrix Layout") of chunk c starts at 16 c M, the
// K-adjacent core matrix M · 16 bytes on (the descriptor's leading byte offset), and its rows M ..
// 7 are the next chunks' rows: finite values whose results (rows M .. 7, and every 8-row group
// after the first, read with a stride byte offset of 0) nobody stores. A 128-byte zero tail follows
// the last chunk, for the last core matrix's rows past M. The small GEMM's norm prologue writes it
// (gemm_small.cuh: a_store_chunk, a_finish); wgmma reads it as A (gemm_small.cuh, decode_persistent
// .cuh), tcgen05.mma and the Hopper twins' wgmma as B (gemm_small_sm100.cuh, decode_layer_sm100
// .cuh). Host-callable: the tests check it against wgmma's and the tcgen05 model's reading.
#include "hexel/config.cuh"

namespace telos_kernels {

// The resident bytes of m rows of `chunks` chunks: the rows, the zero tail, rounded up to whole
// KB so that what follows stays 1024-byte aligned.
HEXEL_HOST_DEVICE constexpr unsigned norm_rows_bytes(unsigned m, unsigned chunks) {
  return (chunks * m * 16 + 128 + 1023) / 1024 * 1024;
}

template <unsigned M>
struct NormRows {
  static_assert(M >= 1 && M <= 8, "the rows of one core matrix");
  enum : unsigned {
    kLbo = 16 * M,  // the leading byte offset: from one K chunk's core matrix to the next
    kSbo = 0,       // the stride byte offset: 8-row groups past the first read the first again
  };
  // Byte offset of chunk c of row r.
  static HEXEL_HOST_DEVICE constexpr unsigned chunk_offset(unsigned c, unsigned r) {
    return 16 * (c * M + r);
  }
  // Byte offset of K step kk (16 elements: two chunks) of the 64-wide K block kb, row 0.
  static HEXEL_HOST_DEVICE constexpr unsigned step_offset(unsigned kb, unsigned kk) {
    return chunk_offset(8 * kb + 2 * kk, 0);
  }
  static HEXEL_HOST_DEVICE constexpr unsigned bytes(unsigned chunks) {
    return norm_rows_bytes(M, chunks);
  }
};

}  // namespace telos_kernels
