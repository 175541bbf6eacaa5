#pragma once
// The artifact's manifest (docs/artifact.md) as every tool reads it: typed, and validated field by
// field, against each other and against the bounds of artifact_limits.hpp. One routine serves the
// executor's loader (executor/artifact.cpp), `telosc inspect` and the artifact writer, which
// validates what it is about to write: whatever telosc writes, telos-run reads, and what telos-run
// refuses, `telosc inspect --verify` refuses too. The compiler and the executor meet here and in
// nothing else. Reading the files an artifact lists is artifact_files.hpp's.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "support/artifact_graph.hpp"
#include "support/artifact_programs.hpp"
#include "support/dtype.hpp"
#include "support/format_shape.hpp"
#include "support/tensor_parallel.hpp"

namespace telos {

// The newest schema this build reads and the one it writes; a larger manifest schema_version is
// refused.
inline constexpr int kArtifactSchemaVersion = 1;
// manifest.json's "format": what marks a directory as a Telos artifact (telosc replaces only such
// a directory, and only when it holds nothing the manifest does not list).
inline constexpr std::string_view kArtifactFormat = "telos-artifact";

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
  int bos_token_id = -1;  // -1: the checkpoint has none (null in the manifest)
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

// One rank's share of the model at serving.tensor_parallel ranks (support/tensor_parallel.hpp).
inline RankShape rank_shape_of(const ModelConfig& m, const ServingConfig& s) {
  return rank_shape(s.tensor_parallel, m.num_heads, m.num_kv_heads, m.intermediate_size);
}

// The KV pages a sequence of max_seq_len positions needs: a page table's row in the step
// descriptor and in the kernels that read it.
inline int max_pages_per_sequence(const ServingConfig& s) {
  return (s.max_seq_len + s.kv_page_size - 1) / s.kv_page_size;
}

struct KvCacheConfig {
  DType dtype = DType::BF16;  // BF16, or E4M3 with the scales below (docs/fp8.md)
  int page_size = 0, num_layers = 0, num_kv_heads = 0, head_dim = 0;
  std::int64_t bytes_per_page = 0;
  std::string layout;
  // E4M3 only: layer l's K element is float(q) * k_scales[l], its V element float(q) * v_scales[l].
  std::vector<float> k_scales, v_scales;
};

// The part of a whole tensor a tensor-parallel rank holds (docs/artifact.md, "weights"): rows
// (dim 0) or columns (dim 1) of the whole, which is `whole` long along dim, the ranges in order.
struct WeightSplit {
  int dim = 0;
  std::int64_t whole = 0;
  std::vector<ShardRange> ranges;

  bool operator==(const WeightSplit&) const = default;
  std::string str() const;  // "rows 0:64, 128:160 of 256"
};

// An e4m3 weight's scales (docs/artifact.md, "weights"): the f32 tensor `tensor` of the same
// file, [ceil(rows / block_rows), ceil(cols / block_cols)], with
// w[r][c] = float(q[r][c]) * scale[r / block_rows][c / block_cols].
struct WeightScale {
  std::string tensor;
  std::int64_t block_rows = 0, block_cols = 0;
};

// One entry of the weight table, as the manifest states it.
struct WeightEntry {
  std::string name;
  std::string layout;  // row_major, or qkv_rope_pairs (layers.N.qkv: support/qkv_layout.hpp)
  DType dtype = DType::F32;
  std::vector<std::int64_t> shape;
  std::int64_t offset = 0, bytes = 0;
  std::string checksum;              // "xxh64:..."
  std::optional<WeightSplit> split;  // a tensor-parallel rank's part of a split tensor
  std::optional<WeightScale> scale;  // exactly for e4m3 tensors
};

// A weight file and its tensors: the artifact's one, or one a tensor-parallel rank, each rank's
// the same tensors of the same shapes.
struct WeightFile {
  std::string file;  // a file of the artifact, listed in `files`
  std::int64_t size = 0;
  std::vector<WeightEntry> tensors;  // manifest order
  std::string field;                 // where the manifest states it: "weights", "weights.ranks[1]"
};

// The model, serving and kv_cache sections: what a model and its serving configuration are.
struct ArtifactConfig {
  ModelConfig model;
  ServingConfig serving;
  KvCacheConfig kv_cache;
};

struct ArtifactManifest : ArtifactConfig {
  int schema_version = 0;
  std::string checksum;             // manifest_checksum: names the model, its weights and its graph
  std::vector<WeightFile> weights;  // one a rank (serving.tensor_parallel), in rank order
  ArtifactGraph graph;              // the optimized IR (artifact_graph.hpp)
  std::vector<std::pair<std::string, std::string>> files;  // name, checksum: manifest order
  bool has_kernels = false;  // codegen filled "kernels" (the GPU engine needs them)
  // With the kernels: one set (the arena and the launch programs) a target of serving.targets, in
  // its order (artifact_programs.hpp, read_kernel_sets).
  std::vector<LaunchPrograms> kernel_sets;
};

// Validates the model, serving and kv_cache sections of `manifest` (an object holding at least
// those three). Throws telos::Error "FILE: FIELD: what was expected" naming the first field at
// fault; `file` names the manifest in messages.
ArtifactConfig validate_config_sections(const nlohmann::json& manifest, const std::string& file);

// Validates a whole manifest: format and schema version first (a newer schema may mean anything
// below, so nothing else is read), then the configuration, the weight table against the model,
// the graph against the weight table, the file list, the kernel table and launch programs, and
// last the manifest checksum (what is valid but was edited). Reads no other file.
ArtifactManifest validate_manifest(const nlohmann::json& manifest, const std::string& file);

// The manifest checksum ("manifest_checksum"): XXH64 of the graph, model and weights sections,
// written as the compact JSON of {"graph": ..., "model": ..., "weights": ...} with keys sorted
// (docs/artifact.md). It catches an edited numeric field (eps, RoPE theta, token ids), tensors
// swapped in the table and an edited graph, which the files' and tensors' own checksums do not.
std::string manifest_checksum(const nlohmann::json& manifest);

// Parses manifest text; refuses (naming `file`) malformed JSON and a document nested deeper than
// limits::kMaxManifestDepth, while it is parsed.
nlohmann::json parse_manifest_text(std::string_view text, const std::string& file);

// Reads and parses DIR/manifest.json: a regular file of at most limits::kMaxManifestBytes.
nlohmann::json read_manifest_file(const std::string& dir);

// The tensors docs/artifact.md's weight table gives a model of this configuration, in order, each
// of a rank's shape.
struct ExpectedTensor {
  std::string name;
  std::vector<std::int64_t> shape;
  bool matrix;  // matrices may be bf16, f16, f32 or e4m3 (with scales); vectors are f32
  // Tensor parallelism: each rank's part of a split tensor, in rank order; empty where every rank
  // holds the whole tensor (and for one rank).
  std::vector<WeightSplit> ranks = {};
};
std::vector<ExpectedTensor> expected_tensors(const ModelConfig& model,
                                             const ServingConfig& serving);

}  // namespace telos
