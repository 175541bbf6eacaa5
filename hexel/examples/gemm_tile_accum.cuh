// The tile GEMM's shape (gemm_tile.cuh) and its two accumulators: where each accumulator element
// of a 128 x BlockN output tile lives, and which (row, column) of the tile register `reg` of
// chunk `chunk` holds in thread `thread` of the accumulator warpgroup when the epilogue reads it.
// Constexpr and host-callable: test/hexel/gemm_tile_epilogue_test.cpp checks these maps against
// the tcgen05 model (hexel/tcgen05_model.h) and the wgmma fragment layout, element by element.
// Compiles under nvcc, NVRTC and a host C++ compiler.
#pragma once
#include "hexel/config.cuh"
#include "hexel/swizzle.cuh"
#include "hexel/tcgen05_accum.cuh"
#include "hexel/wgmma_desc.cuh"

namespace hexel::examples {

// A 128 x BlockN tile of C = A · Wᵀ, K in blocks of 64 bf16 (one 128-byte swizzle row), kStages
// stages of A (128 x 64) and W (BlockN x 64), each written by one TMA box.
template <uint32_t BlockN>
struct GemmTileShape {
  static_assert(BlockN >= 32 && BlockN <= 256 && BlockN % 32 == 0,
                "tiles are 32 .. 256 columns wide, in steps of 32");
  static constexpr uint32_t kBlockM = 128;
  static constexpr uint32_t kBlockN = BlockN;
  static constexpr uint32_t kBlockK = 64;
  static constexpr uint32_t kStages = 4;
  static constexpr uint32_t kABytes = kBlockM * kBlockK * 2;
  static constexpr uint32_t kWBytes = kBlockN * kBlockK * 2;
  static constexpr uint32_t kStageBytes = kABytes + kWBytes;
  // Shared memory: the stages from a 1024-byte-aligned base (the 128B swizzle repeat, so
  // descriptor base offsets stay 0; kABytes and kWBytes are multiples of 1024), then full[] and
  // empty[] barriers, the accumulator barrier and the Tensor Memory address word; +1024 for the
  // alignment.
  static constexpr uint32_t kBarrierBytes = (2 * kStages + 1) * 8;
  static constexpr uint32_t kSmemBytes = kStages * kStageBytes + kBarrierBytes + 8 + 1024;
};

// One element of a tile: row (M) and column (N), from the tile's corner.
struct TileElement {
  uint32_t row = 0;
  uint32_t col = 0;
  friend constexpr bool operator==(const TileElement&, const TileElement&) = default;
};

// Blackwell: tcgen05.mma (kind::f16, cta_group::1, M = 128, N = BlockN) accumulates in Tensor
// Memory (hexel/tcgen05_accum.cuh, Bf16Accum: the descriptors, the K loop and the load addresses
// every such kernel shares), f32 element (row, n) in lane row, column base + n (PTX ISA, "Data
// Path Layout Organization", Layout D). The epilogue's warp w (0..3) reaches lanes 32w .. 32w + 31
// only ("Tensor Memory: Access restrictions"), and loads the accumulator in chunks of 32 columns
// with tcgen05.ld .32x32b.x32 ("Matrix fragments for shape .32x32b"): thread t of the
// warpgroup gets lane t, register r column 32 chunk + r. Hence element (t, 32 chunk + r).
template <uint32_t BlockN>
struct Tcgen05Accum {
  using Shape = GemmTileShape<BlockN>;
  using Mma = tcgen05::Bf16Accum<BlockN>;
  static_assert((BlockN & (BlockN - 1)) == 0, "Tensor Memory is allocated in powers of two");
  static constexpr bool kTensorMemory = true;
  static constexpr uint32_t kThreads = 192;  // accumulator warpgroup, producer warp, MMA warp
  static constexpr uint32_t kMmaWarp = 5;
  static constexpr uint32_t kEmptyArrivals = 1;     // the MMA thread's tcgen05.commit
  static constexpr uint32_t kTmemColumns = BlockN;  // one f32 column per n
  static constexpr uint32_t kChunkRegs = Mma::kLoadColumns;  // .32x32b.x32
  static constexpr uint32_t kChunks = BlockN / kChunkRegs;
  static constexpr uint32_t kVec = 8;  // registers 8g .. 8g + 7: 8 adjacent columns of one row
  static constexpr tcgen05::InstrDesc kInstrDesc = Mma::kInstrDesc;

  // K slice kk (16 elements, 32 bytes) of a 128B-swizzled K-major stage tile at `tile`.
  static HEXEL_HOST_DEVICE constexpr tcgen05::SmemDesc operand_desc(uint32_t tile, uint32_t kk) {
    return Mma::operand_desc(tile, kk);
  }
  // The Tensor Memory address warp `warp` of the accumulator warpgroup loads chunk `chunk` from.
  static HEXEL_HOST_DEVICE constexpr uint32_t chunk_taddr(uint32_t tmem_base, uint32_t warp,
                                                          uint32_t chunk) {
    return Mma::ld_taddr(tmem_base, warp, chunk * kChunkRegs);
  }
  static HEXEL_HOST_DEVICE constexpr TileElement element(uint32_t thread, uint32_t chunk,
                                                         uint32_t reg) {
    return {thread, chunk * kChunkRegs + reg};
  }
};

// Hopper: the accumulator warpgroup issues two wgmma m64nBlockNk16 per K slice, one per 64-row
// half, into registers: chunk h holds rows 64h .. 64h + 63. In each, thread t = 32w + l holds
// for n-block j registers 4j, 4j + 1 (row 16w + l / 4, columns 8j + 2 (l % 4) + {0, 1}) and
// 4j + 2, 4j + 3 (the same columns, 8 rows down) (PTX ISA, "Asynchronous Warpgroup Level Matrix
// Multiply-Accumulate: Register Fragments", matrix D of .m64nNk16).
template <uint32_t BlockN>
struct WgmmaAccum {
  using Shape = GemmTileShape<BlockN>;
  static_assert(BlockN <= 128, "two m64 halves of BlockN / 2 registers each fit one warpgroup");
  static constexpr bool kTensorMemory = false;
  static constexpr uint32_t kThreads = 160;      // accumulator warpgroup, producer warp
  static constexpr uint32_t kEmptyArrivals = 4;  // one per accumulator warp
  static constexpr uint32_t kChunkRegs = BlockN / 2;
  static constexpr uint32_t kChunks = 2;
  static constexpr uint32_t kVec = 2;  // registers 2g, 2g + 1: 2 adjacent columns of one row

  static HEXEL_HOST_DEVICE constexpr wgmma::SmemDesc operand_desc(uint32_t tile, uint32_t kk) {
    return wgmma::kmajor_desc(tile, Swizzle::B128).advanced(32 * kk);
  }
  static HEXEL_HOST_DEVICE constexpr TileElement element(uint32_t thread, uint32_t chunk,
                                                         uint32_t reg) {
    const uint32_t warp = thread / 32, lane = thread % 32;
    return {64 * chunk + 16 * warp + lane / 4 + 8 * (reg / 2 % 2),
            8 * (reg / 4) + 2 * (lane % 4) + reg % 2};
  }
};

}  // namespace hexel::examples
