// The Blackwell prefill attention's layouts on the CPU
// (codegen/kernels/attention_prefill_sm100.cuh), against the tcgen05 model (hexel/tcgen05_model.h):
// its two MMAs' instruction descriptors; where each MMA reads every element of Q, K, P and V under
// the descriptors the kernel issues, against where the kernel writes them (attn_prefill_stage_q,
// the producer's TMA boxes and cp.async pieces, the softmax's P chunks); which Tensor Memory cell
// each softmax thread's tcgen05.ld / st register holds (S and O, against Layout D: the thread's
// row, the right column); the Hopper twin's image of Tensor Memory (every cell once, wgmma's
// fragments into the cells Layout D names, P over S's columns only); and the shared memory, against
// the plan's restatement.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "codegen/kernel_plan.hpp"
#include "codegen/kernels/attention_prefill_sm100.cuh"
#include "hexel/swizzle.cuh"
#include "hexel/tcgen05_model.h"

namespace telos_kernels {
namespace {

namespace model = hexel::tcgen05::model;

// A shared-memory base as the kernel's (1024-byte aligned, past the static shared memory).
constexpr unsigned kBase = 0x400;

// Where the kernel writes bf16 element (row, col) of a 128B-swizzled K-major tile of `rows` rows
// (column blocks of 64 elements, each rows x 128 bytes): attn_prefill_stage_q's Q (rows = 128),
// the producer's K and V stages (rows = BN positions, the TMA box's swizzle and the cp.async
// pieces' swizzled_chunk_b128 alike).
unsigned tile_byte(unsigned tile, unsigned rows, unsigned row, unsigned col) {
  return hexel::swizzled_chunk_b128(tile + (col / 64) * (rows * 128), row, (col % 64) / 8) +
         (col % 8) * 2;
}

template <int D>
void check_descriptors() {
  using L = AttnSm100Layout<D>;
  using Desc = AttnSm100Desc<D>;
  SCOPED_TRACE("D " + std::to_string(D));
  // S = Q·Kᵀ: M 128, N BN, K-major; O += P·V: M 128, N D, A K-major, B N-major (transposed).
  const model::InstrFields s = model::decode(Desc::kS), o = model::decode(Desc::kO);
  EXPECT_NO_THROW(model::check_dense_kind_f16_cta1(s));
  EXPECT_NO_THROW(model::check_dense_kind_f16_cta1(o));
  EXPECT_EQ(s.m, 128u);
  EXPECT_EQ(s.n, unsigned{L::kBlockN});
  EXPECT_FALSE(s.a_mn_major || s.b_mn_major);
  EXPECT_EQ(o.m, 128u);
  EXPECT_EQ(o.n, unsigned{D});
  EXPECT_FALSE(o.a_mn_major);
  EXPECT_TRUE(o.b_mn_major);
  EXPECT_EQ(s.a_type, 1u);  // bf16
  EXPECT_EQ(o.b_type, 1u);
  EXPECT_EQ(o.d_type, 1u);  // f32

  const unsigned q = kBase + L::kQ, p = kBase + L::kP, k = kBase + L::kStagesAt;
  const unsigned v = k + L::kKvBytes;
  // The tiles start on the 128B swizzle's repeat (base offset 0).
  for (unsigned at : {q, p, k, v}) EXPECT_EQ(at % 1024, 0u);
  // S's K steps: Q row r (the MMA's row) and K position n (its column) at dim 16 kk + e.
  for (unsigned kk = 0; kk < D / 16; ++kk) {
    const hexel::tcgen05::SmemDesc a = Desc::kmajor(L::q_slice(q, kk));
    const hexel::tcgen05::SmemDesc b = Desc::kmajor(L::k_slice(k, kk));
    for (unsigned row = 0; row < 128; ++row)
      for (unsigned e = 0; e < 16; ++e) {
        ASSERT_EQ(model::kmajor_element_address(a, row, e, 2), tile_byte(q, 128, row, 16 * kk + e))
            << "Q row " << row << " k-step " << kk << " element " << e;
        ASSERT_EQ(model::kmajor_element_address(b, row, e, 2),
                  tile_byte(k, L::kBlockN, row, 16 * kk + e))
            << "K position " << row << " k-step " << kk << " element " << e;
      }
  }
  // O's K steps: P row r at key 16 kk + e (the softmax's chunk), V position 16 kk + e at dim n.
  for (unsigned kk = 0; kk < L::kBlockN / 16; ++kk) {
    const hexel::tcgen05::SmemDesc a = Desc::kmajor(L::p_slice(p, kk));
    const hexel::tcgen05::SmemDesc b = Desc::v(L::v_slice(v, kk));
    for (unsigned e = 0; e < 16; ++e) {
      const unsigned key = 16 * kk + e;
      for (unsigned row = 0; row < 128; ++row)
        ASSERT_EQ(model::kmajor_element_address(a, row, e, 2),
                  L::p_chunk(p, row, key / 8) + (key % 8) * 2)
            << "P row " << row << " key " << key;
      for (unsigned n = 0; n < unsigned{D}; ++n)
        ASSERT_EQ(model::mnmajor_element_address(b, n, e, 2), tile_byte(v, L::kBlockN, key, n))
            << "V position " << key << " dim " << n;
    }
  }
}

TEST(AttnPrefillSm100, MmasReadWhatTheKernelWrites) {
  check_descriptors<64>();
  check_descriptors<128>();
}

// The softmax thread (warp q of its warpgroup, lane l) is row r = 32 q + l of the tile: every
// register of its S loads holds S(r, key 32 c + reg) and of its O loads and stores O(r, 32 c + reg)
// (Layout D: row r is lane r), and the loads cover both accumulators once.
template <int D>
void check_tmem() {
  using L = AttnSm100Layout<D>;
  SCOPED_TRACE("D " + std::to_string(D));
  static_assert(L::kColumns <= L::kTmemColumns && L::kTmemColumns <= 512 &&
                (L::kTmemColumns & (L::kTmemColumns - 1)) == 0);
  const unsigned tmem = hexel::tcgen05::tmem_addr(0, 256);  // any allocation's base column
  std::set<std::pair<unsigned, unsigned>> cells;
  for (unsigned q = 0; q < 4; ++q)
    for (unsigned lane = 0; lane < 32; ++lane) {
      const unsigned warp = L::kSoftmaxWarp + q, row = 32 * q + lane;
      for (unsigned c = 0; c < L::kBlockN / 32; ++c)
        for (unsigned reg = 0; reg < 32; ++reg) {
          const model::TmemCell got =
              model::ld_32x32b_cell(warp, L::taddr(tmem, q, L::kSColumn + 32 * c), 32, lane, reg);
          ASSERT_EQ(
              got, model::accumulator_cell(tmem + L::kSColumn, 128, L::kBlockN, row, 32 * c + reg));
          cells.insert({got.lane, got.column});
        }
      for (unsigned c = 0; c < D / 32; ++c)
        for (unsigned reg = 0; reg < 32; ++reg) {
          const unsigned at = L::taddr(tmem, q, L::kOColumn + 32 * c);
          const model::TmemCell want =
              model::accumulator_cell(tmem + L::kOColumn, 128, D, row, 32 * c + reg);
          ASSERT_EQ(model::ld_32x32b_cell(warp, at, 32, lane, reg), want);
          ASSERT_EQ(model::st_32x32b_cell(warp, at, 32, lane, reg), want);
          cells.insert({want.lane, want.column});
        }
    }
  EXPECT_EQ(cells.size(), 128u * L::kColumns);
}

TEST(AttnPrefillSm100, SoftmaxThreadsHoldTheirRows) {
  check_tmem<64>();
  check_tmem<128>();
}

// The twin's image: image_offset maps every (row, column) of S and O to its own 4-byte cell inside
// kImageBytes; each wgmma fragment register (both 64-row halves) goes to the cell of the
// accumulator element it holds, every element once; the softmax's 16-byte loads (row 32 q + l,
// four columns) read the cells tcgen05.ld would; and P, lying over the image, covers S's first
// BN / 2 columns and no O cell.
template <int D>
void check_twin_image() {
  using L = AttnSm100Layout<D, true>;
  using T = AttnSm100Twin;
  SCOPED_TRACE("D " + std::to_string(D));
  std::set<unsigned> offsets;
  for (unsigned row = 0; row < 128; ++row)
    for (unsigned col = 0; col < L::kColumns; ++col) {
      const unsigned at = T::image_offset(row, col);
      ASSERT_LT(at, unsigned{L::kImageBytes});
      ASSERT_EQ(at % 4, 0u);
      offsets.insert(at);
      // A 16-byte load's four columns lie together.
      ASSERT_EQ(at, T::image_offset(row, col - col % 4) + 4 * (col % 4));
      ASSERT_EQ(T::image_offset(row, col - col % 4) % 16, 0u);
    }
  EXPECT_EQ(offsets.size(), 128u * L::kColumns);
  // wgmma m64nNk16's D fragments ("Register Fragments"): warp w of the warpgroup, lane, register
  // 4 j + 2 h + e is row 16 w + lane / 4 + 8 h of its half, column 8 j + 2 (lane % 4) + e.
  for (const auto& [col0, n] : {std::pair{unsigned{L::kSColumn}, unsigned{L::kBlockN}},
                                std::pair{unsigned{L::kOColumn}, unsigned{D}}}) {
    std::set<std::pair<unsigned, unsigned>> seen;
    for (unsigned half = 0; half < 2; ++half)
      for (unsigned w = 0; w < 4; ++w)
        for (unsigned lane = 0; lane < 32; ++lane)
          for (unsigned j = 0; j < n / 8; ++j)
            for (unsigned h = 0; h < 2; ++h)
              for (unsigned e = 0; e < 2; ++e) {
                const unsigned row = T::frag_row(half, w, lane, h);
                const unsigned col = T::frag_col(j, lane, e);
                ASSERT_EQ(row, 64 * half + 16 * w + lane / 4 + 8 * h);
                ASSERT_EQ(col, 8 * j + 2 * (lane % 4) + e);
                seen.insert({row, col});
                const model::TmemCell c =
                    model::accumulator_cell(hexel::tcgen05::tmem_addr(0, col0), 128, n, row, col);
                ASSERT_EQ(T::image_offset(row, col0 + col), T::image_offset(c.lane, c.column));
              }
    EXPECT_EQ(seen.size(), 128u * n);
  }
  // P's bytes are S's columns [0, BN / 2) of the image.
  std::set<unsigned> s_low;
  for (unsigned row = 0; row < 128; ++row)
    for (unsigned col = 0; col < L::kBlockN / 2; ++col)
      for (unsigned b = 0; b < 4; ++b) s_low.insert(T::image_offset(row, col) + b);
  for (unsigned row = 0; row < 128; ++row)
    for (unsigned c = 0; c < L::kBlockN / 8; ++c)
      for (unsigned b = 0; b < 16; ++b)
        ASSERT_TRUE(s_low.count(L::p_chunk(0, row, c) + b)) << "P row " << row << " chunk " << c;
  EXPECT_EQ(unsigned{L::kP}, unsigned{L::kImage});
}

TEST(AttnPrefillSm100, TwinImageIsTensorMemory) {
  check_twin_image<64>();
  check_twin_image<128>();
}

// The regions of the dynamic shared memory do not overlap and fit; the plan states the same bytes
// and threads.
template <int D, bool TWIN>
void check_smem() {
  using L = AttnSm100Layout<D, TWIN>;
  SCOPED_TRACE("D " + std::to_string(D) + (TWIN ? " twin" : ""));
  EXPECT_EQ(unsigned{L::kQ} + L::kQBytes, TWIN ? unsigned{L::kStagesAt} : unsigned{L::kP});
  if (!TWIN) {
    EXPECT_EQ(unsigned{L::kP} + L::kPBytes, unsigned{L::kStagesAt});
  }
  EXPECT_EQ(unsigned{L::kStagesAt} + L::kStages * L::kStageBytes, unsigned{L::kImage});
  EXPECT_EQ(unsigned{L::kStageBytes}, 2u * L::kBlockN * D * 2);  // attn_prefill's stage
  EXPECT_LE(unsigned{L::kSmemBytes}, 232448u);                   // a CTA's shared memory (227 KB)
  EXPECT_EQ(telos::codegen::attn_prefill_sm100_smem(D, TWIN), static_cast<int>(L::kSmemBytes));
  EXPECT_EQ(telos::codegen::kAttnPrefillSm100Threads, static_cast<int>(L::kThreads));
  EXPECT_GE(L::kStages, 1u);
}

TEST(AttnPrefillSm100, SharedMemoryAndThePlan) {
  check_smem<64, false>();
  check_smem<128, false>();
  check_smem<64, true>();
  check_smem<128, true>();
  // attn_prefill's template arguments (the non-persistent form's), under the sm_100a names.
  const std::string hopper = telos::codegen::attn_prefill_instance(32, 8, 128, 16, 40, 40960, 16);
  const std::string args = hopper.substr(std::string("telos_kernels::attn_prefill").size());
  EXPECT_EQ(telos::codegen::attn_prefill_sm100_instance(32, 8, 128, 16, 40, 40960, 16),
            "telos_kernels::attn_prefill_sm100" + args);
  EXPECT_EQ(telos::codegen::attn_prefill_sm100_instance(32, 8, 128, 16, 40, 40960, 16, true),
            "telos_kernels::attn_prefill_sm100_twin" + args);
}

}  // namespace
}  // namespace telos_kernels
