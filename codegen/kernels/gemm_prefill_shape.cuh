#pragma once
// The prefill GEMM's shape, shared by its Hopper (gemm_prefill.cuh, wgmma) and Blackwell
// (gemm_prefill_sm100.cuh, tcgen05) kernels and callable on the host, where
// test/codegen/prefill_epilogue_sm100_test.cpp checks the index math against the tcgen05 model:
// the tile, stage and epilogue-buffer sizes, what each epilogue makes of a tile, and the order in
// which a persistent CTA visits the tiles. Compiles under NVRTC, nvcc and a host C++ compiler.
#include "hexel/config.cuh"
#include "hexel/tma.cuh"

namespace telos_kernels {

struct PrefillGemm {
  static constexpr unsigned kBlockM = 128;
  static constexpr unsigned kBlockN = 256;
  static constexpr unsigned kBlockK = 64;  // one 128-byte swizzle row of bf16
  static constexpr unsigned kStages = 4;   // at most (stages_for)
  // Warpgroups that write the outputs (Hopper: 64 rows each; Blackwell: 128 columns each), after
  // the one that loads (and on Blackwell issues the MMAs).
  static constexpr unsigned kConsumers = 2;
  static constexpr unsigned kThreads = 128 * (1 + kConsumers);
  static constexpr unsigned kGroupM = 16;  // tiles along M visited together, for L2 reuse
  static constexpr unsigned kABytes = hexel::tma::tile_bytes<unsigned short>(kBlockK, kBlockM);
  // Outputs leave in chunks of 64 rows x 128 bytes (128B-swizzled), one TMA box: 64 bf16 columns
  // for a store, 32 f32 columns for the residual reduction. Four buffers: on Hopper two per
  // consumer, so the TMA drains one while the next chunk is written; on Blackwell one per 64 rows
  // of each consumer.
  static constexpr unsigned kChunkBytes = 64 * 128;
  static constexpr unsigned kEpilogueBytes = kConsumers * 2 * kChunkBytes;
  // Shared memory: the stages (A, then w_rows W rows), the epilogue buffers, each stage's full
  // and empty barriers; +1024 to align the base to the 128B swizzle repeat, which keeps the
  // descriptors' base offsets zero. w_rows: kBlockN, or more where one box of whole slot-image
  // tiles covers the tile's rows (prefill_gemm_body's kCover); as many stages as fit a CTA's
  // 227 KB, at most kStages (4 of 256 rows, 3 of 288). raw_row_bytes: an e4m3 weight's raw rows
  // (gemm_e4m3.cuh), each stage then also holding w_rows of them and a third barrier (3 stages of
  // 256 rows). The host's statement of the bytes: kernel_plan.hpp, prefill_gemm_smem.
  // max_stages: kStages, or a CTA pair's kPairMaxStages.
  HEXEL_HOST_DEVICE static constexpr unsigned stages_for(unsigned w_rows,
                                                         unsigned raw_row_bytes = 0,
                                                         unsigned max_stages = kStages) {
    const unsigned fit = (227 * 1024 - kEpilogueBytes - 1024) /
                         (kABytes + w_rows * (128 + raw_row_bytes) + 16 + (raw_row_bytes ? 8 : 0));
    return fit < max_stages ? fit : max_stages;
  }
  // A CTA pair's stages (PrefillPairTiling): on tcgen05 a stage is 128 A rows and half the tile's
  // 256 W rows, 32 KB, so 6 fit where 4 of 48 KB do.
  static constexpr unsigned kPairMaxStages = 6;
};

// What an epilogue makes of a tile's W_ROWS W rows (kBlockN; PrefillW8a8Gemm::kBlockN for the
// W8A8 GEMM): kOutCols output columns (SwiGLU pairs a gate row with its up row, so half as many),
// kChunkCols of them in a 128-byte chunk row (64 bf16, 32 f32), the W rows split into a gate and an
// up half (kSplitW), the f32 outputs added into the residual stream x rather than stored
// (kResidual). The epilogues (gemm_prefill.cuh) add their arithmetic.
template <unsigned W_ROWS>
struct StoreBf16ShapeOf {
  static constexpr unsigned kOutCols = W_ROWS, kChunkCols = 64;
  static constexpr bool kSplitW = false, kResidual = false;
};
template <unsigned W_ROWS>
struct SwiGluShapeOf {
  static constexpr unsigned kOutCols = W_ROWS / 2, kChunkCols = 64;
  static constexpr bool kSplitW = true, kResidual = false;
};
template <unsigned W_ROWS>
struct ResidualShapeOf {
  static constexpr unsigned kOutCols = W_ROWS, kChunkCols = 32;
  static constexpr bool kSplitW = false, kResidual = true;
};
using StoreBf16Shape = StoreBf16ShapeOf<PrefillGemm::kBlockN>;
using SwiGluShape = SwiGluShapeOf<PrefillGemm::kBlockN>;
using ResidualShape = ResidualShapeOf<PrefillGemm::kBlockN>;

// One GEMM instance's tiling, from its template arguments: M x N outputs over K, the epilogue's
// shape, the weight's source (W_BH, W_BOX: gemm_prefill.cuh, load_weight_rows). kCover (W_BOX >
// kBlockN): one box of W_BOX rows of whole slot-image tiles covers a tile's kBlockN W rows
// (gemm_prefill.cuh, prefill_gemm_body), so a stage holds W_BOX rows and fewer stages fit.
// RAW_ROW_BYTES: an e4m3 weight's raw rows a stage holds after its bf16 rows (gemm_e4m3.cuh; 0
// for a bf16 weight). Enumerators rather than static constexpr variables: NVRTC emits
// every static constexpr variable of a class it instantiates as a global of the module, one set
// per kernel instance.
template <int M, int N, int K, class Shape, unsigned W_BH, unsigned W_BOX,
          unsigned RAW_ROW_BYTES = 0>
struct PrefillTiling {
  enum : unsigned {
    kBlockM = PrefillGemm::kBlockM,
    kBlockN = PrefillGemm::kBlockN,
    kBlockK = PrefillGemm::kBlockK,
    kABytes = PrefillGemm::kABytes,
    kCover = W_BH > 0 && W_BOX > PrefillGemm::kBlockN,
    kWRows = kCover ? W_BOX : PrefillGemm::kBlockN,
    kStages = PrefillGemm::stages_for(kWRows, RAW_ROW_BYTES),
    kStageBytes = PrefillGemm::kABytes + kWRows * (128 + RAW_ROW_BYTES),
    kTilesM = (M + PrefillGemm::kBlockM - 1) / PrefillGemm::kBlockM,
    kTilesN = (N + Shape::kOutCols - 1) / Shape::kOutCols,
    kUnits = kTilesM * kTilesN,
    kKBlocks = (K + PrefillGemm::kBlockK - 1) / PrefillGemm::kBlockK,
  };
  static_assert(M > 0 && N % 8 == 0 && K % 8 == 0, "TMA rows are multiples of 16 bytes");
  static_assert(!kCover || (!Shape::kSplitW && PrefillGemm::kBlockN % 8 == 0 && W_BH % 8 == 0),
                "a covering box: one half, whole swizzle repeats");
  static_assert(kStages >= 2, "a ring of at least two stages");
  static_assert(RAW_ROW_BYTES == 0 || W_BH == 0, "an e4m3 weight comes through its own 2D map");

