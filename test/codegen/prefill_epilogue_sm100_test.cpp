// The Blackwell prefill GEMM's index math on the CPU (codegen/kernels/gemm_prefill_sm100.cuh),
// against the tcgen05 model (hexel/tcgen05_model.h): the MMA's instruction and operand
// descriptors, and, for each epilogue, a walk of whole GEMMs through the functions the kernel
// calls. The walk visits the tiles as the persistent CTAs of the lowering's grid do, alternating
// the two Tensor Memory accumulators; per tile every epilogue thread loads its registers (which
// cells: the model's .32x32b fragments; which accumulator elements they hold: the model's Layout
// D), writes them to its chunk buffer, and each buffer goes to the output as a TMA box (the bytes
// of the box's row-major image read from their 128B-swizzled places). Each output element must
// come from the right accumulator element, once: bf16 stores, the residual's f32 adds into x, and
// SwiGLU's gate and up from W rows j and I + j. The Hopper twin's map (PrefillTwinEpilogue, over
// wgmma's fragment layout) must fill every chunk buffer with the bytes the tcgen05 epilogue does.
#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "codegen/kernel_plan.hpp"
#include "codegen/kernels/gemm_prefill_sm100.cuh"
#include "examples/gemm_tile_accum.cuh"
#include "hexel/swizzle.cuh"
#include "hexel/tcgen05_model.h"

namespace telos_kernels {
namespace {

namespace model = hexel::tcgen05::model;
using hexel::Swizzle;
using G = PrefillGemm;

constexpr unsigned kThreads = G::kThreads;
constexpr unsigned kTile = G::kBlockN;  // accumulator columns

// Accumulator element (row, n) of a tile, from a Tensor Memory cell: Layout D inverted by
// enumeration, for an accumulator at column `base`.
std::map<std::pair<unsigned, unsigned>, std::pair<unsigned, unsigned>> layout_d(unsigned base) {
  std::map<std::pair<unsigned, unsigned>, std::pair<unsigned, unsigned>> held;
  for (unsigned row = 0; row < G::kBlockM; ++row)
    for (unsigned n = 0; n < kTile; ++n) {
      const model::TmemCell c =
          model::accumulator_cell(hexel::tcgen05::tmem_addr(0, base), 128, kTile, row, n);
      held[{c.lane, c.column}] = {row, n};
    }
  return held;
}

// A GEMM's product P = A · Wᵀ as the walk sees it: a distinct value per (row m, W row w).
float product(unsigned m, unsigned w) {
  return static_cast<float>(m) * 1.0e5f + static_cast<float>(w) + 0.25f;
}

// One chunk buffer's bytes, as the accumulator element each holds (tile row · kTile + accumulator
// column; -1 unset), and the box its leader stores it to: warpgroup c and the leader's warp.
struct ChunkImage {
  std::vector<long> slot = std::vector<long>(G::kChunkBytes, -1);
  unsigned group = 0, leader_warp = 0;
};

// What the epilogue threads write into the chunk buffers, per accumulator (Tensor Memory column
// 0 or kTile) and chunk: the same for every tile, so found once through the model.
template <class Shape>
class TileImages {
 public:
  using E = PrefillEpilogueSm100<Shape>;
  explicit TileImages(unsigned base) : base_(base), held_(layout_d(base)) {
    for (unsigned ch = 0; ch < E::kChunks; ++ch) {
      std::map<unsigned, int> leaders, threads;
      for (unsigned warp = PrefillSm100::kFirstEpilogueWarp; warp < kThreads / 32; ++warp)
        for (unsigned lane = 0; lane < 32; ++lane) {
          const unsigned b = E::buffer(warp);
          ChunkImage& image = images_[{ch, b}];
          ++threads[b];
          if (E::leader(warp, lane)) {
            ++leaders[b];
            image.group = E::group(warp);
            image.leader_warp = warp;
          }
          for (unsigned pc = 0; pc < E::kPieces; ++pc) write_piece(image, warp, lane, ch, pc);
        }
      EXPECT_EQ(threads.size(), G::kEpilogueBytes / G::kChunkBytes);
      for (const auto& [b, count] : threads) {
        EXPECT_EQ(count, 64) << "threads of buffer " << b;
        EXPECT_EQ(leaders[b], 1) << "leaders of buffer " << b;
        EXPECT_LE(1 + b, 15u) << "a named barrier per buffer, 0 being __syncthreads";
      }
    }
  }
  // (chunk, buffer) -> image.
  const std::map<std::pair<unsigned, unsigned>, ChunkImage>& images() const { return images_; }

