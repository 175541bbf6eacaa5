#pragma once
// `telosc inspect`: reads an artifact's manifest.json and summarizes it for people; with verify,
// recomputes every checksum (each weight tensor, each file) and refuses on the first mismatch.
#include <string>

namespace telos::compiler {

// The summary, several lines. Throws telos::Error naming the file and field at fault.
std::string inspect_artifact(const std::string& path, bool verify);

}  // namespace telos::compiler
