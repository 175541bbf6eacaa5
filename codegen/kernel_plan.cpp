#include "codegen/kernel_plan.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <sstream>

#include "codegen/nvrtc_driver.hpp"
#include "codegen/rope_table.hpp"
#include "support/error.hpp"

namespace telos::codegen {
namespace {

int pow2_at_least(int v) {
  int p = 1;
  while (p < v) p *= 2;
  return p;
}

// The prefill GEMM's launch shape (kernels/gemm_prefill.cuh, PrefillGemm): 384 threads, tiles of
// 128 rows x 256 W rows (its dynamic shared memory: prefill_gemm_smem).
constexpr int kPrefillGemmThreads = 384;
constexpr int kSms = 132;  // H200: the persistent grid is one CTA per SM

// Persistent grid of the prefill GEMM over `rows` x `cols` outputs in tiles of 128 x `tile_cols`.
int prefill_gemm_grid(int rows, int cols, int tile_cols) {
  const int tiles = ((rows + 127) / 128) * ((cols + tile_cols - 1) / tile_cols);
  return std::min(tiles, kSms);
}

class PlanBuilder {
 public:
  explicit PlanBuilder(KernelPlan& plan) : plan_(plan) {}

  int kernel(std::string instance, std::vector<std::string> params, int block, int smem = 0) {
    auto it = index_.find(instance);
    if (it != index_.end()) return it->second;
    const int id = static_cast<int>(plan_.kernels.size());
    plan_.kernels.push_back({instance, std::move(params), block, smem});
    index_.emplace(std::move(instance), id);
    return id;
  }

