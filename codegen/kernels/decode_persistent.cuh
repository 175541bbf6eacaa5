#pragma once
// Persistent decode kernels (a decode step's launches each pay a boundary of several µs in which
// the weight stream stops: docs/performance.md). One CTA per SM; its producer warp
// streams the weight boxes of all its tiles, phase after phase, through one ring of shared memory
// without ever waiting for activations; its consumer warpgroup waits at each phase for a grid-wide
// count (every CTA has finished the previous phase's stores), loads the phase's activations into a
// resident A and runs its tiles or work items. So the memory system keeps streaming across the
// phase boundaries, which a kernel boundary cannot (the ring drains while the grid completes and
// the next one starts).
// decode_layer_persistent is a whole one-token decode layer (the plan's decode buckets of
// kDecodeLayerPersistentMaxRows tokens): its attention half's phases and then MlpPhases.
//
// Bits: every output element is the same wgmma m64nNk16 chain over K, in 64-element blocks in
// order from zero, as gemm_small_* computes it (the per-element result does not depend on the
// instruction's N), with the interleaved resident A of the norm prologue (gemm_small.cuh) and the
// same epilogue arithmetic; gpu_kernels_test compares them bit for bit.
//
// The GEMM phases' MMA atom and accumulator access are a policy (Atom: the slots, the tiles, the
// K loop and its epilogues; LayerWgmma below says what an atom provides), so that one body of code
// runs every phase: LayerWgmma (sm_90a, the kernels here), LayerTcgen05 (sm_100a,
// decode_layer_sm100.cuh: tcgen05 with the weights as A, the chain gemm_small_sm100 runs) and
// LayerW8a8 (sm_90a, decode_layer_w8a8.cuh: e4m3 weights and activations, gemm_prefill_w8a8's
// chain; what else it needs of the body is LayerAtomInput's). The tiles and slots below are
// LayerWgmma's.
//
// Tiles: BN weight rows per phase (BQ, BO, BG, BD: multiples of 8 (of 16 for gate/up, whose tiles
// are BG / 2 gate and BG / 2 up rows) up to 64); a ring slot is up to 8 KB, 64 / BN whole K blocks
// of a tile (a K block of a BN-row tile is BN · 128 bytes: 6 KB of a slot at 48 rows, two blocks of
// 3 KB at 24). Tile g
// of the whole launch (layers, then phases, then tiles in order) belongs to CTA g mod gridDim.x,
// so every CTA streams about as many bytes as any other over a layer, and a CTA with no tile in a
// phase streams its next phase's weights meanwhile.
//
// e4m3 weights (decode_layer_persistent_e4m3; docs/fp8.md): the producer streams each weight's
// e4m3 bytes (its map as gemm_e4m3.cuh's: 64-byte box rows, no swizzle) into a raw ring, and four
// converter warps after the consumers (the producer is the first one's lane 0) turn each raw slot
// into the ring slot of W' = bf16(float(q) · s) a bf16 stream would have filled, with
// gemm_e4m3.cuh's conversion, fence and barrier discipline (persistent_convert_phase). The
// consumers' code is then the bf16 layer's unchanged, so the outputs are its bits on W' and
// gemm_small_e4m3_*'s. A raw slot holds the same K blocks of a tile as a ring slot in half the
// bytes (4 KB): the tiles (persistent_tile_ok), the stream's order and the consumers' K loop stay
// the bf16 layer's, where a raw slot of twice the K blocks would need K in whole pairs of slots and
// the consumers to split a slot. The raw ring is the deep one (a raw slot is free once converted,
// so it holds the bytes in flight from DRAM; kernel_plan's decode_layer_tiling sizes both rings);
// the ring of bf16 slots only lets the converters run a few slots ahead of the consumers. The
// converters are warps of their own rather than the consumer warpgroup: the consumers spend the
// attention half and every grid-wide wait away from the weights, time in which the converters work
// ahead, where a conversion by the consumers would sit on every tile's critical path; and eight
// warps keep the 255 registers a thread the consumers' attention needs (a ninth, a producer warp of
// its own, would cap them at 65536 / 288 and spill).
//
// Grid-wide count (sync[0], zero at launch): a CTA's consumers add 1 when they have finished a
// phase's stores (a fence first), after having waited for the phase to start (count >= phase ·
// gridDim.x), so the count only reaches p · gridDim.x when every CTA has finished phases < p. The
// last CTA to finish (sync[1]) returns both to zero for the next launch. Every CTA must be resident
// at once: one CTA per SM (the shared memory takes more than half an SM) and gridDim.x <= SMs.
#include "attention.cuh"
#include "gemm_small.cuh"
#include "hexel/memory_order.cuh"
#include "hexel/timer.cuh"

