#pragma once
// The first piece of the persistent decode kernel (issue 7: a decode step's launches each pay a
// boundary of ~4.5 µs in which the weight stream stops, docs/perf-log.md run K). Here: the four
// GEMMs of a layer (qkv; o with the residual; gate/up with SwiGLU; down with the residual), for
// LAYERS layers, in one launch of one CTA per SM. Each CTA's producer streams the weight boxes of
// all its tiles, phase after phase and layer after layer, through one ring of shared memory without
// ever waiting for activations; the consumers wait at each phase for a grid-wide count (every CTA
// has finished the previous phase's stores), load the phase's activations into a resident A and
// run their tiles. So the memory system keeps streaming across the phase boundaries, which a kernel
// boundary cannot (the ring drains while the grid completes and the next one starts). telos-kernel-
// bench times it against the same GEMMs as separate kernels ("layer GEMMs"); no plan uses it yet.
//
// Bits: every output element is the same wgmma m64nNk16 chain over K, in 64-element blocks in
// order from zero, as gemm_small_* computes it (the per-element result does not depend on the
// instruction's N), with the interleaved resident A of the norm prologue (gemm_small.cuh) and the
// same epilogue arithmetic; gpu_kernels_test compares them bit for bit.
//
// Tiles: 32 weight rows (qkv, o, down; 4 KB a K block) or 32 gate + 32 up rows (gate/up; 8 KB a
// K block); a ring slot is 8 KB: two K blocks of a 32-row tile, or one of a gate/up tile. Tile g
// of the whole launch (layers, then phases, then tiles in order) belongs to CTA g mod gridDim.x,
// so every CTA streams about as many bytes as any other over a layer, and a CTA with no tile in a
// phase streams its next phase's weights meanwhile.
//
// Grid-wide count (sync[0], zero at launch): a CTA's consumers add 1 when they have finished a
// phase's stores (a fence first), after having waited for the phase to start (count >= phase ·
// gridDim.x), so the count only reaches p · gridDim.x when every CTA has finished phases < p. The
// last CTA to finish (sync[1]) returns both to zero for the next launch. Every CTA must be resident
// at once: one CTA per SM (the shared memory takes more than half an SM) and gridDim.x <= SMs.
#include "gemm_small.cuh"

