#pragma once
// The one-token persistent decode layer on Blackwell (sm_100a): decode_layer_persistent
// (decode_persistent.cuh: its phases, its weight stream, its grid-wide counts, its attention half,
// all the same code) with its GEMM phases on tcgen05. Why tcgen05, with the weights as A, and not
// warp-level MMA (mma.sync), although a one-token step is bound by its bytes, not by the tensor
// cores: a token's row must get the same bits in every bucket, and on sm_100a every other bucket
// computes the layer's projections with gemm_small_sm100_* (gemm_small_sm100.cuh): tcgen05.mma
// kind::f16, the weights as A (128 rows a tile, one a Tensor Memory lane), the tokens as N, one
// chain over K in 16-wide steps in order from zero. mma.sync's m16n8k16 is another instruction,
// whose per-element sums need not round as tcgen05's do; the same chain of tcgen05.mma is the one
// way to the same bits. So each output element here is that chain: M 128, N 16 (the token and 15
// columns nobody reads: M 128 takes N 16 .. 256, and gemm_small_sm100 gives a one-token bucket the
// same N 16), the accumulate flag off at K step 0 only, and gemm_small_sm100's epilogue arithmetic.
//
// The atom (LayerTcgen05; decode_persistent.cuh's LayerWgmma says what an atom provides):
// - Tiles of 128 weight rows (the MMA's M; gate/up: 128 gate rows and their 128 up rows, two
//   chains into Tensor Memory columns 0 and 16, gemm_small_sm100's SwiGLU) in ring slots of 32 KB:
//   two 64-wide K blocks of a 128-row tile, or one of gate/up's 256 rows (LayerSm100). A tile's
//   rows are one CTA's (the bits allow no split of K), so a phase has N / 128 tiles: the 1B's o
//   and down 16, its qkv 24, its gate/up 64, on a grid of kSms CTAs; the stream's tile order (tile
//   g of the launch is CTA g mod the grid's) gives the CTAs without a tile in a phase the next
//   phases' weights to stream meanwhile, as on sm_90a.
// - The token is the MMA's B: the resident row that persistent_norm_a (RMSNorm with the rmsnorm
//   kernel's arithmetic: on sm_100a rmsnorm writes h with the same operations) or
//   persistent_load_a / persistent_poll_a wrote (chunk c at 16 c), read K-major without swizzle
//   (LayerSm100::token_desc); the weights are A, K-major in the ring's 128B swizzle, as
//   gemm_small_sm100 reads its stages.
// - The consumer warpgroup's thread 0 issues every MMA of a tile, releases each slot with
//   tcgen05.commit (one arrival: kEmptyArrivals) and hands the accumulator over with a last commit;
//   the 128 consumer threads then read it with tcgen05.ld (thread (warp, lane): weight row 32 warp
//   + lane, the Tensor Memory lane of that number, column 0 the token) and meet before the next
//   tile's MMAs overwrite it. Tensor Memory: 32 columns, allocated by warp 0 once per CTA before
//   the roles split (start), freed by it at the end (finish).
// - Epilogues: gemm_small_sm100's arithmetic per element (qkv: bf16; o and down: the residual's add
//   in L2; gate/up: act = bf16(EpilogueSwiGlu::act(g, u)), two lanes' halves in one word written
//   with a gpu-scope relaxed store, as down's persistent_poll_a needs); QKV_ROPE's tiles run
//   qkv_rope_pairs' operations on each thread's one element (qkv_rope_one), its rotation partner
//   four lanes over.
// So the layer's outputs (x, the K/V appended to the pages, q) are, bit for bit, what the sm_100a
// small-M rows of a one-token bucket give the token (rmsnorm, gemm_small_sm100_bf16,
// qkv_rope_append_rows, attn_split / attn_combine, gemm_small_sm100_residual, rmsnorm,
// gemm_small_sm100_swiglu, gemm_small_sm100_residual: the same MMA, M 128 and N 16, whose column 0
// depends on the token's row of B alone; the attention half is the code the split kernels run),
// and so what every larger bucket gives it wherever gemm_small_sm100's buckets agree with each
// other (its per-element result the same at every N). One word differs: gate/up's act word that
// would be 0xFFFFFFFF (two NaNs with every bit set) is stored as 0x7FFF7FFF, the persistent
// layer's pending mark (gemm_small.cuh's small_gemm_store), a NaN either way.
//
// The Hopper twin (LayerWgmmaTwin, decode_layer_persistent_sm100_twin, sm_90a): the same tiles,
// slots, kernel and epilogues; the consumer warpgroup issues wgmma m64n16k16 with the weights as A
// (two 64-row pieces a chain) and the resident token as B (the same descriptor fields), each warp
// releasing a slot once read, then puts its accumulators into a shared-memory image of Tensor
// Memory (row = lane, SmallGemmSm100Twin's cells) where each thread reads its row as tcgen05.ld
// would. On an H200 it checks everything but the atom, bit for bit against decode_layer_persistent
// and its MLP half against f64 and the gemm_small_sm100 twins
// (GpuKernels.DecodeLayerSm100TwinMatchesHopperLayerF64AndSmallTwins).
//
// The index math is host-callable (LayerSm100; test/codegen/layer_sm100_test checks it against
// hexel/tcgen05_model.h); the kernels compile under NVRTC for sm_100a (the layer) and sm_90a (the
// twin) only (test/codegen/lit/layer_sm100_assembly.test).
#include "gemm_small_sm100.cuh"
#include "hexel/tcgen05_accum.cuh"

