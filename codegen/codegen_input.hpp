#pragma once
// What codegen needs to know about a model and its serving config: a narrow struct of its own, so
// telosc fills it from its ModelSpec and ServingConfig and codegen depends on no compiler header.
#include <string>
#include <vector>

namespace telos::codegen {

struct RopeInput {
  std::string type = "default";  // "default" or "llama3"
  double theta = 10000.0;
  double factor = 1.0, low_freq_factor = 1.0, high_freq_factor = 4.0;  // llama3 only
  int original_max_position_embeddings = 0;                            // llama3 only
};

struct CodegenInput {
  // Model dimensions (docs/artifact.md, "model").
  int vocab_size = 0, hidden_size = 0, intermediate_size = 0;
  int num_layers = 0, num_heads = 0, num_kv_heads = 0, head_dim = 0;
  double rms_norm_eps = 1e-5;
  RopeInput rope;
  bool tie_word_embeddings = false;
  bool qkv_bias = false;  // Qwen2
  bool qk_norm = false;   // Qwen3
  // The serving config's decode_weight_images: the one-token layer may stream slot images.
  bool decode_weight_images = true;
  // The serving config's attention_split: positions per split of decode attention (256 or 512).
  int attention_split = 256;
  // The serving config's decode_qkv_flags: the one-token layer's QKV_FLAGS (an experiment).
  bool decode_qkv_flags = false;
  // Serving (docs/artifact.md, "serving").
  int max_batch = 0, max_seq_len = 0, kv_page_size = 0;
  std::vector<int> decode_buckets, prefill_buckets;  // ascending
  std::vector<std::string> targets;                  // "sm_90a"
};

}  // namespace telos::codegen
