#pragma once
// Which kernel instances a model needs and how each bucket launches them: the choosing half of
// codegen. The heuristics that choose shape classes, folds, tiles, splits and thread counts live
// here, each named; the lowering table (lowering.hpp) applies them op by op to the optimized IR.
// The kernel bodies live in codegen/kernels/; emit_source() only prints what the plan decided.
//
// A bucket's launch program names every argument symbolically (docs/artifact.md, "Kernels"):
//   w:NAME      a weight tensor of the artifact
//   buf:NAME    an activation buffer of the arena (KernelPlan::arena; placed by compiler/plan)
//   desc:FIELD  a field of the step descriptor (tokens, positions, token_seq, page_tables,
//               sample_rows, sample_params)
//   kv:L        layer L of KV page 0 (the pool base plus L * 2 * Hkv * page_size * D elements)
//   null        a null pointer (an operand this model does not have)
//   tmap:TARGET:ROWS:COLS:BOX_ROWS:BOX_COLS
//               a TMA tensor map (in device memory) over the bf16 [ROWS, COLS] matrix at TARGET
//               (w:NAME or buf:NAME), boxes of BOX_ROWS x BOX_COLS, 128-byte swizzle
//   peer:NAME   a tensor-parallel rank's table of arena buffer NAME on every rank (peer pointers)
//   rank        the rank's index (in device memory)
#include <array>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace telos::codegen {

struct KernelInstance {
  std::string
      instance;  // the template instance, e.g. "telos_kernels::rmsnorm<128, 32, 1e-05f, false>"
  std::vector<std::string> params;  // parameter names, in order (each a pointer)
  int block = 0;                    // threads per block
  int dynamic_smem = 0;             // bytes of dynamic shared memory per block
};

// A kernel launch, or a collective entry (docs/artifact.md, "Collectives"): `collective` (e.g.
// "all_gather") of `count` f32 from `send` into `recv` (buf:NAME each) on the ranks' NCCL
// communicators, then the launches `then`; where the engine runs no NCCL, the launches `fallback`
// instead. kernel, grid and args are a kernel launch's only.
struct Launch {
  Launch() = default;
  Launch(int kernel, std::array<int, 3> grid, std::vector<std::string> args)
      : kernel(kernel), grid(grid), args(std::move(args)) {}
  int kernel = 0;  // index into KernelPlan::kernels
  std::array<int, 3> grid{1, 1, 1};
  std::vector<std::string> args;
  std::string collective, send, recv;
  long long count = 0;
  std::vector<Launch> then, fallback;
  // Every argument the entry names: a kernel launch's args; a collective's send, recv and its
  // launches' args.
  std::vector<std::string> all_args() const;
};

// A bucket's shape class: which family of kernels its ops lower to (the lowering table's column).
enum class ShapeClass {
  // Decode buckets of up to kDecodeLayerPersistentMaxRows rows where the model's layer fits
  // decode_layer_persistent (its tiling's `fits`): each layer is one launch.
  one_token_decode,
  // Every other decode bucket, and prefill buckets under kPrefillGemmMinRows tokens: the
  // projections on the small-M GEMM (kernels/gemm_small.cuh).
  small_m,
  // Prefill buckets of kPrefillGemmMinRows tokens or more: the projections on the prefill GEMM
  // (kernels/gemm_prefill.cuh).
  prefill_gemm,
};
ShapeClass bucket_shape_class(bool prefill, int tokens, bool layer_fits);
const char* shape_class_name(ShapeClass shape);  // "one-token decode", "small-M", "prefill GEMM"

// How the lowering table lowered one op (or a one-token layer's ops) of a bucket: what
// `telosc compile --emit=lowering` prints.
struct LoweredOps {
  std::vector<std::string> ops;        // the IR ops, printed
  std::string rule, kernels;           // the lowering table's row: its name and kernel templates
  std::string note;                    // what the rule did besides launching ("folded into ...")
  int first_launch = 0, launches = 0;  // its launches: BucketProgram::launches[first, first + n)
  std::vector<int> declared;           // kernels it adds to the table without launching them
};

struct BucketProgram {
  std::string kind;     // "decode" (one token per sequence) or "prefill"
  int size = 0;         // the bucket: sequences (decode) or tokens (prefill)
  int tokens = 0;       // rows of the step
  int sample_rows = 0;  // rows the LM head and the sampler see
  int split_rows = 0;   // rows the attention split kernels write partials for (part_o, part_ml)
  ShapeClass shape = ShapeClass::small_m;
  std::vector<Launch> launches;
  std::vector<LoweredOps> lowered;  // in the IR's order
};

// How long an activation buffer's contents must last, which decides what it may share memory with
// (compiler/plan/arena_plan.hpp): from the first launch of a step that names it to the last
// (`launches`), on to the step's end (`step`: the host copies it back after the graph), or from
// one step into the next (`steps`: state the kernels keep across launches, or what the next step
// reads before anything writes it).
enum class BufferLifetime { launches, step, steps };

struct ArenaBuffer {
  std::string name;
  std::int64_t bytes = 0;
  BufferLifetime lifetime = BufferLifetime::launches;
};

struct KernelPlan {
  std::string target;  // the architecture the kernels are for: "sm_90a", "sm_100a"
  std::vector<KernelInstance> kernels;
  std::vector<BucketProgram> buckets;  // decode buckets largest first, then prefill largest first
  std::vector<ArenaBuffer> arena;
  int ranks = 1;  // tensor-parallel ranks: each runs these kernels on its part of the weights
  // Step descriptor dimensions (its batch and page-table sizes follow from the serving config).
  int max_tokens = 0, max_sample_rows = 0;
  // Attention's split of the context (positions) and partial slots per token.
  int attn_split = 0, attn_num_splits = 0;
  std::vector<float> rope_inv_freq;
};

// The GPU the artifact is planned for: the H200's 132 SMs (persistent grids are one CTA an SM).
inline constexpr int kSms = 132;

