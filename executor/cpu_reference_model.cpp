#include "executor/cpu_reference_model.hpp"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "executor/runtime_limits.hpp"
#include "support/error.hpp"
#include "support/qkv_layout.hpp"

namespace telos::exec {
namespace {

// RoPE inverse frequencies theta^(-2i/D), with Llama 3's scaling when the artifact asks for it:
// long wavelengths (beyond original_max_position_embeddings / low_freq_factor) are slowed by
// `factor`, short ones (below original / high_freq_factor) kept, and those between interpolated
// smoothly (the semantics of transformers' _compute_llama3_parameters).
std::vector<float> rope_inv_freq(const ModelConfig& m) {
  const int half = m.head_dim / 2;
  std::vector<float> inv_freq(static_cast<std::size_t>(half));
  for (int i = 0; i < half; ++i) {
    double f = 1.0 / std::pow(m.rope.theta, 2.0 * i / m.head_dim);
    if (m.rope.type == "llama3") {
      const double old_context = m.rope.original_max_position_embeddings;
      const double low_freq_wavelen = old_context / m.rope.low_freq_factor;
      const double high_freq_wavelen = old_context / m.rope.high_freq_factor;
      const double wavelen = 2 * std::numbers::pi / f;
      if (wavelen > low_freq_wavelen) {
        f /= m.rope.factor;
      } else if (wavelen >= high_freq_wavelen) {
        const double smooth = (old_context / wavelen - m.rope.low_freq_factor) /
                              (m.rope.high_freq_factor - m.rope.low_freq_factor);
        f = (1 - smooth) * f / m.rope.factor + smooth * f;
      }
    }
    inv_freq[static_cast<std::size_t>(i)] = static_cast<float>(f);
  }
  return inv_freq;
}

float silu(float x) {
  return x / (1.0f + std::exp(-x));
}

}  // namespace

namespace {
std::size_t floats_per_page(const Artifact& a) {
  const ModelConfig& m = a.model();
  return std::size_t{2} * static_cast<std::size_t>(m.num_layers) *
         static_cast<std::size_t>(m.num_kv_heads) *
         static_cast<std::size_t>(a.serving().kv_page_size) * static_cast<std::size_t>(m.head_dim);
}
}  // namespace

int CpuReferenceModel::check_kv_pool(const Artifact& artifact, int kv_pages) {
  const ServingConfig& s = artifact.serving();
  const std::size_t page_bytes = floats_per_page(artifact) * sizeof(float);
  const std::size_t per_sequence =
      static_cast<std::size_t>((s.max_seq_len + s.kv_page_size - 1) / s.kv_page_size);
  std::size_t pages = 0;
  if (kv_pages > 0) {
    pages = static_cast<std::size_t>(kv_pages);
  } else if (s.kv_pool_pages) {
    pages = static_cast<std::size_t>(*s.kv_pool_pages);
  } else {
    // A fraction of GPU memory means nothing on the host: hold max_batch full sequences, within
    // kHostKvBytes, and never less than one full sequence so that every valid request can run.
    constexpr std::size_t kHostKvBytes = std::size_t{4} << 30;
    pages = std::max(per_sequence, std::min(per_sequence * static_cast<std::size_t>(s.max_batch),
                                            kHostKvBytes / page_bytes));
  }
  // The manifest's bounds keep pages below 2^24 and a page below 2^41 bytes: no overflow.
  check_host_memory("the CPU engine's KV pool of " + std::to_string(pages) + " pages (f32, " +
                        std::to_string(page_bytes) + " bytes a page)",
                    static_cast<std::int64_t>(pages * page_bytes),
                    "pick a smaller pool with --kv-pages (one sequence of max_seq_len " +
                        std::to_string(s.max_seq_len) + " needs " + std::to_string(per_sequence) +
                        ")");
  return static_cast<int>(pages);
}

CpuReferenceModel::CpuReferenceModel(std::shared_ptr<const Artifact> artifact, int kv_pages)
    : artifact_(std::move(artifact)), model_(artifact_->model()) {
  page_size_ = artifact_->serving().kv_page_size;
  num_pages_ = check_kv_pool(*artifact_, kv_pages);
  kv_cache_.assign(floats_per_page(*artifact_) * static_cast<std::size_t>(num_pages_), 0.0f);
  inv_freq_ = rope_inv_freq(model_);

  embed_ = matrix("embed");
  lm_head_ = model_.tie_word_embeddings ? embed_ : matrix("lm_head");
  final_norm_ = vector("final_norm");
  for (int l = 0; l < model_.num_layers; ++l) {
    const std::string p = "layers." + std::to_string(l) + ".";
    Layer layer;
    layer.attn_norm = vector(p + "attn_norm");
    layer.mlp_norm = vector(p + "mlp_norm");
    if (model_.qkv_bias) layer.qkv_bias = vector(p + "qkv_bias");
    if (model_.qk_norm) {
      layer.q_norm = vector(p + "q_norm");
      layer.k_norm = vector(p + "k_norm");
    }
    layer.qkv = matrix(p + "qkv");
    layer.qkv_pairs = artifact_->tensor(p + "qkv").layout == "qkv_rope_pairs";
    layer.o = matrix(p + "o");
    layer.gate_up = matrix(p + "gate_up");
    layer.down = matrix(p + "down");
    layers_.push_back(layer);
  }

  const int H = model_.hidden_size, D = model_.head_dim;
  const int qkv_size = (model_.num_heads + 2 * model_.num_kv_heads) * D;
  x_.resize(static_cast<std::size_t>(H));
  h_.resize(static_cast<std::size_t>(H));
  att_out_.resize(static_cast<std::size_t>(H));
  qkv_.resize(static_cast<std::size_t>(qkv_size));
  scratch_.resize(static_cast<std::size_t>(qkv_size));
  att_.resize(static_cast<std::size_t>(model_.num_heads * D));
  gate_up_.resize(2 * static_cast<std::size_t>(model_.intermediate_size));
  act_.resize(static_cast<std::size_t>(model_.intermediate_size));
}

CpuReferenceModel::Matrix CpuReferenceModel::matrix(const std::string& name) const {
  // The loader has checked every shape against the model configuration.
  const WeightTensor& t = artifact_->tensor(name);
  return Matrix{&t, static_cast<int>(t.shape[0]), static_cast<int>(t.shape[1])};
}

std::span<const float> CpuReferenceModel::vector(const std::string& name) const {
  const WeightTensor& t = artifact_->tensor(name);
  // weights.bin aligns every tensor to 256 bytes, and mmap to a page: f32 reads are aligned.
  return {reinterpret_cast<const float*>(t.data), t.bytes / sizeof(float)};
}

void CpuReferenceModel::widen_row(const Matrix& w, int r, float* out) const {
  const std::size_t first = static_cast<std::size_t>(r) * static_cast<std::size_t>(w.cols);
  const std::uint8_t* data = w.tensor->data;
  switch (w.tensor->dtype) {
    case DType::BF16:
      for (int c = 0; c < w.cols; ++c)
        out[c] = bf16_to_f32(reinterpret_cast<const std::uint16_t*>(data)[first + c]);
      return;
    case DType::F16:
      for (int c = 0; c < w.cols; ++c)
        out[c] = f16_to_f32(reinterpret_cast<const std::uint16_t*>(data)[first + c]);
      return;
    case DType::F32:
      for (int c = 0; c < w.cols; ++c) out[c] = reinterpret_cast<const float*>(data)[first + c];
      return;
    case DType::I32:
      break;
  }
  fail(w.tensor->name + ": an i32 tensor used as a weight matrix");
}

void CpuReferenceModel::matmul(float* out, const float* x, const Matrix& w) {
  row_.resize(static_cast<std::size_t>(w.cols));
  for (int r = 0; r < w.rows; ++r) {
    widen_row(w, r, row_.data());
    float sum = 0.0f;
    for (int c = 0; c < w.cols; ++c) sum += row_[static_cast<std::size_t>(c)] * x[c];
    out[r] = sum;
  }
}

void CpuReferenceModel::rmsnorm(float* out, const float* x, std::span<const float> weight,
                                int n) const {
  float sum_squares = 0.0f;
  for (int i = 0; i < n; ++i) sum_squares += x[i] * x[i];
  const float scale = 1.0f / std::sqrt(sum_squares / static_cast<float>(n) +
                                       static_cast<float>(model_.rms_norm_eps));
  for (int i = 0; i < n; ++i) out[i] = weight[static_cast<std::size_t>(i)] * (x[i] * scale);
}

void CpuReferenceModel::rope(float* heads, int num_heads, int position) const {
  // Rotate-half convention: dimension i pairs with i + D/2.
  const int D = model_.head_dim, half = D / 2;
  for (int i = 0; i < half; ++i) {
    const float angle = static_cast<float>(position) * inv_freq_[static_cast<std::size_t>(i)];
    const float cos = std::cos(angle), sin = std::sin(angle);
    for (int h = 0; h < num_heads; ++h) {
      float* v = heads + h * D;
      const float a = v[i], b = v[i + half];
      v[i] = a * cos - b * sin;
      v[i + half] = b * cos + a * sin;
    }
  }
}

float* CpuReferenceModel::kv_slot(std::span<const PageId> pages, int layer, int kv, int head,
                                  int position) {
  const std::size_t page =
      static_cast<std::size_t>(pages[static_cast<std::size_t>(position / page_size_)]);
  const std::size_t slot = static_cast<std::size_t>(position % page_size_);
  const std::size_t L = static_cast<std::size_t>(model_.num_layers),
                    Hkv = static_cast<std::size_t>(model_.num_kv_heads),
                    S = static_cast<std::size_t>(page_size_),
                    D = static_cast<std::size_t>(model_.head_dim);
  const std::size_t index =
      ((((page * L + static_cast<std::size_t>(layer)) * 2 + static_cast<std::size_t>(kv)) * Hkv +
        static_cast<std::size_t>(head)) *
           S +
       slot) *
      D;
  return &kv_cache_[index];
}

void CpuReferenceModel::forward_token(std::int32_t token, int position,
                                      std::span<const PageId> pages, float* logits) {
  const int H = model_.hidden_size, D = model_.head_dim;
  const int Hq = model_.num_heads, Hkv = model_.num_kv_heads;
  const int group = Hq / Hkv;  // query heads per KV head
  const float attn_scale = 1.0f / std::sqrt(static_cast<float>(D));

  widen_row(embed_, token, x_.data());  // x = embed[token]

  for (std::size_t l = 0; l < layers_.size(); ++l) {
    const Layer& w = layers_[l];
    const int layer = static_cast<int>(l);

    // Attention block.
    rmsnorm(h_.data(), x_.data(), w.attn_norm, H);
    // With the rows packed in RoPE's pair order (docs/artifact.md), the projection lands in
    // scratch_ in that order and goes to qkv_ in the natural one.
    matmul(w.qkv_pairs ? scratch_.data() : qkv_.data(), h_.data(), w.qkv);
    if (w.qkv_pairs)
      for (std::size_t i = 0; i < qkv_.size(); ++i)
        qkv_[i] = scratch_[static_cast<std::size_t>(qkv_pair_pos(static_cast<long long>(i), D))];
    if (!w.qkv_bias.empty())
      for (std::size_t i = 0; i < qkv_.size(); ++i) qkv_[i] += w.qkv_bias[i];
    float* q = qkv_.data();
    float* k = q + Hq * D;
    float* v = k + Hkv * D;
    if (!w.q_norm.empty()) {
      for (int h = 0; h < Hq; ++h) rmsnorm(q + h * D, q + h * D, w.q_norm, D);
      for (int h = 0; h < Hkv; ++h) rmsnorm(k + h * D, k + h * D, w.k_norm, D);
    }
    rope(q, Hq, position);
    rope(k, Hkv, position);
    for (int h = 0; h < Hkv; ++h) {
      std::copy(k + h * D, k + (h + 1) * D, kv_slot(pages, layer, 0, h, position));
      std::copy(v + h * D, v + (h + 1) * D, kv_slot(pages, layer, 1, h, position));
    }

    // Causal attention over positions 0..position; query head h reads KV head h / group.
    scores_.resize(static_cast<std::size_t>(position + 1));
    for (int h = 0; h < Hq; ++h) {
      const float* qh = q + h * D;
      const int kv_head = h / group;
      float max_score = -INFINITY;
      for (int t = 0; t <= position; ++t) {
        const float* kt = kv_slot(pages, layer, 0, kv_head, t);
        float dot = 0.0f;
        for (int d = 0; d < D; ++d) dot += qh[d] * kt[d];
        scores_[static_cast<std::size_t>(t)] = dot * attn_scale;
        max_score = std::max(max_score, scores_[static_cast<std::size_t>(t)]);
      }
      float sum = 0.0f;
      for (float& s : scores_) {
        s = std::exp(s - max_score);
        sum += s;
      }
      float* out = &att_[static_cast<std::size_t>(h * D)];
      std::fill(out, out + D, 0.0f);
      for (int t = 0; t <= position; ++t) {
        const float p = scores_[static_cast<std::size_t>(t)] / sum;
        const float* vt = kv_slot(pages, layer, 1, kv_head, t);
        for (int d = 0; d < D; ++d) out[d] += p * vt[d];
      }
    }
    matmul(att_out_.data(), att_.data(), w.o);
    for (int i = 0; i < H; ++i)
      x_[static_cast<std::size_t>(i)] += att_out_[static_cast<std::size_t>(i)];

    // MLP block: SwiGLU.
    rmsnorm(h_.data(), x_.data(), w.mlp_norm, H);
    matmul(gate_up_.data(), h_.data(), w.gate_up);
    const std::size_t I = act_.size();
    for (std::size_t i = 0; i < I; ++i) act_[i] = silu(gate_up_[i]) * gate_up_[I + i];
    matmul(att_out_.data(), act_.data(), w.down);
    for (int i = 0; i < H; ++i)
      x_[static_cast<std::size_t>(i)] += att_out_[static_cast<std::size_t>(i)];
  }

  if (logits) {
    rmsnorm(h_.data(), x_.data(), final_norm_, H);
    matmul(logits, h_.data(), lm_head_);
  }
}

void CpuReferenceModel::forward(const Step& step, std::vector<float>& logits) {
  logits.clear();
  for (const ScheduledSequence& seq : step.sequences) {
    const int last = static_cast<int>(seq.tokens.size()) - 1;
    for (int i = 0; i <= last; ++i) {
      const std::int32_t token = seq.tokens[static_cast<std::size_t>(i)];
      if (token < 0 || token >= model_.vocab_size)
        fail("request " + std::to_string(seq.request) + ": token id " + std::to_string(token) +
             " is outside the vocabulary of " + std::to_string(model_.vocab_size));
      float* out = nullptr;
      if (seq.samples && i == last) {
        logits.resize(logits.size() + static_cast<std::size_t>(model_.vocab_size));
        out = logits.data() + logits.size() - static_cast<std::size_t>(model_.vocab_size);
      }
      forward_token(token, seq.first_position + i, seq.page_table, out);
    }
  }
}

}  // namespace telos::exec
