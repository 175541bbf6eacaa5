#pragma once
// An artifact directory opened and verified as a whole: its manifest validated
// (artifact_format.hpp), every file it lists present, each weight file (weights.bin, or one a
// tensor-parallel rank) of the size it states, and the checksums of the tensors and files matching.
// The executor's loader and `telosc inspect --verify` both open artifacts here, so they refuse the
// same artifacts with the same messages.
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "support/artifact_format.hpp"
#include "support/mapped_file.hpp"

namespace telos {

// What open_artifact hashes of the weight files: every tensor (the bytes a model reads; the
// checksums a serving load needs), or every byte (the file's own checksum too, which the tensors'
// cover but for the alignment padding between them: `telos-run check`, `telosc inspect --verify`).
enum class WeightChecks { kEveryTensor, kEveryByte };

struct OpenedArtifact {
  nlohmann::json json;              // manifest.json as parsed
  ArtifactManifest manifest;        // and as validated
  std::vector<MappedFile> weights;  // each of manifest.weights, mapped read-only
};

// Throws telos::Error naming the file and field at fault. The checksums are computed on several
// threads, the largest first, and reported in manifest order: the files, then the tensors.
OpenedArtifact open_artifact(const std::string& dir, WeightChecks checks);

}  // namespace telos