// Prefill buckets of at least this many tokens run their qkv, o, gate/up and down projections on
// the prefill GEMM (kernels/gemm_prefill.cuh); smaller ones, and decode, on the small-M GEMM
// (kernels/gemm_small.cuh). The two give every row the same bits (batch invariance across
// buckets; GPU test GpuKernels.SmallGemmMatchesPrefillGemmBitForBit), so the choice is speed only:
// at 128 and 256 rows the small GEMM takes about half the time (`telos-kernel-bench --gemm-m`,
// H200: Llama-3.1-8B's four GEMMs of a layer 141.5 against 287.4 µs at 128 rows, 196.6 against
// 320.4 µs at 256).
inline constexpr int kPrefillGemmMinRows = 512;

// RMSNorm's block (kernels/norm.cuh, kNormThreads): its reduction's partition is part of the
// arithmetic, shared by the rmsnorm kernel and the small GEMM's norm prologue.
inline constexpr int kNormThreads = 128;

// The small-M GEMM's launch shape: one consumer warpgroup and a producer warp, 64-token M tiles.
inline constexpr int kSmallGemmThreads = 160;
inline constexpr int kSmallGemmBlockM = 64;

// How the small-M GEMM covers `n` output columns over K = k for `tokens` rows: `bn` weight rows
// per CTA (SwiGLU: bn / 2 gate rows and their up rows, so `cols` = bn / 2 outputs) and the depth of
// its stage ring, as deep as the shared memory of the CTAs sharing an SM allows (the bytes in
// flight are what reach the bandwidth). Neither changes the arithmetic. `a_box`: rows of the
// activations' TMA box, the tokens up to 64 (the rest of its tile is never loaded: those result
// rows are never stored).
// `norm_blocks`: with the norm prologue (gemm_small_norm_*, up to kSmallGemmNormMaxRows tokens),
// the K blocks of the resident normalized A (64 · 2 bytes per token each), and the stages hold
// weights only.
struct WeightImage;
struct SmallGemmTiling {
  int bn = 32, cols = 32, stages = 2, a_box = kSmallGemmBlockM;
  int tiles_m = 1, tiles_n = 1;  // the grid
  int norm_blocks = 0;
  // CTAs along M sharing each weight tile by TMA multicast (the gemm_small_*_cl kernels; 1: none):
  // it divides tiles_m, and the weight map's box is cols / cluster rows (gemm_small.cuh).
  int cluster = 1;
  int w_box() const { return cols / cluster; }
  // Whether these tiles may run on clusters of `cl` M tiles: cl divides the M tiles and each CTA's
  // slice of a weight tile is whole 8-row swizzle repeats (gemm_small.cuh's static_assert).
  bool cluster_fits(int cl) const { return tiles_m % cl == 0 && cols % (8 * cl) == 0; }
  // Consumer warpgroups a CTA: 1, or 2 on M tiles of 128 rows (each warpgroup 64 rows of A against
  // the same weight stages; small_gemm_two_warpgroups; where the plan takes 2: small_gemm_tiling).
  int warpgroups = 1;
  // K blocks a stage (one cluster-less warpgroup, no norm prologue; K a multiple of 64 · kps): a
  // stage of kps slots behind one barrier pair, the same wgmma chain (gemm_small.cuh).
  int kps = 1;
  // Where the weight rows come from (gemm_small.cuh's W_BH, W_BOX): 0, the weight's 2D map; else
  // its slot image's map (`timg:`), whose tiles hold image_rows rows of each half, in boxes of
  // image_box rows (image_box_rows).
  int image_rows = 0, image_box = 0;
  int block_m() const { return kSmallGemmBlockM * warpgroups; }
  int threads() const { return 128 * warpgroups + 32; }
  // The kernel instance for these tiles: gemm_small_<epi><M, N, K, BN, STAGES[, KPS]>, or on
  // clusters or two warpgroups gemm_small_<epi>_cl<..., CL[, WG]> (epi: bf16, residual, swiglu,
  // f32cand; KPS only for bf16, residual and swiglu), then W_BH, W_BOX where the weight comes from
  // its slot image (image_rows > 0; not f32cand).
  std::string instance(const std::string& epi, int m, int n, int k) const;
  // These tiles with `rows` weight rows a tile over n output columns (SwiGLU: rows / 2 gate and
  // rows / 2 up rows): bn, cols and tiles_n; nothing else changes.
  SmallGemmTiling with_bn(int rows, int n, bool swiglu) const;
  // These tiles reading the weight from its slot image `img` where their weight rows make whole
  // boxes of it (image_rows and image_box from image_box_rows), else as they are (its own map).
  SmallGemmTiling reading(const WeightImage& img) const;
  int smem() const;            // dynamic shared memory per CTA
  int resident_bytes() const;  // of smem(): what is not the stages (the norm prologue's A and sums)
};
// What the tiling may use (telos-kernel-bench times other choices than the plan's): the shared
// memory of an SM that the grid's resident CTAs fill together, the most stages of a CTA's ring,
// the weight rows per tile (0: the plan's choice), and the consumer warpgroups a CTA (0: the
// plan's choice; 1: one).
struct SmallGemmLimits {
  int smem_per_sm = 228 * 1024;
  int max_stages = 16;
  int bn = 0;
  int warpgroups = 0;
};
SmallGemmTiling small_gemm_tiling(int n, int k, int tokens, bool swiglu, bool norm = false,
                                  const SmallGemmLimits& limits = {});

