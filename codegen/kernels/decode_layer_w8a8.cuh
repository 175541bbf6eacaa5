#pragma once
// The one-token layer on W8A8 (decode_layer_persistent_w8a8; docs/fp8.md):
// decode_layer_persistent's phases, producer and grid-wide counts (decode_persistent.cuh) on the
// MMA atom LayerW8a8, which runs gemm_w8a8.cuh's arithmetic with no converter warps: the producer
// streams each weight's e4m3 bytes into the ring as the e4m3 wgmma reads them, and the consumers
// run the W8A8 chain on the ring's slots.
//
// Weights: e4m3 [N, K] with one f32 scale a 128 x 128 block (the artifact's `w:NAME.scale`, row
// block n / 128, ceil(K / 128) a row), each through a map over its bytes [N, K] in BN x 128
// boxes with the 128B swizzle (BOX_COLS 128, docs/artifact.md): a box row is 128 bytes, one
// 128-column K block of a weight row, K-major and swizzled as the e4m3 wgmma reads it, where a bf16
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
// The e4m3 A is the token's row as wgmma's A without swizzle (core matrices of 8 rows of 16 bytes,
// LBO 16, SBO 0: row 0 is the token, rows 1-63 read the bytes after it, up to the ring's first
// slot, and are never stored).
//
// Bits: each output element is gemm_prefill_w8a8's for the same token. Per K block kb, a chain of
// four wgmma m64nBNk32 e4m3 sums the block's products from zero into `part` (the per-element sum
// does not depend on the instruction's N or on the row's place in the tile: gemm_w8a8.cuh's batch
// invariance), then w8a8_promote takes acc = fma(part, sa · sw, acc) with the scale product
// rounded to f32 first, acc from +0, kb in order: the prefill GEMM's promotion, its code, with a
// scale group an 8-column block (sw that of the group's weight rows: a tile of up to 64 rows, or
// gate/up's two halves, may span two scale blocks). The epilogues are small_gemm_store's, the
// prefill epilogues' arithmetic (the layer's: the residual added in L2, act with gpu-scope
// stores); the quantization is quantize_rows_e4m3's code on the same bf16 input bits, which the
// norm prologue and the loads give as the separate kernels do. gpu_kernels_test's
// W8a8PersistentLayerMatchesPrefillW8a8Kernels compares them bit for bit.
//
// The K loop issues a slot's chains (one a K block, each into partials of its own) under one
// commit, waits for them once, releases the slot and then promotes them in K order: one wait a
// slot, as the bf16 layer's, rather than one a K block. The tiles and the ring are kernel_plan's
// decode_layer_w8a8_tiling's.
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

// The scale products of K block kb for a tile's 8-column groups: s[h][j] = sa · sw[j] (both row
// halves alike: only row 0, the token's, is stored), sw[j] the weight scale of group j's rows
// (`wrow`: their scale block row times the weight's K blocks).
template <unsigned BN>
__device__ __forceinline__ void layer_w8a8_scales(float (&s)[2][BN / 8], float sa,
                                                  const float* w_scale,
                                                  const unsigned (&wrow)[BN / 8], unsigned kb) {
#pragma unroll
  for (unsigned j = 0; j < BN / 8; ++j) {
    const float p = __fmul_rn(sa, __ldg(w_scale + wrow[j] + kb));
    s[0][j] = p;
    s[1][j] = p;
  }
}

// The scale row (block row times K blocks) of tile t's row r: weight row t · BN + r, or with SPLIT
// (gate/up) gate row t · BN / 2 + r in the tile's first half and, in its second, the up row
// `up_row` after gate row t · BN / 2 + r - BN / 2; and those of the tile's 8-row groups.
template <unsigned BN, bool SPLIT>
__device__ __forceinline__ unsigned layer_w8a8_scale_row(unsigned r, unsigned t, unsigned up_row,
                                                         unsigned k_blocks) {
  const unsigned w = SPLIT ? t * BN / 2 + (r < BN / 2 ? r : up_row + r - BN / 2) : t * BN + r;
  return w / 128 * k_blocks;
}
template <unsigned BN, bool SPLIT>
__device__ __forceinline__ void layer_w8a8_scale_rows(unsigned (&wrow)[BN / 8], unsigned t,
                                                      unsigned up_row, unsigned k_blocks) {
#pragma unroll
  for (unsigned j = 0; j < BN / 8; ++j)
    wrow[j] = layer_w8a8_scale_row<BN, SPLIT>(8 * j, t, up_row, k_blocks);
}

