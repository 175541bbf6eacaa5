#include "executor/tokenizer/jinja_value.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>

#include "executor/tokenizer/jinja.hpp"
#include "executor/tokenizer/utf8.hpp"
#include "support/error.hpp"

namespace telos::jinja {
namespace {

// Python's repr() of a float: the shortest decimal that reads back to the same double.
std::string float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  char buf[32];
  for (int precision = 1; precision <= 17; ++precision) {
    std::snprintf(buf, sizeof buf, "%.*g", precision, d);
    if (std::strtod(buf, nullptr) == d) break;
  }
  std::string s = buf;
  if (s.find_first_of(".en") == std::string::npos) s += ".0";
  return s;
}

// Every recursive walk over values calls this once per level.
void check_depth(int depth) {
  if (depth > kMaxValueDepth)
    fail("value nested more than " + std::to_string(kMaxValueDepth) +
         " lists or dicts deep (a structure that contains itself?)");
}

Value from_json_at(const nlohmann::ordered_json& j, int depth) {
  using T = nlohmann::ordered_json::value_t;
  switch (j.type()) {
    case T::null:
      return Value::none();
    case T::boolean:
      return Value::of(j.get<bool>());
    case T::number_integer:
      return Value::of(j.get<std::int64_t>());
    case T::number_unsigned:
      // Values hold int64; a larger integer becomes a float, which keeps its magnitude (Python
      // would print every digit).
      if (j.get<std::uint64_t>() >
          static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
        return Value::of_number(j.get<double>());
      return Value::of(j.get<std::int64_t>());
    case T::number_float:
      return Value::of_number(j.get<double>());
    case T::string:
      return Value::of(j.get<std::string>());
    case T::array: {
      check_depth(depth + 1);
      List l;
      l.reserve(j.size());
      for (const auto& e : j) l.push_back(from_json_at(e, depth + 1));
      return Value::of(std::move(l));
    }
    case T::object: {
      check_depth(depth + 1);
      Dict d;
      d.reserve(j.size());
      for (auto& [k, v] : j.items()) d.emplace_back(k, from_json_at(v, depth + 1));
      return Value::of(std::move(d));
    }
    default:
      return Value();
  }
}

void json_string(const std::string& s, std::string& out) {
  out += '"';
  for (char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned char>(c));
          out += buf;
        } else {
          out += c;
        }
    }
  }
  out += '"';
}

}  // namespace

const char* kind_name(const Value& v) {
  switch (v.kind) {
    case Value::Kind::undefined:
      return "undefined";
    case Value::Kind::none:
      return "none";
    case Value::Kind::boolean:
      return "boolean";
    case Value::Kind::integer:
      return "integer";
    case Value::Kind::number:
      return "float";
    case Value::Kind::string:
      return "string";
    case Value::Kind::list:
      return "list";
    case Value::Kind::dict:
      return v.is_namespace ? "namespace" : "dict";
    case Value::Kind::function:
      return "function";
  }
  return "?";
}

Value from_json(const nlohmann::ordered_json& j) {
  return from_json_at(j, 0);
}

std::vector<std::uint32_t> code_points(std::string_view s) {
  std::vector<std::uint32_t> out;
  out.reserve(s.size());
  std::size_t at = 0;
  while (at < s.size()) {
    const utf8::Sequence seq = utf8::scan(s, at);
    std::uint32_t cp = static_cast<unsigned char>(s[at]);
    if (seq.scan != utf8::Scan::complete) {
      out.push_back(0xFFFD);
      at += seq.length;
      continue;
    }
    if (seq.length > 1) {
      cp &= 0xFFu >> (seq.length + 1);
      for (std::size_t k = 1; k < seq.length; ++k)
        cp = (cp << 6) | (static_cast<unsigned char>(s[at + k]) & 0x3F);
    }
    out.push_back(cp);
    at += seq.length;
  }
  return out;
}

std::string from_code_points(const std::vector<std::uint32_t>& cps, std::size_t begin,
                             std::size_t end) {
  std::string out;
  for (std::size_t i = begin; i < end; ++i) utf8::append_code_point(out, cps[i]);
  return out;
}

