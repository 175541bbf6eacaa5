#pragma once
// The kernel table and launch programs of a manifest (docs/artifact.md, "Kernels"), validated as
// the GPU engine reads them: every size within the CUDA limits and artifact_limits.hpp, every
// kernel index, tensor map and slot image within what the artifact holds. Part of
// validate_manifest (artifact_format.hpp).
#include <nlohmann/json.hpp>

#include "support/artifact_format.hpp"
#include "support/manifest_fields.hpp"

namespace telos {

// Throws telos::Error naming the first field at fault. `artifact` holds the configuration and
// weight table, already validated.
void validate_programs(const ManifestFields& f, const nlohmann::json& kernels,
                       const nlohmann::json& programs, const ArtifactManifest& artifact);

}  // namespace telos
