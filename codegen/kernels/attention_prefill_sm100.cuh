#pragma once
// Causal attention for prompt tokens over the paged KV cache on Blackwell (sm_100a): attn_prefill
// (attention_prefill.cuh, whose header is the design this follows) with the tensor-core work on
// tcgen05, S = Q·Kᵀ and O in Tensor Memory, the online softmax between them one row a thread
// (FlashAttention-4's structure). The same arguments, inputs and output as attn_prefill, for the
// prompt rows of a prefill bucket on sm_100a; a tile a CTA (no persistent form).
//
// Shared with attn_prefill, as its functions: the tile's rows (row r = j · G + h is token t0 + j,
// query head kvh · G + h; 128 rows, TPT · G in use), the segment scan (attn_prefill_scan_tile), Q
// staged as bf16 into the 128B-swizzled K-major tile (attn_prefill_stage_q), the producer and its
// K/V stage ring with the full_k / full_v / empty_k / empty_v barriers (attn_prefill_produce_tma,
// attn_prefill_produce_copy, AttnPrefillKvRing: whole pages by TMA, the tail and other page sizes
// by cp.async, zero-filled past each segment's last position), the key blocks of BN = 128 positions
// at fixed absolute boundaries, the masks (key > the row's limit: -inf) and the scale inside exp2.
//
// Roles (AttnSm100Layout): warps 0-3 the producer (warp 0 with K/V by TMA, all four by cp.async),
// warps 4-7 the softmax warpgroup, thread r of it row r (Tensor Memory lane r: warp 4 + q reaches
// lanes 32 q .. 32 q + 31), warps 8-11 the MMA role. Per key block b of a segment:
//  - MMA: S = Q·Kᵀ into Tensor Memory columns [0, BN) (D / 16 MMAs, M 128, N BN, K 16, both
//    K-major), committed to empty_k (the stage's K is read) and s_full; issued one block ahead,
//    once the softmax has read the previous S (s_empty).
//  - Softmax (thread r): S's row r by tcgen05.ld (.32x32b, 32 columns a load), then s_empty; the
//    mask, the row maximum, the correction (exactly 1 where the maximum did not move), the weights
//    exp2(s · SCALE_LOG2 - m · SCALE_LOG2) and their sum, in a fixed order along the row; once the
//    previous block's P·V has completed (o_full), the weights as bf16 into P (shared memory,
//    128 rows of BN, 128B-swizzled K-major: the MMA's A), O's row times the correction in Tensor
//    Memory (tcgen05.ld / st, skipped where no row of the warp moved), then p_full.
//  - MMA: O (+)= P·V into columns [BN, BN + D) (BN / 16 MMAs M 128, N D, K 16; V is N-major: the
//    stage holds [position][dim], the same bytes wgmma reads with trans-b), from zero at the
//    segment's first block, committed to empty_v and o_full.
// After a segment's last block (o_full) each row of the segment reads O, divides by its sum and
// writes bf16; rows of other segments compute NaN (no key), never written. Padding rows get zeros.
//
// Batch invariance. A row's result is made of its own Tensor Memory lane and shared-memory row
// only: S's row r is Q's row r against the block's keys (one MMA chain over D in 16-wide steps,
// from zero), the softmax runs in thread r alone along its row in a fixed order, and O's row r is a
// chain of P·V MMAs over the blocks 0 .. p / BN in ascending order, each over its 128 keys in
// 16-wide steps. A block wholly past the row's position is an exact no-op, as in attn_prefill: its
// scores are -inf, the maximum does not move, the correction is 1 (O is not touched: the rescale of
// a row whose correction is 1 multiplies by 1), its weights are exp2(-inf) = 0 and O += 0 · V (V
// finite: zero-filled past the sequence's last position) leaves O's bits (an MMA adding exact
// zeros changes nothing: the twin shows it for wgmma, a B200 must for tcgen05), whatever the other
// rows of the tile. The key blocks' boundaries are absolute positions, so neither TPT, the other
// rows of the tile nor the chunking of the prompt changes a row's bits. (The sum over a row is one
// thread's sequential sum, not attn_prefill's four lanes folded: the two forms agree within
// rounding, not bit for bit.)
//
// The MMA atom and its accumulator access are a policy (Atom), so the same kernel runs on Hopper as
// its twin and an H200 checks everything but the atom:
// - AttnTcgen05 (sm_100a, attn_prefill_sm100): warp 8 allocates 256 Tensor Memory columns and its
//   first thread issues every tcgen05.mma and tcgen05.commit; the softmax reads and writes the
//   accumulators with tcgen05.ld / tcgen05.st.
// - AttnWgmmaTwin (sm_90a, attn_prefill_sm100_twin): warps 8-11, a warpgroup, issue wgmma m64 for
//   the two 64-row halves of the same products from the same shared-memory operands and keep
//   Tensor Memory's image in shared memory (AttnSm100Twin::image_offset: row = lane, column =
//   column), which the softmax reads and writes where it would issue tcgen05.ld / st. Its S of
//   block b + 1 follows its P·V of block b (P lies over S's image, so the softmax meets once
//   between reading S and writing P), and it has fewer stages (the image takes their room).
//
// Shared memory (1024-byte aligned base): Q [D/64][128][64] bf16, P [BN/64][128][64] bf16, then
// the K/V stages as attn_prefill's (2 at D = 128: Q 32 KB + P 32 KB + 2 x 64 KB; 5 at D = 64); the
// barriers and segment table in static shared memory. P in Tensor Memory (an A operand there) would
// give a third stage at D = 128; it is in shared memory, where hexel/tcgen05_model.h models where
// an MMA reads each element (test/codegen/attn_prefill_sm100_test checks every layout the kernel
// uses against that model). Registers: 384 threads, one CTA an SM (168 a thread at launch);
// setmaxnreg gives the softmax warpgroup 240 (its row of BN scores and BN / 2 weight pairs) out of
// the MMA warpgroup's (56: one issuing thread) or, in the twin, the producer's (56).
#include "hexel/config.cuh"
#include "hexel/swizzle.cuh"
#include "hexel/tcgen05_desc.cuh"