namespace telos_kernels {

// The sm_100a layer's tiles, slots and index math.
struct LayerSm100 {
  enum : unsigned {
    kWeightRows = 128,  // a chain's rows: the MMA's M, one a Tensor Memory lane
    kN = 16,            // the MMA's N: the token in column 0
    kSlotRows = 256,    // a ring slot: rows of 128 bytes (a K block of 64 bf16)
    kSlotBytes = kSlotRows * 128,
    kTmemColumns = 32,  // the gate's (or only) chain in columns 0 .., SwiGLU's up from kN
  };
  // A tile of bn rows: 128 (one chain) or gate/up's 256 (two), K in whole slots of kSlotRows / bn
  // K blocks.
  static HEXEL_HOST_DEVICE constexpr bool tile_ok(int bn, int k) {
    return (bn == 128 || bn == 256) && k > 0 && k % (64 * (kSlotRows / bn)) == 0;
  }
  // The token's operand of K step kk of K block kb (the MMA's B, K-major, no swizzle): the resident
  // row at `a_base` (norm_rows.cuh's layout of one row: chunk c (eight bf16) at 16 c), so a core
  // matrix's rows are 16 bytes apart and K-adjacent core matrices too (LBO 16); rows 8 .. 15 read
  // rows 0 .. 7 again (SBO 0). Row 0 is the token; the other rows read later chunks and
  // persistent_norm_a's zero tail, into columns nobody reads. The same fields in wgmma's
  // descriptor (the twin).
  using Row = NormRows<1>;
  static HEXEL_HOST_DEVICE constexpr unsigned token_addr(unsigned a_base, unsigned kb,
                                                         unsigned kk) {
    return a_base + Row::step_offset(kb, kk);
  }
  static HEXEL_HOST_DEVICE constexpr hexel::tcgen05::SmemDesc token_desc(unsigned a_base,
                                                                         unsigned kb, unsigned kk) {
    return hexel::tcgen05::SmemDesc::make(token_addr(a_base, kb, kk), hexel::Swizzle::None,
                                          Row::kLbo, Row::kSbo);
  }
  // Chain c's weight rows of K block j of a slot at `slot` holding a tile of bn rows: the
  // producer's boxes (StreamCursor: K block j at j bn 128 bytes, gate/up's up rows 128 rows after
  // its gate rows), 1024-byte aligned in the 128B swizzle.
  static HEXEL_HOST_DEVICE constexpr unsigned weight_tile(unsigned slot, unsigned j, unsigned bn,
                                                          unsigned c) {
    return slot + j * bn * 128 + c * kWeightRows * 128;
  }
  // Thread (warp, lane) of the consumer warpgroup: its tile row (Tensor Memory lane) and the
  // accumulator columns of the token's chain c (0 the gate's or only one, 1 SwiGLU's up).
  static HEXEL_HOST_DEVICE constexpr unsigned row(unsigned warp, unsigned lane) {
    return 32 * (warp % 4) + lane;
  }
  static HEXEL_HOST_DEVICE constexpr unsigned token_col(unsigned c) { return c * kN; }
  // Its output element of tile t (gate/up: of act's columns).
  static HEXEL_HOST_DEVICE constexpr unsigned out_col(unsigned t, unsigned warp, unsigned lane) {
    return t * kWeightRows + row(warp, lane);
  }
  // QKV_ROPE: tile row r's rotation partner (the weights' pair order: each 8-row group is 4
  // elements of a head's first half, then their 4 partners of the second) and its entry of
  // qkv_rope_angle's table.
  static HEXEL_HOST_DEVICE constexpr unsigned rope_partner(unsigned r) { return r ^ 4u; }
  static HEXEL_HOST_DEVICE constexpr unsigned rope_entry(unsigned r) { return r / 8 * 4 + r % 4; }
  // The head's element that qkv row p (in the stored order) holds: the inverse of qkv_pair_pos.
  static HEXEL_HOST_DEVICE constexpr unsigned rope_element(unsigned p, unsigned d) {
    return p % 8 / 4 * (d / 2) + p % d / 8 * 4 + p % 4;
  }
  // The twin's image of Tensor Memory (SmallGemmSm100Twin's cells, kTmemColumns wide): where
  // thread (warp, lane) puts its registers d[c][h][4j + 2hh + e] (chain c, 64-row piece h) and
  // where it reads its row's columns.
  static HEXEL_HOST_DEVICE constexpr unsigned image_row(unsigned h, unsigned warp, unsigned lane,
                                                        unsigned hh) {
    return 64 * h + 16 * (warp % 4) + lane / 4 + 8 * hh;
  }
  static HEXEL_HOST_DEVICE constexpr unsigned image_bytes() {
    return SmallGemmSm100Twin::image_offset(kWeightRows, 0, kTmemColumns);
  }
};

}  // namespace telos_kernels

