#pragma once
// Causal attention for prompt tokens over the paged KV cache on Hopper tensor cores (wgmma), with
// a FlashAttention-style online softmax: the same inputs and output as attn_split + attn_combine
// (attention.cuh), for prefill buckets, where a tile of rows reads each K/V block once.
//
// Rows. A CTA computes one KV head kvh for a tile of TPT consecutive tokens t0 = tile · TPT ..:
// MMA row r = j · G + h is token t0 + j, query head kvh · G + h (G = HQ / HKV), so the G query
// heads that share a KV head share its K/V reads. 128 rows a CTA, two consumer warpgroups of 64
// (wgmma m64); rows r >= TPT · G exist in no token (the plan picks TPT <= 128 / G dividing the
// bucket's tokens: the kernel has no T, the grid is (HKV, T / TPT)). Tiles are visited last
// first (blockIdx.y counts down), so the longest causal rows start first and the short ones fill
// the tail.
//
// Key blocks. The keys are cut into blocks of BN = 128 positions at fixed absolute boundaries
// (block b = positions [b · BN, (b + 1) · BN)). A row at position p visits blocks 0 .. p / BN in
// ascending order; its scores past p are -inf. Every row of the tile runs through the same block
// loop (up to the block holding the largest position of its sequence's rows in the tile), and a
// block wholly past a row's position is an exact no-op for it: its running maximum does not
// change, so the correction is exactly 1 (not computed: the rule is `m_new == m_old ? 1 : ...`),
// its weights are exp2(-inf) = 0, and o += 0 · v leaves o as it is (v finite: keys past the
// sequence's last position are zero-filled, never read). A row's bits therefore depend only on
// its own q, position and sequence: not on TPT, the other rows of the tile, nor how the prompt
// was chunked (the previous chunks' K/V are in the pages at the same absolute positions).
//
// Sequences. Tokens of one sequence are consecutive in a step, but a tile may hold several
// sequences (short prompts, a chunk boundary). The tile runs one pass per segment (a maximal run
// of equal token_seq with a position >= 0), the K/V blocks of that sequence's pages; in a pass,
// the rows of other segments are masked at every key (their results, NaN, are never written) and
// each row is written after its own segment's pass. Padding rows (position -1) get zeros.
//
// Persistent (NT = T / TPT > 0, K/V by TMA): min(HKV · NT, SMs) CTAs, each running its share of
// the HKV · NT tiles one after the other through the same K/V ring, so the next tile's first K/V
// blocks are in flight while the consumers finish the current one and a CTA's setup (barriers,
// the first loads) is paid once, not per tile (docs/performance.md). The producer warp scans each
// tile's segments into one of two tables (the tile k % 2 of its CTA) behind mbarriers seg_full
// (the producer's lane 0) and seg_empty (every consumer thread), and asks L2 for the tile's Q
// rows; the consumers restage their 64 rows of Q a tile at a time between two warpgroup barriers.
// Loads and scheduling only: a row's bits are those of a tile a CTA.
//
// Warp roles (384 threads, one CTA an SM): warpgroup 0 is the producer, warpgroups 1 and 2 the
// consumers (rows 0-63 and 64-127). The producer fills a ring of STAGES stages with K and V blocks
// in the 128B-swizzled layout wgmma reads (hexel/swizzle.cuh: the 16-byte chunk index XOR the row
// index mod 8), K and V on their own full_k / full_v barriers, so S = Q·Kᵀ can start before V has
// landed. Positions past the segment's last one are zero-filled. Two ways, by page size:
//  - TMA (PAGE a multiple of 8 dividing BN, the engine's pages): one producer warp. A block's
//    whole pages up to the segment's last position come by TMA through `kv_map`, a 2D map over
//    the pool from this layer's base (rows of D elements, boxes of PAGE rows x 64 columns, the
//    128-byte swizzle; docs/artifact.md, `tmap:kv:`): lane i issues page i's boxes (its own
//    page-table entry, one coalesced read), lane 0 arms the barrier with their bytes. A page at
//    a multiple of 8 rows is 1024-byte aligned in the stage, so the TMA swizzle is the layout
//    above. The page holding the last position and those after it (the segment's last block
//    only) come by cp.async from the warp's 32 lanes, zero-filled past the last position, so
//    nothing past it is read: a page's unwritten tail may hold anything, NaN included. Each lane
//    signals its copies with cp.async.mbarrier.arrive.noinc: a full barrier expects 33 arrivals
//    (32 lanes and the arming) and the TMA bytes.
//  - cp.async (any other page size): the producer's 128 threads copy 16 bytes a thread and
//    instruction, each position looked up in the page table, and arrive as above (count 128).
// The stage bytes are the same either way. cp.async writes through the generic proxy and wgmma
// reads through the async proxy: each consumer thread issues fence.proxy.async after its wait on
// a full barrier, before the wgmma that reads the stage. Consumer warps release a stage's K on
// its empty_k barrier once their S = Q·Kᵀ has completed and its V on empty_v once their P·V has
// (count 8: one arrival per consumer warp), so the next K block can load while V is in use.
//
// Shared memory (128B-swizzled, every operand 1024-byte aligned so descriptors need no base
// offset; bf16 rows of 64 elements = 128 bytes, a D-wide row in D / 64 column blocks):
//  - Q  [D/64][128 rows][64]: staged once by the consumers from q (f32 -> bf16), K-major A.
//  - K  [D/64][BN][64] per stage: B of S = Q·Kᵀ, K-major (rows = positions, contiguous along D),
//    the same as a GEMM weight tile: SBO = 1024 (8 rows), k-step 16 = +32 bytes inside a row.
//  - V  [D/64][BN][64] per stage: B of O += P·V is [position = k][dim = n], contiguous along n:
//    N-major (trans-b = 1). PTX ISA, wgmma "Shared Memory Matrix Layout" / matrix descriptor: for
//    MN-major swizzled layouts the leading byte offset is the distance between (swizzle bytes /
//    16) = 8 groups of 8 elements along N, i.e. between 64-dim column blocks (BN · 128 bytes
//    here), and the stride byte offset the distance between groups of 8 along K (8 positions =
//    1024 bytes). A k-step of 16 positions is +2048 bytes.
//
// Consumers, per key block: S = Q·Kᵀ (D/16 wgmma m64nBNk16, both operands in shared memory),
// then the online softmax in registers (thread = 2 rows × BN/4 columns; a row lives in the 4
// lanes of a quad: max by two xor-shuffles; the row sum is kept per lane and folded across the
// quad once at the end, in a fixed order), scores scaled inside exp2 (p = 2^(s · SCALE_LOG2 -
// m · SCALE_LOG2), SCALE_LOG2 = log2(e) / sqrt(D)), o *= correction, then O += P·V with P from
// registers: the S accumulator of columns 16k .. 16k + 15 is exactly the thread's register-A
// fragment of k-step k (rows l/4 and l/4 + 8, k 2(l%4) + {0,1} and + 8), packed to bf16.
// The output is o / l in bf16.
// Each block in the plain order: S = Q·Kᵀ and its wait, the softmax, P·V and its wait, Q in bf16
// (the fastest at 4k-16k with the engine's 16-position pages; what the softmax / P·V overlap and Q
// in two bf16 parts measured is in docs/performance.md, "tried and did not pay").
//
// Three trims of each key block's fixed work, none of which changes a bit: the row
// maximum over four partial maxima a row instead of one chain of BN / 8 dependent steps; the
// proxy fence after a stage's wait only for blocks that cp.async wrote some of (with K/V by TMA, a
// segment's last block; TMA writes through the async proxy, as wgmma reads); and o's rescale
// (D / 2 multiplications a thread) skipped where no row of the warp has a new maximum.
//
//
// Registers: S (BN/2 f32), O (D/2 f32), P (BN/4 b32) per consumer thread: setmaxnreg gives the
// consumers 240 and the producer 24; persistent, 232 and 40 (the producer's scan of each tile
// spills at 24). The consumers' increase must come out of what the producer gives back, (168 - 24)
// · 128 = (240 - 168) · 256, (168 - 40) · 128 = (232 - 168) · 256, the CTA's 384 · 168 registers at
// launch (__launch_bounds__(384, 1): 65536 / 384 rounded down to 8): an increase the pool cannot
// cover blocks setmaxnreg for ever (32 / 240 would hang the persistent form; a static_assert checks
// the balance). Stages: 3 at D = 128 (Q 32 KB + 3 x 64 KB = 224 KB, under the 227 KB a CTA may have
// with the segment table; two tables, persistent, fit up to 64 tokens a tile), 6 at D = 64 (16 KB +
// 6 x 32 KB).
#include "common.cuh"
#include "hexel/cp_async.cuh"
#include "hexel/ld_st.cuh"
#include "hexel/math.cuh"
#include "hexel/mbarrier.cuh"
#include "hexel/swizzle.cuh"
#include "hexel/sync.cuh"
#include "hexel/tma.cuh"
#include "hexel/wgmma.cuh"