namespace {

// Python's repr() of a string: single quotes unless the text holds one and no double quote.
void quote(const std::string& s, std::string& out) {
  const char q = s.find('\'') != std::string::npos && s.find('"') == std::string::npos ? '"' : '\'';
  out += q;
  for (char c : s) {
    if (c == q || c == '\\')
      out += '\\', out += c;
    else if (c == '\n')
      out += "\\n";
    else if (c == '\r')
      out += "\\r";
    else if (c == '\t')
      out += "\\t";
    else
      out += c;
  }
  out += q;
}

// str() when !quoted, repr() when quoted: they differ for strings only; lists and dicts print
// their items with repr().
void print(const Value& v, bool quoted, int depth, std::string& out) {
  switch (v.kind) {
    case Value::Kind::undefined:
      return;
    case Value::Kind::none:
      out += "None";
      return;
    case Value::Kind::boolean:
      out += v.boolean ? "True" : "False";
      return;
    case Value::Kind::integer:
      out += std::to_string(v.integer);
      return;
    case Value::Kind::number:
      out += float_repr(v.number);
      return;
    case Value::Kind::string:
      if (quoted)
        quote(v.string, out);
      else
        out += v.string;
      return;
    case Value::Kind::list:
      check_depth(depth + 1);
      out += '[';
      for (std::size_t i = 0; i < v.list->size(); ++i) {
        if (i) out += ", ";
        print((*v.list)[i], true, depth + 1, out);
      }
      out += ']';
      return;
    case Value::Kind::dict: {
      if (v.is_namespace) {
        out += "<Namespace>";
        return;
      }
      check_depth(depth + 1);
      out += '{';
      bool first = true;
      for (auto& [k, e] : *v.dict) {
        if (!first) out += ", ";
        quote(k, out);
        out += ": ";
        print(e, true, depth + 1, out);
        first = false;
      }
      out += '}';
      return;
    }
    case Value::Kind::function:
      out += "<function>";
      return;
  }
}

// tojson at nesting `depth`.
void to_json_at(const Value& v, int indent, int depth, std::string& out) {
  auto newline = [&](int d) {
    out += '\n';
    out.append(static_cast<std::size_t>(indent) * static_cast<std::size_t>(d), ' ');
  };
  switch (v.kind) {
    case Value::Kind::undefined:
    case Value::Kind::none:
      out += "null";
      return;
    case Value::Kind::boolean:
      out += v.boolean ? "true" : "false";
      return;
    case Value::Kind::integer:
      out += std::to_string(v.integer);
      return;
    case Value::Kind::number:
      out += float_repr(v.number);
      return;
    case Value::Kind::string:
      json_string(v.string, out);
      return;
    case Value::Kind::function:
      fail("tojson: a function cannot be serialized");
    case Value::Kind::list:
    case Value::Kind::dict: {
      check_depth(depth + 1);
      const bool is_list = v.kind == Value::Kind::list;
      const std::size_t n = is_list ? v.list->size() : v.dict->size();
      out += is_list ? '[' : '{';
      for (std::size_t i = 0; i < n; ++i) {
        if (i) out += indent > 0 ? "," : ", ";
        if (indent > 0) newline(depth + 1);
        if (is_list) {
          to_json_at((*v.list)[i], indent, depth + 1, out);
        } else {
          json_string((*v.dict)[i].first, out);
          out += ": ";
          to_json_at((*v.dict)[i].second, indent, depth + 1, out);
        }
      }
      if (indent > 0 && n > 0) newline(depth);
      out += is_list ? ']' : '}';
      return;
    }
  }
}

bool equal_at(const Value& a, const Value& b, int depth) {
  if (a.is_number() && b.is_number()) {
    if (a.kind == Value::Kind::number || b.kind == Value::Kind::number)
      return a.as_double() == b.as_double();
    return (a.kind == Value::Kind::boolean ? a.boolean : a.integer) ==
           (b.kind == Value::Kind::boolean ? b.boolean : b.integer);
  }
  if (a.kind != b.kind) return false;
  switch (a.kind) {
    case Value::Kind::undefined:
    case Value::Kind::none:
      return true;
    case Value::Kind::string:
      return a.string == b.string;
    case Value::Kind::list:
      if (a.list->size() != b.list->size()) return false;
      check_depth(depth + 1);
      for (std::size_t i = 0; i < a.list->size(); ++i)
        if (!equal_at((*a.list)[i], (*b.list)[i], depth + 1)) return false;
      return true;
    case Value::Kind::dict:
      if (a.dict->size() != b.dict->size()) return false;
      check_depth(depth + 1);
      for (auto& [k, v] : *a.dict) {
        const Value* other = b.find(k);
        if (other == nullptr || !equal_at(v, *other, depth + 1)) return false;
      }
      return true;
    case Value::Kind::function:
      return a.function == b.function;
    default:
      return false;
  }
}

}  // namespace

// str(): what {{ }} prints.
std::string str(const Value& v) {
  if (v.kind == Value::Kind::string) return v.string;
  std::string out;
  print(v, false, 0, out);
  return out;
}

std::string repr(const Value& v) {
  std::string out;
  print(v, true, 0, out);
  return out;
}

// transformers' tojson: json.dumps(x, ensure_ascii=False, indent=indent), so Python's separators
// (", " and ": "; "," between items when indenting) and non-ASCII text as is.
std::string to_json(const Value& v, int indent) {
  std::string out;
  to_json_at(v, indent, 0, out);
  return out;
}

bool truthy(const Value& v) {
  switch (v.kind) {
    case Value::Kind::undefined:
    case Value::Kind::none:
      return false;
    case Value::Kind::boolean:
      return v.boolean;
    case Value::Kind::integer:
      return v.integer != 0;
    case Value::Kind::number:
      return v.number != 0;
    case Value::Kind::string:
      return !v.string.empty();
    case Value::Kind::list:
      return !v.list->empty();
    case Value::Kind::dict:
      return v.is_namespace || !v.dict->empty();
    case Value::Kind::function:
      return true;
  }
  return false;
}

bool equal(const Value& a, const Value& b) {
  return equal_at(a, b, 0);
}

std::size_t length_of(const Value& v) {
  switch (v.kind) {
    case Value::Kind::undefined:  // Jinja's Undefined has length 0 and iterates as empty
      return 0;
    case Value::Kind::string:
      return code_points(v.string).size();
    case Value::Kind::list:
      return v.list->size();
    case Value::Kind::dict:
      return v.dict->size();
    default:
      fail(std::string("object of type ") + kind_name(v) + " has no length");
  }
}

// The items a for loop or filter walks: list elements, dict keys, string characters.
List iterate(const Value& v) {
  switch (v.kind) {
    case Value::Kind::undefined:
      return {};
    case Value::Kind::list:
      return *v.list;
    case Value::Kind::dict: {
      List keys;
      for (auto& [k, e] : *v.dict) keys.push_back(Value::of(k));
      return keys;
    }
    case Value::Kind::string: {
      List chars;
      const auto cps = code_points(v.string);
      for (std::size_t i = 0; i < cps.size(); ++i)
        chars.push_back(Value::of(from_code_points(cps, i, i + 1)));
      return chars;
    }
    default:
      fail(std::string("object of type ") + kind_name(v) + " is not iterable");
  }
}

}  // namespace telos::jinja