#if defined(__CUDACC__)
#include "decode_persistent.cuh"
#include "hexel/tcgen05.cuh"
#include "hexel/wgmma.cuh"

namespace telos_kernels {

// What both sm_100a atoms (Atom: LayerTcgen05, LayerWgmmaTwin) share: the slots, the tiles, and a
// tile's steps: Atom::mma (the K loop), Atom::load (this consumer thread's accumulator values: g
// the gate's or only chain, u SwiGLU's up; then the consumers meet, so that the next tile's MMAs
// find every read done), then the per-element epilogue (store; QKV_ROPE's qkv_rope_one).
template <class Atom>
struct LayerSm100Tiles {
  using S = LayerSm100;
  enum : unsigned { kSlotRows = S::kSlotRows, kSlotBytes = S::kSlotBytes };
  __host__ __device__ static constexpr bool tile_ok(int bn, int k) { return S::tile_ok(bn, k); }

  // Tile t's element of this thread into `out` (N columns): gemm_small_sm100's arithmetic; act
  // with gpu-scope relaxed word stores (persistent_poll_a reads whole words), the even lane
  // storing its pair.
  template <SmallEpi EPI>
  __device__ __forceinline__ static void store(float g, float u, unsigned t, unsigned N,
                                               void* out) {
    const unsigned warp = hexel::warp_index(), lane = threadIdx.x % 32;
    const unsigned n = S::out_col(t, warp, lane);
    if constexpr (EPI == SmallEpi::SwiGlu) {
      const float a = EpilogueSwiGlu::act(g, u);
      const float next = __shfl_down_sync(0xffffffffu, a, 1);
      if (lane % 2 == 0 && n < N) {
        const unsigned v = pack_bf16x2(a, next);
        hexel::st_relaxed_gpu(reinterpret_cast<unsigned*>(static_cast<bf16*>(out) + n),
                              v == kActPending ? 0x7fff7fffu : v);
      }
    } else if (n < N) {
      small_sm100_store<EPI>(g, 0.f, out, n);
    }
  }

