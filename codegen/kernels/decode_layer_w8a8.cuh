#pragma once
// The one-token layer on W8A8 (decode_layer_persistent_w8a8; docs/fp8.md):
// decode_layer_persistent's phases, producer and grid-wide counts (decode_persistent.cuh) on the
// MMA atom LayerW8a8, which runs gemm_w8a8.cuh's arithmetic with no converter warps: the producer
// streams each weight's e4m3 bytes into the ring as the e4m3 MMAs read them, and the consumers
// run the W8A8 chain on the ring's slots with the warp-level e4m3 mma (mma.sync m16n8k32), the
// weight rows as its A and the token as its B.
//
// Weights: e4m3 [N, K] with one f32 scale a 128 x 128 block (the artifact's `w:NAME.scale`, row
// block n / 128, ceil(K / 128) a row), each through a map over its bytes [N, K] in BN x 128
// boxes with the 128B swizzle (BOX_COLS 128, docs/artifact.md): a box row is 128 bytes, one
// 128-column K block of a weight row, K-major and swizzled as TMA writes it, where a bf16
// box row is 64 columns; so the producer's phases count K / 2 (LayerAtomInput::kStreamKDiv) and its
// StreamCursor steps 128 columns a box, and nothing else of the stream changes. A
// slot (8 KB, 64 rows of 128 bytes) holds 64 / BN K blocks of a BN-row tile: twice a bf16 slot's
// K, so K must be whole slots of 128 · (64 / BN) columns (LayerW8a8::tile_ok) and each weight row
// costs the ring half the bytes.
//
// Activations: once a phase's input is in the bf16 resident A (the norm prologue's h for QKV and
// gate/up, attn for o: a_finish's meeting), the consumer warps quantize it, one K block a warp at a
// time, with quantize_block_e4m3 (gemm_w8a8.cuh: quantize_rows_e4m3's own code, on shared memory)
// into the e4m3 resident A, between the bf16 one and the ring, and its per-128 scales after the
// ring's barriers (LayerW8a8::kABytes; the Ring holds their addresses). act, down's input, is
// quantized once for the grid instead, a block by the gate/up tile that completes it, into global
// memory beside act (W8a8Act), and down polls those bytes and scales into the e4m3 resident A:
// every CTA quantizing the whole act row held down back ~8 µs a layer on the 8B.
// The e4m3 A is the token's row, its bytes in K order (ldmatrix reads its 16-byte chunks as the
// mma's B).
//
// Bits: each output element is gemm_prefill_w8a8's for the same token. Per K block kb, a chain of
// four mma m16n8k32 e4m3 from -0 sums the block's products as the prefill GEMM's chain of four
// wgmma k32 from zero does, bit for bit (the tensor cores' sum of a k32 step and its accumulator
// is the same in both instructions: tools/fp8_mma_bench.cu's "bits" over every finite e4m3 byte),
// then acc = fma(part, sa · sw, acc) with the scale product rounded to f32 first, acc from +0, kb
// in order: the prefill GEMM's promotion (w8a8_promote's), sw that of the row's weight block (a
// tile of up to 64 rows, or gate/up's two halves, may span two scale blocks). The epilogues are small_gemm_store's, the
// prefill epilogues' arithmetic (the layer's: the residual added in L2, act with gpu-scope
// stores); the quantization is quantize_rows_e4m3's code on the same bf16 input bits, which the
// norm prologue and the loads give as the separate kernels do. gpu_kernels_test's
// W8a8PersistentLayerMatchesPrefillW8a8Kernels compares them bit for bit.
//
// Why the warp-level mma: a slot's wgmma chains (the token as an m64 A, 63 rows of it unused)
// cost ~500 cycles of one warpgroup, about the H100's DRAM share of an SM for 8 KB and well under
// the H200's; the mma runs a K block's 16 rows a warp with a 16-row A, one block a warp at a time
// (layer_w8a8_tile_mma). The tiles and the ring are kernel_plan's decode_layer_w8a8_tiling's.
#include "decode_persistent.cuh"
#include "gemm_w8a8.cuh"

