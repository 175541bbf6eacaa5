#pragma once
// What the importer learns from a Hugging Face config.json: the architecture's hyperparameters in
// Telos's own terms, each validated when the spec is built (spec_from_config, checkpoint.hpp).
#include <cstdint>
#include <string>
#include <vector>

namespace telos::compiler {

struct RopeSpec {
  std::string type = "default";  // "default" or "llama3"
  double theta = 10000.0;
  // llama3 scaling only:
  double factor = 1.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  std::int64_t original_max_position_embeddings = 0;
};

struct ModelSpec {
  std::string name;          // model.json "name", else the checkpoint directory's name
  std::string architecture;  // e.g. "LlamaForCausalLM"
  std::string family;        // "llama" | "qwen2" | "qwen3" | "mistral"
  std::int64_t vocab_size = 0;
  std::int64_t hidden_size = 0;
  std::int64_t intermediate_size = 0;
  std::int64_t num_layers = 0;
  std::int64_t num_heads = 0;
  std::int64_t num_kv_heads = 0;
  std::int64_t head_dim = 0;
  double rms_norm_eps = 1e-6;
  std::int64_t max_position_embeddings = 0;
  RopeSpec rope;
  bool tie_word_embeddings = false;
  bool qkv_bias = false;  // Qwen2
  bool qk_norm = false;   // Qwen3
  std::int64_t bos_token_id = -1;
  std::vector<std::int64_t> eos_token_ids;
};

}  // namespace telos::compiler