namespace telos_kernels {

struct LayerGemms {
  static constexpr unsigned kSlotBytes = 8192;
  static constexpr unsigned kThreads = 128 + 32;
};
// decode_layer_persistent_e4m3's raw ring and converter warps (see the top of this file).
// Enumerators, which NVRTC does not emit as globals of the module (gemm_prefill_shape.cuh).
struct LayerE4m3 {
  enum : unsigned {
    kRawSlotBytes = 4096,  // a bf16 slot's K blocks at 64 bytes a row
    kConverterWarps = SmallGemm::kConverters / 32,
    kThreads = 128 + SmallGemm::kConverters,  // the consumers, the converters (and producer)
  };
};

// A tile of BN weight rows in the ring: whole 8-row groups (1 KB a K block, the 128-byte swizzle's
// unit), at most a slot a K block, and K in whole slots of 64 / BN K blocks.
__host__ __device__ constexpr bool persistent_tile_ok(int bn, int k) {
  return bn % 8 == 0 && bn >= 8 && bn <= 64 && k % (64 * (64 / bn)) == 0;
}

// One tile of a persistent GEMM phase: BN weight rows, the K blocks in order, each its four k16
// steps (wgmma_k_loop's sequence, gemm_prefill.cuh), from the ring's slots (64 / BN K blocks each)
// and the resident interleaved A at `a_base`; then gemm_small_body's epilogue for output columns
// t · kOutCols ...
// layer_gemm_tile_mma is the tile's K loop alone, its accumulators left in d (wgmma's layout).
template <int M, unsigned BN, unsigned STAGES>
__device__ __forceinline__ void layer_gemm_tile_mma(hexel::mbarrier::StageRing<STAGES>& ring, unsigned a_base,
                                                    unsigned ring_base, unsigned full, unsigned empty,
                                                    unsigned K, float (&d)[BN / 2]) {
  using namespace hexel;
  constexpr unsigned kALbo = M * 16;
  constexpr unsigned kBlocksPerSlot = 64 / BN;  // whole K blocks of BN · 128 bytes in the 8 KB slot
  const unsigned lane = threadIdx.x % 32;
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
      const auto b = wgmma::kmajor_desc(slot + j * BN * 128, Swizzle::B128);
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
}
// layer_gemm_tile_store is the tile's epilogue from its accumulators d (wgmma's layout), by the
// consumer warp `warp` (hexel::warp_index, taken before the tile's K loop) and its lane.
template <int M, unsigned BN, SmallEpi EPI>
__device__ __forceinline__ void layer_gemm_tile_store(const float (&d)[BN / 2], unsigned t,
                                                      unsigned N, void* out, unsigned warp,
                                                      unsigned lane) {
  constexpr unsigned kOutCols = EPI == SmallEpi::SwiGlu ? BN / 2 : BN;
#pragma unroll
  for (unsigned hh = 0; hh < 2; ++hh) {
    const unsigned m = 16 * warp + lane / 4 + 8 * hh;
    if (m >= static_cast<unsigned>(M)) continue;
#pragma unroll
    for (unsigned j = 0; j < kOutCols / 8; ++j) {
      const unsigned n = t * kOutCols + 8 * j + 2 * (lane % 4);
      small_gemm_store<EPI, BN, true>(d, hh, j, out, static_cast<long long>(m) * N + n);
    }
  }
}
template <int M, unsigned BN, SmallEpi EPI, unsigned STAGES>
__device__ __forceinline__ void layer_gemm_tile(hexel::mbarrier::StageRing<STAGES>& ring,
                                                unsigned a_base, unsigned ring_base, unsigned full,
                                                unsigned empty, unsigned t, unsigned K, unsigned N,
                                                void* out) {
  const unsigned warp = hexel::warp_index(), lane = threadIdx.x % 32;
  float d[BN / 2];
  layer_gemm_tile_mma<M, BN>(ring, a_base, ring_base, full, empty, K, d);
  layer_gemm_tile_store<M, BN, EPI>(d, t, N, out, warp, lane);
}

struct LayerWgmma;

// The shared memory an MMA atom keeps beside the resident A, between it and the ring, in whole KBs
// (the ring's slots stay 1024-aligned for the 128B swizzle): none, unless the atom says (the W8A8
// atom's e4m3 row: decode_layer_w8a8.cuh). Enumerators, which NVRTC does not emit as globals of
// the module (gemm_prefill_shape.cuh).
template <class Atom>
struct AtomResidentBytes {
  enum : unsigned { value = 0 };
};

// The setup every persistent kernel here shares: shared memory (the resident A of K_MAX columns,
// the atom's own resident bytes (AtomResidentBytes, at atom_base), then the ring of STAGES slots of
// the MMA atom's (LayerWgmma: 8 KB) and their full / empty barriers, an empty barrier completing on
// the atom's arrivals), initialised barriers. With
// e4m3 weights (RAW_STAGES > 0, decode_layer_persistent_e4m3) the raw ring's RAW_STAGES slots of
// LayerE4m3::kRawSlotBytes follow the ring's, and their raw_full / raw_empty barriers the ring's;
// the converter warps then fill the ring of STAGES slots (their arrivals, not the producer's).
template <int M, int K_MAX, int STAGES, int RAW_STAGES = 0, class Atom = LayerWgmma>
struct PersistentSmem {
  static constexpr unsigned kAResident = (K_MAX / 8 * M * 16 + 128 + 1023) / 1024 * 1024;
  enum : unsigned { kAtomResident = AtomResidentBytes<Atom>::value };
  static_assert(kAtomResident % 1024 == 0, "the ring's slots 1024-aligned");
  static constexpr unsigned kBytes = 1024 + kAResident + kAtomResident +
                                     STAGES * (Atom::kSlotBytes + 16) +
                                     RAW_STAGES * (LayerE4m3::kRawSlotBytes + 16);
  unsigned base, atom_base, ring_base, full, empty;
  unsigned raw_base, raw_full, raw_empty;  // with RAW_STAGES > 0
  __device__ explicit PersistentSmem(unsigned char* raw) {
    base = (hexel::smem_addr(raw) + 1023u) & ~1023u;
    atom_base = base + kAResident;
    ring_base = atom_base + kAtomResident;
    raw_base = ring_base + STAGES * Atom::kSlotBytes;
    full = raw_base + RAW_STAGES * LayerE4m3::kRawSlotBytes;
    empty = full + STAGES * 8;
    raw_full = empty + STAGES * 8;
    raw_empty = raw_full + RAW_STAGES * 8;
    if (threadIdx.x == 0) {
      for (unsigned s = 0; s < STAGES; ++s) {
        hexel::mbarrier::init(full + 8 * s, 1);  // the producer's, or the slot's converter warp's
        hexel::mbarrier::init(empty + 8 * s, Atom::kEmptyArrivals);
      }
      for (unsigned s = 0; s < RAW_STAGES; ++s) {
        hexel::mbarrier::init(raw_full + 8 * s, 1);  // the producer's, with its bytes
        hexel::mbarrier::init(raw_empty + 8 * s, 1);  // the slot's converter warp's
      }
      hexel::mbarrier::fence_init();
    }
    __syncthreads();
  }
};

// This CTA's first tile of a phase whose tiles start at global index g0 (tile g is CTA g mod G's).
__device__ __forceinline__ unsigned persistent_first_tile(unsigned g0) {
  return (blockIdx.x + gridDim.x - g0 % gridDim.x) % gridDim.x;
}

// One phase of a producer's weight stream: `tiles` tiles of `bn` rows of `map` (rows t · bn ..), or
// with `up_row` > 0 (SwiGLU) bn / 2 gate rows t · bn / 2 .. and the up rows up_row + t · bn / 2 ..;
// K in slots of SLOT_ROWS / bn K blocks (StreamCursor); its first tile has the launch's global tile
// index g0. (An
// aggregate without member initializers: phases live in __shared__ arrays.)
struct StreamPhase {
  const TensorMap* map;
  unsigned k, bn, tiles, up_row, g0;
  // Instead of `map`: the weight's slot image (pack_slot_image's layout: slot sl of tile t is
  // slot_bytes() contiguous bytes at (t · slots + sl) · slot_bytes(), already in the ring's
  // swizzled layout), one plain bulk copy a slot.
  const char* image;
};

// A position in one CTA's sequence of ring slots over a list of phases (in shared memory, so
// that a runtime phase index needs no local memory): phase p, tile t, slot sl of the tile. The
// current phase's fields live in registers: the producer is one thread issuing a slot's boxes
// back to back, and a shared-memory load per box (the TMA's asm clobbers memory, so nothing read
// from memory survives it) would make it slower than DRAM.
// COL_ELEMS: a box row's columns in the map's elements (64 bf16 columns, or 128 e4m3 bytes for the
// W8A8 layer, whose phases count K / 2: LayerAtomInput::kStreamKDiv).
template <unsigned ROW_BYTES = 128, unsigned SLOT_ROWS = 64, unsigned COL_ELEMS = 64>
class StreamCursor {
 public:
  __device__ __forceinline__ StreamCursor(const StreamPhase* phases, int n) : ph_(phases), n_(n) { enter(0); }
  __device__ __forceinline__ bool valid() const { return p_ < n_; }
  __device__ __forceinline__ void next() {
    if (++sl_ == slots_) {
      sl_ = 0;
      t_ += gridDim.x;
      row_ += gridDim.x * (up_row_ > 0 ? bn_ / 2 : bn_);
      if (t_ >= tiles_) enter(p_ + 1);
    }
  }
  // The bytes of the current slot's boxes (per_slot K blocks of bn rows of ROW_BYTES).
  __device__ __forceinline__ unsigned slot_bytes() const { return per_slot_ * bn_ * ROW_BYTES; }
  // The current slot's bytes in the weight's slot image, or nullptr where it streams through a map.
  __device__ __forceinline__ const char* image_slot() const {
    if (!image_) return nullptr;
    return image_ + static_cast<unsigned long long>(t_ * slots_ + sl_) * slot_bytes();
  }
  // fn(byte offset in the slot, map, column, row) for every box of the current slot.
  template <class F>
  __device__ __forceinline__ void boxes(F&& fn) const {
    for (unsigned j = 0; j < per_slot_; ++j) {
      const unsigned col = (sl_ * per_slot_ + j) * COL_ELEMS, off = j * bn_ * ROW_BYTES;
      if (up_row_ > 0) {
        fn(off, map_, col, row_);
        fn(off + bn_ / 2 * ROW_BYTES, map_, col, up_row_ + row_);
      } else {
        fn(off, map_, col, row_);
      }
    }
  }

