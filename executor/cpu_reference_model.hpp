#pragma once
// The CPU reference engine: the forward pass docs/artifact.md describes, in plain fp32 C++, one
// token at a time (read it top to bottom like llama2.c's run.c). Matrices are widened from their
// stored dtype to f32 row by row as they are used, so a large artifact costs page cache, not a
// second f32 copy. The KV cache has the GPU engine's paged layout, page[layer][kv][head][slot]
// [dim], and is addressed through the same page tables; only its element type differs (f32
// here, so that the engine is an fp32 ground truth).
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "executor/artifact.hpp"
#include "executor/model_backend.hpp"

namespace telos::exec {

class CpuReferenceModel : public ModelBackend {
 public:
  // `kv_pages` 0: serving.kv_pool.pages, or, for a pool sized as a fraction of GPU memory, enough
  // pages for max_batch sequences of max_seq_len within 4 GiB of host memory (at least one
  // sequence's worth).
  // Throws telos::Error (check_kv_pool) when the pool takes more host memory than there is.
  explicit CpuReferenceModel(std::shared_ptr<const Artifact> artifact, int kv_pages = 0);

  // The pool's pages for `kv_pages` as the constructor takes it, after checking that the pool
  // fits the host's available memory (runtime_limits.hpp, check_host_memory), naming --kv-pages
  // when it does not: what the engine would refuse, for `telos-run check` to refuse too.
  static int check_kv_pool(const Artifact& artifact, int kv_pages);

  int num_kv_pages() const override { return num_pages_; }
  int vocab_size() const override { return model_.vocab_size; }
  std::string name() const override { return "cpu"; }
  void forward(const Step& step, std::vector<float>& logits) override;

 private:
  // A weight matrix [rows, cols], row-major, in its stored dtype.
  struct Matrix {
    const WeightTensor* tensor = nullptr;
    int rows = 0, cols = 0;
  };
  struct Layer {
    std::span<const float> attn_norm, mlp_norm, qkv_bias, q_norm, k_norm;
    Matrix qkv, o, gate_up, down;
    bool qkv_pairs = false;  // qkv's rows in RoPE's pair order (layout qkv_rope_pairs)
  };

  Matrix matrix(const std::string& name) const;
  std::span<const float> vector(const std::string& name) const;

  // Row r of w, widened to f32: the one place matrix weights are read.
  void widen_row(const Matrix& w, int r, float* out) const;
  // out[rows] = W · x.
  void matmul(float* out, const float* x, const Matrix& w);
  void rmsnorm(float* out, const float* x, std::span<const float> weight, int n) const;
  void rope(float* heads, int num_heads, int position) const;
  // Where the K (kv = 0) or V (kv = 1) vector of one head at one position lives.
  float* kv_slot(std::span<const PageId> pages, int layer, int kv, int head, int position);

  // Runs one token through every layer; writes logits when `logits` is not null.
  void forward_token(std::int32_t token, int position, std::span<const PageId> pages,
                     float* logits);

  std::shared_ptr<const Artifact> artifact_;
  ModelConfig model_;
  int page_size_ = 0;
  int num_pages_ = 0;
  std::vector<float> kv_cache_;  // num_pages_ pages of [layer][kv][head][slot][dim]
  std::vector<float> inv_freq_;  // RoPE frequency per pair of dimensions, scaling applied

  Matrix embed_, lm_head_;
  std::span<const float> final_norm_;
  std::vector<Layer> layers_;

  // Activations of the token being computed.
  std::vector<float> x_, h_, qkv_, scratch_, att_, att_out_, gate_up_, act_, scores_, row_;
};

}  // namespace telos::exec