namespace telos_kernels {

// The launch shape and the shared-memory layout, host-callable (the plan and the CPU tests use
// them): TWIN selects the Hopper twin's (AttnWgmmaTwin). Offsets are bytes from the 1024-byte
// aligned base.
template <int D, bool TWIN = false>
struct AttnSm100Layout {
  static_assert(D == 64 || D == 128, "head dims of whole 128-byte swizzle rows, at most 128");
  enum : unsigned {
    kRows = 128,    // the MMA's M: one a Tensor Memory lane
    kBlockN = 128,  // key positions a block
    kProducerWarps = 4,
    kSoftmaxWarp = 4,  // warps 4-7: the softmax warpgroup
    kMmaWarp = 8,      // warpgroup 2: warp 8 (the twin: warps 8-11)
    kThreads = 384,    // three warpgroups, one CTA an SM: 168 registers a thread at launch
    kLaunchRegs = 65536 / kThreads / 8 * 8,
    // setmaxnreg: the softmax takes 240 out of what the MMA warpgroup (one issuing thread) gives
    // back, or in the twin (a wgmma warpgroup) the producer.
    kProducerRegs = TWIN ? 56 : kLaunchRegs,
    kMmaRegs = TWIN ? kLaunchRegs : 56,
    kSoftmaxRegs = 240,
    kSColumn = 0,        // S: Tensor Memory columns [0, BN)
    kOColumn = kBlockN,  // O: columns [BN, BN + D)
    kColumns = kBlockN + D,
    kTmemColumns = 256,  // the allocation: a power of two >= kColumns
    kQBytes = kRows * D * 2,
    kPBytes = kRows * kBlockN * 2,
    kKvBytes = kBlockN * D * 2,
    kStageBytes = 2 * kKvBytes,
    kImageBytes = kRows * kColumns * 4,  // the twin's image of Tensor Memory
    kStages = TWIN ? (D == 128 ? 1 : 3) : (D == 128 ? 2 : 5),
    kQ = 0,
    kStagesAt = kQBytes + (TWIN ? 0 : kPBytes),
    kImage = kStagesAt + kStages * kStageBytes,  // the twin's image
    kP = TWIN ? kImage : kQBytes,                // the twin's P lies over S's image
    kSmemBytes = kStagesAt + kStages * kStageBytes + (TWIN ? kImageBytes : 0) + 1024,
  };
  static_assert(kColumns <= kTmemColumns, "S and O fit the allocation");
  static_assert(!TWIN || kPBytes <= kRows * kBlockN * 4, "the twin's P fits S's image");

