#pragma once
// What the importer learns from a Hugging Face config.json: the architecture's hyperparameters in
// Telos's own terms, each validated when the spec is built (spec_from_config, checkpoint.hpp).
#include <cstdint>
#include <string>
#include <string_view>
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

// How the checkpoint stores its linear layers' weights: as they are (bf16, f16 or f32), or as E4M3
// with f32 scales that multiply, w = float(q) * scale, over blocks of the weight: 128x128 blocks
// (the hub's "fp8" format, and telosc --quantize fp8), or one scale a row (an output channel).
// Read from config.json's "quantization_config" (quantization_config.cpp) or set by --quantize.
struct WeightQuant {
  enum class Scheme { kNone, kBlock, kChannel };
  Scheme scheme = Scheme::kNone;
  std::string method;           // "fp8", "compressed-tensors" or "telosc --quantize": for messages
  std::string scale_suffix;     // the scale tensor beside "M.weight": "weight_scale_inv" or
                                // "weight_scale"
  std::int64_t block_size = 0;  // kBlock: the block's rows and columns (128)
  // compressed-tensors' "tensor" strategy: one scale a weight, which the importer widens to one a
  // row (the same numbers), so the rest of telosc sees kChannel.
  bool per_tensor = false;
  // Modules left unquantized: names matched whole, as substrings ("fp8"'s modules_to_not_convert,
  // as transformers matches them), or as "re:" regular expressions matched whole
  // (compressed-tensors' ignore).
  std::vector<std::string> not_converted;
  bool match_substrings = false;

  // Whether the weight of `module` ("model.layers.0.mlp.down_proj", "lm_head") is E4M3.
  bool quantizes(const std::string& module) const;
  // The scale tensor of `module`'s weight: "MODULE.weight_scale_inv" or "MODULE.weight_scale".
  std::string scale_name(const std::string& module) const { return module + "." + scale_suffix; }
  // The scale block's rows and columns for a weight of `cols` columns: kBlock's square block, or
  // one row of every column (kChannel).
  std::int64_t block_rows() const { return scheme == Scheme::kBlock ? block_size : 1; }
  std::int64_t block_cols(std::int64_t cols) const {
    return scheme == Scheme::kBlock ? block_size : cols;
  }
};

// What telosc --quantize (and the serving config's "quantize") asks of a bf16, f16 or f32
// checkpoint (quantize_weights, checkpoint.hpp).
enum class Quantize {
  kNone,        // "none": the weights as the checkpoint has them
  kFp8Block,    // "fp8": E4M3 with one f32 scale a 128x128 block, the hub's "fp8" format
  kFp8Channel,  // "fp8-channel": E4M3 with one f32 scale a row (output channel)
};
// Parses "none", "fp8" or "fp8-channel"; false for anything else.
bool parse_quantize(std::string_view text, Quantize* out);
// The spellings parse_quantize accepts, for messages.
inline constexpr const char* kQuantizeChoices = "\"none\", \"fp8\" or \"fp8-channel\"";

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
  WeightQuant quant;
};

}  // namespace telos::compiler