// The small-M GEMM on tcgen05 (kernels/gemm_small_sm100.cuh; sm_100a): 128 weight rows a CTA as
// the MMA's A (SwiGLU: 128 gate rows and their 128 up rows, 128 outputs), the tokens as its N in
// tiles of up to 256 (`tile_tokens`: 64-row groups, the producer's; `a_box` rows of them loaded,
// the MMA's N those rounded up to 16), and a stage ring as deep as the shared memory of the CTAs
// sharing an SM allows, as for sm_90a. The grid is (tiles_m, tiles_n); the LM head's greedy
// candidates are one a weight tile, tiles_n a row. With `norm` (up to kSmallGemmNormMaxRows
// tokens) the norm forms' tiles (gemm_small_sm100_norm_*: the tokens RMSNorm(x), resident for the
// whole K, `norm_blocks` K blocks of them; the stages hold weights only). The kernel's
// SmallGemmSm100 and SmallEpilogueSm100 state the same tiles (test small_epilogue_sm100_test
// compares them).
inline constexpr int kSmallGemmSm100Threads = 192;
inline constexpr int kSmallGemmSm100Rows = 128;
struct SmallGemmSm100Tiling {
  int tile_tokens = 64, a_box = 1, mma_n = 16, w_rows = kSmallGemmSm100Rows, stages = 2;
  int tiles_m = 1, tiles_n = 1;
  int norm_blocks = 0;
  int stage_bytes() const;  // the tokens' rows (1024-byte repeats; none with the norm), the W rows
  int resident_bytes() const;  // the norm forms' resident tokens (kernels/norm_rows.cuh)
  int smem() const;            // the resident tokens, the stages and 1024 bytes of alignment
  // gemm_small_sm100_<epi><M, N, K, STAGES> (epi: bf16, residual, swiglu, f32cand), or with the
  // norm gemm_small_sm100_norm_<epi><M, N, K, STAGES, EPS> (epi: bf16, swiglu; `eps` the
  // epsilon's literal).
  std::string instance(const std::string& epi, int m, int n, int k,
                       const std::string& eps = "") const;
};
SmallGemmSm100Tiling small_gemm_sm100_tiling(int n, int k, int tokens, bool swiglu,
                                             bool norm = false);

// The small GEMM on an e4m3 weight (gemm_small_e4m3_*, kernels/gemm_e4m3.cuh): small_gemm_tiling's
// weight tiles for one consumer warpgroup, on no cluster, one K block a stage, each stage also
// holding the bn raw e4m3 rows of 64 bytes and their barrier, as many stages as the same shared
// memory share gives. The kernel's CTA adds kSmallGemmConverterThreads.
inline constexpr int kSmallGemmConverterThreads = 128;
// With `norm` (up to kSmallGemmNormMaxRows tokens) the norm prologue's tiles and resident A
// (gemm_small_e4m3_norm_*).
SmallGemmTiling small_gemm_e4m3_tiling(int n, int k, int tokens, bool swiglu, bool norm = false);
// gemm_small_e4m3_<epi><M, N, K, BN, STAGES, SBR, SBC> (epi: bf16, residual, swiglu, f32cand), SBR
// x SBC the weight's scale blocks.
std::string small_gemm_e4m3_instance(const SmallGemmTiling& t, const std::string& epi, int m, int n,
                                     int k, int sbr, int sbc);
int small_gemm_e4m3_smem(const SmallGemmTiling& t);

// The small-M W8A8 GEMM (gemm_small_w8a8_*, kernels/gemm_small_w8a8.cuh): small_gemm_tiling's
// tiles for one consumer warpgroup, no cluster, one K block of 128 e4m3 columns a stage, the
// weight tile narrowed to divide 128 rows (its rows in one 128-row scale block; SwiGLU: its gate
// and up halves, n a multiple of the half) and as many stages as the same shared memory share
// gives (a stage has the bf16 form's bytes: smem()), no more than K has blocks.
SmallGemmTiling small_gemm_w8a8_tiling(int n, int k, int tokens, bool swiglu);
// gemm_small_w8a8_<epi><M, N, K, BN, STAGES> (epi: bf16, residual, swiglu, f32cand).
std::string small_gemm_w8a8_instance(const SmallGemmTiling& t, const std::string& epi, int m, int n,
                                     int k);

// The LM head on the small GEMM (gemm_small_f32cand: f32 logits, and each weight tile's greedy
// candidate a row for the sampler): weight tiles of the largest of 128, 64, 32, 16 rows that
// divides the vocabulary (fewer CTAs re-reading A, and the whole K in flight in two stages). From
// two M tiles of rows on (more than 64), 256-row tiles of 4 stages where 256 divides the
// vocabulary: each weight tile then serves more rows (docs/performance.md). The logits' bits do not
// depend on the tile (the wgmma chain over K), and a row's greedy token not on how its candidates
// partition the vocabulary (the largest logit, the lowest id among equals), which is all the
// sampler reads them for; so the tile, and the candidate count a row, may differ per bucket. The
// 256-row tiles run on two consumer warpgroups a CTA where the hidden size is at most
// kSmallGemmTwoWarpgroupsMaxK (`warpgroups`: 0 the plan's choice, 1 one warpgroup; the same bits
// either way).
SmallGemmTiling lm_head_tiling(int vocab, int hidden, int rows, int warpgroups = 0);
// The W8A8 LM head's tiles (gemm_small_w8a8_f32cand): lm_head_tiling's on one warpgroup, weight
// tiles of at most 128 rows (one scale block), stages of one 128-column K block in the same shared
// memory: the projections' small-M tiles (32 rows, 2 stages) left the 1B's head well short of the
// ~88% of copy the bf16 head reaches on 128-row tiles.
SmallGemmTiling lm_head_w8a8_tiling(int vocab, int hidden, int rows);

// The deepest K at which the plan runs the small GEMM's wide tiles on two consumer warpgroups
// (small_gemm_tiling; timed faster at K = 2048 and 4096, not at 8192 and 14336).
inline constexpr int kSmallGemmTwoWarpgroupsMaxK = 4096;

// The weight bytes a ring of two K blocks a stage holds in the plan's one-M-tile small GEMMs
// (small_gemm_tiling; the best of the rings timed at M = 1: 12 stages of 32 rows, 8 of 48).
inline constexpr int kSmallGemmKpsRingWeightBytes = 96 * 1024;

// `t` (for `tokens` rows, no norm prologue, more than 64 tokens) on two consumer warpgroups a CTA:
// M tiles of 128 rows, the A box 128 rows, as many of t's stages as fit the shared memory.
SmallGemmTiling small_gemm_two_warpgroups(SmallGemmTiling t, int tokens);

// Buckets of up to this many tokens fold the RMSNorm before the QKV and gate/up projections into
// the GEMM (A, M rows, resident for the whole K); larger ones launch rmsnorm into h ...
inline constexpr int kSmallGemmNormMaxRows = 8;