namespace telos_kernels {

// The resident e4m3 A of the W8A8 layer: the token's e4m3 row at `q`, its per-128 scales at
// `scale` (generic, shared memory), and the ring's position; with the four weights' scales and
// the current phase's (LayerAtomInput<LayerW8a8>::ready sets it).
template <unsigned STAGES>
struct LayerW8a8Ring : hexel::mbarrier::StageRing<STAGES> {
  unsigned q;
  const float* scale;
  const float* weight_scales[4];
  const float* w_scale;
};

// The weight scale row (its 128-row block times the weight's K blocks) of tile t's row r: weight
// row t · BN + r, or with SPLIT (gate/up) gate row t · BN / 2 + r in the tile's first half and,
// in its second, the up row `up_row` after gate row t · BN / 2 + r - BN / 2.
template <unsigned BN, bool SPLIT>
__device__ __forceinline__ unsigned layer_w8a8_scale_row(unsigned r, unsigned t, unsigned up_row,
                                                         unsigned k_blocks) {
  const unsigned w = SPLIT ? t * BN / 2 + (r < BN / 2 ? r : up_row + r - BN / 2) : t * BN + r;
  return w / 128 * k_blocks;
}

// One K block's partial sums for rows r0 .. r0 + 15 of the box at `box` (rows of 128 bytes, the
// 128B swizzle, as TMA wrote them), against the token's e4m3 bytes of the block at `q`: a chain of
// four mma m16n8k32 from -0 (so p = the block's sum, as a wgmma chain from zero gives it). A comes
// from the box by ldmatrix (a fragment's row is 16 consecutive bytes of K), B is the token's row in
// every column (ldmatrix with eight equal row addresses), so lanes 4i hold rows r0 + i (p[0]) and
// r0 + i + 8 (p[2]).
__device__ __forceinline__ void layer_w8a8_block_mma(float (&p)[4], unsigned box, unsigned r0,
                                                     unsigned q) {
  const unsigned lane = threadIdx.x % 32, m = lane / 8, row = r0 + (m & 1) * 8 + lane % 8;
  p[0] = p[1] = p[2] = p[3] = -0.f;
#pragma unroll
  for (unsigned kk = 0; kk < 4; kk += 2) {
    unsigned b[4];  // the token's 16-byte chunks 2 kk .. 2 kk + 3
    hexel::ldmatrix<4>(b, q + 16 * (2 * kk + m));
#pragma unroll
    for (unsigned h = 0; h < 2; ++h) {
      unsigned a[4];
      hexel::ldmatrix<4>(a, box + row * 128 + (((2 * (kk + h) + (m >> 1)) ^ (lane % 8)) * 16));
      hexel::mma_m16n8k32_e4m3(p, a, b[2 * h], b[2 * h + 1]);
    }
  }
}

// One tile's K loop. A slot holds 64 / BN K blocks of the tile's BN rows; its units (K block j,
// rows 16 r ..) are the consumer warps' (warp j · G + r, G = ceil(BN / 16) row groups; at most
// four units, the rest idle), each one block's partials by layer_w8a8_block_mma. Every warp waits
// for the slot and releases it (its lane 0) once its chain is issued. The promotion stays in K
// order: where a slot holds several blocks, the row group's warps meet at a named barrier (3 + r)
// after the other blocks' warps stored their partials, and the block-0 warp takes them in order
// (double-buffered by the slot's parity: a warp stores slot n + 2's only after the barrier of
// slot n + 1, which the reader passes after its reads of slot n). The promotion is gemm_w8a8's,
// acc = fma(part, sa · sw, acc) with the product rounded first, acc from +0, by the lanes that hold
// a row's partials (their scale products loaded before the slot's wait). Then the rows go through
// shared memory to d in wgmma's accumulator layout for threads 0-3 (row 8j + 2c + e at d[4j + e],
// the token's row of an m64 tile), which the epilogues read.
template <unsigned BN, bool SPLIT, unsigned STAGES>
__device__ __forceinline__ void layer_w8a8_tile_mma(LayerW8a8Ring<STAGES>& ring, unsigned ring_base,
                                                    unsigned full, unsigned empty, unsigned K,
                                                    unsigned t, unsigned up_row,
                                                    float (&d)[BN / 2]) {
  using namespace hexel;
  constexpr unsigned kBlocks = 64 / BN, kGroups = (BN + 15) / 16;
  static_assert(kBlocks * kGroups <= 4, "a unit a consumer warp");
  __shared__ float parts[2][64];  // a slot's partials of blocks 1.., block j's row r at j · BN + r
  __shared__ float rows[64];      // the tile's outputs
  const unsigned warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const unsigned j = warp / kGroups, r0 = 16 * (warp % kGroups);
  const bool active = warp < kBlocks * kGroups;
  const bool owner = active && j == 0 && lane % 4 == 0;  // holds rows ra and rb's sums
  const unsigned ra = r0 + lane / 4, rb = ra + 8, k_blocks = K / 128, slots = k_blocks / kBlocks;
  const unsigned wa = layer_w8a8_scale_row<BN, SPLIT>(min(ra, BN - 1), t, up_row, k_blocks);
  const unsigned wb = layer_w8a8_scale_row<BN, SPLIT>(min(rb, BN - 1), t, up_row, k_blocks);
  float acc_a = 0.f, acc_b = 0.f;
  for (unsigned sl = 0; sl < slots; ++sl) {
    float sa[kBlocks], sb[kBlocks];
    if (owner) {
#pragma unroll
      for (unsigned b = 0; b < kBlocks; ++b) {
        const unsigned kb = sl * kBlocks + b;
        sa[b] = __fmul_rn(ring.scale[kb], __ldg(ring.w_scale + wa + kb));
        sb[b] = __fmul_rn(ring.scale[kb], __ldg(ring.w_scale + wb + kb));
      }
    }
    mbarrier::wait_parity(full + 8 * ring.index, ring.phase);
    const unsigned slot = ring_base + ring.index * LayerGemms::kSlotBytes;
    float p[4];
    if (active) layer_w8a8_block_mma(p, slot + j * BN * 128, r0, ring.q + (sl * kBlocks + j) * 128);
    if (lane == 0) mbarrier::arrive(empty + 8 * ring.index);
    if (owner) {
      acc_a = __fmaf_rn(p[0], sa[0], acc_a);
      acc_b = __fmaf_rn(p[2], sb[0], acc_b);
    }
    if constexpr (kBlocks > 1) {
      float* x = parts[sl & 1];
      if (active && j > 0 && lane % 4 == 0) {
        if (ra < BN) x[j * BN + ra] = p[0];
        if (rb < BN) x[j * BN + rb] = p[2];
      }
      named_barrier_sync(3 + warp % kGroups, 32 * kBlocks);
      if (owner) {
#pragma unroll
        for (unsigned b = 1; b < kBlocks; ++b) {
          acc_a = __fmaf_rn(x[b * BN + min(ra, BN - 1)], sa[b], acc_a);
          acc_b = __fmaf_rn(x[b * BN + min(rb, BN - 1)], sb[b], acc_b);
        }
      }
    }
    ring.advance();
  }
  if (owner) {
    if (ra < BN) rows[ra] = acc_a;
    if (rb < BN) rows[rb] = acc_b;
  }
  named_barrier_sync(1, 128);
  if (threadIdx.x < 4) {
#pragma unroll
    for (unsigned g = 0; g < BN / 8; ++g) {
      d[4 * g] = rows[8 * g + 2 * threadIdx.x];
      d[4 * g + 1] = rows[8 * g + 2 * threadIdx.x + 1];
      d[4 * g + 2] = d[4 * g + 3] = 0.f;  // row 8: no token
    }
  }
  named_barrier_sync(1, 128);  // rows is read before the next tile stores it
}

// act in the W8A8 layer, I columns of one token (kernel_plan.hpp's persistent_w8a8_act_bytes
// mirrors kWords): the bf16 row, then its e4m3 bytes (I / 4 words), then one f32 scale a 128-column
// block, padded to whole 16-byte chunks. Every word is kActPending from the layer's prologue until
// its one gpu-scope relaxed store (a word that would read kActPending is stored as another of the
// same meaning, kActE4m3Nan: four e4m3 NaNs, whose block's scale is NaN too), so readers poll the
// words themselves, as down polls act in the bf16 layer (persistent_poll_a), and no count or fence
// is needed.
constexpr unsigned kActE4m3Nan = 0x7f7f7f7fu;
template <unsigned I>
struct W8a8Act {
  static_assert(I % 128 == 0, "whole K blocks");
  enum : unsigned {
    kBlocks = I / 128,
    kQWords = I / 4,
    kChunks = (kQWords + kBlocks + 3) / 4,  // 16-byte chunks of the e4m3 bytes and scales
    kWords = I / 2 + 4 * kChunks,
  };
};

// Gate/up tile t's share of act's quantization, by warp 0 after its act stores (COLS act columns a
// tile, I of them): where the tile holds a 128-column block's last column, it quantizes that block
// (quantize_lane_e4m3, quantize_rows_e4m3's arithmetic): each lane polls its four columns (words
// that earlier tiles, on any CTA, wrote once) until neither word is pending, then stores its e4m3
// word, and lane 0 the block's scale (W8a8Act).
template <unsigned COLS>
__device__ __forceinline__ void layer_w8a8_quantize_act(bf16* act, unsigned I, unsigned t,
                                                        unsigned lane) {
  const unsigned end = (t + 1) * COLS;
  if (end / 128 == t * COLS / 128) return;  // no block ends in this tile
  const unsigned b = end / 128 - 1;
  const unsigned* words = reinterpret_cast<const unsigned*>(act) + 64 * b + 2 * lane;
  uint2 v = hexel::ld_relaxed_gpu_v2(words);
  while (v.x == kActPending || v.y == kActPending) v = hexel::ld_relaxed_gpu_v2(words);
  float s;
  const unsigned q = quantize_lane_e4m3(v, s);
  unsigned* out = reinterpret_cast<unsigned*>(act + I);
  hexel::st_relaxed_gpu(out + 32 * b + lane, q == kActPending ? kActE4m3Nan : q);
  if (lane == 0) hexel::st_relaxed_gpu(out + I / 4 + b, __float_as_uint(s));
}

// The W8A8 layer's MMA atom (decode_persistent.cuh's LayerWgmma says what an atom provides), for a
// layer whose largest K is K_MAX.
template <unsigned K_MAX>
struct LayerW8a8 {
  enum : unsigned {
    kSlotRows = 64,
    kSlotBytes = LayerGemms::kSlotBytes,
    kEmptyArrivals = 4,  // one a consumer warp
    // The resident e4m3 A: the row before the ring, in whole KBs (AtomResidentBytes: the ring's
    // slots stay 1024-aligned for the 128B swizzle); its per-128 scales after the ring's
    // barriers, 16-byte aligned. kABytes is both (kernel_plan.hpp's
    // persistent_w8a8_a_bytes mirrors it).
    kRowBytes = (K_MAX + 1023) / 1024 * 1024,
    kABytes = kRowBytes + 16 + K_MAX / 128 * 4,
  };
  static_assert(K_MAX % 128 == 0, "whole K blocks");
  __host__ __device__ static constexpr bool tile_ok(int bn, int k) {
    return bn % 8 == 0 && bn >= 16 && bn <= 64 && k % (128 * (64 / bn)) == 0;
  }
  template <unsigned STAGES>
  using Ring = LayerW8a8Ring<STAGES>;
  template <unsigned STAGES, class S>
  __device__ __forceinline__ static void start(Ring<STAGES>& ring, const S& sm) {
    ring.q = sm.atom_base;
    ring.scale = static_cast<const float*>(__cvta_shared_to_generic((sm.empty + 8 * STAGES + 15) & ~15u));
  }
  template <unsigned STAGES>
  __device__ __forceinline__ static void finish(const Ring<STAGES>&) {}