 private:
  // The first phase from p on in which this CTA has a tile, at that tile.
  __device__ __forceinline__ void enter(int p) {
    for (p_ = p; p_ < n_; ++p_) {
      const StreamPhase s = ph_[p_];
      map_ = s.map;
      bn_ = s.bn;
      tiles_ = s.tiles;
      up_row_ = s.up_row;
      image_ = s.image;
      per_slot_ = SLOT_ROWS / s.bn;
      slots_ = s.k / 64 / per_slot_;
      sl_ = 0;
      t_ = persistent_first_tile(s.g0);
      row_ = t_ * (up_row_ > 0 ? bn_ / 2 : bn_);
      if (t_ < tiles_) return;
    }
  }
  const StreamPhase* ph_;
  int n_, p_ = 0;
  const TensorMap* map_ = nullptr;
  unsigned bn_ = 0, tiles_ = 0, up_row_ = 0, per_slot_ = 0, slots_ = 0;
  unsigned t_ = 0, sl_ = 0, row_ = 0;  // tile, slot of the tile, first weight row of the tile
  const char* image_ = nullptr;
};

// Phase timeline, for telos-kernel-bench only (its module defines TELOS_PHASE_TRACE; an artifact's
// never does): the consumers' thread 0 of each CTA writes %globaltimer (ns) at the layer kernel's
// events to telos_phase_trace[slot][blockIdx.x][event]: 0 entry (taken before the dependency wait,
// written after it), 1 + 2p the start of phase p (its wait met), 2 + 2p its end (before the
// arrival), 16 + p its arrival issued (after the release), 23 its exit (before persistent_finish),
// and the producer's thread (128) its last load issued at 15 and, at 22, the time it waited for
// free ring slots (a duration: persistent_stream). Launch k (telos_trace_launches, which
// persistent_finish's last CTA advances) writes slot k % 2, so a layer and the one before it are
// on one clock (the boundary between them).
constexpr int kTraceEvents = 24, kTraceCtas = 256, kTraceProducerWaits = 22, kTraceExit = 23;
#ifdef TELOS_PHASE_TRACE
extern "C" {  // unmangled, for cudaLibraryGetGlobal
__device__ unsigned long long telos_phase_trace[2 * kTraceCtas * kTraceEvents];
__device__ unsigned telos_trace_launches;
}
__device__ __forceinline__ unsigned long long trace_clock() {
  return hexel::globaltimer();
}
__device__ __forceinline__ void phase_trace_at(int event, unsigned long long ns) {
  const unsigned slot = *static_cast<volatile unsigned*>(&telos_trace_launches) % 2;
  if (threadIdx.x % 128 == 0 && blockIdx.x < kTraceCtas)
    telos_phase_trace[(slot * kTraceCtas + blockIdx.x) * kTraceEvents + event] = ns;
}
__device__ __forceinline__ void phase_trace(int event) { phase_trace_at(event, trace_clock()); }
__device__ __forceinline__ void trace_launch_done() { ++telos_trace_launches; }
#else
__device__ __forceinline__ unsigned long long trace_clock() { return 0; }
__device__ __forceinline__ void phase_trace_at(int, unsigned long long) {}
__device__ __forceinline__ void phase_trace(int) {}
__device__ __forceinline__ void trace_launch_done() {}
#endif

// The TMA descriptors of `n` phases' maps, before their first load (tma::acquire_map).
__device__ __forceinline__ void persistent_acquire_maps(const StreamPhase* phases, int n) {
  for (int p = 0; p < n; ++p)
    if (phases[p].map) hexel::tma::acquire_map(phases[p].map);
}

// The current slot of a producer's stream (`load`) into the next slot of its ring (slots of
// SLOT_ROWS K-block rows of ROW_BYTES: 128 for bf16, the ring; 64 for e4m3, the raw ring): wait for
// the slot
// to be free, then its boxes (or its image's one bulk copy) behind its full barrier. Returns the ns
// it waited with TELOS_PHASE_TRACE, else 0.
template <unsigned STAGES, unsigned ROW_BYTES, unsigned SLOT_ROWS, unsigned COL_ELEMS>
__device__ __forceinline__ unsigned long long persistent_stream_slot(
    StreamCursor<ROW_BYTES, SLOT_ROWS, COL_ELEMS>& load, hexel::mbarrier::StageRing<STAGES>& ring,
    unsigned ring_base, unsigned full, unsigned empty) {
  using namespace hexel;
  static_assert(SLOT_ROWS * ROW_BYTES % 1024 == 0, "slots of whole 1024-byte swizzle repeats");
  const unsigned slot = ring_base + ring.index * SLOT_ROWS * ROW_BYTES, bar = full + 8 * ring.index;
  const unsigned long long t0 = trace_clock();
  mbarrier::wait_parity(empty + 8 * ring.index, ring.phase ^ 1u);
  const unsigned long long waited = trace_clock() - t0;
  mbarrier::arrive_expect_tx(bar, load.slot_bytes());
  if (const char* src = load.image_slot())
    tma::copy_g2s(slot, src, load.slot_bytes(), bar);
  else
    load.boxes([&](unsigned off, const TensorMap* map, unsigned c, unsigned r) {
      tma::load(slot + off, map, bar, c, r);
    });
  ring.advance();
  return waited;
}

// The producer's part of `n` phases (`phases` in shared memory): every K block of this CTA's
// tiles into the ring, in the order layer_gemm_tile consumes them. The producer never waits for
// activations, only for free slots. (An L2 prefetch running ahead of the ring, prefetching only
// while the ring is full, a cap on the loads in flight, holding the loads during the attention
// half and prefetching the next layer's QKV boxes all make the layer slower: docs/performance.md,
// tried and did not pay.)
// Returns the ns it waited for free slots with TELOS_PHASE_TRACE (the ring full: the consumers
// behind), else 0.
template <unsigned STAGES, unsigned SLOT_ROWS = 64, unsigned COL_ELEMS = 64>
__device__ __forceinline__ unsigned long long persistent_stream(
    hexel::mbarrier::StageRing<STAGES>& ring, unsigned ring_base, unsigned full, unsigned empty,
    const StreamPhase* phases, int n) {
  unsigned long long waited = 0;
  persistent_acquire_maps(phases, n);
  for (StreamCursor<128, SLOT_ROWS, COL_ELEMS> load(phases, n); load.valid(); load.next())
    waited += persistent_stream_slot(load, ring, ring_base, full, empty);
  return waited;
}

// Warps 4-7 of an e4m3 persistent kernel (decode_layer_persistent_e4m3): the converters of `n`
// phases (`phases` in shared memory, written by thread 128). Slot n of the stream (counted over
// the phases, `seq`) is converter warp n mod 4's alone, so four slots are converted at once, each
// by one warp with its whole slot's loads in flight (a slot shared by the four warps leaves each
// a few loads and the whole latency of its wait, conversion, fence and arrival a slot). Warp 4's
// lane 0 (thread 128) is also the producer: it fills the raw ring of RAW_STAGES slots at
// construction, then after each slot of its own (n) loads every slot up to n + RAW_STAGES into the
// raw slots that frees (persistent_stream_slot waits for their warps' releases; all belong to
// slots up to n), so at least RAW_STAGES - 4 raw slots stay in flight (why no producer warp of its
// own: the top of this file). The caller runs the phases' persistent_convert_phase in order, then
// finish().
template <unsigned RAW_STAGES>
class PersistentConverters {
  static_assert(RAW_STAGES >= 2 * LayerE4m3::kConverterWarps, "a raw slot in flight a warp");

 public:
  template <class S>
  __device__ __forceinline__ PersistentConverters(const S& sm, const StreamPhase* phases, int n)
      : load_(phases, threadIdx.x == 128 ? n : 0),
        base_(sm.raw_base),
        full_(sm.raw_full),
        empty_(sm.raw_empty) {
    if (threadIdx.x != 128) return;
    persistent_acquire_maps(phases, n);
    load_until(RAW_STAGES);
  }
  // Whether stream slot `seq` is this warp's to convert.
  __device__ __forceinline__ bool owns() const {
    return seq % LayerE4m3::kConverterWarps == hexel::warp_index() - 4;
  }
  // After this warp's slot `seq`: the producer's loads of the slots up to seq + RAW_STAGES (other
  // threads: none).
  __device__ __forceinline__ void loads_after_own_slot() {
    if (threadIdx.x == 128) load_until(seq + 1 + RAW_STAGES);
  }
  unsigned seq = 0;  // the stream slot the converters are at, over the phases
  hexel::mbarrier::StageRing<RAW_STAGES> raw;  // the converters' position in the raw ring
  // After the last phase: the producer's trace events (phase_trace).
  __device__ __forceinline__ void finish() const {
    if (threadIdx.x != 128) return;
    phase_trace_at(kTraceProducerWaits, waited_);
    phase_trace(15);
  }

