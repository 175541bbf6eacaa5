#pragma once
// Weight-only FP8: the small-M and prefill GEMMs (gemm_small.cuh, gemm_prefill.cuh) reading e4m3
// weights with f32 block scales (docs/artifact.md, "Weights": w = float(q) · s[r / SBR][c / SBC])
// against bf16 activations. What this file holds is the step the e4m3 forms add: each stage's
// weight block arrives by TMA at one byte an element (half the bf16 bytes, which is what decode,
// bound by weight bytes, gains) and converter threads turn it into the bf16 operand the bf16
// forms' wgmma chain reads.
//
// The arithmetic, which batch invariance fixes. A token's row must be the same bits in every
// bucket, and decode rows also run in prefill buckets' GEMMs, so the small-M and the prefill GEMM
// must compute an e4m3 GEMM alike. Each weight element becomes
//     w' = bf16(float(q) · s)          (the f32 product, rounded to nearest even)
// and the GEMM is then the bf16 GEMM of W' unchanged: one wgmma m64nNk16 chain per output element
// over K in order from zero (wgmma_k_loop, gemm_prefill.cuh) and the bf16 forms' epilogues. So the
// e4m3 small GEMM equals the e4m3 prefill GEMM bit for bit by the bf16 argument (gemm_small.cuh's
// header), and an e4m3 GEMM equals the bf16 GEMM of W' bit for bit. The conversion is exact up to
// that one rounding: e4m3 → f16 is exact (PTX cvt .f16x2.e4m3x2), f16 → f32 too, and the product
// is rounded once to f32 and once to bf16.
//
// Why not the scale after the chain (a bf16 chain over each 128-column scale block from zero,
// then acc += partial · s in f32, DeepGEMM's promotion): that needs a second accumulator set, and
// the prefill GEMM's 128 accumulators a thread (m64n256) leave no room for 128 more under its 232
// registers; it would also wait for the tensor cores at every scale block, and the e4m3 forms
// would no longer share the bf16 chain and its proof. The price of rounding W' to bf16 is one
// relative error of at most 2^-9 a weight, 1/32 of e4m3's own step (2^-4): the same place
// weight-only kernels of group-quantized weights put their scales (Marlin multiplies them into
// the half-precision weights). The CPU reference engine dequantizes the same way
// (executor/cpu_reference_ops.cpp), so its weights are the kernels' bits exactly.
//
// Converters: the e4m3 block of a stage (ROWS rows of 64 bytes, K block kb: TMA's unswizzled box)
// lands in the stage's raw area behind its own barrier (`raw`, the producer's expect_tx). A set of
// converter warps waits for it, writes the bf16 block where TMA would have put a bf16 box (rows of
// 128 bytes, 128B-swizzled), fences (generic-proxy stores, then wgmma reads them) and arrives on
// the stage's full barrier, which counts those warps besides the producer's arrival and its A
// bytes. The consumers then run the bf16 code as it is. A stage's raw area and bf16 block are
// refilled only after the consumers release the stage (the producer's wait on `empty`), so the
// converters never race the next TMA. The scales are read with plain loads (one a 16-byte chunk,
// L1-resident: a tile's scales are a few hundred bytes), before the grid dependency wait like the
// weights (no kernel writes either). The persistent decode layer's e4m3 form
// (decode_layer_persistent_e4m3, decode_persistent.cuh: persistent_convert_phase) converts its
// ring's slots with the same two steps, e4m3_block_to_bf16 and e4m3_stage_converted.
#include "common.cuh"
#include "hexel/ld_st.cuh"
#include "hexel/math.cuh"
#include "hexel/mbarrier.cuh"
#include "hexel/sync.cuh"

