#include "compiler/import/json_fields.hpp"

#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <sstream>

#include "support/error.hpp"

namespace telos::compiler {

using nlohmann::json;

std::string json_kind(const json& value) {
  switch (value.type()) {
    case json::value_t::string: return "string";
    case json::value_t::number_integer:
    case json::value_t::number_unsigned: return "integer";
    case json::value_t::number_float: return "number";
    case json::value_t::boolean: return "boolean";
    case json::value_t::array: return "array";
    case json::value_t::object: return "object";
    case json::value_t::null: return "null";
    case json::value_t::binary:
    case json::value_t::discarded: break;
  }
  return "unknown";
}

std::string json_quote(std::string_view text) {
  // Replacing invalid UTF-8 keeps this total: names come from files we do not trust.
  return json(std::string(text)).dump(-1, ' ', false, json::error_handler_t::replace);
}

json parse_json_text(std::string_view text, const std::string& where) {
  try {
    return json::parse(text.begin(), text.end());
  } catch (const json::exception& e) {
    // A syntax error is a parse_error, a number too large for a double (1e400) an out_of_range.
    // nlohmann prefixes "[json.exception.parse_error.101] "; the rest says where and why.
    std::string message = e.what();
    if (auto close = message.find("] ");
        message.rfind("[json.exception", 0) == 0 && close != std::string::npos) {
      message.erase(0, close + 2);
    }
    fail(where + ": malformed JSON: " + message);
  }
}

json read_json_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(path + ": cannot open: " + std::strerror(errno));
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) fail(path + ": cannot read: " + std::strerror(errno));
  return parse_json_text(text.str(), path);
}

std::int64_t json_integer(const json& value, std::int64_t min, std::int64_t max,
                          const std::string& describe) {
  const std::string expected =
      "expected an integer in [" + std::to_string(min) + ", " + std::to_string(max) + "]";
  if (value.is_number_unsigned()) {
    const auto u = value.get<std::uint64_t>();
    if (max < 0 || u > static_cast<std::uint64_t>(max) || static_cast<std::int64_t>(u) < min) {
      fail(describe + ": " + expected + ", found " + std::to_string(u));
    }
    return static_cast<std::int64_t>(u);
  }
  if (value.is_number_integer()) {
    const auto i = value.get<std::int64_t>();
    if (i < min || i > max) fail(describe + ": " + expected + ", found " + std::to_string(i));
    return i;
  }
  std::string found = json_kind(value);
  if (value.is_number_float()) found.append(" ").append(value.dump());
  fail(describe + ": " + expected + ", found " + found);
}

JsonObject::JsonObject(const json& value, std::string where, std::string path)
    : value_(&value), where_(std::move(where)), path_(std::move(path)) {
  if (!value.is_object()) {
    if (path_.empty()) fail(where_ + ": expected a JSON object, found " + json_kind(value));
    fail(where_ + ": field " + json_quote(path_) + ": expected an object, found " +
         json_kind(value));
  }
}

std::string JsonObject::field_name(std::string_view key) const {
  return path_.empty() ? std::string(key) : path_ + "." + std::string(key);
}

void JsonObject::fail_field(std::string_view key, const std::string& message) const {
  fail(where_ + ": field " + json_quote(field_name(key)) + ": " + message);
}

const json* JsonObject::get(std::string_view key) const {
  auto it = value_->find(key);
  if (it == value_->end() || it->is_null()) return nullptr;
  return &*it;
}

bool JsonObject::has(std::string_view key) const { return get(key) != nullptr; }

const json& JsonObject::required(std::string_view key) const {
  const json* v = get(key);
  if (!v) fail(where_ + ": required field " + json_quote(field_name(key)) + " is missing");
  return *v;
}

std::int64_t JsonObject::integer(std::string_view key, std::int64_t min, std::int64_t max) const {
  return json_integer(required(key), min, max, where_ + ": field " + json_quote(field_name(key)));
}

std::optional<std::int64_t> JsonObject::optional_integer(std::string_view key, std::int64_t min,
                                                         std::int64_t max) const {
  if (!has(key)) return std::nullopt;
  return integer(key, min, max);
}

double JsonObject::number(std::string_view key, double min_exclusive, double max_exclusive) const {
  const json& v = required(key);
  std::ostringstream expected;
  expected << "expected a number greater than " << min_exclusive << " and less than "
           << max_exclusive;
  if (!v.is_number()) fail_field(key, expected.str() + ", found " + json_kind(v));
  const double d = v.get<double>();
  if (!std::isfinite(d) || !(d > min_exclusive) || !(d < max_exclusive)) {
    fail_field(key, expected.str() + ", found " + v.dump());
  }
  return d;
}

std::optional<double> JsonObject::optional_number(std::string_view key, double min_exclusive,
                                                  double max_exclusive) const {
  if (!has(key)) return std::nullopt;
  return number(key, min_exclusive, max_exclusive);
}

std::string JsonObject::string(std::string_view key) const {
  const json& v = required(key);
  if (!v.is_string()) fail_field(key, "expected a string, found " + json_kind(v));
  return v.get<std::string>();
}

std::optional<std::string> JsonObject::optional_string(std::string_view key) const {
  if (!has(key)) return std::nullopt;
  return string(key);
}

bool JsonObject::boolean(std::string_view key, bool if_absent) const {
  const json* v = get(key);
  if (!v) return if_absent;
  if (!v->is_boolean()) fail_field(key, "expected true or false, found " + json_kind(*v));
  return v->get<bool>();
}

JsonObject JsonObject::object(std::string_view key) const {
  return JsonObject(required(key), where_, field_name(key));
}

}  // namespace telos::compiler