  // QKV_ROPE: qkv_rope_pairs' operations on this thread's element of tile t (the projection,
  // rounded to bf16 and back; the bias; RoPE with the partner's element and (sin, cos) `sc` of its
  // pair index; q to q_out or k / v appended at `pos` to `page`).
  template <int HQ, int HKV, int D, bool BIAS, int PAGE, long long PAGE_ELEMS, unsigned BQ>
  __device__ __forceinline__ static void qkv_rope_one(float acc, unsigned t, int pos, int page,
                                                      const float* bias, bf16* kv_layer,
                                                      float* q_out, float2 sc) {
    static_assert(D % 32 == 0, "a warp's 32 rows in one head");
    const unsigned r = S::row(hexel::warp_index(), threadIdx.x % 32);
    const unsigned p = t * BQ + r;  // the row in the stored order
    const unsigned head = p / D, half = p % 8 / 4, n = S::rope_element(p, D);
    // The projection as gemm_small_sm100_bf16 stores it (cvt's rounding, NaN included).
    float v = __uint_as_float(static_cast<unsigned>(hexel::to_bf16(acc)) << 16);
    if constexpr (BIAS) v += bias[head * D + n];
    const float other = __shfl_xor_sync(0xffffffffu, v, S::rope_partner(0u));  // lane r ^ 4
    if (head < static_cast<unsigned>(HQ + HKV))
      v = half == 0 ? rope_first(v, other, sc.y, sc.x) : rope_second(other, v, sc.y, sc.x);
    if (head < static_cast<unsigned>(HQ)) {
      q_out[head * D + n] = v;
    } else if (pos >= 0) {
      const int kv = head < static_cast<unsigned>(HQ + HKV) ? 0 : 1;
      const int kvh = static_cast<int>(head) - HQ - kv * HKV;
      bf16* row = kv_layer + page * PAGE_ELEMS +
                  (static_cast<long long>(kv * HKV + kvh) * PAGE + pos % PAGE) * D;
      row[n] = f32_to_bf16(v);
    }
  }

  template <int M, unsigned BN, SmallEpi EPI, class Ring>
  __device__ __forceinline__ static void tile(Ring& ring, unsigned a_base, unsigned ring_base,
                                              unsigned full, unsigned empty, unsigned t, unsigned K,
                                              unsigned N, void* out) {
    static_assert(M == 1, "one token");
    static_assert(BN == (EPI == SmallEpi::SwiGlu ? 2u : 1u) * S::kWeightRows, "128-row chains");
    float g, u;
    Atom::template mma<BN>(ring, a_base, ring_base, full, empty, K);
    Atom::template load<BN>(ring, g, u);
    store<EPI>(g, u, t, N, out);
  }
  template <int HQ, int HKV, int D, bool BIAS, int PAGE, long long PAGE_ELEMS, class Rope,
            unsigned BQ, unsigned H, class Ring>
  __device__ __forceinline__ static void qkv_rope_tile(Ring& ring, unsigned a_base,
                                                       unsigned ring_base, unsigned full,
                                                       unsigned empty, unsigned tile, int pos,
                                                       int page, const float* bias, bf16* kv_layer,
                                                       float* q, float2*) {
    static_assert(BQ == S::kWeightRows, "128-row chains");
    const unsigned r = S::row(hexel::warp_index(), threadIdx.x % 32);
    const float2 sc = qkv_rope_angle<D, Rope, BQ>(tile, S::rope_entry(r), pos);
    float g, u;
    Atom::template mma<BQ>(ring, a_base, ring_base, full, empty, H);
    Atom::template load<BQ>(ring, g, u);
    qkv_rope_one<HQ, HKV, D, BIAS, PAGE, PAGE_ELEMS, BQ>(g, tile, pos, page, bias, kv_layer, q, sc);
  }
};

// The sm_100a atom: the accumulator in Tensor Memory. Ring: the stage ring, the accumulator's
// address, its barrier and that barrier's phase.
struct LayerTcgen05 : LayerSm100Tiles<LayerTcgen05> {
  using Accum = hexel::tcgen05::Bf16Accum<LayerSm100::kN>;
  enum : unsigned { kEmptyArrivals = 1 };  // the MMA thread's tcgen05.commit
  template <unsigned STAGES>
  struct Ring : hexel::mbarrier::StageRing<STAGES> {
    unsigned tmem = 0, accum = 0, accum_phase = 0;
  };