 private:
  // The producer's next slots while fewer than `end` are loaded and the stream has more.
  __device__ __forceinline__ void load_until(unsigned end) {
    for (; loaded_ < end && load_.valid(); ++loaded_, load_.next())
      waited_ += persistent_stream_slot(load_, loads_, base_, full_, empty_);
  }
  StreamCursor<64> load_;
  hexel::mbarrier::StageRing<RAW_STAGES> loads_;  // the producer's
  unsigned base_, full_, empty_;
  unsigned loaded_ = 0;
  unsigned long long waited_ = 0;
};

// The converter warps' part of one phase (PersistentConverters): every raw slot of this CTA's tiles
// of the phase in the producer's order (StreamCursor's: tiles from persistent_first_tile(g0) in
// steps of gridDim.x, each tile's slots in K order, 64 / BN K blocks a slot) into the next slot of
// the ring, by the slot's warp: wait for the raw slot's bytes and for the slot's release by the
// consumers, write each K block's bf16 W' block where a bf16 stream's box would have landed
// (e4m3_block_to_bf16, with the weight's format WF and scales), e4m3_stage_converted (fence, the
// warp's arrival on the slot's full barrier), release the raw slot (after the warp's reads: the
// __syncwarp in e4m3_stage_converted), then the producer's loads. Every warp steps both rings
// past every slot. Tile row r is weight row tile · BN + r; with SPLIT (gate/up) the gate rows
// tile · BN / 2 + r, then their up rows `up_row` further.
template <class WF, unsigned BN, bool SPLIT, unsigned RAW_STAGES, unsigned STAGES, class S>
__device__ __forceinline__ void persistent_convert_phase(PersistentConverters<RAW_STAGES>& conv,
                                                         hexel::mbarrier::StageRing<STAGES>& ring,
                                                         const S& sm, unsigned k, unsigned tiles,
                                                         unsigned up_row, unsigned g0,
                                                         const float* scale) {
  using namespace hexel;
  constexpr unsigned kPerSlot = 64 / BN;
  const unsigned lane = threadIdx.x % 32;
  const unsigned slots = k / 64 / kPerSlot;
  auto& raw_ring = conv.raw;
  for (unsigned tile = persistent_first_tile(g0); tile < tiles; tile += gridDim.x) {
    const auto row_of = [&](unsigned r) {
      return SPLIT ? tile * BN / 2 + (r < BN / 2 ? r : up_row + r - BN / 2) : tile * BN + r;
    };
    for (unsigned sl = 0; sl < slots; ++sl, ++conv.seq, raw_ring.advance(), ring.advance()) {
      if (!conv.owns()) continue;
      mbarrier::wait_parity(sm.raw_full + 8 * raw_ring.index, raw_ring.phase);
      mbarrier::wait_parity(sm.empty + 8 * ring.index, ring.phase ^ 1u);
      const unsigned raw = sm.raw_base + raw_ring.index * LayerE4m3::kRawSlotBytes;
      const unsigned slot = sm.ring_base + ring.index * LayerGemms::kSlotBytes;
#pragma unroll
      for (unsigned j = 0; j < kPerSlot; ++j)
        e4m3_block_to_bf16<WF, BN, 32>(raw + j * BN * 64, slot + j * BN * 128, scale,
                                       sl * kPerSlot + j, lane, row_of);
      e4m3_stage_converted(sm.full + 8 * ring.index, lane);
      if (lane == 0) mbarrier::arrive(sm.raw_empty + 8 * raw_ring.index);
      conv.loads_after_own_slot();
    }
  }
}

// How a CTA's consumers meet the grid-wide count of finished phases (sync[0]; see the top of this
// file): wait until it reaches `target` (thread 0 polls with ld.acquire.gpu, then the 128 consumer
// threads meet), and add this CTA's count once its stores are done: the consumers meet, then
// thread 0 alone releases (fence.acq_rel.gpu; red.relaxed.gpu.global.add: no returned value to
// wait for). This is the shape of cooperative groups' grid sync (cooperative_groups/
// details/sync.h: bar.sync, then one thread's atom.add.release.gpu; ld.acquire.gpu polls, then
// bar.sync). Why one thread's fence covers the other 127 threads' stores, in the terms of the
// PTX ISA's Memory Consistency Model ("Ordering of memory operations"): bar.sync synchronizes
// the participating threads, so each thread's stores precede thread 0's fence in base causality
// order (program order, then synchronizes-with through the barrier, then program order); the
// fence.acq_rel + red.relaxed is a release pattern at gpu scope, and release patterns are
// cumulative: everything that precedes the fence in causality order, not only thread 0's own
// accesses, precedes the red, and so precedes, for the CTA whose acquire (ld.acquire.gpu)
// observes the count, everything after its own bar.sync. The same argument orders this CTA's
// reads of a phase before another CTA's writes in a later phase (x is read by gate/up's norm and
// written by down). After a GEMM phase a count costs several times what it costs where DRAM is
// idle (its release fence waits behind the next phase's weight stream; docs/performance.md has
// the other forms timed).
__device__ __forceinline__ void persistent_wait(const unsigned* sync, unsigned target) {
  if (threadIdx.x == 0) {
    unsigned seen;
    do {
      seen = hexel::ld_acquire_gpu(sync);
    } while (seen < target);
  }
  hexel::named_barrier_sync(1, 128);
}
// `phases`: how many phases this arrival ends (more than one where a CTA has no work in the later
// ones and no reason to wait between them).
__device__ __forceinline__ void persistent_arrive(unsigned* sync, unsigned phases = 1) {
  hexel::named_barrier_sync(1, 128);
  if (threadIdx.x == 0) hexel::red_add_release_gpu(sync, phases);
}

// The last CTA to finish returns the count (and its own counter, sync[1]) to zero for the next
// launch.
__device__ __forceinline__ void persistent_finish(unsigned* sync) {
  if (threadIdx.x == 0 && atomicAdd(&sync[1], 1u) == gridDim.x - 1) {
    sync[0] = 0;
    sync[1] = 0;
    trace_launch_done();
  }
}

// From the end of phase `p` to the start of phase p + 1: this CTA's arrival, then the wait for
// every CTA's (the count at (p + 1) · gridDim.x), traced as events 2 + 2p, 16 + p and 3 + 2p.
__device__ __forceinline__ void persistent_next_phase(unsigned* sync, unsigned p) {
  phase_trace(2 + 2 * p);
  persistent_arrive(sync);
  phase_trace(16 + p);
  persistent_wait(sync, (p + 1) * gridDim.x);
  phase_trace(3 + 2 * p);
}

// M rows of a bf16 [M, K] A from global memory (L2: other CTAs wrote it in this launch) into the
// resident interleaved layout (gemm_small.cuh: a_store_chunk, a_finish).
template <int M>
__device__ __forceinline__ void persistent_load_a(unsigned base, const bf16* a, unsigned K) {
  for (unsigned c = threadIdx.x; c < K / 8; c += 128)
#pragma unroll
    for (int r = 0; r < M; ++r)
      a_store_chunk<M>(base, c, r, __ldcg(reinterpret_cast<const uint4*>(a + static_cast<long long>(r) * K) + c));
  a_finish<M>(base, K / 8, threadIdx.x);
}

// This thread's 16-byte chunks tid, tid + 128, ... of the CHUNKS at `words` into v, by gpu-scope
// relaxed loads: all of them first, then again those where pending(v[i], chunk) holds, until none
// does (persistent_poll_a's and the W8A8 layer's act).
template <unsigned CHUNKS, class Pending>
__device__ __forceinline__ void persistent_poll_chunks(uint4 (&v)[(CHUNKS + 127) / 128],
                                                       const unsigned* words, Pending pending) {
  constexpr unsigned kPer = (CHUNKS + 127) / 128;
  const unsigned tid = threadIdx.x;
#pragma unroll
  for (unsigned i = 0; i < kPer; ++i)
    if (tid + 128 * i < CHUNKS) v[i] = hexel::ld_relaxed_gpu_v4(words + 4 * (tid + 128 * i));
  for (bool again = true; again;) {
    again = false;
#pragma unroll
    for (unsigned i = 0; i < kPer; ++i) {
      const unsigned c = tid + 128 * i;
      if (c < CHUNKS && pending(v[i], c)) {
        v[i] = hexel::ld_relaxed_gpu_v4(words + 4 * c);
        again = true;
      }
    }
  }
}

// act without a grid-wide count: decode_layer_persistent's down phase reads act as
// persistent_load_a reads A, but act carries its own readiness. Every word of it is kActPending
// (gemm_small.cuh) from before the layer's first count, and gate/up's SwiGLU epilogue overwrites
// each word once with a gpu-scope relaxed store (small_gemm_store, L2_ONLY); here each thread reads
// its 16-byte pieces with gpu-scope relaxed loads, all of them first, then again those with a
// pending word until none has. The words are the unit (an aligned 32-bit access is single-copy
// atomic; hexel::ld_relaxed_gpu_v4), so a word is either pending or final. A count here would
// cost its release fence's wait while the producer refills the ring for down.
template <int M, unsigned K>
__device__ __forceinline__ void persistent_poll_a(unsigned base, const bf16* a) {
  static_assert(K % 8 == 0, "whole 16-byte pieces");
  constexpr unsigned kChunks = K / 8, kPer = (kChunks + 127) / 128;
  const unsigned tid = threadIdx.x;
  auto pending = [](const uint4& v, unsigned) {
    return v.x == kActPending || v.y == kActPending || v.z == kActPending || v.w == kActPending;
  };
#pragma unroll
  for (int r = 0; r < M; ++r) {
    uint4 v[kPer];
    persistent_poll_chunks<kChunks>(
        v, reinterpret_cast<const unsigned*>(a + static_cast<long long>(r) * K), pending);
#pragma unroll
    for (unsigned i = 0; i < kPer; ++i)
      if (tid + 128 * i < kChunks) a_store_chunk<M>(base, tid + 128 * i, r, v[i]);
  }
  a_finish<M>(base, kChunks, tid);
}

// RMSNorm of x's M rows (f32 [M, H], written by other CTAs in this launch or by earlier kernels)
// into the resident interleaved A: the small GEMM's norm prologue (rms_rows_interleaved), x read
// past L1. w8: this thread's norm weights (rms_load_w).
template <int M, int H, float EPS>
__device__ __forceinline__ void persistent_norm_a(unsigned base, const float* x,
                                                  const float (&w8)[kNormChunks<H>][8]) {
  __shared__ float scratch[4 * M];
  const int t = threadIdx.x, warp = t / 32, lane = t % 32;
  rms_rows_interleaved<M, H, EPS, H / 8, true>(base, x, w8, scratch, t, warp, lane);
}

// What the layer's atom does beyond its tiles (the default: LayerWgmma, LayerTcgen05, which read
// the bf16 resident A as it is and stream K bf16 columns a weight row). The W8A8 atom
// (decode_layer_w8a8.cuh) specializes it: its producer streams e4m3 rows of 128-byte boxes, a box
// where a bf16 stream has one of 64 columns (kStreamKDiv 2: a phase counts K / 2), start also takes
// the four weights' scales, each phase's input, once formed in the resident A (a_finish's meeting),
// is quantized (ready: P the phase's weight, 0 qkv .. 3 down, K its columns), and down's input is
// act's e4m3 form beside act (down_input; kActWords, the words the prologue sets pending).
template <class Atom>
struct LayerAtomInput {
  enum : unsigned { kStreamKDiv = 1 };
  // act's words (one token, I columns) that the layer's prologue sets pending.
  template <unsigned I>
  static constexpr unsigned kActWords = I / 2;
  template <class Ring, class S>
  __device__ __forceinline__ static void start(Ring& ring, const S& sm, const float*, const float*,
                                               const float*, const float*) {
    Atom::start(ring, sm);
  }
  template <unsigned P, unsigned K, class Ring>
  __device__ __forceinline__ static void ready(Ring&, unsigned) {}
  // Down's input (act, I columns) into the resident A at base once every word has arrived.
  template <int M, unsigned I, class Ring>
  __device__ __forceinline__ static void down_input(Ring& ring, unsigned base, const bf16* act) {
    persistent_poll_a<M, I>(base, act);
    ready<3, I>(ring, base);
  }
};

// The MLP half of a layer's decode step: x += o(attn); act = SwiGLU(gate_up(RMSNorm(x))); x +=
// down(act), three phases of one weight stream. Shapes: o [H, KO] in BO x 64 boxes, gate/up [2I, H]
// in BG / 2 x 64 boxes, down [H, I] in BD x 64 boxes. `phase0` is the grid-wide count of phases
// before it in its launch and `g0` the global index of its first tile (o's), so the kernel that
// runs it may run phases of its own first (decode_layer_persistent: the attention half). Atom: the
// tiles' MMA and accumulator access (LayerWgmma; LayerTcgen05, decode_layer_sm100.cuh).
template <int H, int KO, int I, int BO, int BG, int BD, class Atom = LayerWgmma>
struct MlpPhases {
  static_assert(Atom::tile_ok(BO, KO) && Atom::tile_ok(BG, H) && BG % 16 == 0 &&
                    Atom::tile_ok(BD, I),
                "whole K blocks in a slot, whole slots; gate/up halves are whole 8-row groups");
  static_assert(H % BO == 0 && I % (BG / 2) == 0 && H % BD == 0, "whole tiles");
  static constexpr unsigned kTilesO = H / BO, kTilesGu = 2 * I / BG, kTilesDown = H / BD;
  static constexpr unsigned kTiles = kTilesO + kTilesGu + kTilesDown;

