// The proof GEMM: C = A * B^T in bf16 with f32 accumulation, written only on Hexel.
// A is M x K row-major (activations), B is N x K row-major (a Linear layer's weight), C is
// M x N row-major. Persistent, warp-specialised: warpgroup 0 is the TMA producer (one thread
// issues, registers lowered to 40), warpgroups 1 and 2 are wgmma consumers (registers raised to
// 232), each owning 64 rows of a 128 x 256 output tile, which they write with stmatrix into
// shared memory and hand to asynchronous TMA stores, so the store overlaps the next tile. A ring of
// `kStages` shared-memory stages with full/empty mbarriers connects them. With ClusterM = 2, the
// two CTAs of a cluster take vertically adjacent tiles that share B: each loads its own A and half
// of B, multicast to both, and a stage is refilled only once the consumers of both CTAs have
// released it. The Telos prefill GEMM (codegen/) starts from this. Compiles under nvcc and NVRTC;
// the host launcher is in gemm_bf16_launch.h.
#pragma once
#include "hexel/cluster.cuh"
#include "hexel/math.cuh"
#include "hexel/matrix_ldst.cuh"
#include "hexel/mbarrier.cuh"
#include "hexel/sync.cuh"
#include "hexel/tma.cuh"
#include "hexel/wgmma.cuh"

