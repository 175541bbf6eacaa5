#include "codegen/lowering.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <variant>

#include "codegen/rope_table.hpp"
#include "support/error.hpp"

namespace telos::codegen {
namespace ir = compiler::ir;
namespace {

std::string num(long long v) {
  return std::to_string(v);
}

// Where a kernel joins the kernel table: the kernels of a bucket that are not in the table yet
// join it in this order of their roles, whatever order the bucket launches them in. The generated
// source lists the kernels in table order and the compile cache is keyed by the source, so this is
// the order the plan has always registered them in.
enum class TableRole {
  embed,
  attn_combine,
  attn_prefill,
  attn_split,
  o_proj,
  gate_up,
  down_proj,
  all_reduce,
  decode_layer,
  qkv_proj,
  norm,
  qkv_epilogue,
  final_norm,
  lm_head,
  sample,
};

// ---- Reading the IR -----------------------------------------------------------------------------

std::string epilogue_of(const ir::Op& op) {
  const ir::AttrValue* v = op.attr("epilogue");
  return v && std::holds_alternative<std::string>(*v) ? std::get<std::string>(*v) : "";
}

int int_attr(const ir::Op& op, const std::string& name) {
  return static_cast<int>(op.int_attr(name));
}

double float_attr(const ir::Op& op, const std::string& name) {
  const ir::AttrValue* v = op.attr(name);
  if (!v || !std::holds_alternative<double>(*v))
    fail("codegen: " + ir::print_op(op) + ": expected a float attribute " + name);
  return std::get<double>(*v);
}

const ir::Param& param_of(const ir::Graph& g, const ir::Op& op, std::size_t i) {
  const ir::Param* p = i < op.params.size() ? g.find_param(op.params[i]) : nullptr;
  if (!p) fail("codegen: " + ir::print_op(op) + ": no parameter " + num(static_cast<long long>(i)));
  return *p;
}

int dim(const ir::Param& p, std::size_t i) {
  return static_cast<int>(p.type.dims.at(i));
}

// A weight as a launch argument names it.
std::string weight(const ir::Op& op, std::size_t i) {
  return "w:" + op.params.at(i);
}

const ir::Op& first_op(const ir::Graph& g, const std::string& kind,
                       const std::string& epilogue = "") {
  for (const auto& op : g.ops())
    if (op->kind == kind && epilogue_of(*op) == epilogue) return *op;
  fail("codegen: the IR of @" + g.name + " has no " + kind +
       (epilogue.empty() ? "" : " with epilogue " + epilogue) +
       " op (codegen lowers the fused IR, after every pass)");
}

// The layer an op belongs to: its `layer` attribute, else the N of its layers.N.* parameter; -1
// for the ops outside the layers.
int op_layer(const ir::Op& op) {
  if (op.attr("layer")) return int_attr(op, "layer");
  for (const std::string& p : op.params)
    if (p.starts_with("layers.")) return std::stoi(p.substr(7));
  return -1;
}

// The dtype a rule is found by: the weight matrix of the op (of a layer's ops, the first),
// else the op's result's.
DType ops_dtype(const ir::Graph& g, const std::vector<const ir::Op*>& ops) {
  for (const ir::Op* op : ops)
    for (const std::string& name : op->params)
      if (const ir::Param* p = g.find_param(name); p && p->type.dims.size() == 2)
        return p->type.dtype;
  if (ops[0]->results.empty())
    fail("codegen: " + ir::print_op(*ops[0]) + ": an op without a result");
  return ops[0]->results[0]->type.dtype;
}

// Whether linear `op` runs W8A8: its input quantized to e4m3 (the W8A8 pass's `activations =
// "e4m3"`, which the verifier admits only on weights the W8A8 kernels take).
bool takes_w8a8(const ir::Op& op) {
  return op.attr("activations") != nullptr;
}
bool any_w8a8(const std::vector<const ir::Op*>& ops) {
  return std::any_of(ops.begin(), ops.end(), [](const ir::Op* op) { return takes_w8a8(*op); });
}

// The rope_kv_append linear's parameters: qkv, then its bias where there are 2 or 4, then q_norm
// and k_norm where there are 3 or 4 (compiler/ir/verifier.hpp).
bool has_qkv_bias(const ir::Op& op) {
  return op.params.size() == 2 || op.params.size() == 4;
}
bool has_qk_norm(const ir::Op& op) {
  return op.params.size() >= 3;
}

RopeInput rope_of(const ir::Op& op) {
  RopeInput r;
  r.type = op.str_attr("scaling");
  r.theta = float_attr(op, "theta");
  if (r.type == "llama3") {
    r.factor = float_attr(op, "factor");
    r.low_freq_factor = float_attr(op, "low_freq_factor");
    r.high_freq_factor = float_attr(op, "high_freq_factor");
    r.original_max_position_embeddings = int_attr(op, "original_max_position_embeddings");
  }
  return r;
}

// The model as the plan needs it whole (the KV pool's pages, the one-token layer's tiles, the
// arena), read from the IR: sizes from the parameters' shapes; heads, head dim, eps and RoPE from
// the ops' attributes.
struct ModelShape {
  int V = 0, H = 0, I = 0, L = 0, HQ = 0, HKV = 0, D = 0;
  int ranks = 1;  // tensor-parallel ranks: the sizes above are each rank's (heads, intermediate)
  double eps = 0;
  RopeInput rope;
  bool qk_norm = false;
  bool e4m3 = false;         // some weight is e4m3 (FP8; kernels/gemm_e4m3.cuh)
  bool layers_e4m3 = false;  // every layer projection's weight is (decode_layer_persistent_e4m3)
  bool w8a8 = false;         // some linear runs W8A8 (kernels/gemm_w8a8.cuh)
  bool layers_w8a8 = false;  // every layer projection does (decode_layer_persistent_w8a8)
  int NH() const { return HQ + 2 * HKV; }
};

ModelShape read_model(const ir::Graph& g) {
  ModelShape m;
  const ir::Param& embed = param_of(g, first_op(g, "embed"), 0);
  m.V = dim(embed, 0);
  m.H = dim(embed, 1);
  const ir::Op& attn = first_op(g, "paged_attention");
  m.HQ = int_attr(attn, "heads");
  m.HKV = int_attr(attn, "kv_heads");
  m.D = int_attr(attn, "head_dim");
  for (const auto& op : g.ops()) m.L += op->kind == "paged_attention";
  m.I = dim(param_of(g, first_op(g, "linear", "swiglu"), 0), 0) / 2;
  m.eps = float_attr(first_op(g, "rmsnorm"), "eps");
  const ir::Op& qkv = first_op(g, "linear", "rope_kv_append");
  m.rope = rope_of(qkv);
  m.qk_norm = has_qk_norm(qkv);
  m.ranks = g.ranks;
  m.e4m3 = std::any_of(g.params().begin(), g.params().end(),
                       [](const ir::Param& p) { return p.type.dtype == DType::E4M3; });
  m.layers_e4m3 = std::all_of(g.ops().begin(), g.ops().end(), [&](const auto& op) {
    return op->kind != "linear" || op_layer(*op) < 0 ||
           param_of(g, *op, 0).type.dtype == DType::E4M3;
  });
  m.w8a8 =
      std::any_of(g.ops().begin(), g.ops().end(), [](const auto& op) { return takes_w8a8(*op); });
  m.layers_w8a8 = std::all_of(g.ops().begin(), g.ops().end(), [](const auto& op) {
    return op->kind != "linear" || op_layer(*op) < 0 || takes_w8a8(*op);
  });
  return m;
}

void check_model(const ModelShape& m, const CodegenInput& in) {
  auto need = [](bool ok, const std::string& what) {
    if (!ok) fail("codegen: " + what);
  };
  // The GEMMs read K in 32-element steps and own weight rows in groups of 16.
  need(m.H > 0 && m.H % 32 == 0, "hidden_size must be a positive multiple of 32");
  need(m.I > 0 && m.I % 32 == 0, "intermediate_size must be a positive multiple of 32");
  // Attention keeps a 16-row MMA tile of query heads and a head's output in registers.
  need(m.D % 32 == 0 && m.D >= 32 && m.D <= 128, "head_dim must be a multiple of 32 up to 128");
  need(m.HQ > 0 && m.HKV > 0 && m.HQ % m.HKV == 0, "num_heads must be a multiple of num_kv_heads");
  need(m.HQ / m.HKV <= 16, "at most 16 query heads per KV head");
  need(m.V > 0 && m.L > 0, "vocab_size and num_layers must be positive");
  need(m.V % 16 == 0, "vocab_size must be a multiple of 16 (the LM head's weight tiles)");
  need(in.kv_page_size > 0 && in.max_seq_len > 0 && in.max_batch > 0,
       "serving.kv_page_size, max_seq_len and max_batch must be positive");
  need(!in.decode_buckets.empty() || !in.prefill_buckets.empty(), "no buckets to compile");
  need(in.attention_split == kAttnSplit || in.attention_split == kAttnSplitLong,
       "serving.attention_split must be " + std::to_string(kAttnSplit) + " or " +
           std::to_string(kAttnSplitLong));
  const bool e4m3_kv = in.kv_dtype == DType::E4M3;
  need(in.kv_dtype == DType::BF16 || e4m3_kv, "serving.kv_dtype must be bf16 or e4m3");
  const std::size_t scales = e4m3_kv ? static_cast<std::size_t>(m.L) : 0;
  need(in.kv_k_scales.size() == scales && in.kv_v_scales.size() == scales,
       "an e4m3 KV cache takes a K and a V scale a layer (" + std::to_string(m.L) +
           "), a bf16 one none; got " + std::to_string(in.kv_k_scales.size()) + " and " +
           std::to_string(in.kv_v_scales.size()));
}

// ---- What the buckets share, and one bucket -----------------------------------------------------

// What every bucket's rules share: the model, the serving config, the KV pool's page geometry,
// attention's split, the one-token layer's tiling and slot images, and what the arena must hold
// once every bucket is lowered.
struct ModelPlan {
  ModelShape m;
  const CodegenInput& serving;
  std::string target;    // "sm_90a" or "sm_100a": the lowering table's column
  bool tcgen05 = false;  // sm_100a: the GEMMs on tcgen05 (gemm_*_sm100), no wgmma kernels
  int page = 0, maxp = 0;
  long long page_elems = 0;
  int split = 0, nsplits = 0;
  long long layer_bytes = 0;
  bool e4m3_kv = false;  // the KV cache is e4m3 (docs/fp8.md, "FP8 KV cache")
  PersistentLayerTiling layer_t{};
  bool images = false;  // a bucket runs the one-token layer: the others read its slot images

  int qkv_arrival_counters = 0;     // gemm_small_norm_qkv's, when a bucket folds the QKV epilogue
  bool uses_layer_sync = false;     // decode_layer_persistent's grid-wide counters
  long long max_gather_rows = 0;    // the NCCL all-reduce's gather buffer: ranks x tokens rows
  long long max_lm_candidates = 0;  // the LM head's greedy candidates, all of a bucket's rows
  long long max_w8a8_k = 0;         // the widest input a W8A8 GEMM quantizes (buffers aq, aq_scale)

