#pragma once
// The executor's view of a compiled artifact (docs/artifact.md). Loading opens it through the
// artifact format's one validation (support/artifact_files.hpp, shared with telosc): manifest.json
// checked field by field against the bounds of support/artifact_limits.hpp, the checksum of every
// file and weight tensor and of the manifest's model, weights and graph sections verified, and
// weights.bin mapped read-only. Anything wrong is refused with one telos::Error whose message names
// the file and the field. Nothing here includes compiler/ headers: the two meet in support/'s
// artifact format.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "support/artifact_files.hpp"
#include "support/artifact_format.hpp"
#include "support/dtype.hpp"
#include "support/launch_args.hpp"
#include "support/mapped_file.hpp"

namespace telos::exec {

// The manifest's typed form, its validation and the launch arguments' parsers live in support/
// (artifact_format.hpp, launch_args.hpp), shared with telosc; these names keep the executor's.
using telos::ArenaSlot;
using telos::ArgKind;
using telos::ArtifactGraph;
using telos::DescriptorField;
using telos::GraphAttr;
using telos::GraphOp;
using telos::GraphValue;
using telos::kArtifactSchemaVersion;
using telos::KernelEntry;
using telos::KvCacheConfig;
using telos::LaunchArg;
using telos::LaunchPrograms;
using telos::ModelConfig;
using telos::ProgramBucket;
using telos::ProgramLaunch;
using telos::RopeConfig;
using telos::ServingConfig;
using telos::TensorMapArg;
using telos::WeightChecks;
using telos::WeightImageArg;

// One weight tensor, pointing into its mapped weight file.
struct WeightTensor {
  std::string name;
  std::string layout;  // row_major, or qkv_rope_pairs (layers.N.qkv: support/qkv_layout.hpp)
  DType dtype = DType::F32;
  std::vector<std::int64_t> shape;
  const std::uint8_t* data = nullptr;
  std::size_t bytes = 0;
  // An e4m3 tensor's scales (docs/artifact.md): w[r][c] = float(q[r][c]) * scale[r / block_rows *
  // scale_cols + c / block_cols]; null for every other dtype.
  const float* scale = nullptr;
  std::int64_t block_rows = 0, block_cols = 0, scale_cols = 0;
};

class Artifact {
 public:
  // Loads and verifies the artifact directory at `dir` (telos::open_artifact). Throws telos::Error
  // naming the file and field at fault: not an artifact, a newer schema_version, a missing,
  // malformed or out-of-bounds field, a missing file, a weights.bin of the wrong size, a checksum
  // mismatch, an inconsistent shape, an edited manifest. The checksums are computed on several
  // threads, the largest first.
  static std::shared_ptr<const Artifact> load(const std::string& dir,
                                              WeightChecks checks = WeightChecks::kEveryTensor);

  const std::string& dir() const { return dir_; }
  const ModelConfig& model() const { return model_; }
  const ServingConfig& serving() const { return serving_; }
  const KvCacheConfig& kv_cache() const { return kv_cache_; }
  // The manifest checksum: names the model, its weights and its graph (docs/artifact.md).
  const std::string& checksum() const { return checksum_; }
  // The tensor-parallel ranks (serving.tensor_parallel): each has its own weight file, the same
  // tensors of the same shapes, and runs the same graph on them.
  int ranks() const { return serving_.tensor_parallel; }
  // Rank `rank`'s tensors (the artifact's, for one rank).
  const std::vector<WeightTensor>& tensors(int rank = 0) const {
    return tensors_[static_cast<std::size_t>(rank)];
  }
  // The optimized IR the CPU reference engine runs (docs/artifact.md, "graph").
  const ArtifactGraph& graph() const { return graph_; }

  // Rank `rank`'s tensor called `name`; throws naming the tensor when the artifact has none.
  const WeightTensor& tensor(std::string_view name, int rank = 0) const;
  const WeightTensor* find_tensor(std::string_view name, int rank = 0) const;

  // True when codegen has filled the kernel table; the GPU engine needs it.
  bool has_kernels() const { return has_kernels_; }
  // With the kernels: the kernel table, the activation arena and the launch programs of the first
  // target's kernel set (serving.targets[0]).
  const LaunchPrograms& programs() const { return kernel_sets_.at(0); }
  // With the kernels: every kernel set, one a target of serving.targets, in its order.
  const std::vector<LaunchPrograms>& kernel_sets() const { return kernel_sets_; }
  // The kernel set that runs on a GPU of compute capability major.minor (sm_90a on 9.0, sm_100a on
  // 10.0). Throws telos::Error naming manifest.json, the device and the targets the artifact has
  // when it has no set for it.
  const LaunchPrograms& kernel_set(int major, int minor) const;

  // Refuses (telos::Error naming serving.targets) unless the artifact has a kernel set for the
  // device architecture `arch`, written like "sm_90a" or "sm_90" (kernel_set's rule: sm_90a runs
  // on 9.0, sm_100a on 10.0), or `arch` is not an architecture name.
  void check_target(const std::string& arch) const;

  // Drops the mapped weight file's pages holding bytes [offset, offset + length) of rank `rank`'s
  // `tensor` from this process's memory (whole pages only). Reading them again faults them back in
  // from the file, so this only costs time; the GPU engine calls it behind its upload so that host
  // memory stays small for a large model.
  void release_weight_pages(const WeightTensor& tensor, std::size_t offset, std::size_t length,
                            int rank = 0) const;

 private:
  Artifact() = default;
  std::string dir_;
  ModelConfig model_;
  ServingConfig serving_;
  KvCacheConfig kv_cache_;
  ArtifactGraph graph_;
  std::string checksum_;
  bool has_kernels_ = false;
  std::vector<LaunchPrograms> kernel_sets_;
  std::vector<MappedFile> weights_;                 // one a rank
  std::vector<std::vector<WeightTensor>> tensors_;  // one table a rank
};

}  // namespace telos::exec