  // Q's K slice kk (16 dims) as the MMA's A: column block kk / 4 of 64 dims, 32 bytes a step
  // inside the 128-byte swizzle row.
  static HEXEL_HOST_DEVICE constexpr unsigned q_slice(unsigned q, unsigned kk) {
    return q + (kk / 4) * (kRows * 128) + (kk % 4) * 32;
  }
  // The K tile's slice kk (the block's 128 positions x 16 dims) as S's B, K-major.
  static HEXEL_HOST_DEVICE constexpr unsigned k_slice(unsigned k_tile, unsigned kk) {
    return k_tile + (kk / 4) * (kBlockN * 128) + (kk % 4) * 32;
  }
  // P's slice kk (128 rows x keys 16 kk .. 16 kk + 15) as O's A, K-major.
  static HEXEL_HOST_DEVICE constexpr unsigned p_slice(unsigned p, unsigned kk) {
    return p + (kk / 4) * (kRows * 128) + (kk % 4) * 32;
  }
  // The V tile's slice kk (positions 16 kk .. 16 kk + 15, every dim) as O's B, N-major: two groups
  // of 8 positions (1024 bytes each) a slice.
  static HEXEL_HOST_DEVICE constexpr unsigned v_slice(unsigned v_tile, unsigned kk) {
    return v_tile + kk * 2048;
  }
  // The Tensor Memory address from which softmax warp q (of its warpgroup: CTA warp 4 + q) loads
  // or stores columns col .. col + 31 of the accumulators at `tmem`: its lane quarter, 32 q
  // ("Tensor Memory: Access restrictions"); thread l then holds row 32 q + l, the softmax's row r.
  static HEXEL_HOST_DEVICE constexpr unsigned taddr(unsigned tmem, unsigned q, unsigned col) {
    return tmem + hexel::tcgen05::tmem_addr(32 * q, col);
  }
  // Where row r's weights of keys 8 c .. 8 c + 7 of the block go in P (one 16-byte chunk): the
  // 128B swizzle of attn_prefill's tiles.
  static HEXEL_HOST_DEVICE constexpr unsigned p_chunk(unsigned p, unsigned r, unsigned c) {
    return hexel::swizzled_chunk_b128(p + (c / 8) * (kRows * 128), r, c);
  }
};

// The tcgen05 descriptors: S = Q·Kᵀ (M 128, N BN, both K-major) and O += P·V (M 128, N D, A
// K-major, B N-major); each operand's shared-memory descriptor ("Shared Memory Descriptor": 128B
// swizzle, K-major SBO 1024; N-major LBO the distance between 64-dim column blocks, SBO between
// groups of 8 positions).
template <int D>
struct AttnSm100Desc {
  using L = AttnSm100Layout<D>;
  static constexpr hexel::tcgen05::InstrDesc kS =
      hexel::tcgen05::InstrDesc::make(hexel::tcgen05::AbType::BF16, hexel::tcgen05::AbType::BF16,
                                      hexel::tcgen05::DType::F32, L::kRows, L::kBlockN);
  static constexpr hexel::tcgen05::InstrDesc kO = hexel::tcgen05::InstrDesc::make(
      hexel::tcgen05::AbType::BF16, hexel::tcgen05::AbType::BF16, hexel::tcgen05::DType::F32,
      L::kRows, D, /*a_mn_major=*/false, /*b_mn_major=*/true);
  static HEXEL_HOST_DEVICE constexpr hexel::tcgen05::SmemDesc kmajor(unsigned slice) {
    return hexel::tcgen05::kmajor_desc(slice, hexel::Swizzle::B128);
  }
  static HEXEL_HOST_DEVICE constexpr hexel::tcgen05::SmemDesc v(unsigned slice) {
    return hexel::tcgen05::SmemDesc::make(slice, hexel::Swizzle::B128, L::kBlockN * 128, 1024);
  }
};

// The Hopper twin's image of Tensor Memory in shared memory: column block col / 32 is 128 rows of
// 128 bytes (32 f32), the 16-byte chunks of a row swizzled by row % 8 (the 128B pattern), so a
// warp's 32 rows and a wgmma fragment's 8-row groups reach every bank. Where wgmma's accumulator
// registers of a 64-row half go: PTX ISA, wgmma "Register Fragments", matrix D of .m64nNk16.
struct AttnSm100Twin {
  static HEXEL_HOST_DEVICE constexpr unsigned image_offset(unsigned row, unsigned col) {
    return (col / 32) * (128 * 128) + hexel::swizzled_chunk_b128(0u, row, (col % 32) / 4) +
           (col % 4) * 4;
  }
  // Register 4 j + 2 h + e of warp w's thread `lane` in half `half`: row and column (of the
  // product's N columns).
  static HEXEL_HOST_DEVICE constexpr unsigned frag_row(unsigned half, unsigned w, unsigned lane,
                                                       unsigned h) {
    return 64 * half + 16 * (w % 4) + lane / 4 + 8 * h;
  }
  static HEXEL_HOST_DEVICE constexpr unsigned frag_col(unsigned j, unsigned lane, unsigned e) {
    return 8 * j + 2 * (lane % 4) + e;
  }
};

}  // namespace telos_kernels

#if defined(__CUDACC__)
#include "attention_prefill.cuh"
#include "hexel/tcgen05.cuh"

namespace telos_kernels {

// The barriers of the softmax / MMA hand-offs (addresses; each completes once a key block).
struct AttnSm100Bars {
  unsigned s_full, s_empty, p_full, o_full;
};

// The sm_100a atom: S and O in Tensor Memory (the accumulator handle is its base address).
template <int D>
struct AttnTcgen05 {
  using L = AttnSm100Layout<D, false>;
  using Desc = AttnSm100Desc<D>;
  static constexpr bool kTwin = false;
  enum : unsigned {
    kEmptyArrivals = 1,  // tcgen05.commit
    kSFullArrivals = 1,
    kOFullArrivals = 1,
  };
  // Every thread, as the CTA's barrier after the setup: warp kMmaWarp allocates the columns.
  // PTX: tcgen05.alloc, tcgen05.relinquish_alloc_permit, tcgen05.fence.
  static __device__ __forceinline__ unsigned start(unsigned warp, unsigned) {
    using namespace hexel;
    __shared__ unsigned tmem_slot;
    if (warp == L::kMmaWarp) {
      tcgen05::alloc(smem_addr(&tmem_slot), L::kTmemColumns);
      tcgen05::relinquish_alloc_permit();
    }
    tcgen05::fence_before_thread_sync();
    __syncthreads();
    tcgen05::fence_after_thread_sync();
    return tmem_slot;
  }
  static __device__ __forceinline__ bool mma_role(unsigned warp) { return warp == L::kMmaWarp; }

  // Columns col .. col + 31 of the softmax thread's row (warp q of the warpgroup, `lane`) into v,
  // complete after wait_ld(). PTX: tcgen05.ld .32x32b.x32.
  static __device__ __forceinline__ void load(hexel::uint32_t (&v)[32], unsigned acc, unsigned q,
                                              unsigned, unsigned col) {
    hexel::tcgen05::ld_32x32b(v, L::taddr(acc, q, col));
  }
  static __device__ __forceinline__ void wait_ld() { hexel::tcgen05::wait_ld(); }
  // The inverse of load. PTX: tcgen05.st .32x32b.x32.
  static __device__ __forceinline__ void store(unsigned acc, unsigned q, unsigned, unsigned col,
                                               const hexel::uint32_t (&v)[32]) {
    hexel::tcgen05::st_32x32b(L::taddr(acc, q, col), v);
  }
  // A softmax thread, after its wait on s_full or o_full.
  static __device__ __forceinline__ void after_wait() { hexel::tcgen05::fence_after_thread_sync(); }
  // A softmax thread whose S row is in registers: the MMA may overwrite S.
  static __device__ __forceinline__ void release_s(const AttnSm100Bars& bars) {
    hexel::tcgen05::fence_before_thread_sync();
    hexel::mbarrier::arrive(bars.s_empty);
  }
  // A softmax thread done with block b's P and O: its tcgen05.st complete and ordered before the
  // MMA that reads O (and P's stores before the async proxy's reads), then p_full.
  static __device__ __forceinline__ void release_p(const AttnSm100Bars& bars) {
    hexel::tcgen05::wait_st();
    hexel::fence_proxy_async_smem();
    hexel::tcgen05::fence_before_thread_sync();
    hexel::mbarrier::arrive(bars.p_full);
  }

