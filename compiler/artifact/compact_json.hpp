#pragma once
// JSON printed for people as well as programs: nested objects indented one key per line, but
// scalar arrays and small flat objects on one line ("shape": [512, 128]; one arena buffer per
// line), so manifest.json and --emit=plan stay readable and greppable by FileCheck tests.
#include <nlohmann/json.hpp>
#include <string>

namespace telos::compiler {

std::string compact_json(const nlohmann::ordered_json& value);

}  // namespace telos::compiler