// ... and only for models whose layers hold at most this many weight bytes. The fold trades the
// rmsnorm launch (a few µs in a graph under PDL) for the prologue's latency after the wait and for
// the window in which the GEMM's weights stream in under the short rmsnorm: it pays on a small
// layer (Llama-3.2-1B's 60 MB), where launches dominate, and loses on a large one (Llama-3.1-8B's
// 436 MB), whose GEMMs are bandwidth-bound (docs/performance.md).
inline constexpr long long kSmallGemmNormFoldMaxLayerBytes = 128LL << 20;

// One-token decode buckets also fold the QKV epilogue into the QKV GEMM where their layers are not
// run whole by decode_layer_persistent (shapes it does not take) (gemm_small_norm_qkv: the
// last CTA of each head runs it for every token in turn, a serial tail that grows with the
// tokens: at 8 tokens it costs more than the epilogue's own launch).
inline constexpr int kSmallGemmQkvFoldMaxRows = 1;

// Decode buckets of up to this many tokens run each layer as one persistent launch
// (decode_layer_persistent, kernels/decode_persistent.cuh: its seven phases, norm + QKV GEMM, the
// QKV epilogue, attention splits, the combine, o, norm + gate/up, down, between grid-wide counts,
// one weight stream per SM through a ring of shared memory; a kernel boundary drains the stream for
// several µs, docs/performance.md). Its grid is kSms CTAs that must all be resident at once:
// the artifact is for the H200's 132 SMs.
inline constexpr int kDecodeLayerPersistentMaxRows = 1;
inline constexpr int kPersistentThreads = 160;  // the consumer warpgroup and the producer warp

// decode_layer_persistent's tiles and ring for a model: weight rows per tile of qkv, o, gate/up
// (gate + up) and down (a multiple of 8 from 16 to 64 that gives the busiest CTA the fewest rows:
// 16 where 32-row tiles would leave SMs without one, the 1B shape's o and down; 24 and 48 for the
// 1B's and the 8B's qkv, one wave; more where K is not whole 8 KB slots of smaller tiles), and the
// ring's 8 KB slots beside the resident A of the largest K
// and the attention's static shared memory. `nqkv` is (Hq + 2 Hkv) D, `ko` Hq D.
// A ring slot: 8 KB of weights and its pair of barriers.
inline constexpr int kPersistentSlotBytes = 8192 + 16;
// The e4m3 form (decode_layer_persistent_e4m3): a raw slot holds a ring slot's K blocks of e4m3
// (4 KB) and its pair of barriers; the raw ring takes the shared memory the bf16 ring had, less
// kPersistentE4m3Slots ring slots, which the converter warps fill (kernels/decode_persistent.cuh
// says why). Its CTA is the consumer warpgroup and the converter warps (one of them the producer).
inline constexpr int kPersistentRawSlotBytes = 4096 + 16;
inline constexpr int kPersistentE4m3Slots = 4;
inline constexpr int kPersistentE4m3Threads = 128 + kSmallGemmConverterThreads;
// A ring slot of the sm_100a layer: 256 weight rows of 128 bytes (kernels/decode_layer_sm100.cuh,
// LayerSm100::kSlotBytes) and its pair of barriers.
inline constexpr int kPersistentSm100SlotBytes = 32768 + 16;
// Whether decode_layer_persistent's ring takes tiles of bn of the n weight rows over K = k: whole
// tiles, whole 8-row groups, 64 / bn whole K blocks a slot and K in whole slots (the kernel's
// persistent_tile_ok, decode_persistent.cuh).
inline constexpr bool persistent_tile_fits(int bn, int k, int n) {
  return bn % 8 == 0 && bn >= 8 && bn <= 64 && n % bn == 0 && k % (64 * (64 / bn)) == 0;
}
// Whether the W8A8 layer's ring takes tiles of bn of the n weight rows over K = k: as
// persistent_tile_fits, with a K block of 128 e4m3 columns (a slot holds twice the K of a bf16
// slot; LayerW8a8::tile_ok, kernels/decode_layer_w8a8.cuh).
inline constexpr bool persistent_w8a8_tile_fits(int bn, int k, int n) {
  return bn % 8 == 0 && bn >= 8 && bn <= 64 && n % bn == 0 && k % (128 * (64 / bn)) == 0;
}
// The W8A8 layer's resident e4m3 A for a largest K of k_max (LayerW8a8::kABytes): the row in whole
// KBs, 16 bytes of alignment and the per-128 scales.
inline constexpr int persistent_w8a8_a_bytes(int k_max) {
  return (k_max + 1023) / 1024 * 1024 + 16 + k_max / 128 * 4;
}
// The W8A8 layer's act buffer for an intermediate size i (kernels/decode_layer_w8a8.cuh's
// W8a8Act::kWords words): the bf16 row, its e4m3 bytes, a scale a 128-column block, padded to 16
// bytes.
inline constexpr long long persistent_w8a8_act_bytes(int i) {
  return 2LL * i + 16LL * ((i / 4 + i / 128 + 3) / 4);
}
// A weight as the GEMMs read it: from its slot image in tiles of bn rows of one or two halves
// (support/slot_image.hpp; the one-token layer's `wimg:`, every other GEMM's `timg:`), or, bn 0,
// as it is (`tmap:`).
struct WeightImage {
  int bn = 0, halves = 1;
  int half_rows() const { return bn / halves; }
};
struct PersistentLayerTiling;
// The slot image in which the one-token layer of tiling `t` streams layer weight `weight` ("qkv",
// "o", "gate_up" or "down"): its tiles (gate/up: two halves) where the tiling's `bulk` mask has it
// and the layer fits, else none (bn 0).
WeightImage layer_weight_image(const PersistentLayerTiling& t, const std::string& weight);
// The rows of the boxes in which a GEMM takes `rows` consecutive rows of a weight half, starting
// at a multiple of `rows`, from the image: `rows` where they lie in one tile or are whole tiles,
// else their greatest common divisor with a tile's half (several boxes); 0 where that is not whole
// 8-row swizzle repeats (the GEMM then needs the weight itself).
int image_box_rows(const WeightImage& img, int rows);
// The prefill GEMM's box rows for its `rows` W rows a stage (256; SwiGLU two halves of 128) from
// image `img`: image_box_rows's where that is one box; else, for a one-half image, one box of the
// whole tiles that cover any `rows`-row window starting at a multiple of `rows` (more rows than
// `rows`: gemm_prefill.cuh's kCover) where the window's offsets into a tile are whole 8-row swizzle
// repeats and three stages of them fit (the 8B's qkv: 288 rows, 6 tiles of 48); else
// image_box_rows's several boxes.
int prefill_image_box_rows(const WeightImage& img, int rows);
// The prefill GEMM's dynamic shared memory with boxes of `w_box` rows (0: the weight's own map):
// as many stages of 128 A rows and max(256, w_box) W rows as fit, at most 4, the epilogue's four
// 8 KB chunks and 1024 bytes of alignment (gemm_prefill.cuh, PrefillGemm::stages_for).
int prefill_gemm_smem(int w_box);
// The CTA-pair prefill GEMM (gemm_prefill_sm100_pair_*, and its Hopper twin) with `w_rows` W rows a
// stage (tcgen05: a CTA's half of the tile, 128; the twin: the whole tile, 256): as many stages of
// 128 A rows and w_rows W rows as fit, at most 6 (6 of 32 KB; the twin 4 of 48 KB), the
// epilogue's chunks and the alignment (gemm_prefill_shape.cuh, PrefillPairTiling).
int prefill_pair_smem(int w_rows);
// The prefill GEMM on an e4m3 weight (gemm_prefill_e4m3_*): each stage also holds 256 raw rows of
// 64 bytes and a third barrier, so 3 stages fit (PrefillGemm::stages_for).
int prefill_gemm_e4m3_smem();
// W8A8 (kernels/gemm_w8a8.cuh): the prefill GEMM's dynamic shared memory (PrefillW8a8Gemm::smem:
// 128 x 128 tiles, six stages of one K block of 128 e4m3 columns); quantize_rows_e4m3's threads
// and its blocks over `rows` rows of k columns (one (row, K block) a warp).
int prefill_gemm_w8a8_smem();
int quantize_rows_threads();
int quantize_rows_blocks(int rows, int k);
struct PersistentLayerTiling {
  int bq = 32, bo = 32, bg = 64, bd = 32, stages = 0, smem = 0;
  bool fits = false;  // the model's shapes divide into whole slots and tiles
  // The QKV epilogue in the QKV tiles (decode_layer_persistent's QKV_ROPE).
  bool qkv_rope = false;
  // The weights streamed from their slot images, one bulk copy a ring slot, not through tensor maps
  // (decode_layer_persistent's BULK: bit 0 qkv, 1 o, 2 gate/up, 3 down).
  int bulk = 0;
  // e4m3 weights: the raw ring's slots (decode_layer_persistent_e4m3's RAW_STAGES; `stages` is then
  // kPersistentE4m3Slots); 0 for bf16 weights.
  int raw_stages = 0;
};
// `qk_norm`: the model normalizes q and k per head (Qwen3), whose QKV epilogue needs a head's
// whole row, so it keeps its own phase. `e4m3`: the four weights are e4m3
// (decode_layer_persistent_e4m3): the same tiles, the rings as kPersistentRawSlotBytes says, no
// slot images (they hold bf16 tiles).
PersistentLayerTiling decode_layer_tiling(int h, int nqkv, int ko, int i, int head_dim,
                                          bool qk_norm = true, bool e4m3 = false);