  // The MMA thread (warp kMmaWarp's first lane): every key block of the nseg segments, S one block
  // ahead of P·V. PTX: tcgen05.mma, tcgen05.commit, tcgen05.fence::after_thread_sync.
  template <int S>
  static __device__ __forceinline__ void mma(unsigned tmem, unsigned lane, unsigned sq, unsigned sp,
                                             const AttnPrefillKvRing<D>& kv,
                                             const AttnSm100Bars& bars,
                                             const AttnPrefillSegment* seg, int nseg) {
    using namespace hexel;
    if (lane != 0) return;
    constexpr unsigned BN = L::kBlockN;
    mbarrier::StageRing<S> kring, vring;
    unsigned n = 0, m = 0;  // S and P·V issued
    // S of the block in kring's stage, once its K has landed and the softmax has read the last S.
    auto issue_s = [&] {
      mbarrier::wait_parity(kv.full_k + 8 * kring.index, kring.phase);
      mbarrier::wait_parity(bars.s_empty, (n & 1) ^ 1u);
      fence_proxy_async_smem();  // cp.async (the generic proxy) may have written the stage
      tcgen05::fence_after_thread_sync();
      const unsigned k_tile = kv.k_stage(kring.index);
#pragma unroll
      for (unsigned kk = 0; kk < D / 16; ++kk)
        tcgen05::mma<tcgen05::Kind::F16>(tmem + L::kSColumn, Desc::kmajor(L::q_slice(sq, kk)),
                                         Desc::kmajor(L::k_slice(k_tile, kk)), Desc::kS, kk > 0);
      tcgen05::commit(kv.empty_k + 8 * kring.index);
      tcgen05::commit(bars.s_full);
      kring.advance();
      ++n;
    };
    for (int sg = 0; sg < nseg; ++sg) {
      const int nb = seg[sg].last / static_cast<int>(BN) + 1;
      issue_s();
      for (int b = 0; b < nb; ++b) {
        if (b + 1 < nb) issue_s();
        mbarrier::wait_parity(bars.p_full, m & 1);
        mbarrier::wait_parity(kv.full_v + 8 * vring.index, vring.phase);
        fence_proxy_async_smem();
        tcgen05::fence_after_thread_sync();
        const unsigned v_tile = kv.v_stage(vring.index);
#pragma unroll
        for (unsigned kk = 0; kk < BN / 16; ++kk)
          tcgen05::mma<tcgen05::Kind::F16>(tmem + L::kOColumn, Desc::kmajor(L::p_slice(sp, kk)),
                                           Desc::v(L::v_slice(v_tile, kk)), Desc::kO,
                                           b > 0 || kk > 0);
        tcgen05::commit(kv.empty_v + 8 * vring.index);
        tcgen05::commit(bars.o_full);
        vring.advance();
        ++m;
      }
    }
  }

  // Every thread, at the end: once every tcgen05.ld / st has completed, warp kMmaWarp frees the
  // columns. PTX: tcgen05.dealloc.
  static __device__ __forceinline__ void finish(unsigned warp, unsigned tmem) {
    using namespace hexel;
    tcgen05::fence_before_thread_sync();
    __syncthreads();
    if (warp == L::kMmaWarp) {
      __syncwarp();
      tcgen05::fence_after_thread_sync();
      tcgen05::dealloc(tmem, L::kTmemColumns);
    }
  }
};

// The sm_90a twin's atom: wgmma from the same operands, the accumulators through the image of
// Tensor Memory at the handle (AttnSm100Twin::image_offset).
template <int D>
struct AttnWgmmaTwin {
  using L = AttnSm100Layout<D, true>;
  static constexpr bool kTwin = true;
  enum : unsigned {
    kEmptyArrivals = 4,  // each MMA warp's first lane
    kSFullArrivals = 128,
    kOFullArrivals = 128,
  };
  static __device__ __forceinline__ unsigned start(unsigned, unsigned image) {
    __syncthreads();
    return image;
  }
  static __device__ __forceinline__ bool mma_role(unsigned warp) { return warp >= L::kMmaWarp; }