  // Every thread, after the barriers' initialisation: warp 0 allocates the columns, thread 0
  // initialises the accumulator's barrier (one arrival: the last commit of a tile). PTX:
  // tcgen05.alloc, tcgen05.relinquish_alloc_permit, tcgen05.fence.
  template <unsigned STAGES, class Sm>
  __device__ __forceinline__ static void start(Ring<STAGES>& ring, const Sm&) {
    using namespace hexel;
    __shared__ unsigned tmem_slot;
    __shared__ unsigned long long accum_bar;
    if (warp_index() == 0) {
      tcgen05::alloc(smem_addr(&tmem_slot), S::kTmemColumns);
      tcgen05::relinquish_alloc_permit();
    }
    if (threadIdx.x == 0) {
      mbarrier::init(smem_addr(&accum_bar), 1);
      mbarrier::fence_init();
    }
    tcgen05::fence_before_thread_sync();
    __syncthreads();
    tcgen05::fence_after_thread_sync();
    ring.tmem = tmem_slot;
    ring.accum = smem_addr(&accum_bar);
  }
  // The consumers, at the end (every tcgen05.ld has completed: load()'s wait): warp 0 frees the
  // columns. PTX: tcgen05.dealloc.
  template <unsigned STAGES>
  __device__ __forceinline__ static void finish(const Ring<STAGES>& ring) {
    using namespace hexel;
    tcgen05::fence_before_thread_sync();
    named_barrier_sync(1, 128);
    if (warp_index() == 0) {
      tcgen05::fence_after_thread_sync();
      tcgen05::dealloc(ring.tmem, S::kTmemColumns);
    }
  }

  // A tile's K loop: thread 0 waits for each slot, issues its MMAs (per K block, each chain's four
  // K = 16 steps: gemm_small_sm100's order) and commits the slot to its empty barrier, then commits
  // the accumulator; the other consumer threads only follow the ring. PTX: tcgen05.mma,
  // tcgen05.commit, tcgen05.fence::after_thread_sync.
  template <unsigned BN, unsigned STAGES>
  __device__ __forceinline__ static void mma(Ring<STAGES>& ring, unsigned a_base,
                                             unsigned ring_base, unsigned full, unsigned empty,
                                             unsigned K) {
    using namespace hexel;
    constexpr unsigned kChains = BN / S::kWeightRows, kBlocksPerSlot = S::kSlotRows / BN;
    const unsigned slots = K / 64 / kBlocksPerSlot;
    if (threadIdx.x != 0) {
      for (unsigned sl = 0; sl < slots; ++sl) ring.advance();
      return;
    }
    for (unsigned sl = 0; sl < slots; ++sl) {
      mbarrier::wait_parity(full + 8 * ring.index, ring.phase);
      tcgen05::fence_after_thread_sync();
      const unsigned slot = ring_base + ring.index * S::kSlotBytes;
#pragma unroll
      for (unsigned j = 0; j < kBlocksPerSlot; ++j) {
        const unsigned kb = sl * kBlocksPerSlot + j;
#pragma unroll
        for (unsigned c = 0; c < kChains; ++c)
#pragma unroll
          for (unsigned kk = 0; kk < 4; ++kk)
            tcgen05::mma<tcgen05::Kind::F16>(
                ring.tmem + S::token_col(c),
                Accum::operand_desc(S::weight_tile(slot, j, BN, c), kk),
                S::token_desc(a_base, kb, kk), Accum::kInstrDesc, kb > 0 || kk > 0);
      }
      tcgen05::commit(empty + 8 * ring.index);
      ring.advance();
    }
    tcgen05::commit(ring.accum);
  }
  // Once the accumulator is complete: this thread's row of each chain. PTX: tcgen05.ld,
  // tcgen05.wait::ld.
  template <unsigned BN, unsigned STAGES>
  __device__ __forceinline__ static void load(Ring<STAGES>& ring, float& g, float& u) {
    using namespace hexel;
    const unsigned warp = warp_index();
    mbarrier::wait_parity(ring.accum, ring.accum_phase);
    ring.accum_phase ^= 1u;
    tcgen05::fence_after_thread_sync();
    __syncwarp();  // warp 0 whole again after its thread 0's K loop: tcgen05.ld is .sync.aligned
    uint32_t vg[1], vu[1] = {0u};
    tcgen05::ld_32x32b(vg, Accum::ld_taddr(ring.tmem, warp, S::token_col(0)));
    if constexpr (BN > S::kWeightRows)
      tcgen05::ld_32x32b(vu, Accum::ld_taddr(ring.tmem, warp, S::token_col(1)));
    tcgen05::wait_ld();
    g = __uint_as_float(vg[0]);
    u = __uint_as_float(vu[0]);
    tcgen05::fence_before_thread_sync();
    named_barrier_sync(1, 128);
  }
};

// The sm_90a twin's atom: the accumulators in the consumer warpgroup's registers (each chain as two
// 64-row pieces of wgmma m64n16k16, the weights as A, the token as B), then in the image of Tensor
// Memory in static shared memory (LayerSm100::image_row, SmallGemmSm100Twin's cells). Ring: the
// stage ring and the image's address.
struct LayerWgmmaTwin : LayerSm100Tiles<LayerWgmmaTwin> {
  using T = SmallGemmSm100Twin;
  enum : unsigned { kEmptyArrivals = 4 };  // each consumer warp's first lane
  template <unsigned STAGES>
  struct Ring : hexel::mbarrier::StageRing<STAGES> {
    float* image = nullptr;
  };
  template <unsigned STAGES, class Sm>
  __device__ __forceinline__ static void start(Ring<STAGES>& ring, const Sm&) {
    __shared__ alignas(16) float image[S::image_bytes() / 4];
    ring.image = image;
  }
  template <unsigned STAGES>
  __device__ __forceinline__ static void finish(const Ring<STAGES>&) {}

