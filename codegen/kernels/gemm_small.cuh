#pragma once
// The small-M GEMM: y = A · Wᵀ for buckets below the prefill GEMM's (decode, short prefill), on
// the same instructions as the prefill GEMM (gemm_prefill.cuh) so that a token's row is the same
// bits in every bucket (batch invariance, issue 4). Every output element is one wgmma
// m64nNk16 chain over K in 64-element blocks, 16 at a time, in order, accumulating in f32 from
// zero, and the epilogues are the prefill GEMM's arithmetic: the per-element result of wgmma
// depends on the row of A and the column of B only, not on the instruction's N or on which
// 64-row slab of the M tile holds the row (gpu_kernels_test checks this bit for bit).
//
// Shape: the tokens are the A operand, 64 rows per CTA (the M tile of one consumer warpgroup);
// their map is built over the bucket's T rows, so TMA zero-fills rows past T and reads only T
// rows from memory. The weights stream as the B operand in narrow tiles of BN rows (the grid has
// one CTA per (64-token tile, BN weight rows), enough CTAs to cover the GPU), through a ring of
// STAGES shared-memory stages: the bytes in flight per SM are what let a weight-streaming GEMM
// reach the memory bandwidth, so the plan gives it as many stages as shared memory allows for the
// CTAs that share an SM. No split of K: it would change the reduction order.
//
// Warp roles: warps 0-3 are the consumer warpgroup (wgmma needs a warpgroup aligned to 4 warps),
// warp 4's first lane the TMA producer. Registers are few (BN / 2 accumulators), so no setmaxnreg.
//
// blockIdx.x is the M tile, blockIdx.y the weight tile: the CTAs that read the same weight tile
// run side by side and share it in L2.
#include "gemm_prefill.cuh"