  static __device__ __forceinline__ void load(hexel::uint32_t (&v)[32], unsigned image, unsigned q,
                                              unsigned lane, unsigned col) {
    const unsigned row = 32 * q + lane;
#pragma unroll
    for (unsigned i = 0; i < 8; ++i) {
      const uint4 x = hexel::ld_shared_v4(image + AttnSm100Twin::image_offset(row, col + 4 * i));
      v[4 * i] = x.x, v[4 * i + 1] = x.y, v[4 * i + 2] = x.z, v[4 * i + 3] = x.w;
    }
  }
  static __device__ __forceinline__ void wait_ld() {}
  static __device__ __forceinline__ void store(unsigned image, unsigned q, unsigned lane,
                                               unsigned col, const hexel::uint32_t (&v)[32]) {
    const unsigned row = 32 * q + lane;
#pragma unroll
    for (unsigned i = 0; i < 8; ++i)
      hexel::st_shared_v4(image + AttnSm100Twin::image_offset(row, col + 4 * i), v[4 * i],
                          v[4 * i + 1], v[4 * i + 2], v[4 * i + 3]);
  }
  static __device__ __forceinline__ void after_wait() {}
  // P lies over S's image: every softmax thread has read its S row before any writes P (named
  // barrier 1, the softmax warpgroup).
  static __device__ __forceinline__ void release_s(const AttnSm100Bars& bars) {
    hexel::named_barrier_sync(1, 128);
    hexel::mbarrier::arrive(bars.s_empty);
  }
  static __device__ __forceinline__ void release_p(const AttnSm100Bars& bars) {
    hexel::fence_proxy_async_smem();  // P's generic stores, then wgmma reads them
    hexel::mbarrier::arrive(bars.p_full);
  }

  // Accumulator registers of one 64-row half (N columns) into / out of the image.
  template <unsigned N>
  static __device__ __forceinline__ void put(unsigned image, unsigned col0, unsigned half,
                                             unsigned w, unsigned lane, const float (&d)[N / 2]) {
#pragma unroll
    for (unsigned j = 0; j < N / 8; ++j)
#pragma unroll
      for (unsigned h = 0; h < 2; ++h)
        hexel::st_shared_v2_f32(
            image + AttnSm100Twin::image_offset(AttnSm100Twin::frag_row(half, w, lane, h),
                                                col0 + AttnSm100Twin::frag_col(j, lane, 0)),
            d[4 * j + 2 * h], d[4 * j + 2 * h + 1]);
  }
  template <unsigned N>
  static __device__ __forceinline__ void get(unsigned image, unsigned col0, unsigned half,
                                             unsigned w, unsigned lane, float (&d)[N / 2]) {
#pragma unroll
    for (unsigned j = 0; j < N / 8; ++j)
#pragma unroll
      for (unsigned h = 0; h < 2; ++h) {
        const float2 x = hexel::ld_shared_v2_f32(
            image + AttnSm100Twin::image_offset(AttnSm100Twin::frag_row(half, w, lane, h),
                                                col0 + AttnSm100Twin::frag_col(j, lane, 0)));
        d[4 * j + 2 * h] = x.x, d[4 * j + 2 * h + 1] = x.y;
      }
  }