  // Where the GEMMs read layer weight `name` ("qkv", "o", "gate_up", "down"): from the slot image
  // the one-token layer streams, or (bn 0) the weight itself.
  WeightImage image(const std::string& name) const {
    return images ? layer_weight_image(layer_t, name) : WeightImage{};
  }
  // Layer `layer`'s KV format, the last template argument of the kernels that append to its pages
  // and read them: "" for a bf16 cache (their default).
  std::string kv(int layer) const {
    const auto l = static_cast<std::size_t>(layer);
    return kv_format(e4m3_kv, e4m3_kv ? serving.kv_k_scales.at(l) : 1.0f,
                     e4m3_kv ? serving.kv_v_scales.at(l) : 1.0f);
  }
};

bool has_layer_rule(ShapeClass shape, const std::string& target);

ModelPlan model_plan(const ModelShape& m, const CodegenInput& in, const std::string& target) {
  check_model(m, in);
  ModelPlan mp{m, in, target, target == "sm_100a"};
  mp.page = in.kv_page_size;
  mp.maxp = (in.max_seq_len + mp.page - 1) / mp.page;
  mp.page_elems = 2LL * m.L * m.HKV * mp.page * m.D;
  mp.split = in.attention_split;
  mp.nsplits = attn_partial_slots(mp.maxp * mp.page, mp.split);
  mp.layer_bytes = layer_weight_bytes(m.H, m.NH() * m.D, m.HQ * m.D, m.I);
  // The one-token decode layer's tiling (the same in every bucket that runs it). The weights in its
  // `bulk` mask stream from slot images (`wimg:`) unless the serving config keeps one copy of the
  // weights; every other GEMM of every bucket then reads those weights from the same image
  // (`timg:`), so that the image is the weight's only copy on the device.
  // On sm_100a the layer's tiles are the tcgen05 chain's 128 rows and it reads the weights as they
  // are (decode_layer_sm100_tiling: no slot images).
  // W8A8 layers: decode_layer_w8a8_tiling (the W8A8 chain's whole 128-column K blocks).
  mp.layer_t =
      mp.tcgen05 ? decode_layer_sm100_tiling(m.H, m.NH() * m.D, m.HQ * m.D, m.I, m.D, m.qk_norm)
      : m.layers_w8a8
          ? decode_layer_w8a8_tiling(m.H, m.NH() * m.D, m.HQ * m.D, m.I, m.D, m.qk_norm)
          : decode_layer_tiling(m.H, m.NH() * m.D, m.HQ * m.D, m.I, m.D, m.qk_norm, m.layers_e4m3);
  if (!in.decode_weight_images) mp.layer_t.bulk = 0;  // one copy of the weights: tensor maps
  // A tensor-parallel layer all-reduces twice between its GEMMs; decode_layer_persistent runs a
  // whole layer in one launch, so its one-token buckets take the small-M rules instead.
  if (m.ranks > 1) mp.layer_t.fits = false;
  // A target whose table has no `layer` rule runs one-token buckets on the small-M rules.
  if (!has_layer_rule(ShapeClass::one_token_decode, target)) mp.layer_t.fits = false;
  // sm_100a's layer has bf16 weights only (decode_layer_persistent_sm100).
  if (mp.tcgen05 && m.e4m3) mp.layer_t.fits = false;
  // The one-token layer reads its four weights all bf16 (decode_layer_persistent) or all e4m3
  // (decode_layer_persistent_e4m3); a model with some of them in each takes the small-M rules.
  if (m.e4m3 && !m.layers_e4m3) mp.layer_t.fits = false;
  // Likewise all W8A8 (decode_layer_persistent_w8a8) or none.
  if (m.w8a8 && !m.layers_w8a8) mp.layer_t.fits = false;
  // decode_layer_persistent appends and reads bf16 KV pages only: with an e4m3 cache, one-token
  // buckets take the small-M rules (docs/fp8.md, "FP8 KV cache").
  mp.e4m3_kv = in.kv_dtype == DType::E4M3;
  if (mp.e4m3_kv) mp.layer_t.fits = false;
  mp.images = std::any_of(in.decode_buckets.begin(), in.decode_buckets.end(), [&](int n) {
    return n > 0 && bucket_shape_class(false, n, mp.layer_t.fits) == ShapeClass::one_token_decode;
  });
  return mp;
}

// One bucket as its rules see it: its rows, its shape class and the folds it makes.
struct Bucket {
  std::string kind;  // "decode" or "prefill"
  int size = 0, T = 0, S = 0;
  ShapeClass shape = ShapeClass::small_m;
  bool fold_norm = false, fold_qkv = false;
  bool tcgen05 = false;  // the target's GEMMs are the sm_100a ones (ModelPlan::tcgen05)
  bool prefill() const { return kind == "prefill"; }
};

Bucket make_bucket(const ModelPlan& mp, const std::string& kind, int size, int tokens, int rows) {
  Bucket b{kind, size, tokens, rows};
  b.shape = bucket_shape_class(b.prefill(), tokens, mp.layer_t.fits);
  b.tcgen05 = mp.tcgen05;
  // The norm prologue is the small GEMM's on both targets (gemm_small_norm_* for bf16 and e4m3
  // weights, gemm_small_sm100_norm_* for bf16 ones: sm_100a refuses e4m3 weights), the folded QKV
  // epilogue its bf16 forms' only (gemm_small_norm_qkv, gemm_small_sm100_norm_qkv): for e4m3
  // weights qkv_rope_append_rows runs after the QKV GEMM, as in larger buckets. The same buckets
  // fold on both targets, and a token gets the same bits whether its bucket folds or not
  // (kernels/gemm_small.cuh, gemm_small_sm100.cuh: the norm is rmsnorm's arithmetic, the GEMM the
  // target's one chain).
  // W8A8 GEMMs read their input quantized, so rmsnorm writes h for the quantization to read.
  b.fold_norm = !mp.m.w8a8 && folds_norm(b.shape, tokens, mp.layer_bytes);
  b.fold_qkv = !mp.m.e4m3 && folds_qkv_epilogue(b.fold_norm, tokens);
  return b;
}

// The plan's kernel table: each instance once, in the order the buckets add them.
class KernelTable {
 public:
  explicit KernelTable(KernelPlan& plan) : plan_(plan) {}

  int add(const KernelInstance& k) {
    auto it = index_.find(k.instance);
    if (it != index_.end()) return it->second;
    const int id = static_cast<int>(plan_.kernels.size());
    plan_.kernels.push_back(k);
    index_.emplace(k.instance, id);
    return id;
  }

 private:
  KernelPlan& plan_;
  std::map<std::string, int> index_;
};

}  // namespace

// One bucket's lowering: the kernels its rules use (each joining the kernel table, by its role,
// when the bucket is done), its launches, and what each rule did.
class BucketLowering {
 public:
  BucketLowering(const ir::Graph& graph, ModelPlan& model, const Bucket& bucket)
      : graph(graph), model(model), bucket(bucket) {
    program_.kind = bucket.kind;
    program_.size = bucket.size;
    program_.tokens = bucket.T;
    program_.sample_rows = bucket.S;
    program_.shape = bucket.shape;
  }

  const ir::Graph& graph;
  ModelPlan& model;
  const Bucket& bucket;

  // A kernel the bucket uses: the handle launch() takes. The same instance gives the same handle,
  // with the earliest role of its uses.
  int use(TableRole role, KernelInstance kernel) {
    for (std::size_t i = 0; i < uses_.size(); ++i)
      if (uses_[i].kernel.instance == kernel.instance) {
        uses_[i].role = std::min(uses_[i].role, role);
        return static_cast<int>(i);
      }
    uses_.push_back({role, std::move(kernel)});
    return static_cast<int>(uses_.size()) - 1;
  }
  void launch(int kernel, std::array<int, 3> grid, std::vector<std::string> args) {
    program_.launches.push_back({kernel, grid, std::move(args)});
  }
  // A collective entry: its launches name kernels by the handles use() gave.
  void launch(Launch collective) { program_.launches.push_back(std::move(collective)); }
  // A kernel the table holds for this bucket, which the bucket does not launch.
  void declare(TableRole role, KernelInstance kernel) {
    program_.lowered.back().declared.push_back(use(role, std::move(kernel)));
  }
  void note(std::string text) { program_.lowered.back().note = std::move(text); }
  // Rows whose attention partials a launch writes: the arena's part_o and part_ml hold the most
  // of any bucket.
  void partial_rows(int rows) { program_.split_rows = std::max(program_.split_rows, rows); }

  void lower(const LoweringRule& rule, const std::vector<const ir::Op*>& ops) {
    LoweredOps& t = program_.lowered.emplace_back();
    for (const ir::Op* op : ops) t.ops.push_back(ir::print_op(*op));
    t.rule = rule.name;
    t.kernels = rule.kernels;
    t.first_launch = static_cast<int>(program_.launches.size());
    rule.lower(*this, ops);
    LoweredOps& done = program_.lowered.back();
    done.launches = static_cast<int>(program_.launches.size()) - done.first_launch;
  }

  // The program, its kernels added to `table` in role order (then in the order of first use).
  BucketProgram finish(KernelTable& table) {
    std::vector<std::size_t> order(uses_.size());
    std::iota(order.begin(), order.end(), std::size_t{0});
    std::stable_sort(order.begin(), order.end(),
                     [&](std::size_t a, std::size_t b) { return uses_[a].role < uses_[b].role; });
    std::vector<int> index(uses_.size());
    for (std::size_t i : order) index[i] = table.add(uses_[i].kernel);
    for (Launch& l : program_.launches) renumber(l, index);
    for (LoweredOps& t : program_.lowered)
      for (int& k : t.declared) k = index[static_cast<std::size_t>(k)];
    return std::move(program_);
  }