  // The warpgroup's K loop over the tile's slots (layer_gemm_tile_mma's discipline: one group in
  // flight, each warp releasing the previous slot), then its accumulators into the image. PTX:
  // wgmma.fence, wgmma.mma_async, wgmma.commit_group, wgmma.wait_group.
  template <unsigned BN, unsigned STAGES>
  __device__ __forceinline__ static void mma(Ring<STAGES>& ring, unsigned a_base,
                                             unsigned ring_base, unsigned full, unsigned empty,
                                             unsigned K) {
    using namespace hexel;
    constexpr unsigned kChains = BN / S::kWeightRows, kBlocksPerSlot = S::kSlotRows / BN;
    const unsigned warp = warp_index(), lane = threadIdx.x % 32;
    const unsigned slots = K / 64 / kBlocksPerSlot;
    float d[kChains][2][S::kN / 2];
    unsigned prev = 0;
    for (unsigned sl = 0; sl < slots; ++sl) {
      mbarrier::wait_parity(full + 8 * ring.index, ring.phase);
      const unsigned slot = ring_base + ring.index * S::kSlotBytes;
      wgmma::fence();
#pragma unroll
      for (unsigned j = 0; j < kBlocksPerSlot; ++j) {
        const unsigned kb = sl * kBlocksPerSlot + j;
#pragma unroll
        for (unsigned c = 0; c < kChains; ++c)
#pragma unroll
          for (unsigned h = 0; h < 2; ++h)
#pragma unroll
            for (unsigned kk = 0; kk < 4; ++kk) {
              const auto a =
                  wgmma::kmajor_desc(S::weight_tile(slot, j, BN, c) + h * 64 * 128, Swizzle::B128)
                      .advanced(32 * kk);
              const auto b = wgmma::SmemDesc::make(S::token_addr(a_base, kb, kk), Swizzle::None,
                                                   S::Row::kLbo, S::Row::kSbo);
              wgmma::mma_ss<S::kN>(d[c][h], a, b, kb > 0 || kk > 0);
            }
      }
      wgmma::commit_group();
      wgmma::wait_group<1>();
      if (sl > 0 && lane == 0) mbarrier::arrive(empty + 8 * prev);
      prev = ring.index;
      ring.advance();
    }
    wgmma::wait_group<0>();
#pragma unroll
    for (unsigned c = 0; c < kChains; ++c)
#pragma unroll
      for (unsigned h = 0; h < 2; ++h) wgmma::fence_operand(d[c][h]);
    if (lane == 0) mbarrier::arrive(empty + 8 * prev);
#pragma unroll
    for (unsigned c = 0; c < kChains; ++c)
#pragma unroll
      for (unsigned h = 0; h < 2; ++h)
#pragma unroll
        for (unsigned j = 0; j < S::kN / 8; ++j)
#pragma unroll
          for (unsigned hh = 0; hh < 2; ++hh) {
            const unsigned at = T::image_offset(S::image_row(h, warp, lane, hh),
                                                T::image_col(c, S::kN, j, lane), S::kTmemColumns);
            *reinterpret_cast<float2*>(ring.image + at / 4) =
                make_float2(d[c][h][4 * j + 2 * hh], d[c][h][4 * j + 2 * hh + 1]);
          }
  }
  // Once every thread has written its cells: this thread's row of each chain, where tcgen05.ld
  // would read it.
  template <unsigned BN, unsigned STAGES>
  __device__ __forceinline__ static void load(Ring<STAGES>& ring, float& g, float& u) {
    const unsigned row = S::row(hexel::warp_index(), threadIdx.x % 32);
    hexel::named_barrier_sync(1, 128);
    g = ring.image[T::image_offset(row, S::token_col(0), S::kTmemColumns) / 4];
    u = BN > S::kWeightRows ? ring.image[T::image_offset(row, S::token_col(1), S::kTmemColumns) / 4]
                            : 0.f;
    hexel::named_barrier_sync(1, 128);
  }
};

// The layer on sm_100a: decode_layer_persistent's template arguments and arguments (its tiling:
// kernel_plan.hpp, decode_layer_sm100_tiling), the GEMM phases on LayerTcgen05.
template <int H, int HQ, int HKV, int D, bool BIAS, bool QK_NORM, float EPS, int PAGE, int MAXP,
          long long PAGE_ELEMS, class Rope, int SPLIT, int NSPLIT, float SCALE_LOG2, int I,
          int STAGES, int BQ, int BO, int BG, int BD, bool QKV_ROPE, unsigned BULK>
__global__ void __launch_bounds__(LayerGemms::kThreads, 1)
    decode_layer_persistent_sm100(const void* qkv_w, const void* o_w, const void* gu_w,
                                  const void* down_w, const float* attn_norm, const float* mlp_norm,
                                  const float* bias, const float* q_norm, const float* k_norm,
                                  const int* positions, const int* token_seq,
                                  const int* page_tables, bf16* kv_layer, float* x, bf16* qkv,
                                  float* q, float* part_o, float* part_ml, bf16* attn, bf16* act,
                                  unsigned* sync) {
  decode_layer_body<H, HQ, HKV, D, BIAS, QK_NORM, EPS, PAGE, MAXP, PAGE_ELEMS, Rope, SPLIT, NSPLIT,
                    SCALE_LOG2, I, STAGES, BQ, BO, BG, BD, QKV_ROPE, BULK, 0, Bf16Weight,
                    Bf16Weight, Bf16Weight, Bf16Weight, LayerTcgen05>(
      qkv_w, o_w, gu_w, down_w, nullptr, nullptr, nullptr, nullptr, attn_norm, mlp_norm, bias,
      q_norm, k_norm, positions, token_seq, page_tables, kv_layer, x, qkv, q, part_o, part_ml, attn,
      act, sync);
}

// Its Hopper twin (sm_90a): the same arguments, tiles, grid and results, on LayerWgmmaTwin; its
// static shared memory holds the image too (LayerSm100::image_bytes), so its ring may have fewer
// slots than the sm_100a plan's (kernel_plan.hpp, decode_layer_sm100_twin_tiling).
template <int H, int HQ, int HKV, int D, bool BIAS, bool QK_NORM, float EPS, int PAGE, int MAXP,
          long long PAGE_ELEMS, class Rope, int SPLIT, int NSPLIT, float SCALE_LOG2, int I,
          int STAGES, int BQ, int BO, int BG, int BD, bool QKV_ROPE, unsigned BULK>
__global__ void __launch_bounds__(LayerGemms::kThreads, 1)
    decode_layer_persistent_sm100_twin(const void* qkv_w, const void* o_w, const void* gu_w,
                                       const void* down_w, const float* attn_norm,
                                       const float* mlp_norm, const float* bias,
                                       const float* q_norm, const float* k_norm,
                                       const int* positions, const int* token_seq,
                                       const int* page_tables, bf16* kv_layer, float* x, bf16* qkv,
                                       float* q, float* part_o, float* part_ml, bf16* attn,
                                       bf16* act, unsigned* sync) {
  decode_layer_body<H, HQ, HKV, D, BIAS, QK_NORM, EPS, PAGE, MAXP, PAGE_ELEMS, Rope, SPLIT, NSPLIT,
                    SCALE_LOG2, I, STAGES, BQ, BO, BG, BD, QKV_ROPE, BULK, 0, Bf16Weight,
                    Bf16Weight, Bf16Weight, Bf16Weight, LayerWgmmaTwin>(
      qkv_w, o_w, gu_w, down_w, nullptr, nullptr, nullptr, nullptr, attn_norm, mlp_norm, bias,
      q_norm, k_norm, positions, token_seq, page_tables, kv_layer, x, qkv, q, part_o, part_ml, attn,
      act, sync);
}

}  // namespace telos_kernels
#endif  // __CUDACC__
