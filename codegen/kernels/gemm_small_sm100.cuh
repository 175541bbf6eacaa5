#pragma once
// The small-M GEMM on Blackwell (sm_100a): y = A · Wᵀ for the buckets below the prefill GEMM's
// (decode, short prefill), with the tensor-core work on tcgen05. The weights are the MMA's A
// operand, 128 rows a CTA (one row a Tensor Memory lane), and the bucket's tokens its N, 16 to 256
// a tile: a decode step streams the weights once and the tokens ride along as the narrow operand,
// which on tcgen05 (M is 64 or 128, N is 16 to 256) is the one that may be small. The stage ring
// and its producer are gemm_small.cuh's (small_gemm_produce: weights before griddepcontrol.wait,
// tokens after it; the same tensor maps and boxes), the MMA's descriptors and accumulator access
// hexel/tcgen05_accum.cuh's, as in the prefill GEMM (gemm_prefill_sm100.cuh), and each epilogue's
// arithmetic is gemm_small.cuh's (the residual's add in L2, SwiGLU's EpilogueSwiGlu::act, the LM
// head's f32 logits and greedy candidates).
//
// The MMA atom and its accumulator access are a policy (the kernel body's Atom), so that the same
// kernel runs on Hopper as its twin and an H200 checks everything but the atom:
// - Shared by both: the tiles and their index math (SmallGemmSm100, SmallEpilogueSm100), the
//   stage layout, the producer and its full / empty barriers, the accumulator-full barrier the
//   epilogue waits on, the epilogue (one weight row a thread, 16 tokens a piece) with its
//   arithmetic and stores, the LM head's candidates, and the kernels' arguments.
// - SmallTcgen05 (sm_100a, gemm_small_sm100_*): warp 5 allocates Tensor Memory and one of its
//   threads issues every MMA (per 64-wide K block four tcgen05.mma kind::f16, M 128, N the token
//   tile, K 16; SwiGLU: a second chain for the up rows into the columns after the gate's), each
//   stage released by tcgen05.commit, the accumulator handed over by a last commit; the epilogue
//   reads it with tcgen05.ld (warp q: lanes 32 q .. 32 q + 31).
// - SmallWgmmaTwin (sm_90a, gemm_small_sm100_twin_*): warps 0-7, two consumer warpgroups of 64
//   weight rows each, issue wgmma m64nNk16 (N the same token tile) from the same stages, the
//   weights as A and the tokens as B, one chain per product as above, each warp releasing a
//   stage once read; the accumulators stay in registers and, after the K loop, go to a
//   shared-memory image of the Tensor Memory accumulator (row = lane, column = column, over the
//   drained stage ring), every consumer thread arriving on the accumulator-full barrier; the
//   epilogue reads the image where tcgen05.ld would read Tensor Memory. Its limit: 128 rows of
//   at most 256 accumulator columns (two warpgroups' registers), so SwiGLU token tiles of at
//   most 128.
// Roles, by warp: 0-3 the epilogue (thread (q, lane) holds weight row 32 q + lane, which it writes
// as an output column); the TMA producer (one thread) warp 4 on sm_100a, warp 8 in the twin.
//
// The norm forms (gemm_small_sm100_norm_*, at most 8 tokens; the buckets where sm_90a runs
// gemm_small_norm_*): the tokens are RMSNorm(x), which warps 0-3 compute before their epilogue with
// gemm_small.cuh's norm prologue into resident rows (norm_rows.cuh) that every K step reads as B,
// K-major without swizzle; the producer streams weights only, and the MMA issuers wait for the rows
// on norm_full. gemm_small_sm100_norm_qkv then runs gemm_small.cuh's folded QKV epilogue
// (qkv_fold_epilogue) on the tile's heads. Batch invariance: small_sm100_body.
//
// Reduction order: every output element is one chain of MMAs over K in 16-wide steps, in order,
// from zero, whatever the bucket; the prefill GEMM's chain has the same steps with the operands'
// roles exchanged (tokens as A), so the two agree bit for bit exactly when the tensor core's
// per-element dot product does not depend on which operand is A (docs/hexel.md, "Blackwell": the
// twin checks this for wgmma against gemm_small; for tcgen05 it waits for the first B200).
//
// The index math is host-callable (SmallEpilogueSm100, SmallGemmSm100Twin;
// test/codegen/small_epilogue_sm100_test checks it, the norm forms' resident tokens included,
// against hexel/tcgen05_model.h and wgmma's fragment layout); the tcgen05 kernels compile under
// NVRTC for sm_100a only, the twins for sm_90a (test/codegen/lit/sm100_twin_assembly.test).
#include "hexel/config.cuh"
#include "hexel/tcgen05_accum.cuh"
#include "norm_rows.cuh"