// The W8A8 layer's (decode_layer_persistent_w8a8, kernels/decode_layer_w8a8.cuh):
// decode_layer_tiling's choice of tiles (the fewest rows on the busiest CTA) among those whose K is
// whole slots of 128-column blocks (persistent_w8a8_tile_fits), gate/up's 32 rows instead of 64
// where that puts fewer ring slots on the busiest CTA; the ring's 8 KB slots as many as
// fit beside the bf16 resident A, the e4m3 one (persistent_w8a8_a_bytes) and the static shared
// memory (a slot of e4m3 holds twice the K, so the ring holds twice the weight rows' K in flight in
// the same bytes); no slot images (they hold bf16 tiles). It fits where K is whole 128-column
// blocks too.
PersistentLayerTiling decode_layer_w8a8_tiling(int h, int nqkv, int ko, int i, int head_dim,
                                               bool qk_norm);
// The sm_100a layer's (decode_layer_persistent_sm100, kernels/decode_layer_sm100.cuh): tiles of
// 128 weight rows, gate/up's of 128 gate and 128 up rows (the tcgen05 chain gemm_small_sm100 runs,
// M 128, which the bits require), 32 KB ring slots (kPersistentSm100SlotBytes) as many as fit
// beside the resident A and the static shared memory, the QKV epilogue in the QKV tiles without QK
// norm, and no slot images (the sm_100a GEMMs of the other buckets read the weights as they are).
// It fits where every weight's rows and K are whole tiles and slots.
PersistentLayerTiling decode_layer_sm100_tiling(int h, int nqkv, int ko, int i, int head_dim,
                                                bool qk_norm);
// Its Hopper twin's (decode_layer_persistent_sm100_twin, a GPU test's kernel): the same tiles; the
// static shared memory also holds the image of Tensor Memory (kPersistentSm100TwinImageBytes:
// LayerSm100::image_bytes), so the ring keeps as many of `t`'s slots as still fit.
inline constexpr int kPersistentSm100TwinImageBytes = 128 * (32 + 4) * 4;
PersistentLayerTiling decode_layer_sm100_twin_tiling(PersistentLayerTiling t);