 private:
  KernelPlan& plan_;
  std::map<std::string, int> index_;
};

void check_model(const CodegenInput& in) {
  auto need = [](bool ok, const std::string& what) {
    if (!ok) fail("codegen: " + what);
  };
  // The GEMMs read K in 32-element steps and own weight rows in groups of 16.
  need(in.hidden_size > 0 && in.hidden_size % 32 == 0, "hidden_size must be a positive multiple of 32");
  need(in.intermediate_size > 0 && in.intermediate_size % 32 == 0,
       "intermediate_size must be a positive multiple of 32");
  // Attention keeps a 16-row MMA tile of query heads and a head's output in registers.
  need(in.head_dim % 32 == 0 && in.head_dim >= 32 && in.head_dim <= 128,
       "head_dim must be a multiple of 32 up to 128");
  need(in.num_heads > 0 && in.num_kv_heads > 0 && in.num_heads % in.num_kv_heads == 0,
       "num_heads must be a multiple of num_kv_heads");
  need(in.num_heads / in.num_kv_heads <= 16, "at most 16 query heads per KV head");
  need(in.vocab_size > 0 && in.num_layers > 0, "vocab_size and num_layers must be positive");
  need(in.vocab_size % 16 == 0, "vocab_size must be a multiple of 16 (the LM head's weight tiles)");
  need(in.kv_page_size > 0 && in.max_seq_len > 0 && in.max_batch > 0,
       "serving.kv_page_size, max_seq_len and max_batch must be positive");
  need(!in.decode_buckets.empty() || !in.prefill_buckets.empty(), "no buckets to compile");
  need(in.attention_split == kAttnSplit || in.attention_split == kAttnSplitLong,
       "serving.attention_split must be " + std::to_string(kAttnSplit) + " or " +
           std::to_string(kAttnSplitLong));
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

std::string attn_prefill_instance(int hq, int hkv, int d, int page, int maxp, long long page_elems,
                                  int tpt, int nt) {
  auto I_ = [](long long v) { return std::to_string(v); };
  return "telos_kernels::attn_prefill<" + I_(hq) + ", " + I_(hkv) + ", " + I_(d) + ", " + I_(page) +
         ", " + I_(maxp) + ", " + I_(page_elems) + "ll, " +
         float_literal(1.4426950408889634 / std::sqrt(static_cast<double>(d))) + ", " + I_(tpt) +
         (nt > 0 ? ", " + I_(nt) : "") + ">";
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
  // With the norm prologue the resident A (16 bytes per token per 8 of K, a zero tail of 128,
  // rounded up to 1 KB) and the norm's 8 x 4 warp sums (kernels/gemm_small.cuh).
  return norm_blocks > 0 ? (norm_blocks * 8 * a_box * 16 + 128 + 1023) / 1024 * 1024 + 8 * 4 * 4 : 0;
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
SmallGemmTiling small_gemm_tiling(int n, int k, int tokens, bool swiglu, bool norm, const SmallGemmLimits& limits) {
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
    if (tokens > kSmallGemmNormMaxRows) fail("codegen: the small GEMM's norm prologue takes at most 8 tokens");
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

PersistentLayerTiling decode_layer_tiling(int h, int nqkv, int ko, int i, int head_dim,
                                          bool qk_norm) {
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
      if (!persistent_tile_fits(bn, k, n)) continue;
      const int rows = (n / bn + kSms - 1) / kSms * bn;  // the busiest CTA's
      if (best == 0 || rows <= best_rows) best = bn, best_rows = rows;
    }
    return best;
  };
  t.bq = pick(h, nqkv);
  t.bo = pick(ko, h);
  t.bd = pick(i, h);
  t.bg = persistent_tile_fits(64, h, 2 * i) && i % 32 == 0 ? 64 : 0;
  // Resident A: 16 bytes per 8 columns of the largest K (one token), a zero tail, whole KBs; 16 KB
  // for the static shared memory (attn_split_block's 8.6 KB at head dim 128, the QKV epilogue's,
  // the norm's) and 1 KB of alignment.
  const int resident = (std::max({h, ko, i}) / 8 * 16 + 128 + 1023) / 1024 * 1024;
  t.stages = (kMaxSmemPerBlock - 1024 - 16 * 1024 - resident) / kPersistentSlotBytes;
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

std::string AttnSplitKernel::instance() const {
  auto I_ = [](long long v) { return std::to_string(v); };
  return "telos_kernels::attn_split<" + I_(hq) + ", " + I_(hkv) + ", " + I_(d) + ", " + I_(page) +
         ", " + I_(maxp) + ", " + I_(page_elems) + "ll, " + I_(split) + ", " + I_(nsplit) + ", " +
         float_literal(1.4426950408889634 / std::sqrt(static_cast<double>(d))) + ", " + I_(tpt) +
         (ahead ? ", true" : ", false") + (pages ? ", true" : ", false") +
         (blocks || bulk || early ? ", " + I_(blocks ? blocks : 3) : "") +
         (bulk || early ? ", " + I_(bulk) : "") + (early ? ", true" : "") + ">";
}

AttnSplitKernel attn_split_for_rows(AttnSplitKernel k, int split_rows, bool decode) {
  const int group = k.hq / k.hkv;
  k.ahead = k.tpt == 1 && split_rows <= kAttnSplitAheadMaxRows;
  const bool bulk = !k.ahead && k.tpt == 1 && split_rows >= kAttnSplitBulkMinRows &&
                    attn_split_bulk_fits(k.page, group);
  const bool four = !k.ahead && !bulk && split_rows >= kAttnSplitFourBlocksMinRows &&
                    attn_split_four_blocks(k.d, group);
  k.pages = attn_split_page_ahead(k.page) && !bulk;
  k.blocks = four ? 4 : 0;
  k.bulk = bulk ? kAttnSplitBulk : 0;
  k.early = decode && k.tpt == 1 && split_rows <= kAttnSplitEarlyMaxRows;
  return k;
}

bool attn_split_four_blocks(int head_dim, int group) {
  return head_dim <= 64 || group == 2 || group == 4 || group == 8;
}

KernelPlan plan_kernels(const CodegenInput& in) {
  check_model(in);
  KernelPlan plan;
  PlanBuilder b(plan);
  const int H = in.hidden_size, I = in.intermediate_size, V = in.vocab_size, D = in.head_dim;
  const int HQ = in.num_heads, HKV = in.num_kv_heads, L = in.num_layers, PAGE = in.kv_page_size;
  const std::string eps = float_literal(in.rms_norm_eps);

  plan.max_batch = in.max_batch;
  plan.max_pages_per_seq = (in.max_seq_len + PAGE - 1) / PAGE;
  const int MAXP = plan.max_pages_per_seq;
  const long long page_elems = 2LL * L * HKV * PAGE * D;
  plan.attn_split = in.attention_split;
  plan.attn_num_splits = attn_partial_slots(MAXP * PAGE, plan.attn_split);
  plan.rope_inv_freq = rope_inv_freq(in.rope, D);

  const int embed_threads = std::clamp(H / 8 / 32 * 32, 32, 256);
  // sample holds a row in registers, spread over a cluster of up to 8 blocks (the portable
  // cluster size) of up to 512 threads: 32 values a thread at V = 128256 (8 x 512 threads), 4 for
  // the tiny fixtures (one block of 128).
  const int sample_cluster = std::clamp(pow2_at_least((V + 16383) / 16384), 1, 8);
  const int sample_threads = std::clamp(pow2_at_least(V / (32 * sample_cluster)), 128, 512);
  const std::string lm_head = in.tie_word_embeddings ? "w:embed" : "w:lm_head";
  const std::string scale_log2 = float_literal(1.4426950408889634 / std::sqrt(static_cast<double>(D)));

  // Weight bytes of one layer (bf16 projections), for the norm fold's choice.
  const long long layer_bytes = 2LL * H * ((HQ + 2LL * HKV) * D + HQ * D + 3LL * I);
  // The one-token decode layer's tiling (the same in every bucket that runs it). The weights in its
  // `bulk` mask stream from slot images (`wimg:`) unless the serving config keeps one copy of the
  // weights; every other GEMM of every bucket then reads those weights from the same image
  // (`timg:`), so that the image is the weight's only copy on the device.
  const int NH = HQ + 2 * HKV;
  PersistentLayerTiling layer_t = decode_layer_tiling(H, NH * D, HQ * D, I, D, in.qk_norm);
  if (!in.decode_weight_images) layer_t.bulk = 0;  // one copy of the weights: tensor maps
  // QKV_FLAGS needs the QKV epilogue in the QKV tiles (no QK norm); its counters follow the two
  // grid-wide ones in layer_sync.
  const bool qkv_flags = in.decode_qkv_flags && layer_t.qkv_rope;
  const bool any_layer_persistent =
      layer_t.fits && std::any_of(in.decode_buckets.begin(), in.decode_buckets.end(), [](int n) {
        return n > 0 && n <= kDecodeLayerPersistentMaxRows;
      });
  auto image_of = [&](const std::string& weight) {
    return any_layer_persistent ? layer_weight_image(layer_t, weight) : WeightImage{};
  };
  const WeightImage qkv_img = image_of("qkv"), o_img = image_of("o"), gu_img = image_of("gate_up"),
                    down_img = image_of("down");
  int qkv_arrival_counters = 0;  // gemm_small_norm_qkv's, when a bucket folds the QKV epilogue
  bool uses_layer_sync = false;  // decode_layer_persistent's grid-wide counters
  long long max_lm_candidates = 0;  // the LM head's greedy candidates, all of a bucket's rows
  auto program = [&](const std::string& kind, int size, int tokens, int sample_rows) {
    BucketProgram p{kind, size, tokens, sample_rows, {}};
    auto launch = [&](int k, std::array<int, 3> grid, std::vector<std::string> args) {
      p.launches.push_back({k, grid, std::move(args)});
    };
    const int T = tokens, S = sample_rows;
    auto I_ = [](long long v) { return std::to_string(v); };
    const SmallGemmTiling lm_t = lm_head_tiling(V, H, S);
    // The weight tiles are the grid's y (at most 65535 blocks).
    if (lm_t.tiles_n > 65535)
      fail("codegen: a vocabulary of " + I_(V) + " needs " + I_(lm_t.tiles_n) +
           " LM head blocks of " + I_(lm_t.bn) + " rows, more than a grid's y takes (65535)");

    launch(b.kernel("telos_kernels::embed_gather<" + I_(H) + ", " + I_(embed_threads) + ">",
                    {"embed", "tokens", "sampled", "x"}, embed_threads),
           {T, 1, 1}, {"w:embed", "desc:tokens", "buf:sampled", "buf:x"});
    // Attention in tiles of tpt tokens (prefill), one token per block in decode.
    const int tpt = attn_tokens_per_tile(kind == "prefill", T, HQ / HKV);
    const int combine_k = b.kernel("telos_kernels::attn_combine<" + I_(HQ) + ", " + I_(D) + ", " +
                                       I_(plan.attn_num_splits) + ", " + I_(plan.attn_split) + ">",
                                   {"part_o", "part_ml", "positions", "out"}, D);
    // Prompt rows of a prefill bucket on attn_prefill where it takes the head dim, in the plain
    // order (no softmax / P·V overlap: faster at 4k-16k with K/V by TMA), Q in bf16 (Q_SPLIT
    // costs 16-23% of the kernel and does not lower the 8B's worst teacher-forced position beyond
    // the noise of bf16 activations; docs/performance.md): the split kernels
    // then see the generated rows only (desc:split_positions; docs/artifact.md, "Prompt and
    // generated tokens").
    const bool prompt_attn = kind == "prefill" && attn_prefill_fits(D, HQ / HKV);
    // Persistent where it fits: the CTAs run the tiles in turn through one K/V ring, the same
    // bits.
    const int prompt_tpt = attn_prefill_tokens_per_tile(T, HQ / HKV);
    const int prompt_nt = attn_prefill_persistent_fits(D, PAGE, prompt_tpt) ? T / prompt_tpt : 0;
    const int prompt_k =
        prompt_attn
            ? b.kernel(
                  attn_prefill_instance(HQ, HKV, D, PAGE, MAXP, page_elems, prompt_tpt, prompt_nt),
                  {"q", "positions", "token_seq", "page_tables", "kv_layer", "kv_map", "out"},
                  kAttnPrefillThreads, attn_prefill_smem(D))
            : -1;
    const std::string split_positions = prompt_attn ? "desc:split_positions" : "desc:positions";
    // There the generated rows are the step's first, at most max_batch of them (the engine packs
    // them so), and the split kernels cover those rows only: in whole tiles of tpt, which end
    // within the bucket since tpt divides T. Every other row of `attn` is attn_prefill's (its
    // prompt rows, zeros for padding).
    const int split_rows = prompt_attn ? std::min(T, in.max_batch) : T;
    const int split_tiles = (split_rows + tpt - 1) / tpt;
    const AttnSplitKernel split_kernel = attn_split_for_rows(
        {HQ, HKV, D, PAGE, MAXP, page_elems, plan.attn_split, plan.attn_num_splits, tpt},
        split_rows, kind == "decode");
    const int split_k =
        b.kernel(split_kernel.instance(),
                 {"q", "positions", "token_seq", "page_tables", "kv_layer", "part_o", "part_ml"},
                 128, split_kernel.smem());
    // Prefill at T >= kPrefillGemmMinRows: the prefill GEMM (128-row tiles, persistent grid);
    // every other bucket the small-M GEMM (64-row tiles, narrow weight tiles). Both compute each
    // output element with the same wgmma chain over K and the same epilogue arithmetic
    // (kernels/gemm_small.cuh), so a row's bits do not depend on which of them ran.
    const bool big = kind == "prefill" && T >= kPrefillGemmMinRows;
    // bf16 maps have 64-column boxes; the f32 map of x (the prefill residual epilogue's TMA
    // reduction) has 32-column boxes: one 128-byte swizzle span either way.
    auto tmap = [&](const std::string& target, long long rows, long long cols, int box_rows,
                    int box_cols = 64) {
      return "tmap:" + target + ":" + I_(rows) + ":" + I_(cols) + ":" + I_(box_rows) + ":" +
             I_(box_cols);
    };
    // One GEMM of W [n (2n for SwiGLU), k] over `a_buf` [T, k] into `out_buf` [T, n]; `epi` is
    // bf16, residual or swiglu (the suffix of gemm_prefill_* / gemm_small_*).
    struct Gemm {
      int kernel;
      std::array<int, 3> grid;
      int a_box, w_box;  // tensor-map box rows of the activations and the weights
      int out_box_cols;  // prefill: outputs through a map (bf16: 64 x 64 boxes, the f32 residual
                         // stream: 64 x 32); small-M: 0, a pointer
      WeightImage img;   // the weight from its slot image (bn 0: the weight's own map)
      int img_box = 0;   // then the image map's box rows
    };
    // The weight operand of a GEMM: the map over its slot image, or over the weight.
    auto weight_map = [&](const WeightImage& img, int img_box, const std::string& w_name,
                          long long rows, long long k, int w_box) {
      if (img_box > 0)
        return "timg:" + w_name.substr(2) + ":" + I_(img.bn) + ":" + I_(img.halves) + ":" +
               I_(img_box);
      return tmap(w_name, rows, k, w_box);
    };
    // Buckets of up to kSmallGemmNormMaxRows tokens fold the norms before the QKV and gate/up
    // projections into those GEMMs (gemm_small_norm_*: A = RMSNorm(x), computed in the kernel).
    const bool fold_norm = !big && T <= kSmallGemmNormMaxRows && layer_bytes <= kSmallGemmNormFoldMaxLayerBytes;
    const bool fold_qkv = fold_norm && T <= kSmallGemmQkvFoldMaxRows;
    // `img`: the weight's slot image, read where the GEMM's weight rows make whole boxes of it.
    auto gemm = [&](const std::string& epi, int n, int k, const WeightImage& img,
                    bool norm = false) -> Gemm {
      const bool swiglu = epi == "swiglu";
      const std::string dims = "<" + I_(T) + ", " + I_(n) + ", " + I_(k);
      auto image_args = [&](int box) {
        return box > 0 ? ", " + I_(img.half_rows()) + ", " + I_(box) : std::string();
      };
      if (big) {
        const int cols = swiglu ? 128 : 256;
        const int box = prefill_image_box_rows(img, cols);
        return {b.kernel("telos_kernels::gemm_prefill_" + epi + dims + image_args(box) + ">",
                         {"a_map", "w_map", "out"}, kPrefillGemmThreads, prefill_gemm_smem(box)),
                {prefill_gemm_grid(T, n, cols), 1, 1},
                128,
                cols,
                epi == "residual" ? 32 : 64,
                box > 0 ? img : WeightImage{},
                box};
      }
      const SmallGemmTiling t = small_gemm_tiling(n, k, T, swiglu, norm).reading(img);
      const int box = t.image_box;
      const WeightImage used = box > 0 ? img : WeightImage{};
      if (norm)
        return {b.kernel("telos_kernels::gemm_small_norm_" + epi + dims + ", " + I_(t.bn) + ", " +
                             I_(t.stages) + ", " + eps + image_args(box) + ">",
                         {"x", "norm_w", "w_map", "out"}, kSmallGemmThreads, t.smem()),
                {t.tiles_m, t.tiles_n, 1},
                0,
                t.cols,
                0,
                used,
                box};
      return {b.kernel(t.instance(epi, T, n, k), {"a_map", "w_map", "out"}, t.threads(), t.smem()),
              {t.tiles_m, t.tiles_n, 1},
              t.a_box,
              t.w_box(),
              0,
              used,
              box};
    };
    auto launch_gemm = [&](const Gemm& g, const std::string& a_buf, const std::string& w_name,
                           long long w_rows, int k, const std::string& out_buf, long long n) {
      launch(
          g.kernel, g.grid,
          {tmap("buf:" + a_buf, T, k, g.a_box),
           weight_map(g.img, g.img_box, w_name, w_rows, k, g.w_box),
           g.out_box_cols ? tmap("buf:" + out_buf, T, n, 64, g.out_box_cols) : "buf:" + out_buf});
    };
    // The norm `norm_w` of x, then a GEMM over it: one launch when the bucket folds the norm.
    auto launch_norm_gemm = [&](const Gemm& g, const std::string& norm_w, const std::string& w_name,
                                long long w_rows, int k, const std::string& out_buf, long long n) {
      if (fold_norm) {
        launch(g.kernel, g.grid,
               {"buf:x", norm_w, weight_map(g.img, g.img_box, w_name, w_rows, k, g.w_box),
                "buf:" + out_buf});
        return;
      }
      launch(b.kernel("telos_kernels::rmsnorm<" + I_(H) + ", " + eps + ", false>", {"x", "w", "rows", "out"},
                      kNormThreads),
             {T, 1, 1}, {"buf:x", norm_w, "null", "buf:h"});
      launch_gemm(g, "h", w_name, w_rows, k, out_buf, n);
    };
    const Gemm o_g = gemm("residual", H, HQ * D, o_img),
               gu_g = gemm("swiglu", I, H, gu_img, fold_norm),
               down_g = gemm("residual", H, I, down_img);
    // The QKV epilogue (bias, QK norm, RoPE, q out, K/V appended to their pages): its own kernel
    // after the projection, or folded with the norm into the projection (gemm_small_norm_qkv).
    const std::string qkv_epi = std::string(in.qkv_bias ? "true" : "false") + ", " + (in.qk_norm ? "true" : "false") +
                                ", " + eps + ", " + I_(PAGE) + ", " + I_(MAXP) + ", " + I_(page_elems) +
                                "ll, telos_rope::Freqs>";
    const std::vector<std::string> qkv_epi_params = {"bias",      "q_norm",      "k_norm",   "positions",
                                                     "token_seq", "page_tables", "kv_layer", "q_out"};
    auto qkv_epi_args = [&](const std::string& w, int l) {
      return std::vector<std::string>{in.qkv_bias ? w + "qkv_bias" : "null", in.qk_norm ? w + "q_norm" : "null",
                                      in.qk_norm ? w + "k_norm" : "null",  "desc:positions",
                                      "desc:token_seq",                    "desc:page_tables",
                                      "kv:" + I_(l),                       "buf:q"};
    };
    auto launch_qkv = [&](const std::string& w, int l) {
      const long long rows = static_cast<long long>(NH) * D;
      std::vector<std::string> args = qkv_epi_args(w, l);
      if (fold_qkv) {
        const SmallGemmTiling t = small_gemm_tiling(NH * D, H, T, false, true);
        const int box = image_box_rows(qkv_img, t.cols);
        std::vector<std::string> params = {"x", "norm_w", "w_map", "qkv"};
        params.insert(params.end(), qkv_epi_params.begin(), qkv_epi_params.end());
        params.push_back("arrivals");
        const int k =
            b.kernel("telos_kernels::gemm_small_norm_qkv<" + I_(T) + ", " + I_(H) + ", " +
                         I_(t.bn) + ", " + I_(t.stages) + ", " + I_(HQ) + ", " + I_(HKV) + ", " +
                         I_(D) + ", " + qkv_epi.substr(0, qkv_epi.size() - 1) +
                         (box > 0 ? ", " + I_(qkv_img.half_rows()) + ", " + I_(box) : "") + ">",
                     params, kSmallGemmThreads, t.smem());
        args.insert(args.begin(),
                    {"buf:x", w + "attn_norm", weight_map(qkv_img, box, w + "qkv", rows, H, t.cols),
                     "buf:qkv"});
        args.push_back("buf:qkv_arrivals");
        launch(k, {t.tiles_m, t.tiles_n, 1}, args);
        return;
      }
      launch_norm_gemm(gemm("bf16", NH * D, H, qkv_img, fold_norm), w + "attn_norm", w + "qkv",
                       rows, H, "qkv", rows);
      std::vector<std::string> params = {"qkv"};
      params.insert(params.end(), qkv_epi_params.begin(), qkv_epi_params.end());
      const int k = b.kernel("telos_kernels::qkv_rope_append_rows<" + I_(HQ) + ", " + I_(HKV) + ", " + I_(D) + ", " +
                                 qkv_epi,
                             params, D);
      args.insert(args.begin(), "buf:qkv");
      launch(k, {NH, T, 1}, args);
    };
    const bool layer_persistent = kind == "decode" && T <= kDecodeLayerPersistentMaxRows && layer_t.fits;
    if (fold_qkv && !layer_persistent) qkv_arrival_counters = NH;
    const int layer_k =
        layer_persistent
            ? b.kernel(
                  "telos_kernels::decode_layer_persistent<" + I_(H) + ", " + I_(HQ) + ", " +
                      I_(HKV) + ", " + I_(D) + ", " + qkv_epi.substr(0, qkv_epi.size() - 1) + ", " +
                      I_(plan.attn_split) + ", " + I_(plan.attn_num_splits) + ", " + scale_log2 +
                      ", " + I_(I) + ", " + I_(layer_t.stages) + ", " + I_(layer_t.bq) + ", " +
                      I_(layer_t.bo) + ", " + I_(layer_t.bg) + ", " + I_(layer_t.bd) +
                      (layer_t.qkv_rope ? ", true" : ", false") + ", " + I_(layer_t.bulk) +
                      (qkv_flags ? ", true" : "") + ">",
                  {"qkv_w",  "o_w",    "gu_w",      "down_w",    "attn_norm",   "mlp_norm", "bias",
                   "q_norm", "k_norm", "positions", "token_seq", "page_tables", "kv_layer", "x",
                   "qkv",    "q",      "part_o",    "part_ml",   "attn",        "act",      "sync"},
                  kPersistentThreads, layer_t.smem)
            : -1;
    if (layer_persistent) uses_layer_sync = true;
    for (int l = 0; l < L; ++l) {
      const std::string w = "w:layers." + I_(l) + ".";
      if (layer_persistent) {
        const long long rows = static_cast<long long>(NH) * D;
        const std::vector<std::string> epi = qkv_epi_args(w, l);  // bias, q_norm, k_norm, positions, ...
        // A weight in the tiling's `bulk` mask as its slot image in tiles of bn rows (gate/up: two
        // halves; docs/artifact.md, `wimg:`), one bulk copy a ring slot; else its tensor map.
        auto wmap = [&](int bit, const std::string& target, long long n, long long k, int bn,
                        bool halves) {
          if (layer_t.bulk >> bit & 1)
            return "wimg:" + target.substr(2) + ":" + I_(bn) + ":" + (halves ? "2" : "1");
          return tmap(target, n, k, halves ? bn / 2 : bn);  // BOX_COLS 64
        };
        std::vector<std::string> args = {wmap(0, w + "qkv", rows, H, layer_t.bq, false),
                                         wmap(1, w + "o", H, HQ * D, layer_t.bo, false),
                                         wmap(2, w + "gate_up", 2LL * I, H, layer_t.bg, true),
                                         wmap(3, w + "down", H, I, layer_t.bd, false),
                                         w + "attn_norm",
                                         w + "mlp_norm"};
        args.insert(args.end(), epi.begin(), epi.begin() + 7);  // up to kv:l; q goes after x and qkv
        args.insert(args.end(), {"buf:x", "buf:qkv", "buf:q", "buf:part_o", "buf:part_ml", "buf:attn", "buf:act",
                                 "buf:layer_sync"});
        launch(layer_k, {kSms, 1, 1}, args);
        continue;
      }
      launch_qkv(w, l);
      launch(split_k, {split_tiles, HKV, attn_grid_slots(split_tiles, HKV, plan.attn_num_splits)},
             {"buf:q", split_positions, "desc:token_seq", "desc:page_tables", "kv:" + I_(l),
              "buf:part_o", "buf:part_ml"});
      launch(combine_k, {split_rows, HQ, 1},
             {"buf:part_o", "buf:part_ml", split_positions, "buf:attn"});
      if (prompt_attn)
        launch(prompt_k,
               prompt_nt > 0
                   ? std::array<int, 3>{attn_prefill_persistent_grid(HKV, prompt_nt), 1, 1}
                   : std::array<int, 3>{HKV, T / prompt_tpt, 1},
               {"buf:q", "desc:prompt_positions", "desc:token_seq", "desc:page_tables",
                "kv:" + I_(l), tmap("kv:" + I_(l), page_elems / D, D, PAGE), "buf:attn"});
      launch_gemm(o_g, "attn", w + "o", H, HQ * D, "x", H);
      launch_norm_gemm(gu_g, w + "mlp_norm", w + "gate_up", 2LL * I, H, "act", I);
      launch_gemm(down_g, "act", w + "down", H, I, "x", H);
    }
    launch(b.kernel("telos_kernels::rmsnorm<" + I_(H) + ", " + eps + ", true>", {"x", "w", "rows", "out"},
                    kNormThreads),
           {S, 1, 1}, {"buf:x", "w:final_norm", "desc:sample_rows", "buf:hf"});
    // The LM head with the first stage of greedy sampling: a candidate per weight tile and row
    // (`lm_cand`), which sample's greedy rows reduce; over the final norm's S gathered rows (hf).
    const int candidates = V / lm_t.bn;
    max_lm_candidates = std::max(max_lm_candidates, static_cast<long long>(S) * candidates);
    launch(b.kernel(lm_t.instance("f32cand", S, V, H), {"a_map", "w_map", "y", "cand"},
                    lm_t.threads(), lm_t.smem()),
           {lm_t.tiles_m, lm_t.tiles_n, 1},
           {tmap("buf:hf", S, H, lm_t.a_box), tmap(lm_head, V, H, lm_t.w_box()), "buf:logits",
            "buf:lm_cand"});
    launch(
        b.kernel("telos_kernels::sample<" + I_(V) + ", " + I_(sample_threads) + ", " +
                     I_(candidates) + ", " + I_(sample_cluster) + ">",
                 {"logits", "cand", "params", "rows", "tokens_out", "tokens_host"}, sample_threads),
        {S * sample_cluster, 1, 1},
        {"buf:logits", "buf:lm_cand", "desc:sample_params", "desc:sample_rows", "buf:sampled",
         "host:sampled"});
    plan.max_tokens = std::max(plan.max_tokens, T);
    plan.max_sample_rows = std::max(plan.max_sample_rows, S);
    plan.buckets.push_back(std::move(p));
  };

  std::vector<int> decode = in.decode_buckets, prefill = in.prefill_buckets;
  std::sort(decode.rbegin(), decode.rend());
  std::sort(prefill.rbegin(), prefill.rend());
  for (int n : decode) {
    if (n <= 0) fail("codegen: serving.decode_buckets: sizes must be positive");
    program("decode", n, n, n);
  }
  for (int n : prefill) {
    if (n <= 0) fail("codegen: serving.prefill_buckets: sizes must be positive");
    program("prefill", n, n, std::min(n, in.max_batch));
  }

  const long long T = plan.max_tokens, S = plan.max_sample_rows;
  plan.arena = {
      {"x", T * H * 4},
      {"h", T * H * 2},
      {"q", T * HQ * D * 4},
      {"part_o", T * HQ * plan.attn_num_splits * D * 4},
      {"part_ml", T * HQ * plan.attn_num_splits * 2 * 4},
      {"attn", T * HQ * D * 2},
      {"act", T * I * 2},
      {"hf", S * H * 2},
      {"logits", S * V * 4},
      {"lm_cand", max_lm_candidates * 8},
      {"sampled", S * 4},
  };
  // The QKV projection between its GEMM and its epilogue.
  plan.arena.push_back({"qkv", T * (HQ + 2 * HKV) * D * 2});
  // Arrival counters of gemm_small_norm_qkv, one per head, zero between launches.
  if (qkv_arrival_counters > 0) plan.arena.push_back({"qkv_arrivals", qkv_arrival_counters * 4LL});
  // decode_layer_persistent's two grid-wide counters, and with QKV_FLAGS one per KV head group,
  // zero between launches.
  if (uses_layer_sync) plan.arena.push_back({"layer_sync", 8 + (qkv_flags ? 4LL * HKV : 0)});
  return plan;
}

}  // namespace telos::codegen