 private:
  // The accumulator element thread (warp, lane) holds in register r of a load at column `col`.
  std::pair<unsigned, unsigned> load(unsigned warp, unsigned lane, unsigned col, unsigned r) {
    const unsigned taddr = PrefillAccum::ld_taddr(hexel::tcgen05::tmem_addr(0, base_), warp, col);
    const model::TmemCell cell = model::ld_32x32b_cell(warp, taddr, 32, lane, r);
    const auto it = held_.find({cell.lane, cell.column});
    EXPECT_NE(it, held_.end()) << "warp " << warp << " reads outside the accumulator";
    return it == held_.end() ? std::pair<unsigned, unsigned>{} : it->second;
  }

  // Thread (warp, lane)'s piece pc of chunk ch: registers from Tensor Memory, each at its byte
  // offset in the buffer, in the 16-byte stores of kVecRegs registers the kernel issues.
  void write_piece(ChunkImage& image, unsigned warp, unsigned lane, unsigned ch, unsigned pc) {
    const unsigned c = E::group(warp), col = E::acc_col(c, ch, pc);
    for (unsigned r = 0; r < 32; ++r) {
      const auto [row, n] = load(warp, lane, col, r);
      ASSERT_EQ(row, E::row(warp, lane));
      ASSERT_EQ(n, E::out_col(c, ch, pc, r)) << "accumulator column of the output's";
      if constexpr (Shape::kSplitW) {
        const auto [up_row, up_n] = load(warp, lane, col + E::kUpOffset, r);
        ASSERT_EQ(up_row, row);
        ASSERT_EQ(up_n, n + E::kUpOffset) << "the up column pairs with the gate column";
      }
      const unsigned first = r / E::kVecRegs * E::kVecRegs;
      const unsigned vec = E::chunk_offset(warp, lane, pc, first);
      ASSERT_EQ(vec % 16, 0u);
      ASSERT_EQ(E::chunk_offset(warp, lane, pc, r), vec + (r - first) * E::kElemBytes);
      const unsigned at = hexel::swizzled_offset(E::chunk_offset(warp, lane, pc, r), Swizzle::B128);
      ASSERT_LE(at + E::kElemBytes, G::kChunkBytes);
      for (unsigned byte = 0; byte < E::kElemBytes; ++byte) {
        ASSERT_EQ(image.slot[at + byte], -1) << "byte written twice";
        image.slot[at + byte] = static_cast<long>(row) * kTile + n;
      }
    }
  }

  unsigned base_;
  std::map<std::pair<unsigned, unsigned>, std::pair<unsigned, unsigned>> held_;
  std::map<std::pair<unsigned, unsigned>, ChunkImage> images_;
};

// What the walk found in one output element: how often it was written and what.
struct Written {
  int times = 0;
  float value = 0.f;  // store: P; residual: x after its adds; SwiGLU: the gate
  float up = 0.f;     // SwiGLU
};

template <class Shape>
class EpilogueWalk {
 public:
  using E = PrefillEpilogueSm100<Shape>;
  EpilogueWalk(unsigned m, unsigned n) : m_(m), n_(n), out_(std::size_t{m} * n) {
    for (std::size_t i = 0; i < out_.size(); ++i) out_[i].value = Shape::kResidual ? x0(i) : 0.f;
  }

  // Every tile, in the order of each persistent CTA of the lowering's grid, each CTA alternating
  // its two accumulators.
  void run(const TileImages<Shape>* images[PrefillSm100::kAccumulators]) {
    const unsigned tiles_m = (m_ + G::kBlockM - 1) / G::kBlockM;
    const unsigned tiles_n = (n_ + Shape::kOutCols - 1) / Shape::kOutCols;
    const int grid = telos::codegen::prefill_gemm_grid(static_cast<int>(m_), static_cast<int>(n_),
                                                       static_cast<int>(Shape::kOutCols));
    std::vector<int> visited(tiles_m * tiles_n, 0);
    for (int cta = 0; cta < grid; ++cta) {
      unsigned iteration = 0;
      for (unsigned u = cta; u < tiles_m * tiles_n; u += grid, ++iteration) {
        unsigned tm = 0, tn = 0;
        prefill_tile_coords(u, tiles_m, tiles_n, tm, tn);
        ASSERT_LT(tm, tiles_m);
        ASSERT_LT(tn, tiles_n);
        ++visited[tm * tiles_n + tn];
        for (const auto& [key, image] : images[iteration % PrefillSm100::kAccumulators]->images())
          store_box(image, E::box_col(tn, image.group, key.first),
                    E::box_row(tm, image.leader_warp), tm, tn);
      }
    }
    for (int v : visited) ASSERT_EQ(v, 1);
  }