  template <int M, unsigned BN, SmallEpi EPI, unsigned STAGES>
  __device__ __forceinline__ static void tile(Ring<STAGES>& ring, unsigned, unsigned ring_base,
                                              unsigned full, unsigned empty, unsigned t, unsigned K,
                                              unsigned N, void* out) {
    static_assert(M == 1, "one token");
    const unsigned warp = hexel::warp_index(), lane = threadIdx.x % 32;
    float acc[BN / 2];
    layer_w8a8_tile_mma<BN, EPI == SmallEpi::SwiGlu>(ring, ring_base, full, empty, K, t, N, acc);
    layer_gemm_tile_store<M, BN, EPI>(acc, t, N, out, warp, lane);
    if constexpr (EPI == SmallEpi::SwiGlu)
      if (warp == 0) layer_w8a8_quantize_act<BN / 2>(static_cast<bf16*>(out), N, t, lane);
  }
  template <int HQ, int HKV, int D, bool BIAS, int PAGE, long long PAGE_ELEMS, class Rope,
            unsigned BQ, unsigned H, unsigned STAGES>
  __device__ __forceinline__ static void qkv_rope_tile(Ring<STAGES>& ring, unsigned,
                                                       unsigned ring_base, unsigned full,
                                                       unsigned empty, unsigned tile, int pos,
                                                       int page, const float* bias, bf16* kv_layer,
                                                       float* q, float2* sc) {
    qkv_rope_table<D, Rope, BQ>(tile, pos, sc);
    float d[BQ / 2];
    layer_w8a8_tile_mma<BQ, false>(ring, ring_base, full, empty, H, tile, 0, d);
    qkv_rope_pairs<HQ, HKV, D, BIAS, PAGE, PAGE_ELEMS, Rope, BQ>(d, tile, pos, page, bias, kv_layer,
                                                                 q, sc);
  }
};

template <unsigned K_MAX>
struct AtomResidentBytes<LayerW8a8<K_MAX>> {
  enum : unsigned { value = LayerW8a8<K_MAX>::kRowBytes };
};

// The token's bf16 row of K columns at shared address `base` (the resident A, M 1: contiguous)
// into the e4m3 resident A of `ring` by the 128 consumer threads, a K block a warp at a time
// (quantize_block_e4m3), then the meeting.
template <unsigned K, unsigned STAGES>
__device__ __forceinline__ void layer_w8a8_quantize(const LayerW8a8Ring<STAGES>& ring,
                                                    unsigned base) {
  const auto* x = static_cast<const bf16*>(__cvta_shared_to_generic(base));
  auto* q = static_cast<unsigned char*>(__cvta_shared_to_generic(ring.q));
  auto* scale = const_cast<float*>(ring.scale);
  const unsigned warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  for (unsigned kb = warp; kb < K / 128; kb += 4) quantize_block_e4m3<K>(x, q, scale, kb, lane);
  hexel::named_barrier_sync(1, 128);
}

// Down's input: act's e4m3 bytes and scales (W8a8Act) into the e4m3 resident A of `ring` by the
// 128 consumer threads, each polling its 16-byte chunks (persistent_poll_chunks), then the
// meeting.
template <unsigned I, unsigned STAGES>
__device__ __forceinline__ void layer_w8a8_poll_act(const LayerW8a8Ring<STAGES>& ring,
                                                    const bf16* act) {
  using A = W8a8Act<I>;
  constexpr unsigned kPer = (A::kChunks + 127) / 128;
  const auto* words = reinterpret_cast<const unsigned*>(act + I);
  const unsigned tid = threadIdx.x;
  auto pending = [](const uint4& v, unsigned c) {
    const unsigned w[4] = {v.x, v.y, v.z, v.w};
    bool p = false;
#pragma unroll
    for (unsigned e = 0; e < 4; ++e) p |= 4 * c + e < A::kQWords + A::kBlocks && w[e] == kActPending;
    return p;
  };
  uint4 v[kPer];
  persistent_poll_chunks<A::kChunks>(v, words, pending);
  auto* scale = const_cast<float*>(ring.scale);
#pragma unroll
  for (unsigned i = 0; i < kPer; ++i) {
    const unsigned c = tid + 128 * i;
    if (c >= A::kChunks) continue;
    if (4 * c < A::kQWords) {
      hexel::st_shared_v4(ring.q + 16 * c, v[i].x, v[i].y, v[i].z, v[i].w);
    } else {
      const unsigned w[4] = {v[i].x, v[i].y, v[i].z, v[i].w};
#pragma unroll
      for (unsigned e = 0; e < 4; ++e)
        if (4 * c + e - A::kQWords < A::kBlocks) scale[4 * c + e - A::kQWords] = __uint_as_float(w[e]);
    }
  }
  hexel::named_barrier_sync(1, 128);
}

template <unsigned K_MAX>
struct LayerAtomInput<LayerW8a8<K_MAX>> {
  enum : unsigned { kStreamKDiv = 2 };  // 128-byte boxes where bf16 has 64 columns
  template <unsigned I>
  static constexpr unsigned kActWords = W8a8Act<I>::kWords;
  template <unsigned STAGES, class S>
  __device__ __forceinline__ static void start(LayerW8a8Ring<STAGES>& ring, const S& sm,
                                               const float* qkv_s, const float* o_s,
                                               const float* gu_s, const float* down_s) {
    LayerW8a8<K_MAX>::start(ring, sm);
    ring.weight_scales[0] = qkv_s;
    ring.weight_scales[1] = o_s;
    ring.weight_scales[2] = gu_s;
    ring.weight_scales[3] = down_s;
  }
  template <unsigned P, unsigned K, unsigned STAGES>
  __device__ __forceinline__ static void ready(LayerW8a8Ring<STAGES>& ring, unsigned base) {
    static_assert(K <= K_MAX && K % 128 == 0, "whole K blocks in the resident A");
    ring.w_scale = ring.weight_scales[P];
    layer_w8a8_quantize<K>(ring, base);
  }
  template <int M, unsigned I, unsigned STAGES>
  __device__ __forceinline__ static void down_input(LayerW8a8Ring<STAGES>& ring, unsigned,
                                                    const bf16* act) {
    static_assert(M == 1, "one token");
    ring.w_scale = ring.weight_scales[3];
    layer_w8a8_poll_act<I>(ring, act);
  }
};

// The layer on W8A8 (see the top of this file): decode_layer_persistent's template arguments up to
// QKV_ROPE (the tiles kernel_plan's decode_layer_w8a8_tiling picks); its arguments with each
// weight's map (its e4m3 bytes [N, K], BQ / BO / BG / 2 / BD x 128 boxes, 128B swizzle) followed by the four weights' 128 x 128 block scales; dynamic shared memory
// decode_layer_persistent's and LayerW8a8::kABytes.
template <int H, int HQ, int HKV, int D, bool BIAS, bool QK_NORM, float EPS, int PAGE, int MAXP,
          long long PAGE_ELEMS, class Rope, int SPLIT, int NSPLIT, float SCALE_LOG2, int I,
          int STAGES, int BQ, int BO, int BG, int BD, bool QKV_ROPE>
__global__ void __launch_bounds__(LayerGemms::kThreads, 1)
    decode_layer_persistent_w8a8(const TensorMap* qkv_w, const TensorMap* o_w,
                                 const TensorMap* gu_w, const TensorMap* down_w, const float* qkv_s,
                                 const float* o_s, const float* gu_s, const float* down_s,
                                 const float* attn_norm, const float* mlp_norm, const float* bias,
                                 const float* q_norm, const float* k_norm, const int* positions,
                                 const int* token_seq, const int* page_tables, bf16* kv_layer,
                                 float* x, bf16* qkv, float* q, float* part_o, float* part_ml,
                                 bf16* attn, bf16* act, unsigned* sync) {
  constexpr int KO = HQ * D;
  constexpr unsigned kMaxK = KO > H ? (KO > I ? KO : I) : (H > I ? H : I);
  decode_layer_body<H, HQ, HKV, D, BIAS, QK_NORM, EPS, PAGE, MAXP, PAGE_ELEMS, Rope, SPLIT, NSPLIT,
                    SCALE_LOG2, I, STAGES, BQ, BO, BG, BD, QKV_ROPE, 0, 0, Bf16Weight, Bf16Weight,
                    Bf16Weight, Bf16Weight, LayerW8a8<kMaxK>>(
      qkv_w, o_w, gu_w, down_w, qkv_s, o_s, gu_s, down_s, attn_norm, mlp_norm, bias, q_norm, k_norm,
      positions, token_seq, page_tables, kv_layer, x, qkv, q, part_o, part_ml, attn, act, sync);
}

}  // namespace telos_kernels
