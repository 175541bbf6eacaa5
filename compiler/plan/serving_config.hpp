#pragma once
// The serving configuration an artifact is compiled for: how many sequences a step may batch, how
// long they may grow, how the paged KV cache is carved, and which bucket shapes get a captured
// CUDA graph. Resolved once at compile time (every field filled in); docs/artifact.md's serving
// section documents each field and its default.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "compiler/import/model_spec.hpp"
#include "support/dtype.hpp"

namespace telos::compiler {

struct ServingConfig {
  std::int64_t max_batch = 0;
  std::int64_t max_seq_len = 0;
  std::int64_t kv_page_size = 0;
  std::optional<std::int64_t> kv_pool_pages;  // exactly one of these two is set
  std::optional<double> kv_pool_memory_fraction;
  std::int64_t prefill_chunk = 0;
  std::vector<std::int64_t> decode_buckets;
  std::vector<std::int64_t> prefill_buckets;
  std::vector<std::string> targets;
  std::int64_t tensor_parallel = 1;
  // The one-token decode layer streams its weights from slot images where that is faster (the
  // 8B-like shapes: docs/artifact.md `wimg:`), at the cost of a second copy of those weights on the
  // device; false keeps one copy (tensor maps).
  bool decode_weight_images = true;
  // Positions per attention split (docs/artifact.md): 256 suits few rows (more items a token to
  // fill the GPU), 512 long contexts at many rows (half the items and partials a token).
  std::int64_t attention_split = 256;
  // "quantize": "none" (the default), "fp8" or "fp8-channel" (model_spec.hpp, Quantize): what the
  // compiler does to a bf16 checkpoint's linear weights. Not written to the manifest, whose
  // weight table states each weight's dtype and scales.
  Quantize quantize = Quantize::kNone;
  // "quantize_lm_head": whether quantize takes the LM head too (false, the default, keeps it as
  // the checkpoint has it: its error moves every logit). A tied model's quantized LM head is an
  // e4m3 copy of the embedding. Not in the manifest: its weight table states the LM head's dtype.
  bool quantize_lm_head = false;
  // "kv_dtype": the KV cache's element type, BF16 ("bf16", the default) or E4M3 ("fp8_e4m3", one
  // byte an element with an f32 scale a layer for K and one for V: docs/fp8.md). Written to the
  // manifest as kv_cache.dtype, not in "serving".
  DType kv_dtype = DType::BF16;
  // "fp8_activations": what the linears on e4m3 weights of 128 x 128 scale blocks multiply, E4M3
  // ("e4m3", the default: W8A8, their inputs quantized per token and 128 columns; docs/fp8.md) or
  // BF16 ("bf16": weight-only FP8, as the per-channel formats always run). Other FP8 weights run
  // weight-only either way. Not in the manifest: the IR's linears carry it (`activations`).
  DType fp8_activations = DType::E4M3;
};

// The serving config's spellings of fp8_activations, for messages.
inline constexpr const char* kFp8ActivationChoices = "\"e4m3\" or \"bf16\"";

// The serving config's spellings of kv_dtype, for messages.
inline constexpr const char* kKvDtypeChoices = "\"bf16\" or \"fp8_e4m3\"";

// The --target spelling of an artifact without GPU kernels, which the CPU reference engine runs
// (serving.targets ["cpu"]); it is a target list of its own.
inline constexpr const char* kCpuTarget = "cpu";
// Whether `config` asks for GPU kernels (any target but "cpu").
inline bool has_gpu_targets(const ServingConfig& config) {
  return !(config.targets.size() == 1 && config.targets[0] == kCpuTarget);
}

// GPU architectures codegen can target.
inline const std::vector<std::string> kSupportedTargets = {"sm_90a", "sm_100a"};

// Resolves a "serving" JSON object (null means all defaults) against the model. `where` names the
// file the object came from; errors read "WHERE: serving.FIELD: what was expected".
ServingConfig resolve_serving(const nlohmann::json& serving, const ModelSpec& spec,
                              const std::string& where);

// Parses a comma-separated --target list ("sm_90a,sm_100a", or "cpu" alone) into the targets
// field.
std::vector<std::string> parse_target_list(const std::string& list);

// The resolved form written to manifest.json "serving".
nlohmann::ordered_json serving_to_json(const ServingConfig& config);

}  // namespace telos::compiler