  // Each output element written once, with the value of its accumulator elements.
  void expect_each_element_once() const {
    for (unsigned r = 0; r < m_; ++r)
      for (unsigned c = 0; c < n_; ++c) {
        const Written& w = out_[std::size_t{r} * n_ + c];
        ASSERT_EQ(w.times, 1) << "element (" << r << ", " << c << ")";
        if constexpr (Shape::kSplitW) {
          ASSERT_EQ(w.value, product(r, c)) << "gate of (" << r << ", " << c << ")";
          ASSERT_EQ(w.up, product(r, n_ + c)) << "up of (" << r << ", " << c << ")";
        } else if constexpr (Shape::kResidual) {
          ASSERT_EQ(w.value, x0(std::size_t{r} * n_ + c) + product(r, c)) << r << ", " << c;
        } else {
          ASSERT_EQ(w.value, product(r, c)) << "element (" << r << ", " << c << ")";
        }
      }
  }

 private:
  static float x0(std::size_t i) { return static_cast<float>(i % 977) * 0.5f - 100.f; }

  // The W row of accumulator column n of tile tn (the producer's stage: kBlockN rows, SwiGLU's
  // gate rows then its up rows, from row N on).
  unsigned w_row(unsigned tn, unsigned n) const {
    if constexpr (Shape::kSplitW)
      return n < E::kUpOffset ? tn * E::kUpOffset + n : n_ + tn * E::kUpOffset + n - E::kUpOffset;
    else
      return tn * kTile + n;
  }

  // The TMA: element (r, e) of the 64-row box at (col0, row0) is byte r · 128 + e · size of the
  // box's row-major image, read from its swizzled place; elements outside M x N are dropped.
  void store_box(const ChunkImage& image, unsigned col0, unsigned row0, unsigned tm, unsigned tn) {
    for (unsigned r = 0; r < 64; ++r)
      for (unsigned e = 0; e < Shape::kChunkCols; ++e) {
        const unsigned at = hexel::swizzled_offset(r * 128 + e * E::kElemBytes, Swizzle::B128);
        const long held = image.slot[at];
        ASSERT_NE(held, -1) << "box byte " << r * 128 + e * E::kElemBytes << " unwritten";
        for (unsigned byte = 1; byte < E::kElemBytes; ++byte)
          ASSERT_EQ(image.slot[at + byte], held);
        const unsigned m = tm * G::kBlockM + static_cast<unsigned>(held / kTile);
        const unsigned n = static_cast<unsigned>(held % kTile);
        ASSERT_EQ(m, row0 + r) << "the box row holds its tile row";
        if (row0 + r >= m_ || col0 + e >= n_) continue;
        Written& w = out_[std::size_t{row0 + r} * n_ + col0 + e];
        ++w.times;
        if constexpr (Shape::kSplitW) {
          w.value = product(m, w_row(tn, n));
          w.up = product(m, w_row(tn, n + E::kUpOffset));
        } else if constexpr (Shape::kResidual) {
          w.value += product(m, w_row(tn, n));  // the f32 reduction: x ← x + acc
        } else {
          w.value = product(m, w_row(tn, n));
        }
      }
  }

