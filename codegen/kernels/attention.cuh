#pragma once
// Attention over the paged KV cache, for decode and prefill alike: every token is a query at its
// own absolute position and attends to positions [0, position] of its sequence (causal; the
// QKV kernel has already appended this step's keys and values). The context is cut into splits
// of SPLIT positions at fixed absolute boundaries, dealt round-robin to NSPLIT partial slots
// (slot z holds splits z, z + NSPLIT, ...: every slot has work from the first NSPLIT splits on,
// and the partials stay NSPLIT per token at any context). attn_split computes the slots of a tile
// of TPT consecutive tokens for one KV head (all G = HQ/HKV query heads that share it, of every
// token of the tile, so K and V are read once for the group and, in prefill, once for the tile's
// tokens) with an online softmax on tensor cores, and attn_combine merges the slots in order.
// Split boundaries, the slot of a split, the 16-position chunks inside a split and the order in
// which the warps' results are merged depend only on positions, never on the batch or the tile,
// so a row's result does not depend on its bucket. The cache's element format (KV: KvBf16 or
// KvE4m3, common.cuh) changes what a lane loads (an e4m3 cache's pieces are half the bytes) and
// the MMAs' operand type: bf16 for a bf16 cache; f16 for an e4m3 cache, whose elements are f16
// values as they are (KV::k_operand, v_pair: one conversion a pair), Q scaled by K's scale before
// its rounding to f16, the softmax weights rounded to f16, and the output sums scaled by V's scale
// before the merge. Each is a function of an element, a row's own values and the layer's scales
// alone, so that rule holds for either format.
#include "common.cuh"
#include "hexel/mbarrier.cuh"
#include "hexel/mma.cuh"
#include "hexel/tma.cuh"