 private:
  struct Use {
    TableRole role;
    KernelInstance kernel;
  };
  // `l`'s kernel handles (its collective's launches too) as indices into the kernel table.
  static void renumber(Launch& l, const std::vector<int>& index) {
    if (l.collective.empty()) l.kernel = index[static_cast<std::size_t>(l.kernel)];
    for (std::vector<Launch>* nested : {&l.then, &l.fallback})
      for (Launch& n : *nested) renumber(n, index);
  }
  std::vector<Use> uses_;
  BucketProgram program_;
};

namespace {

// ---- Operands -----------------------------------------------------------------------------------

// bf16 maps have 64-column boxes; the f32 map of x (the prefill residual epilogue's TMA
// reduction) has 32-column boxes: one 128-byte swizzle span either way.
std::string tmap(const std::string& target, long long rows, long long cols, int box_rows,
                 int box_cols = 64) {
  return "tmap:" + target + ":" + num(rows) + ":" + num(cols) + ":" + num(box_rows) + ":" +
         num(box_cols);
}

// The weight operand of a GEMM: the map over its slot image, or over the weight.
std::string weight_map(const WeightImage& img, int img_box, const std::string& w_name,
                       long long rows, long long k, int w_box) {
  if (img_box > 0)
    return "timg:" + w_name.substr(2) + ":" + num(img.bn) + ":" + num(img.halves) + ":" +
           num(img_box);
  return tmap(w_name, rows, k, w_box);
}

// ---- GEMMs --------------------------------------------------------------------------------------

// One GEMM of W [n (2n for SwiGLU), k] over the bucket's T rows.
struct Gemm {
  KernelInstance kernel;
  std::array<int, 3> grid;
  int a_box, w_box;  // tensor-map box rows of the activations and the weights
  int out_box_cols;  // prefill: outputs through a map (bf16: 64 x 64 boxes, the f32 residual
                     // stream: 64 x 32); small-M: 0, a pointer
  WeightImage img;   // the weight from its slot image (bn 0: the weight's own map)
  int img_box = 0;   // then the image map's box rows
};

// Prefill GEMM buckets: the prefill GEMM (128-row tiles, persistent grid); every other bucket the
// small-M GEMM (64-row tiles, narrow weight tiles). On sm_100a their tcgen05 forms
// (gemm_prefill_sm100_pair_*: 256-row tiles on CTA pairs, the same arguments;
// gemm_prefill_sm100_*: the Hopper kernel's tiles and shared memory; gemm_small_sm100_*: 128
// weight rows a CTA, the tokens as the MMA's N, no slot images). Both compute
// each output element with the same wgmma chain over K and the same epilogue arithmetic
// (kernels/gemm_small.cuh), so a row's bits do not depend on which of them ran. `epi` is bf16,
// residual or swiglu (the suffix of gemm_prefill_* / gemm_small_*); `norm_eps`, where not empty,
// folds the RMSNorm of x into the GEMM (gemm_small_norm_*, gemm_small_sm100_norm_*); `img` is the
// weight's slot image, read where the GEMM's weight rows make whole boxes of it.
Gemm choose_gemm(const Bucket& b, const std::string& epi, int n, int k, const WeightImage& img,
                 const std::string& norm_eps) {
  const bool swiglu = epi == "swiglu";
  const std::string dims = "<" + num(b.T) + ", " + num(n) + ", " + num(k);
  auto image_args = [&](int box) {
    return box > 0 ? ", " + num(img.half_rows()) + ", " + num(box) : std::string();
  };
  if (b.shape == ShapeClass::prefill_gemm) {
    const int cols = swiglu ? 128 : 256;
    const int box = prefill_image_box_rows(img, cols);
    // sm_100a: the CTA pair (gemm_prefill_sm100_pair_*), each CTA loading half of a 256 x 256
    // tile's weight rows through the weight's own map in 128-row boxes. The one-CTA form stays
    // where the weight comes from a slot image (box > 0): the image's tiles and covering boxes are
    // planned for whole 256-row tiles, not for a CTA's half (sm_100a's one-token layer reads the
    // weights as they are, so its buckets plan none).
    if (b.tcgen05 && box == 0)
      return {{"telos_kernels::gemm_prefill_sm100_pair_" + epi + dims + ">",
               {"a_map", "w_map", "out"},
               kPrefillGemmThreads,
               prefill_pair_smem(128)},
              {prefill_pair_grid(b.T, n, cols), 1, 1},
              128,
              128,
              epi == "residual" ? 32 : 64,
              WeightImage{},
              0};
    return {{std::string(b.tcgen05 ? "telos_kernels::gemm_prefill_sm100_"
                                   : "telos_kernels::gemm_prefill_") +
                 epi + dims + image_args(box) + ">",
             {"a_map", "w_map", "out"},
             kPrefillGemmThreads,
             prefill_gemm_smem(box)},
            {prefill_gemm_grid(b.T, n, cols), 1, 1},
            128,
            cols,
            epi == "residual" ? 32 : 64,
            box > 0 ? img : WeightImage{},
            box};
  }
  const bool norm = !norm_eps.empty();
  if (b.tcgen05) {
    const SmallGemmSm100Tiling t = small_gemm_sm100_tiling(n, k, b.T, swiglu, norm);
    return {{t.instance(epi, b.T, n, k, norm_eps),
             norm ? std::vector<std::string>{"x", "norm_w", "w_map", "out"}
                  : std::vector<std::string>{"a_map", "w_map", "out"},
             kSmallGemmSm100Threads, t.smem()},
            {t.tiles_m, t.tiles_n, 1},
            norm ? 0 : t.a_box,
            kSmallGemmSm100Rows,
            0,
            WeightImage{},
            0};
  }
  const SmallGemmTiling t = small_gemm_tiling(n, k, b.T, swiglu, norm).reading(img);
  const int box = t.image_box;
  const WeightImage used = box > 0 ? img : WeightImage{};
  if (norm)
    return {{"telos_kernels::gemm_small_norm_" + epi + dims + ", " + num(t.bn) + ", " +
                 num(t.stages) + ", " + norm_eps + image_args(box) + ">",
             {"x", "norm_w", "w_map", "out"},
             kSmallGemmThreads,
             t.smem()},
            {t.tiles_m, t.tiles_n, 1},
            0,
            t.cols,
            0,
            used,
            box};
  return {{t.instance(epi, b.T, n, k), {"a_map", "w_map", "out"}, t.threads(), t.smem()},
          {t.tiles_m, t.tiles_n, 1},
          t.a_box,
          t.w_box(),
          0,
          used,
          box};
}

// The layer's projections as the plan runs them: the weight (layers.N.WEIGHT, docs/artifact.md),
// where its kernel joins the kernel table, the activations it reads (x where its norm is folded
// in) and the buffer it writes.
struct LayerGemm {
  const char* weight;
  TableRole role;
  const char* in;
  const char* out;
};
constexpr LayerGemm kLayerGemms[] = {
    {"qkv", TableRole::qkv_proj, "h", "qkv"},
    {"o", TableRole::o_proj, "attn", "x"},
    {"gate_up", TableRole::gate_up, "h", "act"},
    {"down", TableRole::down_proj, "act", "x"},
};

const LayerGemm& layer_gemm(const ir::Op& linear) {
  const std::string& w = linear.params.at(0);
  for (const LayerGemm& g : kLayerGemms)
    if (w.starts_with("layers.") && w.ends_with(std::string(".") + g.weight)) return g;
  fail("codegen: " + ir::print_op(linear) + ": @" + w +
       " is not a layer projection (layers.N.qkv, .o, .gate_up or .down)");
}

// Where a bucket folds norms, the RMSNorm before the QKV and gate/up projections runs in their
// GEMMs.
bool takes_norm(const Bucket& b, const ir::Op& user) {
  const std::string epi = epilogue_of(user);
  return b.fold_norm && user.kind == "linear" && (epi == "rope_kv_append" || epi == "swiglu");
}

// The RMSNorm folded into `linear`'s GEMM in this bucket, or null.
const ir::Op* folded_norm(const Bucket& b, const ir::Op& linear) {
  const ir::Op* def = linear.operands.empty() ? nullptr : linear.operands[0]->def;
  return def && def->kind == "rmsnorm" && takes_norm(b, linear) ? def : nullptr;
}

std::string eps_literal(const ir::Op& norm) {
  return float_literal(float_attr(norm, "eps"));
}

// The all-reduce's form (kernels/all_reduce.cuh): two-shot above the plan's size threshold
// (all_reduce_two_shot), else one-shot; in small-M buckets the one-shot form also applies the
// RMSNorm of x that follows it where that norm would launch alone into h (not folded into the
// next GEMM, not the final norm's gather before the LM head): all_reduce_fused_norm.
bool takes_two_shot(const BucketLowering& b, const ir::Op& all_reduce) {
  return all_reduce_two_shot(b.bucket.T,
                             static_cast<int>(all_reduce.results.at(0)->type.dims.at(1)),
                             int_attr(all_reduce, "ranks"));
}

// The RMSNorm of x that `all_reduce` applies in this bucket, or null.
const ir::Op* all_reduce_fused_norm(const BucketLowering& b, const ir::Op& all_reduce) {
  if (b.bucket.shape != ShapeClass::small_m || takes_two_shot(b, all_reduce)) return nullptr;
  for (const ir::Op* norm : b.graph.users(all_reduce.results.at(0))) {
    if (norm->kind != "rmsnorm") continue;
    const std::vector<ir::Op*> users = b.graph.users(norm->results.at(0));
    const bool alone = users.size() == 1 && users[0]->kind != "lm_head_sample" &&
                       folded_norm(b.bucket, *users[0]) != norm;
    return alone ? norm : nullptr;
  }
  return nullptr;
}

// Launches GEMM `g` (its handle `kernel`) of weight `w_name` [w_rows, k] over buffer `in` into
// `out` [T, n], or with the norm `norm` folded in over x.
void launch_gemm(BucketLowering& b, int kernel, const Gemm& g, const std::string& w_name,
                 long long w_rows, int k, const std::string& in, const std::string& out,
                 long long n, const ir::Op* norm) {
  const std::string w = weight_map(g.img, g.img_box, w_name, w_rows, k, g.w_box);
  if (norm) {
    b.launch(kernel, g.grid, {"buf:x", weight(*norm, 0), w, "buf:" + out});
    return;
  }
  const int T = b.bucket.T;
  b.launch(kernel, g.grid,
           {tmap("buf:" + in, T, k, g.a_box), w,
            g.out_box_cols ? tmap("buf:" + out, T, n, 64, g.out_box_cols) : "buf:" + out});
}

// Launches the GEMM of e4m3 weight `w` [rows, k] (operand `w_name`) over buffer `in` into `out`
// [T, n] with epilogue `epi` (bf16, residual or swiglu): gemm_prefill_e4m3_* in prefill GEMM
// buckets, else gemm_small_e4m3_* (kernels/gemm_e4m3.cuh), or with the norm `norm` folded in
// gemm_small_e4m3_norm_* over x; the weight through a map of its e4m3 bytes (64-byte boxes,
// docs/artifact.md) and its scales (`w:NAME.scale`), their blocks the kernel's last template
// arguments.
void launch_gemm_e4m3(BucketLowering& b, TableRole role, const ir::Param& w,
                      const std::string& w_name, const std::string& epi, int n,
                      const std::string& in, const std::string& out, const ir::Op* norm) {
  const int rows = dim(w, 0), k = dim(w, 1), T = b.bucket.T;
  const ir::ParamScale& sc = w.scale.value();
  const std::string dims = "<" + num(T) + ", " + num(n) + ", " + num(k);
  const std::string blocks = num(sc.block_rows) + ", " + num(sc.block_cols) + ">";
  const std::vector<std::string> params = {"a_map", "w_map", "w_scale", "out"};
  const std::string scales = w_name + ".scale";
  if (b.bucket.shape == ShapeClass::prefill_gemm) {
    const int cols = epi == "swiglu" ? 128 : 256;
    const int k_id = b.use(role, {"telos_kernels::gemm_prefill_e4m3_" + epi + dims + ", " + blocks,
                                  params, kPrefillGemmThreads, prefill_gemm_e4m3_smem()});
    b.launch(k_id, {prefill_gemm_grid(T, n, cols), 1, 1},
             {tmap("buf:" + in, T, k, 128), tmap(w_name, rows, k, cols), scales,
              tmap("buf:" + out, T, n, 64, epi == "residual" ? 32 : 64)});
    return;
  }
  const SmallGemmTiling t = small_gemm_e4m3_tiling(n, k, T, epi == "swiglu", norm != nullptr);
  if (norm) {
    const int k_id =
        b.use(role, {"telos_kernels::gemm_small_e4m3_norm_" + epi + dims + ", " + num(t.bn) + ", " +
                         num(t.stages) + ", " + eps_literal(*norm) + ", " + blocks,
                     {"x", "norm_w", "w_map", "w_scale", "out"},
                     t.threads() + kSmallGemmConverterThreads,
                     small_gemm_e4m3_smem(t)});
    b.launch(k_id, {t.tiles_m, t.tiles_n, 1},
             {"buf:x", weight(*norm, 0), tmap(w_name, rows, k, t.w_box()), scales, "buf:" + out});
    return;
  }
  const int k_id =
      b.use(role, {small_gemm_e4m3_instance(t, epi, T, n, k, static_cast<int>(sc.block_rows),
                                            static_cast<int>(sc.block_cols)),
                   params, t.threads() + kSmallGemmConverterThreads, small_gemm_e4m3_smem(t)});
  b.launch(
      k_id, {t.tiles_m, t.tiles_n, 1},
      {tmap("buf:" + in, T, k, t.a_box), tmap(w_name, rows, k, t.w_box()), scales, "buf:" + out});
}

// Launches the W8A8 GEMM of e4m3 weight `w` [rows, k] (operand `w_name`, 128 x 128 scale blocks)
// over buffer `in` into `out` [T, n] with epilogue `epi` (bf16, residual or swiglu; kernels/
// gemm_w8a8.cuh): quantize_rows_e4m3 of `in` into aq and aq_scale (per token and 128 columns),
// then gemm_prefill_w8a8_* in prefill GEMM buckets, else gemm_small_w8a8_*, reading them and the
// weight through maps of bytes with the 128-byte swizzle (BOX_COLS 128, docs/artifact.md). Both
// GEMMs give a row the same bits (gemm_small_w8a8.cuh).
// quantize_rows_e4m3 of buffer `in`'s T rows of k columns into aq and aq_scale: the input of a
// W8A8 GEMM (per token and 128 columns).
void launch_quantize_rows(BucketLowering& b, TableRole role, int T, int k, const std::string& in) {
  const int q = b.use(role, {"telos_kernels::quantize_rows_e4m3<" + num(T) + ", " + num(k) + ">",
                             {"x", "q", "scale"},
                             quantize_rows_threads()});
  b.launch(q, {quantize_rows_blocks(T, k), 1, 1}, {"buf:" + in, "buf:aq", "buf:aq_scale"});
  b.model.max_w8a8_k = std::max(b.model.max_w8a8_k, static_cast<long long>(k));
}

void launch_gemm_w8a8(BucketLowering& b, TableRole role, const ir::Param& w,
                      const std::string& w_name, const std::string& epi, int n,
                      const std::string& in, const std::string& out) {
  const int rows = dim(w, 0), k = dim(w, 1), T = b.bucket.T;
  launch_quantize_rows(b, role, T, k, in);
  const std::vector<std::string> params = {"a_map", "a_scale", "w_map", "w_scale", "out"};
  const bool swiglu = epi == "swiglu";
  if (b.bucket.shape == ShapeClass::prefill_gemm) {
    // 128 x 128 tiles: 128 weight rows, or SwiGLU's 64 gate and their 64 up rows.
    const int w_box = swiglu ? 64 : 128;
    const int k_id = b.use(role, {"telos_kernels::gemm_prefill_w8a8_" + epi + "<" + num(T) + ", " +
                                      num(n) + ", " + num(k) + ">",
                                  params, kPrefillGemmThreads, prefill_gemm_w8a8_smem()});
    b.launch(k_id, {prefill_gemm_grid(T, n, w_box), 1, 1},
             {tmap("buf:aq", T, k, 128, 128), "buf:aq_scale", tmap(w_name, rows, k, w_box, 128),
              w_name + ".scale", tmap("buf:" + out, T, n, 64, epi == "residual" ? 32 : 64)});
    return;
  }
  const SmallGemmTiling t = small_gemm_w8a8_tiling(n, k, T, swiglu);
  const int k_id =
      b.use(role, {small_gemm_w8a8_instance(t, epi, T, n, k), params, t.threads(), t.smem()});
  b.launch(k_id, {t.tiles_m, t.tiles_n, 1},
           {tmap("buf:aq", T, k, t.a_box, 128), "buf:aq_scale",
            tmap(w_name, rows, k, t.w_box(), 128), w_name + ".scale", "buf:" + out});
}

// ---- The QKV epilogue and attention -------------------------------------------------------------

// The QKV epilogue (bias, QK norm, RoPE, q out, K/V appended to their pages) of the rope_kv_append
// linear `op`: its template arguments after the head shape up to the RoPE table, the layer's KV
// format (ModelPlan::kv), its parameters and operands.
struct QkvEpilogue {
  std::string targs, kv;
  std::vector<std::string> params, args;
};

QkvEpilogue qkv_epilogue(const ModelPlan& mp, const ir::Op& op) {
  const bool bias = has_qkv_bias(op), qk_norm = has_qk_norm(op);
  const std::size_t n = op.params.size();
  return {
      std::string(bias ? "true" : "false") + ", " + (qk_norm ? "true" : "false") + ", " +
          float_literal(mp.m.eps) + ", " + num(mp.page) + ", " + num(mp.maxp) + ", " +
          num(mp.page_elems) + "ll, telos_rope::Freqs",
      mp.kv(int_attr(op, "layer")),
      {"bias", "q_norm", "k_norm", "positions", "token_seq", "page_tables", "kv_layer", "q_out"},
      {bias ? weight(op, 1) : "null", qk_norm ? weight(op, n - 2) : "null",
       qk_norm ? weight(op, n - 1) : "null", "desc:positions", "desc:token_seq", "desc:page_tables",
       "kv:" + num(int_attr(op, "layer")), "buf:q"}};
}

// The attention kernels of paged_attention `op` in a bucket.
struct AttentionKernels {
  KernelInstance split, combine, prompt;
  bool prompt_attn = false;  // the prompt rows on attn_prefill (prompt_attention)
  int tpt = 1;               // attn_split's tokens a tile
  int prompt_tpt = 1, prompt_nt = 0;
  int split_rows = 0, split_tiles = 0;
  std::string split_positions;
};

AttentionKernels choose_attention(const ModelPlan& mp, const Bucket& b, const ir::Op& op) {
  const int HQ = int_attr(op, "heads"), HKV = int_attr(op, "kv_heads"),
            D = int_attr(op, "head_dim");
  const int G = HQ / HKV;
  AttentionKernels a;
  // Attention in tiles of tpt tokens (prefill), one token per block in decode.
  a.tpt = attn_tokens_per_tile(b.prefill(), b.T, G);
  a.combine = {"telos_kernels::attn_combine<" + num(HQ) + ", " + num(D) + ", " + num(mp.nsplits) +
                   ", " + num(mp.split) + ">",
               {"part_o", "part_ml", "positions", "out"},
               D};
  // attn_prefill (wgmma) on sm_90a, attn_prefill_sm100 (tcgen05) on sm_100a: the same arguments.
  // Both read bf16 pages through tensor maps: with an e4m3 cache the split kernels take every row.
  a.prompt_attn = !mp.e4m3_kv && prompt_attention(b.prefill(), D, G);
  // Persistent where it fits (sm_90a: sm_100a's form runs a tile a CTA), the same bits.
  a.prompt_tpt = attn_prefill_tokens_per_tile(b.T, G);
  a.prompt_nt =
      !b.tcgen05 && attn_prefill_persistent_fits(D, mp.page, a.prompt_tpt) ? b.T / a.prompt_tpt : 0;
  const std::vector<std::string> prompt_params = {
      "q", "positions", "token_seq", "page_tables", "kv_layer", "kv_map", "out"};
  if (a.prompt_attn && b.tcgen05)
    a.prompt = {
        attn_prefill_sm100_instance(HQ, HKV, D, mp.page, mp.maxp, mp.page_elems, a.prompt_tpt),
        prompt_params, kAttnPrefillSm100Threads, attn_prefill_sm100_smem(D)};
  else if (a.prompt_attn)
    a.prompt = {attn_prefill_instance(HQ, HKV, D, mp.page, mp.maxp, mp.page_elems, a.prompt_tpt,
                                      a.prompt_nt),
                prompt_params, kAttnPrefillThreads, attn_prefill_smem(D)};
  a.split_positions = a.prompt_attn ? "desc:split_positions" : "desc:positions";
  a.split_rows = attn_split_rows(a.prompt_attn, b.T, mp.serving.max_batch);
  a.split_tiles = (a.split_rows + a.tpt - 1) / a.tpt;
  AttnSplitKernel shape{HQ, HKV, D, mp.page, mp.maxp, mp.page_elems, mp.split, mp.nsplits, a.tpt};
  shape.kv = mp.kv(int_attr(op, "layer"));
  AttnSplitKernel k = attn_split_for_rows(shape, a.split_rows, !b.prefill());
  // sm_100a's ptxas spills attn_split at four blocks an SM (128 registers) where sm_90a's does not
  // (head dim 128, tiles of 4 and 8 tokens): its default there. Registers only: the same bits.
  if (b.tcgen05) k.blocks = 0;
  a.split = {k.instance(),
             {"q", "positions", "token_seq", "page_tables", "kv_layer", "part_o", "part_ml"},
             128,
             k.smem()};
  return a;
}

// ---- The rules ----------------------------------------------------------------------------------

void lower_embed(BucketLowering& b, const std::vector<const ir::Op*>& ops) {
  const ir::Op& op = *ops[0];
  const int H = dim(param_of(b.graph, op, 0), 1), threads = embed_threads(H);
  const int k =
      b.use(TableRole::embed, {"telos_kernels::embed_gather<" + num(H) + ", " + num(threads) + ">",
                               {"embed", "tokens", "sampled", "x"},
                               threads});
  b.launch(k, {b.bucket.T, 1, 1}, {weight(op, 0), "desc:tokens", "buf:sampled", "buf:x"});
}

// A norm of the residual stream x: into h for the next GEMM, nothing where that GEMM folds it,
// and over the sampled rows only (gathered into hf) before the LM head.
void lower_rmsnorm(BucketLowering& b, const std::vector<const ir::Op*>& ops) {
  const ir::Op& op = *ops[0];
  const std::string norm =
      "telos_kernels::rmsnorm<" + num(dim(param_of(b.graph, op, 0), 0)) + ", " + eps_literal(op);
  const std::vector<std::string> params = {"x", "w", "rows", "out"};
  const ir::Op* def = op.operands.empty() ? nullptr : op.operands[0]->def;
  if (def && def->kind == "all_reduce" && all_reduce_fused_norm(b, *def) == &op) {
    b.note("applied by the all-reduce of %" + def->results.at(0)->name);
    return;
  }
  const std::vector<ir::Op*> users = b.graph.users(op.results.at(0));
  if (users.size() == 1 && users[0]->kind == "lm_head_sample") {
    const int k = b.use(TableRole::final_norm, {norm + ", true>", params, kNormThreads});
    b.launch(k, {b.bucket.S, 1, 1}, {"buf:x", weight(op, 0), "desc:sample_rows", "buf:hf"});
    return;
  }
  if (users.size() == 1 && folded_norm(b.bucket, *users[0]) == &op) {
    b.note("folded into the GEMM of %" + users[0]->results.at(0)->name);
    return;
  }
  const int k = b.use(TableRole::norm, {norm + ", false>", params, kNormThreads});
  b.launch(k, {b.bucket.T, 1, 1}, {"buf:x", weight(op, 0), "null", "buf:h"});
}

// The QKV GEMM of `op` with the norm and the QKV epilogue folded in: its kernel
// (gemm_small_norm_qkv; on sm_100a gemm_small_sm100_norm_qkv: the CTA that completes a head runs
// its epilogue, after arrival counters, one a head), grid and weight operand. `heads`: the
// template arguments after K and the tiling's (the head shape, the epilogue's, the KV format).
struct QkvFold {
  KernelInstance kernel;
  std::array<int, 3> grid;
  std::string w;
};
QkvFold choose_qkv_fold(const BucketLowering& b, const ir::Op& op, const std::string& heads,
                        const QkvEpilogue& epi, std::vector<std::string> params) {
  const ir::Param& wp = param_of(b.graph, op, 0);
  const int rows = dim(wp, 0), H = dim(wp, 1), T = b.bucket.T;
  const std::string dims = "<" + num(T) + ", " + num(H) + ", ";
  const std::string kv = epi.kv.empty() ? "" : ", " + epi.kv;
  if (b.bucket.tcgen05) {
    const SmallGemmSm100Tiling t = small_gemm_sm100_tiling(rows, H, T, false, true);
    return {{"telos_kernels::gemm_small_sm100_norm_qkv" + dims + num(t.stages) + ", " + heads + kv +
                 ">",
             std::move(params), kSmallGemmSm100Threads, t.smem()},
            {t.tiles_m, t.tiles_n, 1},
            tmap(weight(op, 0), rows, H, kSmallGemmSm100Rows)};
  }
  const WeightImage img = b.model.image("qkv");
  const SmallGemmTiling t = small_gemm_tiling(rows, H, T, false, true);
  const int box = image_box_rows(img, t.cols);
  // The slot image's W_BH and W_BOX (0, 0: none) are spelled out where the KV format follows.
  const std::string image =
      box > 0 || !epi.kv.empty() ? ", " + num(box > 0 ? img.half_rows() : 0) + ", " + num(box) : "";
  return {{"telos_kernels::gemm_small_norm_qkv" + dims + num(t.bn) + ", " + num(t.stages) + ", " +
               heads + image + kv + ">",
           std::move(params), kSmallGemmThreads, t.smem()},
          {t.tiles_m, t.tiles_n, 1},
          weight_map(img, box, weight(op, 0), rows, H, t.cols)};
}

// Launches the QKV GEMM of `op` with the norm `norm` and the QKV epilogue `epi` folded in
// (choose_qkv_fold), over x, into qkv, q and the KV pages.
void launch_qkv_fold(BucketLowering& b, const ir::Op& op, const ir::Op& norm, QkvEpilogue epi) {
  const int HQ = int_attr(op, "heads"), HKV = int_attr(op, "kv_heads"),
            D = int_attr(op, "head_dim");
  std::vector<std::string> params = {"x", "norm_w", "w_map", "qkv"};
  params.insert(params.end(), epi.params.begin(), epi.params.end());
  params.push_back("arrivals");
  const QkvFold fold = choose_qkv_fold(
      b, op, num(HQ) + ", " + num(HKV) + ", " + num(D) + ", " + epi.targs, epi, std::move(params));
  epi.args.insert(epi.args.begin(), {"buf:x", weight(norm, 0), fold.w, "buf:qkv"});
  epi.args.push_back("buf:qkv_arrivals");
  b.launch(b.use(TableRole::qkv_proj, fold.kernel), fold.grid, epi.args);
  b.model.qkv_arrival_counters = HQ + 2 * HKV;  // one a head, zero between launches
}

// The QKV projection and its epilogue: folded with the norm into one launch (launch_qkv_fold)
// where the bucket folds it, else the GEMM and then the epilogue's own kernel.
void lower_qkv(BucketLowering& b, const std::vector<const ir::Op*>& ops) {
  const ir::Op& op = *ops[0];
  const ir::Param& w = param_of(b.graph, op, 0);
  const int rows = dim(w, 0), H = dim(w, 1), T = b.bucket.T;
  const int HQ = int_attr(op, "heads"), HKV = int_attr(op, "kv_heads"),
            D = int_attr(op, "head_dim");
  const WeightImage img = b.model.image("qkv");
  const ir::Op* norm = folded_norm(b.bucket, op);
  QkvEpilogue epi = qkv_epilogue(b.model, op);
  if (norm && b.bucket.fold_qkv) {
    launch_qkv_fold(b, op, *norm, std::move(epi));
    return;
  }
  if (takes_w8a8(op)) {
    launch_gemm_w8a8(b, TableRole::qkv_proj, w, weight(op, 0), "bf16", rows, "h", "qkv");
  } else if (w.type.dtype == DType::E4M3) {
    launch_gemm_e4m3(b, TableRole::qkv_proj, w, weight(op, 0), "bf16", rows, "h", "qkv", norm);
  } else {
    const Gemm g = choose_gemm(b.bucket, "bf16", rows, H, img, norm ? eps_literal(*norm) : "");
    launch_gemm(b, b.use(TableRole::qkv_proj, g.kernel), g, weight(op, 0), rows, H, "h", "qkv",
                rows, norm);
  }
  epi.params.insert(epi.params.begin(), "qkv");
  const int k = b.use(TableRole::qkv_epilogue,
                      {"telos_kernels::qkv_rope_append_rows<" + num(HQ) + ", " + num(HKV) + ", " +
                           num(D) + ", " + epi.targs + (epi.kv.empty() ? "" : ", " + epi.kv) + ">",
                       epi.params, D});
  epi.args.insert(epi.args.begin(), "buf:qkv");
  b.launch(k, {HQ + 2 * HKV, T, 1}, epi.args);
}

// Generated rows on attn_split + attn_combine (split along the context); a prefill bucket's prompt
// rows on attn_prefill where it takes the head shape.
void lower_attention(BucketLowering& b, const std::vector<const ir::Op*>& ops) {
  const ir::Op& op = *ops[0];
  const ModelPlan& mp = b.model;
  const AttentionKernels a = choose_attention(mp, b.bucket, op);
  const int HQ = int_attr(op, "heads"), HKV = int_attr(op, "kv_heads"),
            D = int_attr(op, "head_dim");
  const std::string kv = "kv:" + num(int_attr(op, "layer"));
  const int combine = b.use(TableRole::attn_combine, a.combine);
  const int prompt = a.prompt_attn ? b.use(TableRole::attn_prefill, a.prompt) : -1;
  const int split = b.use(TableRole::attn_split, a.split);
  if (mp.e4m3_kv && b.bucket.prefill())
    b.note("an e4m3 KV cache: the prompt rows on attn_split too (attn_prefill reads bf16 pages)");
  b.partial_rows(a.split_tiles * a.tpt);
  b.launch(split, {a.split_tiles, HKV, attn_grid_slots(a.split_tiles, HKV, mp.nsplits)},
           {"buf:q", a.split_positions, "desc:token_seq", "desc:page_tables", kv, "buf:part_o",
            "buf:part_ml"});
  b.launch(combine, {a.split_rows, HQ, 1},
           {"buf:part_o", "buf:part_ml", a.split_positions, "buf:attn"});
  if (a.prompt_attn)
    b.launch(prompt,
             a.prompt_nt > 0
                 ? std::array<int, 3>{attn_prefill_persistent_grid(HKV, a.prompt_nt), 1, 1}
                 : std::array<int, 3>{HKV, b.bucket.T / a.prompt_tpt, 1},
             {"buf:q", "desc:prompt_positions", "desc:token_seq", "desc:page_tables", kv,
              tmap(kv, mp.page_elems / D, D, mp.page), "buf:attn"});
}

// A tensor-parallel rank's partial product of o or down: the residual GEMM adding into
// `partial`, which all_reduce_residual leaves zeroed for the next one.
void lower_partial(BucketLowering& b, const std::vector<const ir::Op*>& ops) {
  const ir::Op& op = *ops[0];
  const LayerGemm& lg = layer_gemm(op);
  if (std::string(lg.out) != "x")
    fail("codegen: " + ir::print_op(op) +
         ": a partial product is the o or down projection's (layers.N.o, layers.N.down)");
  const ir::Param& w = param_of(b.graph, op, 0);
  const int rows = dim(w, 0), k = dim(w, 1);
  if (takes_w8a8(op)) {
    launch_gemm_w8a8(b, lg.role, w, weight(op, 0), "residual", rows, lg.in, "partial");
    return;
  }
  if (w.type.dtype == DType::E4M3) {
    launch_gemm_e4m3(b, lg.role, w, weight(op, 0), "residual", rows, lg.in, "partial", nullptr);
    return;
  }
  const Gemm g = choose_gemm(b.bucket, "residual", rows, k, b.model.image(lg.weight), "");
  launch_gemm(b, b.use(lg.role, g.kernel), g, weight(op, 0), rows, k, lg.in, "partial", rows,
              nullptr);
}

// x += the sum of every rank's partial, in rank order, over the ranks' peer memory: one-shot,
// two-shot, or one-shot with the next RMSNorm (all_reduce_fused_norm); for large messages
// (all_reduce_nccl) NCCL's all-gather and gather_sum_residual, with that kernel form as fallback.
void lower_all_reduce(BucketLowering& b, const std::vector<const ir::Op*>& ops) {
  const ir::Op& op = *ops[0];
  const int T = b.bucket.T, H = static_cast<int>(op.results.at(0)->type.dims.at(1));
  const std::string dims = "<" + num(T) + ", " + num(H) + ", " + num(int_attr(op, "ranks")) + ", ";
  const std::vector<std::string> peers = {"peer:partial", "peer:all_reduce_flags", "rank", "buf:x"};
  if (const ir::Op* norm = all_reduce_fused_norm(b, op)) {
    const int k = b.use(TableRole::all_reduce, {"telos_kernels::all_reduce_residual_rmsnorm" +
                                                    dims + eps_literal(*norm) + ">",
                                                {"partials", "flags", "rank", "x", "w", "out"},
                                                kNormThreads});
    std::vector<std::string> args = peers;
    args.insert(args.end(), {weight(*norm, 0), "buf:h"});
    b.launch(k, {all_reduce_norm_blocks(T), 1, 1}, args);
    b.note("with the RMSNorm of %" + norm->results.at(0)->name + " into h");
    return;
  }
  const std::string form =
      takes_two_shot(b, op) ? "all_reduce_residual_two_shot" : "all_reduce_residual";
  const int k =
      b.use(TableRole::all_reduce, {"telos_kernels::" + form + dims + num(kAllReduceThreads) + ">",
                                    {"partials", "flags", "rank", "x"},
                                    kAllReduceThreads});
  const Launch kernel_form{k, {all_reduce_blocks(T, H), 1, 1}, peers};
  if (!all_reduce_nccl(b.bucket.shape, T, H)) {
    b.launch(kernel_form);
    return;
  }
  const int ranks = int_attr(op, "ranks");
  const int g = b.use(TableRole::all_reduce,
                      {"telos_kernels::gather_sum_residual" + dims.substr(0, dims.size() - 2) + ">",
                       {"gather", "partial", "x"},
                       kAllReduceThreads});
  Launch c;
  c.collective = "all_gather";
  c.send = "buf:partial";
  c.recv = "buf:all_reduce_gather";
  c.count = static_cast<long long>(T) * H;
  c.then = {
      {g, {gather_sum_blocks(T, H), 1, 1}, {"buf:all_reduce_gather", "buf:partial", "buf:x"}}};
  c.fallback = {kernel_form};
  b.launch(std::move(c));
  b.model.max_gather_rows = std::max(b.model.max_gather_rows, static_cast<long long>(ranks) * T);
  b.note("through NCCL: all_gather of the partials into all_reduce_gather, gather_sum_residual; " +
         form + " without NCCL");
}

// A layer projection with a residual or SwiGLU epilogue: one GEMM, the norm before gate/up folded
// in where the bucket folds norms.
void lower_projection(BucketLowering& b, const std::vector<const ir::Op*>& ops) {
  const ir::Op& op = *ops[0];
  const std::string epi = epilogue_of(op);
  const LayerGemm& lg = layer_gemm(op);
  const ir::Param& w = param_of(b.graph, op, 0);
  const int rows = dim(w, 0), k = dim(w, 1), n = epi == "swiglu" ? rows / 2 : rows;
  const ir::Op* norm = folded_norm(b.bucket, op);
  if (takes_w8a8(op)) {
    launch_gemm_w8a8(b, lg.role, w, weight(op, 0), epi, n, lg.in, lg.out);
    return;
  }
  if (w.type.dtype == DType::E4M3) {
    launch_gemm_e4m3(b, lg.role, w, weight(op, 0), epi, n, lg.in, lg.out, norm);
    return;
  }
  const Gemm g =
      choose_gemm(b.bucket, epi, n, k, b.model.image(lg.weight), norm ? eps_literal(*norm) : "");
  launch_gemm(b, b.use(lg.role, g.kernel), g, weight(op, 0), rows, k, lg.in, lg.out, n, norm);
}

// The LM head's GEMM for a bucket: gemm_small_f32cand (lm_head_tiling), on sm_100a
// gemm_small_sm100_f32cand (128-row weight tiles), on an e4m3 weight gemm_small_w8a8_f32cand (W8A8:
// hf quantized first) or gemm_small_e4m3_f32cand (weight-only); its grid, operands and the greedy
// candidates each row gets (one a weight tile).
struct LmHead {
  KernelInstance kernel;
  std::array<int, 3> grid;
  std::vector<std::string> args;
  int candidates;
};

// An e4m3 tiling's weight tiles halved until they divide the vocabulary (the candidates are per
// whole tile); W8A8 tiles divide 128, so halves still do.
SmallGemmTiling whole_vocab_tiles(SmallGemmTiling t, int V) {
  while (V % t.bn != 0 && t.bn > 16) t = t.with_bn(t.bn / 2, V, false);
  if (V % t.bn != 0)
    fail("codegen: vocab_size " + num(V) + " is not a multiple of 16 (the LM head's weight tiles)");
  return t;
}

LmHead choose_lm_head(BucketLowering& b, const ir::Op& op, int V, int H, int S) {
  const ir::Param& w = param_of(b.graph, op, 0);
  const std::string w_name = weight(op, 0), logits = "buf:logits", cand = "buf:lm_cand";
  if (takes_w8a8(op)) {
    const SmallGemmTiling t = whole_vocab_tiles(lm_head_w8a8_tiling(V, H, S), V);
    return {{small_gemm_w8a8_instance(t, "f32cand", S, V, H),
             {"a_map", "a_scale", "w_map", "w_scale", "y", "cand"},
             t.threads(),
             t.smem()},
            {t.tiles_m, t.tiles_n, 1},
            {tmap("buf:aq", S, H, t.a_box, 128), "buf:aq_scale", tmap(w_name, V, H, t.w_box(), 128),
             w_name + ".scale", logits, cand},
            V / t.bn};
  }
  if (w.scale) {
    const SmallGemmTiling t = whole_vocab_tiles(small_gemm_e4m3_tiling(V, H, S, false, false), V);
    return {{small_gemm_e4m3_instance(t, "f32cand", S, V, H, static_cast<int>(w.scale->block_rows),
                                      static_cast<int>(w.scale->block_cols)),
             {"a_map", "w_map", "w_scale", "y", "cand"},
             t.threads() + kSmallGemmConverterThreads,
             small_gemm_e4m3_smem(t)},
            {t.tiles_m, t.tiles_n, 1},
            {tmap("buf:hf", S, H, t.a_box), tmap(w_name, V, H, t.w_box()), w_name + ".scale",
             logits, cand},
            V / t.bn};
  }
  const std::vector<std::string> params = {"a_map", "w_map", "y", "cand"};
  if (b.bucket.tcgen05) {
    const SmallGemmSm100Tiling t = small_gemm_sm100_tiling(V, H, S, false);
    return {{t.instance("f32cand", S, V, H), params, kSmallGemmSm100Threads, t.smem()},
            {t.tiles_m, t.tiles_n, 1},
            {tmap("buf:hf", S, H, t.a_box), tmap(w_name, V, H, kSmallGemmSm100Rows), logits, cand},
            t.tiles_n};
  }
  const SmallGemmTiling t = lm_head_tiling(V, H, S);
  return {{t.instance("f32cand", S, V, H), params, t.threads(), t.smem()},
          {t.tiles_m, t.tiles_n, 1},
          {tmap("buf:hf", S, H, t.a_box), tmap(w_name, V, H, t.w_box()), logits, cand},
          V / t.bn};
}

// The LM head with the first stage of greedy sampling: a candidate per weight tile and row
// (`lm_cand`), which sample's greedy rows reduce; over the final norm's S gathered rows (hf),
// quantized first where the head runs W8A8.
void lower_lm_head_sample(BucketLowering& b, const std::vector<const ir::Op*>& ops) {
  const ir::Op& op = *ops[0];
  const ir::Param& w = param_of(b.graph, op, 0);
  const int V = dim(w, 0), H = dim(w, 1), S = b.bucket.S;
  const LmHead lm_head = choose_lm_head(b, op, V, H, S);
  // The weight tiles are the grid's y (at most 65535 blocks).
  if (lm_head.grid[1] > 65535)
    fail("codegen: a vocabulary of " + num(V) + " needs " + num(lm_head.grid[1]) +
         " LM head blocks of " + num(V / lm_head.candidates) +
         " rows, more than a grid's y takes (65535)");
  const int candidates = lm_head.candidates;
  b.model.max_lm_candidates =
      std::max(b.model.max_lm_candidates, static_cast<long long>(S) * candidates);
  if (takes_w8a8(op)) launch_quantize_rows(b, TableRole::lm_head, S, H, "hf");
  const int lm = b.use(TableRole::lm_head, lm_head.kernel);
  b.launch(lm, lm_head.grid, lm_head.args);
  const SampleLaunch s = sample_launch(V);
  const int sample =
      b.use(TableRole::sample, {"telos_kernels::sample<" + num(V) + ", " + num(s.threads) + ", " +
                                    num(candidates) + ", " + num(s.cluster) + ">",
                                {"logits", "cand", "params", "rows", "tokens_out", "tokens_host"},
                                s.threads});
  b.launch(sample, {S * s.cluster, 1, 1},
           {"buf:logits", "buf:lm_cand", "desc:sample_params", "desc:sample_rows", "buf:sampled",
            "host:sampled"});
}

// The ops of a layer as decode_layer_persistent runs them, in order: op kind and epilogue.
constexpr std::array<std::array<const char*, 2>, 7> kLayerOps = {{{"rmsnorm", ""},
                                                                  {"linear", "rope_kv_append"},
                                                                  {"paged_attention", ""},
                                                                  {"linear", "residual"},
                                                                  {"rmsnorm", ""},
                                                                  {"linear", "swiglu"},
                                                                  {"linear", "residual"}}};

void check_layer_ops(const std::vector<const ir::Op*>& ops) {
  std::string want;
  for (const auto& [kind, epi] : kLayerOps)
    want += (want.empty() ? "" : ", ") + std::string(kind) +
            (*epi ? std::string(" (") + epi + ")" : "");
  for (std::size_t i = 0; i < kLayerOps.size(); ++i)
    if (i >= ops.size() || ops[i]->kind != kLayerOps[i][0] ||
        epilogue_of(*ops[i]) != kLayerOps[i][1])
      fail("codegen: decode_layer_persistent runs a layer of " + want + "; layer " +
           num(op_layer(*ops[0])) + " has " +
           (i < ops.size() ? ir::print_op(*ops[i]) : std::string("no more ops")) + " as op " +
           num(static_cast<long long>(i)));
  if (ops.size() > kLayerOps.size())
    fail("codegen: decode_layer_persistent runs a layer of " + want + "; layer " +
         num(op_layer(*ops[0])) + " has more: " + ir::print_op(*ops[kLayerOps.size()]));
}

// The table has always held the kernels the small-M rules would choose for a one-token bucket's
// attention and, with bf16 weights, its o, gate/up and down projections, though the bucket
// launches none of them.
void declare_small_m_kernels(BucketLowering& b, const std::vector<const ir::Op*>& ops) {
  const ir::Op &attn = *ops[2], &o = *ops[3], &mlp_norm = *ops[4], &gate_up = *ops[5];
  const ir::Param &wo = param_of(b.graph, o, 0), &wgu = param_of(b.graph, gate_up, 0);
  const int H = dim(wo, 0), ko = dim(wo, 1), I = dim(wgu, 0) / 2;
  const AttentionKernels a = choose_attention(b.model, b.bucket, attn);
  b.declare(TableRole::attn_combine, a.combine);
  b.declare(TableRole::attn_split, a.split);
  if (b.model.m.layers_e4m3) return;
  b.declare(TableRole::o_proj,
            choose_gemm(b.bucket, "residual", H, ko, b.model.image("o"), "").kernel);
  b.declare(TableRole::gate_up, choose_gemm(b.bucket, "swiglu", I, H, b.model.image("gate_up"),
                                            b.bucket.fold_norm ? eps_literal(mlp_norm) : "")
                                    .kernel);
  b.declare(TableRole::down_proj,
            choose_gemm(b.bucket, "residual", H, I, b.model.image("down"), "").kernel);
}

// decode_layer_persistent for the layer whose QKV linear is `qkv` (H, I: the hidden and
// intermediate sizes) and its QKV epilogue's template arguments; with e4m3 weights
// decode_layer_persistent_e4m3, `scales` the four weights' scale blocks (rows, columns) as its
// last template arguments; with W8A8 weights decode_layer_persistent_w8a8 (no last arguments: the
// blocks are 128 x 128); on sm_100a decode_layer_persistent_sm100 (the same arguments).
KernelInstance decode_layer_kernel(const ModelPlan& mp, const ir::Op& qkv, int H, int I,
                                   const QkvEpilogue& epi,
                                   const std::vector<const ir::ParamScale*>& scales) {
  const PersistentLayerTiling& t = mp.layer_t;
  const int D = int_attr(qkv, "head_dim");
  const bool w8a8 = mp.m.layers_w8a8, e4m3 = !scales.empty() && !w8a8;
  std::string last = ", " + num(t.bulk);
  std::vector<std::string> params = {"qkv_w", "o_w", "gu_w", "down_w"};
  if (!scales.empty()) params.insert(params.end(), {"qkv_s", "o_s", "gu_s", "down_s"});
  if (w8a8) last = "";
  if (e4m3) {
    last = ", " + num(t.raw_stages);
    for (const ir::ParamScale* sc : scales)
      last += ", " + num(sc->block_rows) + ", " + num(sc->block_cols);
  }
  params.insert(params.end(), {"attn_norm", "mlp_norm", "bias", "q_norm", "k_norm", "positions",
                               "token_seq", "page_tables", "kv_layer", "x", "qkv", "q", "part_o",
                               "part_ml", "attn", "act", "sync"});
  const char* form = w8a8 ? "_w8a8<" : e4m3 ? "_e4m3<" : mp.tcgen05 ? "_sm100<" : "<";
  return {std::string("telos_kernels::decode_layer_persistent") + form + num(H) + ", " +
              num(int_attr(qkv, "heads")) + ", " + num(int_attr(qkv, "kv_heads")) + ", " + num(D) +
              ", " + epi.targs + ", " + num(mp.split) + ", " + num(mp.nsplits) + ", " +
              float_literal(1.4426950408889634 / std::sqrt(static_cast<double>(D))) + ", " +
              num(I) + ", " + num(t.stages) + ", " + num(t.bq) + ", " + num(t.bo) + ", " +
              num(t.bg) + ", " + num(t.bd) + (t.qkv_rope ? ", true" : ", false") + last + ">",
          params, e4m3 ? kPersistentE4m3Threads : kPersistentThreads, t.smem};
}

// A one-token layer in one persistent launch: its seven phases (norm + QKV GEMM, the QKV epilogue,
// attention splits, the combine, o, norm + gate/up, down) between grid-wide counts.
void lower_layer(BucketLowering& b, const std::vector<const ir::Op*>& ops) {
  check_layer_ops(ops);
  declare_small_m_kernels(b, ops);
  const ir::Op &attn_norm = *ops[0], &qkv = *ops[1], &o = *ops[3];
  const ir::Op &mlp_norm = *ops[4], &gate_up = *ops[5], &down = *ops[6];
  const PersistentLayerTiling& t = b.model.layer_t;
  const int rows = dim(param_of(b.graph, qkv, 0), 0), H = dim(param_of(b.graph, qkv, 0), 1);
  const int ko = dim(param_of(b.graph, o, 0), 1), I = dim(param_of(b.graph, gate_up, 0), 0) / 2;
  const QkvEpilogue epi = qkv_epilogue(b.model, qkv);
  // A weight in the tiling's `bulk` mask as its slot image in tiles of bn rows (gate/up: two
  // halves; docs/artifact.md, `wimg:`), one bulk copy a ring slot; else its tensor map (W8A8: over
  // its bytes, 128-byte box rows with the swizzle).
  const int box_cols = b.model.m.layers_w8a8 ? 128 : 64;
  auto wmap = [&](int bit, const ir::Op& op, long long n, long long k, int bn, bool halves) {
    if (t.bulk >> bit & 1)
      return "wimg:" + op.params.at(0) + ":" + num(bn) + ":" + (halves ? "2" : "1");
    return tmap(weight(op, 0), n, k, halves ? bn / 2 : bn, box_cols);
  };
  std::vector<std::string> args = {
      wmap(0, qkv, rows, H, t.bq, false), wmap(1, o, H, ko, t.bo, false),
      wmap(2, gate_up, 2LL * I, H, t.bg, true), wmap(3, down, H, I, t.bd, false)};
  // e4m3 weights (the maps then over their e4m3 bytes, docs/artifact.md): their scales after them.
  std::vector<const ir::ParamScale*> scales;
  if (b.model.m.layers_e4m3)
    for (const ir::Op* op : {&qkv, &o, &gate_up, &down}) {
      scales.push_back(&param_of(b.graph, *op, 0).scale.value());
      args.push_back(weight(*op, 0) + ".scale");
    }
  args.insert(args.end(), {weight(attn_norm, 0), weight(mlp_norm, 0)});
  // The epilogue's operands up to kv:L; q goes after x and qkv.
  args.insert(args.end(), epi.args.begin(), epi.args.begin() + 7);
  args.insert(args.end(), {"buf:x", "buf:qkv", "buf:q", "buf:part_o", "buf:part_ml", "buf:attn",
                           "buf:act", "buf:layer_sync"});
  b.partial_rows(1);
  b.launch(b.use(TableRole::decode_layer, decode_layer_kernel(b.model, qkv, H, I, epi, scales)),
           {kSms, 1, 1}, args);
  b.model.uses_layer_sync = true;
}

constexpr unsigned bit(ShapeClass s) {
  return 1u << static_cast<int>(s);
}
constexpr unsigned kOneToken = bit(ShapeClass::one_token_decode);
constexpr unsigned kSmallM = bit(ShapeClass::small_m);
constexpr unsigned kPrefill = bit(ShapeClass::prefill_gemm);
constexpr unsigned kEvery = kOneToken | kSmallM | kPrefill;

// ---- The walk -----------------------------------------------------------------------------------

bool has_layer_rule(ShapeClass shape, const std::string& target) {
  return std::any_of(lowering_table().begin(), lowering_table().end(), [&](const LoweringRule& r) {
    return std::string(r.op) == "layer" && (r.shapes & bit(shape)) && r.target == target;
  });
}

// A bucket's program: the IR's ops in order, each by its rule, or each layer's ops together where
// the bucket's shape class has a `layer` rule.
BucketProgram lower_bucket(const ir::Graph& graph, ModelPlan& mp, const Bucket& bucket,
                           KernelTable& table) {
  BucketLowering b(graph, mp, bucket);
  const bool whole_layers = has_layer_rule(bucket.shape, mp.target);
  const auto& ops = graph.ops();
  for (std::size_t i = 0; i < ops.size();) {
    std::vector<const ir::Op*> group = {ops[i].get()};
    const int layer = op_layer(*ops[i]);
    const bool as_layer = whole_layers && layer >= 0;
    while (as_layer && i + group.size() < ops.size() && op_layer(*ops[i + group.size()]) == layer)
      group.push_back(ops[i + group.size()].get());
    b.lower(find_lowering_rule(graph, group, as_layer, bucket.shape, mp.target), group);
    i += group.size();
  }
  return b.finish(table);
}

std::vector<ArenaBuffer> arena(const ModelPlan& mp, const KernelPlan& plan) {
  const long long T = plan.max_tokens, S = plan.max_sample_rows;
  const ModelShape& m = mp.m;
  // The partials' rows: a prefill bucket's prompt rows on attn_prefill write none.
  long long P = 0;
  for (const BucketProgram& b : plan.buckets) P = std::max<long long>(P, b.split_rows);
  std::vector<ArenaBuffer> a = {
      {"x", T * m.H * 4},
      {"h", T * m.H * 2},
      {"q", T * m.HQ * m.D * 4},
      {"part_o", P * m.HQ * plan.attn_num_splits * m.D * 4},
      {"part_ml", P * m.HQ * plan.attn_num_splits * 2 * 4},
      {"attn", T * m.HQ * m.D * 2},
      // The W8A8 layer's act also holds its e4m3 form (one token).
      {"act", std::max(T * m.I * 2, m.layers_w8a8 ? persistent_w8a8_act_bytes(m.I) : 0LL)},
      {"hf", S * m.H * 2},
      // Copied back to the host after the step's graph, when asked.
      {"logits", S * m.V * 4, BufferLifetime::step},
      {"lm_cand", mp.max_lm_candidates * 8},
      // The next step's embed_gather reads the tokens this step sampled (fed tokens).
      {"sampled", S * 4, BufferLifetime::steps},
  };
  // The QKV projection between its GEMM and its epilogue.
  a.push_back({"qkv", T * m.NH() * m.D * 2});
  // Arrival counters of gemm_small_norm_qkv, one per head, zero between launches.
  if (mp.qkv_arrival_counters > 0)
    a.push_back({"qkv_arrivals", mp.qkv_arrival_counters * 4LL, BufferLifetime::steps});
  // decode_layer_persistent's two grid-wide counters, zero between launches.
  if (mp.uses_layer_sync) a.push_back({"layer_sync", 8, BufferLifetime::steps});
  // Tensor parallelism: the rank's partial product, which the other ranks read and which stays
  // zero between all-reduces, and the ranks' barrier flags (kernels/all_reduce.cuh).
  if (m.ranks > 1) {
    a.push_back({"partial", T * m.H * 4, BufferLifetime::steps});
    a.push_back({"all_reduce_flags", 4LL * kAllReduceMaxBlocks * m.ranks, BufferLifetime::steps});
  }
  // The NCCL all-reduce's gather buffer [ranks, tokens, H] (lower_all_reduce), where a bucket
  // takes it.
  if (mp.max_gather_rows > 0)
    a.push_back({"all_reduce_gather", mp.max_gather_rows * m.H * 4, BufferLifetime::step});
  // A W8A8 GEMM's input quantized (launch_gemm_w8a8): e4m3 rows and their per-128 scales.
  if (mp.max_w8a8_k > 0) {
    a.push_back({"aq", T * mp.max_w8a8_k});
    a.push_back({"aq_scale", T * ((mp.max_w8a8_k + 127) / 128) * 4});
  }
  return a;
}

}  // namespace

const std::vector<LoweringRule>& lowering_table() {
  static const std::vector<LoweringRule> table = {
      {"layer", "layer", "", DType::BF16, kOneToken, "sm_90a",
       "decode_layer_persistent: the layer's seven ops in one launch", lower_layer},
      {"layer", "layer", "", DType::E4M3, kOneToken, "sm_90a",
       "decode_layer_persistent_e4m3: the layer's seven ops in one launch, its weights converted "
       "to bf16 with their scales",
       lower_layer},
      {"embed", "embed", "", DType::BF16, kEvery, "sm_90a", "embed_gather", lower_embed},
      {"rmsnorm", "rmsnorm", "", DType::BF16, kEvery, "sm_90a",
       "rmsnorm into h, or none where the next GEMM or the all-reduce before it applies it; over "
       "the sampled rows before the LM head",
       lower_rmsnorm},
      {"linear.rope_kv_append", "linear", "rope_kv_append", DType::BF16, kSmallM, "sm_90a",
       "gemm_small_norm_qkv (norm and epilogue folded in), or gemm_small[_norm]_bf16 + "
       "qkv_rope_append_rows",
       lower_qkv},
      {"linear.rope_kv_append", "linear", "rope_kv_append", DType::BF16, kPrefill, "sm_90a",
       "gemm_prefill_bf16 + qkv_rope_append_rows", lower_qkv},
      {"paged_attention", "paged_attention", "", DType::BF16, kSmallM | kPrefill, "sm_90a",
       "attn_split + attn_combine, and attn_prefill for a prefill bucket's prompt rows",
       lower_attention},
      {"linear.residual", "linear", "residual", DType::BF16, kSmallM, "sm_90a",
       "gemm_small_residual", lower_projection},
      {"linear.residual", "linear", "residual", DType::BF16, kPrefill, "sm_90a",
       "gemm_prefill_residual", lower_projection},
      {"linear.swiglu", "linear", "swiglu", DType::BF16, kSmallM, "sm_90a",
       "gemm_small[_norm]_swiglu (the norm folded in)", lower_projection},
      {"linear.swiglu", "linear", "swiglu", DType::BF16, kPrefill, "sm_90a", "gemm_prefill_swiglu",
       lower_projection},
      {"lm_head_sample", "lm_head_sample", "", DType::BF16, kEvery, "sm_90a",
       "gemm_small_f32cand + sample", lower_lm_head_sample},
      {"lm_head_sample", "lm_head_sample", "", DType::E4M3, kEvery, "sm_90a",
       "gemm_small_e4m3_f32cand + sample", lower_lm_head_sample},
      {"lm_head_sample", "lm_head_sample", "", DType::E4M3, kEvery, "sm_90a",
       "quantize_rows_e4m3 + gemm_small_w8a8_f32cand + sample", lower_lm_head_sample, true},
      {"linear.partial", "linear", "partial", DType::BF16, kSmallM, "sm_90a",
       "gemm_small_residual into the zeroed f32 partial (a tensor-parallel rank's o or down)",
       lower_partial},
      {"linear.partial", "linear", "partial", DType::BF16, kPrefill, "sm_90a",
       "gemm_prefill_residual into the zeroed f32 partial (a tensor-parallel rank's o or down)",
       lower_partial},
      {"all_reduce.residual", "all_reduce", "residual", DType::BF16, kSmallM | kPrefill, "sm_90a",
       "all_reduce_residual[_two_shot] (two-shot above the plan's size), or _rmsnorm with the "
       "next norm: every rank's partial, in rank order, added to x over peer memory; large "
       "prefill messages: NCCL's all_gather, then gather_sum_residual",
       lower_all_reduce},
      // Blackwell: the GEMMs on tcgen05 (the small-M GEMM folding the norm, and the QKV
      // epilogue, where sm_90a's does); the kernels without wgmma (norms, embed, decode
      // attention on mma.sync, sampling, the all-reduce) as they are; the one-token layer on
      // tcgen05 (its GEMM phases gemm_small_sm100's chain); prompt rows on attn_prefill_sm100.
      {"layer", "layer", "", DType::BF16, kOneToken, "sm_100a",
       "decode_layer_persistent_sm100: the layer's seven ops in one launch, its GEMMs on tcgen05",
       lower_layer},
      {"embed", "embed", "", DType::BF16, kEvery, "sm_100a", "embed_gather", lower_embed},
      {"rmsnorm", "rmsnorm", "", DType::BF16, kEvery, "sm_100a",
       "rmsnorm into h, or none where the next GEMM or the all-reduce before it applies it; over "
       "the sampled rows before the LM head",
       lower_rmsnorm},
      {"linear.rope_kv_append", "linear", "rope_kv_append", DType::BF16, kSmallM, "sm_100a",
       "gemm_small_sm100_norm_qkv (norm and epilogue folded in), or gemm_small_sm100[_norm]_bf16 "
       "+ qkv_rope_append_rows",
       lower_qkv},
      {"linear.rope_kv_append", "linear", "rope_kv_append", DType::BF16, kPrefill, "sm_100a",
       "gemm_prefill_sm100_pair_bf16 + qkv_rope_append_rows", lower_qkv},
      {"paged_attention", "paged_attention", "", DType::BF16, kSmallM | kPrefill, "sm_100a",
       "attn_split + attn_combine, and attn_prefill_sm100 for a prefill bucket's prompt rows",
       lower_attention},
      {"linear.residual", "linear", "residual", DType::BF16, kSmallM, "sm_100a",
       "gemm_small_sm100_residual", lower_projection},
      {"linear.residual", "linear", "residual", DType::BF16, kPrefill, "sm_100a",
       "gemm_prefill_sm100_pair_residual", lower_projection},
      {"linear.swiglu", "linear", "swiglu", DType::BF16, kSmallM, "sm_100a",
       "gemm_small_sm100[_norm]_swiglu (the norm folded in)", lower_projection},
      {"linear.swiglu", "linear", "swiglu", DType::BF16, kPrefill, "sm_100a",
       "gemm_prefill_sm100_pair_swiglu", lower_projection},
      {"lm_head_sample", "lm_head_sample", "", DType::BF16, kEvery, "sm_100a",
       "gemm_small_sm100_f32cand + sample", lower_lm_head_sample},
      {"linear.partial", "linear", "partial", DType::BF16, kSmallM, "sm_100a",
       "gemm_small_sm100_residual into the zeroed f32 partial (a tensor-parallel rank's o or down)",
       lower_partial},
      {"linear.partial", "linear", "partial", DType::BF16, kPrefill, "sm_100a",
       "gemm_prefill_sm100_pair_residual into the zeroed f32 partial (a tensor-parallel rank's o "
       "or "
       "down)",
       lower_partial},
      {"all_reduce.residual", "all_reduce", "residual", DType::BF16, kSmallM | kPrefill, "sm_100a",
       "all_reduce_residual[_two_shot] (two-shot above the plan's size), or _rmsnorm with the "
       "next norm: every rank's partial, in rank order, added to x over peer memory; large "
       "prefill messages: NCCL's all_gather, then gather_sum_residual",
       lower_all_reduce},
      // e4m3 weights (FP8; kernels/gemm_e4m3.cuh): the GEMMs convert each stage's weights to bf16
      // with their scales, then run the bf16 arithmetic.
      {"linear.rope_kv_append", "linear", "rope_kv_append", DType::E4M3, kSmallM, "sm_90a",
       "gemm_small_e4m3[_norm]_bf16 + qkv_rope_append_rows", lower_qkv},
      {"linear.rope_kv_append", "linear", "rope_kv_append", DType::E4M3, kPrefill, "sm_90a",
       "gemm_prefill_e4m3_bf16 + qkv_rope_append_rows", lower_qkv},
      {"linear.residual", "linear", "residual", DType::E4M3, kSmallM, "sm_90a",
       "gemm_small_e4m3_residual", lower_projection},
      {"linear.residual", "linear", "residual", DType::E4M3, kPrefill, "sm_90a",
       "gemm_prefill_e4m3_residual", lower_projection},
      {"linear.swiglu", "linear", "swiglu", DType::E4M3, kSmallM, "sm_90a",
       "gemm_small_e4m3[_norm]_swiglu", lower_projection},
      {"linear.swiglu", "linear", "swiglu", DType::E4M3, kPrefill, "sm_90a",
       "gemm_prefill_e4m3_swiglu", lower_projection},
      {"linear.partial", "linear", "partial", DType::E4M3, kSmallM, "sm_90a",
       "gemm_small_e4m3_residual into the zeroed f32 partial (a tensor-parallel rank's o or down)",
       lower_partial},
      {"linear.partial", "linear", "partial", DType::E4M3, kPrefill, "sm_90a",
       "gemm_prefill_e4m3_residual into the zeroed f32 partial (a tensor-parallel rank's o or "
       "down)",
       lower_partial},
      // W8A8 (the W8A8 pass: e4m3 weights of 128 x 128 blocks; kernels/gemm_w8a8.cuh): each
      // GEMM's input quantized per token and 128 columns, then the e4m3 tensor-core product
      // promoted to f32 at each K block.
      {"layer", "layer", "", DType::E4M3, kOneToken, "sm_90a",
       "decode_layer_persistent_w8a8: the layer's seven ops in one launch, each GEMM's input "
       "quantized in shared memory",
       lower_layer, true},
      {"linear.rope_kv_append", "linear", "rope_kv_append", DType::E4M3, kSmallM, "sm_90a",
       "quantize_rows_e4m3 + gemm_small_w8a8_bf16 + qkv_rope_append_rows", lower_qkv, true},
      {"linear.rope_kv_append", "linear", "rope_kv_append", DType::E4M3, kPrefill, "sm_90a",
       "quantize_rows_e4m3 + gemm_prefill_w8a8_bf16 + qkv_rope_append_rows", lower_qkv, true},
      {"linear.residual", "linear", "residual", DType::E4M3, kSmallM, "sm_90a",
       "quantize_rows_e4m3 + gemm_small_w8a8_residual", lower_projection, true},
      {"linear.residual", "linear", "residual", DType::E4M3, kPrefill, "sm_90a",
       "quantize_rows_e4m3 + gemm_prefill_w8a8_residual", lower_projection, true},
      {"linear.swiglu", "linear", "swiglu", DType::E4M3, kSmallM, "sm_90a",
       "quantize_rows_e4m3 + gemm_small_w8a8_swiglu", lower_projection, true},
      {"linear.swiglu", "linear", "swiglu", DType::E4M3, kPrefill, "sm_90a",
       "quantize_rows_e4m3 + gemm_prefill_w8a8_swiglu", lower_projection, true},
      {"linear.partial", "linear", "partial", DType::E4M3, kSmallM, "sm_90a",
       "quantize_rows_e4m3 + gemm_small_w8a8_residual into the zeroed f32 partial", lower_partial,
       true},
      {"linear.partial", "linear", "partial", DType::E4M3, kPrefill, "sm_90a",
       "quantize_rows_e4m3 + gemm_prefill_w8a8_residual into the zeroed f32 partial", lower_partial,
       true},
  };
  return table;
}

const LoweringRule& find_lowering_rule(const ir::Graph& graph,
                                       const std::vector<const ir::Op*>& ops, bool layer,
                                       ShapeClass shape, const std::string& target) {
  const ir::Op& op = *ops.at(0);
  const std::string kind = layer ? "layer" : op.kind, epi = layer ? "" : epilogue_of(op);
  const DType dtype = ops_dtype(graph, ops);
  const bool w8a8 = any_w8a8(ops);
  bool other_target = false;
  for (const LoweringRule& r : lowering_table())
    if (kind == r.op && epi == r.epilogue && dtype == r.dtype && w8a8 == r.w8a8 &&
        (r.shapes & bit(shape))) {
      if (r.target == target) return r;
      other_target = true;
    }
  const std::string what =
      (layer ? "layer " + num(op_layer(op)) + " (from " + ir::print_op(op) + ")"
             : ir::print_op(op)) +
      ": op " + kind + (epi.empty() ? "" : ", epilogue " + epi) + ", " +
      std::string(dtype_name(dtype)) + (w8a8 ? " (W8A8)" : "") + ", in " + shape_class_name(shape) +
      " buckets";
  if (other_target)
    fail("codegen: no lowering rule for target " + target + " for " + what +
         " (other targets have one)");
  fail("codegen: no lowering rule for " + what);
}

KernelPlan plan_kernels(const ir::Graph& graph, const CodegenInput& in, const std::string& target) {
  if (std::none_of(lowering_table().begin(), lowering_table().end(),
                   [&](const LoweringRule& r) { return r.target == target; }))
    fail("codegen: target " + target + ": the lowering table has no rules for it");
  ModelPlan mp = model_plan(read_model(graph), in, target);
  KernelPlan plan;
  plan.target = target;
  plan.attn_split = mp.split;
  plan.attn_num_splits = mp.nsplits;
  plan.rope_inv_freq = rope_inv_freq(mp.m.rope, mp.m.D);
  plan.ranks = mp.m.ranks;
  KernelTable table(plan);
  auto lower = [&](const std::string& kind, int n, int rows) {
    if (n <= 0) fail("codegen: serving." + kind + "_buckets: sizes must be positive");
    plan.buckets.push_back(lower_bucket(graph, mp, make_bucket(mp, kind, n, n, rows), table));
    plan.max_tokens = std::max(plan.max_tokens, n);
    plan.max_sample_rows = std::max(plan.max_sample_rows, rows);
  };
  std::vector<int> decode = in.decode_buckets, prefill = in.prefill_buckets;
  std::sort(decode.rbegin(), decode.rend());
  std::sort(prefill.rbegin(), prefill.rend());
  for (int n : decode) lower("decode", n, n);
  for (int n : prefill) lower("prefill", n, std::min(n, in.max_batch));
  plan.arena = arena(mp, plan);
  return plan;
}

KernelPlan plan_kernels(const ir::Graph& graph, const CodegenInput& in) {
  if (in.targets.size() != 1)
    fail("codegen: plan_kernels plans one target; serving.targets has " +
         num(static_cast<long long>(in.targets.size())) + " (plan_kernel_sets plans each)");
  return plan_kernels(graph, in, in.targets[0]);
}

std::vector<KernelPlan> plan_kernel_sets(const ir::Graph& graph, const CodegenInput& in) {
  if (in.targets.empty()) fail("codegen: serving.targets is empty");
  std::vector<KernelPlan> sets;
  for (const std::string& target : in.targets) sets.push_back(plan_kernels(graph, in, target));
  return sets;
}

namespace {

// One launch of print_lowering: a kernel's, or a collective's line and its launches beneath.
std::string print_launch(const KernelPlan& plan, const Launch& l, const std::string& label,
                         const std::string& indent) {
  if (!l.collective.empty()) {
    std::string s = indent + label + ": collective " + l.collective + " " + num(l.count) +
                    " f32 from " + l.send + " into " + l.recv + "\n";
    for (const Launch& n : l.then) s += print_launch(plan, n, "then", indent + "  ");
    for (const Launch& n : l.fallback) s += print_launch(plan, n, "fallback", indent + "  ");
    return s;
  }
  std::string s = indent + label + ": kernel " + num(l.kernel) + " " +
                  plan.kernels[static_cast<std::size_t>(l.kernel)].instance + " grid " +
                  num(l.grid[0]) + "," + num(l.grid[1]) + "," + num(l.grid[2]) + " (";
  for (std::size_t a = 0; a < l.args.size(); ++a) s += (a ? ", " : "") + l.args[a];
  return s + ")\n";
}

}  // namespace

std::string print_lowering(const KernelPlan& plan) {
  std::string s;
  for (const BucketProgram& p : plan.buckets) {
    s += p.kind + ":" + num(p.size) + " (" + shape_class_name(p.shape) + ", " + num(p.tokens) +
         " tokens, " + num(p.sample_rows) + " sample rows)\n";
    for (const LoweredOps& t : p.lowered) {
      for (const std::string& op : t.ops) s += "  " + op + "\n";
      s += "    rule " + t.rule + ": " + t.kernels + "\n";
      if (!t.note.empty()) s += "    " + t.note + "\n";
      for (int i = t.first_launch; i < t.first_launch + t.launches; ++i)
        s +=
            print_launch(plan, p.launches[static_cast<std::size_t>(i)], "launch " + num(i), "    ");
      for (int k : t.declared)
        s += "    declared: kernel " + num(k) + " " +
             plan.kernels[static_cast<std::size_t>(k)].instance + " (not launched)\n";
    }
  }
  return s;
}

}  // namespace telos::codegen