  // The three phases of the producer's weight stream, o's first tile at global index g0.
  __device__ static void stream_phases(const TensorMap* o_map, const TensorMap* gu_map, const TensorMap* down_map,
                                       unsigned g0, StreamPhase* out) {
    constexpr unsigned kDiv = LayerAtomInput<Atom>::kStreamKDiv;
    out[0] = {o_map, KO / kDiv, BO, kTilesO, 0, g0};
    out[1] = {gu_map, H / kDiv, BG, kTilesGu, I, g0 + kTilesO};
    out[2] = {down_map, I / kDiv, BD, kTilesDown, 0, g0 + kTilesO + kTilesGu};
  }
  // The producer's weights of the three phases, alone in their launch.
  template <unsigned STAGES>
  __device__ static void stream(hexel::mbarrier::StageRing<STAGES>& ring, unsigned ring_base, unsigned full,
                                unsigned empty, const TensorMap* o_map, const TensorMap* gu_map,
                                const TensorMap* down_map, unsigned g0) {
    __shared__ StreamPhase phases[3];
    stream_phases(o_map, gu_map, down_map, g0, phases);
    persistent_stream<STAGES, Atom::kSlotRows, 64 * LayerAtomInput<Atom>::kStreamKDiv>(
        ring, ring_base, full, empty, phases, 3);
  }

  // The consumers: x += o(attn); act = SwiGLU(gate_up(RMSNorm(x))); x += down(act). Waits for the
  // count to reach phase0 · gridDim.x first and arrives after o (the caller arrives after down if
  // anything follows in the launch); no count between gate/up and down: down polls act
  // (LayerAtomInput::down_input; the caller has set act to kActPending before phase0's count).
  template <int M, float EPS, class Ring>
  __device__ static void run(Ring& ring, unsigned base, unsigned ring_base, unsigned full,
                             unsigned empty, const bf16* attn, const float* norm_w, float* x,
                             bf16* act, unsigned* sync, unsigned phase0, unsigned g0) {
    float w8[kNormChunks<H>][8];
    rms_load_w<H>(norm_w, threadIdx.x, w8);  // a weight: its load overlaps the o tiles
    persistent_wait(sync, phase0 * gridDim.x);
    phase_trace(1 + 2 * phase0);
    unsigned first = persistent_first_tile(g0);
    if (first < kTilesO) {
      persistent_load_a<M>(base, attn, KO);
      LayerAtomInput<Atom>::template ready<1, KO>(ring, base);
      for (unsigned tile = first; tile < kTilesO; tile += gridDim.x)
        Atom::template tile<M, BO, SmallEpi::Residual>(ring, base, ring_base, full, empty, tile, KO,
                                                       H, x);
    }
    persistent_next_phase(sync, phase0);
    first = persistent_first_tile(g0 + kTilesO);
    if (first < kTilesGu) {
      persistent_norm_a<M, H, EPS>(base, x, w8);
      LayerAtomInput<Atom>::template ready<2, H>(ring, base);
      for (unsigned tile = first; tile < kTilesGu; tile += gridDim.x)
        Atom::template tile<M, BG, SmallEpi::SwiGlu>(ring, base, ring_base, full, empty, tile, H, I,
                                                     act);
    }
    phase_trace(2 + 2 * (phase0 + 1));
    first = persistent_first_tile(g0 + kTilesO + kTilesGu);
    if (first < kTilesDown) {
      LayerAtomInput<Atom>::template down_input<M, I>(ring, base, act);
      phase_trace(3 + 2 * (phase0 + 1));
      for (unsigned tile = first; tile < kTilesDown; tile += gridDim.x)
        Atom::template tile<M, BD, SmallEpi::Residual>(ring, base, ring_base, full, empty, tile, I,
                                                       H, x);
    }
    phase_trace(6 + 2 * phase0);
  }
};

// The QKV epilogue of tile t of a one-token QKV phase, from the tile's accumulators: the projection
// rounded to bf16 and back (the values qkv_rope_row reads from qkv), the bias, RoPE of q and k, q to
// q_out (f32, [HQ D]), k and v appended at `pos` to `page` (not where pos < 0): qkv_rope_row's
// operations in its order on the same values, so the same bits, without the projection's round
// trip through memory and the phase that reads it back. The token's row is threads 0-3's (wgmma's
// accumulator: row 0 is lanes 0-3 of warp 0, columns 8j + 2 (lane % 4) + {0, 1} in d[4j], d[4j +
// 1]); in the rows' pair order (qkv_pair_pos) an 8-column group j is 4 elements of a head's first
// half (lanes 0-1) and their 4 partners of the second half (lanes 2-3), so a lane's partner is
// lane ^ 2. No QK norm (it needs the head's whole row). The rotation's (sin, cos) come from `sc`
// (qkv_rope_angle, computed before the tile's K loop: the frequencies' constant-memory loads and
// the sincos are then off the phase's tail).
template <int HQ, int HKV, int D, bool BIAS, int PAGE, long long PAGE_ELEMS, class Rope, unsigned BN>
__device__ __forceinline__ void qkv_rope_pairs(const float (&d)[BN / 2], unsigned t, int pos, int page,
                                               const float* bias, bf16* kv_layer, float* q_out, const float2* sc) {
  static_assert(BN % 8 == 0 && D % 8 == 0, "whole 8-row groups in a tile and in a head");
  if (threadIdx.x >= 4) return;
  const unsigned lane = threadIdx.x, half = lane / 2;
#pragma unroll
  for (unsigned j = 0; j < BN / 8; ++j) {
    const unsigned p = t * BN + 8 * j;  // the group's first row, in the stored order
    const unsigned head = p / D, i = p % D / 8 * 4 + 2 * (lane % 2);  // this lane's pair index
    const unsigned n = half * (D / 2) + i;                              // its element of the head
    const unsigned b = pack_bf16x2(d[4 * j], d[4 * j + 1]);
    float v[2] = {__uint_as_float(b << 16), __uint_as_float(b & 0xffff0000u)};
    if constexpr (BIAS) {
      v[0] += bias[head * D + n];
      v[1] += bias[head * D + n + 1];
    }
    if (head < static_cast<unsigned>(HQ + HKV)) {  // the same for the four lanes
      for (int e = 0; e < 2; ++e) {
        const float other = __shfl_xor_sync(0xfu, v[e], 2);
        const float2 a = sc[4 * j + 2 * (lane % 2) + e];  // (sin, cos) of pair index i + e
        v[e] = half == 0 ? rope_first(v[e], other, a.y, a.x) : rope_second(other, v[e], a.y, a.x);
      }
    }
    if (head < static_cast<unsigned>(HQ)) {
      *reinterpret_cast<float2*>(q_out + head * D + n) = make_float2(v[0], v[1]);
    } else if (pos >= 0) {
      const int kv = head < static_cast<unsigned>(HQ + HKV) ? 0 : 1, kvh = static_cast<int>(head) - HQ - kv * HKV;
      bf16* row = kv_layer + page * PAGE_ELEMS + (static_cast<long long>(kv * HKV + kvh) * PAGE + pos % PAGE) * D;
      *reinterpret_cast<unsigned*>(row + n) = f32_to_bf16(v[0]) | static_cast<unsigned>(f32_to_bf16(v[1])) << 16;
    }
  }
}

// Entry k (0 .. BN / 2 - 1) of qkv_rope_pairs' table for tile t at `pos`: (sin, cos) of the pair
// index of the tile's 8-row group k / 4, element k % 4 (rope_sincos, so the same bits).
template <int D, class Rope, unsigned BN>
__device__ __forceinline__ float2 qkv_rope_angle(unsigned t, unsigned k, int pos) {
  const unsigned p = t * BN + 8 * (k / 4);
  float sn, cs;
  rope_sincos<Rope>(pos, static_cast<int>(p % D / 8 * 4 + k % 4), sn, cs);
  return make_float2(sn, cs);
}

// qkv_rope_pairs' table of tile `tile` at `pos` into sc (BN / 2 entries of shared memory), by the
// 128 consumer threads, after the previous tile's epilogue has read it.
template <int D, class Rope, unsigned BN>
__device__ __forceinline__ void qkv_rope_table(unsigned tile, int pos, float2* sc) {
  const int t = threadIdx.x;
  hexel::named_barrier_sync(1, 128);  // the previous tile's epilogue has read sc
  if (t < static_cast<int>(BN / 2))
    sc[t] = qkv_rope_angle<D, Rope, BN>(tile, static_cast<unsigned>(t), pos);
  hexel::named_barrier_sync(1, 128);
}

// The persistent layer's MMA atom and accumulator access on sm_90a (decode_layer_persistent,
// decode_layer_persistent_e4m3): the token as wgmma's A (resident, interleaved), tiles of BN <= 64
// weight rows as its B from 8 KB ring slots, each consumer warp releasing a slot once read, the
// accumulators in wgmma's fragment layout (layer_gemm_tile; QKV_ROPE's tiles qkv_rope_pairs). The
// sm_100a atom, LayerTcgen05, is in decode_layer_sm100.cuh. An atom provides: the ring's slots
// (kSlotRows rows of 128 bytes, kSlotBytes) and the arrivals that free one (kEmptyArrivals); the
// tiles it takes (tile_ok); the consumers' Ring (the stage ring and any accumulator state), set up
// by every thread after the barriers' initialisation (start) and released by the consumers at the
// end (finish); a tile of a GEMM phase with its epilogue (tile); and a QKV tile with the QKV
// epilogue (qkv_rope_tile, by the 128 consumer threads; `sc` is BQ / 2 entries of shared memory).
struct LayerWgmma {
  enum : unsigned {
    kSlotRows = 64,
    kSlotBytes = LayerGemms::kSlotBytes,
    kEmptyArrivals = 4,  // one a consumer warp
  };
  __host__ __device__ static constexpr bool tile_ok(int bn, int k) {
    return persistent_tile_ok(bn, k);
  }
  template <unsigned STAGES>
  using Ring = hexel::mbarrier::StageRing<STAGES>;
  template <unsigned STAGES, class S>
  __device__ __forceinline__ static void start(Ring<STAGES>&, const S&) {}
  template <unsigned STAGES>
  __device__ __forceinline__ static void finish(const Ring<STAGES>&) {}
  template <int M, unsigned BN, SmallEpi EPI, unsigned STAGES>
  __device__ __forceinline__ static void tile(Ring<STAGES>& ring, unsigned a_base,
                                              unsigned ring_base, unsigned full, unsigned empty,
                                              unsigned t, unsigned K, unsigned N, void* out) {
    layer_gemm_tile<M, BN, EPI>(ring, a_base, ring_base, full, empty, t, K, N, out);
  }
  template <int HQ, int HKV, int D, bool BIAS, int PAGE, long long PAGE_ELEMS, class Rope,
            unsigned BQ, unsigned H, unsigned STAGES>
  __device__ __forceinline__ static void qkv_rope_tile(Ring<STAGES>& ring, unsigned a_base,
                                                       unsigned ring_base, unsigned full,
                                                       unsigned empty, unsigned tile, int pos,
                                                       int page, const float* bias, bf16* kv_layer,
                                                       float* q, float2* sc) {
    qkv_rope_table<D, Rope, BQ>(tile, pos, sc);
    float d[BQ / 2];
    layer_gemm_tile_mma<1, BQ>(ring, a_base, ring_base, full, empty, H, d);
    qkv_rope_pairs<HQ, HKV, D, BIAS, PAGE, PAGE_ELEMS, Rope, BQ>(d, tile, pos, page, bias, kv_layer,
                                                                 q, sc);
  }
};

// decode_layer_persistent's L2 prefetch of the context's K/V: at most this many bytes a layer, a
// third of the H200's 50 MB L2 (the weights stream through the rest).
constexpr long long kKvPrefetchBytes = 16LL << 20;

// The phases of decode_layer_persistent (its template arguments; see the kernel below), each run
// by the consumer warpgroup's 128 threads unless it says otherwise. The kernel keeps the static
// shared arrays and passes them in.
template <int H, int HQ, int HKV, int D, bool BIAS, bool QK_NORM, float EPS, int PAGE, int MAXP,
          long long PAGE_ELEMS, class Rope, int SPLIT, int NSPLIT, float SCALE_LOG2, int I,
          int STAGES, int BQ, int BO, int BG, int BD, bool QKV_ROPE, unsigned BULK,
          class Atom = LayerWgmma>
struct DecodeLayer {
  static constexpr int NH = HQ + 2 * HKV, NQKV = NH * D, KO = HQ * D;
  static constexpr unsigned kTilesQkv = NQKV / BQ;
  static constexpr unsigned kMaxK = KO > H ? (KO > I ? KO : I) : (H > I ? H : I);
  using Mlp = MlpPhases<H, KO, I, BO, BG, BD, Atom>;
  template <int RAW_STAGES>
  using Smem = PersistentSmem<1, kMaxK, STAGES, RAW_STAGES, Atom>;
  using Ring = typename Atom::template Ring<STAGES>;
  using NormWeights = float[kNormChunks<H>][8];

