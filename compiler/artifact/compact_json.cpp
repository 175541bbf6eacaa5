#include "compiler/artifact/compact_json.hpp"

namespace telos::compiler {
namespace {

constexpr std::size_t kInlineWidth = 100;

bool is_flat(const nlohmann::ordered_json& v) {
  if (v.is_array()) {
    for (const auto& e : v)
      if (e.is_structured()) return false;
    return true;
  }
  if (v.is_object()) {
    for (const auto& [k, e] : v.items())
      if (e.is_object() || (e.is_array() && !is_flat(e))) return false;
    return true;
  }
  return true;
}

std::string inline_form(const nlohmann::ordered_json& v) {
  if (v.is_array()) {
    std::string s = "[";
    for (std::size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + inline_form(v[i]);
    return s + "]";
  }
  if (v.is_object()) {
    std::string s = "{";
    bool first = true;
    for (const auto& [k, e] : v.items()) {
      s += (first ? "" : ", ") + nlohmann::ordered_json(k).dump() + ": " + inline_form(e);
      first = false;
    }
    return s + "}";
  }
  return v.dump();
}

void print(const nlohmann::ordered_json& v, int indent, std::string& out) {
  if (!v.is_structured()) {  // a scalar (a long string too) is printed as it is
    out += v.dump();
    return;
  }
  const std::string single = is_flat(v) ? inline_form(v) : std::string();
  if (!single.empty() && (v.is_array() || single.size() + indent <= kInlineWidth || v.empty())) {
    out += single;
    return;
  }
  const std::string pad(indent + 2, ' ');
  if (v.is_array()) {
    out += "[\n";
    for (std::size_t i = 0; i < v.size(); ++i) {
      out += pad;
      print(v[i], indent + 2, out);
      out += i + 1 < v.size() ? ",\n" : "\n";
    }
    out += std::string(indent, ' ') + "]";
    return;
  }
  out += "{\n";
  std::size_t i = 0;
  for (const auto& [k, e] : v.items()) {
    out += pad + nlohmann::ordered_json(k).dump() + ": ";
    print(e, indent + 2, out);
    out += ++i < v.size() ? ",\n" : "\n";
  }
  out += std::string(indent, ' ') + "}";
}

}  // namespace

std::string compact_json(const nlohmann::ordered_json& value) {
  std::string out;
  print(value, 0, out);
  return out + "\n";
}

}  // namespace telos::compiler