namespace telos_kernels {

struct LayerGemms {
  static constexpr unsigned kSlotBytes = 8192;
  static constexpr unsigned kThreads = 128 + 32;
};

// The four GEMMs of a layer, by phase (0 qkv, 1 o, 2 gate/up, 3 down): K, and tiles (32 output
// columns each).
template <int H, int NQKV, int I>
struct LayerGemmOps {
  static constexpr int kMaxK = H > I ? H : I;
  __device__ static constexpr unsigned k(int op) { return op == 3 ? I : H; }
  __device__ static constexpr unsigned tiles(int op) { return (op == 0 ? NQKV : op == 2 ? I : H) / 32; }
};

// One tile of layer_gemms_persistent: BN weight rows (32, or 64 for gate/up), the K blocks in
// order, each its four k16 steps (wgmma_k_loop's sequence, gemm_prefill.cuh), from the ring's
// slots (KB_PER_SLOT K blocks each) and the resident interleaved A at `a_base`; then
// gemm_small_body's epilogue for output columns t · kOutCols ...
template <int M, unsigned BN, SmallEpi EPI, unsigned STAGES>
__device__ __forceinline__ void layer_gemm_tile(hexel::mbarrier::StageRing<STAGES>& ring, unsigned a_base,
                                                unsigned ring_base, unsigned full, unsigned empty, unsigned t,
                                                unsigned K, unsigned N, void* out) {
  using namespace hexel;
  constexpr unsigned kALbo = M * 16;
  constexpr unsigned kBlocksPerSlot = BN == 64 ? 1 : 2;
  constexpr unsigned kOutCols = EPI == SmallEpi::SwiGlu ? BN / 2 : BN;
  const unsigned warp = warp_index(), lane = threadIdx.x % 32;
  float d[BN / 2];
  const unsigned slots = K / 64 / kBlocksPerSlot;
  unsigned prev = 0;
  for (unsigned sl = 0; sl < slots; ++sl) {
    mbarrier::wait_parity(full + 8 * ring.index, ring.phase);
    const unsigned slot = ring_base + ring.index * LayerGemms::kSlotBytes;
    wgmma::fence();
#pragma unroll
    for (unsigned j = 0; j < kBlocksPerSlot; ++j) {
      const unsigned kb = sl * kBlocksPerSlot + j;
      const auto a = wgmma::SmemDesc::make(a_base + kb * 8 * M * 16, Swizzle::None, kALbo, 0);
      const auto b = wgmma::kmajor_desc(slot + j * 4096, Swizzle::B128);
#pragma unroll
      for (unsigned kk = 0; kk < 4; ++kk)
        wgmma::mma_ss<BN>(d, a.advanced(kk * 2 * kALbo), b.advanced(kk * 32), kb > 0 || kk > 0);
    }
    wgmma::commit_group();
    wgmma::wait_group<1>();
    if (sl > 0 && lane == 0) mbarrier::arrive(empty + 8 * prev);
    prev = ring.index;
    ring.advance();
  }
  wgmma::wait_group<0>();
  wgmma::fence_operand(d);
  if (lane == 0) mbarrier::arrive(empty + 8 * prev);
#pragma unroll
  for (unsigned hh = 0; hh < 2; ++hh) {
    const unsigned m = 16 * warp + lane / 4 + 8 * hh;
    if (m >= static_cast<unsigned>(M)) continue;
#pragma unroll
    for (unsigned j = 0; j < kOutCols / 8; ++j) {
      const unsigned n = t * kOutCols + 8 * j + 2 * (lane % 4);
      const long long at = static_cast<long long>(m) * N + n;
      if constexpr (EPI == SmallEpi::Residual) {
        float2* p = reinterpret_cast<float2*>(static_cast<float*>(out) + at);
        float2 v = __ldcg(p);
        v.x = add_rn_ftz(v.x, d[4 * j + 2 * hh]);
        v.y = add_rn_ftz(v.y, d[4 * j + 2 * hh + 1]);
        *p = v;
      } else if constexpr (EPI == SmallEpi::SwiGlu) {
        constexpr unsigned kUp = 4 * (kOutCols / 8);
        *reinterpret_cast<unsigned*>(static_cast<bf16*>(out) + at) =
            pack_bf16x2(EpilogueSwiGlu::act(d[4 * j + 2 * hh], d[kUp + 4 * j + 2 * hh]),
                        EpilogueSwiGlu::act(d[4 * j + 2 * hh + 1], d[kUp + 4 * j + 2 * hh + 1]));
      } else {
        *reinterpret_cast<unsigned*>(static_cast<bf16*>(out) + at) =
            pack_bf16x2(d[4 * j + 2 * hh], d[4 * j + 2 * hh + 1]);
      }
    }
  }
}

// maps: [LAYERS][4] weight maps (qkv, o, down: 32 x 64 boxes of [N, K]; gate/up: 32 x 64 boxes of
// [2I, K]). A of each phase: h (qkv), attn (o), h2 (gate/up), act (down), bf16 [M, K]; outputs qkv
// (bf16 [M, NQKV]), x (f32 [M, H], += for o and down), act (bf16 [M, I]).
template <int M, int H, int NQKV, int I, int LAYERS, int STAGES>
__global__ void __launch_bounds__(LayerGemms::kThreads, 1)
    layer_gemms_persistent(const TensorMap* maps, const bf16* h, const bf16* attn, const bf16* h2, bf16* act,
                           bf16* qkv, float* x, unsigned* sync) {
  using namespace hexel;
  using Ops = LayerGemmOps<H, NQKV, I>;
  static_assert(M >= 1 && M <= 8, "one 8-row group of A, read with group stride 0");
  static_assert(H % 128 == 0 && I % 128 == 0 && NQKV % 32 == 0, "whole tiles and two K blocks a slot");
  constexpr unsigned kAResident = (Ops::kMaxK / 8 * M * 16 + 128 + 1023) / 1024 * 1024;
  extern __shared__ unsigned char smem_raw[];
  const unsigned base = (smem_addr(smem_raw) + 1023u) & ~1023u;
  const unsigned ring_base = base + kAResident;
  const unsigned full = ring_base + STAGES * LayerGemms::kSlotBytes;
  const unsigned empty = full + STAGES * 8;
  const unsigned G = gridDim.x, cta = blockIdx.x;
  // This CTA's first tile in a phase whose tiles start at global index g0.
  auto first_tile = [&](unsigned g0) { return (cta + G - g0 % G) % G; };

  if (threadIdx.x == 0) {
    for (unsigned s = 0; s < STAGES; ++s) {
      mbarrier::init(full + 8 * s, 1);
      mbarrier::init(empty + 8 * s, 4);  // one arrival per consumer warp
    }
    mbarrier::fence_init();
  }
  __syncthreads();

  if (warp_index() == 4) {
    if (threadIdx.x % 32 != 0) return;
    mbarrier::StageRing<STAGES> ring;
    unsigned g0 = 0;
    for (int l = 0; l < LAYERS; ++l)
      for (int op = 0; op < 4; ++op) {
        const TensorMap* map = maps + 4 * l + op;
        acquire_tensor_map(map);
        const unsigned slots = op == 2 ? Ops::k(op) / 64 : Ops::k(op) / 128;
        for (unsigned t = first_tile(g0); t < Ops::tiles(op); t += G)
          for (unsigned sl = 0; sl < slots; ++sl) {
            const unsigned slot = ring_base + ring.index * LayerGemms::kSlotBytes, bar = full + 8 * ring.index;
            mbarrier::wait_parity(empty + 8 * ring.index, ring.phase ^ 1u);
            mbarrier::arrive_expect_tx(bar, LayerGemms::kSlotBytes);
            if (op == 2) {
              tma::load(slot, map, bar, sl * 64, t * 32);
              tma::load(slot + 4096, map, bar, sl * 64, I + t * 32);
            } else {
              tma::load(slot, map, bar, 2 * sl * 64, t * 32);
              tma::load(slot + 4096, map, bar, (2 * sl + 1) * 64, t * 32);
            }
            ring.advance();
          }
        g0 += Ops::tiles(op);
      }
    return;
  }

  const unsigned tid = threadIdx.x;
  mbarrier::StageRing<STAGES> ring;
  unsigned g0 = 0, phase = 0;
  for (int l = 0; l < LAYERS; ++l)
    for (int op = 0; op < 4; ++op, ++phase) {
      // Wait until every CTA has finished the previous phases, then load this phase's A.
      if (tid == 0) {
        const unsigned target = phase * G;
        unsigned seen;
        do {
          asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(seen) : "l"(sync) : "memory");
        } while (seen < target);
        __threadfence();
      }
      named_barrier_sync(1, 128);
      const unsigned K = Ops::k(op);
      const unsigned first = first_tile(g0);
      if (first < Ops::tiles(op)) {
        const bf16* a = op == 0 ? h : op == 1 ? attn : op == 2 ? h2 : act;
        // Rows of A as 16-byte chunks into the interleaved layout, then the zero tail (the last
        // core matrix's rows past M read it).
        for (unsigned c = tid; c < K / 8; c += 128)
#pragma unroll
          for (int r = 0; r < M; ++r) {
            const uint4 v = __ldcg(reinterpret_cast<const uint4*>(a + static_cast<long long>(r) * K) + c);
            asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};" ::"r"(base + (c * M + r) * 16), "r"(v.x),
                         "r"(v.y), "r"(v.z), "r"(v.w));
          }
        if (tid < 8)
          asm volatile("st.shared.v4.u32 [%0], {%1, %1, %1, %1};" ::"r"(base + (K / 8 * M + tid) * 16), "r"(0u));
        fence_proxy_async_smem();  // generic-proxy stores, then wgmma (async proxy) reads them
        named_barrier_sync(1, 128);
        for (unsigned t = first; t < Ops::tiles(op); t += G) {
          if (op == 0)
            layer_gemm_tile<M, 32, SmallEpi::StoreBf16>(ring, base, ring_base, full, empty, t, K, NQKV, qkv);
          else if (op == 2)
            layer_gemm_tile<M, 64, SmallEpi::SwiGlu>(ring, base, ring_base, full, empty, t, K, I, act);
          else
            layer_gemm_tile<M, 32, SmallEpi::Residual>(ring, base, ring_base, full, empty, t, K, H, x);
        }
      }
      // This phase's stores, then the CTA's arrival.
      __threadfence();
      named_barrier_sync(1, 128);
      if (tid == 0) atomicAdd(&sync[0], 1u);
      g0 += Ops::tiles(op);
    }
  if (tid == 0 && atomicAdd(&sync[1], 1u) == G - 1) {
    sync[0] = 0;
    sync[1] = 0;
  }
}

}  // namespace telos_kernels