namespace telos_kernels {

// Partial results, per (token, query head, slot): part_o [D] f32 sums weighted by
// 2^(score - max) and part_ml {max (log2 domain), sum of weights}. SCALE_LOG2 = log2(e) / sqrt(D).
//
// A work item is 4 warps on one (tile of TPT consecutive tokens t0 = tile · TPT .., KV head,
// slot); attn_split's grid is (T / TPT, HKV, S) (the kernel has no T: every tile is whole, so the
// plan only picks a TPT dividing the bucket's tokens; rows that do not exist are padding,
// position -1), and block z runs the items of slots z, z + S, ... < NSPLIT one after another, so
// that a bucket of many rows need not launch NSPLIT blocks a row, most of them empty at short
// contexts (S is the plan's, per bucket: kernel_plan.hpp). Each slot's item is computed the same
// whichever block runs it, so S changes no bit. The 16 MMA rows hold (token j, query head h) at row
// j·G + h for j < TPT (TPT · G <= 16), the rows past TPT · G are zero. Sharing the rows is what
// lets the tile read K and V once for its TPT tokens. Rows of a tile may belong to different
// sequences: the item runs one pass per maximal run of equal token_seq (a segment), with that
// sequence's pages; in a pass, the rows taking part are those of the segment whose position reaches
// the slot (position >= slot · SPLIT), every other row is masked at every position and writes
// nothing.
//
// In a pass, warp w takes the 16-position chunks w, w + 4, ... of each of the slot's splits,
// splits in ascending order, up to the largest position of the rows taking part. Per chunk,
// S = Q·Kᵀ is two m16n8k16 tiles per 16 dims and O += P·V one per 8 dims; K and V go from
// global memory straight to registers, Q's fragments come from shared memory (staged once per
// item). A row's scores past its own position are -inf, so a chunk past it is an exact no-op for
// that row (corr = 1, weights 0), and the row's arithmetic (the chunks it sees, their order, the
// merge) is the same whatever else shares the tile: a token's bits are the same with TPT = 1
// (decode buckets) and in a tile (prefill buckets). The MMA's reduction index may be any fixed
// permutation as long as both operands use it, which lets every lane read whole 16-byte pieces
// of K and V rows:
//  - q·k: lane (g = lane/4, c = lane%4) loads dims 32j + 8c .. +7 of K row g of each 8-position
//    tile; words 0, 1 are b0, b1 of k-step 2j and words 2, 3 those of k-step 2j + 1, and the Q
//    fragments gather the matching dims;
//  - p·v: lane (g, c) loads dims g·D/8 .. +D/8 of the V rows at chunk positions 2c, 2c+1, 2c+8,
//    2c+9 (the positions its P fragment holds); output column g of n-tile n is dim g·D/8 + n, and
//    b0/b1 pair the two positions' values with one byte permute each.
// Positions past the pass's last one are clamped to it for the loads (finite data, in the
// sequence's pages) and get weight 0.
//
// attn_split_block is one work item with its indices explicit, so that a persistent decode
// kernel (decode_persistent.cuh) can run a layer's attention items on its consumer warpgroup
// inside one launch; attn_split is the same body, one item a block. The item runs on threads
// 0..127 (threadIdx.x < 128 only, no blockIdx) and `sync` is a barrier of exactly those 128
// threads (__syncthreads() in attn_split, a named barrier over 128 threads where other warps share
// the block); all 128 call it the same number of times (the early return is uniform). The same
// threads may run items back to back without a barrier in between: a shared array is written
// again only after a sync() that every earlier read of it comes before.
// LOAD_AHEAD: each warp issues its next chunk's K/V loads before computing the current one (the
// registers of a second chunk: 64 more a thread at head dim 128, which attn_split's 168 at three
// blocks an SM do not have; the persistent decode layer, one block an SM, has them). Loads only:
// the arithmetic and its order, hence every bit, are the same either way.
// PAGE_AHEAD (PAGE a multiple of 16, so that a chunk lies in one page): the page ids of a warp's
// chunks of a split are loaded together when the split starts (lane j holds chunk j's), so that a
// chunk's K/V loads wait on no page-table load of their own. Loads only, as LOAD_AHEAD.
// BULK (one token an item, pages of 16 positions, without LOAD_AHEAD): each warp streams its
// chunks through a ring of BULK slots of shared memory at `ring` (attn_split_ring_bytes), a slot
// one chunk's page of K and of V (2 · 16 · D elements), filled by two bulk copies that lane 0
// issues (PTX ISA: cp.async.bulk, completing on the slot's mbarrier), the warp's first BULK chunks
// before Q's staging; for each chunk, across its splits, the lanes wait on its slot, read it into
// the registers load_chunk fills, with the same rows (positions clamped to end - 1: the slot holds
// the whole page, whose rows past the sequence's last position were never written), compute, and
// give the slot the chunk BULK later (after the compute: its registers would not fit beside the
// chunk's under three blocks an SM). The same values in the same registers, so the same bits;
// unlike a per-lane cp.async ring (16 copies a lane a chunk), this one keeps up to BULK - 1
// chunks in flight a warp through a compute for two copies a chunk. The page ids of
// a warp's next 32 chunks are loaded together, lane j holding chunk j's. `ring_state`: the warp's
// ring across the items the caller runs back to back, which must all be of the same tile and KV
// head (attn_split's slots z, z + S, ... of one block): `used` chunks taken by the earlier items
// (the slots and barrier phases continue from there; -1 before the first, whose start sets up the
// barriers). The ring streams on from one item into the next: `next_slot` (-1: none)
// is the slot the caller runs next, and where this item's chunks end before the ring is full,
// the ring takes the next item's first chunks (`ahead` of them, at most BULK), so they are in
// flight through this item's last chunks, its merge and its partials' stores instead of starting
// after them. Q, the same token's and head's, is staged once, by the first item.
// `out` (non-null): the caller guarantees that every row of the item has one split only (position
// < SPLIT), and the item writes the rows' final bf16 values to out as attn_combine would from this
// one slot, instead of part_o / part_ml (the persistent decode layer's short contexts: no combine).
// `before_q` (every thread of the item calls it once, before the item reads anything written in
// the caller's launch: Q and the token's own K/V row) lets a caller that produces those in the same
// launch wait for them there: the persistent decode layer's wait for its QKV phase. With one token
// and LOAD_AHEAD, the position, the page ids and the warp's first chunk where it holds only earlier
// positions (written by earlier steps) are loaded before it, so that their latency overlaps the
// wait; a first chunk that holds the token's position, or is clamped to it, is loaded after it.
// With BULK, the ring's first copies of pages that end before the token's page go before it.
// Loads only: the same values, so the same bits. AttnPdlWaitIf<true>: the kernel's wait for its
// predecessor (griddepcontrol.wait; attn_split's EARLY); AttnNoWait: nothing to wait for.
struct AttnRing {
  int used = -1;  // chunks the warp's earlier items took through the ring; -1: not set up
  int ahead = 0;  // chunks of the next item the previous one already issued
};
template <bool WAIT>
struct AttnPdlWaitIf {
  __device__ void operator()() const {
    if constexpr (WAIT) hexel::grid_dependency_wait();
  }
};
using AttnNoWait = AttnPdlWaitIf<false>;
// An item's Q fragments into sm_q, by the item's 128 threads: the MMA's A layout, one 16-byte piece
// per (k-step, lane), scaled by SCALE_LOG2 and K's scale and rounded to the operand type (KV::pack;
// rows past R zeros). Lane (g, c4) of
// warp `warp` holds rows g (token t0 + j0, head kvh · G + h0) and g + 8 (j1, h1).
template <int HQ, int D, int G, int R, float SCALE_LOG2, class KV>
__device__ __forceinline__ void attn_stage_q(uint4 (&sm_q)[D / 16][32], const float* q, int t0,
                                             int kvh, int j0, int h0, int j1, int h1, int warp,
                                             int lane, int g, int c4) {
  constexpr int KS = D / 16, W = 4;
  const float sc = SCALE_LOG2 * KV::k_scale();  // SCALE_LOG2 itself for a bf16 cache
  const float* q0 = q + (static_cast<long long>(t0 + j0) * HQ + kvh * G + h0) * D;
  const float* q1 = q + (static_cast<long long>(t0 + j1) * HQ + kvh * G + h1) * D;
  for (int s = warp; s < KS; s += W) {
    const int d = 32 * (s / 2) + 8 * c4 + 4 * (s % 2);
    const float4 a =
        g < R ? *reinterpret_cast<const float4*>(q0 + d) : make_float4(0.f, 0.f, 0.f, 0.f);
    const float4 b =
        g + 8 < R ? *reinterpret_cast<const float4*>(q1 + d) : make_float4(0.f, 0.f, 0.f, 0.f);
    sm_q[s][lane] = make_uint4(KV::pack(a.x * sc, a.y * sc), KV::pack(b.x * sc, b.y * sc),
                               KV::pack(a.z * sc, a.w * sc), KV::pack(b.z * sc, b.w * sc));
  }
}

// One thread: the tile's segments (maximal runs of equal token_seq) that reach the slot starting
// at position `first`, as {first token, end token, sequence, largest position}, and their count.
template <int TPT>
__device__ __forceinline__ void attn_scan_segments(const int (&sm_pos)[TPT],
                                                   const int (&sm_seq)[TPT], int (&sm_seg)[TPT][4],
                                                   int& sm_nseg, int first) {
  int n = 0;
  for (int a = 0, b; a < TPT; a = b) {
    int last = sm_pos[a];
    for (b = a + 1; b < TPT && sm_seq[b] == sm_seq[a]; ++b) last = max(last, sm_pos[b]);
    if (last < first) continue;  // padding, or no position of the segment reaches the slot
    sm_seg[n][0] = a, sm_seg[n][1] = b, sm_seg[n][2] = sm_seq[a], sm_seg[n][3] = last;
    ++n;
  }
  sm_nseg = n;
}

// The words of the D / 8 elements of a V row a lane loads, in the cache's element format KV.
template <int D, class KV>
inline constexpr int kAttnVWords = D / 8 * KV::kBytes / 4;

// Row loads into registers, as stored (KV, common.cuh; attn_chunk makes them MMA operands): a
// lane's D / 32 pieces of eight elements of a K row from k, its kAttnVWords words of a V row from
// v.
template <int D, class KV>
__device__ __forceinline__ void attn_load_k_row(const typename KV::Elem* k,
                                                typename KV::Piece8 (&kk)[D / 32]) {
#pragma unroll
  for (int j = 0; j < D / 32; ++j)
    kk[j] = *reinterpret_cast<const typename KV::Piece8*>(k + 32 * j);
}
template <int D, class KV>
__device__ __forceinline__ void attn_load_v_row(const typename KV::Elem* v,
                                                unsigned (&vv)[kAttnVWords<D, KV>]) {
  constexpr int VW = kAttnVWords<D, KV>;
  const unsigned* words = reinterpret_cast<const unsigned*>(v);
  if constexpr (VW % 4 == 0) {
#pragma unroll
    for (int w = 0; w < VW; w += 4) {
      const uint4 x = *reinterpret_cast<const uint4*>(words + w);
      vv[w] = x.x, vv[w + 1] = x.y, vv[w + 2] = x.z, vv[w + 3] = x.w;
    }
  } else if constexpr (VW % 2 == 0) {
#pragma unroll
    for (int w = 0; w < VW; w += 2) {
      const uint2 x = *reinterpret_cast<const uint2*>(words + w);
      vv[w] = x.x, vv[w + 1] = x.y;
    }
  } else {
#pragma unroll
    for (int w = 0; w < VW; ++w) vv[w] = words[w];
  }
}

// One warp's 16-position chunk from c of an item, its K and V in the registers load_chunk fills:
// S = Q·Kᵀ (two m16n8k16 tiles per 16 dims, Q's fragments from sm_q), the online softmax of rows
// g and g + 8 (their valid positions [0, e0) and [0, e1); running maxima m0, m1 and sums l0, l1,
// log2 domain), then o = o · correction + P·V (one m16n8k16 per 8 dims). K and V are as stored
// (KV): each element becomes its operand (KV::k_operand, v_pair) where the MMA (KV::mma) takes it.
template <int D, class KV>
__device__ __forceinline__ void attn_chunk(int c, const typename KV::Piece8 (&kr)[2][D / 32],
                                           const unsigned (&vr)[4][kAttnVWords<D, KV>],
                                           const uint4 (&sm_q)[D / 16][32], int lane, int c4,
                                           int e0, int e1, float& m0, float& m1, float& l0,
                                           float& l1, float (&o)[D / 8][4]) {
  constexpr int NT = D / 8;
  const float kNegInf = -__int_as_float(0x7f800000);
  float s[2][4];
#pragma unroll
  for (int i = 0; i < 2; ++i) s[i][0] = s[i][1] = s[i][2] = s[i][3] = 0.f;
#pragma unroll
  for (int j = 0; j < D / 32; ++j) {
    const uint4 x = sm_q[2 * j][lane], y = sm_q[2 * j + 1][lane];
    const unsigned qx[4] = {x.x, x.y, x.z, x.w}, qy[4] = {y.x, y.y, y.z, y.w};
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const uint4 k = KV::k_operand(kr[i][j]);
      KV::mma(s[i], qx, k.x, k.y);
      KV::mma(s[i], qy, k.z, k.w);
    }
  }
  // s[i][0..1]: row g, positions c + 8i + 2·c4 + {0,1}; s[i][2..3]: row g + 8, same
  // positions. Chunk positions stay inside the split (SPLIT is a multiple of 64), so a
  // row's end is its own position + 1 alone.
  float mx0 = kNegInf, mx1 = kNegInf;
#pragma unroll
  for (int i = 0; i < 2; ++i)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int p = c + 8 * i + 2 * c4 + h;
      if (p >= e0) s[i][h] = kNegInf;
      if (p >= e1) s[i][2 + h] = kNegInf;
      mx0 = fmaxf(mx0, s[i][h]);
      mx1 = fmaxf(mx1, s[i][2 + h]);
    }