  // Where tile tn's W rows start in its stage: at 0, or under a covering box (tn · kBlockN) % W_BH
  // rows in: whole 8-row swizzle repeats, so the operand descriptors' base offset stays 0.
  static HEXEL_HOST_DEVICE constexpr unsigned w_offset(unsigned tn) {
    if constexpr (kCover != 0)
      return tn * PrefillGemm::kBlockN % W_BH * 128;
    else
      return 0;
  }
};

// The tiling of the CTA-pair prefill GEMM (gemm_prefill_sm100.cuh, PrefillCtas<2>), with
// PrefillTiling's names: a tile of 256 token rows (each CTA of the pair its own 128: kBlockM is a
// CTA's) by kBlockN W rows, a stage of the CTA's 128 A rows and W_ROWS W rows (tcgen05: its half of
// the tile, 128; the Hopper twin: the whole tile, both halves multicast), the weight's own 2D map
// (no slot image, no covering box).
template <int M, int N, int K, class Shape, unsigned W_ROWS>
struct PrefillPairTiling {
  enum : unsigned {
    kBlockM = PrefillGemm::kBlockM,
    kPairM = 2 * PrefillGemm::kBlockM,
    kBlockN = PrefillGemm::kBlockN,
    kBlockK = PrefillGemm::kBlockK,
    kABytes = PrefillGemm::kABytes,
    kCover = 0,
    kWRows = W_ROWS,
    kStages = PrefillGemm::stages_for(W_ROWS, 0, PrefillGemm::kPairMaxStages),
    kStageBytes = PrefillGemm::kABytes + W_ROWS * 128,
    kTilesM = (M + kPairM - 1) / kPairM,
    kTilesN = (N + Shape::kOutCols - 1) / Shape::kOutCols,
    kUnits = kTilesM * kTilesN,
    kKBlocks = (K + PrefillGemm::kBlockK - 1) / PrefillGemm::kBlockK,
  };
  static_assert(M > 0 && N % 8 == 0 && K % 8 == 0, "TMA rows are multiples of 16 bytes");
  static_assert(W_ROWS == PrefillGemm::kBlockN || 2 * W_ROWS == PrefillGemm::kBlockN,
                "a stage holds the tile's W rows or the CTA's half of them");
  static_assert(kStages >= 2, "a ring of at least two stages");
  static HEXEL_HOST_DEVICE constexpr unsigned w_offset(unsigned) { return 0; }
};

// The W8A8 prefill GEMM's shape (gemm_w8a8.cuh): e4m3 activations and weights, a 128 x 128 tile
// (each consumer warpgroup m64n128: 64 accumulators a thread and 64 more for a K block's partial
// sums, where m64n256 would need 256), one K block of 128 e4m3 a stage (a 128-byte swizzle row,
// one scale block), the bf16 GEMM's producer warpgroup, consumers, epilogue buffers and tile order.
// A block of quantize_rows_e4m3 (gemm_w8a8.cuh): one (row, K block) a warp.
enum : unsigned { kQuantizeWarps = 8 };

struct PrefillW8a8Gemm {
  // Enumerators: NVRTC emits a static constexpr variable as a global of every module
  // (PrefillTiling).
  enum : unsigned {
    kBlockM = 128,
    kBlockN = 128,
    kBlockK = 128,
    kABytes = kBlockM * kBlockK,
    kStageBytes = kABytes + kBlockN * kBlockK,
    // As many stages as fit a CTA's 227 KB beside the epilogue buffers, two barriers each and the
    // 1024 bytes of alignment: 6.
    kStages = (227 * 1024 - PrefillGemm::kEpilogueBytes - 1024) / (kStageBytes + 16),
  };
  // The dynamic shared memory a launch asks for (PrefillSmem's layout).
  HEXEL_HOST_DEVICE static constexpr unsigned smem() {
    return 1024 + kStages * (kStageBytes + 16) + PrefillGemm::kEpilogueBytes;
  }
};

// A W8A8 instance's tiling, with PrefillTiling's names (the producer, PrefillSmem and the epilogue
// read them): M x N outputs over K, the epilogue's Shape of PrefillW8a8Gemm::kBlockN W rows.
template <int M, int N, int K, class Shape>
struct PrefillW8a8Tiling {
  using G = PrefillW8a8Gemm;
  enum : unsigned {
    kBlockM = G::kBlockM,
    kBlockN = G::kBlockN,
    kBlockK = G::kBlockK,
    kABytes = G::kABytes,
    kWRows = G::kBlockN,
    kStages = G::kStages,
    kStageBytes = G::kStageBytes,
    kTilesM = (M + G::kBlockM - 1) / G::kBlockM,
    kTilesN = (N + Shape::kOutCols - 1) / Shape::kOutCols,
    kUnits = kTilesM * kTilesN,
    kKBlocks = (K + G::kBlockK - 1) / G::kBlockK,
  };
  static_assert(M > 0 && N % 8 == 0 && K % 16 == 0, "TMA rows are multiples of 16 bytes");
  static_assert(!Shape::kSplitW || N % 64 == 0,
                "SwiGLU: a tile's 64 up rows lie in one 128-row scale block");
  static_assert(kStages >= 2, "a ring of at least two stages");
};

// Linear work index -> (tile m, tile n), kGroupM tiles along M per sweep over N, so the CTAs
// running at one time share A rows and W columns in L2.
HEXEL_HOST_DEVICE constexpr void prefill_tile_coords(unsigned t, unsigned tiles_m, unsigned tiles_n,
                                                     unsigned& tm, unsigned& tn) {
  const unsigned per_group = PrefillGemm::kGroupM * tiles_n;
  const unsigned first_m = (t / per_group) * PrefillGemm::kGroupM;
  const unsigned left = tiles_m - first_m;
  const unsigned rows = left < PrefillGemm::kGroupM ? left : PrefillGemm::kGroupM;
  const unsigned r = t % per_group;
  tm = first_m + r % rows;
  tn = r / rows;
}

}  // namespace telos_kernels