namespace telos_kernels {

template <int D>
struct AttnPrefill {
  static_assert(D == 64 || D == 128, "head dims of whole 128-byte swizzle rows, at most 128");
  static constexpr int kRows = 128;     // MMA rows a CTA: two consumer warpgroups of 64
  static constexpr int kBlockN = 128;   // key positions a block
  static constexpr int kThreads = 384;  // producer warpgroup + two consumer warpgroups
  static constexpr int kStages = D == 128 ? 3 : 6;
  static constexpr unsigned kQBytes = kRows * D * 2;
  static constexpr unsigned kKvBytes = kBlockN * D * 2;  // one of K or V, one stage
  static constexpr unsigned kStageBytes = 2 * kKvBytes;
  // Q, the stages, full_k / full_v / empty_k / empty_v barriers; +1024 to align the base to the
  // swizzle repeat.
  static constexpr unsigned kSmemBytes = kQBytes + kStages * kStageBytes + 4 * kStages * 8 + 1024;
  // Shared memory a CTA may have on sm_90 (227 KB, dynamic and static together).
  static constexpr unsigned kSmemLimit = 232448;
};

// A segment of a tile: tokens [first, end) of one sequence, the largest position among them.
struct AttnPrefillSegment {
  short first, end;
  int last;
};

// Warp 0: the segments of the tile at t0 (maximal runs of equal token_seq that hold a position)
// into table tb of sm_seg and their count into sm_nseg[tb]. Reads the tile's token_seq and
// positions at once (a lane a token) and scans them through shuffles; lane 0 writes the segments.
// (A serial scan, with Q staged behind it, would put a chain of dependent loads on every consumer's
// path before its first key block.)
template <int TPT, int TABLES>
__device__ __forceinline__ void attn_prefill_scan_tile(int lane, int t0, int tb,
                                                       const int* positions, const int* token_seq,
                                                       AttnPrefillSegment (&sm_seg)[TABLES][TPT],
                                                       int (&sm_nseg)[TABLES]) {
  constexpr int kTok = (TPT + 31) / 32;  // tokens a lane
  int tseq[kTok], tpos[kTok];
#pragma unroll
  for (int i = 0; i < kTok; ++i) {
    const int j = 32 * i + lane;
    tseq[i] = j < TPT ? token_seq[t0 + j] : 0;
    tpos[i] = j < TPT ? positions[t0 + j] : 0;
  }
  // Runs of equal token_seq, token by token (lane l % 32's register l / 32, by shuffle), the
  // same on every lane.
  int n = 0, first = 0, seq = 0, last = -1;
  auto close = [&](int end) {
    if (last < 0) return;  // padding only
    if (lane == 0) sm_seg[tb][n] = {static_cast<short>(first), static_cast<short>(end), last};
    ++n;
  };
#pragma unroll
  for (int i = 0; i < kTok; ++i)
    for (int l = 0; l < 32 && 32 * i + l < TPT; ++l) {
      const int t = 32 * i + l;
      const int ts = __shfl_sync(0xffffffffu, tseq[i], l);
      const int tp = __shfl_sync(0xffffffffu, tpos[i], l);
      if (t > 0 && ts == seq) {
        last = max(last, tp);
        continue;
      }
      if (t > 0) close(t);
      first = t, seq = ts, last = tp;
    }
  close(TPT);
  if (lane == 0) sm_nseg[tb] = n;
}

// A consumer thread (wt of warpgroup cw): its warpgroup's 64 rows of the tile at t0 (KV head kvh)
// of Q as bf16 into the swizzled Q tile at sq (zeros for rows of no token or of padding), every
// load first, then the stores and the fence for wgmma; with `meet`, a meeting of the warpgroup
// (barrier 1 + cw) between the two.
template <int HQ, int D, int G, int TPT>
__device__ __forceinline__ void attn_prefill_stage_q(const float* q, const int* positions,
                                                     unsigned sq, int cw, int wt, int kvh, int t0,
                                                     bool meet) {
  using namespace hexel;
  constexpr int R = TPT * G;
  constexpr int kIt = 64 * (D / 8) / 128;  // 16-byte pieces a thread
  float4 qa[kIt], qb[kIt];
  bool live[kIt];
#pragma unroll
  for (int k = 0; k < kIt; ++k) {
    const int c = wt + 128 * k, r = 64 * cw + c / (D / 8), i = c % (D / 8), j = r / G;
    live[k] = r < R && positions[t0 + j] >= 0;
    const float* src =
        q + (static_cast<long long>(t0 + min(j, TPT - 1)) * HQ + kvh * G + r % G) * D + 8 * i;
    qa[k] = *reinterpret_cast<const float4*>(src);
    qb[k] = *reinterpret_cast<const float4*>(src + 4);
  }
  if (meet) named_barrier_sync(1 + cw, 128);
#pragma unroll
  for (int k = 0; k < kIt; ++k) {
    const int c = wt + 128 * k, r = 64 * cw + c / (D / 8), i = c % (D / 8);
    const float4 a = qa[k], b = qb[k];
    const uint4 v = live[k] ? make_uint4(pack_bf16x2(a.x, a.y), pack_bf16x2(a.z, a.w),
                                         pack_bf16x2(b.x, b.y), pack_bf16x2(b.z, b.w))
                            : make_uint4(0u, 0u, 0u, 0u);
    const unsigned dst = swizzled_chunk_b128(sq + (i / 8) * (AttnPrefill<D>::kRows * 128), r, i);
    st_shared_v4(dst, v.x, v.y, v.z, v.w);
  }
  fence_proxy_async_smem();  // generic-proxy stores, then wgmma reads them (after a barrier)
}

// The K/V stage ring: stage s's K tile at k_stage(s), its V tile kKvBytes after it, and the
// stage's barriers full_k, full_v, empty_k, empty_v (+ 8 · s each).
template <int D>
struct AttnPrefillKvRing {
  unsigned stages, full_k, full_v, empty_k, empty_v;
  __device__ __forceinline__ unsigned k_stage(unsigned s) const {
    return stages + s * AttnPrefill<D>::kStageBytes;
  }
  __device__ __forceinline__ unsigned v_stage(unsigned s) const {
    return k_stage(s) + AttnPrefill<D>::kKvBytes;
  }
};

// The TMA producer warp (`lane`): the K and V blocks of the nseg segments `seg` of the tile at t0
// (KV head kvh) into the ring, each segment's blocks 0 .. last / BN in order, K then V on their own
// barriers. Whole pages up to the segment's last position by TMA through `kv_map` (lane i: page i
// of the block), the rest by cp.async from the warp's lanes, zero-filled past the last position
// (see the header, "Warp roles").
template <int HKV, int D, int PAGE, int MAXP, long long PAGE_ELEMS, int S>
__device__ __forceinline__ void attn_prefill_produce_tma(
    int lane, int kvh, int t0, const AttnPrefillSegment* seg, int nseg, const int* token_seq,
    const int* page_tables, const bf16* kv_layer, const hexel::TensorMap* kv_map,
    const AttnPrefillKvRing<D>& kv_ring, hexel::mbarrier::StageRing<S>& ring) {
  using namespace hexel;
  constexpr int BN = AttnPrefill<D>::kBlockN;
  constexpr int kPieces = D / 8;                               // 16-byte pieces a position
  constexpr int kPageRows = static_cast<int>(PAGE_ELEMS / D);  // a page's stride in map rows
  for (int sg = 0; sg < nseg; ++sg) {
    const int pos_max = seg[sg].last;
    const int* pt = page_tables + token_seq[t0 + seg[sg].first] * MAXP;
    for (int b = 0; b <= pos_max / BN; ++b) {
      // Rows [0, whole) of the block are whole pages up to pos_max; the rest is the tail.
      const int whole = min(BN, (pos_max + 1) / PAGE * PAGE - b * BN);
      const int page = lane < whole / PAGE ? pt[b * (BN / PAGE) + lane] : 0;
#pragma unroll
      for (int kv = 0; kv < 2; ++kv) {
        mbarrier::wait_parity((kv == 0 ? kv_ring.empty_k : kv_ring.empty_v) + 8 * ring.index,
                              ring.phase ^ 1u);
        const unsigned dst0 = kv == 0 ? kv_ring.k_stage(ring.index) : kv_ring.v_stage(ring.index);
        const unsigned full = (kv == 0 ? kv_ring.full_k : kv_ring.full_v) + 8 * ring.index;
        if (lane == 0) mbarrier::arrive_expect_tx(full, static_cast<unsigned>(whole) * D * 2);
        __syncwarp();
        if (lane < whole / PAGE) {
          const int row = page * kPageRows + (kv * HKV + kvh) * PAGE;
#pragma unroll
          for (int c = 0; c < D / 64; ++c)
            tma::load(dst0 + c * (BN * 128) + lane * PAGE * 128, kv_map, full, 64 * c, row);
        }
        const bf16* src0 = kv_layer + static_cast<long long>(kv * HKV + kvh) * PAGE * D;
        // Positions past the last one read its row (finite, in the sequence's pages) and
        // write zeros (source size 0).
        for (int c = whole * kPieces + lane; c < BN * kPieces; c += 32) {
          const int p = c / kPieces, i = c % kPieces, pos = min(b * BN + p, pos_max);
          cp_async::copy_16(
              swizzled_chunk_b128(dst0 + (i / 8) * (BN * 128), p, i),
              src0 + static_cast<long long>(pt[pos / PAGE]) * PAGE_ELEMS + (pos % PAGE) * D + 8 * i,
              b * BN + p <= pos_max ? 16u : 0u);
        }
        cp_async::arrive_noinc(full);
      }
      ring.advance();
    }
  }
}

// The cp.async producer (pages TMA cannot tile): thread `tid` of the producer warpgroup copies
// 16-byte pieces i of positions p (16 threads a D = 128 row) of the same blocks, in the same order,
// each position looked up in the page table, zero-filled past the segment's last position.
template <int HKV, int D, int PAGE, int MAXP, long long PAGE_ELEMS, int S>
__device__ __forceinline__ void attn_prefill_produce_copy(
    int tid, int kvh, int t0, const AttnPrefillSegment* seg, int nseg, const int* token_seq,
    const int* page_tables, const bf16* kv_layer, const AttnPrefillKvRing<D>& kv_ring,
    hexel::mbarrier::StageRing<S>& ring) {
  using namespace hexel;
  constexpr int BN = AttnPrefill<D>::kBlockN;
  constexpr int kPieces = D / 8;  // 16-byte pieces a position
  constexpr int kPerThread = BN * kPieces / 128;
  for (int sg = 0; sg < nseg; ++sg) {
    const int pos_max = seg[sg].last;
    const int* pt = page_tables + token_seq[t0 + seg[sg].first] * MAXP;
    for (int b = 0; b <= pos_max / BN; ++b) {
#pragma unroll
      for (int kv = 0; kv < 2; ++kv) {
        mbarrier::wait_parity((kv == 0 ? kv_ring.empty_k : kv_ring.empty_v) + 8 * ring.index,
                              ring.phase ^ 1u);
        const unsigned dst0 = kv == 0 ? kv_ring.k_stage(ring.index) : kv_ring.v_stage(ring.index);
        const bf16* src0 = kv_layer + static_cast<long long>(kv * HKV + kvh) * PAGE * D;
#pragma unroll 4
        for (int k = 0; k < kPerThread; ++k) {
          const int c = tid + 128 * k, p = c / kPieces, i = c % kPieces;
          const int pos = b * BN + p;
          const bool valid = pos <= pos_max;
          const bf16* src = valid ? src0 + static_cast<long long>(pt[pos / PAGE]) * PAGE_ELEMS +
                                        (pos % PAGE) * D + 8 * i
                                  : kv_layer;
          const unsigned dst = swizzled_chunk_b128(dst0 + (i / 8) * (BN * 128), p, i);
          cp_async::copy_16(dst, src, valid ? 16u : 0u);
        }
        cp_async::arrive_noinc((kv == 0 ? kv_ring.full_k : kv_ring.full_v) + 8 * ring.index);
      }
      ring.advance();
    }
  }
}

// out[t, (kvh · G + h) · D + d] = bf16(softmax over keys [0, position] of the row's sequence ·
// V); see the header comment. `kv_map`: the tensor map of `tmap:kv:L:...` over the pool from
// kv_layer (rows of D, boxes of PAGE x 64, 128-byte swizzle), read when PAGE is a multiple of 8
// dividing the key block. Launch: AttnPrefill<D>::kThreads threads, AttnPrefill<D>::kSmemBytes
// dynamic shared memory, and the grid (HKV, T / TPT) with NT = 0, a tile
// a CTA; with NT = T / TPT > 0 (persistent, attn_prefill_persistent_grid CTAs), each CTA runs
// its share of the HKV · NT tiles in turn through one K/V ring (see "Persistent" above).
template <int HQ, int HKV, int D, int PAGE, int MAXP, long long PAGE_ELEMS, float SCALE_LOG2,
          int TPT, int NT = 0>
__global__ void __launch_bounds__(AttnPrefill<D>::kThreads, 1)
    attn_prefill(const float* q, const int* positions, const int* token_seq, const int* page_tables,
                 const bf16* kv_layer, const hexel::TensorMap* kv_map, bf16* out) {
  using C = AttnPrefill<D>;
  using namespace hexel;
  constexpr int G = HQ / HKV, BN = C::kBlockN, S = C::kStages;
  static_assert(HQ % HKV == 0 && TPT >= 1 && TPT * G <= C::kRows, "a tile's rows fit 128");
  constexpr int R = TPT * G;  // rows in use
  constexpr bool kPersistent = NT > 0;
  constexpr int kLaunchRegs = 65536 / C::kThreads / 8 * 8, kProducerRegs = kPersistent ? 40 : 24,
                kConsumerRegs = kPersistent ? 232 : 240;
  static_assert(128 * kProducerRegs + 256 * kConsumerRegs <= C::kThreads * kLaunchRegs,
                "setmaxnreg: the consumers' registers come out of what the producer gives back");
  constexpr int kTables = kPersistent ? 2 : 1;  // segment tables: the producer fills one ahead
  static_assert(C::kSmemBytes + kTables * (sizeof(AttnPrefillSegment) * TPT + sizeof(int)) +
                        16 * kTables <=
                    C::kSmemLimit,
                "the stages and the segment tables fit a CTA's shared memory");
  // K/V by TMA where whole pages tile a key block at swizzle-atom (8-row) boundaries.
  constexpr bool kTma = PAGE % 8 == 0 && BN % PAGE == 0;
  static_assert(kTma || !kPersistent, "persistent tiles only with K/V by TMA (one producer warp)");
  constexpr unsigned kFullCount = kTma ? 33 : 128;
  const float kNegInf = -__int_as_float(0x7f800000);

  extern __shared__ unsigned char smem_raw[];
  const unsigned base = (smem_addr(smem_raw) + 1023u) & ~1023u;
  const unsigned sq = base;
  auto k_stage = [&](unsigned s) { return base + C::kQBytes + s * C::kStageBytes; };
  auto v_stage = [&](unsigned s) { return k_stage(s) + C::kKvBytes; };
  const unsigned full_k = base + C::kQBytes + S * C::kStageBytes;
  const unsigned full_v = full_k + 8 * S, empty_k = full_v + 8 * S, empty_v = empty_k + 8 * S;
  // Segments of a tile (the sequence is the first token's token_seq); persistent: table k % 2
  // holds the CTA's k-th tile, written by the producer once seg_empty says the consumers are done
  // with its previous tile and published by seg_full (one arrival: the producer's lane 0).
  __shared__ AttnPrefillSegment sm_seg[kTables][TPT];
  __shared__ int sm_nseg[kTables];
  __shared__ alignas(8) unsigned long long sm_seg_bar[2 * kTables];
  const unsigned seg_full = smem_addr(sm_seg_bar), seg_empty = seg_full + 8 * kTables;

  // This CTA's k-th tile: its KV head and first token, false past its last. A tile a CTA (NT = 0):
  // blockIdx.y counts down, so the longest causal rows start first. Persistent: tile i (longest
  // first: i / HKV counts the tiles down from the last) goes to CTA i mod gridDim.x, in rounds
  // that alternate direction, so every CTA's share of long and short tiles is about the same.
  auto tile_of = [&](int k, int& kvh, int& t0) -> bool {
    if constexpr (!kPersistent) {
      kvh = blockIdx.x;
      t0 = (gridDim.y - 1 - blockIdx.y) * TPT;
      return k == 0;
    } else {
      const int g = gridDim.x;
      const int i = k * g + (k % 2 == 0 ? blockIdx.x : g - 1 - blockIdx.x);
      kvh = i % HKV;
      t0 = (NT - 1 - i / HKV) * TPT;
      return i < HKV * NT;
    }
  };
  // Warp 0: the segments of the tile at t0 into table tb. Reads the tile's token_seq and positions
  // at once (a lane a token) and scans them through shuffles; lane 0 writes the segments that hold
  // a position. (A serial scan, with Q staged behind it, would put a chain of dependent loads on
  // every consumer's path before its first key block.)
  auto scan_tile = [&](int lane, int t0, int tb) {
    attn_prefill_scan_tile<TPT, kTables>(lane, t0, tb, positions, token_seq, sm_seg, sm_nseg);
  };
  // A consumer thread (wt of warpgroup cw): its warpgroup's 64 rows of the tile's Q as bf16 (zeros
  // for rows of no token or of padding), every load first, then the stores and the fence for
  // wgmma; with `meet`, a meeting of the warpgroup (barrier 1 + cw) between the two.
  auto stage_q = [&](int cw, int wt, int kvh, int t0, bool meet) {
    attn_prefill_stage_q<HQ, D, G, TPT>(q, positions, sq, cw, wt, kvh, t0, meet);
  };

  pdl_entry();
  // The prologue costs one round trip to global memory a role, all before the barrier: warp 0
  // scans the first tile (a tile a CTA) while the consumers load their Q rows.
  if (threadIdx.x < 32) {
    const int lane = threadIdx.x;
    if (lane == 0) {
      for (int s = 0; s < S; ++s) {
        mbarrier::init(full_k + 8 * s, kFullCount);
        mbarrier::init(full_v + 8 * s, kFullCount);
        mbarrier::init(empty_k + 8 * s, 8);
        mbarrier::init(empty_v + 8 * s, 8);
      }
      if constexpr (kPersistent)
        for (int tb = 0; tb < kTables; ++tb) {
          mbarrier::init(seg_full + 8 * tb, 1);
          mbarrier::init(seg_empty + 8 * tb, 256);  // every consumer thread
        }
      mbarrier::fence_init();
    }
    if constexpr (!kPersistent) {
      int kvh, t0;
      tile_of(0, kvh, t0);
      scan_tile(lane, t0, 0);
    }
  } else if (threadIdx.x >= 128) {
    if constexpr (!kPersistent) {
      int kvh, t0;
      tile_of(0, kvh, t0);
      stage_q(threadIdx.x / 128 - 1, threadIdx.x % 128, kvh, t0, false);
    }
  }
  __syncthreads();

  if (threadIdx.x < 128) {
    // The producer; with persistent tiles it also scans (40 registers: the scan spills at 24).
    setmaxnreg_dec<kProducerRegs>();
    mbarrier::StageRing<S> ring;
    const AttnPrefillKvRing<D> kv_ring{k_stage(0), full_k, full_v, empty_k, empty_v};
    if constexpr (kTma) {
      // One warp: lane i issues the TMA boxes of the block's page i; the tail by cp.async.
      if (threadIdx.x >= 32) return;
      const int lane = threadIdx.x;
      if (lane == 0) {
        tma::acquire_map(kv_map);
        tma::prefetch_map(kv_map);
      }
      int kvh, t0;
      for (int k = 0; tile_of(k, kvh, t0); ++k) {
        const int tb = k % kTables;
        if constexpr (kPersistent) {
          // Table tb is free once the consumers are done with tile k - 2; the scan, then its
          // publication (the arrival releases lane 0's writes), and this tile's Q rows into L2
          // (a lane a token: its G heads are contiguous), ahead of the consumers' staging.
          mbarrier::wait_parity(seg_empty + 8 * tb, ((k / 2) & 1) ^ 1u);
          scan_tile(lane, t0, tb);
          __syncwarp();
          if (lane == 0) mbarrier::arrive(seg_full + 8 * tb);
          for (int j = lane; j < TPT; j += 32)
            tma::prefetch_bytes(q + (static_cast<long long>(t0 + j) * HQ + kvh * G) * D, G * D * 4);
        }
        attn_prefill_produce_tma<HKV, D, PAGE, MAXP, PAGE_ELEMS, S>(
            lane, kvh, t0, sm_seg[tb], sm_nseg[tb], token_seq, page_tables, kv_layer, kv_map,
            kv_ring, ring);
      }
    } else {
      int kvh, t0;
      tile_of(0, kvh, t0);
      attn_prefill_produce_copy<HKV, D, PAGE, MAXP, PAGE_ELEMS, S>(
          threadIdx.x, kvh, t0, sm_seg[0], sm_nseg[0], token_seq, page_tables, kv_layer, kv_ring,
          ring);
    }
    // No thread leaves with copies in flight into a stage the consumers have yet to read.
    cp_async::wait_all();
  } else {
    setmaxnreg_inc<kConsumerRegs>();
    const int cw = threadIdx.x / 128 - 1;  // consumer warpgroup: rows 64 cw .. 64 cw + 63
    const int wt = threadIdx.x % 128, warp = wt / 32, lane = wt % 32, quad = lane % 4;
    // This thread's rows of every tile: r0 (accumulator registers 4j + {0,1}) and r1 = r0 + 8
    // (4j + {2,3}), tokens j0 and j1 of the tile.
    const int r0 = 64 * cw + 16 * warp + lane / 4, r1 = r0 + 8;
    const int j0 = r0 / G, j1 = r1 / G;
    mbarrier::StageRing<S> ring;
    int kvh, t0;
    for (int k = 0; tile_of(k, kvh, t0); ++k) {
      const int tb = k % kTables;
      const int p0 = r0 < R ? positions[t0 + j0] : -2, p1 = r1 < R ? positions[t0 + j1] : -2;
      if constexpr (kPersistent) {
        // Q of this tile into the warpgroup's rows: the loads first, then (once every warp of the
        // warpgroup is done with the previous tile's Q: warpgroup barrier 1 + cw) the stores, a
        // second meeting, and the tile's segment table.
        stage_q(cw, wt, kvh, t0, true);
        named_barrier_sync(1 + cw, 128);
        mbarrier::wait_parity(seg_full + 8 * tb, (k / 2) & 1);
      }
      const int nseg = sm_nseg[tb];
      bf16* out0 = out + (static_cast<long long>(t0 + j0) * HQ + kvh * G + r0 % G) * D + 2 * quad;
      bf16* out1 = out + (static_cast<long long>(t0 + j1) * HQ + kvh * G + r1 % G) * D + 2 * quad;
#pragma unroll
      for (int n = 0; n < D / 8; ++n) {  // padding rows: zeros
        if (p0 == -1) *reinterpret_cast<unsigned*>(out0 + 8 * n) = 0u;
        if (p1 == -1) *reinterpret_cast<unsigned*>(out1 + 8 * n) = 0u;
      }

      const auto q_desc = wgmma::kmajor_desc(sq + cw * 64 * 128, Swizzle::B128);
      for (int sg = 0; sg < nseg; ++sg) {
        const int a = sm_seg[tb][sg].first, b_end = sm_seg[tb][sg].end, pos_max = sm_seg[tb][sg].last;
        // The last key each row may see in this pass; -1: none (not in the segment).
        const int lim0 = r0 < R && j0 >= a && j0 < b_end ? p0 : -1;
        const int lim1 = r1 < R && j1 >= a && j1 < b_end ? p1 : -1;
        float o[D / 2];
#pragma unroll
        for (int i = 0; i < D / 2; ++i) o[i] = 0.f;
        float m0 = kNegInf, m1 = kNegInf, l0 = 0.f, l1 = 0.f;

        // Positions below tma_end came by TMA alone (whole pages); the rest by cp.async.
        const int tma_end = kTma ? (pos_max + 1) / PAGE * PAGE : 0;
        // Whether block b's stage needs the proxy fence before wgmma reads it: where cp.async
        // (the generic proxy) wrote some of it (a block under tma_end came by TMA alone).
        auto fence_for = [&](int b) {
          if ((b + 1) * BN > tma_end) fence_proxy_async_smem();
        };
        // Waits until stage st's K (block b) has landed.
        auto wait_k = [&](unsigned st, unsigned phase, int b) {
          mbarrier::wait_parity(full_k + 8 * st, phase);
          fence_for(b);
        };
        // S = Q·Kᵀ of the block in stage st (issued and committed, not waited for).
        auto issue_s = [&](unsigned st, float(&sc)[BN / 2]) {
          const auto k_desc = wgmma::kmajor_desc(k_stage(st), Swizzle::B128);
          wgmma::fence();
#pragma unroll
          for (int kk = 0; kk < D / 16; ++kk) {
            const unsigned off_q = (kk / 4) * (C::kRows * 128) + (kk % 4) * 32;
            const unsigned off_k = (kk / 4) * (BN * 128) + (kk % 4) * 32;
            wgmma::mma_ss<BN>(sc, q_desc.advanced(off_q), k_desc.advanced(off_k), kk > 0);
          }
          wgmma::commit_group();
        };
        // Waits until stage st's V (block b) has landed.
        auto wait_v = [&](unsigned st, unsigned phase, int b) {
          mbarrier::wait_parity(full_v + 8 * st, phase);
          fence_for(b);
        };
        // O += P·V with V at `v_desc` (issued and committed). Everything the issue needs is
        // computed before it, so nothing but wgmma sits between a group's instructions.
        auto issue_pv = [&](wgmma::SmemDesc v_desc, const unsigned(&pa)[BN / 16][4]) {
          wgmma::fence();
#pragma unroll
          for (int kk = 0; kk < BN / 16; ++kk)
            wgmma::mma_rs<D, wgmma::AbType::BF16, wgmma::Major::MN>(o, pa[kk],
                                                                    v_desc.advanced(kk * 2048), true);
          wgmma::commit_group();
        };
        // The online softmax of block b's scores, in place: masks keys past each row's limit,
        // updates the running maximum and sum, leaves the weights in sc and returns the
        // corrections for o.
        auto softmax = [&](int b, float(&sc)[BN / 2], float& corr0, float& corr1) {
          // Column 8n + 2·quad + e of the block is key position b·BN + that.
          const int last = b * BN + BN - 1;
          if (last > lim0 || last > lim1) {
#pragma unroll
            for (int n = 0; n < BN / 8; ++n)
#pragma unroll
              for (int e = 0; e < 2; ++e) {
                const int key = b * BN + 8 * n + 2 * quad + e;
                if (key > lim0) sc[4 * n + e] = kNegInf;
                if (key > lim1) sc[4 * n + 2 + e] = kNegInf;
              }
          }
          // The row maxima over four partial maxima a row (chains of BN / 32, then two levels)
          // rather than one chain of BN / 8 dependent steps: the same bits (the maximum of a set is
          // exact in any order; fmaxf returns the other operand for a NaN).
          constexpr int kParts = 4;
          float pm0[kParts], pm1[kParts];
#pragma unroll
          for (int n = 0; n < BN / 8; ++n) {
            const float x0 = fmaxf(sc[4 * n], sc[4 * n + 1]);
            const float x1 = fmaxf(sc[4 * n + 2], sc[4 * n + 3]);
            pm0[n % kParts] = n < kParts ? x0 : fmaxf(pm0[n % kParts], x0);
            pm1[n % kParts] = n < kParts ? x1 : fmaxf(pm1[n % kParts], x1);
          }
          float mx0 = fmaxf(m0, fmaxf(fmaxf(pm0[0], pm0[1]), fmaxf(pm0[2], pm0[3])));
          float mx1 = fmaxf(m1, fmaxf(fmaxf(pm1[0], pm1[1]), fmaxf(pm1[2], pm1[3])));
#pragma unroll
          for (int x = 1; x < 4; x <<= 1) {
            mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, x));
            mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, x));
          }
          // An unchanged maximum gives a correction of exactly 1 (a block past the row: an exact
          // no-op); from -inf (the row's first block) exp2(-inf) = 0 scales the zeros.
          corr0 = mx0 == m0 ? 1.f : ex2_approx((m0 - mx0) * SCALE_LOG2);
          corr1 = mx1 == m1 ? 1.f : ex2_approx((m1 - mx1) * SCALE_LOG2);
          m0 = mx0, m1 = mx1;
          const float ms0 = mx0 * SCALE_LOG2, ms1 = mx1 * SCALE_LOG2;
          float sum0 = 0.f, sum1 = 0.f;
#pragma unroll
          for (int n = 0; n < BN / 8; ++n) {
            sc[4 * n] = ex2_approx(fmaf(sc[4 * n], SCALE_LOG2, -ms0));
            sc[4 * n + 1] = ex2_approx(fmaf(sc[4 * n + 1], SCALE_LOG2, -ms0));
            sc[4 * n + 2] = ex2_approx(fmaf(sc[4 * n + 2], SCALE_LOG2, -ms1));
            sc[4 * n + 3] = ex2_approx(fmaf(sc[4 * n + 3], SCALE_LOG2, -ms1));
            sum0 += sc[4 * n] + sc[4 * n + 1];
            sum1 += sc[4 * n + 2] + sc[4 * n + 3];
          }
          l0 = fmaf(l0, corr0, sum0);
          l1 = fmaf(l1, corr1, sum1);
        };
        // The weights as bf16 in the register-A fragments of the block's k-steps (accumulator
        // columns 16kk .. 16kk + 15).
        auto pack = [&](const float(&sc)[BN / 2], unsigned(&pa)[BN / 16][4]) {
#pragma unroll
          for (int kk = 0; kk < BN / 16; ++kk)
#pragma unroll
            for (int i = 0; i < 4; ++i)
              pa[kk][i] = pack_bf16x2(sc[8 * kk + 2 * i], sc[8 * kk + 2 * i + 1]);
        };
        // o *= the corrections, skipped where every correction of the warp is exactly 1 (no
        // row's maximum moved: most blocks once a row has seen a few hundred keys), a warp-uniform
        // branch, the same bits (x · 1 = x).
        auto rescale = [&](float corr0, float corr1) {
          if (!__any_sync(0xffffffffu, corr0 != 1.f || corr1 != 1.f)) return;
#pragma unroll
          for (int n = 0; n < D / 8; ++n)
            o[4 * n] *= corr0, o[4 * n + 1] *= corr0, o[4 * n + 2] *= corr1, o[4 * n + 3] *= corr1;
        };
        // One arrival per warp: the warp's reads of that stage's K (or V) are complete.
        auto release = [&](unsigned bar) {
          if (lane == 0) mbarrier::arrive(bar);
        };