#pragma unroll
  for (int x = 1; x < 4; x <<= 1) {
    mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, x));
    mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, x));
  }
  // A row whose maximum is still -inf (no valid position yet: this warp's first chunks can
  // lie past a row of the tile) keeps o = 0, l = 0: corr = 1 and weights 0, where
  // exp2f(-inf - -inf) would be NaN. With a finite maximum the arithmetic is exactly the
  // single-token kernel's; a chunk wholly past the row's position then gives corr =
  // exp2f(0) = 1 and weights exp2f(-inf) = 0, an exact no-op.
  const float n0 = fmaxf(m0, mx0), n1 = fmaxf(m1, mx1);
  const bool none0 = n0 == kNegInf, none1 = n1 == kNegInf;
  const float corr0 = none0 ? 1.f : exp2f(m0 - n0), corr1 = none1 ? 1.f : exp2f(m1 - n1);
  m0 = n0, m1 = n1;
#pragma unroll
  for (int i = 0; i < 2; ++i)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      s[i][h] = none0 ? 0.f : exp2f(s[i][h] - n0);
      s[i][2 + h] = none1 ? 0.f : exp2f(s[i][2 + h] - n1);
    }
  l0 = fmaf(l0, corr0, (s[0][0] + s[0][1]) + (s[1][0] + s[1][1]));
  l1 = fmaf(l1, corr1, (s[0][2] + s[0][3]) + (s[1][2] + s[1][3]));
  const unsigned pa[4] = {KV::pack(s[0][0], s[0][1]), KV::pack(s[0][2], s[0][3]),
                          KV::pack(s[1][0], s[1][1]), KV::pack(s[1][2], s[1][3])};
  // Where no row's maximum moved (every lane's corrections exactly 1, as in most chunks once a
  // long context's maximum settles), o · 1 is o bit for bit (no flush to zero here): the warp
  // skips the rescale, 4 · NT multiplies a lane.
  if (!__all_sync(0xffffffffu, corr0 == 1.f && corr1 == 1.f)) {
#pragma unroll
    for (int n = 0; n < NT; ++n)
      o[n][0] *= corr0, o[n][1] *= corr0, o[n][2] *= corr1, o[n][3] *= corr1;
  }
  // B: dim n of the two positions' rows, the lower position in the low half.
#pragma unroll
  for (int n = 0; n < NT; ++n)
    KV::mma(o[n], pa, KV::v_pair(vr[0], vr[1], n), KV::v_pair(vr[2], vr[3], n));
}