namespace telos_kernels {

struct SmallGemm {
  static constexpr unsigned kBlockM = 64;
  static constexpr unsigned kBlockK = PrefillGemm::kBlockK;
  static constexpr unsigned kThreads = 128 + 32;
  static constexpr unsigned kABytes = hexel::tma::tile_bytes<unsigned short>(kBlockK, kBlockM);
};
// Dynamic shared memory (codegen: SmallGemmTiling::smem): STAGES stages of (64 + BN) x 64 bf16,
// full[] and empty[] barriers, +1024 to align the base to the 128B swizzle repeat.

// Epilogue kinds; the arithmetic of each is its prefill counterpart's (EpilogueStoreBf16,
// EpilogueResidual, EpilogueSwiGlu).
enum class SmallEpi { StoreBf16, Residual, SwiGlu };

// BN weight rows per tile (for SwiGLU: BN / 2 gate rows then their BN / 2 up rows); N output
// columns (SwiGLU: I, with W [2I, K]). `out` is bf16 [M, N] (StoreBf16, SwiGlu) or the f32
// residual stream x [M, N] (Residual).
template <int M, int N, int K, int BN, int STAGES, SmallEpi EPI>
__device__ __forceinline__ void small_gemm_body(const TensorMap* a_map, const TensorMap* w_map, void* out) {
  using G = SmallGemm;
  using namespace hexel;
  static_assert(M > 0 && N % 8 == 0 && K % 8 == 0, "TMA rows are multiples of 16 bytes");
  static_assert(BN % 16 == 0 && BN >= 16 && BN <= 256, "wgmma N, and whole 8-column blocks per half");
  static_assert(STAGES >= 2, "one stage computes while the next loads");
  constexpr bool kSplitW = EPI == SmallEpi::SwiGlu;
  constexpr unsigned kOutCols = kSplitW ? BN / 2 : BN;
  constexpr unsigned kWBytes = BN * G::kBlockK * 2;
  constexpr unsigned kStageBytes = G::kABytes + kWBytes;
  constexpr unsigned k_blocks = (K + G::kBlockK - 1) / G::kBlockK;
  extern __shared__ unsigned char smem_raw[];
  const unsigned base = (smem_addr(smem_raw) + 1023u) & ~1023u;
  const unsigned full = base + STAGES * kStageBytes;
  const unsigned empty = full + STAGES * 8;
  auto a_stage = [&](unsigned s) { return base + s * kStageBytes; };
  auto w_stage = [&](unsigned s) { return base + s * kStageBytes + G::kABytes; };
  const unsigned tm = blockIdx.x, tn = blockIdx.y;

  if (threadIdx.x == 0) {
    acquire_tensor_map(a_map);
    acquire_tensor_map(w_map);
    tma::prefetch_map(a_map);
    tma::prefetch_map(w_map);
    for (unsigned s = 0; s < STAGES; ++s) {
      mbarrier::init(full + 8 * s, 1);
      mbarrier::init(empty + 8 * s, 4);  // one arrival per consumer warp
    }
    mbarrier::fence_init();
  }
  __syncthreads();

  if (warp_index() == 4) {
    if (threadIdx.x % 32 == 0) {
      mbarrier::StageRing<STAGES> ring;
      for (unsigned kb = 0; kb < k_blocks; ++kb) {
        mbarrier::wait_parity(empty + 8 * ring.index, ring.phase ^ 1u);
        const unsigned bar = full + 8 * ring.index;
        // Out-of-bounds box elements count too: the stage always receives kStageBytes.
        mbarrier::arrive_expect_tx(bar, kStageBytes);
        tma::load(a_stage(ring.index), a_map, bar, kb * G::kBlockK, tm * G::kBlockM);
        if constexpr (kSplitW) {
          tma::load(w_stage(ring.index), w_map, bar, kb * G::kBlockK, tn * kOutCols);
          tma::load(w_stage(ring.index) + kOutCols * 128, w_map, bar, kb * G::kBlockK, N + tn * kOutCols);
        } else {
          tma::load(w_stage(ring.index), w_map, bar, kb * G::kBlockK, tn * BN);
        }
        ring.advance();
      }
    }
    return;
  }

  const unsigned warp = warp_index();
  const unsigned lane = threadIdx.x % 32;
  mbarrier::StageRing<STAGES> ring;
  float d[BN / 2];
  wgmma_k_loop<BN>(d, ring, k_blocks, full, empty, lane, a_stage, w_stage);
  // The last stage needs no release: nothing loads after it.

  // d[4j + 2h + e]: row 16 warp + lane / 4 + 8h, column 8j + 2 (lane % 4) + e of the tile.
#pragma unroll
  for (unsigned h = 0; h < 2; ++h) {
    const unsigned m = tm * G::kBlockM + 16 * warp + lane / 4 + 8 * h;
    if (m >= static_cast<unsigned>(M)) continue;
#pragma unroll
    for (unsigned j = 0; j < kOutCols / 8; ++j) {
      const unsigned n = tn * kOutCols + 8 * j + 2 * (lane % 4);
      if (n >= static_cast<unsigned>(N)) continue;
      const long long at = static_cast<long long>(m) * N + n;
      if constexpr (EPI == SmallEpi::Residual) {
        float2* p = reinterpret_cast<float2*>(static_cast<float*>(out) + at);
        float2 v = *p;
        v.x = add_rn_ftz(v.x, d[4 * j + 2 * h]);
        v.y = add_rn_ftz(v.y, d[4 * j + 2 * h + 1]);
        *p = v;
      } else if constexpr (EPI == SmallEpi::SwiGlu) {
        constexpr unsigned kUp = 4 * (kOutCols / 8);
        *reinterpret_cast<unsigned*>(static_cast<bf16*>(out) + at) =
            pack_bf16x2(EpilogueSwiGlu::act(d[4 * j + 2 * h], d[kUp + 4 * j + 2 * h]),
                        EpilogueSwiGlu::act(d[4 * j + 2 * h + 1], d[kUp + 4 * j + 2 * h + 1]));
      } else {
        *reinterpret_cast<unsigned*>(static_cast<bf16*>(out) + at) =
            pack_bf16x2(d[4 * j + 2 * h], d[4 * j + 2 * h + 1]);
      }
    }
  }
}

// y[m, n] = bf16((A · Wᵀ)[m, n]): the QKV projection (then qkv_rope_append_rows, as in prefill).
// A map: [M, K], 64 x 64 boxes; W map: [N, K], BN x 64 boxes.
template <int M, int N, int K, int BN, int STAGES>
__global__ void __launch_bounds__(SmallGemm::kThreads)
    gemm_small_bf16(const TensorMap* a_map, const TensorMap* w_map, bf16* y) {
  pdl_entry();
  small_gemm_body<M, N, K, BN, STAGES, SmallEpi::StoreBf16>(a_map, w_map, y);
}

// x[m, n] += (A · Wᵀ)[m, n], x the f32 residual stream: the attention output and down projections.
template <int M, int N, int K, int BN, int STAGES>
__global__ void __launch_bounds__(SmallGemm::kThreads)
    gemm_small_residual(const TensorMap* a_map, const TensorMap* w_map, float* x) {
  pdl_entry();
  small_gemm_body<M, N, K, BN, STAGES, SmallEpi::Residual>(a_map, w_map, x);
}

// act[m, j] = bf16(silu(g) · u), g = (A · Wᵀ)[m, j], u = (A · Wᵀ)[m, I + j], W = gate_up [2I, K]
// (map with BN / 2-row boxes).
template <int M, int I, int K, int BN, int STAGES>
__global__ void __launch_bounds__(SmallGemm::kThreads)
    gemm_small_swiglu(const TensorMap* a_map, const TensorMap* w_map, bf16* act) {
  pdl_entry();
  small_gemm_body<M, I, K, BN, STAGES, SmallEpi::SwiGlu>(a_map, w_map, act);
}

}  // namespace telos_kernels