        auto v_desc = [&](unsigned st) {
          return wgmma::SmemDesc::make(v_stage(st), Swizzle::B128, BN * 128, 1024);
        };

        const int nb = pos_max / BN + 1;
        unsigned pa[BN / 16][4];
        for (int b = 0; b < nb; ++b) {
          const unsigned st = ring.index, phase = ring.phase;
          float sc[BN / 2];
          wait_k(st, phase, b);
          issue_s(st, sc);
          wgmma::wait_group<0>();
          wgmma::fence_operand(sc);
          release(empty_k + 8 * st);
          float corr0, corr1;
          softmax(b, sc, corr0, corr1);
          rescale(corr0, corr1);
          pack(sc, pa);
          wait_v(st, phase, b);
          issue_pv(v_desc(st), pa);
          wgmma::wait_group<0>();
          wgmma::fence_operand(o);
          release(empty_v + 8 * st);
          ring.advance();
        }

        // The quad's partial sums, folded in a fixed order; then this segment's rows are written.
#pragma unroll
        for (int x = 1; x < 4; x <<= 1) {
          l0 += __shfl_xor_sync(0xffffffffu, l0, x);
          l1 += __shfl_xor_sync(0xffffffffu, l1, x);
        }
        const float inv0 = 1.f / l0, inv1 = 1.f / l1;
#pragma unroll
        for (int n = 0; n < D / 8; ++n) {
          if (lim0 >= 0)
            *reinterpret_cast<unsigned*>(out0 + 8 * n) =
                pack_bf16x2(o[4 * n] * inv0, o[4 * n + 1] * inv0);
          if (lim1 >= 0)
            *reinterpret_cast<unsigned*>(out1 + 8 * n) =
                pack_bf16x2(o[4 * n + 2] * inv1, o[4 * n + 3] * inv1);
        }
      }
      // This thread is done with table tb. Every consumer thread arrives (its own reads released
      // by its own arrival), not a lane a warp behind __syncwarp: racecheck flags the other
      // lanes' reads against the producer's next writes that way.
      if constexpr (kPersistent) mbarrier::arrive(seg_empty + 8 * tb);
    }
  }
}

}  // namespace telos_kernels