  unsigned m_, n_;
  std::vector<Written> out_;
};

template <class Shape>
void walk(const std::vector<std::pair<unsigned, unsigned>>& shapes) {
  const TileImages<Shape> first(0), second(kTile);
  if (::testing::Test::HasFailure()) return;
  const TileImages<Shape>* images[PrefillSm100::kAccumulators] = {&first, &second};
  for (const auto& [m, n] : shapes) {
    SCOPED_TRACE("M " + std::to_string(m) + ", N " + std::to_string(n));
    EpilogueWalk<Shape> w(m, n);
    w.run(images);
    if (::testing::Test::HasFatalFailure()) return;
    w.expect_each_element_once();
  }
}

// Whole tiles and ragged edges, real shapes (Llama-3.1-8B at 512 tokens: qkv, o, gate/up;
// Qwen2.5-1.5B's 1536 columns), and more tiles than CTAs (each CTA alternates its accumulators).
TEST(PrefillEpilogueSm100, StoreBf16) {
  walk<StoreBf16Shape>({{128, 256}, {200, 1000}, {512, 6144}, {1152, 4096}});
}

TEST(PrefillEpilogueSm100, ResidualAddsF32OnceIntoX) {
  walk<ResidualShape>({{128, 256}, {200, 1000}, {512, 1536}, {512, 4096}, {2304, 2048}});
}

TEST(PrefillEpilogueSm100, SwiGluPairsGateAndUpRows) {
  walk<SwiGluShape>({{128, 128}, {200, 1000}, {512, 14336}});
}

// The MMA thread's instruction descriptor is a legal one-CTA kind::f16 shape (M 128, N 256, bf16
// x bf16 -> f32, K-major), and its two accumulators fit Tensor Memory's 512 columns.
// The Hopper twin: per chunk, every epilogue thread's runs of its pieces (registers of its
// warpgroup's wgmma accumulators, whose elements hexel/examples/gemm_tile_accum.cuh's WgmmaAccum
// states from wgmma's fragment layout) at their places in its warpgroup's two buffers: each byte
// once, each buffer written by one warpgroup's 128 threads, and every buffer's bytes the same
// accumulator elements as the tcgen05 epilogue's (SwiGLU: the up value from the same element of
// the up chain, kUpOffset columns on).
template <class Shape>
void expect_twin_images_match() {
  using E = PrefillEpilogueSm100<Shape>;
  using TE = PrefillTwinEpilogue<Shape>;
  using Fragment = hexel::examples::WgmmaAccum<TE::kN>;
  const TileImages<Shape> tcgen05(0);
  std::map<std::pair<unsigned, unsigned>, std::vector<long>> twin;
  std::map<std::pair<unsigned, unsigned>, std::map<unsigned, int>> writers;  // -> warpgroup c
  for (unsigned ch = 0; ch < E::kChunks; ++ch)
    for (unsigned warp = PrefillSm100::kFirstEpilogueWarp; warp < kThreads / 32; ++warp)
      for (unsigned lane = 0; lane < 32; ++lane) {
        const unsigned c = E::group(warp), thread = 32 * (warp % 4) + lane;
        for (unsigned pc = 0; pc < E::kPieces; ++pc)
          for (unsigned h2 = 0; h2 < 2; ++h2)
            for (unsigned h = 0; h < 2; ++h)
              for (unsigned j = 0; j < E::kPieceCols / 8; ++j)
                for (unsigned e = 0; e < TE::kRun; ++e) {
                  const unsigned row = TE::row(warp, lane, h2, h);
                  const unsigned col = TE::chunk_col(lane, pc, j) + e;
                  const unsigned reg = TE::reg(ch, pc, j, h) + e;
                  ASSERT_LT(reg, unsigned{TE::kN} / 2);
                  const hexel::examples::TileElement held = Fragment::element(thread, h2, reg);
                  ASSERT_EQ(held.row, row);
                  const unsigned n = TE::w_row(c, 0) + held.col;
                  ASSERT_EQ(n, E::out_col(c, ch, 0, 0) + col)
                      << "accumulator column of the output's";
                  if constexpr (Shape::kSplitW) {
                    ASSERT_EQ(TE::w_row(c, 1) + held.col, n + E::kUpOffset) << "up pairs with gate";
                  }
                  const unsigned b = TE::buffer(c, row);
                  ++writers[{ch, b}][c];
                  std::vector<long>& slot = twin[{ch, b}];
                  slot.resize(G::kChunkBytes, -1);
                  const unsigned at = hexel::swizzled_offset(TE::offset(row, col), Swizzle::B128);
                  ASSERT_LE(at + E::kElemBytes, G::kChunkBytes);
                  for (unsigned byte = 0; byte < E::kElemBytes; ++byte) {
                    ASSERT_EQ(slot[at + byte], -1) << "byte written twice";
                    slot[at + byte] = static_cast<long>(row) * kTile + n;
                  }
                }
      }
  ASSERT_EQ(twin.size(), tcgen05.images().size());
  for (const auto& [key, image] : tcgen05.images()) {
    EXPECT_EQ(twin.at(key), image.slot) << "chunk " << key.first << ", buffer " << key.second;
    EXPECT_EQ(writers.at(key).size(), 1u) << "one warpgroup a buffer";
    EXPECT_EQ(writers.at(key).begin()->first, key.second / 2);
  }
}

TEST(PrefillEpilogueSm100, TwinWritesTheSameChunkImages) {
  expect_twin_images_match<StoreBf16Shape>();
  expect_twin_images_match<ResidualShape>();
  expect_twin_images_match<SwiGluShape>();
}

TEST(PrefillEpilogueSm100, MmaShapeAndTensorMemory) {
  const model::InstrFields f = model::decode(PrefillAccum::kInstrDesc);
  EXPECT_NO_THROW(model::check_dense_kind_f16_cta1(f));
  EXPECT_EQ(f.m, G::kBlockM);
  EXPECT_EQ(f.n, G::kBlockN);
  EXPECT_EQ(f.d_type, 1u);
  EXPECT_EQ(f.a_type, 1u);
  EXPECT_EQ(f.b_type, 1u);
  EXPECT_FALSE(f.a_mn_major || f.b_mn_major || f.negate_a || f.negate_b);
  EXPECT_EQ(unsigned{PrefillSm100::kTmemColumns}, 512u);
  EXPECT_NO_THROW(
      model::accumulator_cell(hexel::tcgen05::tmem_addr(0, kTile), 128, kTile, 127, kTile - 1));
}

// The K slices the MMAs read through the descriptors are the bytes TMA wrote: the stage's 128 A
// rows and the tile's 256 W rows, from their offset where one box of whole slot-image tiles covers
// them (the 8B's qkv: 288 rows of 48-row tiles, the tile's rows 0, 16 or 32 rows in).
template <class T>
void expect_stage_operands(unsigned tn) {
  constexpr unsigned kStage = 0x1400;  // 1024-byte aligned
  const unsigned w_stage = kStage + G::kABytes, at = T::w_offset(tn);
  for (unsigned kk = 0; kk < G::kBlockK / 16; ++kk)
    for (unsigned k = 0; k < 16; ++k) {
      const unsigned kb = 2 * (16 * kk + k);
      for (unsigned row = 0; row < G::kBlockM; ++row)
        ASSERT_EQ(model::kmajor_element_address(PrefillAccum::operand_desc(kStage, kk), row, k, 2),
                  kStage + hexel::swizzled_offset(row * 128 + kb, Swizzle::B128));
      for (unsigned row = 0; row < G::kBlockN; ++row)
        ASSERT_EQ(
            model::kmajor_element_address(PrefillAccum::operand_desc(w_stage + at, kk), row, k, 2),
            w_stage + hexel::swizzled_offset(at + row * 128 + kb, Swizzle::B128))
            << "tile " << tn << " W row " << row;
    }
}

TEST(PrefillEpilogueSm100, OperandDescriptorsReadTheTmaImage) {
  using Plain = PrefillTiling<512, 4096, 4096, ResidualShape, 0, 0>;
  using Cover = PrefillTiling<512, 6144, 4096, StoreBf16Shape, 48, 288>;
  static_assert(Cover::kCover && Cover::kWRows == 288 && Cover::kStages == 3);
  expect_stage_operands<Plain>(5);
  for (unsigned tn = 0; tn < 3; ++tn) {
    SCOPED_TRACE("tile " + std::to_string(tn));
    EXPECT_EQ(Cover::w_offset(tn), tn * 256 % 48 * 128);
    expect_stage_operands<Cover>(tn);
  }
}

// The layout the kernel carves (PrefillSmem: the aligned base, the stages, the epilogue buffers,
// the stage barriers) fits the dynamic shared memory the lowering gives the Hopper kernel, which
// the sm_100a kernel takes as it is, with its accumulator barriers in static shared memory.
template <class T>
void expect_fits_plan_smem(int w_box) {
  const unsigned used = 1023 + T::kStages * (T::kStageBytes + 16) + G::kEpilogueBytes;
  EXPECT_LE(used, static_cast<unsigned>(telos::codegen::prefill_gemm_smem(w_box)));
}

TEST(PrefillEpilogueSm100, LayoutFitsThePlannedSharedMemory) {
  expect_fits_plan_smem<PrefillTiling<512, 4096, 4096, ResidualShape, 0, 0>>(0);
  expect_fits_plan_smem<PrefillTiling<512, 6144, 4096, StoreBf16Shape, 48, 288>>(288);
}

}  // namespace
}  // namespace telos_kernels
