#pragma once
// config.json's "quantization_config": the FP8 checkpoints of the Hugging Face hub, read into a
// WeightQuant (model_spec.hpp). Two formats are understood, each checked field by field:
//   - quant_method "fp8": E4M3 "M.weight" with f32 "M.weight_scale_inv" over 128x128 blocks,
//     weight_block_size [128, 128], activation_scheme "dynamic", modules_to_not_convert;
//   - quant_method "compressed-tensors", format "float-quantized": one config group targeting
//     "Linear", weights of 8-bit floats with strategy "channel" or "tensor" ("M.weight_scale"),
//     input activations dynamic or static (their scales are not used: decode keeps activations
//     bf16), and the ignore list.
// Anything else (another method, block size, strategy or activation scheme) is refused naming the
// field.
#include "compiler/import/json_fields.hpp"
#include "compiler/import/model_spec.hpp"

namespace telos::compiler {

// The weights' format from `config` (the whole config.json): kNone without a quantization_config.
WeightQuant read_quantization_config(const JsonObject& config);

}  // namespace telos::compiler