// One tile's K loop where a slot is one K block (BN 40 to 64), with the operands swapped: the
// slot's 64 rows (the tile's BN, then bytes of the slot past them) as wgmma's A and the token's
// block as B (N 8: row 0 the token, rows 1-7 the bytes after it, never stored), four m64n8k32
// from zero a slot, one commit and one wait. A weight row's sum is the same bits either way (the
// element's sum depends on its row of A and column of B only; tools/fp8_mma_bench.cu's "bits":
// wgmma-sw) for a quarter of the MMA's work (the token as an m64 A wastes 63 rows of it). Lanes 4g
// of warp w hold rows 16w + g and + 8 (column 0: d[0], d[2]); each promotes its rows in K order
// (the scale products of its rows, loaded before the slot's wait), then the rows go through
// shared memory to acc in the layout of the tile's wgmma with the token as A (threads 0-3: row
// 8j + 2c + e at acc[4j + e]), which the epilogues read.
template <unsigned BN, bool SPLIT, unsigned STAGES>
__device__ __forceinline__ void layer_w8a8_tile_swapped(LayerW8a8Ring<STAGES>& ring,
                                                        unsigned ring_base, unsigned full,
                                                        unsigned empty, unsigned K, unsigned t,
                                                        unsigned up_row, float (&acc)[BN / 2]) {
  using namespace hexel;
  static_assert(BN > 32 && BN <= 64, "one K block a slot");
  __shared__ float rows[64];
  const unsigned warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const unsigned ra = 16 * warp + lane / 4, rb = ra + 8;
  const bool owner = lane % 4 == 0;
  // The scale rows of rows ra and rb (rows past BN: the last row's).
  const unsigned wa = layer_w8a8_scale_row<BN, SPLIT>(min(ra, BN - 1), t, up_row, K / 128);
  const unsigned wb = layer_w8a8_scale_row<BN, SPLIT>(min(rb, BN - 1), t, up_row, K / 128);
  float acc_a = 0.f, acc_b = 0.f;
  for (unsigned kb = 0; kb < K / 128; ++kb) {
    const float sa = ring.scale[kb];
    const float s_a = __fmul_rn(sa, __ldg(ring.w_scale + wa + kb));
    const float s_b = __fmul_rn(sa, __ldg(ring.w_scale + wb + kb));
    mbarrier::wait_parity(full + 8 * ring.index, ring.phase);
    const unsigned slot = ring_base + ring.index * LayerGemms::kSlotBytes;
    const auto a = wgmma::kmajor_desc(slot, Swizzle::B128);
    const auto b = wgmma::SmemDesc::make(ring.q + kb * 128, Swizzle::None, 16, 0);
    float part[4];
    wgmma::fence();
#pragma unroll
    for (unsigned kk = 0; kk < 4; ++kk)
      wgmma::mma_ss<8, wgmma::AbType::E4M3>(part, a.advanced(32 * kk), b.advanced(32 * kk), kk > 0);
    wgmma::commit_group();
    wgmma::wait_group<0>();
    wgmma::fence_operand(part);
    if (lane == 0) mbarrier::arrive(empty + 8 * ring.index);
    acc_a = __fmaf_rn(part[0], s_a, acc_a);
    acc_b = __fmaf_rn(part[2], s_b, acc_b);
    wgmma::fence_operand(part);  // the promotion reads part before the next chain writes it
    ring.advance();
  }
  if (owner && ra < BN) rows[ra] = acc_a;
  if (owner && rb < BN) rows[rb] = acc_b;
  named_barrier_sync(1, 128);
  if (threadIdx.x < 4) {
#pragma unroll
    for (unsigned j = 0; j < BN / 8; ++j) {
      acc[4 * j] = rows[8 * j + 2 * threadIdx.x];
      acc[4 * j + 1] = rows[8 * j + 2 * threadIdx.x + 1];
      acc[4 * j + 2] = acc[4 * j + 3] = 0.f;  // row 8 of the m64 form: no token
    }
  }
  named_barrier_sync(1, 128);  // rows is read before the next tile stores it
}