namespace hexel::examples {

struct GemmBf16 {
  static constexpr uint32_t kBlockM = 128;
  static constexpr uint32_t kBlockN = 256;
  static constexpr uint32_t kBlockK = 64;  // one 128-byte swizzle row of bf16
  static constexpr uint32_t kStages = 4;
  static constexpr uint32_t kConsumers = 2;  // warpgroups, 64 rows each
  static constexpr uint32_t kThreads = 128 * (1 + kConsumers);
  static constexpr uint32_t kGroupM = 16;  // tiles along M visited together, for L2 reuse
  static constexpr uint32_t kABytes = tma::tile_bytes<uint16_t>(kBlockK, kBlockM);
  static constexpr uint32_t kBBytes = tma::tile_bytes<uint16_t>(kBlockK, kBlockN);
  static constexpr uint32_t kStageBytes = kABytes + kBBytes;
  // Epilogue: each consumer stages its 64 x 256 result in 64 x 64 chunks (128 bytes per row,
  // 128B-swizzled), double-buffered, and TMA stores them while it goes on with the next tile.
  // Shared memory: stages, epilogue buffers, then full[] and empty[] barriers; +1024 to align
  // the base to the 128B swizzle repeat (1024 bytes), which keeps descriptor base offsets zero.
  static constexpr uint32_t kChunkCols = 64;
  static constexpr uint32_t kChunkBytes = 64 * kChunkCols * 2;
  static constexpr uint32_t kEpilogueBytes = kConsumers * 2 * kChunkBytes;
  static constexpr uint32_t kSmemBytes =
      kStages * kStageBytes + kEpilogueBytes + 2 * kStages * 8 + 1024;
};

#if defined(__CUDACC__)

// Maps a linear work index to (m, n) work coordinates, visiting kGroupM rows of work units per
// column sweep, so the CTAs running at one time share A rows and B columns in L2.
HEXEL_DEVICE void gemm_tile_coords(uint32_t t, uint32_t tiles_m, uint32_t tiles_n, uint32_t& tm,
                                   uint32_t& tn) {
  const uint32_t per_group = GemmBf16::kGroupM * tiles_n;
  const uint32_t first_m = (t / per_group) * GemmBf16::kGroupM;
  const uint32_t rows = min(tiles_m - first_m, GemmBf16::kGroupM);
  const uint32_t r = t % per_group;
  tm = first_m + r % rows;
  tn = r / rows;
}

template <uint32_t ClusterM>
__global__ void __launch_bounds__(GemmBf16::kThreads, 1)
    gemm_bf16_kernel(const __grid_constant__ TensorMap a_map,
                     const __grid_constant__ TensorMap b_map,
                     const __grid_constant__ TensorMap c_map, uint32_t m, uint32_t n, uint32_t k) {
  using G = GemmBf16;
  extern __shared__ unsigned char smem_raw[];
  const uint32_t base = (smem_addr(smem_raw) + 1023u) & ~1023u;
  const uint32_t epilogue = base + G::kStages * G::kStageBytes;
  const uint32_t full = epilogue + G::kEpilogueBytes;
  const uint32_t empty = full + G::kStages * 8;
  auto a_stage = [&](uint32_t s) { return base + s * G::kStageBytes; };
  auto b_stage = [&](uint32_t s) { return base + s * G::kStageBytes + G::kABytes; };

  static_assert(ClusterM == 1 || ClusterM == 2, "clusters of 1 or 2 CTAs along M");
  // Work unit: ClusterM vertically adjacent tiles, one per CTA of the cluster.
  const uint32_t tiles_m = (m + G::kBlockM - 1) / G::kBlockM;
  const uint32_t units_m = (tiles_m + ClusterM - 1) / ClusterM;
  const uint32_t tiles_n = (n + G::kBlockN - 1) / G::kBlockN;
  const uint32_t units = units_m * tiles_n;
  const uint32_t k_blocks = (k + G::kBlockK - 1) / G::kBlockK;
  const uint32_t wg = warp_index() / 4;
  const uint32_t rank = ClusterM > 1 ? cluster::cta_rank() : 0;
  const uint32_t first_unit = blockIdx.x / ClusterM, unit_stride = gridDim.x / ClusterM;

  if (threadIdx.x == 0) {
    tma::prefetch_map(&a_map);
    tma::prefetch_map(&b_map);
    tma::prefetch_map(&c_map);
    for (uint32_t s = 0; s < G::kStages; ++s) {
      mbarrier::init(full + 8 * s, 1);
      // One arrival per consumer warp of every CTA that writes into this stage.
      mbarrier::init(empty + 8 * s, G::kConsumers * 4 * ClusterM);
    }
    mbarrier::fence_init();
  }
  if constexpr (ClusterM > 1)
    cluster::sync();  // peers' barriers exist before any multicast
  else
    __syncthreads();

  if (wg == 0) {
    setmaxnreg_dec<40>();
    if (threadIdx.x == 0) {
      mbarrier::StageRing<G::kStages> ring;
      for (uint32_t u = first_unit; u < units; u += unit_stride) {
        uint32_t um, tn;
        gemm_tile_coords(u, units_m, tiles_n, um, tn);
        const uint32_t tm = um * ClusterM + rank;
        for (uint32_t kb = 0; kb < k_blocks; ++kb) {
          mbarrier::wait_parity(empty + 8 * ring.index, ring.phase ^ 1u);
          const uint32_t bar = full + 8 * ring.index;
          // The whole stage lands here: our A, plus B from every CTA of the cluster.
          mbarrier::arrive_expect_tx(bar, G::kStageBytes);
          tma::load(a_stage(ring.index), &a_map, bar, kb * G::kBlockK, tm * G::kBlockM);
          if constexpr (ClusterM == 1) {
            tma::load(b_stage(ring.index), &b_map, bar, kb * G::kBlockK, tn * G::kBlockN);
          } else {
            constexpr uint32_t rows = G::kBlockN / ClusterM;
            tma::load_multicast(b_stage(ring.index) + rank * rows * 128, &b_map, bar,
                                (1u << ClusterM) - 1u, kb * G::kBlockK,
                                tn * G::kBlockN + rank * rows);
          }
          ring.advance();
        }
      }
    }
  } else {
    setmaxnreg_inc<232>();
    const uint32_t cw = wg - 1;  // consumer index: rows 64*cw .. 64*cw+63 of the tile
    const uint32_t warp = warp_index() % 4;
    const uint32_t lane = threadIdx.x % 32;
    const bool leader = lane == 0;
    const bool wg_leader = threadIdx.x % 128 == 0;
    mbarrier::StageRing<G::kStages> ring;
    float d[G::kBlockN / 2];
    // Releasing a stage: every CTA whose producer multicasts into it must hear about it.
    auto release = [&](uint32_t stage) {
      if (!leader) return;
      if constexpr (ClusterM == 1)
        mbarrier::arrive(empty + 8 * stage);
      else
        mbarrier::arrive_remote_ranks<ClusterM>(empty + 8 * stage);
    };
    for (uint32_t u = first_unit; u < units; u += unit_stride) {
      uint32_t um, tn;
      gemm_tile_coords(u, units_m, tiles_n, um, tn);
      const uint32_t tm = um * ClusterM + rank;
      uint32_t prev = 0;
      for (uint32_t kb = 0; kb < k_blocks; ++kb) {
        mbarrier::wait_parity(full + 8 * ring.index, ring.phase);
        const auto a = wgmma::kmajor_desc(a_stage(ring.index) + cw * 64 * 128, Swizzle::B128);
        const auto b = wgmma::kmajor_desc(b_stage(ring.index), Swizzle::B128);
        wgmma::fence();
#pragma unroll
        for (uint32_t kk = 0; kk < G::kBlockK / 16; ++kk)
          wgmma::mma_ss<G::kBlockN>(d, a.advanced(kk * 32), b.advanced(kk * 32), kb > 0 || kk > 0);
        wgmma::commit_group();
        // Keep one group in flight: when it is the only one left, the previous stage's
        // operands have been read and the stage can go back to the producer.
        wgmma::wait_group<1>();
        if (kb > 0) release(prev);
        prev = ring.index;
        ring.advance();
      }
      wgmma::wait_group<0>();
      wgmma::fence_operand(d);
      if (k_blocks > 0) release(prev);

      // Epilogue, chunk by chunk. Per 16 columns (n-blocks j, j+1) one stmatrix.x4 writes
      // the warp's 16 rows: matrices (rows 0-7, j), (rows 8-15, j), (0-7, j+1), (8-15, j+1),
      // lane l addressing row l % 8 of matrix l / 8.
      const uint32_t quad = lane / 8, r_in = 16 * warp + 8 * (quad % 2) + lane % 8;
#pragma unroll
      for (uint32_t ch = 0; ch < G::kBlockN / G::kChunkCols; ++ch) {
        const uint32_t buf = epilogue + (cw * 2 + ch % 2) * G::kChunkBytes;
        // The store that last read this buffer (two chunks ago) must be done reading it.
        if (wg_leader) tma::wait_group_read<1>();
        named_barrier_sync(1 + cw, 128);
#pragma unroll
        for (uint32_t q = 0; q < G::kChunkCols / 16; ++q) {
          const uint32_t j = ch * (G::kChunkCols / 8) + 2 * q;
          const uint32_t frag[4] = {
              pack_bf16x2(d[4 * j], d[4 * j + 1]), pack_bf16x2(d[4 * j + 2], d[4 * j + 3]),
              pack_bf16x2(d[4 * j + 4], d[4 * j + 5]), pack_bf16x2(d[4 * j + 6], d[4 * j + 7])};
          const uint32_t col_bytes = 2 * (16 * q + 8 * (quad / 2));
          stmatrix<4>(buf + swizzled_offset(r_in * 128 + col_bytes, Swizzle::B128), frag);
        }
        fence_proxy_async_smem();  // stmatrix writes, then the TMA store reads: proxy switch
        named_barrier_sync(1 + cw, 128);
        if (wg_leader) {
          tma::store(&c_map, buf, tn * G::kBlockN + ch * G::kChunkCols, tm * G::kBlockM + cw * 64);
          tma::commit_group();
        }
      }
    }
    if (wg_leader) tma::wait_group<0>();
  }
  // No CTA may exit while a peer can still multicast into its shared memory or arrive on its
  // barriers.
  if constexpr (ClusterM > 1) cluster::sync();
}

#endif  // __CUDACC__

}  // namespace hexel::examples