namespace telos_kernels {

// The launch shape, for the plan too (kernel_plan.hpp restates kThreads and the shared memory).
struct SmallGemmSm100 {
  enum : unsigned {
    kEpilogueWarps = 4,
    kProducerWarp = 4,
    kMmaWarp = 5,
    kThreads = 192,
    kWeightRows = 128,  // A rows a tile: the MMA's M, one a Tensor Memory lane
    kBlockK = 64,       // one 128-byte swizzle row of bf16 a stage
    kMaxTokens = 256,   // tokens a tile: the MMA's largest N
    kLoadColumns = 16,  // a tcgen05.ld .32x32b.x16: 16 tokens of a weight row
  };
  // The token tile of a bucket of m tokens, in the producer's 64-row groups: m itself up to 256
  // (gemm_small.cuh's WG, the tile's 64-row groups), else 256 rows a tile.
  static HEXEL_HOST_DEVICE constexpr unsigned token_groups(unsigned m) {
    return m >= kMaxTokens ? kMaxTokens / 64 : (m + 63) / 64;
  }
};

// One instance's tiles and its epilogue's index math: M tokens, N output columns, the W rows
// split into 128 gate rows and their 128 up rows (SPLIT_W, SwiGLU) or not. Thread (warp, lane)
// of the epilogue holds weight row row(warp, lane) of the tile, the Tensor Memory lane of that
// number; register r of its piece p holds token column p · kLoadColumns + r (the gate's, and the
// up's kN columns further on).
template <int M, int N, bool SPLIT_W, bool NORM = false>
struct SmallEpilogueSm100 {
  using G = SmallGemmSm100;
  using Rows = NormRows<NORM ? M : 1>;  // the norm forms' resident tokens
  enum : unsigned {
    kTileTokens = 64 * G::token_groups(M),
    kARows = static_cast<unsigned>(M) < kTileTokens ? static_cast<unsigned>(M) : kTileTokens,
    kN = (kARows + 15) / 16 * 16,  // the MMA's N: the tokens' box, whole 16-column steps
    kAccumColumns = (SPLIT_W ? 2 : 1) * kN,
    kTmemColumns = kAccumColumns <= 32    ? 32
                   : kAccumColumns <= 64  ? 64
                   : kAccumColumns <= 128 ? 128
                   : kAccumColumns <= 256 ? 256
                                          : 512,
    kWRows = (SPLIT_W ? 2 : 1) * G::kWeightRows,  // W rows a stage: gemm_small.cuh's BN
    kOutCols = G::kWeightRows,
    kTilesM = (M + kTileTokens - 1) / kTileTokens,
    kTilesN = (N + kOutCols - 1) / kOutCols,
    kPieces = kN / G::kLoadColumns,
    // A stage: the tokens' kN rows (the box fills kARows of them; none in the norm forms, whose
    // tokens are resident), then the W rows; each a whole number of 1024-byte swizzle repeats.
    kASlot = NORM ? 0 : (kN * 128 + 1023) / 1024 * 1024,
    kStageBytes = kASlot + kWRows * 128,
    kNorm = NORM ? 1u : 0u,
  };
  static_assert(M > 0 && N % 8 == 0, "TMA rows are multiples of 16 bytes");
  static_assert(kN % 16 == 0 && kN >= 16 && kN <= unsigned{G::kMaxTokens},
                "M = 128 takes N = 16 .. 256");
  static_assert(!NORM || M <= 8, "the norm forms' tokens: the rows of one core matrix");

  // The tile's weight row (Tensor Memory lane) thread (warp, lane) holds: its warp's lane quarter.
  static HEXEL_HOST_DEVICE constexpr unsigned row(unsigned warp, unsigned lane) {
    return 32 * (warp % 4) + lane;
  }
  // Its output column in weight tile tn.
  static HEXEL_HOST_DEVICE constexpr unsigned out_col(unsigned tn, unsigned warp, unsigned lane) {
    return tn * kOutCols + row(warp, lane);
  }
  // The token of register r of piece p in token tile tm.
  static HEXEL_HOST_DEVICE constexpr unsigned token(unsigned tm, unsigned p, unsigned r) {
    return tm * kTileTokens + p * G::kLoadColumns + r;
  }
  // The accumulator columns piece p's loads start at: the gate's (or the only) product, and
  // SwiGLU's up product, whose chain writes the kN columns after the gate's.
  static HEXEL_HOST_DEVICE constexpr unsigned gate_col(unsigned p) { return p * G::kLoadColumns; }
  static HEXEL_HOST_DEVICE constexpr unsigned up_col(unsigned p) { return kN + gate_col(p); }
  // Where the stage's operands start: the tokens (the MMA's B) at its start, the W rows (A) after
  // them, SwiGLU's up rows kWeightRows rows further (small_gemm_produce's second half).
  static HEXEL_HOST_DEVICE constexpr unsigned a_offset() { return kASlot; }
  static HEXEL_HOST_DEVICE constexpr unsigned up_offset() { return kASlot + G::kWeightRows * 128; }
  // The norm forms: the bytes of the resident tokens for K = k, ahead of the stages (norm_rows.cuh:
  // the M rows of RMSNorm(x), 8 chunks a 64-wide K block, zeros past K, the zero tail).
  static HEXEL_HOST_DEVICE constexpr unsigned resident_bytes(unsigned k) {
    return NORM ? Rows::bytes((k + G::kBlockK - 1) / G::kBlockK * 8) : 0;
  }
  // The tokens' operand (the MMA's B) of K step kk of K block kb, as a descriptor of type Desc
  // (hexel::tcgen05::SmemDesc, or the twin's hexel::wgmma::SmemDesc: the same fields): the stage's
  // token rows at `stage` in the 128B swizzle (Bf16Accum::operand_desc), or in the norm forms the
  // resident rows at `resident`, K-major without swizzle (NormRows: LBO 16 M, SBO 0, so B rows
  // 8 .. 15 read rows 0 .. 7 again, into columns nobody stores).
  template <class Desc>
  static HEXEL_HOST_DEVICE constexpr Desc token_desc(unsigned stage, unsigned resident,
                                                     unsigned kb, unsigned kk) {
    if constexpr (NORM)
      return Desc::make(resident + Rows::step_offset(kb, kk), hexel::Swizzle::None, Rows::kLbo,
                        Rows::kSbo);
    else
      return Desc::make(stage, hexel::Swizzle::B128, 16, 1024).advanced(32 * kk);
  }
};

// The Hopper twin's launch shape and shared memory (SmallWgmmaTwin): two consumer warpgroups
// (warps 0-7, 64 weight rows each) and the producer's warp; the dynamic shared memory holds the
// stage ring and, once the K loop has drained it, the accumulator image over it: 128 rows of
// `accum_columns` f32 and 4 more (a row 16 bytes off the last one's banks), from the same
// 1024-byte-aligned base.
struct SmallGemmSm100Twin {
  enum : unsigned {
    kConsumerWarps = 8,
    kProducerWarp = 8,
    kThreads = 32 * (kConsumerWarps + 1),
    kMaxAccumColumns = 256,  // 128 a warpgroup thread: two warpgroups' registers hold the tile
  };
  static HEXEL_HOST_DEVICE constexpr unsigned image_pitch(unsigned accum_columns) {
    return accum_columns + 4;
  }
  // Where consumer thread (warp, lane) puts its accumulator registers d[c][4j + 2h + e] (chain c
  // of n columns: the gate's or only product, SwiGLU's up): the tile's weight row
  // image_row(warp, lane, h), accumulator column image_col(c, n, j, lane) + e (PTX ISA, wgmma
  // "Register Fragments", matrix D of .m64nNk16, for warpgroup warp / 4's 64 rows), as Tensor
  // Memory holds them; byte image_offset(row, column, accum_columns) of the image.
  static HEXEL_HOST_DEVICE constexpr unsigned image_row(unsigned warp, unsigned lane, unsigned h) {
    return 64 * (warp / 4) + 16 * (warp % 4) + lane / 4 + 8 * h;
  }
  static HEXEL_HOST_DEVICE constexpr unsigned image_col(unsigned c, unsigned n, unsigned j,
                                                        unsigned lane) {
    return c * n + 8 * j + 2 * (lane % 4);
  }
  static HEXEL_HOST_DEVICE constexpr unsigned image_offset(unsigned row, unsigned col,
                                                           unsigned accum_columns) {
    return 4 * (row * image_pitch(accum_columns) + col);
  }
  // The norm forms' resident tokens (`resident` bytes) come first; the ring and the image after.
  static HEXEL_HOST_DEVICE constexpr unsigned smem(unsigned stages, unsigned stage_bytes,
                                                   unsigned accum_columns, unsigned resident = 0) {
    const unsigned ring = stages * stage_bytes;
    const unsigned image = image_offset(SmallGemmSm100::kWeightRows, 0, accum_columns);
    return resident + (ring > image ? ring : image) + 1024;
  }
};

}  // namespace telos_kernels