// Merges the 4 warps' (m, l, o) of rows g and g + 8 (m0, l0, o[n][0..1]; m1, l1, o[n][2..3]):
// a common maximum (mb0, mb1), then a fixed tree ((0 + 2) + (1 + 3)) through shared memory, so
// warp 0 ends with the item's sums and rows. A warp without a valid position for a row (m = -inf)
// contributes weight 0; for a row taking part, warp 0 always has one (position slot · SPLIT). Rows
// not taking part may end up NaN here; they are never written. The previous pass's last reads of
// the shared arrays are behind a barrier of its merge. sm_o's rows have one float of padding after
// every 32 (dim d at d + d / 32): a warp's stores of one (n-tile, column) pair, dims 32 · c4 + ...
// of rows g, then fall in 16 or 32 different banks instead of one.
template <int D, int R, class Sync>
__device__ __forceinline__ float2 attn_merge_warps(float (&sm_m)[4][16], float (&sm_l)[2][16],
                                                   float (&sm_o)[2][R][D + (D + 31) / 32], int warp,
                                                   int g, int c4, float m0, float m1, float& l0,
                                                   float& l1, float (&o)[D / 8][4], Sync sync) {
  constexpr int W = 4, NT = D / 8;
  if (c4 == 0) sm_m[warp][g] = m0, sm_m[warp][g + 8] = m1;
  sync();
  float mb0 = sm_m[0][g], mb1 = sm_m[0][g + 8];
#pragma unroll
  for (int w = 1; w < W; ++w) mb0 = fmaxf(mb0, sm_m[w][g]), mb1 = fmaxf(mb1, sm_m[w][g + 8]);
  const float sc0 = exp2f(m0 - mb0), sc1 = exp2f(m1 - mb1);
  l0 *= sc0, l1 *= sc1;
#pragma unroll
  for (int n = 0; n < NT; ++n) o[n][0] *= sc0, o[n][1] *= sc0, o[n][2] *= sc1, o[n][3] *= sc1;

    // Output column 2·c4 + h of n-tile n is dim (2·c4 + h)·D/8 + n.
#pragma unroll
  for (int half = W / 2; half >= 1; half /= 2) {
    if (warp >= half && warp < 2 * half) {
      if (c4 == 0) sm_l[warp - half][g] = l0, sm_l[warp - half][g + 8] = l1;
#pragma unroll
      for (int n = 0; n < NT; ++n)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int d = (2 * c4 + h) * (D / 8) + n, at = d + d / 32;
          if (g < R) sm_o[warp - half][g][at] = o[n][h];
          if (g + 8 < R) sm_o[warp - half][g + 8][at] = o[n][2 + h];
        }
    }
    sync();
    if (warp < half) {
      l0 += sm_l[warp][g], l1 += sm_l[warp][g + 8];
#pragma unroll
      for (int n = 0; n < NT; ++n)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int d = (2 * c4 + h) * (D / 8) + n, at = d + d / 32;
          if (g < R) o[n][h] += sm_o[warp][g][at];
          if (g + 8 < R) o[n][2 + h] += sm_o[warp][g + 8][at];
        }
    }
    sync();
  }
  return make_float2(mb0, mb1);
}

// Warp 0: an item's rows (those taking part: e > 0) as their final bf16 values, where they have
// this one slot: attn_combine_row's operations on it, on the same values (the weight
// exp2f(m - max(-inf, m)), one fmaf each into zero, the division), so the same bits.
template <int HQ, int D, int G>
__device__ __forceinline__ void attn_write_out(bf16* out, const float (&o)[D / 8][4], float l0,
                                               float l1, float mb0, float mb1, int e0, int e1,
                                               int t0, int kvh, int j0, int h0, int j1, int h1,
                                               int c4) {
  constexpr int NT = D / 8;
  const bool w0 = e0 > 0, w1 = e1 > 0;
  const float ninf = -__int_as_float(0x7f800000);
  const float s0 = exp2f(mb0 - fmaxf(ninf, mb0)), s1 = exp2f(mb1 - fmaxf(ninf, mb1));
  const float d0 = fmaf(l0, s0, 0.f), d1 = fmaf(l1, s1, 0.f);
  const long long r0 = (static_cast<long long>(t0 + j0) * HQ + kvh * G + h0) * D;
  const long long r1 = (static_cast<long long>(t0 + j1) * HQ + kvh * G + h1) * D;
#pragma unroll
  for (int n = 0; n < NT; ++n)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int d = (2 * c4 + h) * (D / 8) + n;
      if (w0) out[r0 + d] = f32_to_bf16(fmaf(o[n][h], s0, 0.f) / d0);
      if (w1) out[r1 + d] = f32_to_bf16(fmaf(o[n][2 + h], s1, 0.f) / d1);
    }
}

// Warp 0: an item's partials (the rows taking part: e > 0) into slot `slot`: part_o, and part_ml's
// {maximum, sum}.
template <int HQ, int D, int G, int NSPLIT>
__device__ __forceinline__ void attn_write_partials(float* part_o, float* part_ml,
                                                    const float (&o)[D / 8][4], float l0, float l1,
                                                    float mb0, float mb1, int e0, int e1, int t0,
                                                    int kvh, int slot, int j0, int h0, int j1,
                                                    int h1, int c4) {
  constexpr int NT = D / 8;
  const bool w0 = e0 > 0, w1 = e1 > 0;
  const long long i0 = (static_cast<long long>(t0 + j0) * HQ + kvh * G + h0) * NSPLIT + slot;
  const long long i1 = (static_cast<long long>(t0 + j1) * HQ + kvh * G + h1) * NSPLIT + slot;
#pragma unroll
  for (int n = 0; n < NT; ++n)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int d = (2 * c4 + h) * (D / 8) + n;
      if (w0) part_o[i0 * D + d] = o[n][h];
      if (w1) part_o[i1 * D + d] = o[n][2 + h];
    }
  if (c4 == 0) {
    if (w0) part_ml[i0 * 2] = mb0, part_ml[i0 * 2 + 1] = l0;
    if (w1) part_ml[i1 * 2] = mb1, part_ml[i1 * 2 + 1] = l1;
  }
}

template <int HQ, int HKV, int D, int PAGE, int MAXP, long long PAGE_ELEMS, int SPLIT, int NSPLIT,
          float SCALE_LOG2, int TPT, bool LOAD_AHEAD = false, bool PAGE_AHEAD = false, int BULK = 0,
          class KV = KvBf16, class Sync, class BeforeQ = AttnNoWait>
