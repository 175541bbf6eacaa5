#pragma once
// RoPE inverse frequencies, computed on the host and baked into the generated source.
#include <string>
#include <vector>

namespace telos::codegen {

// The RoPE attributes of the IR's rope_kv_append epilogue (docs/artifact.md, "model.rope").
struct RopeInput {
  std::string type = "default";  // "default" or "llama3"
  double theta = 10000.0;
  double factor = 1.0, low_freq_factor = 1.0, high_freq_factor = 4.0;  // llama3 only
  int original_max_position_embeddings = 0;                            // llama3 only
};

// inv_freq[i] = theta^(-2i/D) for i < D/2, with llama3's frequency-dependent scaling when
// rope.type is "llama3" (transformers' _compute_llama3_parameters), rounded to f32.
std::vector<float> rope_inv_freq(const RopeInput& rope, int head_dim);

}  // namespace telos::codegen
