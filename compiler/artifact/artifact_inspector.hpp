#pragma once
// `telosc inspect`: reads an artifact's manifest.json, validates it as telos-run does
// (support/artifact_format.hpp) and summarizes it for people; with verify, opens the artifact as
// `telos-run check` does (support/artifact_files.hpp: every file, weights.bin's size, every
// checksum) and refuses what it refuses, with the same messages.
#include <string>

namespace telos::compiler {

// The summary, several lines. Throws telos::Error naming the file and field at fault.
std::string inspect_artifact(const std::string& path, bool verify);

}  // namespace telos::compiler