  // The MMA warpgroup (warps 8-11): per key block S into the image, then (after p_full) O += P·V
  // through it, each a 64-row half at a time; one arrival per warp frees a stage's K or V.
  template <int S>
  static __device__ __forceinline__ void mma(unsigned image, unsigned lane, unsigned sq,
                                             unsigned sp, const AttnPrefillKvRing<D>& kv,
                                             const AttnSm100Bars& bars,
                                             const AttnPrefillSegment* seg, int nseg) {
    using namespace hexel;
    constexpr unsigned BN = L::kBlockN;
    const unsigned w = (threadIdx.x / 32) % 4;
    mbarrier::StageRing<S> ring;
    unsigned n = 0;  // key blocks done
    for (int sg = 0; sg < nseg; ++sg) {
      const int nb = seg[sg].last / static_cast<int>(BN) + 1;
      for (int b = 0; b < nb; ++b, ++n) {
        mbarrier::wait_parity(kv.full_k + 8 * ring.index, ring.phase);
        mbarrier::wait_parity(bars.s_empty, (n & 1) ^ 1u);
        fence_proxy_async_smem();  // cp.async (the generic proxy) may have written the stage
        const unsigned k_tile = kv.k_stage(ring.index);
#pragma unroll 1
        for (unsigned half = 0; half < 2; ++half) {
          float sc[BN / 2];
          wgmma::fence();
#pragma unroll
          for (unsigned kk = 0; kk < D / 16; ++kk)
            wgmma::mma_ss<BN>(
                sc, wgmma::kmajor_desc(L::q_slice(sq, kk) + half * 64 * 128, Swizzle::B128),
                wgmma::kmajor_desc(L::k_slice(k_tile, kk), Swizzle::B128), kk > 0);
          wgmma::commit_group();
          wgmma::wait_group<0>();
          wgmma::fence_operand(sc);
          put<BN>(image, L::kSColumn, half, w, lane, sc);
        }
        if (lane == 0) mbarrier::arrive(kv.empty_k + 8 * ring.index);
        mbarrier::arrive(bars.s_full);

        mbarrier::wait_parity(bars.p_full, n & 1);
        mbarrier::wait_parity(kv.full_v + 8 * ring.index, ring.phase);
        fence_proxy_async_smem();
        const unsigned v_tile = kv.v_stage(ring.index);
#pragma unroll 1
        for (unsigned half = 0; half < 2; ++half) {
          float o[D / 2];
          if (b > 0) get<D>(image, L::kOColumn, half, w, lane, o);
          wgmma::fence();
#pragma unroll
          for (unsigned kk = 0; kk < BN / 16; ++kk)
            wgmma::mma_ss<D, wgmma::AbType::BF16, wgmma::Major::K, wgmma::Major::MN>(
                o, wgmma::kmajor_desc(L::p_slice(sp, kk) + half * 64 * 128, Swizzle::B128),
                wgmma::SmemDesc::make(L::v_slice(v_tile, kk), Swizzle::B128, BN * 128, 1024),
                b > 0 || kk > 0);
          wgmma::commit_group();
          wgmma::wait_group<0>();
          wgmma::fence_operand(o);
          put<D>(image, L::kOColumn, half, w, lane, o);
        }
        if (lane == 0) mbarrier::arrive(kv.empty_v + 8 * ring.index);
        mbarrier::arrive(bars.o_full);
        ring.advance();
      }
    }
  }
  static __device__ __forceinline__ void finish(unsigned, unsigned) {}
};

// A softmax thread's online softmax of one key block (b) of its row: keys past `lim` masked, the
// running maximum m and sum l updated, the weights as bf16 pairs into pk (keys 2 i, 2 i + 1 in
// pk[i]); returns the correction for O (exactly 1 where the maximum did not move). The rules of
// attn_prefill's softmax, along one thread's row, the sum in key order.
template <int BN, float SCALE_LOG2>
__device__ __forceinline__ float attn_sm100_softmax(int b, int lim, float (&sc)[BN], float& m,
                                                    float& l, hexel::uint32_t (&pk)[BN / 2]) {
  const float kNegInf = -__int_as_float(0x7f800000);
  if (b * BN + BN - 1 > lim) {
#pragma unroll
    for (int c = 0; c < BN; ++c)
      if (b * BN + c > lim) sc[c] = kNegInf;
  }
  // Four partial maxima (chains of BN / 4), then two levels: the maximum of a set is exact in
  // any order.
  float pm[4];
#pragma unroll
  for (int c = 0; c < BN; ++c) pm[c % 4] = c < 4 ? sc[c] : fmaxf(pm[c % 4], sc[c]);
  const float mx = fmaxf(m, fmaxf(fmaxf(pm[0], pm[1]), fmaxf(pm[2], pm[3])));
  const float corr = mx == m ? 1.f : hexel::ex2_approx((m - mx) * SCALE_LOG2);
  m = mx;
  const float ms = mx * SCALE_LOG2;
  float sum = 0.f;
#pragma unroll
  for (int i = 0; i < BN / 2; ++i) {
    const float e0 = hexel::ex2_approx(fmaf(sc[2 * i], SCALE_LOG2, -ms));
    const float e1 = hexel::ex2_approx(fmaf(sc[2 * i + 1], SCALE_LOG2, -ms));
    sum += e0;
    sum += e1;
    pk[i] = pack_bf16x2(e0, e1);
  }
  l = fmaf(l, corr, sum);
  return corr;
}

// A softmax thread: its row's weights (bf16 pairs) into P (AttnSm100Layout::p_chunk).
template <int D, bool TWIN>
__device__ __forceinline__ void attn_sm100_store_p(
    unsigned sp, unsigned r, const hexel::uint32_t (&pk)[AttnSm100Layout<D>::kBlockN / 2]) {
  using L = AttnSm100Layout<D, TWIN>;
#pragma unroll
  for (unsigned c = 0; c < L::kBlockN / 8; ++c)
    hexel::st_shared_v4(L::p_chunk(sp, r, c), pk[4 * c], pk[4 * c + 1], pk[4 * c + 2],
                        pk[4 * c + 3]);
}

// A softmax thread: O's row times corr, where any row of the warp has a correction other than 1
// (a warp-uniform branch: tcgen05.ld / st are warp-wide); x · 1 = x, so the same bits.
template <class Atom, int D>
__device__ __forceinline__ void attn_sm100_rescale(unsigned acc, unsigned q, unsigned lane,
                                                   float corr) {
  using L = typename Atom::L;
  if (!__any_sync(0xffffffffu, corr != 1.f)) return;
#pragma unroll 1
  for (unsigned c = 0; c < D / 32; ++c) {
    hexel::uint32_t v[32];
    Atom::load(v, acc, q, lane, L::kOColumn + 32 * c);
    Atom::wait_ld();
#pragma unroll
    for (int i = 0; i < 32; ++i) v[i] = __float_as_uint(__uint_as_float(v[i]) * corr);
    Atom::store(acc, q, lane, L::kOColumn + 32 * c, v);
  }
}

// A softmax thread: O's row / l as bf16 into `dst` (the row's D outputs) where `store`; every lane
// of the warp loads (tcgen05.ld is warp-wide).
template <class Atom, int D>
__device__ __forceinline__ void attn_sm100_write_row(unsigned acc, unsigned q, unsigned lane,
                                                     float l, bool store, bf16* dst) {
  using L = typename Atom::L;
  const float inv = 1.f / l;
#pragma unroll 1
  for (unsigned c = 0; c < D / 32; ++c) {
    hexel::uint32_t v[32];
    Atom::load(v, acc, q, lane, L::kOColumn + 32 * c);
    Atom::wait_ld();
    if (store) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        auto x = [&](int e) { return __uint_as_float(v[8 * i + e]) * inv; };
        *reinterpret_cast<uint4*>(dst + 32 * c + 8 * i) =
            make_uint4(pack_bf16x2(x(0), x(1)), pack_bf16x2(x(2), x(3)), pack_bf16x2(x(4), x(5)),
                       pack_bf16x2(x(6), x(7)));
      }
    }
  }
}