  // Before the first phase: the norm's weights (no kernel writes them), the wait for the previous
  // kernels (x and the KV pages are theirs), then act's words set pending (persistent_poll_a; the
  // atom's LayerAtomInput::kActWords): before this
  // CTA's first arrival, so before every CTA's gate/up stores; after the wait, so after the
  // previous kernels' reads of it.
  __device__ __forceinline__ static void prologue(const float* attn_norm, bf16* act,
                                                  NormWeights& w8) {
    const int t = threadIdx.x;
    const unsigned long long entry = trace_clock();
    rms_load_w<H>(attn_norm, t, w8);
    hexel::grid_dependency_wait();
    phase_trace_at(0, entry);
    constexpr unsigned kActWords = LayerAtomInput<Atom>::template kActWords<I>;
    for (unsigned w = blockIdx.x * 128 + t; w < kActWords; w += gridDim.x * 128)
      hexel::st_relaxed_gpu(reinterpret_cast<unsigned*>(act) + w, kActPending);
    phase_trace(1);
  }

  // Warps 4-7 of the e4m3 form (PersistentConverters): the four phases' raw slots, each
  // persistent_convert_phase with its weight's format and scales.
  template <class WQ, class WO, class WG, class WD, int RAW_STAGES, class S>
  __device__ __forceinline__ static void convert(Ring& ring, const S& sm, const StreamPhase* phases,
                                                 const float* qkv_s, const float* o_s,
                                                 const float* gu_s, const float* down_s) {
    PersistentConverters<RAW_STAGES> conv(sm, phases, 4);
    constexpr unsigned g_o = kTilesQkv, g_gu = g_o + Mlp::kTilesO, g_down = g_gu + Mlp::kTilesGu;
    persistent_convert_phase<WQ, BQ, false>(conv, ring, sm, H, kTilesQkv, 0, 0, qkv_s);
    persistent_convert_phase<WO, BO, false>(conv, ring, sm, KO, Mlp::kTilesO, 0, g_o, o_s);
    persistent_convert_phase<WG, BG, true>(conv, ring, sm, H, Mlp::kTilesGu, I, g_gu, gu_s);
    persistent_convert_phase<WD, BD, false>(conv, ring, sm, I, Mlp::kTilesDown, 0, g_down, down_s);
    conv.finish();
  }

  // Phase 0 without QKV_ROPE: qkv = RMSNorm(x) · Wqkvᵀ (bf16), its epilogue in phase 1.
  template <class S>
  __device__ __forceinline__ static void qkv_phase(Ring& ring, const S& sm, const NormWeights& w8,
                                                   const float* x, bf16* qkv) {
    const unsigned first = persistent_first_tile(0);
    if (first < kTilesQkv) {
      persistent_norm_a<1, H, EPS>(sm.base, x, w8);
      LayerAtomInput<Atom>::template ready<0, H>(ring, sm.base);
      for (unsigned tile = first; tile < kTilesQkv; tile += gridDim.x)
        Atom::template tile<1, BQ, SmallEpi::StoreBf16>(ring, sm.base, sm.ring_base, sm.full,
                                                        sm.empty, tile, H, NQKV, qkv);
    }
  }

