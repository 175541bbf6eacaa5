#pragma once
// The small-M W8A8 GEMM: the W8A8 arithmetic (gemm_w8a8.cuh) for the buckets below the prefill
// GEMM's, so that a token's row has the same bits in every bucket (batch invariance) once a
// model's linears take W8A8. The kernels are gemm_small.cuh's (small_gemm_body with WF =
// W8a8Operands): its producer, stage ring, tiling (one consumer warpgroup on 64 rows of A, BN
// weight rows a CTA, blockIdx.x the M tile and blockIdx.y the weight tile) and epilogues, with
// the W8A8 prefill GEMM's K loop (w8a8_k_loop).
//
// Operands: A is quantize_rows_e4m3's e4m3 rows [M, K] with their f32 scales [M, ceil(K / 128)],
// W an e4m3 weight [N, K] (SwiGLU [2I, K]) with one f32 scale a 128 x 128 block, both K-major
// through maps over one-byte elements with the 128B swizzle: A in boxes of min(M, 64) rows and
// 128 columns, W in BN x 128 boxes (SwiGLU BN / 2). A stage is one K block of 128 columns: the A
// rows (one 8-row group up to 8 tokens, read with group stride 0, as gemm_small.cuh's bf16 forms
// do) and the BN weight rows, 128 bytes each, so a stage has the bf16 forms' bytes
// (SmallGemmTiling::smem).
//
// Bits: every output element is the W8A8 prefill GEMM's (gemm_prefill_w8a8_*): per K block, in
// order, the chain of four wgmma m64nBNk32 e4m3 from zero over the block's 128 products
// (w8a8_block_mma), then acc = fma(partial, sa · sw, acc) with the scale product rounded to f32
// first and acc from +0 (w8a8_promote), then the same epilogue arithmetic (gemm_small.cuh's
// small_gemm_store: pack_bf16x2, EpilogueSwiGlu::act, the f32 add into x in L2). This rests on
// wgmma's per-element result depending only on the row of A and the column of W it multiplies,
// not on the instruction's N (BN here, 128 in the prefill GEMM) nor on the row's position among
// the instruction's 64 (the bf16 small-M GEMM relies on the same; gpu_kernels_test's
// W8a8SmallGemmRowsMatchPrefillGemm checks it bit for bit).
//
// Tiles: BN divides 128, so a weight tile's rows lie in one scale block (SwiGLU: its BN / 2 gate
// rows and their up rows, N a multiple of BN / 2); no clusters, one consumer warpgroup and one K
// block a stage (codegen::small_gemm_w8a8_tiling). Ragged shapes are the prefill GEMM's: TMA
// zero-fills columns past K and rows past N, and rows past M (their scales read as 0) are not
// stored.
#include "gemm_small.cuh"

namespace telos_kernels {

// y[m, n] = bf16((A · Wᵀ)[m, n]); y bf16 [M, N].
template <int M, int N, int K, int BN, int STAGES>
__global__ void __launch_bounds__(SmallGemm::kThreads)
    gemm_small_w8a8_bf16(const TensorMap* a_map, const float* a_scale, const TensorMap* w_map,
                         const float* w_scale, bf16* y) {
  hexel::launch_dependents();  // the wait is in the body
  small_gemm_body<M, N, K, BN, STAGES, SmallEpi::StoreBf16, false, 0.f, 1, 1, 1, 0, 0,
                  W8a8Operands>(a_map, nullptr, nullptr, w_map, y, nullptr, w_scale, a_scale);
}

// x[m, n] += (A · Wᵀ)[m, n], x the f32 residual stream [M, N].
template <int M, int N, int K, int BN, int STAGES>
__global__ void __launch_bounds__(SmallGemm::kThreads)
    gemm_small_w8a8_residual(const TensorMap* a_map, const float* a_scale, const TensorMap* w_map,
                             const float* w_scale, float* x) {
  hexel::launch_dependents();
  small_gemm_body<M, N, K, BN, STAGES, SmallEpi::Residual, false, 0.f, 1, 1, 1, 0, 0, W8a8Operands>(
      a_map, nullptr, nullptr, w_map, x, nullptr, w_scale, a_scale);
}

// act[m, j] = bf16(silu(g) · u), g = (A · Wᵀ)[m, j], u = (A · Wᵀ)[m, I + j], W = gate_up [2I, K];
// act bf16 [M, I].
template <int M, int I, int K, int BN, int STAGES>
__global__ void __launch_bounds__(SmallGemm::kThreads)
    gemm_small_w8a8_swiglu(const TensorMap* a_map, const float* a_scale, const TensorMap* w_map,
                           const float* w_scale, bf16* act) {
  hexel::launch_dependents();
  small_gemm_body<M, I, K, BN, STAGES, SmallEpi::SwiGlu, false, 0.f, 1, 1, 1, 0, 0, W8a8Operands>(
      a_map, nullptr, nullptr, w_map, act, nullptr, w_scale, a_scale);
}

// y[m, n] = (A · Wᵀ)[m, n] in f32 with each row's greedy candidate of every weight tile (cand [M,
// N / BN]): the LM head on W8A8, gemm_small_f32cand's epilogue; y f32 [M, N].
template <int M, int N, int K, int BN, int STAGES>
__global__ void __launch_bounds__(SmallGemm::kThreads)
    gemm_small_w8a8_f32cand(const TensorMap* a_map, const float* a_scale, const TensorMap* w_map,
                            const float* w_scale, float* y, unsigned long long* cand) {
  hexel::launch_dependents();
  small_gemm_body<M, N, K, BN, STAGES, SmallEpi::F32Cand, false, 0.f, 1, 1, 1, 0, 0, W8a8Operands>(
      a_map, nullptr, nullptr, w_map, y, cand, w_scale, a_scale);
}

}  // namespace telos_kernels