// The softmax warpgroup's thread r (warp q of it, `lane`) over the tile at t0 (KV head kvh): per
// segment, per key block, S's row, the softmax, P and O's rescale (see the header), then the
// segment's rows written.
template <class Atom, int HQ, int D, int G, int TPT, float SCALE_LOG2>
__device__ __forceinline__ void attn_sm100_softmax_role(
    unsigned acc, unsigned q, unsigned lane, unsigned sp, int kvh, int t0, const int* positions,
    const AttnSm100Bars& bars, const AttnPrefillSegment* seg, int nseg, bf16* out) {
  using L = typename Atom::L;
  using namespace hexel;
  constexpr int BN = L::kBlockN, R = TPT * G;
  const float kNegInf = -__int_as_float(0x7f800000);
  const int r = static_cast<int>(32 * q + lane), j = r / G;
  const int p = r < R ? positions[t0 + j] : -2;
  bf16* dst = out + (static_cast<long long>(t0 + min(j, TPT - 1)) * HQ + kvh * G + r % G) * D;
  if (p == -1)  // padding: zeros
#pragma unroll
    for (int i = 0; i < D / 8; ++i) *reinterpret_cast<uint4*>(dst + 8 * i) = make_uint4(0, 0, 0, 0);
  unsigned n = 0, done = 0;  // key blocks seen; P·V waited for
  for (int sg = 0; sg < nseg; ++sg) {
    // The last key this row may see in this pass; -1: none (not in the segment).
    const int lim = r < R && j >= seg[sg].first && j < seg[sg].end ? p : -1;
    const int nb = seg[sg].last / BN + 1;
    float m = kNegInf, l = 0.f;
    for (int b = 0; b < nb; ++b, ++n) {
      mbarrier::wait_parity(bars.s_full, n & 1);
      Atom::after_wait();
      hexel::uint32_t v[BN / 32][32];
#pragma unroll
      for (int c = 0; c < BN / 32; ++c) Atom::load(v[c], acc, q, lane, L::kSColumn + 32 * c);
      Atom::wait_ld();
      Atom::release_s(bars);
      float sc[BN];
#pragma unroll
      for (int c = 0; c < BN; ++c) sc[c] = __uint_as_float(v[c / 32][c % 32]);
      hexel::uint32_t pk[BN / 2];
      const float corr = attn_sm100_softmax<BN, SCALE_LOG2>(b, lim, sc, m, l, pk);
      if (b > 0) {  // the previous P·V has read P and written O
        mbarrier::wait_parity(bars.o_full, done++ & 1);
        Atom::after_wait();
      }
      attn_sm100_store_p<D, Atom::kTwin>(sp, static_cast<unsigned>(r), pk);
      if (b > 0) attn_sm100_rescale<Atom, D>(acc, q, lane, corr);
      Atom::release_p(bars);
    }
    mbarrier::wait_parity(bars.o_full, done++ & 1);
    Atom::after_wait();
    if (__any_sync(0xffffffffu, lim >= 0))
      attn_sm100_write_row<Atom, D>(acc, q, lane, l, lim >= 0, dst);
  }
}

// The whole kernel on atom Atom (AttnTcgen05, AttnWgmmaTwin): the tile at t0 of KV head kvh =
// blockIdx.x, blockIdx.y counting the tiles down as attn_prefill's. The prologue: warp 0 sets up
// the barriers and scans the tile's segments while the softmax warpgroup stages Q (both halves of
// its 128 rows); then the roles.
template <class Atom, int HQ, int HKV, int D, int PAGE, int MAXP, long long PAGE_ELEMS,
          float SCALE_LOG2, int TPT>