  // Phase 1 (without QKV_ROPE): the QKV epilogue, a head per work item (q to `q`, K/V appended to
  // their pages; qkv_rope_row, with head_v and scratch its shared memory).
  __device__ __forceinline__ static void qkv_epilogue_phase(
      const bf16* qkv, const float* bias, const float* q_norm, const float* k_norm,
      const int* positions, const int* token_seq, const int* page_tables, bf16* kv_layer, float* q,
      float* head_v, float* scratch) {
    const int t = threadIdx.x;
    auto sync128 = [] { hexel::named_barrier_sync(1, 128); };
    for (unsigned head = blockIdx.x; head < static_cast<unsigned>(NH); head += gridDim.x) {
      const float v =
          t < D ? __uint_as_float(static_cast<unsigned>(__ldcg(qkv + head * D + qkv_pair_pos(t, D)))
                                  << 16)
                : 0.f;
      qkv_rope_row<HQ, HKV, D, BIAS, QK_NORM, EPS, PAGE, MAXP, PAGE_ELEMS, Rope>(
          v, static_cast<int>(head), 0, t, bias, q_norm, k_norm, positions, token_seq, page_tables,
          kv_layer, q, head_v, scratch, sync128);
    }
  }

  // Phase 2: the attention splits, a (KV head, slot) per work item, slot-major (item = slot · HKV +
  // KV head): the slots with work at a context are the first ones, so its items are the first
  // (position / SPLIT + 1) · HKV, one a CTA up to the grid's size (head-major, CTA b's second item
  // b + gridDim.x would be a second chain after its first wherever NSPLIT · HKV passes the grid,
  // however few slots have work). Which CTA runs an item changes no bit. Given `out` (attn, where
  // the context is one split: no combine), the items write it as the combine would
  // (attn_split_block's `out`, the same bits). Each item waits for what the QKV phase wrote inside
  // itself, after its loads that need nothing this launch wrote (attn_split_block's before_q): for
  // the grid-wide count of phases 0 and 1, once a CTA (after the items where it has none).
  __device__ __forceinline__ static void attention_phase(
      const float* q, const int* positions, const int* token_seq, const int* page_tables,
      const bf16* kv_layer, float* part_o, float* part_ml, bf16* out, unsigned* sync) {
    auto sync128 = [] { hexel::named_barrier_sync(1, 128); };
    bool waited = !QKV_ROPE;
    auto wait_qkv = [&] {
      if (waited) return;
      persistent_wait(sync, 2 * gridDim.x);
      phase_trace(5);
      waited = true;
    };
    for (unsigned item = blockIdx.x; item < static_cast<unsigned>(HKV * NSPLIT);
         item += gridDim.x) {
      const int kvh = static_cast<int>(item % HKV);
      auto before_q = [&] { wait_qkv(); };
      attn_split_block<HQ, HKV, D, PAGE, MAXP, PAGE_ELEMS, SPLIT, NSPLIT, SCALE_LOG2, 1, true>(
          0, kvh, static_cast<int>(item / HKV), q, positions, token_seq, page_tables, kv_layer,
          part_o, part_ml, sync128, out, nullptr, nullptr, -1, before_q);
    }
    wait_qkv();
  }

