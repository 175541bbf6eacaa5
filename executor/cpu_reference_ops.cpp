#include "executor/cpu_reference_ops.hpp"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "executor/w8a8_reference.hpp"
#include "support/artifact_limits.hpp"
#include "support/error.hpp"
#include "support/qkv_layout.hpp"

namespace telos::exec {

namespace {

// ---- The arithmetic, one plain function each. ----

// Row r of w, widened to f32: the one place matrix weights are read.
void widen_row(const WeightTensor& w, std::int64_t r, float* out) {
  const std::size_t cols = static_cast<std::size_t>(w.shape[1]);
  const std::size_t first = static_cast<std::size_t>(r) * cols;
  switch (w.dtype) {
    case DType::BF16:
      for (std::size_t c = 0; c < cols; ++c)
        out[c] = bf16_to_f32(reinterpret_cast<const std::uint16_t*>(w.data)[first + c]);
      return;
    case DType::F16:
      for (std::size_t c = 0; c < cols; ++c)
        out[c] = f16_to_f32(reinterpret_cast<const std::uint16_t*>(w.data)[first + c]);
      return;
    case DType::F32:
      for (std::size_t c = 0; c < cols; ++c)
        out[c] = reinterpret_cast<const float*>(w.data)[first + c];
      return;
    case DType::E4M3: {
      // The kernels' dequantization (codegen/kernels/gemm_e4m3.cuh): the element times its
      // block's scale in f32, rounded to bf16 (the operand their bf16 MMAs read).
      const float* scale = w.scale + r / w.block_rows * w.scale_cols;
      for (std::size_t c = 0; c < cols; ++c)
        out[c] = bf16_to_f32(f32_to_bf16(e4m3_to_f32(w.data[first + c]) *
                                         scale[c / static_cast<std::size_t>(w.block_cols)]));
      return;
    }
    case DType::I32:
      break;
  }
  fail(w.name + ": an i32 tensor used as a weight matrix");
}

// y[t] = W · x[t] for `rows` rows: x is [rows, W's columns], y [rows, W's rows].
void matmul(float* y, const float* x, int rows, const WeightTensor& w) {
  const std::int64_t m = w.shape[0], k = w.shape[1];
  std::vector<float> wr(static_cast<std::size_t>(k));
  for (std::int64_t r = 0; r < m; ++r) {
    widen_row(w, r, wr.data());
    for (int t = 0; t < rows; ++t) {
      const float* xt = x + t * k;
      float sum = 0.0f;
      for (std::int64_t c = 0; c < k; ++c) sum += wr[static_cast<std::size_t>(c)] * xt[c];
      y[t * m + r] = sum;
    }
  }
}

// A linear's weight and how its product runs: on the f32 activations (bf16, f16, f32 and
// weight-only e4m3 weights), or with `activations = "e4m3"` on the activations quantized per token
// and 128 columns (W8A8, w8a8_reference.hpp), as the GPU kernels run it: from the activations
// rounded to bf16, which is what the kernels quantize (a value within a bf16 step of an e4m3
// rounding boundary would otherwise round to another e4m3 value, 2^-4 away).
struct LinearWeight {
  const WeightTensor* w;
  bool w8a8;
  void apply(float* y, const float* x, int rows) const {
    if (!w8a8) {
      matmul(y, x, rows, *w);
      return;
    }
    std::vector<float> bf16_rows(x, x + static_cast<std::size_t>(rows) * w->shape[1]);
    for (float& v : bf16_rows) v = bf16_to_f32(f32_to_bf16(v));
    w8a8_matmul(y, bf16_rows.data(), rows, *w);
  }
};

void rmsnorm(float* out, const float* x, const float* weight, int n, float eps) {
  float sum_squares = 0.0f;
  for (int i = 0; i < n; ++i) sum_squares += x[i] * x[i];
  const float scale = 1.0f / std::sqrt(sum_squares / static_cast<float>(n) + eps);
  for (int i = 0; i < n; ++i) out[i] = weight[i] * (x[i] * scale);
}

float silu(float x) {
  return x / (1.0f + std::exp(-x));
}

// Rotates each of `heads` heads of D at `position` (rotate-half: dimension i pairs with i + D/2).
void rope(float* x, int heads, int D, int position, const std::vector<float>& inv_freq) {
  const int half = D / 2;
  for (int i = 0; i < half; ++i) {
    const float angle = static_cast<float>(position) * inv_freq[static_cast<std::size_t>(i)];
    const float cos = std::cos(angle), sin = std::sin(angle);
    for (int h = 0; h < heads; ++h) {
      float* v = x + h * D;
      const float a = v[i], b = v[i + half];
      v[i] = a * cos - b * sin;
      v[i + half] = b * cos + a * sin;
    }
  }
}

// Causal attention of one token's query heads over positions 0..position of its pages; query
// head h reads KV head h / (heads / kv_heads), scale 1/sqrt(D).
void attend(float* out, const float* q, int heads, int kv_heads, int D, int layer, int position,
            std::span<const PageId> pages, const CpuKvCache& kv) {
  const int group = heads / kv_heads;
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  std::vector<float> scores(static_cast<std::size_t>(position + 1));
  std::vector<float> kt(static_cast<std::size_t>(D)), vt(static_cast<std::size_t>(D));
  for (int h = 0; h < heads; ++h) {
    const float* qh = q + h * D;
    const int kv_head = h / group;
    float max_score = -INFINITY;
    for (int t = 0; t <= position; ++t) {
      kv.load(pages, layer, 0, kv_head, t, kt.data());
      float dot = 0.0f;
      for (int d = 0; d < D; ++d) dot += qh[d] * kt[d];
      scores[static_cast<std::size_t>(t)] = dot * scale;
      max_score = std::max(max_score, scores[static_cast<std::size_t>(t)]);
    }
    float sum = 0.0f;
    for (float& s : scores) {
      s = std::exp(s - max_score);
      sum += s;
    }
    float* o = out + h * D;
    std::fill(o, o + D, 0.0f);
    for (int t = 0; t <= position; ++t) {
      const float p = scores[static_cast<std::size_t>(t)] / sum;
      kv.load(pages, layer, 1, kv_head, t, vt.data());
      for (int d = 0; d < D; ++d) o[d] += p * vt[d];
    }
  }
}

// RoPE inverse frequencies theta^(-2i/D), with Llama 3's scaling when the op asks for it: long
// wavelengths (beyond original_max_position_embeddings / low_freq_factor) are slowed by `factor`,
// short ones (below original / high_freq_factor) kept, and those between interpolated smoothly
// (the semantics of transformers' _compute_llama3_parameters).
std::vector<float> rope_inv_freq(const CpuOpBinding& b, int D) {
  const double theta = b.positive_attr("theta");
  const std::string scaling = b.string_attr("scaling");
  const bool llama3 = scaling == "llama3";
  if (!llama3 && scaling != "default")
    b.refuse("attrs.scaling", "\"" + scaling + "\" is not default or llama3");
  double factor = 1, low = 1, high = 2, old_context = 1;
  if (llama3) {
    factor = b.positive_attr("factor");
    low = b.positive_attr("low_freq_factor");
    high = b.positive_attr("high_freq_factor");
    if (high <= low) b.refuse("attrs.high_freq_factor", "must be larger than low_freq_factor");
    old_context = static_cast<double>(
        b.int_attr("original_max_position_embeddings", 1, limits::kMaxPositions));
  }
  std::vector<float> inv_freq(static_cast<std::size_t>(D / 2));
  for (int i = 0; i < D / 2; ++i) {
    double f = 1.0 / std::pow(theta, 2.0 * i / D);
    if (llama3) {
      const double wavelen = 2 * std::numbers::pi / f;
      if (wavelen > old_context / low) {
        f /= factor;
      } else if (wavelen >= old_context / high) {
        const double smooth = (old_context / wavelen - low) / (high - low);
        f = (1 - smooth) * f / factor + smooth * f;
      }
    }
    inv_freq[static_cast<std::size_t>(i)] = static_cast<float>(f);
  }
  return inv_freq;
}

// The attention shape an op states: KV heads and head dim those of the KV cache, the layer one of
// its layers, query heads a multiple of the KV heads.
struct AttentionShape {
  int layer, heads, kv_heads, head_dim;
};
AttentionShape attention_shape(const CpuOpBinding& b) {
  const KvCacheConfig& kv = b.kv_cache();
  AttentionShape a{};
  a.layer = static_cast<int>(b.int_attr("layer", 0, kv.num_layers - 1));
  a.kv_heads = static_cast<int>(b.int_attr("kv_heads", kv.num_kv_heads, kv.num_kv_heads));
  a.head_dim = static_cast<int>(b.int_attr("head_dim", kv.head_dim, kv.head_dim));
  a.heads = static_cast<int>(b.int_attr("heads", 1, limits::kMaxHeads));
  if (a.heads % a.kv_heads != 0)
    b.refuse("attrs.heads", std::to_string(a.heads) + " is not a multiple of kv_heads " +
                                std::to_string(a.kv_heads));
  return a;
}

// ---- The ops, one binding each: what it reads at load, then what it computes. ----

// %x = embed(%tokens, @embed): each token's row of the table.
CpuOpRun bind_embed(const CpuOpBinding& b) {
  b.counts(1, 1, 1, 1);
  b.input(0, "tokens");
  const WeightTensor* table = &b.matrix(0, b.model().vocab_size, 0);
  const int H = static_cast<int>(table->shape[1]);
  const int x = b.result(0, H);
  return [=](CpuStep& s) {
    float* out = s.out(x, H);
    for (int t = 0; t < s.rows; ++t)
      widen_row(*table, s.tokens[static_cast<std::size_t>(t)], out + t * H);
  };
}

// %h = rmsnorm(%x, @w) {eps}
CpuOpRun bind_rmsnorm(const CpuOpBinding& b) {
  b.counts(1, 1, 1, 1);
  const int x = b.operand(0, 0), n = b.cols(x);
  const std::span<const float> w = b.vector(0, n);
  const float eps = static_cast<float>(b.positive_attr("eps"));
  const int h = b.result(0, n);
  return [=](CpuStep& s) {
    const float* in = s.in(x);
    float* out = s.out(h, n);
    for (int t = 0; t < s.rows; ++t) rmsnorm(out + t * n, in + t * n, w.data(), n, eps);
  };
}

// A linear op's weight (parameter 0, `rows` rows or any for 0) and its `activations`.
LinearWeight linear_weight(const CpuOpBinding& b, std::int64_t rows) {
  const WeightTensor* w = &b.matrix(0, rows, 0);
  if (!b.has_attr("activations")) return {w, false};
  const std::string a = b.string_attr("activations");
  if (a != "e4m3")
    b.refuse("attrs.activations", "\"" + a +
                                      "\" is not an activation format the CPU reference "
                                      "engine runs (e4m3)");
  try {
    check_w8a8_weight(*w);
  } catch (const Error& e) {
    b.refuse("attrs.activations", std::string("\"e4m3\" (W8A8): ") + e.what());
  }
  return {w, true};
}

// %y = linear(%x, @w [, @bias]): y = W · x (+ bias).
CpuOpRun bind_linear_plain(const CpuOpBinding& b) {
  b.counts(1, 1, 2, 1);
  const LinearWeight lw = linear_weight(b, 0);
  const WeightTensor* w = lw.w;
  const int M = static_cast<int>(w->shape[0]);
  const int x = b.operand(0, w->shape[1]);
  const std::span<const float> bias =
      b.op().params.size() == 2 ? b.vector(1, M) : std::span<const float>();
  const int y = b.result(0, M);
  return [=](CpuStep& s) {
    float* out = s.out(y, M);
    lw.apply(out, s.in(x), s.rows);
    if (!bias.empty())
      for (int t = 0; t < s.rows; ++t)
        for (int i = 0; i < M; ++i) out[t * M + i] += bias[static_cast<std::size_t>(i)];
  };
}

// %y = linear(%x, %residual, @w) {epilogue = "residual"}: y = residual + W · x.
CpuOpRun bind_linear_residual(const CpuOpBinding& b) {
  b.counts(2, 1, 1, 1);
  const LinearWeight lw = linear_weight(b, 0);
  const WeightTensor* w = lw.w;
  const int M = static_cast<int>(w->shape[0]);
  const int x = b.operand(0, w->shape[1]), residual = b.operand(1, M), y = b.result(0, M);
  return [=](CpuStep& s) {
    float* out = s.out(y, M);
    lw.apply(out, s.in(x), s.rows);
    const float* r = s.in(residual);
    for (std::size_t i = 0; i < static_cast<std::size_t>(s.rows) * M; ++i) out[i] = r[i] + out[i];
  };
}

// %p = linear(%x, @w) {epilogue = "partial"}: p = W · x, a tensor-parallel rank's share of the
// product over its columns of W, which all_reduce sums.
CpuOpRun bind_linear_partial(const CpuOpBinding& b) {
  b.counts(1, 1, 1, 1);
  const LinearWeight lw = linear_weight(b, 0);
  const WeightTensor* w = lw.w;
  const int M = static_cast<int>(w->shape[0]);
  const int x = b.operand(0, w->shape[1]), y = b.result(0, M);
  return [=](CpuStep& s) { lw.apply(s.out(y, M), s.in(x), s.rows); };
}

// %act = linear(%x, @gate_up) {epilogue = "swiglu"}: gate and up are W's two halves of rows;
// act = silu(gate) * up.
CpuOpRun bind_linear_swiglu(const CpuOpBinding& b) {
  b.counts(1, 1, 1, 1);
  const LinearWeight lw = linear_weight(b, 0);
  const WeightTensor* w = lw.w;
  if (w->shape[0] % 2 != 0) b.refuse("params[0]", w->name + " has an odd number of rows");
  const int I = static_cast<int>(w->shape[0] / 2);
  const int x = b.operand(0, w->shape[1]), act = b.result(0, I);
  return [=](CpuStep& s) {
    std::vector<float> gate_up(static_cast<std::size_t>(s.rows) * 2 * I);
    lw.apply(gate_up.data(), s.in(x), s.rows);
    float* out = s.out(act, I);
    for (int t = 0; t < s.rows; ++t) {
      const float* g = &gate_up[static_cast<std::size_t>(t) * 2 * I];
      for (int i = 0; i < I; ++i) out[t * I + i] = silu(g[i]) * g[I + i];
    }
  };
}

// %q = linear(%x, %positions, @qkv [, @qkv_bias] [, @q_norm, @k_norm])
//     {epilogue = "rope_kv_append", layer, heads, kv_heads, head_dim, rope attrs [, eps]}:
// q, k, v = W · x (+ bias); each head of q and k RMS-normed when the norms are given; RoPE on q
// and k; k and v written to the layer's KV pages at the token's position; q is the result.
CpuOpRun bind_linear_rope_kv_append(const CpuOpBinding& b) {
  b.counts(2, 1, 4, 1);
  const AttentionShape a = attention_shape(b);
  const int D = a.head_dim, R = (a.heads + 2 * a.kv_heads) * D;
  const LinearWeight lw = linear_weight(b, R);
  const WeightTensor* w = lw.w;
  const int x = b.operand(0, w->shape[1]);
  b.input(1, "positions");
  // Params: qkv, then the bias when there are 2 or 4, then q_norm and k_norm when 3 or 4.
  const std::size_t n = b.op().params.size();
  using Vector = std::span<const float>;
  const Vector bias = n == 2 || n == 4 ? b.vector(1, R) : Vector();
  const Vector q_norm = n >= 3 ? b.vector(n - 2, D) : Vector();
  const Vector k_norm = n >= 3 ? b.vector(n - 1, D) : Vector();
  const float eps = n >= 3 ? static_cast<float>(b.positive_attr("eps")) : 0.0f;
  // With the rows packed in RoPE's pair order (docs/artifact.md), the projection comes out in
  // that order and is put back in the natural one.
  const bool pairs = w->layout == "qkv_rope_pairs";
  const std::vector<float> inv_freq = rope_inv_freq(b, D);
  const int q_out = b.result(0, a.heads * D);
  return [=](CpuStep& s) {
    std::vector<float> projected(static_cast<std::size_t>(s.rows) * R), qkv(R);
    lw.apply(projected.data(), s.in(x), s.rows);
    float* out = s.out(q_out, a.heads * D);
    for (int t = 0; t < s.rows; ++t) {
      const float* p = &projected[static_cast<std::size_t>(t) * R];
      for (int i = 0; i < R; ++i) qkv[i] = p[pairs ? qkv_pair_pos(i, D) : i];
      if (!bias.empty())
        for (int i = 0; i < R; ++i) qkv[i] += bias[static_cast<std::size_t>(i)];
      float* q = qkv.data();
      float* k = q + a.heads * D;
      float* v = k + a.kv_heads * D;
      if (!q_norm.empty()) {
        for (int h = 0; h < a.heads; ++h) rmsnorm(q + h * D, q + h * D, q_norm.data(), D, eps);
        for (int h = 0; h < a.kv_heads; ++h) rmsnorm(k + h * D, k + h * D, k_norm.data(), D, eps);
      }
      const int position = s.positions[static_cast<std::size_t>(t)];
      rope(q, a.heads, D, position, inv_freq);
      rope(k, a.kv_heads, D, position, inv_freq);
      const std::span<const PageId> pages = s.pages[static_cast<std::size_t>(t)];
      for (int h = 0; h < a.kv_heads; ++h) {
        s.kv->store(pages, a.layer, 0, h, position, k + h * D);
        s.kv->store(pages, a.layer, 1, h, position, v + h * D);
      }
      std::copy(q, k, out + t * a.heads * D);
    }
  };
}

CpuOpRun bind_linear(const CpuOpBinding& b) {
  if (!b.has_attr("epilogue")) return bind_linear_plain(b);
  const std::string epilogue = b.string_attr("epilogue");
  if (epilogue == "residual") return bind_linear_residual(b);
  if (epilogue == "swiglu") return bind_linear_swiglu(b);
  if (epilogue == "rope_kv_append") return bind_linear_rope_kv_append(b);
  if (epilogue == "partial") return bind_linear_partial(b);
  b.refuse("attrs.epilogue", "\"" + epilogue +
                                 "\" is not an epilogue the CPU reference engine runs (residual, "
                                 "swiglu, rope_kv_append, partial)");
}

// %o = paged_attention(%q) {layer, heads, kv_heads, head_dim}: attention over the KV pages the
// layer's rope_kv_append wrote.
CpuOpRun bind_paged_attention(const CpuOpBinding& b) {
  b.counts(1, 0, 0, 1);
  const AttentionShape a = attention_shape(b);
  const int width = a.heads * a.head_dim;
  const int q = b.operand(0, width), o = b.result(0, width);
  return [=](CpuStep& s) {
    const float* in = s.in(q);
    float* out = s.out(o, width);
    for (int t = 0; t < s.rows; ++t)
      attend(out + t * width, in + t * width, a.heads, a.kv_heads, a.head_dim, a.layer,
             s.positions[static_cast<std::size_t>(t)], s.pages[static_cast<std::size_t>(t)], *s.kv);
  };
}

// %y = all_reduce(%partial, %residual) {ranks, epilogue = "residual"}: y = residual + the sum of
// every rank's partial, taken in rank order, ((p0 + p1) + p2) + ..., as the GPU kernel adds them
// (codegen/kernels/all_reduce.cuh): every rank computes the same bits.
CpuOpRun bind_all_reduce(const CpuOpBinding& b) {
  if (b.ranks() < 2)
    b.refuse("", "an all_reduce in an artifact of one rank (serving.tensor_parallel 1)");
  b.counts(2, 0, 0, 1);
  b.int_attr("ranks", b.ranks(), b.ranks());
  if (b.string_attr("epilogue") != "residual")
    b.refuse("attrs.epilogue", "expected \"residual\" (the residual added once, after the sum)");
  const int residual = b.operand(1, 0), H = b.cols(residual);
  const int partial = b.operand(0, H), y = b.result(0, H);
  return [=](CpuStep& s) {
    const std::vector<CpuStep>& ranks = *s.ranks;
    const std::size_t n = static_cast<std::size_t>(s.rows) * static_cast<std::size_t>(H);
    float* out = s.out(y, H);
    const float* r = s.in(residual);
    for (std::size_t i = 0; i < n; ++i) {
      float sum = ranks[0].in(partial)[i];
      for (std::size_t k = 1; k < ranks.size(); ++k) sum += ranks[k].in(partial)[i];
      out[i] = r[i] + sum;
    }
  };
}

// %next = lm_head_sample(%x, @w): the logits of each sequence's last token, W · x (W8A8 with
// `activations = "e4m3"`, as a linear). The engine's sampler picks the token from them on the host.
CpuOpRun bind_lm_head_sample(const CpuOpBinding& b) {
  b.counts(1, 1, 1, 1);
  const LinearWeight lw = linear_weight(b, b.model().vocab_size);
  const int H = static_cast<int>(lw.w->shape[1]);
  const int x = b.operand(0, H);
  b.result_type(0, "i32[S]");
  b.writes_logits();
  return [=](CpuStep& s) {
    std::vector<float> last(s.sample_rows.size() * static_cast<std::size_t>(H));
    for (std::size_t j = 0; j < s.sample_rows.size(); ++j)
      std::copy_n(s.in(x) + s.sample_rows[j] * H, H, &last[j * static_cast<std::size_t>(H)]);
    lw.apply(s.logits->data(), last.data(), static_cast<int>(s.sample_rows.size()));
  };
}

}  // namespace

const CpuOpTable& cpu_reference_ops() {
  static const CpuOpTable table = {
      {"embed", &bind_embed},
      {"rmsnorm", &bind_rmsnorm},
      {"linear", &bind_linear},
      {"paged_attention", &bind_paged_attention},
      {"lm_head_sample", &bind_lm_head_sample},
      {"all_reduce", &bind_all_reduce},
  };
  return table;
}

}  // namespace telos::exec