namespace telos_kernels {

// The weight format of a GEMM form. Bf16Weight: the weight's bf16 rows go straight to the stage.
// E4m3Weight: an e4m3 weight of W_ROWS rows over K with scales of SBR x SBC blocks, f32
// [ceil(W_ROWS / SBR), ceil(K / SBC)] row-major; its TMA box rows are 64 bytes (one K block) and
// the stage's bf16 block comes from the converters. W8a8Operands (the small-M W8A8 GEMM,
// gemm_small_w8a8.cuh): e4m3 activations and weights straight to the stage, a K block of 128
// columns, the scales applied per K block (gemm_w8a8.cuh). Enumerators (not static constexpr
// variables, which NVRTC emits as globals: gemm_prefill_shape.cuh).
struct Bf16Weight {
  enum : unsigned { kE4m3 = 0, kRawRowBytes = 0, kW8a8 = 0 };
};
struct W8a8Operands {
  enum : unsigned { kE4m3 = 0, kRawRowBytes = 0, kW8a8 = 1 };
};
template <unsigned W_ROWS, unsigned K, unsigned SBR, unsigned SBC>
struct E4m3Weight {
  enum : unsigned { kE4m3 = 1, kRawRowBytes = 64, kW8a8 = 0, kScaleCols = (K + SBC - 1) / SBC };
  static_assert(SBR >= 1 && SBC >= 1 && (SBC % 64 == 0 || SBC >= K),
                "a scale block holds whole 64-column K blocks, or all of K");
  // The scale of weight row `row` in K block kb; 0 for rows past the weight (TMA filled them with
  // zeros and they are never stored).
  __device__ __forceinline__ static float scale(const float* s, unsigned row, unsigned kb) {
    return row < W_ROWS ? __ldg(s + row / SBR * kScaleCols + kb * 64 / SBC) : 0.f;
  }
};

// Sixteen e4m3 of one weight row, scaled by `s`, as sixteen bf16 (two 16-byte chunks of eight):
// bf16(float(q) · s) each, the product rounded once to f32 (no contraction: nothing is added).
__device__ __forceinline__ void e4m3x16_to_bf16(uint4 q, float s, unsigned (&out)[8]) {
  const unsigned words[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
  for (unsigned j = 0; j < 4; ++j)
#pragma unroll
    for (unsigned h = 0; h < 2; ++h) {
      const unsigned f16x2 = hexel::cvt_f16x2_e4m3x2(words[j] >> (16 * h));
      out[2 * j + h] = pack_bf16x2(__fmul_rn(hexel::cvt_f32_f16(f16x2), s),
                                   __fmul_rn(hexel::cvt_f32_f16(f16x2 >> 16), s));
    }
}

// Phase: one stage's e4m3 block of ROWS rows x 64 (K block kb) at `raw` as the bf16 block at `w`,
// by THREADS threads (t their index): each takes 16-byte chunks (row i / 4, chunk i % 4) and writes
// their 32 bytes as the two 16-byte chunks the 128B swizzle puts them in (chunk k of row r at
// r · 128 + (k ^ r % 8) · 16). A quarter warp reads two whole raw rows (128 contiguous bytes) and
// writes two rows of opposite swizzle parity: no bank conflicts. row_of(r): the weight row of the
// block's row r (its scale's row).
template <class WF, unsigned ROWS, unsigned THREADS, class RowOf>
__device__ __forceinline__ void e4m3_block_to_bf16(unsigned raw, unsigned w, const float* scale,
                                                   unsigned kb, unsigned t, RowOf row_of) {
  static_assert(WF::kE4m3, "the converters serve e4m3 weights");
  // Up to eight chunks a thread all in flight at once (a persistent layer's converter warp takes a
  // whole slot); two at a time beyond (a prefill stage's hundreds of rows).
  constexpr unsigned kUnroll = ROWS * 4 / THREADS <= 8 ? 8 : 2;
#pragma unroll kUnroll
  for (unsigned i = t; i < ROWS * 4; i += THREADS) {
    const unsigned r = i / 4, c = i % 4;
    const uint4 q = hexel::ld_shared_v4(raw + r * 64 + c * 16);
    unsigned out[8];
    e4m3x16_to_bf16(q, WF::scale(scale, row_of(r), kb), out);
    const unsigned row = w + r * 128;
    hexel::st_shared_v4(row + ((2 * c) ^ (r % 8)) * 16, out[0], out[1], out[2], out[3]);
    hexel::st_shared_v4(row + ((2 * c + 1) ^ (r % 8)) * 16, out[4], out[5], out[6], out[7]);
  }
}

// After a converter warp's stores of a stage's bf16 block(s): the fence for wgmma (generic-proxy
// stores, then wgmma, the async proxy, reads them), then the warp's one arrival on the stage's full
// barrier `full` (its lane 0, after every lane's stores).
__device__ __forceinline__ void e4m3_stage_converted(unsigned full, unsigned lane) {
  hexel::fence_proxy_async_smem();
  __syncwarp();
  if (lane == 0) hexel::mbarrier::arrive(full);
}

// Phase: the converters' pass over `k_blocks` stages of the ring (continued across a persistent
// CTA's tiles: the caller keeps `ring`): wait for the stage's e4m3 block (raw barrier), convert it
// into the stage's bf16 block, fence for wgmma, and arrive on the stage's full barrier once a warp
// (its lane 0, after the warp's stores). raw_stage(s), w_stage(s): the stage's raw area and bf16
// block; `lane` the thread's.
template <class WF, unsigned ROWS, unsigned THREADS, unsigned STAGES, class RowOf, class RawStage,
          class WStage>
__device__ __forceinline__ void e4m3_convert_stages(hexel::mbarrier::StageRing<STAGES>& ring,
                                                    unsigned k_blocks, unsigned raw_full,
                                                    unsigned full, const float* scale, unsigned t,
                                                    unsigned lane, RowOf row_of, RawStage raw_stage,
                                                    WStage w_stage) {
  using namespace hexel;
  for (unsigned kb = 0; kb < k_blocks; ++kb) {
    mbarrier::wait_parity(raw_full + 8 * ring.index, ring.phase);
    e4m3_block_to_bf16<WF, ROWS, THREADS>(raw_stage(ring.index), w_stage(ring.index), scale, kb, t,
                                          row_of);
    e4m3_stage_converted(full + 8 * ring.index, lane);
    ring.advance();
  }
}

}  // namespace telos_kernels
