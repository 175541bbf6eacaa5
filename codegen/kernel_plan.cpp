#include "codegen/kernel_plan.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <sstream>

#include "codegen/kernels/gemm_prefill_shape.cuh"
#include "codegen/kernels/norm_rows.cuh"
#include "codegen/nvrtc_driver.hpp"
#include "support/error.hpp"

namespace telos::codegen {
namespace {

int pow2_at_least(int v) {
  int p = 1;
  while (p < v) p *= 2;
  return p;
}

}  // namespace

// Printed so the f32 value round-trips (a template argument of the generated source).
std::string float_literal(double v) {
  std::ostringstream s;
  s.precision(9);
  s << static_cast<float>(v);
  std::string t = s.str();
  if (t.find_first_of(".e") == std::string::npos) t += ".0";
  return t + "f";
}

int attn_partial_slots(int max_positions, int split) {
  return std::min(32, (max_positions + split - 1) / split);
}

int attn_grid_slots(int tiles, int kv_heads, int partial_slots) {
  const int pairs = std::max(1, tiles * kv_heads);
  return std::clamp((kAttnSplitGridBlocks + pairs - 1) / pairs, 1, partial_slots);
}

bool attn_prefill_fits(int head_dim, int group) {
  return (head_dim == 64 || head_dim == 128) && group >= 1 && group <= 128;
}

int attn_prefill_tokens_per_tile(int tokens, int group) {
  int tpt = 1;
  while (2 * tpt * group <= 128 && tokens % (2 * tpt) == 0) tpt *= 2;
  return tpt;
}

namespace {

// The template arguments attn_prefill and its sm_100a form share: the head shape, the KV pool's
// page geometry, the scale (log2(e) / sqrt(d)) and the tokens a tile.
std::string attn_prefill_args(int hq, int hkv, int d, int page, int maxp, long long page_elems,
                              int tpt) {
  auto I_ = [](long long v) { return std::to_string(v); };
  return I_(hq) + ", " + I_(hkv) + ", " + I_(d) + ", " + I_(page) + ", " + I_(maxp) + ", " +
         I_(page_elems) + "ll, " +
         float_literal(1.4426950408889634 / std::sqrt(static_cast<double>(d))) + ", " + I_(tpt);
}

}  // namespace

std::string attn_prefill_instance(int hq, int hkv, int d, int page, int maxp, long long page_elems,
                                  int tpt, int nt) {
  return "telos_kernels::attn_prefill<" +
         attn_prefill_args(hq, hkv, d, page, maxp, page_elems, tpt) +
         (nt > 0 ? ", " + std::to_string(nt) : "") + ">";
}

std::string attn_prefill_sm100_instance(int hq, int hkv, int d, int page, int maxp,
                                        long long page_elems, int tpt, bool twin) {
  return std::string("telos_kernels::attn_prefill_sm100") + (twin ? "_twin<" : "<") +
         attn_prefill_args(hq, hkv, d, page, maxp, page_elems, tpt) + ">";
}

int attn_prefill_sm100_smem(int head_dim, bool twin) {
  const int kv_stage = 2 * 128 * head_dim * 2, q = 128 * head_dim * 2, p = 128 * 128 * 2;
  const int stages = twin ? (head_dim == 128 ? 1 : 3) : (head_dim == 128 ? 2 : 5);
  const int image = twin ? 128 * (128 + head_dim) * 4 : 0;
  return q + (twin ? 0 : p) + stages * kv_stage + image + 1024;
}

bool attn_prefill_persistent_fits(int head_dim, int page, int tpt) {
  // Two tables of tpt segments (8 bytes each) and their counts, four mbarriers, beside the rest.
  return page % 8 == 0 && 128 % page == 0 &&
         attn_prefill_smem(head_dim) + 2 * (8 * tpt + 4) + 32 <= kMaxSmemPerBlock;
}

int attn_prefill_persistent_grid(int hkv, int tiles) {
  return std::min(hkv * tiles, kSms);
}

int attn_prefill_smem(int head_dim) {
  const int stages = head_dim == 128 ? 3 : 6;
  return 128 * head_dim * 2 + stages * 2 * 128 * head_dim * 2 + 4 * stages * 8 + 1024;
}

// Decode rows are one token per sequence: nothing to share. In prefill, the largest tile of whole
// tokens that the 16 MMA rows hold (the kernel has no token count, so tiles must divide the
// bucket): K/V traffic falls by that factor, the arithmetic of a row does not change.
int attn_tokens_per_tile(bool prefill, int tokens, int group) {
  int tpt = 1;
  if (!prefill) return tpt;
  while (2 * tpt * group <= 16 && tokens % (2 * tpt) == 0) tpt *= 2;
  return tpt;
}

// Rows of activations a stage holds: one 8-row group up to 8 tokens, else the M tile's `block_m`
// (kernels/gemm_small.cuh).
static int small_gemm_a_rows(int a_box, int block_m) {
  return a_box <= 8 ? 8 : block_m;
}

// Per stage the activation rows (none with the norm prologue) and a bn-row weight box of 64
// bf16, and two mbarriers.
static int small_gemm_stage_bytes(int a_box, int bn, bool norm, int block_m = kSmallGemmBlockM) {
  return ((norm ? 0 : small_gemm_a_rows(a_box, block_m)) + bn) * 64 * 2 + 16;
}

// A stage of `kps` K blocks' slots (each a one-block stage's bytes less its barriers) behind one
// barrier pair (16 bytes).
static int small_gemm_kps_stage_bytes(int stage, int kps) {
  return kps * (stage - 16) + 16;
}

int SmallGemmTiling::resident_bytes() const {
  // With the norm prologue the resident A (kernels/norm_rows.cuh: 16 bytes per token per 8 of K,
  // a zero tail of 128, rounded up to 1 KB) and the norm's 8 x 4 warp sums
  // (kernels/gemm_small.cuh).
  return norm_blocks > 0
             ? static_cast<int>(telos_kernels::norm_rows_bytes(
                   static_cast<unsigned>(a_box), static_cast<unsigned>(norm_blocks) * 8)) +
                   8 * 4 * 4
             : 0;
}

int SmallGemmTiling::smem() const {
  // The stages, the resident bytes, and 1024 bytes to align the base to the 128B swizzle repeat.
  const int stage = small_gemm_stage_bytes(a_box, bn, norm_blocks > 0, block_m());
  return stages * small_gemm_kps_stage_bytes(stage, kps) + resident_bytes() + 1024;
}

std::string SmallGemmTiling::instance(const std::string& epi, int m, int n, int k) const {
  auto I_ = [](int v) { return std::to_string(v); };
  const bool cl = cluster > 1 || warpgroups > 1;
  const bool img = image_rows > 0;
  return "telos_kernels::gemm_small_" + epi + (cl ? "_cl<" : "<") + I_(m) + ", " + I_(n) + ", " +
         I_(k) + ", " + I_(bn) + ", " + I_(stages) + (cl ? ", " + I_(cluster) : "") +
         (cl && (warpgroups > 1 || img) ? ", " + I_(warpgroups) : "") +
         (!cl && (kps > 1 || img) ? ", " + I_(kps) : "") +
         (img ? ", " + I_(image_rows) + ", " + I_(image_box) : "") + ">";
}

WeightImage layer_weight_image(const PersistentLayerTiling& t, const std::string& weight) {
  // decode_layer_persistent's BULK bits: 0 qkv, 1 o, 2 gate/up, 3 down.
  const int bit = weight == "qkv"       ? 0
                  : weight == "o"       ? 1
                  : weight == "gate_up" ? 2
                  : weight == "down"    ? 3
                                        : -1;
  if (bit < 0) fail("codegen: \"" + weight + "\" is not a layer weight of the one-token layer");
  if (!t.fits || !(t.bulk >> bit & 1)) return {};
  const int bn[] = {t.bq, t.bo, t.bg, t.bd};
  return {bn[bit], bit == 2 ? 2 : 1};
}

int image_box_rows(const WeightImage& img, int rows) {
  const int h = img.half_rows();
  if (img.bn <= 0 || rows <= 0) return 0;
  if ((rows <= h && h % rows == 0) || (rows > h && rows % h == 0)) return rows % 8 == 0 ? rows : 0;
  const int g = std::gcd(rows, h);
  return g % 8 == 0 ? g : 0;
}

// The prefill GEMM's stages with boxes of `w_box` rows and their bytes (gemm_prefill.cuh,
// PrefillGemm::stages_for): a stage is 128 A rows, max(256, w_box) W rows of 128 bytes and its two
// barriers; the epilogue's four 8 KB chunks and 1024 bytes of alignment beside them; as many
// stages as fit, at most 4.
namespace {
constexpr int kPrefillFixedSmem = 4 * 64 * 128 + 1024;
int prefill_stage_bytes(int w_box) {
  return (128 + std::max(256, w_box)) * 128 + 16;
}
int prefill_gemm_stages(int w_box) {
  return std::min(4, (kMaxSmemPerBlock - kPrefillFixedSmem) / prefill_stage_bytes(w_box));
}
}  // namespace

int prefill_gemm_smem(int w_box) {
  return prefill_gemm_stages(w_box) * prefill_stage_bytes(w_box) + kPrefillFixedSmem;
}

int prefill_pair_smem(int w_rows) {
  const int stage = (128 + w_rows) * 128 + 16;
  return std::min(6, (kMaxSmemPerBlock - kPrefillFixedSmem) / stage) * stage + kPrefillFixedSmem;
}

int prefill_gemm_e4m3_smem() {
  const int stage = prefill_stage_bytes(0) + 256 * 64 + 8;
  return std::min(4, (kMaxSmemPerBlock - kPrefillFixedSmem) / stage) * stage + kPrefillFixedSmem;
}

int prefill_gemm_w8a8_smem() {
  return static_cast<int>(telos_kernels::PrefillW8a8Gemm::smem());
}

int quantize_rows_threads() {
  return 32 * telos_kernels::kQuantizeWarps;
}

int quantize_rows_blocks(int rows, int k) {
  const int units = rows * ((k + 127) / 128), warps = telos_kernels::kQuantizeWarps;
  return (units + warps - 1) / warps;
}

int prefill_image_box_rows(const WeightImage& img, int rows) {
  const int box = image_box_rows(img, rows), h = img.half_rows();
  if (box == 0 || box == rows || img.halves != 1) return box;
  // Windows start at multiples of g rows into a tile, the last at h - g: their rows reach h - g +
  // rows past a tile's start, in whole tiles. Taken while three stages of them fit.
  const int g = std::gcd(rows, h), cover = (h - g + rows + h - 1) / h * h;
  return g % 8 == 0 && prefill_gemm_stages(cover) >= 3 ? cover : box;
}

SmallGemmTiling SmallGemmTiling::reading(const WeightImage& img) const {
  SmallGemmTiling t = *this;
  const int box = image_box_rows(img, w_box());
  if (box > 0) {
    t.image_rows = img.half_rows();
    t.image_box = box;
  }
  return t;
}

SmallGemmTiling SmallGemmTiling::with_bn(int rows, int n, bool swiglu) const {
  SmallGemmTiling t = *this;
  t.bn = rows;
  t.cols = swiglu ? rows / 2 : rows;
  t.tiles_n = (n + t.cols - 1) / t.cols;
  return t;
}

SmallGemmTiling small_gemm_two_warpgroups(SmallGemmTiling t, int tokens) {
  if (t.norm_blocks > 0 || tokens <= kSmallGemmBlockM)
    fail("codegen: two consumer warpgroups need more than 64 tokens and no norm prologue");
  t.warpgroups = 2;
  t.tiles_m = (tokens + t.block_m() - 1) / t.block_m();
  t.a_box = std::min(tokens, t.block_m());
  const int stage = small_gemm_stage_bytes(t.a_box, t.bn, false, t.block_m());
  t.stages = std::max(2, std::min(t.stages, (kMaxSmemPerBlock - 1024) / stage));
  if (t.cluster > 1 && !t.cluster_fits(t.cluster)) t.cluster = 1;
  return t;
}

// 32 weight rows per CTA; SwiGLU 32 gate and 32 up rows, or 64 and 64 where that still gives
// every SM a CTA (the Llama-3.1-8B gate/up: 224 CTAs of 4 stages, faster than 448 CTAs of 64 rows
// in telos-kernel-bench --sweep). The 8B shapes have 128 to 224 CTAs per 64-token tile; the stages
// fill what an SM's 228 KB (1 KB reserved per CTA) gives the CTAs that share it when the whole
// grid is resident, 2 to 16 of them. From two M tiles on, wider tiles of 4-8 stages: at 256
// tokens each CTA reads its M tile's whole A for its weight rows, so 32-row tiles move twice the
// weights' bytes of A through L2 (telos-kernel-bench --gemm; docs/performance.md).
SmallGemmTiling small_gemm_tiling(int n, int k, int tokens, bool swiglu, bool norm,
                                  const SmallGemmLimits& limits) {
  SmallGemmTiling t;
  t.tiles_m = (tokens + kSmallGemmBlockM - 1) / kSmallGemmBlockM;
  // Two or more M tiles: every weight tile is read once per M tile and every M tile of A once per
  // weight tile, so wider weight tiles: SwiGLU 128 gate + 128 up rows; the others the widest of
  // 128 and 64 rows that still gives 2/3 of the SMs a CTA, else 32.
  const bool wide = limits.bn == 0 && !norm && t.tiles_m >= 2;
  t.bn = limits.bn > 0 ? limits.bn : swiglu ? (n / 64 >= kSms ? 128 : 64) : 32;
  // One M tile, no norm prologue (its QKV fold keeps a tile inside a head): where 32-row tiles
  // make more CTAs than SMs but 48-row ones do not, 48 rows, one wave (the 8B's qkv at M = 1:
  // 192 CTAs on 132 SMs are 1.45 waves; 128 CTAs of 48 rows are one).
  // Loads only: the same bits at any BN.
  if (limits.bn == 0 && !swiglu && !norm && t.tiles_m == 1 && (n + 31) / 32 > kSms && n % 48 == 0 &&
      n / 48 <= kSms)
    t.bn = 48;
  if (wide && swiglu) t.bn = 256;
  if (wide && !swiglu)
    for (int bn : {128, 64})
      if (t.tiles_m * ((n + bn - 1) / bn) >= kSms * 2 / 3) {
        t.bn = bn;
        break;
      }
  t.cols = swiglu ? t.bn / 2 : t.bn;
  t.a_box = std::min(tokens, kSmallGemmBlockM);
  t.tiles_n = (n + t.cols - 1) / t.cols;
  const int k_blocks = (k + 63) / 64;
  if (norm) {
    if (tokens > kSmallGemmNormMaxRows)
      fail("codegen: the small GEMM's norm prologue takes at most 8 tokens");
    t.norm_blocks = k_blocks;
  }
  const int per_sm = (t.tiles_m * t.tiles_n + kSms - 1) / kSms;
  // Less 1 KB for the static shared memory of the folded QKV epilogue (gemm_small_norm_qkv).
  const int budget =
      std::min(kMaxSmemPerBlock, limits.smem_per_sm / per_sm - 1024) - (norm ? 1024 : 0);
  const int stage = small_gemm_stage_bytes(t.a_box, t.bn, norm);
  const int max_stages = std::clamp(k_blocks, 2, limits.max_stages);
  t.stages = std::clamp((budget - 1024 - t.resident_bytes()) / stage, 2, max_stages);
  // The wide tiles' grid is not resident at once (up to 4 CTAs an SM's worth at 256 tokens): 4 to 8
  // stages, the best measured at 256 tokens, whatever the SM's share.
  if (wide) t.stages = std::clamp(t.stages, std::min(4, max_stages), std::min(8, max_stages));
  // One M tile, the plan's weight tiles, no norm prologue, not SwiGLU: two K blocks a stage (KPS,
  // gemm_small.cuh) where K is whole pairs of blocks, a ring of about 96 KB of weights (12 stages
  // of 32 rows, 8 of 48) within the CTA's share of the SM: a CTA's rate is set by its stage trips
  // more than by its bytes (telos-kernel-bench --read-floor; docs/performance.md). The same wgmma
  // order: the same bits.
  if (limits.bn == 0 && !swiglu && !norm && !wide && t.tiles_m == 1 && k_blocks % 2 == 0 &&
      t.stages >= 4) {
    const int pair = small_gemm_kps_stage_bytes(stage, 2);
    const int ring = kSmallGemmKpsRingWeightBytes / (2 * t.bn * 64 * 2);
    t.kps = 2;
    t.stages =
        std::clamp(std::min(ring, (budget - 1024 - t.resident_bytes()) / pair), 2, k_blocks / 2);
  }
  // One wave of 128-row weight tiles on an even number of M tiles (the 8B's o and down at 256
  // tokens: 128 CTAs, one an SM): clusters of two M tiles sharing each weight tile by multicast.
  // Faster there; no gain or a loss for multi-wave grids (qkv, gate/up), 64-row tiles (the 1B's o
  // and down) and clusters of four (telos-kernel-bench --gemm). Loads only: the same bits.
  if (wide && !swiglu && t.bn == 128 && t.cluster_fits(2) && t.tiles_m * t.tiles_n <= kSms)
    t.cluster = 2;
  // Two consumer warpgroups a CTA on 128-row M tiles: every weight tile is read once per 128 rows
  // and each SM has twice the MMAs in flight. SwiGLU keeps its 256-row tiles; the others take the
  // widest of 128 and 64 rows that still gives 2/3 of the SMs a CTA on the 128-row M tiles, else
  // 32; no clusters; the stages as above. Faster for every shape timed at 256 rows but the downs
  // (K = 8192, 14336), hence kSmallGemmTwoWarpgroupsMaxK. The same bits as one warpgroup.
  if (wide && k <= kSmallGemmTwoWarpgroupsMaxK && limits.warpgroups != 1) {
    const int tiles_m = (tokens + 2 * kSmallGemmBlockM - 1) / (2 * kSmallGemmBlockM);
    int bn = swiglu ? t.bn : 32;
    if (!swiglu)
      for (int b : {128, 64})
        if (tiles_m * ((n + b - 1) / b) >= kSms * 2 / 3) {
          bn = b;
          break;
        }
    SmallGemmTiling two = t.with_bn(bn, n, swiglu);
    two.cluster = 1;
    return small_gemm_two_warpgroups(two, tokens);
  }
  // Above that K, where one warpgroup's tiles take clusters of two (the 8B's down at 256 tokens):
  // two warpgroups at half the weight tile, still on clusters of two 128-row M tiles, as many
  // CTAs: faster than one warpgroup, than no cluster and than the whole tile (telos-kernel-bench
  // --gemm). The same bits as one warpgroup.
  if (t.cluster == 2 && limits.warpgroups != 1) {
    // small_gemm_two_warpgroups keeps the cluster where it still fits its 128-row M tiles.
    const SmallGemmTiling two = small_gemm_two_warpgroups(t.with_bn(t.bn / 2, n, swiglu), tokens);
    if (two.cluster == 2) return two;
  }
  return t;
}

int SmallGemmSm100Tiling::stage_bytes() const {
  return (norm_blocks > 0 ? 0 : (mma_n * 128 + 1023) / 1024 * 1024) + w_rows * 128;
}

int SmallGemmSm100Tiling::resident_bytes() const {
  return norm_blocks > 0
             ? static_cast<int>(telos_kernels::norm_rows_bytes(
                   static_cast<unsigned>(a_box), static_cast<unsigned>(norm_blocks) * 8))
             : 0;
}

int SmallGemmSm100Tiling::smem() const {
  return resident_bytes() + stages * stage_bytes() + 1024;
}

std::string SmallGemmSm100Tiling::instance(const std::string& epi, int m, int n, int k,
                                           const std::string& eps) const {
  return "telos_kernels::gemm_small_sm100_" + std::string(norm_blocks > 0 ? "norm_" : "") + epi +
         "<" + std::to_string(m) + ", " + std::to_string(n) + ", " + std::to_string(k) + ", " +
         std::to_string(stages) + (norm_blocks > 0 ? ", " + eps : "") + ">";
}

// Token tiles of 64-row groups up to 256 rows; the stages fill what an SM's 228 KB (1 KB reserved
// a CTA, 8 KB for the LM head's static candidates or the folded QKV epilogue's, and the norm
// forms' resident tokens) gives the CTAs that share it, 2 to 16, no more than K has blocks.
SmallGemmSm100Tiling small_gemm_sm100_tiling(int n, int k, int tokens, bool swiglu, bool norm) {
  if (norm && tokens > kSmallGemmNormMaxRows)
    fail("codegen: the sm_100a small GEMM's norm prologue takes at most 8 tokens");
  SmallGemmSm100Tiling t;
  t.tile_tokens = 64 * (tokens >= 256 ? 4 : (tokens + 63) / 64);
  t.a_box = std::min(tokens, t.tile_tokens);
  t.mma_n = (t.a_box + 15) / 16 * 16;
  t.w_rows = (swiglu ? 2 : 1) * kSmallGemmSm100Rows;
  t.tiles_m = (tokens + t.tile_tokens - 1) / t.tile_tokens;
  t.tiles_n = (n + kSmallGemmSm100Rows - 1) / kSmallGemmSm100Rows;
  const int per_sm = (t.tiles_m * t.tiles_n + kSms - 1) / kSms;
  const int budget = std::min(kMaxSmemPerBlock - 8 * 1024, 228 * 1024 / per_sm - 1024 - 8 * 1024);
  const int k_blocks = (k + 63) / 64;
  t.norm_blocks = norm ? k_blocks : 0;
  t.stages = std::clamp((budget - 1024 - t.resident_bytes()) / t.stage_bytes(), 2,
                        std::clamp(k_blocks, 2, 16));
  return t;
}

// A stage of the e4m3 form: the bf16 stage, the bn raw rows of 64 bytes and the raw barrier.
static int small_gemm_e4m3_stage_bytes(const SmallGemmTiling& t) {
  return small_gemm_stage_bytes(t.a_box, t.bn, t.norm_blocks > 0) + t.bn * 64 + 8;
}

int small_gemm_e4m3_smem(const SmallGemmTiling& t) {
  return t.stages * small_gemm_e4m3_stage_bytes(t) + t.resident_bytes() + 1024;
}

SmallGemmTiling small_gemm_e4m3_tiling(int n, int k, int tokens, bool swiglu, bool norm) {
  SmallGemmLimits one;
  one.warpgroups = 1;
  SmallGemmTiling t = small_gemm_tiling(n, k, tokens, swiglu, norm, one);
  t.cluster = 1;
  t.kps = 1;
  // The stages in the share of the SM small_gemm_tiling gave the bf16 ones.
  const int budget = std::min(kMaxSmemPerBlock, t.smem());
  const int k_blocks = (k + 63) / 64;
  t.stages = std::clamp((budget - 1024 - t.resident_bytes()) / small_gemm_e4m3_stage_bytes(t), 2,
                        std::clamp(k_blocks, 2, SmallGemmLimits{}.max_stages));
  return t;
}

// The W8A8 form of bf16 tiles t (one warpgroup): weight rows narrowed to divide 128, stages of one
// 128-column K block in t's shared memory.
static SmallGemmTiling w8a8_tiles(SmallGemmTiling t, int n, int k, bool swiglu) {
  const int budget = std::min(kMaxSmemPerBlock, t.smem());
  t.cluster = 1;
  t.kps = 1;
  int bn = std::min(t.bn, 128);
  while (bn > 16 && (128 % bn != 0 || (swiglu && n % (bn / 2) != 0))) bn -= 16;
  if (swiglu && n % (bn / 2) != 0)
    fail("codegen: the W8A8 SwiGLU needs an intermediate size that is a multiple of 8, not " +
         std::to_string(n));
  t = t.with_bn(bn, n, swiglu);
  const int k_blocks = (k + 127) / 128;
  t.stages = std::clamp((budget - 1024) / small_gemm_stage_bytes(t.a_box, t.bn, false), 2,
                        std::clamp(k_blocks, 2, SmallGemmLimits{}.max_stages));
  return t;
}

SmallGemmTiling small_gemm_w8a8_tiling(int n, int k, int tokens, bool swiglu) {
  SmallGemmLimits one;
  one.warpgroups = 1;
  return w8a8_tiles(small_gemm_tiling(n, k, tokens, swiglu, false, one), n, k, swiglu);
}

SmallGemmTiling lm_head_w8a8_tiling(int vocab, int hidden, int rows) {
  return w8a8_tiles(lm_head_tiling(vocab, hidden, rows, 1), vocab, hidden, false);
}

std::string small_gemm_e4m3_instance(const SmallGemmTiling& t, const std::string& epi, int m, int n,
                                     int k, int sbr, int sbc) {
  auto I_ = [](int v) { return std::to_string(v); };
  return "telos_kernels::gemm_small_e4m3_" + epi + "<" + I_(m) + ", " + I_(n) + ", " + I_(k) +
         ", " + I_(t.bn) + ", " + I_(t.stages) + ", " + I_(sbr) + ", " + I_(sbc) + ">";
}

std::string small_gemm_w8a8_instance(const SmallGemmTiling& t, const std::string& epi, int m, int n,
                                     int k) {
  auto I_ = [](int v) { return std::to_string(v); };
  return "telos_kernels::gemm_small_w8a8_" + epi + "<" + I_(m) + ", " + I_(n) + ", " + I_(k) +
         ", " + I_(t.bn) + ", " + I_(t.stages) + ">";
}

SmallGemmTiling lm_head_tiling(int vocab, int hidden, int rows, int warpgroups) {
  if (rows > kSmallGemmBlockM && vocab % 256 == 0) {
    SmallGemmLimits limits;
    limits.bn = 256;
    SmallGemmTiling t = small_gemm_tiling(vocab, hidden, rows, false, false, limits);
    t.stages = std::min(4, std::max(2, (hidden + 63) / 64));
    // On two warpgroups (4 stages of 48 KB) where the hidden size allows: faster on both
    // shapes timed.
    if (hidden <= kSmallGemmTwoWarpgroupsMaxK && warpgroups != 1)
      return small_gemm_two_warpgroups(t, rows);
    return t;
  }
  for (int bn : {128, 64, 32, 16})
    if (vocab % bn == 0) {
      SmallGemmLimits limits;
      limits.bn = bn;
      return small_gemm_tiling(vocab, hidden, rows, false, false, limits);
    }
  fail("codegen: vocab_size " + std::to_string(vocab) +
       " is not a multiple of 16 (the LM head's weight tiles)");
}

namespace {

// The rows of an n-row weight in tiles of bn rows that its busiest CTA runs (tile g is CTA g mod
// kSms's).
int busiest_rows(int n, int bn) {
  return (n / bn + kSms - 1) / kSms * bn;
}

// The one-token layer's tiles for weights whose tiles `fits` takes (persistent_tile_fits,
// persistent_w8a8_tile_fits) and its QKV epilogue's place.
template <class Fits>
PersistentLayerTiling layer_tiles(int h, int nqkv, int ko, int i, int head_dim, bool qk_norm,
                                  Fits fits) {
  PersistentLayerTiling t;
  // The QKV epilogue runs in the QKV tiles wherever it can (no QK norm: the weights' pair order
  // puts both elements of a rotated pair in one 8-row group): one grid-wide count and one phase a
  // layer fewer.
  t.qkv_rope = !qk_norm && head_dim % 8 == 0;
  // A slot holds 64 / bn whole K blocks of a tile, so K must be whole slots. A phase ends when its
  // CTA with the most rows does (tile g is CTA g mod kSms's), so the tile with the fewest rows on
  // the busiest CTA, and of those the largest (fewer, longer streams): 32 rows where that gives an
  // SM a tile (the 8B's o and down), 16 where 32 would leave SMs idle (the 1B's o and down), 48
  // and 24 where 32 and 16 make 1.45 waves (the 8B's and the 1B's qkv: 192 tiles against 128).
  const auto pick = [&](int k, int n) {
    int best = 0, best_rows = 0;
    for (int bn = 16; bn <= 64; bn += 8) {
      if (!fits(bn, k, n)) continue;
      const int rows = busiest_rows(n, bn);
      if (best == 0 || rows <= best_rows) best = bn, best_rows = rows;
    }
    return best;
  };
  t.bq = pick(h, nqkv);
  t.bo = pick(ko, h);
  t.bd = pick(i, h);
  t.bg = fits(64, h, 2 * i) && i % 32 == 0 ? 64 : 0;
  return t;
}

}  // namespace

PersistentLayerTiling decode_layer_w8a8_tiling(int h, int nqkv, int ko, int i, int head_dim,
                                               bool qk_norm) {
  PersistentLayerTiling t =
      layer_tiles(h, nqkv, ko, i, head_dim, qk_norm, persistent_w8a8_tile_fits);
  // Gate/up on 32-row tiles where they leave the busiest CTA fewer rows, hence fewer ring slots
  // (a row's K over a slot's 8 KB), than 64-row ones: a W8A8 slot costs a CTA about the same time
  // whatever its tile, and its stream is bound by that cost, not by DRAM, once gate/up's last round
  // runs on a few CTAs (the 8B's 448 64-row tiles leave 52 CTAs a fourth; its 896 32-row tiles put
  // 112 slots on the busiest CTA instead of 128).
  if (t.bg == 64 && i % 16 == 0 && persistent_w8a8_tile_fits(32, h, 2 * i) &&
      busiest_rows(2 * i, 32) < busiest_rows(2 * i, 64))
    t.bg = 32;
  // As decode_layer_tiling's: the bf16 resident A (each phase's input before its quantization),
  // 16 KB of static shared memory, 1 KB of alignment; then the e4m3 resident A, the rest in slots.
  const int k_max = std::max({h, ko, i});
  const int resident = (k_max / 8 * 16 + 128 + 1023) / 1024 * 1024;
  const int w8a8_a = persistent_w8a8_a_bytes(k_max);
  t.stages = (kMaxSmemPerBlock - 1024 - 16 * 1024 - resident - w8a8_a) / kPersistentSlotBytes;
  t.smem = 1024 + resident + t.stages * kPersistentSlotBytes + w8a8_a;
  t.fits = t.bq > 0 && t.bo > 0 && t.bd > 0 && t.bg > 0 && head_dim <= 128 && t.stages >= 4;
  return t;
}

PersistentLayerTiling decode_layer_tiling(int h, int nqkv, int ko, int i, int head_dim,
                                          bool qk_norm, bool e4m3) {
  PersistentLayerTiling t = layer_tiles(h, nqkv, ko, i, head_dim, qk_norm, persistent_tile_fits);
  // Resident A: 16 bytes per 8 columns of the largest K (one token), a zero tail, whole KBs; 16 KB
  // for the static shared memory (attn_split_block's 8.6 KB at head dim 128, the QKV epilogue's,
  // the norm's) and 1 KB of alignment.
  const int resident = (std::max({h, ko, i}) / 8 * 16 + 128 + 1023) / 1024 * 1024;
  const int rings = kMaxSmemPerBlock - 1024 - 16 * 1024 - resident;
  if (e4m3) {
    t.stages = kPersistentE4m3Slots;
    t.raw_stages = (rings - t.stages * kPersistentSlotBytes) / kPersistentRawSlotBytes;
    t.smem =
        1024 + resident + t.stages * kPersistentSlotBytes + t.raw_stages * kPersistentRawSlotBytes;
    t.fits = t.bq > 0 && t.bo > 0 && t.bd > 0 && t.bg > 0 && head_dim <= 128 && t.raw_stages >= 8;
    return t;  // no slot images: they hold bf16 tiles
  }
  t.stages = rings / kPersistentSlotBytes;
  t.smem = 1024 + resident + t.stages * kPersistentSlotBytes;
  t.fits = t.bq > 0 && t.bo > 0 && t.bd > 0 && t.bg > 0 && head_dim <= 128 && t.stages >= 4;
  // Every weight from its slot image, one bulk copy a ring slot, where gate/up's last round leaves
  // at least half the SMs idle: a bulk copy streams ~7% faster than a tensor copy with every SM at
  // it, and a lone CTA's stream (gate/up's last round) is at one copy a slot. The 8B (gate/up's
  // 448 tiles: a last round of 52 CTAs) gains with all four weights; the 1B (256 tiles: a last
  // round of 124) loses at short contexts, as with any faster refill there: its latency-bound
  // attention half pays for it (telos-kernel-bench --decode-layer; docs/performance.md).
  if (t.bg > 0) {
    const int last_round = 2 * i / t.bg % kSms;
    t.bulk = last_round > 0 && last_round <= kSms / 2 ? 0b1111 : 0;
  }
  return t;
}

PersistentLayerTiling decode_layer_sm100_tiling(int h, int nqkv, int ko, int i, int head_dim,
                                                bool qk_norm) {
  constexpr int kRows = kSmallGemmSm100Rows, kSlotRows = 256;
  PersistentLayerTiling t;
  t.bq = t.bo = t.bd = kRows;
  t.bg = 2 * kRows;
  t.qkv_rope = !qk_norm;
  // The same shared memory as decode_layer_tiling's: the resident A, 16 KB of static shared
  // memory, 1 KB of alignment; the rest in slots.
  const int resident = (std::max({h, ko, i}) / 8 * 16 + 128 + 1023) / 1024 * 1024;
  t.stages = (kMaxSmemPerBlock - 1024 - 16 * 1024 - resident) / kPersistentSm100SlotBytes;
  t.smem = 1024 + resident + t.stages * kPersistentSm100SlotBytes;
  // Whole 128-row chains of each weight (gate/up: of each half), K in whole slots of
  // kSlotRows / bn K blocks (LayerSm100::tile_ok).
  const auto whole = [](int bn, int k, int rows) {
    return rows > 0 && rows % kRows == 0 && k > 0 && k % (64 * (kSlotRows / bn)) == 0;
  };
  t.fits = whole(t.bq, h, nqkv) && whole(t.bo, ko, h) && whole(t.bg, h, i) && whole(t.bd, i, h) &&
           head_dim % 32 == 0 && head_dim <= 128 && t.stages >= 4;
  return t;
}

PersistentLayerTiling decode_layer_sm100_twin_tiling(PersistentLayerTiling t) {
  while (t.stages > 0 && t.smem + 16 * 1024 + kPersistentSm100TwinImageBytes > kMaxSmemPerBlock) {
    --t.stages;
    t.smem -= kPersistentSm100SlotBytes;
  }
  t.fits = t.fits && t.stages >= 4;
  return t;
}

std::string AttnSplitKernel::instance() const {
  auto I_ = [](long long v) { return std::to_string(v); };
  const bool e4m3 = !kv.empty();  // KV, the last argument: every one before it spelled out
  return "telos_kernels::attn_split<" + I_(hq) + ", " + I_(hkv) + ", " + I_(d) + ", " + I_(page) +
         ", " + I_(maxp) + ", " + I_(page_elems) + "ll, " + I_(split) + ", " + I_(nsplit) + ", " +
         float_literal(1.4426950408889634 / std::sqrt(static_cast<double>(d))) + ", " + I_(tpt) +
         (ahead ? ", true" : ", false") + (pages ? ", true" : ", false") +
         (blocks || bulk || early || e4m3 ? ", " + I_(blocks) : "") +
         (bulk || early || e4m3 ? ", " + I_(bulk) : "") +
         (early || e4m3 ? (early ? ", true" : ", false") : "") + (e4m3 ? ", " + kv : "") + ">";
}

std::string kv_format(bool e4m3, float k_scale, float v_scale) {
  if (!e4m3) return "";
  return "telos_kernels::KvE4m3<" + float_literal(k_scale) + ", " + float_literal(v_scale) + ">";
}

AttnSplitKernel attn_split_for_rows(AttnSplitKernel k, int split_rows, bool decode) {
  const int group = k.hq / k.hkv;
  const bool fits_bulk = k.tpt == 1 && attn_split_bulk_fits(k.page, group);
  const bool e4m3_bulk =
      !k.kv.empty() && split_rows < kAttnSplitAheadThreeBlocksMinRows && fits_bulk;
  k.ahead = k.tpt == 1 && split_rows <= kAttnSplitAheadMaxRows && !e4m3_bulk;
  const bool bulk = !k.ahead && fits_bulk && (split_rows >= kAttnSplitBulkMinRows || e4m3_bulk);
  const bool four = !k.ahead && !bulk && split_rows >= kAttnSplitFourBlocksMinRows &&
                    attn_split_four_blocks(k.d, group);
  k.pages = attn_split_page_ahead(k.page) && !bulk;
  k.blocks = 0;  // the kernel's default for the form
  if (four)
    k.blocks = 4;
  else if (k.ahead && !k.kv.empty() && split_rows >= kAttnSplitAheadThreeBlocksMinRows)
    k.blocks = 3;
  k.bulk = bulk ? kAttnSplitBulk : 0;
  k.early = decode && k.tpt == 1 && split_rows <= kAttnSplitEarlyMaxRows;
  return k;
}

bool attn_split_four_blocks(int head_dim, int group) {
  return head_dim <= 64 || group == 2 || group == 4 || group == 8;
}

int prefill_gemm_grid(int rows, int cols, int tile_cols) {
  const int tiles = ((rows + 127) / 128) * ((cols + tile_cols - 1) / tile_cols);
  return std::min(tiles, kSms);
}

int prefill_pair_grid(int rows, int cols, int tile_cols) {
  const int tiles = ((rows + 255) / 256) * ((cols + tile_cols - 1) / tile_cols);
  return 2 * std::min(tiles, kSms / 2);
}

std::vector<std::string> Launch::all_args() const {
  std::vector<std::string> out = args;
  if (!collective.empty()) out.insert(out.end(), {send, recv});
  for (const std::vector<Launch>* nested : {&then, &fallback})
    for (const Launch& l : *nested) {
      const std::vector<std::string> inner = l.all_args();
      out.insert(out.end(), inner.begin(), inner.end());
    }
  return out;
}

ShapeClass bucket_shape_class(bool prefill, int tokens, bool layer_fits) {
  if (!prefill && tokens <= kDecodeLayerPersistentMaxRows && layer_fits)
    return ShapeClass::one_token_decode;
  return prefill && tokens >= kPrefillGemmMinRows ? ShapeClass::prefill_gemm : ShapeClass::small_m;
}

const char* shape_class_name(ShapeClass shape) {
  switch (shape) {
    case ShapeClass::one_token_decode:
      return "one-token decode";
    case ShapeClass::small_m:
      return "small-M";
    case ShapeClass::prefill_gemm:
      return "prefill GEMM";
  }
  return "?";
}

long long layer_weight_bytes(int h, int nqkv, int ko, int i) {
  return 2LL * h * (static_cast<long long>(nqkv) + ko + 3LL * i);
}

bool folds_norm(ShapeClass shape, int tokens, long long layer_bytes) {
  return shape != ShapeClass::prefill_gemm && tokens <= kSmallGemmNormMaxRows &&
         layer_bytes <= kSmallGemmNormFoldMaxLayerBytes;
}

bool folds_qkv_epilogue(bool fold_norm, int tokens) {
  return fold_norm && tokens <= kSmallGemmQkvFoldMaxRows;
}

int embed_threads(int hidden) {
  return std::clamp(hidden / 8 / 32 * 32, 32, 256);
}

int all_reduce_blocks(int rows, int hidden) {
  const long long vectors = static_cast<long long>(rows) * hidden / 4;
  return static_cast<int>(std::clamp((vectors + kAllReduceThreads - 1) / kAllReduceThreads, 1LL,
                                     static_cast<long long>(kAllReduceMaxBlocks)));
}

bool all_reduce_two_shot(int rows, int hidden, int ranks) {
  const long long bytes = 4LL * rows * hidden;
  return (ranks - 1LL) * (ranks - 2) * bytes >= kAllReduceBarrierBytes * ranks;
}

bool all_reduce_nccl(ShapeClass shape, int rows, int hidden) {
  return shape == ShapeClass::prefill_gemm && 4LL * rows * hidden >= kAllReduceNcclMinBytes;
}

int gather_sum_blocks(int rows, int hidden) {
  const long long vectors = static_cast<long long>(rows) * hidden / 4;
  return static_cast<int>(std::clamp((vectors + kAllReduceThreads - 1) / kAllReduceThreads, 1LL,
                                     static_cast<long long>(kGatherSumMaxBlocks)));
}

int all_reduce_norm_blocks(int rows) {
  return std::clamp(rows, 1, kAllReduceMaxBlocks);
}

SampleLaunch sample_launch(int vocab) {
  SampleLaunch s;
  s.cluster = std::clamp(pow2_at_least((vocab + 16383) / 16384), 1, 8);
  s.threads = std::clamp(pow2_at_least(vocab / (32 * s.cluster)), 128, 512);
  return s;
}

bool prompt_attention(bool prefill, int head_dim, int group) {
  return prefill && attn_prefill_fits(head_dim, group);
}

int attn_split_rows(bool prompt_attn, int tokens, int max_batch) {
  return prompt_attn ? std::min(tokens, max_batch) : tokens;
}

}  // namespace telos::codegen
