#pragma once
// Typed reads of manifest fields by dotted path ("model.vocab_size"), each refusal naming the
// manifest file and the field: the reader under artifact_format.cpp's validation.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "support/error.hpp"

namespace telos {

class ManifestFields {
 public:
  using json = nlohmann::json;
  explicit ManifestFields(std::string file) : file_(std::move(file)) {}
  const std::string& file() const { return file_; }

  [[noreturn]] void refuse(const std::string& field, const std::string& what) const {
    fail(file_ + ": " + field + ": " + what);
  }

  const json& member(const json& obj, const std::string& path, const char* key) const {
    auto it = obj.find(key);
    if (it == obj.end()) refuse(join(path, key), "missing");
    return *it;
  }
  const json& object(const json& obj, const std::string& path, const char* key) const {
    const json& v = member(obj, path, key);
    if (!v.is_object()) refuse(join(path, key), "expected an object");
    return v;
  }
  const json& array(const json& obj, const std::string& path, const char* key) const {
    const json& v = member(obj, path, key);
    if (!v.is_array()) refuse(join(path, key), "expected an array");
    return v;
  }
  // An integer from `min_value` to `max_value`.
  std::int64_t integer(const json& obj, const std::string& path, const char* key,
                       std::int64_t min_value, std::int64_t max_value) const {
    return integer_value(member(obj, path, key), join(path, key), min_value, max_value);
  }
  std::int64_t integer_value(const json& v, const std::string& field, std::int64_t min_value,
                             std::int64_t max_value) const {
    const std::string range = "expected an integer from " + std::to_string(min_value) + " to " +
                              std::to_string(max_value);
    if (v.is_number_unsigned() && v.get<std::uint64_t>() > static_cast<std::uint64_t>(max_value))
      refuse(field, v.dump() + " is above " + std::to_string(max_value) + " (" + range + ")");
    if (!v.is_number_integer()) refuse(field, range + ", found " + v.dump());
    const std::int64_t x = v.get<std::int64_t>();
    if (x < min_value)
      refuse(field,
             std::to_string(x) + " is below " + std::to_string(min_value) + " (" + range + ")");
    if (x > max_value)
      refuse(field,
             std::to_string(x) + " is above " + std::to_string(max_value) + " (" + range + ")");
    return x;
  }
  int small_integer(const json& obj, const std::string& path, const char* key, int min_value,
                    std::int64_t max_value) const {
    return static_cast<int>(integer(obj, path, key, min_value, max_value));
  }
  // A positive number (JSON numbers are finite).
  double positive_number(const json& obj, const std::string& path, const char* key) const {
    const json& v = member(obj, path, key);
    if (!v.is_number() || !(v.get<double>() > 0))
      refuse(join(path, key), "expected a positive number, found " + v.dump());
    return v.get<double>();
  }
  std::string string(const json& obj, const std::string& path, const char* key) const {
    const json& v = member(obj, path, key);
    if (!v.is_string()) refuse(join(path, key), "expected a string");
    return v.get<std::string>();
  }
  bool boolean(const json& obj, const std::string& path, const char* key) const {
    const json& v = member(obj, path, key);
    if (!v.is_boolean()) refuse(join(path, key), "expected true or false");
    return v.get<bool>();
  }

  static std::string join(const std::string& path, const char* key) {
    return path.empty() ? std::string(key) : path + "." + key;
  }

 private:
  std::string file_;
};

}  // namespace telos