// Attention cuts the context into splits of kAttnSplit positions (four 16-position chunks per
// warp of a block) dealt round-robin to attn_partial_slots(...) partial slots per token: at most
// 32, since the f32 partials in the arena grow with them. Both depend on the model only, never on
// the batch. 256 positions rather than 128: a block's fixed cost (Q staging, the merge of its
// warps, the partials' stores) is spread over twice the K/V, faster at every batch and context
// timed. The serving config's attention_split may take kAttnSplitLong instead
// (CodegenInput::attention_split): the same argument once more, for models served at long
// contexts and many rows, at a cost where the items do not fill the GPU (batch 1-8 at short
// contexts). No split wins everywhere, so it is the deployment's (docs/artifact.md,
// docs/performance.md).
constexpr int kAttnSplit = 256;
constexpr int kAttnSplitLong = 512;
int attn_partial_slots(int max_positions, int split = kAttnSplit);
// attn_split's grid along the slots, S (its z): each block runs slots z, z + S, ... of its (tile,
// KV head) one after another. Every slot as its own block (S = NSPLIT) leaves most blocks empty at
// short contexts in buckets of many rows (batch 256, 8 KV heads, 32 slots: 65536 blocks, each
// launched to read a position and exit), so S is the smallest that still gives the bucket about
// kAttnSplitGridBlocks blocks, at most NSPLIT. Which block runs a slot changes no bit, so S may
// depend on the bucket. 4096 from telos-kernel-bench --sweep's rows (every z from 32 down, at
// contexts 576 and 4096, batch 16 to 256): the z this target gives is within 2% of the best in
// every row. Fewer blocks lose where every slot has work (batch 256 at z = 1); more cost their
// empty blocks at contexts shorter than a split (docs/performance.md).
constexpr int kAttnSplitGridBlocks = 4096;
int attn_grid_slots(int tiles, int kv_heads, int partial_slots);
// attn_split loads each warp's next chunk while it computes one (LOAD_AHEAD: two blocks an SM
// instead of three, for the registers) in buckets of one token a tile with at most this many
// split rows: there the items are too few to fill three blocks an SM and the chain of chunk loads
// is the item's time. The loads only: the bits are the same either way.
constexpr int kAttnSplitAheadMaxRows = 8;
// On an e4m3 cache LOAD_AHEAD's chunk in flight holds half the registers, and three blocks an SM
// fit it (160 registers at head dim 128, no spills) from this many split rows: at 4 and 8 rows
// 9-13% faster than two at 16k and 32k positions (level at 4k). Below them an e4m3 cache streams
// its chunks through the BULK ring where it fits (attn_split_bulk_fits): with f16 operands a
// chunk's arithmetic is short enough that the ring's chunks in flight pay, one row at 32k 37.8 ->
// 33.8 µs, at 4k 14.5 -> 13.7 (telos-kernel-bench, H100; docs/performance.md).
constexpr int kAttnSplitAheadThreeBlocksMinRows = 4;
// Buckets of at least this many split rows (and no LOAD_AHEAD) run attn_split four blocks an SM
// (its BLOCKS: 128 registers a thread, no spills at head dim 128) instead of three: 16 warps an SM
// for a kernel bound by its loads' latency, faster from 64 rows on at every context timed, at 16
// rows only at long contexts (docs/performance.md). Registers only: the same bits. Only where the
// 128 registers hold without spills for every tile the plan gives (ptxas, CUDA 13.0): head dim 64
// or less at any group; head dim 128 with G = 2, 4 or 8 (Qwen2.5-1.5B's G = 6 at one token a block,
// G = 1 in tiles of 16 and G = 16 spill): attn_split_four_blocks; test
// Codegen.AttnSplitFourBlocksCompileWithoutSpills.
constexpr int kAttnSplitFourBlocksMinRows = 64;
bool attn_split_four_blocks(int head_dim, int group);
// attn_split loads a split's page ids together when the split starts (PAGE_AHEAD) wherever a
// 16-position chunk lies in one page: a little faster in every decode row timed, none slower. The
// loads only: the same bits either way.
static_assert(kAttnSplitLong / 64 < 32, "PAGE_AHEAD: a warp's chunks of a split within its lanes");
inline bool attn_split_page_ahead(int page_size) {
  return page_size % 16 == 0;
}
// attn_split's dynamic shared memory with BULK ring slots a warp (kernels/attention.cuh: pages of
// 16 positions, one token a block): four warps' slots of a page's K and V (elem_bytes an element:
// 2 for a bf16 cache, 1 for an e4m3 one), and an mbarrier a slot.
inline int attn_split_ring_bytes(int page_size, int head_dim, int bulk, int elem_bytes = 2) {
  return 4 * bulk * (2 * page_size * head_dim * elem_bytes + 8);
}
// Buckets of at least kAttnSplitBulkMinRows split rows, one token a tile, without LOAD_AHEAD,
// stream each warp's chunks through kAttnSplitBulk ring slots of bulk copies (BULK, three blocks
// an SM; pages of 16 positions) instead of the lanes' own loads, and a block's items (slots z,
// z + S, ...) through one ring, each item's last chunks beside the next one's first. Faster than
// the lanes' loads from 16 rows on where each warp has many chunks in a row (long contexts), and
// than four blocks an SM at 64 rows and more; BULK = 3 and 4 lose (their fewer blocks an SM);
// docs/performance.md. Loads only: the same bits. Where the ring and the kernel's static shared
// memory still fit three blocks an SM: groups of up to 6 query heads (Q's staging grows with G: at
// head dim 128, G = 8 and 16 leave room for two; test
// Codegen.AttnSplitBulkRingCompilesWithoutSpills); elsewhere four blocks from
// kAttnSplitFourBlocksMinRows rows stay.
constexpr int kAttnSplitBulkMinRows = 16;
constexpr int kAttnSplitBulk = 2;
inline bool attn_split_bulk_fits(int page_size, int group) {
  return page_size == 16 && group <= 6;
}
// An attn_split instance (kernels/attention.cuh) as the plan, the benches and the tests name it:
// the head shape, the KV pool's page geometry, the split and its partial slots, tokens a tile,
// LOAD_AHEAD, PAGE_AHEAD, blocks an SM (0: the kernel's default, two with LOAD_AHEAD, else
// three), BULK ring slots a warp
// (0: none) and EARLY (the PDL wait inside each item, after the loads of what earlier steps
// wrote: decode buckets only) and the cache's element format (kv_format: "" for bf16); the scale
// is log2(e) / sqrt(d).
struct AttnSplitKernel {
  int hq = 0, hkv = 0, d = 0, page = 0, maxp = 0;
  long long page_elems = 0;
  int split = 0, nsplit = 0, tpt = 1;
  bool ahead = false, pages = false;
  int blocks = 0, bulk = 0;
  bool early = false;
  std::string kv{};  // kv_format's: "" (bf16) or telos_kernels::KvE4m3<K_SCALE, V_SCALE>
  std::string instance() const;
  int smem() const { return bulk ? attn_split_ring_bytes(page, d, bulk, kv.empty() ? 2 : 1) : 0; }
};
// The KV cache's element format as the kernels that append to it and read it take it
// (kernels/common.cuh): "" for a bf16 cache (their default, KvBf16), else
// telos_kernels::KvE4m3<K_SCALE, V_SCALE> with the layer's scales (docs/fp8.md, "FP8 KV cache").
std::string kv_format(bool e4m3, float k_scale, float v_scale);
// `k` (its shape, split and TPT) with the plan's load scheme and blocks an SM for a bucket of
// `split_rows` split rows: LOAD_AHEAD up to kAttnSplitAheadMaxRows at TPT 1 (on an e4m3 cache three
// blocks an SM from kAttnSplitAheadThreeBlocksMinRows, BULK below them where it fits), else BULK
// from kAttnSplitBulkMinRows where attn_split_bulk_fits, else four blocks from
// kAttnSplitFourBlocksMinRows where attn_split_four_blocks; PAGE_AHEAD wherever
// attn_split_page_ahead and not BULK; EARLY in `decode` buckets (every row one generated token of
// its sequence, so the K/V rows before a row's position were written by earlier steps) of at most
// kAttnSplitEarlyMaxRows rows.
AttnSplitKernel attn_split_for_rows(AttnSplitKernel k, int split_rows, bool decode);
// EARLY (attn_split's PDL wait inside each item, after the loads of what earlier steps wrote) in
// decode buckets up to this many rows: faster at 8 and 64 rows in the engine, slower at 256,
// where the items' loads before the wait only compete with the QKV kernel the step waits on
// (docs/performance.md). Loads only: the same bits either way.
constexpr int kAttnSplitEarlyMaxRows = 64;

