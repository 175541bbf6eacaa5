#pragma once
// Typed reads of the fields of one JSON object (config.json, model.json, a safetensors header,
// the shard index), each failing with a one-line telos::Error that names the file, the field's
// dotted path and what was expected versus found. The importer never lets a nlohmann exception
// or a silently wrapped integer through: every value is checked for type and range here.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace telos::compiler {

// "string", "integer", "number", "boolean", "array", "object" or "null".
std::string json_kind(const nlohmann::json& value);

// A string in double quotes with JSON escapes, so a name with quotes or control characters still
// prints on one line.
std::string json_quote(std::string_view text);

// Parses a whole JSON document; a syntax error becomes "WHERE: malformed JSON: ... at line L,
// column C ...".
nlohmann::json parse_json_text(std::string_view text, const std::string& where);

// Reads and parses a JSON file; a missing or unreadable file is an error naming it.
nlohmann::json read_json_file(const std::string& path);

class JsonObject {
 public:
  // `where` is the file; `path` the dotted field path of this object inside it ("" for the top).
  JsonObject(const nlohmann::json& value, std::string where, std::string path = "");

  // Present and not null (HF configs write null for "not set").
  bool has(std::string_view key) const;
  const nlohmann::json* get(std::string_view key) const;  // nullptr when absent or null

  std::int64_t integer(std::string_view key, std::int64_t min, std::int64_t max) const;
  std::optional<std::int64_t> optional_integer(std::string_view key, std::int64_t min,
                                               std::int64_t max) const;
  // A finite number (integer or floating point) in the open interval (min_exclusive,
  // max_exclusive).
  double number(std::string_view key, double min_exclusive, double max_exclusive) const;
  std::optional<double> optional_number(std::string_view key, double min_exclusive,
                                        double max_exclusive) const;
  std::string string(std::string_view key) const;
  std::optional<std::string> optional_string(std::string_view key) const;
  bool boolean(std::string_view key, bool if_absent) const;
  JsonObject object(std::string_view key) const;

  // The dotted path of a field of this object, as messages print it.
  std::string field_name(std::string_view key) const;
  // "WHERE: field "PATH": MESSAGE".
  [[noreturn]] void fail_field(std::string_view key, const std::string& message) const;

  const nlohmann::json& value() const { return *value_; }
  const std::string& where() const { return where_; }

 private:
  const nlohmann::json& required(std::string_view key) const;

  const nlohmann::json* value_;
  std::string where_;
  std::string path_;
};

// Checks a JSON value is an integer in [min, max] and returns it; `describe` names it in messages
// (e.g. "WHERE: field "eos_token_id[1]"").
std::int64_t json_integer(const nlohmann::json& value, std::int64_t min, std::int64_t max,
                          const std::string& describe);

}  // namespace telos::compiler