__device__ __forceinline__ void attn_sm100_body(const float* q, const int* positions,
                                                const int* token_seq, const int* page_tables,
                                                const bf16* kv_layer,
                                                const hexel::TensorMap* kv_map, bf16* out) {
  using L = typename Atom::L;
  using namespace hexel;
  constexpr int G = HQ / HKV, S = L::kStages;
  static_assert(HQ % HKV == 0 && TPT >= 1 && TPT * G <= static_cast<int>(L::kRows),
                "a tile's rows fit 128");
  // K/V by TMA where whole pages tile a key block at swizzle-atom (8-row) boundaries.
  constexpr bool kTma = PAGE % 8 == 0 && L::kBlockN % PAGE == 0;
  constexpr unsigned kFullCount = kTma ? 33 : 128;
  constexpr unsigned kBars = 4 * S + 4;
  static_assert(L::kKvBytes == AttnPrefill<D>::kKvBytes && L::kRows == AttnPrefill<D>::kRows,
                "attn_prefill's stage and Q tile (AttnPrefillKvRing, attn_prefill_stage_q)");
  static_assert(
      128 * (L::kProducerRegs + L::kSoftmaxRegs + L::kMmaRegs) <= L::kThreads * L::kLaunchRegs,
      "setmaxnreg: the softmax's registers come out of what the others give back");
  static_assert(L::kSmemBytes + sizeof(AttnPrefillSegment) * TPT + 8 * kBars + 16 <=
                    AttnPrefill<D>::kSmemLimit,
                "the stages and the segment table fit a CTA's shared memory");

  extern __shared__ unsigned char smem_raw[];
  const unsigned base = (smem_addr(smem_raw) + 1023u) & ~1023u;
  const unsigned sq = base + L::kQ, sp = base + L::kP;
  __shared__ alignas(8) unsigned long long bar_words[kBars];
  __shared__ AttnPrefillSegment sm_seg[1][TPT];
  __shared__ int sm_nseg[1];
  const unsigned b0 = smem_addr(bar_words);
  const AttnPrefillKvRing<D> kv{base + L::kStagesAt, b0, b0 + 8 * S, b0 + 16 * S, b0 + 24 * S};
  const AttnSm100Bars bars{b0 + 32 * S, b0 + 32 * S + 8, b0 + 32 * S + 16, b0 + 32 * S + 24};
  const int kvh = blockIdx.x, t0 = (gridDim.y - 1 - blockIdx.y) * TPT;
  const unsigned warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const bool softmax = warp >= L::kSoftmaxWarp && warp < L::kSoftmaxWarp + 4;

  pdl_entry();
  if (warp == 0) {
    if (lane == 0) {
      for (int s = 0; s < S; ++s) {
        mbarrier::init(kv.full_k + 8 * s, kFullCount);
        mbarrier::init(kv.full_v + 8 * s, kFullCount);
        mbarrier::init(kv.empty_k + 8 * s, Atom::kEmptyArrivals);
        mbarrier::init(kv.empty_v + 8 * s, Atom::kEmptyArrivals);
      }
      mbarrier::init(bars.s_full, Atom::kSFullArrivals);
      mbarrier::init(bars.s_empty, 128);  // every softmax thread
      mbarrier::init(bars.p_full, 128);
      mbarrier::init(bars.o_full, Atom::kOFullArrivals);
      mbarrier::fence_init();
    }
    attn_prefill_scan_tile<TPT, 1>(lane, t0, 0, positions, token_seq, sm_seg, sm_nseg);
  } else if (softmax) {
    const int wt = static_cast<int>(threadIdx.x) - 32 * L::kSoftmaxWarp;
    attn_prefill_stage_q<HQ, D, G, TPT>(q, positions, sq, 0, wt, kvh, t0, false);
    attn_prefill_stage_q<HQ, D, G, TPT>(q, positions, sq, 1, wt, kvh, t0, false);
  }
  const unsigned acc = Atom::start(warp, base + L::kImage);  // a CTA barrier

  if (warp < L::kProducerWarps) {
    if constexpr (L::kProducerRegs < L::kLaunchRegs) setmaxnreg_dec<L::kProducerRegs>();
    mbarrier::StageRing<S> ring;
    if constexpr (kTma) {
      if (warp == 0) {
        if (lane == 0) {
          tma::acquire_map(kv_map);
          tma::prefetch_map(kv_map);
        }
        attn_prefill_produce_tma<HKV, D, PAGE, MAXP, PAGE_ELEMS, S>(
            lane, kvh, t0, sm_seg[0], sm_nseg[0], token_seq, page_tables, kv_layer, kv_map, kv,
            ring);
      }
    } else {
      attn_prefill_produce_copy<HKV, D, PAGE, MAXP, PAGE_ELEMS, S>(
          threadIdx.x, kvh, t0, sm_seg[0], sm_nseg[0], token_seq, page_tables, kv_layer, kv, ring);
    }
    // No thread leaves with copies in flight into a stage the MMAs have yet to read.
    cp_async::wait_all();
  } else if (softmax) {
    setmaxnreg_inc<L::kSoftmaxRegs>();
    attn_sm100_softmax_role<Atom, HQ, D, G, TPT, SCALE_LOG2>(acc, warp - L::kSoftmaxWarp, lane, sp,
                                                             kvh, t0, positions, bars, sm_seg[0],
                                                             sm_nseg[0], out);
  } else {
    if constexpr (L::kMmaRegs < L::kLaunchRegs) setmaxnreg_dec<L::kMmaRegs>();
    if (Atom::mma_role(warp))
      Atom::template mma<S>(acc, lane, sq, sp, kv, bars, sm_seg[0], sm_nseg[0]);
  }
  Atom::finish(warp, acc);
}

// out[t, (kvh · G + h) · D + d] = bf16(softmax over keys [0, position] of the row's sequence · V)
// on tcgen05: attn_prefill's arguments and grid (HKV, T / TPT), AttnSm100Layout<D>::kThreads
// threads, AttnSm100Layout<D>::kSmemBytes dynamic shared memory.
template <int HQ, int HKV, int D, int PAGE, int MAXP, long long PAGE_ELEMS, float SCALE_LOG2,
          int TPT>
__global__ void __launch_bounds__(AttnSm100Layout<D>::kThreads, 1)
    attn_prefill_sm100(const float* q, const int* positions, const int* token_seq,
                       const int* page_tables, const bf16* kv_layer, const hexel::TensorMap* kv_map,
                       bf16* out) {
  attn_sm100_body<AttnTcgen05<D>, HQ, HKV, D, PAGE, MAXP, PAGE_ELEMS, SCALE_LOG2, TPT>(
      q, positions, token_seq, page_tables, kv_layer, kv_map, out);
}

// Its Hopper twin (sm_90a): the same arguments, grid and results on AttnWgmmaTwin,
// AttnSm100Layout<D, true>::kThreads threads and kSmemBytes dynamic shared memory.
template <int HQ, int HKV, int D, int PAGE, int MAXP, long long PAGE_ELEMS, float SCALE_LOG2,
          int TPT>
__global__ void __launch_bounds__(AttnSm100Layout<D, true>::kThreads, 1)
    attn_prefill_sm100_twin(const float* q, const int* positions, const int* token_seq,
                            const int* page_tables, const bf16* kv_layer,
                            const hexel::TensorMap* kv_map, bf16* out) {
  attn_sm100_body<AttnWgmmaTwin<D>, HQ, HKV, D, PAGE, MAXP, PAGE_ELEMS, SCALE_LOG2, TPT>(
      q, positions, token_seq, page_tables, kv_layer, kv_map, out);
}

}  // namespace telos_kernels
#endif  // __CUDACC__