  // Phase 3: the combine, a query head per work item on D threads (a meeting between items: a
  // row's last loop reads shared memory the next one writes).
  __device__ __forceinline__ static void combine_phase(const float* part_o, const float* part_ml,
                                                       const int* positions, bf16* attn) {
    const int t = threadIdx.x;
    if (t < D)
      for (unsigned hq = blockIdx.x; hq < static_cast<unsigned>(HQ); hq += gridDim.x) {
        auto sync_d = [] { hexel::named_barrier_sync(2, D); };
        attn_combine_row<HQ, D, NSPLIT, SPLIT>(0, static_cast<int>(hq), part_o, part_ml, positions,
                                               attn, sync_d);
        sync_d();
      }
  }
};

// A whole one-token decode layer in one launch: the attention half (RMSNorm + the QKV GEMM; the QKV
// epilogue per head, qkv_rope_row, or with QKV_ROPE in the QKV tiles, qkv_rope_pairs; the attention
// splits, attn_split_block per (KV head, slot); the combine, attn_combine_row per query head, where
// the context is longer than one split) and then MlpPhases, seven phases between grid-wide counts
// (six without the combine, one fewer with QKV_ROPE), one weight stream (qkv, o, gate/up, down) per
// SM. Every piece is the code the separate kernels run, or its operations in their order, so the
// rows have their bits. Template arguments: the model's (qkv_rope_append_rows' and attn_split's
// after D), then the MLP's and the ring's, QKV_ROPE, BULK; args as those kernels'.
// The four weights (qkv, o, gate/up, down): each a tensor map in BQ / BO / BG / 2 / BD x 64 boxes,
// or where its bit of the mask BULK is set (bit 0 qkv .. 3 down) its slot image in tiles of BQ /
// BO / BG / BD rows (support/slot_image.hpp), streamed with one bulk copy a ring slot
// (StreamPhase::image).
// decode_layer_body is the kernels' code: decode_layer_persistent (bf16 weights: RAW_STAGES 0,
// the formats Bf16Weight, no scales), decode_layer_persistent_e4m3 (the raw ring of RAW_STAGES
// slots, the converter warps, the four weights' formats and scales), and on the atom Atom
// (LayerWgmma, LayerTcgen05) the sm_100a layer and its twin (decode_layer_sm100.cuh).
template <int H, int HQ, int HKV, int D, bool BIAS, bool QK_NORM, float EPS, int PAGE, int MAXP,
          long long PAGE_ELEMS, class Rope, int SPLIT, int NSPLIT, float SCALE_LOG2, int I,
          int STAGES, int BQ, int BO, int BG, int BD, bool QKV_ROPE, unsigned BULK, int RAW_STAGES,
          class WQ, class WO, class WG, class WD, class Atom = LayerWgmma>
__device__ __forceinline__ void decode_layer_body(
    const void* qkv_w, const void* o_w, const void* gu_w, const void* down_w, const float* qkv_s,
    const float* o_s, const float* gu_s, const float* down_s, const float* attn_norm,
    const float* mlp_norm, const float* bias, const float* q_norm, const float* k_norm,
    const int* positions, const int* token_seq, const int* page_tables, bf16* kv_layer, float* x,
    bf16* qkv, float* q, float* part_o, float* part_ml, bf16* attn, bf16* act, unsigned* sync) {
  using L = DecodeLayer<H, HQ, HKV, D, BIAS, QK_NORM, EPS, PAGE, MAXP, PAGE_ELEMS, Rope, SPLIT,
                        NSPLIT, SCALE_LOG2, I, STAGES, BQ, BO, BG, BD, QKV_ROPE, BULK, Atom>;
  static_assert(Atom::tile_ok(BQ, H) && L::NQKV % BQ == 0, "QKV tiles");
  static_assert(!QKV_ROPE || !QK_NORM, "QK norm needs a head's whole row");
  static_assert(D <= 128, "a thread per element of a head (the QKV epilogue, the combine)");
  static_assert(RAW_STAGES == 0 || BULK == 0, "e4m3 weights stream through their maps");
  hexel::launch_dependents();  // the waits come later: weights first
  extern __shared__ unsigned char smem_raw[];
  const typename L::template Smem<RAW_STAGES> sm(smem_raw);
  typename L::Ring ring;
  LayerAtomInput<Atom>::start(ring, sm, qkv_s, o_s, gu_s, down_s);

  // The producer's phases: each weight from its tensor map or, where its bit of BULK is set, its
  // slot image.
  __shared__ StreamPhase phases[4];
  const auto stream_phases = [&] {
    const void* w[4] = {qkv_w, o_w, gu_w, down_w};
    const auto map = [&](int p) {
      return BULK >> p & 1u ? nullptr : static_cast<const TensorMap*>(w[p]);
    };
    phases[0] = {map(0), H / LayerAtomInput<Atom>::kStreamKDiv, BQ, L::kTilesQkv, 0, 0};
    L::Mlp::stream_phases(map(1), map(2), map(3), L::kTilesQkv, phases + 1);
    for (int p = 0; p < 4; ++p)
      if (BULK >> p & 1u) phases[p].image = static_cast<const char*>(w[p]);
  };
  if constexpr (RAW_STAGES > 0) {
    // e4m3: warps 4-7 convert every raw slot into the ring, warp 4's lane 0 also the producer
    // (DecodeLayer::convert).
    if (hexel::warp_index() >= 4) {
      if (threadIdx.x == 128) stream_phases();
      L::template convert<WQ, WO, WG, WD, RAW_STAGES>(ring, sm, phases, qkv_s, o_s, gu_s, down_s);
      return;
    }
  } else if (hexel::warp_index() == 4) {
    // The producer warp's lane 0: every weight box of the CTA's tiles into the ring.
    if (threadIdx.x % 32 == 0) {
      stream_phases();
      phase_trace_at(kTraceProducerWaits,
                     persistent_stream<STAGES, Atom::kSlotRows,
                                       64 * LayerAtomInput<Atom>::kStreamKDiv>(
                                              ring, sm.ring_base, sm.full, sm.empty, phases, 4));
      phase_trace(15);
    }
    return;
  }
  const int t = threadIdx.x;
  typename L::NormWeights w8;
  L::prologue(attn_norm, act, w8);

  // Phases 0 and 1: qkv and its epilogue (with QKV_ROPE in the QKV tiles: one arrival ends both,
  // the wait for it is in the attention items), then the context's K/V into L2. The prefetch's
  // page-table loads take the loaded latency, so they come after the arrival.
  const int pos = positions[0];
  const int* pt = page_tables + token_seq[0] * MAXP;
  if constexpr (QKV_ROPE) {
    // qkv in RoPE's pair order, each tile running the QKV epilogue on its accumulators
    // (qkv_rope_pairs, with its (sin, cos) table in rope_sc), so phase 1 has no work.
    __shared__ float2 rope_sc[BQ / 2];
    unsigned first = persistent_first_tile(0);
    if (first < L::kTilesQkv) {
      persistent_norm_a<1, H, EPS>(sm.base, x, w8);
      LayerAtomInput<Atom>::template ready<0, H>(ring, sm.base);
      const int page = pos >= 0 ? pt[pos / PAGE] : 0;
      for (unsigned tile = first; tile < L::kTilesQkv; tile += gridDim.x) {
        Atom::template qkv_rope_tile<HQ, HKV, D, BIAS, PAGE, PAGE_ELEMS, Rope, BQ, H>(
            ring, sm.base, sm.ring_base, sm.full, sm.empty, tile, pos, page, bias, kv_layer, q,
            rope_sc);
      }
    }
  } else {
    L::qkv_phase(ring, sm, w8, x, qkv);
  }
  // The context's K/V of this layer into L2, a page's slice of the layer per thread over the whole
  // grid, so that the attention items' chunk loads (phase 2) wait on L2 rather than DRAM: their
  // chunks are a chain of dependent loads, each a DRAM latency without it. Issued after QKV, so
  // that less than the ring's worth of weights passes through L2 before the items read it; at most
  // kKvPrefetchBytes (the first pages: every slot's first split). Loads only.
  const auto prefetch_kv = [&] {
    constexpr long long kLayerPageElems = 2LL * HKV * PAGE * D;
    constexpr int kMaxPages = static_cast<int>(kKvPrefetchBytes / (2 * kLayerPageElems));
    const int pages = pos < 0 ? 0 : min(pos / PAGE + 1, kMaxPages);
    for (int p = blockIdx.x + gridDim.x * t; p < pages; p += gridDim.x * 128)
      hexel::tma::prefetch_bytes(kv_layer + static_cast<long long>(pt[p]) * PAGE_ELEMS,
                                 2 * kLayerPageElems);
  };
  if constexpr (QKV_ROPE) {
    phase_trace(2);
    persistent_arrive(sync, 2);
    phase_trace(16);
    prefetch_kv();
  } else {
    __shared__ float head_v[D];
    __shared__ float scratch[D / 32 > 0 ? D / 32 : 1];
    persistent_next_phase(sync, 0);
    prefetch_kv();
    L::qkv_epilogue_phase(qkv, bias, q_norm, k_norm, positions, token_seq, page_tables, kv_layer, q,
                          head_v, scratch);
    persistent_next_phase(sync, 1);
  }

  // Phases 2 and 3: the attention splits, then the combine where the context spans more than one
  // split (every CTA reads the same position, so all take the same branch); where it does not, one
  // arrival ends both, so o waits for one count fewer.
  const bool one_split = pos >= 0 && pos < SPLIT;
  L::attention_phase(q, positions, token_seq, page_tables, kv_layer, part_o, part_ml,
                     one_split ? attn : nullptr, sync);
  if (one_split) {
    phase_trace(2 + 2 * 2);
    persistent_arrive(sync, 2);
    phase_trace(16 + 2);
  } else {
    persistent_next_phase(sync, 2);
    L::combine_phase(part_o, part_ml, positions, attn);
    phase_trace(8);
    persistent_arrive(sync);
    phase_trace(16 + 3);
  }

  // Phases 4-6: the MLP half.
  constexpr unsigned kMlpPhase0 = 4;
  static_assert(2 + 2 * (kMlpPhase0 + 2) < 15 && 16 + kMlpPhase0 + 1 < kTraceProducerWaits,
                "phase_trace: the phases' events below the producer's (15), then the arrivals, then "
                "the exit");
  L::Mlp::template run<1, EPS>(ring, sm.base, sm.ring_base, sm.full, sm.empty, attn, mlp_norm, x,
                               act, sync, kMlpPhase0, L::kTilesQkv);
  phase_trace(kTraceExit);
  persistent_finish(sync);
  Atom::finish(ring);
}

template <int H, int HQ, int HKV, int D, bool BIAS, bool QK_NORM, float EPS, int PAGE, int MAXP,
          long long PAGE_ELEMS, class Rope, int SPLIT, int NSPLIT, float SCALE_LOG2, int I,
          int STAGES, int BQ, int BO, int BG, int BD, bool QKV_ROPE, unsigned BULK>
__global__ void __launch_bounds__(LayerGemms::kThreads, 1)
    decode_layer_persistent(const void* qkv_w, const void* o_w, const void* gu_w,
                            const void* down_w, const float* attn_norm, const float* mlp_norm,
                            const float* bias, const float* q_norm, const float* k_norm,
                            const int* positions, const int* token_seq, const int* page_tables,
                            bf16* kv_layer, float* x, bf16* qkv, float* q, float* part_o,
                            float* part_ml, bf16* attn, bf16* act, unsigned* sync) {
  decode_layer_body<H, HQ, HKV, D, BIAS, QK_NORM, EPS, PAGE, MAXP, PAGE_ELEMS, Rope, SPLIT, NSPLIT,
                    SCALE_LOG2, I, STAGES, BQ, BO, BG, BD, QKV_ROPE, BULK, 0, Bf16Weight,
                    Bf16Weight, Bf16Weight, Bf16Weight>(
      qkv_w, o_w, gu_w, down_w, nullptr, nullptr, nullptr, nullptr, attn_norm, mlp_norm, bias,
      q_norm, k_norm, positions, token_seq, page_tables, kv_layer, x, qkv, q, part_o, part_ml, attn,
      act, sync);
}

// The layer on e4m3 weights (see the top of this file): decode_layer_persistent's template
// arguments up to QKV_ROPE, then the raw ring's slots and the scale blocks (rows, columns) of qkv,
// o, gate/up and down; its arguments with each weight's map (over its e4m3 bytes: BQ / BO / BG / 2
// / BD x 64-byte boxes, no swizzle) followed by the four weights' f32 scales. The results are
// decode_layer_persistent's on W' = bf16(float(q) · s), bit for bit.
template <int H, int HQ, int HKV, int D, bool BIAS, bool QK_NORM, float EPS, int PAGE, int MAXP,
          long long PAGE_ELEMS, class Rope, int SPLIT, int NSPLIT, float SCALE_LOG2, int I,
          int STAGES, int BQ, int BO, int BG, int BD, bool QKV_ROPE, int RAW_STAGES, unsigned SQR,
          unsigned SQC, unsigned SOR, unsigned SOC, unsigned SGR, unsigned SGC, unsigned SDR,
          unsigned SDC>
__global__ void __launch_bounds__(LayerE4m3::kThreads, 1)
    decode_layer_persistent_e4m3(const TensorMap* qkv_w, const TensorMap* o_w,
                                 const TensorMap* gu_w, const TensorMap* down_w, const float* qkv_s,
                                 const float* o_s, const float* gu_s, const float* down_s,
                                 const float* attn_norm, const float* mlp_norm, const float* bias,
                                 const float* q_norm, const float* k_norm, const int* positions,
                                 const int* token_seq, const int* page_tables, bf16* kv_layer,
                                 float* x, bf16* qkv, float* q, float* part_o, float* part_ml,
                                 bf16* attn, bf16* act, unsigned* sync) {
  static_assert(RAW_STAGES >= 2, "a raw slot converts while the next lands");
  constexpr int NQKV = (HQ + 2 * HKV) * D;
  decode_layer_body<H, HQ, HKV, D, BIAS, QK_NORM, EPS, PAGE, MAXP, PAGE_ELEMS, Rope, SPLIT, NSPLIT,
                    SCALE_LOG2, I, STAGES, BQ, BO, BG, BD, QKV_ROPE, 0, RAW_STAGES,
                    E4m3Weight<NQKV, H, SQR, SQC>, E4m3Weight<H, HQ * D, SOR, SOC>,
                    E4m3Weight<2 * I, H, SGR, SGC>, E4m3Weight<H, I, SDR, SDC>>(
      qkv_w, o_w, gu_w, down_w, qkv_s, o_s, gu_s, down_s, attn_norm, mlp_norm, bias, q_norm, k_norm,
      positions, token_seq, page_tables, kv_layer, x, qkv, q, part_o, part_ml, attn, act, sync);
}

}  // namespace telos_kernels