#if defined(__CUDACC__)
#include "gemm_small.cuh"
#include "hexel/ld_st.cuh"
#include "hexel/mbarrier.cuh"
#include "hexel/sync.cuh"
#include "hexel/tcgen05.cuh"
#include "hexel/tma.cuh"
#include "wgmma_chains.cuh"

namespace telos_kernels {

// Where a CTA of the small GEMM keeps its pieces (small_sm100_body): the norm forms' resident
// tokens (norm_rows.cuh), the stage ring (1024-byte aligned), and the barriers: full[] and
// empty[] (a stage's 8 bytes apart), the accumulator's, and the norm forms' norm_full (the resident
// tokens written).
struct SmallSm100Smem {
  unsigned resident, stages, full, empty, accum_full, norm_full;
};

// The MMA thread's MMAs of K block kb from the stage at `stage`: per chain (the gate's or only
// product into the accumulator's first kN columns, SwiGLU's up into the next kN) its four K = 16
// MMAs, the W rows as A and the tokens (E::token_desc: the stage's or the resident ones) as B,
// overwriting the accumulator at kb 0's first. PTX: tcgen05.mma.
template <class E>
__device__ __forceinline__ void small_sm100_mma_block(unsigned tmem, unsigned stage,
                                                      unsigned resident, unsigned kb) {
  using namespace hexel;
  using Accum = tcgen05::Bf16Accum<E::kN>;
  constexpr unsigned kChains = unsigned{E::kAccumColumns} / unsigned{E::kN};
#pragma unroll
  for (unsigned c = 0; c < kChains; ++c)
#pragma unroll
    for (unsigned kk = 0; kk < Accum::kBlockK / 16; ++kk)
      tcgen05::mma<tcgen05::Kind::F16>(
          tmem + c * E::kN, Accum::operand_desc(stage + (c ? E::up_offset() : E::a_offset()), kk),
          E::template token_desc<tcgen05::SmemDesc>(stage, resident, kb, kk), Accum::kInstrDesc,
          kb > 0 || kk > 0);
}

// The MMA thread: (the norm forms: once the resident tokens are written) the K loop of the CTA's
// one tile into the accumulator at `tmem`, each stage given back by a commit to its empty barrier
// once its MMAs have read it, then the accumulator handed to the epilogue by a commit to
// accum_full. PTX: tcgen05.fence, tcgen05.commit.
template <class E, unsigned STAGES, unsigned K_BLOCKS>
__device__ __forceinline__ void small_sm100_mma(const SmallSm100Smem& sm, unsigned tmem) {
  using namespace hexel;
  if constexpr (E::kNorm) mbarrier::wait_parity(sm.norm_full, 0);
  mbarrier::StageRing<STAGES> ring;
  for (unsigned kb = 0; kb < K_BLOCKS; ++kb) {
    mbarrier::wait_parity(sm.full + 8 * ring.index, ring.phase);
    tcgen05::fence_after_thread_sync();
    small_sm100_mma_block<E>(tmem, sm.stages + ring.index * E::kStageBytes, sm.resident, kb);
    tcgen05::commit(sm.empty + 8 * ring.index);
    ring.advance();
  }
  tcgen05::commit(sm.accum_full);
}

// The sm_100a atom: the accumulator in Tensor Memory (its address is the accumulator handle).
struct SmallTcgen05 {
  enum : unsigned {
    kThreads = SmallGemmSm100::kThreads,
    kProducerWarp = SmallGemmSm100::kProducerWarp,
    kEmptyArrivals = 1,  // the MMA thread's tcgen05.commit
    kAccumArrivals = 1,  // its last commit
    kEpilogueIssues = false,
  };
  // Every thread, as the CTA's first barrier: warp kMmaWarp allocates the columns; returns their
  // address. PTX: tcgen05.alloc, tcgen05.relinquish_alloc_permit, tcgen05.fence.
  template <class E>
  static __device__ __forceinline__ unsigned start(unsigned warp, unsigned) {
    using namespace hexel;
    __shared__ unsigned tmem_slot;
    if (warp == SmallGemmSm100::kMmaWarp) {
      tcgen05::alloc(smem_addr(&tmem_slot), E::kTmemColumns);
      tcgen05::relinquish_alloc_permit();
    }
    tcgen05::fence_before_thread_sync();
    __syncthreads();
    tcgen05::fence_after_thread_sync();
    return tmem_slot;
  }
  // Warp kMmaWarp: its first thread issues every MMA; the epilogue warps (the others but the
  // producer's) issue none.
  static __device__ __forceinline__ bool issues_alone(unsigned warp) {
    return warp == SmallGemmSm100::kMmaWarp;
  }
  static __device__ __forceinline__ bool epilogue(unsigned) { return true; }
  template <class E, unsigned STAGES, unsigned K_BLOCKS>
  static __device__ __forceinline__ void mma(unsigned tmem, const SmallSm100Smem& sm, unsigned,
                                             unsigned lane) {
    if (lane == 0) small_sm100_mma<E, STAGES, K_BLOCKS>(sm, tmem);
  }
  // An epilogue thread, once accum_full has completed.
  static __device__ __forceinline__ void accum_ready() {
    hexel::tcgen05::fence_after_thread_sync();
  }
  // Columns col .. col + 15 of its row into v, complete after wait(). PTX: tcgen05.ld.
  template <class E>
  static __device__ __forceinline__ void load(hexel::uint32_t (&v)[16], unsigned tmem,
                                              unsigned warp, unsigned, unsigned col) {
    using Accum = hexel::tcgen05::Bf16Accum<E::kN>;
    hexel::tcgen05::ld_32x32b(v, Accum::ld_taddr(tmem, warp, col));
  }
  static __device__ __forceinline__ void wait() { hexel::tcgen05::wait_ld(); }
  // Every thread, at the end: once every tcgen05.ld has completed (wait::ld), the allocating warp
  // frees the columns. PTX: tcgen05.dealloc.
  template <class E>
  static __device__ __forceinline__ void finish(unsigned warp, unsigned tmem) {
    using namespace hexel;
    tcgen05::fence_before_thread_sync();
    __syncthreads();
    if (warp == SmallGemmSm100::kMmaWarp) {
      tcgen05::fence_after_thread_sync();
      tcgen05::dealloc(tmem, E::kTmemColumns);
    }
  }
};

// The sm_90a twin's atom: the accumulator in the two consumer warpgroups' registers, then in the
// image at the stages' base (its address is the accumulator handle; SmallGemmSm100Twin).
struct SmallWgmmaTwin {
  using T = SmallGemmSm100Twin;
  enum : unsigned {
    kThreads = T::kThreads,
    kProducerWarp = T::kProducerWarp,
    kEmptyArrivals = T::kConsumerWarps,  // each consumer warp's first lane
    kAccumArrivals = 32 * T::kConsumerWarps,
    kEpilogueIssues = true,
  };
  template <class E>
  static __device__ __forceinline__ unsigned start(unsigned, unsigned stages) {
    static_assert(unsigned{E::kAccumColumns} <= unsigned{T::kMaxAccumColumns},
                  "two warpgroups hold 128 rows of at most 256 f32 accumulator columns");
    __syncthreads();
    return stages;
  }
  // Every consumer warp issues (kEpilogueIssues); warpgroup 0 (warps 0-3) is also the epilogue.
  static __device__ __forceinline__ bool issues_alone(unsigned) { return false; }
  static __device__ __forceinline__ bool epilogue(unsigned warp) {
    return warp < SmallGemmSm100::kEpilogueWarps;
  }
  // A consumer thread (warps 0-7): (the norm forms: once the resident tokens are written) its
  // warpgroup's K loop, then, once both warpgroups' wgmma have read their last stage (named barrier
  // 2), its accumulators into the image where Tensor Memory would hold them
  // (SmallGemmSm100Twin::image_row, image_col), then its arrival on accum_full.
  template <class E, unsigned STAGES, unsigned K_BLOCKS>
  static __device__ __forceinline__ void mma(unsigned image, const SmallSm100Smem& sm,
                                             unsigned warp, unsigned lane) {
    using namespace hexel;
    constexpr unsigned kChains = unsigned{E::kAccumColumns} / unsigned{E::kN};
    const unsigned wg = warp / 4;
    if constexpr (E::kNorm) mbarrier::wait_parity(sm.norm_full, 0);
    // Chain 0 the gate's (or only) product, 1 SwiGLU's up: this warpgroup's 64 rows of each, the
    // tokens as B through the descriptor fields the tcgen05 MMA uses (E::token_desc). The last
    // stage needs no release: nothing loads after it.
    float d[kChains][E::kN / 2];
    mbarrier::StageRing<STAGES> ring;
    wgmma_chains_k_loop<E::kN>(
        d, ring, K_BLOCKS, sm.full, sm.empty, lane,
        [&](unsigned s, unsigned c) {
          return sm.stages + s * E::kStageBytes + (c == 0 ? E::a_offset() : E::up_offset()) +
                 wg * 64 * 128;
        },
        [&](unsigned s, unsigned, unsigned kb, unsigned kk) {
          return E::template token_desc<wgmma::SmemDesc>(sm.stages + s * E::kStageBytes,
                                                         sm.resident, kb, kk);
        });
    named_barrier_sync(2, 32 * T::kConsumerWarps);
#pragma unroll
    for (unsigned c = 0; c < kChains; ++c)
#pragma unroll
      for (unsigned j = 0; j < E::kN / 8; ++j)
#pragma unroll
        for (unsigned h = 0; h < 2; ++h) {
          const unsigned at = T::image_offset(T::image_row(warp, lane, h),
                                              T::image_col(c, E::kN, j, lane), E::kAccumColumns);
          st_shared_v2_f32(image + at, d[c][4 * j + 2 * h], d[c][4 * j + 2 * h + 1]);
        }
    mbarrier::arrive(sm.accum_full);
  }
  static __device__ __forceinline__ void accum_ready() {}
  template <class E>
  static __device__ __forceinline__ void load(hexel::uint32_t (&v)[16], unsigned image,
                                              unsigned warp, unsigned lane, unsigned col) {
    const unsigned at = image + T::image_offset(E::row(warp, lane), col, E::kAccumColumns);
#pragma unroll
    for (unsigned i = 0; i < 4; ++i) {
      const uint4 x = hexel::ld_shared_v4(at + 16 * i);
      v[4 * i] = x.x;
      v[4 * i + 1] = x.y;
      v[4 * i + 2] = x.z;
      v[4 * i + 3] = x.w;
    }
  }
  static __device__ __forceinline__ void wait() {}
  template <class E>
  static __device__ __forceinline__ void finish(unsigned, unsigned) {}
};

// One element of the epilogue: out[at] from the accumulator's v (SwiGLU: the gate, u the up),
// with gemm_small.cuh's arithmetic.
template <SmallEpi EPI>
__device__ __forceinline__ void small_sm100_store(float v, float u, void* out, long long at) {
  if constexpr (EPI == SmallEpi::Residual)
    hexel::red_add_relaxed_gpu(static_cast<float*>(out) + at, v);
  else if constexpr (EPI == SmallEpi::SwiGlu)
    static_cast<bf16*>(out)[at] = hexel::to_bf16(EpilogueSwiGlu::act(v, u));
  else if constexpr (EPI == SmallEpi::F32Cand)
    static_cast<float*>(out)[at] = v;
  else
    static_cast<bf16*>(out)[at] = hexel::to_bf16(v);
}

// F32Cand: the greedy candidates of a piece's tokens over the warp's 32 weight rows into
// best[warp][token column] (columns past N give none); the warp's lanes all shuffle.
template <class E>
__device__ __forceinline__ void small_sm100_candidates(const hexel::uint32_t (&g)[16], unsigned n,
                                                       bool in_n, unsigned p, unsigned warp,
                                                       unsigned lane, unsigned long long* best) {
#pragma unroll
  for (unsigned r = 0; r < SmallGemmSm100::kLoadColumns; ++r) {
    const unsigned long long c =
        warp_max_u64(in_n ? greedy_candidate(__uint_as_float(g[r]), static_cast<int>(n)) : 0ull);
    if (lane == 0) best[warp * E::kN + E::gate_col(p) + r] = c;
  }
}

// F32Cand, after every piece: each token's candidate of the tile, the largest of the four warps',
// into cand[m, tn] (kTilesN a token), by the 128 epilogue threads (t).
template <class E, int M>
__device__ __forceinline__ void small_sm100_tile_candidates(const unsigned long long* best,
                                                            unsigned tm, unsigned tn, unsigned t,
                                                            unsigned long long* cand) {
  hexel::named_barrier_sync(1, 128);
  for (unsigned j = t; j < E::kN; j += 128) {
    unsigned long long c = best[j];
#pragma unroll
    for (unsigned w = 1; w < SmallGemmSm100::kEpilogueWarps; ++w)
      c = best[w * E::kN + j] > c ? best[w * E::kN + j] : c;
    const unsigned m = tm * E::kTileTokens + j;
    if (m < static_cast<unsigned>(M) && cand != nullptr)
      cand[static_cast<long long>(m) * E::kTilesN + tn] = c;
  }
}

// An epilogue thread's part of tile (tm, tn): per piece, 16 tokens of its weight row out of the
// accumulator `acc` (SwiGLU: and their up values) through the atom's loads, each token's element
// stored where it lies inside M x N. A warp's 32 lanes write 32 consecutive columns of a token.
template <class Atom, class E, int M, int N, SmallEpi EPI>
__device__ __forceinline__ void small_sm100_epilogue(unsigned acc, unsigned tm, unsigned tn,
                                                     unsigned warp, unsigned lane, void* out,
                                                     unsigned long long* cand) {
  using namespace hexel;
  __shared__ unsigned long long best[EPI == SmallEpi::F32Cand ? 4 * E::kN : 1];
  const unsigned n = E::out_col(tn, warp, lane);
  const bool in_n = n < static_cast<unsigned>(N);
#pragma unroll 1
  for (unsigned p = 0; p < E::kPieces; ++p) {
    uint32_t g[16], u[16];
    Atom::template load<E>(g, acc, warp, lane, E::gate_col(p));
    if constexpr (EPI == SmallEpi::SwiGlu) Atom::template load<E>(u, acc, warp, lane, E::up_col(p));
    Atom::wait();
    if constexpr (EPI == SmallEpi::F32Cand)
      small_sm100_candidates<E>(g, n, in_n, p, warp, lane, best);
#pragma unroll
    for (unsigned r = 0; r < SmallGemmSm100::kLoadColumns; ++r) {
      const unsigned m = E::token(tm, p, r);
      if (!in_n || m >= static_cast<unsigned>(M)) continue;
      small_sm100_store<EPI>(__uint_as_float(g[r]),
                             EPI == SmallEpi::SwiGlu ? __uint_as_float(u[r]) : 0.f, out,
                             static_cast<long long>(m) * N + n);
    }
  }
  if constexpr (EPI == SmallEpi::F32Cand)
    small_sm100_tile_candidates<E, M>(best, tm, tn, 32 * warp + lane, cand);
}

// Thread 0, first: the tensor maps (the norm forms have no tokens' map) and the barriers: each
// stage's full (the producer's arrival) and empty (the atom's releases), the accumulator's (the
// atom's hand-over) and the norm forms' norm_full (small_sm100_norm's one arrival).
template <class Atom, unsigned STAGES, bool NORM>
__device__ __forceinline__ void small_sm100_init(const SmallSm100Smem& sm, const TensorMap* a_map,
                                                 const TensorMap* w_map) {
  using namespace hexel;
  if constexpr (!NORM) {
    tma::acquire_map(a_map);
    tma::prefetch_map(a_map);
  }
  tma::acquire_map(w_map);
  tma::prefetch_map(w_map);
  for (unsigned s = 0; s < STAGES; ++s) {
    mbarrier::init(sm.full + 8 * s, 1);
    mbarrier::init(sm.empty + 8 * s, Atom::kEmptyArrivals);
  }
  mbarrier::init(sm.accum_full, Atom::kAccumArrivals);
  if constexpr (NORM) mbarrier::init(sm.norm_full, 1);
  mbarrier::fence_init();
}

// The norm forms' tokens, by warps 0-3 (t: their 128 threads), while the producer streams the
// first weight stages: gemm_small.cuh's norm prologue (small_gemm_norm_prologue: x after
// griddepcontrol.wait, RMSNorm with the rmsnorm kernel's arithmetic into the resident rows, the
// fence for the async proxy, the 128 threads' meeting), then one arrival on norm_full for the MMA
// issuers (the MMA thread; the twin's two warpgroups). `sums`: 4 M floats of shared memory.
template <int M, int K, float EPS>
__device__ __forceinline__ void small_sm100_norm(const SmallSm100Smem& sm, const float* x,
                                                 const float* norm_w, float* sums, unsigned t) {
  constexpr unsigned kChunks = (K + SmallGemmSm100::kBlockK - 1) / SmallGemmSm100::kBlockK * 8;
  small_gemm_norm_prologue<M, K, EPS, kChunks>(sm.resident, x, norm_w, sums, static_cast<int>(t),
                                               t / 32, t % 32);
  if (t == 0) hexel::mbarrier::arrive(sm.norm_full);
}

// The whole kernel on atom Atom (SmallTcgen05, SmallWgmmaTwin): token tile blockIdx.x, weight tile
// blockIdx.y. The dynamic shared memory holds the norm forms' resident tokens, then the stages
// (kernel_plan.hpp, SmallGemmSm100Tiling::smem; the twin's: SmallGemmSm100Twin::smem); the
// barriers and the norm's warp sums are static. NORM (the norm forms, at most 8 tokens): the
// tokens are RMSNorm(x) (x f32 [M, K], weights norm_w, epsilon EPS; a_map unused), which warps 0-3
// compute into the resident rows before their epilogue (small_sm100_norm), and the producer loads
// weights only, never waiting for the previous kernel. Otherwise the tokens are a_map's rows.
//
// Batch invariance of the norm forms: the resident rows hold, bit for bit, what rmsnorm writes
// into h (the same function of x's row: norm.cuh's partition, reduction order and rounding), and
// each output element is the same MMA chain as gemm_small_sm100's on h: M 128, N 16 (the tokens'
// box rounded to 16 either way: at most 8 tokens), K in 16-wide steps in order from zero, the same
// W rows as A. Only the B layout differs (resident and unswizzled, not TMA's 128B swizzle), which
// changes where the MMA reads a token's elements, not their values; B rows past the tokens feed
// result columns nobody stores. So a token gets the bits of rmsnorm + gemm_small_sm100_* (and, the
// chain being the one every sm_100a bucket runs, of every bucket) wherever the norm folds.
template <class Atom, int M, int N, int K, int STAGES, SmallEpi EPI, bool NORM = false,
          float EPS = 0.f>
__device__ __forceinline__ void small_sm100_body(const TensorMap* a_map, const float* x,
                                                 const float* norm_w, const TensorMap* w_map,
                                                 void* out, unsigned long long* cand) {
  using G = SmallGemmSm100;
  using E = SmallEpilogueSm100<M, N, EPI == SmallEpi::SwiGlu, NORM>;
  using namespace hexel;
  static_assert(STAGES >= 2, "one stage computes while the next loads");
  static_assert(K % 8 == 0, "TMA rows are multiples of 16 bytes");
  constexpr unsigned kKBlocks = (K + G::kBlockK - 1) / G::kBlockK;
  extern __shared__ unsigned char smem_raw[];
  // full[], empty[], accum_full and (the norm forms) norm_full.
  __shared__ unsigned long long bars[2 * STAGES + (NORM ? 2 : 1)];
  __shared__ float norm_sums[NORM ? 4 * M : 1];
  const unsigned base = (smem_addr(smem_raw) + 1023u) & ~1023u, full = smem_addr(bars);
  const SmallSm100Smem sm{base,          base + E::resident_bytes(K), full, full + 8 * STAGES,
                          full + 16 * STAGES, full + 16 * STAGES + 8};
  const unsigned warp = warp_index(), lane = threadIdx.x % 32;
  const unsigned tm = blockIdx.x, tn = blockIdx.y;

  if (threadIdx.x == 0) small_sm100_init<Atom, STAGES, NORM>(sm, a_map, w_map);
  const unsigned acc = Atom::template start<E>(warp, sm.stages);

  if (warp == Atom::kProducerWarp) {
    auto a_stage = [&](unsigned s) { return sm.stages + s * E::kStageBytes; };
    auto w_stage = [&](unsigned s) { return sm.stages + s * E::kStageBytes + E::a_offset(); };
    if (lane == 0)
      small_gemm_produce<M, N, K, E::kWRows, STAGES, EPI, NORM, 1, G::token_groups(M), 1, 0, 0,
                         Bf16Weight>(a_map, w_map, sm.full, sm.full, sm.empty, tm, tn, 0, a_stage,
                                     w_stage);
  } else if (Atom::issues_alone(warp)) {
    Atom::template mma<E, STAGES, kKBlocks>(acc, sm, warp, lane);
  } else {
    if constexpr (NORM) {
      if (Atom::epilogue(warp)) small_sm100_norm<M, K, EPS>(sm, x, norm_w, norm_sums, threadIdx.x);
    }
    // The twin's consumer warps all issue here, one call site for their shared named barrier.
    if constexpr (Atom::kEpilogueIssues) Atom::template mma<E, STAGES, kKBlocks>(acc, sm, warp, lane);
    if (Atom::epilogue(warp)) {
      // The outputs (x for the residual) belong to the previous kernel; the norm has waited.
      if constexpr (!NORM) grid_dependency_wait();
      mbarrier::wait_parity(sm.accum_full, 0);
      Atom::accum_ready();
      small_sm100_epilogue<Atom, E, M, N, EPI>(acc, tm, tn, warp, lane, out, cand);
    }
  }
  Atom::template finish<E>(warp, acc);
}

// The folded QKV projection on atom Atom: the norm form of the bf16 kernel into qkv, then, by the
// epilogue warps (0-3), the QKV epilogue of the heads whose columns this CTA completes
// (gemm_small.cuh's qkv_fold_epilogue over the tile's 128 columns: with D 32 .. 128 a tile holds
// whole heads, each counted once).
template <class Atom, int M, int K, int STAGES, int HQ, int HKV, int D, bool BIAS, bool QK_NORM,
          float EPS, int PAGE, int MAXP, long long PAGE_ELEMS, class Rope, class KV>
__device__ __forceinline__ void small_sm100_norm_qkv_body(
    const float* x, const float* norm_w, const TensorMap* w_map, bf16* qkv, const float* bias,
    const float* q_norm, const float* k_norm, const int* positions, const int* token_seq,
    const int* page_tables, typename KV::Elem* kv_layer, float* q_out, unsigned* arrivals) {
  constexpr int N = (HQ + 2 * HKV) * D, kCols = SmallGemmSm100::kWeightRows;
  small_sm100_body<Atom, M, N, K, STAGES, SmallEpi::StoreBf16, true, EPS>(nullptr, x, norm_w,
                                                                         w_map, qkv, nullptr);
  if (hexel::warp_index() >= SmallGemmSm100::kEpilogueWarps) return;
  qkv_fold_epilogue<M, kCols, HQ, HKV, D, BIAS, QK_NORM, EPS, PAGE, MAXP, PAGE_ELEMS, Rope, KV>(
      static_cast<int>(blockIdx.y) * kCols, threadIdx.x, qkv, bias, q_norm, k_norm, positions,
      token_seq, page_tables, kv_layer, q_out, arrivals, [] { hexel::named_barrier_sync(2, 128); });
}

// gemm_small_bf16 on tcgen05: y[m, n] = bf16((A · Wᵀ)[m, n]). A map: [M, K], boxes of the token
// tile's rows (at most 256) x 64; W map: [N, K], 128 x 64 boxes.
template <int M, int N, int K, int STAGES>
__global__ void __launch_bounds__(SmallGemmSm100::kThreads, 1)
    gemm_small_sm100_bf16(const TensorMap* a_map, const TensorMap* w_map, bf16* y) {
  hexel::launch_dependents();  // the waits are in the producer and the epilogue
  small_sm100_body<SmallTcgen05, M, N, K, STAGES, SmallEpi::StoreBf16>(a_map, nullptr, nullptr, w_map, y, nullptr);
}

// gemm_small_residual on tcgen05: x[m, n] += (A · Wᵀ)[m, n], x the f32 residual stream.
template <int M, int N, int K, int STAGES>
__global__ void __launch_bounds__(SmallGemmSm100::kThreads, 1)
    gemm_small_sm100_residual(const TensorMap* a_map, const TensorMap* w_map, float* x) {
  hexel::launch_dependents();
  small_sm100_body<SmallTcgen05, M, N, K, STAGES, SmallEpi::Residual>(a_map, nullptr, nullptr, w_map, x, nullptr);
}

// gemm_small_swiglu on tcgen05: act[m, j] = bf16(silu(g) · u) of gate_up's rows j and I + j (W
// map: [2I, K], 128 x 64 boxes, each stage a tile's 128 gate rows and their 128 up rows).
template <int M, int I, int K, int STAGES>
__global__ void __launch_bounds__(SmallGemmSm100::kThreads, 1)
    gemm_small_sm100_swiglu(const TensorMap* a_map, const TensorMap* w_map, bf16* act) {
  hexel::launch_dependents();
  small_sm100_body<SmallTcgen05, M, I, K, STAGES, SmallEpi::SwiGlu>(a_map, nullptr, nullptr, w_map, act, nullptr);
}

// gemm_small_f32cand on tcgen05: the LM head's f32 logits, and cand[m, t] (ceil(N / 128) a token)
// the greedy candidate of weight tile t's logits of token m; null: logits only.
template <int M, int N, int K, int STAGES>
__global__ void __launch_bounds__(SmallGemmSm100::kThreads, 1)
    gemm_small_sm100_f32cand(const TensorMap* a_map, const TensorMap* w_map, float* y,
                             unsigned long long* cand) {
  hexel::launch_dependents();
  small_sm100_body<SmallTcgen05, M, N, K, STAGES, SmallEpi::F32Cand>(a_map, nullptr, nullptr, w_map, y, cand);
}

// The Hopper twins (sm_90a) of the four kernels above: the same arguments, tensor maps, grid and
// results, on SmallWgmmaTwin (SmallGemmSm100Twin::kThreads threads, SmallGemmSm100Twin::smem).
template <int M, int N, int K, int STAGES>
__global__ void __launch_bounds__(SmallGemmSm100Twin::kThreads, 1)
    gemm_small_sm100_twin_bf16(const TensorMap* a_map, const TensorMap* w_map, bf16* y) {
  hexel::launch_dependents();
  small_sm100_body<SmallWgmmaTwin, M, N, K, STAGES, SmallEpi::StoreBf16>(a_map, nullptr, nullptr, w_map, y, nullptr);
}

template <int M, int N, int K, int STAGES>
__global__ void __launch_bounds__(SmallGemmSm100Twin::kThreads, 1)
    gemm_small_sm100_twin_residual(const TensorMap* a_map, const TensorMap* w_map, float* x) {
  hexel::launch_dependents();
  small_sm100_body<SmallWgmmaTwin, M, N, K, STAGES, SmallEpi::Residual>(a_map, nullptr, nullptr, w_map, x, nullptr);
}

template <int M, int I, int K, int STAGES>
__global__ void __launch_bounds__(SmallGemmSm100Twin::kThreads, 1)
    gemm_small_sm100_twin_swiglu(const TensorMap* a_map, const TensorMap* w_map, bf16* act) {
  hexel::launch_dependents();
  small_sm100_body<SmallWgmmaTwin, M, I, K, STAGES, SmallEpi::SwiGlu>(a_map, nullptr, nullptr, w_map, act, nullptr);
}

template <int M, int N, int K, int STAGES>
__global__ void __launch_bounds__(SmallGemmSm100Twin::kThreads, 1)
    gemm_small_sm100_twin_f32cand(const TensorMap* a_map, const TensorMap* w_map, float* y,
                                  unsigned long long* cand) {
  hexel::launch_dependents();
  small_sm100_body<SmallWgmmaTwin, M, N, K, STAGES, SmallEpi::F32Cand>(a_map, nullptr, nullptr, w_map, y, cand);
}

// The norm forms (sm_100a): gemm_small_norm_bf16 and gemm_small_norm_swiglu on tcgen05, the
// RMSNorm of x's rows (x f32 [M, K], M <= 8; weights norm_w, epsilon EPS) computed in the kernel
// as the tokens, the W map and the outputs as gemm_small_sm100_bf16's and _swiglu's: the bits of
// rmsnorm into h, then gemm_small_sm100_bf16 or _swiglu on h.
template <int M, int N, int K, int STAGES, float EPS>
__global__ void __launch_bounds__(SmallGemmSm100::kThreads, 1)
    gemm_small_sm100_norm_bf16(const float* x, const float* norm_w, const TensorMap* w_map,
                               bf16* y) {
  hexel::launch_dependents();  // the waits are in the norm and the epilogue
  small_sm100_body<SmallTcgen05, M, N, K, STAGES, SmallEpi::StoreBf16, true, EPS>(
      nullptr, x, norm_w, w_map, y, nullptr);
}

template <int M, int I, int K, int STAGES, float EPS>
__global__ void __launch_bounds__(SmallGemmSm100::kThreads, 1)
    gemm_small_sm100_norm_swiglu(const float* x, const float* norm_w, const TensorMap* w_map,
                                 bf16* act) {
  hexel::launch_dependents();
  small_sm100_body<SmallTcgen05, M, I, K, STAGES, SmallEpi::SwiGlu, true, EPS>(
      nullptr, x, norm_w, w_map, act, nullptr);
}

// gemm_small_norm_qkv on tcgen05 (one-token buckets that fold the QKV epilogue): the norm form of
// the bf16 kernel into qkv (bf16 [M, (HQ + 2 HKV) D]), then the QKV epilogue run by the CTA that
// completes each head (small_sm100_norm_qkv_body), with gemm_small_norm_qkv's arguments. EPS is the
// model's RMSNorm epsilon, for the input norm and the QK norm alike; the template arguments after
// D are qkv_rope_append_rows's after its D, its KV last.
template <int M, int K, int STAGES, int HQ, int HKV, int D, bool BIAS, bool QK_NORM, float EPS,
          int PAGE, int MAXP, long long PAGE_ELEMS, class Rope, class KV = KvBf16>
__global__ void __launch_bounds__(SmallGemmSm100::kThreads, 1)
    gemm_small_sm100_norm_qkv(const float* x, const float* norm_w, const TensorMap* w_map,
                              bf16* qkv, const float* bias, const float* q_norm,
                              const float* k_norm, const int* positions, const int* token_seq,
                              const int* page_tables, typename KV::Elem* kv_layer, float* q_out,
                              unsigned* arrivals) {
  hexel::launch_dependents();
  small_sm100_norm_qkv_body<SmallTcgen05, M, K, STAGES, HQ, HKV, D, BIAS, QK_NORM, EPS, PAGE, MAXP,
                            PAGE_ELEMS, Rope, KV>(x, norm_w, w_map, qkv, bias, q_norm, k_norm,
                                                  positions, token_seq, page_tables, kv_layer,
                                                  q_out, arrivals);
}

// The Hopper twins (sm_90a) of the three norm forms: the same arguments, tensor maps, grid and
// results, on SmallWgmmaTwin (SmallGemmSm100Twin::kThreads threads; SmallGemmSm100Twin::smem with
// the resident tokens' bytes).
template <int M, int N, int K, int STAGES, float EPS>
__global__ void __launch_bounds__(SmallGemmSm100Twin::kThreads, 1)
    gemm_small_sm100_twin_norm_bf16(const float* x, const float* norm_w, const TensorMap* w_map,
                                    bf16* y) {
  hexel::launch_dependents();
  small_sm100_body<SmallWgmmaTwin, M, N, K, STAGES, SmallEpi::StoreBf16, true, EPS>(
      nullptr, x, norm_w, w_map, y, nullptr);
}

template <int M, int I, int K, int STAGES, float EPS>
__global__ void __launch_bounds__(SmallGemmSm100Twin::kThreads, 1)
    gemm_small_sm100_twin_norm_swiglu(const float* x, const float* norm_w, const TensorMap* w_map,
                                      bf16* act) {
  hexel::launch_dependents();
  small_sm100_body<SmallWgmmaTwin, M, I, K, STAGES, SmallEpi::SwiGlu, true, EPS>(
      nullptr, x, norm_w, w_map, act, nullptr);
}

template <int M, int K, int STAGES, int HQ, int HKV, int D, bool BIAS, bool QK_NORM, float EPS,
          int PAGE, int MAXP, long long PAGE_ELEMS, class Rope, class KV = KvBf16>
__global__ void __launch_bounds__(SmallGemmSm100Twin::kThreads, 1)
    gemm_small_sm100_twin_norm_qkv(const float* x, const float* norm_w, const TensorMap* w_map,
                                   bf16* qkv, const float* bias, const float* q_norm,
                                   const float* k_norm, const int* positions, const int* token_seq,
                                   const int* page_tables, typename KV::Elem* kv_layer,
                                   float* q_out, unsigned* arrivals) {
  hexel::launch_dependents();
  small_sm100_norm_qkv_body<SmallWgmmaTwin, M, K, STAGES, HQ, HKV, D, BIAS, QK_NORM, EPS, PAGE,
                            MAXP, PAGE_ELEMS, Rope, KV>(x, norm_w, w_map, qkv, bias, q_norm,
                                                        k_norm, positions, token_seq, page_tables,
                                                        kv_layer, q_out, arrivals);
}

}  // namespace telos_kernels
#endif  // __CUDACC__