// One tile's K loop (where a slot holds one K block: layer_w8a8_tile_swapped): for each slot (64 /
// BN K blocks), the scale products of its blocks (loaded before the slot's wait, so the loads
// overlap it), the wait, every block's chain of four e4m3 wgmma k32 from zero into its own
// partials (64 / BN sets of BN / 2: 32 registers whatever BN), one commit and one wait for them,
// the slot's release (each warp's lane 0), then the blocks' promotions into acc (from +0) in K
// order.
template <unsigned BN, bool SPLIT, unsigned STAGES>
__device__ __forceinline__ void layer_w8a8_tile_mma(LayerW8a8Ring<STAGES>& ring, unsigned ring_base,
                                                    unsigned full, unsigned empty, unsigned K,
                                                    unsigned t, unsigned up_row,
                                                    float (&acc)[BN / 2]) {
  using namespace hexel;
  constexpr unsigned kBlocksPerSlot = 64 / BN;
  if constexpr (kBlocksPerSlot == 1) {
    layer_w8a8_tile_swapped<BN, SPLIT>(ring, ring_base, full, empty, K, t, up_row, acc);
  } else {
    unsigned wrow[BN / 8];
    layer_w8a8_scale_rows<BN, SPLIT>(wrow, t, up_row, K / 128);
    const unsigned lane = threadIdx.x % 32, slots = K / 128 / kBlocksPerSlot;
    float part[kBlocksPerSlot][BN / 2];
#pragma unroll
    for (unsigned i = 0; i < BN / 2; ++i) acc[i] = 0.f;
    for (unsigned sl = 0; sl < slots; ++sl) {
      float s[kBlocksPerSlot][2][BN / 8];
#pragma unroll
      for (unsigned j = 0; j < kBlocksPerSlot; ++j) {
        const unsigned kb = sl * kBlocksPerSlot + j;
        layer_w8a8_scales<BN>(s[j], ring.scale[kb], ring.w_scale, wrow, kb);
      }
      mbarrier::wait_parity(full + 8 * ring.index, ring.phase);
      const unsigned slot = ring_base + ring.index * LayerGemms::kSlotBytes;
      wgmma::fence();
#pragma unroll
      for (unsigned j = 0; j < kBlocksPerSlot; ++j) {
        const auto a =
            wgmma::SmemDesc::make(ring.q + (sl * kBlocksPerSlot + j) * 128, Swizzle::None, 16, 0);
        const auto b = wgmma::kmajor_desc(slot + j * BN * 128, Swizzle::B128);
#pragma unroll
        for (unsigned kk = 0; kk < 4; ++kk)
          wgmma::mma_ss<BN, wgmma::AbType::E4M3>(part[j], a.advanced(32 * kk), b.advanced(32 * kk),
                                                 kk > 0);
      }
      wgmma::commit_group();
      wgmma::wait_group<0>();
#pragma unroll
      for (unsigned j = 0; j < kBlocksPerSlot; ++j) wgmma::fence_operand(part[j]);
      if (lane == 0) mbarrier::arrive(empty + 8 * ring.index);
#pragma unroll
      for (unsigned j = 0; j < kBlocksPerSlot; ++j) {
        w8a8_promote<BN, BN / 8>(acc, part[j], s[j]);
        wgmma::fence_operand(part[j]);  // the promotion reads part before the next chain writes it
      }
      ring.advance();
    }
  }
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
    // The resident e4m3 A: the row before the ring, in whole KBs (AtomResidentBytes), so that what
    // its rows past the token read, and the 2 KB a k step's 64 rows span as the tools count them
    // (the hardware reads the first 8 rows' core matrices), lie in shared memory; its per-128
    // scales after the ring's barriers, 16-byte aligned. kABytes is both (kernel_plan.hpp's
    // persistent_w8a8_a_bytes mirrors it).
    kRowBytes = (K_MAX + 1023) / 1024 * 1024,
    kABytes = kRowBytes + 16 + K_MAX / 128 * 4,
  };
  static_assert(K_MAX % 128 == 0, "whole K blocks");
  __host__ __device__ static constexpr bool tile_ok(int bn, int k) {
    return bn % 8 == 0 && bn >= 8 && bn <= 64 && k % (128 * (64 / bn)) == 0;
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
// (quantize_block_e4m3), then the fence for wgmma and the meeting.
template <unsigned K, unsigned STAGES>
__device__ __forceinline__ void layer_w8a8_quantize(const LayerW8a8Ring<STAGES>& ring,
                                                    unsigned base) {
  const auto* x = static_cast<const bf16*>(__cvta_shared_to_generic(base));
  auto* q = static_cast<unsigned char*>(__cvta_shared_to_generic(ring.q));
  auto* scale = const_cast<float*>(ring.scale);
  const unsigned warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  for (unsigned kb = warp; kb < K / 128; kb += 4) quantize_block_e4m3<K>(x, q, scale, kb, lane);
  hexel::fence_proxy_async_smem();  // generic-proxy stores, then wgmma (async proxy) reads them
  hexel::named_barrier_sync(1, 128);
}

// Down's input: act's e4m3 bytes and scales (W8a8Act) into the e4m3 resident A of `ring` by the
// 128 consumer threads, each polling its 16-byte chunks (persistent_poll_chunks), then the fence
// for wgmma and the meeting.
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
  hexel::fence_proxy_async_smem();  // generic-proxy stores, then wgmma (async proxy) reads them
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
