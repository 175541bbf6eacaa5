#include "support/artifact_files.hpp"

#include <filesystem>
#include <vector>

#include "support/checksum.hpp"
#include "support/error.hpp"

namespace telos {
namespace fs = std::filesystem;

namespace {

// Every listed file present as a regular file, and each weight file of the size the manifest
// states (before any checksum, so that a truncated file gets the message that says so).
void check_files_present(const fs::path& root, const ArtifactManifest& m) {
  std::error_code ec;
  for (const auto& [name, sum] : m.files)
    if (!fs::is_regular_file(root / name, ec))
      fail((root / name).string() + ": missing (manifest.json files." + name + " lists it)");
  for (const WeightFile& w : m.weights) {
    const fs::path weights = root / w.file;
    const auto size = static_cast<std::int64_t>(fs::file_size(weights, ec));
    if (ec) fail(weights.string() + ": cannot read its size: " + ec.message());
    if (size != w.size)
      fail(weights.string() + ": " + std::to_string(size) + " bytes, but manifest.json " + w.field +
           ".size says " + std::to_string(w.size) +
           (size < w.size ? " (truncated)" : " (not the file this manifest describes)"));
  }
}

}  // namespace

OpenedArtifact open_artifact(const std::string& dir, WeightChecks checks) {
  const fs::path root(dir);
  std::error_code ec;
  if (!fs::is_directory(root, ec)) fail(dir + ": not an artifact directory (expected NAME.telos/)");
  const std::string manifest_path = (root / "manifest.json").string();
  OpenedArtifact a;
  a.json = read_manifest_file(dir);
  a.manifest = validate_manifest(a.json, manifest_path);
  const ArtifactManifest& m = a.manifest;
  check_files_present(root, m);

  // The checksums, all computed together (xxh64_ranges): the files first, then the tensors. A
  // weight file's own checksum only with kEveryByte: its tensors' checksums cover every byte a
  // model reads.
  a.weights.reserve(m.weights.size());  // the ranges point at them
  for (const WeightFile& w : m.weights) a.weights.emplace_back((root / w.file).string());
  const auto weight_file = [&](const std::string& name) -> const MappedFile* {
    for (std::size_t r = 0; r < m.weights.size(); ++r)
      if (m.weights[r].file == name) return &a.weights[r];
    return nullptr;
  };
  std::vector<MappedFile> other_files;
  other_files.reserve(m.files.size());  // the ranges point at them
  std::vector<ChecksumRange> ranges;
  std::vector<const std::pair<std::string, std::string>*> checked_files;
  for (const auto& file : m.files) {
    const MappedFile* weights = weight_file(file.first);
    if (weights && checks == WeightChecks::kEveryTensor) continue;
    checked_files.push_back(&file);
    const MappedFile* mapped =
        weights ? weights : &other_files.emplace_back((root / file.first).string());
    ranges.push_back({mapped, 0, mapped->size()});
  }
  for (std::size_t r = 0; r < m.weights.size(); ++r)
    for (const WeightEntry& t : m.weights[r].tensors)
      ranges.push_back(
          {&a.weights[r], static_cast<std::size_t>(t.offset), static_cast<std::size_t>(t.bytes)});
  xxh64_ranges(ranges);

  for (std::size_t i = 0; i < checked_files.size(); ++i) {
    const auto& [name, want] = *checked_files[i];
    const std::string got = checksum_string(ranges[i].digest);
    if (got != want)
      fail((root / name).string() + ": checksum " + got + " does not match manifest.json files." +
           name + " " + want + " (the file is corrupt or was changed)");
  }
  std::size_t next = checked_files.size();
  for (const WeightFile& w : m.weights)
    for (std::size_t i = 0; i < w.tensors.size(); ++i) {
      const WeightEntry& t = w.tensors[i];
      const std::string got = checksum_string(ranges[next++].digest);
      if (got != t.checksum)
        fail((root / w.file).string() + ": tensor " + t.name + " (offset " +
             std::to_string(t.offset) + ", " + std::to_string(t.bytes) + " bytes): checksum " +
             got + " does not match " + manifest_path + " " + w.field + ".tensors[" +
             std::to_string(i) + "] (" + t.name + ").checksum " + t.checksum);
    }
  return a;
}

}  // namespace telos
