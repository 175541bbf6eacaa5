#pragma once
// A Hugging Face checkpoint opened for reading: config, and safetensors tensors (single file or
// sharded with model.safetensors.index.json) mapped read-only. Tensor data is never copied here.
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <vector>

#include "compiler/import/model_spec.hpp"
#include "support/dtype.hpp"
#include "support/format_shape.hpp"
#include "support/mapped_file.hpp"

namespace telos::compiler {

struct TensorView {
  std::string name;          // the checkpoint's name, e.g. "model.layers.0.self_attn.q_proj.weight"
  DType dtype = DType::F32;  // BF16, F16, F32 or E4M3 (others are refused when the file is read)
  std::vector<std::int64_t> shape;
  const std::uint8_t* data = nullptr;
  std::size_t bytes = 0;
  const MappedFile* file = nullptr;  // which shard holds it (for messages and madvise)
};

// The result of reading a MODEL argument: a Telos model.json, an HF config.json, or a checkpoint
// directory. With weights == false only config.json is read (planning configs without weights).
struct ImportedModel {
  std::string source;          // the path the user gave
  std::string checkpoint_dir;  // directory holding config.json (and the safetensors)
  ModelSpec spec;
  nlohmann::json serving;  // model.json "serving" section, or null
  bool has_weights = false;
  std::vector<std::unique_ptr<MappedFile>> shards;
  std::map<std::string, TensorView> tensors;  // by checkpoint name
  // Tensors the importer made rather than mapped (--quantize's, per-tensor scales widened to one a
  // row): the views of `tensors` point into these.
  std::vector<std::vector<std::uint8_t>> made;

  const TensorView* find(const std::string& name) const {
    auto it = tensors.find(name);
    return it == tensors.end() ? nullptr : &it->second;
  }
};

struct ImportOptions {
  bool weights = true;  // false: --no-weights planning mode, no safetensors are opened
};

// Reads and validates everything: config fields, and (with weights) every tensor the architecture
// needs for presence, dtype and shape. Throws telos::Error naming the file and field.
ImportedModel import_model(const std::string& path, const ImportOptions& options = {});

// Parses one safetensors file's header into views over `file` (exposed for tests and the fuzzer).
std::vector<TensorView> parse_safetensors(const MappedFile& file);
// The same over bytes in memory (the fuzzer's entry point); `where` names them in messages and
// the views' `file` is null.
std::vector<TensorView> parse_safetensors(std::span<const std::uint8_t> bytes,
                                          const std::string& where);

// Quantizes every linear weight of `model`, and the LM head where `lm_head` says (embeddings are
// not linear layers), to E4M3 with f32 scales, as `how` says, leaving the model exactly as an
// imported FP8 checkpoint of that format would be: the spec's WeightQuant set, "M.weight" E4M3
// beside its scale tensor. A tied model's quantized LM head is a quantized copy of the embedding
// (the spec then unties them; the embedding, a gather, keeps its bytes). Each scale is amax / 448
// over its block (a block of zeros gets 1), each element rounded to nearest even. Refuses (naming
// `where`) a checkpoint that is quantized already. Without weights only the spec changes.
void quantize_weights(ImportedModel& model, Quantize how, bool lm_head, const std::string& where);

// A tensor the architecture needs, by its checkpoint name, with the shape it must have, and what
// it holds: a floating-point tensor (bf16, f16 or f32), a quantized weight (E4M3) or the f32 or
// bf16 scales of one.
struct RequiredTensor {
  enum class Kind { kFloat, kE4M3, kScale };
  std::string name;
  std::vector<std::int64_t> shape;
  Kind kind = Kind::kFloat;
  std::string module = {};  // the module a weight or scale belongs to ("lm_head"), for messages
};
// Every tensor `spec` needs, in forward-pass order: embedding, each layer's tensors, final norm,
// and lm_head unless the embeddings are tied; each quantized weight followed by its scales.
std::vector<RequiredTensor> required_tensors(const ModelSpec& spec);

// Builds a ModelSpec from a parsed config.json (exposed for tests and the fuzzer). `where` names
// the file in messages.
ModelSpec spec_from_config(const nlohmann::json& config, const std::string& where);

}  // namespace telos::compiler