// attn_prefill (codegen/kernels/attention_prefill.cuh), the prompt rows' attention in prefill
// buckets: whether it takes the model's head dim and group (64 or 128; G query heads a KV head
// within its 128 rows), the tokens a tile (the largest power of two dividing the bucket whose G
// heads fit 128 rows), and its launch: threads and dynamic shared memory (AttnPrefill<D>'s
// kSmemBytes, restated for the host: Q, the K/V stages (3 at D 128, 6 at D 64), their barriers,
// 1 KB of alignment). It reads K/V through `tmap:kv:L:...` (docs/artifact.md).
inline constexpr int kAttnPrefillThreads = 384;
bool attn_prefill_fits(int head_dim, int group);
int attn_prefill_tokens_per_tile(int tokens, int group);
int attn_prefill_smem(int head_dim);
// An attn_prefill instance as the plan, the bench and the tests name it: the head shape, the KV
// pool's page geometry, tokens a tile, then NT (tiles along the tokens, persistent) where > 0
// (the scale is log2(e) / sqrt(d)).
std::string attn_prefill_instance(int hq, int hkv, int d, int page, int maxp, long long page_elems,
                                  int tpt, int nt = 0);
// The persistent form (NT > 0): where its K/V come by TMA (pages of a multiple of 8 positions
// dividing the 128-position key block) and two segment tables of `tpt` tokens fit beside the
// stages (not D 128 with 128 tokens a tile); its grid, min(KV heads x tiles, SMs) CTAs.
bool attn_prefill_persistent_fits(int head_dim, int page, int tpt);
int attn_prefill_persistent_grid(int hkv, int tiles);
// attn_prefill's tcgen05 form (codegen/kernels/attention_prefill_sm100.cuh), sm_100a's prompt
// attention: attn_prefill's arguments, head dims and grid (HKV, T / TPT; no persistent form), its
// instance (or with `twin` its Hopper twin's, attn_prefill_sm100_twin) and dynamic shared memory
// (AttnSm100Layout<D, TWIN>::kSmemBytes restated: Q, P, the K/V stages (2 at D 128, 5 at D 64),
// 1 KB of alignment; the twin: Q, 1 or 3 stages and the image of Tensor Memory, with P in it).
inline constexpr int kAttnPrefillSm100Threads = 384;
std::string attn_prefill_sm100_instance(int hq, int hkv, int d, int page, int maxp,
                                        long long page_elems, int tpt, bool twin = false);
int attn_prefill_sm100_smem(int head_dim, bool twin = false);

// Tokens per tile of attn_split (its last template argument, TPT): a block reads K and V once for
// TPT consecutive tokens, their G = num_heads / num_kv_heads query heads sharing the MMA's 16 rows
// (TPT * G <= 16), so a prefill chunk of T tokens reads its context's K/V T / TPT times, not T.
// Decode buckets keep 1: their rows are one token per sequence, there is nothing to share. Prefill
// buckets take the largest power of two with TPT * G <= 16 that divides the bucket's tokens (the
// kernel gets no token count, so its tiles must be whole; padding rows inside a tile have
// position -1 and write nothing): Llama (G = 4) 4, Qwen3-0.6B (G = 2) 8, G = 16 1. The grid's x
// is tokens / TPT. A token's bits are the same at every TPT (GPU test
// GpuKernels.AttentionTilesMatchSingleTokensBitForBit), so the choice is speed only.
int attn_tokens_per_tile(bool prefill, int tokens, int group);

// The prefill GEMM's launch (kernels/gemm_prefill.cuh, PrefillGemm): 384 threads, and a
// persistent grid over `rows` x `cols` outputs in tiles of 128 x `tile_cols`, at most one CTA an
// SM (its dynamic shared memory: prefill_gemm_smem).
inline constexpr int kPrefillGemmThreads = 384;
int prefill_gemm_grid(int rows, int cols, int tile_cols);
// The CTA-pair form's persistent grid: clusters of 2 CTAs (the kernels' __cluster_dims__), one
// a tile of 256 x `tile_cols`, at most one CTA an SM, so an even count.
int prefill_pair_grid(int rows, int cols, int tile_cols);

