// The tile GEMM: C[M, N] = A[M, K] · W[N, K]ᵀ in bf16 with f32 accumulation, all row-major, one
// CTA per 128 x BlockN tile of C. The tensor-core atom is the template parameter (the Accum types
// of gemm_tile_accum.cuh): tcgen05.mma accumulating in Tensor Memory (sm_100a), or wgmma
// accumulating in registers (sm_90a). Everything else (the TMA producer, the stage ring, the
// epilogue's map and stores) is the same code, so the Hopper form exercises it on an H200 while
// the Blackwell form waits for a B200; the Blackwell form is compiled and assembled in CI only
// (docs/hexel.md, "Blackwell: TMEM and tcgen05").
//
// Roles: warps 0-3 are the accumulator warpgroup (they read the accumulator and store C; with
// wgmma they also issue the MMAs); warp 4 is the TMA producer (one thread); with tcgen05, warp 5
// owns the Tensor Memory allocation and one of its threads issues every MMA. Stages of A
// (128 x 64) and W (BlockN x 64) arrive by TMA with the 128-byte swizzle, through a ring of
// full/empty mbarriers. With tcgen05 a stage is released by tcgen05.commit once the MMAs that
// read it are done, and a last commit tells the epilogue the accumulator is complete.
//
// Ragged shapes: TMA fills rows and columns past M, N or K with zeros, and the epilogue stores
// only elements inside C, with 16-byte (tcgen05) or 4-byte (wgmma) stores where a whole run of
// columns is inside and aligned, element by element elsewhere. The host launcher is
// gemm_tile_launch.h.
#pragma once
#include "gemm_tile_accum.cuh"
#include "hexel/math.cuh"
#include "hexel/mbarrier.cuh"
#include "hexel/sync.cuh"
#include "hexel/tcgen05.cuh"
#include "hexel/tma.cuh"
#include "hexel/wgmma.cuh"

#if defined(__CUDACC__)
namespace hexel::examples {

// The shared-memory carve-up of GemmTileShape, from a 1024-byte-aligned base.
template <class Shape>
struct GemmTileSmem {
  unsigned char* base;  // generic pointer, for the Tensor Memory address word
  uint32_t addr;        // the same, as a 32-bit shared address

