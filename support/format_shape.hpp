#pragma once
// "[V, H]": how every message prints a tensor's shape.
#include <cstdint>
#include <string>
#include <vector>

namespace telos {

inline std::string format_shape(const std::vector<std::int64_t>& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

}  // namespace telos