// The weight bytes of one layer's bf16 projections over hidden size `h`: qkv (`nqkv` rows), o
// (K `ko`), gate/up and down (intermediate size `i`): the measure of the norm fold.
long long layer_weight_bytes(int h, int nqkv, int ko, int i);
// Whether a bucket of `tokens` rows folds the RMSNorm before the QKV and gate/up projections into
// those GEMMs (gemm_small_norm_*, on sm_100a gemm_small_sm100_norm_*: the GEMM's input is
// RMSNorm(x), computed in the kernel): small-M GEMMs of up to kSmallGemmNormMaxRows rows, on layers
// of up to kSmallGemmNormFoldMaxLayerBytes.
bool folds_norm(ShapeClass shape, int tokens, long long layer_bytes);
// Whether it also folds the QKV epilogue into the QKV GEMM (gemm_small_norm_qkv, on sm_100a
// gemm_small_sm100_norm_qkv): up to kSmallGemmQkvFoldMaxRows rows where the norm folds.
bool folds_qkv_epilogue(bool fold_norm, int tokens);

// embed_gather's threads: 8 columns of a row a thread, whole warps, 32 to 256.
int embed_threads(int hidden);

// all_reduce_residual (kernels/all_reduce.cuh), a tensor-parallel graph's sum of the ranks'
// partials: blocks of kAllReduceThreads, each float4 of the rows' M x H elements one thread's,
// over at most kAllReduceMaxBlocks blocks (each block meets the same block of every rank through
// its own flag words, so the flags buffer holds kAllReduceMaxBlocks x ranks of them). The 8B's
// decode row (4096 floats) takes 4 blocks; prefill messages this size are NCCL's in the multi-GPU
// engine (docs/multi-gpu.md).
inline constexpr int kAllReduceThreads = 256;
inline constexpr int kAllReduceMaxBlocks = 64;
int all_reduce_blocks(int rows, int hidden);

// Whether the all-reduce of `rows` x `hidden` f32 partials over `ranks` ranks takes the two-shot
// form (all_reduce_residual_two_shot) rather than the one-shot. One-shot, each rank reads N - 1
// whole messages of m bytes from its peers; two-shot, 2 (N - 1) / N of one, for one more barrier
// round trip. It pays where the bytes it saves, (N - 1)(N - 2) m / N, take longer over NVLink than
// that barrier: kAllReduceBarrierBytes, the bytes a rank reads at NVLink 4's 450 GB/s a direction
// in the ~3 µs of a barrier round trip with its launch share (docs/multi-gpu.md, the latency
// model). Never at 2 ranks (both forms read m); from 900,000 bytes at 4 ranks (55 rows of 4096)
// and 257,143 at 8 (16 rows). telos-allreduce-bench times both forms at each size on the GPUs it
// has, which is how to check the figure.
inline constexpr long long kAllReduceBarrierBytes = 1350000;
bool all_reduce_two_shot(int rows, int hidden, int ranks);

// Whether the all-reduce of `rows` x `hidden` f32 partials goes through NCCL (docs/multi-gpu.md):
// ncclAllGather of the ranks' partials into `all_reduce_gather`, then gather_sum_residual, a
// collective entry whose fallback is the kernel form above. In prefill-GEMM buckets, from
// kAllReduceNcclMinBytes: where the message's copy over NVLink 4 (9.3 µs a peer at 450 GB/s)
// reaches NCCL's fixed cost graph-captured (~13 µs, against ~3 µs for our barrier), so the fixed
// cost no longer dominates the collective: 256 rows of the 8B's 4096 (its prefill-GEMM buckets
// start at kPrefillGemmMinRows, 512 rows: 8 MiB). Provisional: the figure to set from
// telos-allreduce-bench's table on two and eight GPUs (the size from which NCCL's graph row beats
// our best form).
inline constexpr long long kAllReduceNcclMinBytes = 4LL << 20;
bool all_reduce_nccl(ShapeClass shape, int rows, int hidden);
// gather_sum_residual's grid: blocks of kAllReduceThreads, a float4 a thread, grid-strided over at
// most kGatherSumMaxBlocks (8 a SM; it reads local memory only, no barrier).
inline constexpr int kGatherSumMaxBlocks = 8 * kSms;
int gather_sum_blocks(int rows, int hidden);

// all_reduce_residual_rmsnorm's grid: a block of kNormThreads a row, at most kAllReduceMaxBlocks
// (a block then takes every gridDim-th row).
int all_reduce_norm_blocks(int rows);

// The sampler holds a row in registers, spread over a cluster of up to 8 blocks (the portable
// cluster size) of up to 512 threads: 32 values a thread at V = 128256 (8 x 512 threads), 4 for
// the tiny fixtures (one block of 128).
struct SampleLaunch {
  int cluster = 1, threads = 128;
};
SampleLaunch sample_launch(int vocab);

// Whether a bucket's prompt rows run on attn_prefill: prefill buckets where it takes the head dim
// and group, in the plain order (no softmax / P·V overlap: faster at 4k-16k with K/V by TMA), Q in
// bf16 (Q_SPLIT costs 16-23% of the kernel and does not lower the 8B's worst teacher-forced
// position beyond the noise of bf16 activations; docs/performance.md). The split kernels then see
// the generated rows only (desc:split_positions; docs/artifact.md, "Prompt and generated
// tokens").
bool prompt_attention(bool prefill, int head_dim, int group);
// The rows the split kernels cover: every row, or with prompt attention the generated rows, the
// step's first, at most max_batch of them (the engine packs them so); the split tiles of tpt rows
// then end within the bucket since tpt divides it. Every other row of `attn` is attn_prefill's
// (its prompt rows, zeros for padding).
int attn_split_rows(bool prompt_attn, int tokens, int max_batch);

// `v` rounded to f32 and printed as a CUDA C++ float literal that reads back to the same value.
std::string float_literal(double v);

}  // namespace telos::codegen