  HEXEL_DEVICE explicit GemmTileSmem(unsigned char* raw) {
    const uint32_t raw_addr = smem_addr(raw);
    addr = (raw_addr + 1023u) & ~1023u;
    base = raw + (addr - raw_addr);
  }
  HEXEL_DEVICE uint32_t a(uint32_t stage) const { return addr + stage * Shape::kStageBytes; }
  HEXEL_DEVICE uint32_t w(uint32_t stage) const { return a(stage) + Shape::kABytes; }
  HEXEL_DEVICE uint32_t full(uint32_t stage) const {
    return addr + Shape::kStages * Shape::kStageBytes + 8 * stage;
  }
  HEXEL_DEVICE uint32_t empty(uint32_t stage) const { return full(Shape::kStages + stage); }
  HEXEL_DEVICE uint32_t accum_full() const { return full(2 * Shape::kStages); }
  HEXEL_DEVICE uint32_t* tmem_slot() const {
    return reinterpret_cast<uint32_t*>(base + Shape::kStages * Shape::kStageBytes +
                                       Shape::kBarrierBytes);
  }
};

// Producer (one thread): for each K block, wait for the stage to be free, arm its full barrier
// with the stage's bytes and issue the two TMA boxes (A rows row0.., W rows col0..).
template <class Shape>
HEXEL_DEVICE void produce_tiles(const GemmTileSmem<Shape>& s, const TensorMap* a_map,
                                const TensorMap* w_map, uint32_t row0, uint32_t col0,
                                uint32_t k_blocks) {
  mbarrier::StageRing<Shape::kStages> ring;
  for (uint32_t kb = 0; kb < k_blocks; ++kb) {
    mbarrier::wait_parity(s.empty(ring.index), ring.phase ^ 1u);
    const uint32_t bar = s.full(ring.index);
    mbarrier::arrive_expect_tx(bar, Shape::kStageBytes);
    tma::load(s.a(ring.index), a_map, bar, kb * Shape::kBlockK, row0);
    tma::load(s.w(ring.index), w_map, bar, kb * Shape::kBlockK, col0);
    ring.advance();
  }
}

// Thread: converts Vec accumulator values, adjacent columns col .. col + Vec - 1 of one row of
// the M x N matrix C, to bf16 and stores the ones inside C: one Vec * 2-byte store when all are
// inside and aligned (n a multiple of Vec; col is one, gemm_tile_epilogue_test checks), else one
// by one.
template <uint32_t Vec>
HEXEL_DEVICE void store_run(uint16_t* c, uint32_t m, uint32_t n, uint32_t row, uint32_t col,
                            const float (&v)[Vec]) {
  static_assert(Vec == 2 || Vec == 8, "runs of 2 (4-byte stores) or 8 (16-byte stores)");
  if (row >= m) return;
  uint16_t* out = c + uint64_t{row} * n + col;
  if (col + Vec <= n && n % Vec == 0) {
    uint32_t w[Vec / 2];
#pragma unroll
    for (uint32_t i = 0; i < Vec / 2; ++i) w[i] = pack_bf16x2(v[2 * i], v[2 * i + 1]);
    if constexpr (Vec == 8)
      *reinterpret_cast<uint4*>(out) = make_uint4(w[0], w[1], w[2], w[3]);
    else
      *reinterpret_cast<uint32_t*>(out) = w[0];
    return;
  }
#pragma unroll
  for (uint32_t i = 0; i < Vec; ++i)
    if (col + i < n) out[i] = static_cast<uint16_t>(pack_bf16x2(v[i], 0.f) & 0xFFFFu);
}

// Thread of the accumulator warpgroup: stores chunk `chunk` of its accumulator registers `v`,
// each run of Accum::kVec registers where Accum::element puts it in the tile at (row0, col0).
template <class Accum>
HEXEL_DEVICE void store_chunk(uint16_t* c, uint32_t m, uint32_t n, uint32_t row0, uint32_t col0,
                              uint32_t thread, uint32_t chunk,
                              const float (&v)[Accum::kChunkRegs]) {
#pragma unroll
  for (uint32_t g = 0; g < Accum::kChunkRegs / Accum::kVec; ++g) {
    const TileElement e = Accum::element(thread, chunk, g * Accum::kVec);
    float run[Accum::kVec];
#pragma unroll
    for (uint32_t i = 0; i < Accum::kVec; ++i) run[i] = v[g * Accum::kVec + i];
    store_run<Accum::kVec>(c, m, n, row0 + e.row, col0 + e.col, run);
  }
}

// MMA issuer (one thread, tcgen05): the K loop over the stage ring (Bf16Accum::k_loop: per K
// block four K = 16 MMAs into the accumulator at `tmem`, overwriting it at the first, committed to
// the stage's empty barrier), then a last commit that completes the accumulator barrier once every
// MMA has. PTX ISA: tcgen05.commit.
template <uint32_t BlockN>
HEXEL_DEVICE void issue_tcgen05(const GemmTileSmem<GemmTileShape<BlockN>>& s, uint32_t tmem,
                                uint32_t k_blocks) {
  using Accum = Tcgen05Accum<BlockN>;
  using Shape = typename Accum::Shape;
  mbarrier::StageRing<Shape::kStages> ring;
  Accum::Mma::k_loop(
      ring, tmem, k_blocks, s.full(0), s.empty(0), [&](uint32_t st) { return s.a(st); },
      [&](uint32_t st) { return s.w(st); });
  tcgen05::commit(s.accum_full());
}

// Epilogue (accumulator warpgroup, tcgen05): wait for the accumulator, then per chunk of 32
// columns load this warp's 32 lanes (tcgen05.ld .32x32b.x32, then tcgen05.wait::ld) and store.
template <uint32_t BlockN>
HEXEL_DEVICE void epilogue_tcgen05(const GemmTileSmem<GemmTileShape<BlockN>>& s, uint32_t tmem,
                                   uint16_t* c, uint32_t m, uint32_t n, uint32_t row0,
                                   uint32_t col0) {
  using Accum = Tcgen05Accum<BlockN>;
  const uint32_t thread = threadIdx.x % 128, warp = thread / 32;
  mbarrier::wait_parity(s.accum_full(), 0);
  tcgen05::fence_after_thread_sync();
#pragma unroll
  for (uint32_t chunk = 0; chunk < Accum::kChunks; ++chunk) {
    uint32_t r[Accum::kChunkRegs];
    tcgen05::ld_32x32b(r, Accum::chunk_taddr(tmem, warp, chunk));
    tcgen05::wait_ld();
    float v[Accum::kChunkRegs];
#pragma unroll
    for (uint32_t i = 0; i < Accum::kChunkRegs; ++i) v[i] = __uint_as_float(r[i]);
    store_chunk<Accum>(c, m, n, row0, col0, thread, chunk, v);
  }
}

// MMA (accumulator warpgroup, wgmma): per K block, wait for the stage, issue both 64-row halves'
// four K = 16 wgmma, keep one group in flight and release the previous stage (one arrival per
// warp) once only the newest group is pending. PTX ISA: wgmma.mma_async, wgmma.commit_group,
// wgmma.wait_group.
template <uint32_t BlockN>
HEXEL_DEVICE void accumulate_wgmma(const GemmTileSmem<GemmTileShape<BlockN>>& s,
                                   float (&d)[2][BlockN / 2], uint32_t k_blocks) {
  using Accum = WgmmaAccum<BlockN>;
  using Shape = typename Accum::Shape;
  const bool leader = threadIdx.x % 32 == 0;
  mbarrier::StageRing<Shape::kStages> ring;
  uint32_t prev = 0;
  for (uint32_t kb = 0; kb < k_blocks; ++kb) {
    mbarrier::wait_parity(s.full(ring.index), ring.phase);
    wgmma::fence();
#pragma unroll
    for (uint32_t kk = 0; kk < Shape::kBlockK / 16; ++kk)
#pragma unroll
      for (uint32_t h = 0; h < 2; ++h)
        wgmma::mma_ss<BlockN>(d[h], Accum::operand_desc(s.a(ring.index) + h * 64 * 128, kk),
                              Accum::operand_desc(s.w(ring.index), kk), kb > 0 || kk > 0);
    wgmma::commit_group();
    wgmma::wait_group<1>();
    if (kb > 0 && leader) mbarrier::arrive(s.empty(prev));
    prev = ring.index;
    ring.advance();
  }
  wgmma::wait_group<0>();
  wgmma::fence_operand(d[0]);
  wgmma::fence_operand(d[1]);
}

// Epilogue (accumulator warpgroup, wgmma): the two 64-row halves are the two chunks.
template <uint32_t BlockN>
HEXEL_DEVICE void epilogue_wgmma(const float (&d)[2][BlockN / 2], uint16_t* c, uint32_t m,
                                 uint32_t n, uint32_t row0, uint32_t col0) {
  const uint32_t thread = threadIdx.x % 128;
#pragma unroll
  for (uint32_t h = 0; h < 2; ++h)
    store_chunk<WgmmaAccum<BlockN>>(c, m, n, row0, col0, thread, h, d[h]);
}

// Grid: (ceil(N / BlockN), ceil(M / 128)); block: Accum::kThreads; dynamic shared memory:
// Accum::Shape::kSmemBytes. Needs K > 0 and K % 8 == 0 (TMA row strides).
template <class Accum>
__global__ void __launch_bounds__(Accum::kThreads, 1)
    gemm_tile_kernel(const __grid_constant__ TensorMap a_map,
                     const __grid_constant__ TensorMap w_map, uint16_t* c, uint32_t m, uint32_t n,
                     uint32_t k) {
  using Shape = typename Accum::Shape;
  constexpr uint32_t kProducerWarp = 4;
  extern __shared__ unsigned char smem_raw[];
  const GemmTileSmem<Shape> s(smem_raw);
  const uint32_t warp = warp_index(), lane = threadIdx.x % 32;
  const uint32_t row0 = blockIdx.y * Shape::kBlockM, col0 = blockIdx.x * Shape::kBlockN;
  const uint32_t k_blocks = (k + Shape::kBlockK - 1) / Shape::kBlockK;

  if (threadIdx.x == 0) {
    tma::prefetch_map(&a_map);
    tma::prefetch_map(&w_map);
    for (uint32_t st = 0; st < Shape::kStages; ++st) {
      mbarrier::init(s.full(st), 1);
      mbarrier::init(s.empty(st), Accum::kEmptyArrivals);
    }
    mbarrier::init(s.accum_full(), 1);
    mbarrier::fence_init();
  }
  if constexpr (Accum::kTensorMemory) {
    if (warp == Accum::kMmaWarp) {
      tcgen05::alloc(smem_addr(s.tmem_slot()), Accum::kTmemColumns);
      tcgen05::relinquish_alloc_permit();
    }
    tcgen05::fence_before_thread_sync();
  }
  __syncthreads();

  if constexpr (Accum::kTensorMemory) {
    tcgen05::fence_after_thread_sync();
    const uint32_t tmem = *s.tmem_slot();
    if (warp == kProducerWarp) {
      if (lane == 0) produce_tiles(s, &a_map, &w_map, row0, col0, k_blocks);
    } else if (warp == Accum::kMmaWarp) {
      if (lane == 0) issue_tcgen05<Shape::kBlockN>(s, tmem, k_blocks);
    } else {
      epilogue_tcgen05<Shape::kBlockN>(s, tmem, c, m, n, row0, col0);
    }
    // Every tcgen05.ld has completed (wait::ld) before the allocating warp frees the columns.
    tcgen05::fence_before_thread_sync();
    __syncthreads();
    if (warp == Accum::kMmaWarp) {
      tcgen05::fence_after_thread_sync();
      tcgen05::dealloc(tmem, Accum::kTmemColumns);
    }
  } else {
    if (warp == kProducerWarp) {
      if (lane == 0) produce_tiles(s, &a_map, &w_map, row0, col0, k_blocks);
    } else {
      float d[2][Shape::kBlockN / 2];
      accumulate_wgmma<Shape::kBlockN>(s, d, k_blocks);
      epilogue_wgmma<Shape::kBlockN>(d, c, m, n, row0, col0);
    }
  }
}

}  // namespace hexel::examples
#endif  // __CUDACC__
