#include "executor/artifact.hpp"

#include "support/error.hpp"

namespace telos::exec {

std::shared_ptr<const Artifact> Artifact::load(const std::string& dir, WeightChecks checks) {
  OpenedArtifact opened = open_artifact(dir, checks);
  std::shared_ptr<Artifact> a(new Artifact());
  a->dir_ = dir;
  a->model_ = opened.manifest.model;
  a->serving_ = opened.manifest.serving;
  a->kv_cache_ = opened.manifest.kv_cache;
  a->graph_ = std::move(opened.manifest.graph);
  a->checksum_ = opened.manifest.checksum;
  a->has_kernels_ = opened.manifest.has_kernels;
  a->kernel_sets_ = std::move(opened.manifest.kernel_sets);
  a->weights_ = std::move(opened.weights);
  for (std::size_t r = 0; r < opened.manifest.weights.size(); ++r) {
    std::vector<WeightTensor>& tensors = a->tensors_.emplace_back();
    const std::vector<WeightEntry>& entries = opened.manifest.weights[r].tensors;
    for (const WeightEntry& e : entries) {
      WeightTensor& t = tensors.emplace_back(WeightTensor{e.name, e.layout, e.dtype, e.shape,
                                                          a->weights_[r].data() + e.offset,
                                                          static_cast<std::size_t>(e.bytes)});
      if (!e.scale) continue;
      // The manifest's check made the scale tensor f32 of the shape the blocks give; the weight
      // file aligns it, so its floats are read in place.
      for (const WeightEntry& s : entries)
        if (s.name == e.scale->tensor) {
          t.scale = reinterpret_cast<const float*>(a->weights_[r].data() + s.offset);
          t.scale_cols = s.shape[1];
        }
      t.block_rows = e.scale->block_rows;
      t.block_cols = e.scale->block_cols;
    }
  }
  return a;
}

const WeightTensor* Artifact::find_tensor(std::string_view name, int rank) const {
  for (const WeightTensor& t : tensors(rank))
    if (t.name == name) return &t;
  return nullptr;
}

const WeightTensor& Artifact::tensor(std::string_view name, int rank) const {
  if (const WeightTensor* t = find_tensor(name, rank)) return *t;
  fail(dir_ + "/manifest.json: weights.tensors: no tensor \"" + std::string(name) + "\"");
}

void Artifact::check_target(const std::string& arch) const {
  // "sm_NM", "sm_NMa" or "sm_NMf": compute capability N.M (N may have two digits).
  std::string digits = arch.rfind("sm_", 0) == 0 ? arch.substr(3) : "";
  if (!digits.empty() && (digits.back() == 'a' || digits.back() == 'f')) digits.pop_back();
  if (digits.size() < 2 || digits.size() > 3 ||
      digits.find_first_not_of("0123456789") != std::string::npos)
    fail("architecture \"" + arch + "\": expected sm_ and a compute capability, such as sm_90a");
  const int cc = std::stoi(digits);
  kernel_set_for_device(cc / 10, cc % 10, serving_.targets, dir_ + "/manifest.json");
}

const LaunchPrograms& Artifact::kernel_set(int major, int minor) const {
  if (!has_kernels_) fail(dir_ + "/manifest.json: kernels is empty: the GPU engine needs kernels");
  return kernel_sets_[kernel_set_for_device(major, minor, serving_.targets,
                                            dir_ + "/manifest.json")];
}

void Artifact::release_weight_pages(const WeightTensor& tensor, std::size_t offset,
                                    std::size_t length, int rank) const {
  const MappedFile& file = weights_[static_cast<std::size_t>(rank)];
  file.release(static_cast<std::size_t>(tensor.data - file.data()) + offset, length);
}

}  // namespace telos::exec
