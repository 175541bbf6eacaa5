#pragma once
// RoPE inverse frequencies, computed on the host and baked into the generated source.
#include <vector>

#include "codegen/codegen_input.hpp"

namespace telos::codegen {

// inv_freq[i] = theta^(-2i/D) for i < D/2, with llama3's frequency-dependent scaling when
// rope.type is "llama3" (transformers' _compute_llama3_parameters), rounded to f32.
std::vector<float> rope_inv_freq(const RopeInput& rope, int head_dim);

}  // namespace telos::codegen