__device__ __forceinline__ void attn_split_block(
    int tile, int kvh, int slot, const float* q, const int* positions, const int* token_seq,
    const int* page_tables, const typename KV::Elem* kv_layer, float* part_o, float* part_ml,
    Sync sync, bf16* out = nullptr, unsigned char* ring = nullptr, AttnRing* ring_state = nullptr,
    int next_slot = -1, BeforeQ before_q = {}) {
  constexpr int G = HQ / HKV, W = 4, R = TPT * G;  // R: MMA rows in use
  constexpr int KS = D / 16, NT = D / 8;           // k-steps, n-tiles
  constexpr int VW = kAttnVWords<D, KV>;           // a lane's words of a V row
  using Elem = typename KV::Elem;
  using Piece8 = typename KV::Piece8;
  static_assert(HQ % HKV == 0 && TPT >= 1 && R <= 16 && D % 32 == 0 && D <= 128 &&
                    SPLIT % (16 * W) == 0,
                "shape");
  static_assert(!PAGE_AHEAD || (PAGE % 16 == 0 && SPLIT / (16 * W) < 32),
                "PAGE_AHEAD: a chunk in one page, a split's chunks a warp within its lanes");
  static_assert(BULK == 0 || (TPT == 1 && PAGE == 16 && !LOAD_AHEAD && !PAGE_AHEAD),
                "BULK: one token an item, a chunk one whole page, no other load scheme");
  const int t0 = tile * TPT;
  const int first = slot * SPLIT;  // the slot's first position
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, c4 = lane % 4;
  // This lane's MMA rows g and g + 8: token t0 + j of the tile, query head kvh·G + h.
  const int j0 = g / G, h0 = g % G, j1 = (g + 8) / G, h1 = (g + 8) % G;
  // One token (TPT == 1, the decode buckets): its position and sequence are loaded together and
  // stay in registers; the item is one pass, with no segment scan and no barrier for it.
  int pos1 = 0, seq1 = 0;
  if constexpr (TPT == 1) {
    pos1 = positions[t0], seq1 = token_seq[t0];
    if (pos1 < first) return;  // the slot starts past the token (most slots at short contexts)
  } else {
    // Nothing to do when the slot starts past every position of the tile; checked before any
    // other load.
    int last = positions[t0];
#pragma unroll
    for (int j = 1; j < TPT; ++j) last = max(last, positions[t0 + j]);
    if (last < first) return;
  }

  const Elem* k_base = kv_layer + static_cast<long long>(kvh) * PAGE * D + 8 * c4;
  const Elem* v_base = kv_layer + static_cast<long long>(HKV + kvh) * PAGE * D + g * (D / 8);
  const int* pt = page_tables + seq1 * MAXP;  // the pass's sequence's page table
  // PAGE_AHEAD: lane j of a warp holds the page of the warp's chunk j of the split from `start`
  // (start + 16 · (warp + W · j), clamped to end - 1 as the loads clamp their positions), j up to
  // SPLIT / (16 · W): one past the split's last, which the loads ahead of the last chunk read.
  int split_pg = 0, split_start = 0;
  auto load_split_pages = [&](int start, int end) {
    split_start = start;
    if (lane <= SPLIT / (16 * W))
      split_pg = pt[min(start + 16 * (warp + W * lane), end - 1) / PAGE];
  };
  auto load_k_row = [](const Elem* k, Piece8(&kk)[D / 32]) { attn_load_k_row<D, KV>(k, kk); };
  auto load_v_row = [](const Elem* v, unsigned(&vv)[VW]) { attn_load_v_row<D, KV>(v, vv); };
  // A chunk's K and V (16 positions from c; positions past `end` - 1 clamped to it) into
  // registers, every load issued before the first use. With PAGE_AHEAD the chunk's page comes from
  // its lane of split_pg (a chunk past `end` reads position end - 1, in that lane's page too).
  auto load_chunk = [&](int c, int end, Piece8(&kr)[2][D / 32], unsigned(&vr)[4][VW]) {
    long long page_base = 0;
    if constexpr (PAGE_AHEAD)
      page_base =
          static_cast<long long>(__shfl_sync(0xffffffffu, split_pg, (c - split_start) / (16 * W))) *
          PAGE_ELEMS;
    auto row = [&](int p) {
      if constexpr (PAGE_AHEAD)
        return page_base + (p % PAGE) * D;
      else
        return static_cast<long long>(pt[p / PAGE]) * PAGE_ELEMS + (p % PAGE) * D;
    };
#pragma unroll
    for (int i = 0; i < 2; ++i) load_k_row(k_base + row(min(c + 8 * i + g, end - 1)), kr[i]);
#pragma unroll
    for (int e = 0; e < 4; ++e)
      load_v_row(v_base + row(min(c + 2 * c4 + (e & 1) + 8 * (e >> 1), end - 1)), vr[e]);
  };
  // BULK: the same rows of the chunk's page from its slot at ks (K, then V).
  auto read_slot = [&](const Elem* ks, int c, int end, Piece8(&kr)[2][D / 32],
                       unsigned(&vr)[4][VW]) {
#pragma unroll
    for (int i = 0; i < 2; ++i)
      load_k_row(ks + (min(c + 8 * i + g, end - 1) - c) * D + 8 * c4, kr[i]);
#pragma unroll
    for (int e = 0; e < 4; ++e)
      load_v_row(
          ks + (PAGE + min(c + 2 * c4 + (e & 1) + 8 * (e >> 1), end - 1) - c) * D + g * (D / 8),
          vr[e]);
  };
  // BULK: chunk n of this warp's sequence (its splits in ascending order, chunks w, w + W, ... of
  // each) starts at chunk_at(n); the sequence ends at the first one past the token's position.
  // Slot (taken + n) % BULK of the warp's ring holds it, its mbarrier completing that phase
  // (taken: the chunks of the caller's earlier items).
  constexpr int kPageBytes = PAGE * D * KV::kBytes, kChunksPerSplit = SPLIT / (16 * W);
  // Chunk n of the warp's sequence in the item of slot first / SPLIT.
  auto chunk_of = [&](int slot_first, int n) {
    return slot_first + (n / kChunksPerSplit) * (NSPLIT * SPLIT) +
           16 * (warp + W * (n % kChunksPerSplit));
  };
  auto chunk_at = [&](int n) { return chunk_of(first, n); };
  unsigned ring_slots = 0, ring_bars = 0;
  int taken = 0;
  int win_page = 0, win_base = 0;  // lane j: the page of chunk win_base + j
  auto load_window = [&](int base) {
    win_base = base;
    const int c = chunk_at(base + lane);
    win_page = c <= pos1 ? pt[c / PAGE] : 0;
  };
  // Ring position `at` (taken + chunks before it) takes the page's K and V: lane 0 copies.
  auto copy_page = [&](int at, long long page) {
    if (lane == 0) {
      const unsigned bar = ring_bars + 8 * (at % BULK), dst = ring_slots + at % BULK * 2 * kPageBytes;
      const Elem* src = kv_layer + page * PAGE_ELEMS + static_cast<long long>(kvh) * PAGE * D;
      hexel::mbarrier::arrive_expect_tx(bar, 2 * kPageBytes);
      hexel::tma::copy_g2s(dst, src, kPageBytes, bar);
      hexel::tma::copy_g2s(dst + kPageBytes, src + static_cast<long long>(HKV) * PAGE * D,
                           kPageBytes, bar);
    }
  };
  // Chunk n (at most pos1) into its slot: every lane calls it (the window's shuffle).
  auto issue_chunk = [&](int n) {
    if (n - win_base >= 32) load_window(win_base + 32);
    copy_page(taken + n, __shfl_sync(0xffffffffu, win_page, n - win_base));
  };
  // The ring streams on into the next item: `total` chunks of this item for this warp, then the
  // next item's (first position next_first; lane j < BULK holds the page of its chunk j).
  int total = 0, next_first = -1, next_page = 0, next_issued = 0;
  // Ring position taken + n: this item's chunk n, or past them the next item's chunk n - total
  // where it exists (every lane calls it; its conditions are the warp's).
  auto issue_any = [&](int n) {
    if (n < total) {
      issue_chunk(n);
    } else if (next_first >= 0 && chunk_of(next_first, n - total) <= pos1) {
      copy_page(taken + n, __shfl_sync(0xffffffffu, next_page, n - total));
      next_issued = n - total + 1;
    }
  };
  // The chunk whose loads are in flight (with LOAD_AHEAD, the next one). One token with
  // LOAD_AHEAD: the warp's first chunk is issued here, before Q's staging and its barrier, so
  // that its page-table and K/V loads overlap them.
  Piece8 kr[2][D / 32];
  unsigned vr[4][VW];
  if constexpr (TPT == 1 && LOAD_AHEAD) {
    if constexpr (PAGE_AHEAD) load_split_pages(first, min(first + SPLIT, pos1 + 1));
    const int c0 = first + 16 * warp;
    const bool own_row = c0 + 15 >= pos1;  // a row of the chunk is (or is clamped to) the token's
    if (!own_row) load_chunk(c0, min(first + SPLIT, pos1 + 1), kr, vr);
    before_q();
    if (own_row) load_chunk(c0, min(first + SPLIT, pos1 + 1), kr, vr);
  } else if constexpr (BULK == 0) {
    before_q();
  }
  // BULK: the warp's barriers (set up in its first item) and its first BULK chunks, issued before
  // Q's staging like LOAD_AHEAD's (those the previous item issued are in flight already), and,
  // where this item's chunks end first, the next item's. Those copies go before before_q up to the
  // first that holds the token's page (a chunk is a page; the ring's chunks ascend), the rest after
  // it: pages of earlier positions only are copied before the wait.
  bool stage_q = true;
  if constexpr (BULK > 0) {
    ring_slots = hexel::smem_addr(ring) + warp * BULK * 2 * kPageBytes;
    ring_bars = hexel::smem_addr(ring) + W * BULK * 2 * kPageBytes + warp * BULK * 8;
    if (ring_state->used < 0) {
      if (lane == 0) {
        for (int b = 0; b < BULK; ++b) hexel::mbarrier::init(ring_bars + 8 * b, 1);
        hexel::mbarrier::fence_init();
      }
      __syncwarp();
      ring_state->used = 0, ring_state->ahead = 0;
    } else {
      stage_q = false;  // an earlier item of this token and head staged it
    }
    taken = ring_state->used;
    load_window(0);
    while (chunk_at(total) <= pos1) ++total;
    if (next_slot >= 0 && next_slot * SPLIT <= pos1) {
      next_first = next_slot * SPLIT;
      const int c = chunk_of(next_first, lane);
      if (lane < BULK && c <= pos1) next_page = pt[c / PAGE];
    }
    // Ring position taken + n's chunk start (this item's or the next item's), or past pos1: none.
    auto ring_chunk = [&](int n) {
      return n < total ? chunk_at(n) : next_first >= 0 ? chunk_of(next_first, n - total) : pos1 + 1;
    };
    int n = ring_state->ahead;
    for (; n < BULK && ring_chunk(n) + 15 < pos1; ++n) issue_any(n);
    before_q();
    for (; n < BULK; ++n) issue_any(n);
  }

  // Shared memory holds what the passes below read but should not keep in registers: at 128-168
  // registers a thread (3 or 4 blocks an SM, __launch_bounds__) the o accumulators and the K/V
  // loads in flight take the rest, and anything more spills.
  //  - with TPT > 1, the tile's positions and its segments (maximal runs of equal token_seq:
  //    tokens of one sequence are contiguous in a step) that reach this slot: first and end
  //    token, sequence, largest position; only the segment index stays live across a pass;
  //  - the Q fragments, scaled to bf16, in the MMA's A layout: one 16-byte piece per (k-step,
  //    lane), the same for every warp, read as the chunk loop needs them.
  __shared__ int sm_pos[TPT], sm_seq[TPT], sm_seg[TPT][4], sm_nseg;
  __shared__ uint4 sm_q[KS][32];
  if constexpr (TPT > 1) {
    if (threadIdx.x < TPT) {
      sm_pos[threadIdx.x] = positions[t0 + threadIdx.x];
      sm_seq[threadIdx.x] = token_seq[t0 + threadIdx.x];
    }
  }
  if (stage_q) {
    attn_stage_q<HQ, D, G, R, SCALE_LOG2, KV>(sm_q, q, t0, kvh, j0, h0, j1, h1, warp, lane, g, c4);
    sync();
  }
  int nseg = 1;
  if constexpr (TPT > 1) {
    if (threadIdx.x == 0) attn_scan_segments<TPT>(sm_pos, sm_seq, sm_seg, sm_nseg, first);
    sync();
    nseg = sm_nseg;
  }

  const float kNegInf = -__int_as_float(0x7f800000);
  __shared__ float sm_m[W][16];
  __shared__ float sm_l[W / 2][16];
  // The merge's o rows, one float of padding after every 32 (dim d at d + d / 32): a warp's
  // stores of one (n-tile, column) pair, dims 32 · c4 + ... of rows g, then fall in 16 or 32
  // different banks instead of one (unpadded, 16-way conflicts).
  constexpr int kORow = D + (D + 31) / 32;
  __shared__ float sm_o[W / 2][R][kORow];

  // One pass per segment [a, b) of the tile that reaches the slot. Padding rows (negative
  // position) and rows whose position is before the slot's first split write nothing: the
  // combine reads slots 0 .. min(position / SPLIT, NSPLIT - 1) only. The loop is uniform over
  // the item's threads (the merge synchronizes it).
  for (int sg = 0; sg < nseg; ++sg) {
    // A row's valid positions in this pass are [0, e): e = its position + 1 if it takes part,
    // else 0 (masked throughout). Rows past R do not exist.
    int pos_max = pos1, e0 = g < R ? pos1 + 1 : 0, e1 = g + 8 < R ? pos1 + 1 : 0;
    if constexpr (TPT > 1) {
      const int a = sm_seg[sg][0], b = sm_seg[sg][1];
      pos_max = sm_seg[sg][3];
      e0 = g < R && j0 >= a && j0 < b && sm_pos[j0] >= first ? sm_pos[j0] + 1 : 0;
      e1 = g + 8 < R && j1 >= a && j1 < b && sm_pos[j1] >= first ? sm_pos[j1] + 1 : 0;
      pt = page_tables + sm_seg[sg][2] * MAXP;
    }

    float o[NT][4];
#pragma unroll
    for (int n = 0; n < NT; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.f;
    float m0 = kNegInf, m1 = kNegInf, l0 = 0.f, l1 = 0.f;  // rows g and g + 8

    // The chunk's arithmetic: scores, the online softmax, o += P·V.
    auto run_chunk = [&](int c, const Piece8(&kr)[2][D / 32], const unsigned(&vr)[4][VW]) {
      attn_chunk<D, KV>(c, kr, vr, sm_q, lane, c4, e0, e1, m0, m1, l0, l1, o);
    };
    if constexpr (BULK > 0) {
      // The same chunks in the same order as the loop below.
      int n = 0;
      for (;; ++n) {
        const int c = chunk_at(n);
        if (c > pos_max) break;
        const int start = c - 16 * (warp + W * (n % kChunksPerSplit));
        const int end = min(start + SPLIT, pos_max + 1);
        const int k = (taken + n) % BULK;
        hexel::mbarrier::wait_parity(ring_bars + 8 * k, ((taken + n) / BULK) & 1);
        const Elem* ks = reinterpret_cast<const Elem*>(ring + (warp * BULK + k) * 2 * kPageBytes);
        read_slot(ks, c, end, kr, vr);
        run_chunk(c, kr, vr);
        __syncwarp();  // every lane has read the slot: it takes chunk n + BULK
        issue_any(n + BULK);
      }
      ring_state->used = taken + n, ring_state->ahead = next_issued;
    } else {
      for (int start = first; start <= pos_max; start += NSPLIT * SPLIT) {
        const int end = min(start + SPLIT, pos_max + 1);  // the loads' last position + 1
        // (Again for the first split of one token loaded ahead: the same ids, from L1.)
        if constexpr (PAGE_AHEAD) load_split_pages(start, end);
        if constexpr (LOAD_AHEAD) {
          // The next chunk's loads are in flight while this one computes (its positions clamped
          // like the last chunk's, so the load past the last chunk reads valid pages). One
          // token's first chunk was issued before Q's staging.
          if (TPT > 1 || start != first) load_chunk(start + 16 * warp, end, kr, vr);
          for (int c = start + 16 * warp; c < end; c += 16 * W) {
            Piece8 kn[2][D / 32];
            unsigned vn[4][VW];
            load_chunk(c + 16 * W, end, kn, vn);
            run_chunk(c, kr, vr);
#pragma unroll
            for (int i = 0; i < 2; ++i)
#pragma unroll
              for (int j = 0; j < D / 32; ++j) kr[i][j] = kn[i][j];
#pragma unroll
            for (int e = 0; e < 4; ++e)
#pragma unroll
              for (int w = 0; w < VW; ++w) vr[e][w] = vn[e][w];
          }
        } else {
          for (int c = start + 16 * warp; c < end; c += 16 * W) {
            load_chunk(c, end, kr, vr);
            run_chunk(c, kr, vr);
          }
        }
      }
    }
    // Each lane summed its own columns; the quad's sums are folded in a fixed order.
#pragma unroll
    for (int x = 1; x < 4; x <<= 1) {
      l0 += __shfl_xor_sync(0xffffffffu, l0, x);
      l1 += __shfl_xor_sync(0xffffffffu, l1, x);
    }
    // V's scale (an e4m3 cache's; 1 for bf16): the sums are linear in V, so it applies to them.
    if (KV::v_scale() != 1.f) {
#pragma unroll
      for (int n = 0; n < D / 8; ++n)
#pragma unroll
        for (int i = 0; i < 4; ++i) o[n][i] *= KV::v_scale();
    }
    const float2 mb =
        attn_merge_warps<D, R>(sm_m, sm_l, sm_o, warp, g, c4, m0, m1, l0, l1, o, sync);
    const float mb0 = mb.x, mb1 = mb.y;
    if (warp == 0 && out)
      attn_write_out<HQ, D, G>(out, o, l0, l1, mb0, mb1, e0, e1, t0, kvh, j0, h0, j1, h1, c4);
    else if (warp == 0)
      attn_write_partials<HQ, D, G, NSPLIT>(part_o, part_ml, o, l0, l1, mb0, mb1, e0, e1, t0, kvh,
                                            slot, j0, h0, j1, h1, c4);
  }
}

// attn_split's blocks an SM (its launch bounds): `blocks`, or where it is 0 the form's default,
// two with LOAD_AHEAD (its registers: the next chunk in flight), three otherwise (140 registers at
// head dim 128).
HEXEL_HOST_DEVICE constexpr int attn_split_blocks(int blocks, bool load_ahead) {
  return blocks ? blocks : load_ahead ? 2 : 3;
}

// BLOCKS: blocks an SM (attn_split_blocks), the plan's per bucket: LOAD_AHEAD for buckets with too
// few items to fill three blocks an SM anyway, at three on an e4m3 cache from
// kAttnSplitAheadThreeBlocksMinRows rows (an e4m3 chunk in flight holds half the registers); four
// without it where 128 registers hold the form (kAttnSplitFourBlocksMinRows; kernel_plan.hpp).
// Launch bounds move registers only: the same bits at any BLOCKS.
// BULK: ring slots a warp (attn_split_block), in attn_split_ring_bytes of dynamic shared memory.
// EARLY (one token a tile, in buckets whose every row is one generated token of its sequence: the
// decode buckets): the block waits for its predecessor (griddepcontrol.wait) inside each item, as
// attn_split_block's before_q, instead of at entry. What an item reads before it is the step
// descriptor's (positions, sequences, page tables: copied before the step's first kernel) and the
// K/V rows of positions before the token's, which earlier steps wrote; Q and the token's own row,
// which the QKV kernel before this one writes, are read after it. Elsewhere (a prefill bucket's
// rows may be several tokens of one sequence, whose K/V this step writes) the block waits at
// entry. Nothing is written before the wait, and a block whose items all return early waits after
// them, so the grid still completes after its predecessor. Loads only: the same bits. KV: the
// cache's element format (common.cuh), KvE4m3 with the layer's scales for an e4m3 cache.
template <int HQ, int HKV, int D, int PAGE, int MAXP, long long PAGE_ELEMS, int SPLIT, int NSPLIT,
          float SCALE_LOG2, int TPT, bool LOAD_AHEAD = false, bool PAGE_AHEAD = false,
          int BLOCKS = 0, int BULK = 0, bool EARLY = false, class KV = KvBf16>
__global__ void __launch_bounds__(128, attn_split_blocks(BLOCKS, LOAD_AHEAD))
    attn_split(const float* q, const int* positions, const int* token_seq, const int* page_tables,
               const typename KV::Elem* kv_layer, float* part_o, float* part_ml) {
  static_assert(!EARLY || TPT == 1, "EARLY: one token a tile");
  extern __shared__ __align__(128) unsigned char attn_split_ring[];
  AttnRing ring;  // BULK: each warp's ring across the block's items
  if constexpr (EARLY)
    hexel::launch_dependents();
  else
    pdl_entry();
  // Items back to back need no barrier between them (attn_split_block); a slot past every
  // position of the tile returns at once, and so do the later ones.
  for (unsigned slot = blockIdx.z; slot < NSPLIT; slot += gridDim.z) {
    const unsigned next = slot + gridDim.z;
    attn_split_block<HQ, HKV, D, PAGE, MAXP, PAGE_ELEMS, SPLIT, NSPLIT, SCALE_LOG2, TPT, LOAD_AHEAD,
                     PAGE_AHEAD, BULK, KV>(
        blockIdx.x, blockIdx.y, static_cast<int>(slot), q, positions, token_seq, page_tables,
        kv_layer, part_o, part_ml, [] { __syncthreads(); }, nullptr, attn_split_ring, &ring,
        next < NSPLIT ? static_cast<int>(next) : -1, AttnPdlWaitIf<EARLY>{});
  }
  if constexpr (EARLY) hexel::grid_dependency_wait();
}

// out[t, hq*D + d] = bf16(softmax-weighted sum), merging the slots 0..min(position/SPLIT,
// NSPLIT - 1) in order.
// Padding rows (negative position) get zeros. The slots' {max, sum} are loaded once, in
// parallel, into shared memory, so the per-dim loop only waits on independent part_o loads.
//
// attn_combine_row is one (token t, query head hq) row with its indices explicit, for the
// persistent decode kernel as attn_split_block is; attn_combine runs one row a block. The row runs
// on threads 0..D-1, thread d making dim d (threadIdx.x < D only, no blockIdx), and `sync` is a
// barrier of exactly those D threads; all D call it the same number of times (the early return
// is uniform). Rows run back to back by the same threads need a sync() in between: the last loop
// reads sm_l and sm_w with no barrier after it.
template <int HQ, int D, int NSPLIT, int SPLIT, class Sync>
__device__ __forceinline__ void attn_combine_row(int t, int hq, const float* part_o,
                                                 const float* part_ml, const int* positions,
                                                 bf16* out, Sync sync) {
  __shared__ float sm_m[NSPLIT], sm_w[NSPLIT], sm_l[NSPLIT];
  const int d = threadIdx.x;
  const int pos = positions[t];
  bf16* o = out + (static_cast<long long>(t) * HQ + hq) * D;
  if (pos < 0) {
    o[d] = 0;
    return;
  }
  const long long base = (static_cast<long long>(t) * HQ + hq) * NSPLIT;
  const int last = min(pos / SPLIT, NSPLIT - 1);
  for (int s = d; s <= last; s += D)
    sm_m[s] = part_ml[(base + s) * 2], sm_l[s] = part_ml[(base + s) * 2 + 1];
  sync();
  float mx = -__int_as_float(0x7f800000);
  for (int s = 0; s <= last; ++s) mx = fmaxf(mx, sm_m[s]);
  for (int s = d; s <= last; s += D) sm_w[s] = exp2f(sm_m[s] - mx);
  sync();
  float l = 0.f, acc = 0.f;
#pragma unroll 8
  for (int s = 0; s <= last; ++s) {
    l = fmaf(sm_l[s], sm_w[s], l);
    acc = fmaf(part_o[(base + s) * D + d], sm_w[s], acc);
  }
  o[d] = f32_to_bf16(acc / l);
}

template <int HQ, int D, int NSPLIT, int SPLIT>
__global__ void __launch_bounds__(D)
    attn_combine(const float* part_o, const float* part_ml, const int* positions, bf16* out) {
  pdl_entry();
  attn_combine_row<HQ, D, NSPLIT, SPLIT>(blockIdx.x, blockIdx.y, part_o, part_ml, positions, out,
                                         [] { __syncthreads(); });
}

}  // namespace telos_kernels
