#pragma once
// The executor's view of a compiled artifact (docs/artifact.md, schema version 1). Loading reads
// manifest.json, checks it field by field, verifies the checksum of every file and every weight
// tensor, and maps weights.bin read-only. Anything wrong is refused with one telos::Error whose
// message names the file and the field. This is the only place the executor learns what the
// compiler wrote: nothing here includes compiler/ headers.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "support/dtype.hpp"
#include "support/mapped_file.hpp"

namespace telos::exec {

// The newest schema this reader understands; a larger manifest schema_version is refused.
inline constexpr int kArtifactSchemaVersion = 1;

struct RopeConfig {
  std::string type;  // "default" or "llama3"
  double theta = 10000.0;
  // llama3 scaling only (see transformers' _compute_llama3_parameters).
  double factor = 1.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int original_max_position_embeddings = 0;
};

struct ModelConfig {
  std::string name, architecture, family;
  int vocab_size = 0, hidden_size = 0, intermediate_size = 0;
  int num_layers = 0, num_heads = 0, num_kv_heads = 0, head_dim = 0;
  double rms_norm_eps = 0.0;
  int max_position_embeddings = 0;
  RopeConfig rope;
  bool tie_word_embeddings = false;
  bool qkv_bias = false;  // Qwen2
  bool qk_norm = false;   // Qwen3
  int bos_token_id = -1;
  std::vector<std::int32_t> eos_token_ids;
};

struct ServingConfig {
  int max_batch = 0, max_seq_len = 0, kv_page_size = 0;
  std::optional<int> kv_pool_pages;               // "kv_pool": {"pages": N}
  std::optional<double> kv_pool_memory_fraction;  // "kv_pool": {"memory_fraction": F}
  int prefill_chunk = 0;
  std::vector<int> decode_buckets, prefill_buckets;  // ascending
  std::vector<std::string> targets;                  // e.g. "sm_90a"
  int tensor_parallel = 1;
};

struct KvCacheConfig {
  std::string dtype;
  int page_size = 0, num_layers = 0, num_kv_heads = 0, head_dim = 0;
  std::int64_t bytes_per_page = 0;
  std::string layout;
};

// One weight tensor, pointing into the mapped weights.bin.
struct WeightTensor {
  std::string name;
  std::string layout;  // row_major, or qkv_rope_pairs (layers.N.qkv: support/qkv_layout.hpp)
  DType dtype = DType::F32;
  std::vector<std::int64_t> shape;
  const std::uint8_t* data = nullptr;
  std::size_t bytes = 0;
};

// A `tmap:TARGET:ROWS:COLS:BOX_ROWS:BOX_COLS` launch argument (docs/artifact.md, "Kernels"): a
// TMA tensor map over a row-major [ROWS, COLS] matrix at TARGET (`w:NAME` or `buf:NAME`), read
// and written in BOX_ROWS x BOX_COLS boxes with the 128-byte swizzle. A box row is one swizzle
// span, so BOX_COLS names the element type: 64 bf16 or 32 f32 (`elem_bytes` 2 or 4).
struct TensorMapArg {
  std::string target;
  std::int64_t rows = 0, cols = 0;
  int box_rows = 0, box_cols = 0;
  int elem_bytes = 0;
};

// Parses `arg` (which starts with "tmap:"); throws telos::Error naming `where` and what is wrong
// when it is malformed: a target that is not w:, buf: or kv:, a non-positive or non-numeric size,
// COLS not a multiple of 8 (TMA rows are multiples of 16 bytes), BOX_ROWS outside 1..256, BOX_COLS
// other than 64 (bf16) or 32 (f32), the two 128-byte swizzle spans.
TensorMapArg parse_tensor_map_arg(const std::string& arg, const std::string& where);

// A `wimg:NAME:BN:HALVES` launch argument (docs/artifact.md, "Kernels"): the slot image of weight
// NAME in tiles of BN rows, of one or two halves (support/slot_image.hpp); or a
// `timg:NAME:BN:HALVES:BOX` one: the tensor map over that image read in boxes of BOX rows.
struct WeightImageArg {
  std::string weight;
  int bn = 0, halves = 1;
  int box_rows = 0;  // timg: only
  // The image's own argument (`wimg:NAME:BN:HALVES`): the engine keeps one image per key.
  std::string key() const;
};

// Parses `arg` (which starts with "wimg:" or "timg:"); throws telos::Error naming `where` when it
// is not a name and two (timg: three) positive integers. What the weight allows is checked at load
// (Artifact::load).
WeightImageArg parse_weight_image_arg(const std::string& arg, const std::string& where);

// What Artifact::load hashes of weights.bin: every tensor (the bytes a model reads; the checksums
// a serving load needs), or every byte (the file's own checksum too, which the tensors' cover but
// for the alignment padding between them: `telos-run check`).
enum class WeightChecks { kEveryTensor, kEveryByte };

class Artifact {
 public:
  // Loads and verifies the artifact directory at `dir`. Throws telos::Error naming the file and
  // field at fault: a newer schema_version, a missing or malformed field, a missing file, a
  // weights.bin of the wrong size, a checksum mismatch, an inconsistent shape. The checksums are
  // computed on several threads, the largest first.
  static std::shared_ptr<const Artifact> load(const std::string& dir,
                                              WeightChecks checks = WeightChecks::kEveryTensor);

  const std::string& dir() const { return dir_; }
  const ModelConfig& model() const { return model_; }
  const ServingConfig& serving() const { return serving_; }
  const KvCacheConfig& kv_cache() const { return kv_cache_; }
  const nlohmann::json& manifest() const { return manifest_; }
  const std::vector<WeightTensor>& tensors() const { return tensors_; }

  // The tensor called `name`; throws naming the tensor when the artifact has none.
  const WeightTensor& tensor(std::string_view name) const;
  const WeightTensor* find_tensor(std::string_view name) const;

  // True when codegen has filled the kernel table (issue 4); the GPU engine needs it.
  bool has_kernels() const;

  // Refuses (telos::Error naming serving.targets) unless the artifact was compiled for the
  // device architecture `arch`, written like "sm_90a" or "sm_90". Arch-specific targets ("a")
  // run only on exactly that compute capability, so sm_90 and sm_90a match each other and
  // nothing else.
  void check_target(const std::string& arch) const;

  // Drops the mapped weights.bin pages holding bytes [offset, offset + length) of `tensor` from
  // this process's memory (whole pages only). Reading them again faults them back in from the
  // file, so this only costs time; the GPU engine calls it behind its upload so that host memory
  // stays small for a large model.
  void release_weight_pages(const WeightTensor& tensor, std::size_t offset,
                            std::size_t length) const;

 private:
  Artifact() = default;
  std::string dir_;
  nlohmann::json manifest_;
  ModelConfig model_;
  ServingConfig serving_;
  KvCacheConfig kv_cache_;
  MappedFile weights_;
  std::vector<WeightTensor> tensors_;
};

}  // namespace telos::exec
