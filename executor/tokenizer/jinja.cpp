#include "executor/tokenizer/jinja.hpp"

#include <unicode/ucasemap.h>
#include <unicode/uchar.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <functional>
#include <map>
#include <unordered_map>
#include <vector>

#include "executor/tokenizer/utf8.hpp"
#include "support/error.hpp"

namespace telos::jinja {
namespace {

using ordered_json = nlohmann::ordered_json;

// --- Values ----------------------------------------------------------------------------------

struct Value;
using List = std::vector<Value>;
using Dict = std::vector<std::pair<std::string, Value>>;  // insertion-ordered, like Python

struct Args {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> named;
};
using Function = std::function<Value(const Args&)>;

struct Value {
  enum class Kind { undefined, none, boolean, integer, number, string, list, dict, function };
  Kind kind = Kind::undefined;
  bool boolean = false;
  std::int64_t integer = 0;
  double number = 0;
  std::string string;
  std::shared_ptr<List> list;  // shared: Jinja lists and dicts are references
  std::shared_ptr<Dict> dict;
  bool is_namespace = false;
  std::shared_ptr<Function> function;

  static Value none() { return make(Kind::none); }
  static Value of(bool b) {
    Value v = make(Kind::boolean);
    v.boolean = b;
    return v;
  }
  static Value of(std::int64_t i) {
    Value v = make(Kind::integer);
    v.integer = i;
    return v;
  }
  static Value of_number(double d) {
    Value v = make(Kind::number);
    v.number = d;
    return v;
  }
  static Value of(std::string s) {
    Value v = make(Kind::string);
    v.string = std::move(s);
    return v;
  }
  static Value of(List l) {
    Value v = make(Kind::list);
    v.list = std::make_shared<List>(std::move(l));
    return v;
  }
  static Value of(Dict d) {
    Value v = make(Kind::dict);
    v.dict = std::make_shared<Dict>(std::move(d));
    return v;
  }
  static Value fn(Function f) {
    Value v = make(Kind::function);
    v.function = std::make_shared<Function>(std::move(f));
    return v;
  }
  static Value make(Kind k) {
    Value v;
    v.kind = k;
    return v;
  }

  bool defined() const { return kind != Kind::undefined; }
  bool is_number() const {
    return kind == Kind::integer || kind == Kind::number || kind == Kind::boolean;
  }
  double as_double() const {
    return kind == Kind::number ? number
                                : static_cast<double>(kind == Kind::boolean ? boolean : integer);
  }

  const Value* find(const std::string& key) const {
    for (auto& [k, v] : *dict)
      if (k == key) return &v;
    return nullptr;
  }
  void put(const std::string& key, Value value) {
    for (auto& [k, v] : *dict)
      if (k == key) {
        v = std::move(value);
        return;
      }
    dict->emplace_back(key, std::move(value));
  }
};

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

Value from_json(const ordered_json& j) {
  switch (j.type()) {
    case ordered_json::value_t::null:
      return Value::none();
    case ordered_json::value_t::boolean:
      return Value::of(j.get<bool>());
    case ordered_json::value_t::number_integer:
    case ordered_json::value_t::number_unsigned:
      return Value::of(j.get<std::int64_t>());
    case ordered_json::value_t::number_float:
      return Value::of_number(j.get<double>());
    case ordered_json::value_t::string:
      return Value::of(j.get<std::string>());
    case ordered_json::value_t::array: {
      List l;
      for (const auto& e : j) l.push_back(from_json(e));
      return Value::of(std::move(l));
    }
    case ordered_json::value_t::object: {
      Dict d;
      for (auto& [k, v] : j.items()) d.emplace_back(k, from_json(v));
      return Value::of(std::move(d));
    }
    default:
      return Value();
  }
}

// --- Unicode helpers (Python strings index and strip by code point) -------------------------

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

// Python's str.isspace(), which str.strip() and str.split() use.
bool is_python_space(std::uint32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 ||
         c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
         c == 0x205F || c == 0x3000;
}

enum class Side { left = 1, right = 2, both = 3 };

std::string strip(const std::string& s, const Value* chars, Side side) {
  const std::vector<std::uint32_t> cps = code_points(s);
  std::vector<std::uint32_t> set;
  const bool custom = chars != nullptr && chars->kind == Value::Kind::string;
  if (custom) set = code_points(chars->string);
  auto strip_it = [&](std::uint32_t c) {
    return custom ? std::find(set.begin(), set.end(), c) != set.end() : is_python_space(c);
  };
  std::size_t begin = 0, end = cps.size();
  if (static_cast<int>(side) & static_cast<int>(Side::left))
    while (begin < end && strip_it(cps[begin])) ++begin;
  if (static_cast<int>(side) & static_cast<int>(Side::right))
    while (end > begin && strip_it(cps[end - 1])) --end;
  return from_code_points(cps, begin, end);
}

// --- Printing --------------------------------------------------------------------------------

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

std::string repr(const Value& v);

// str(): what {{ }} prints.
std::string str(const Value& v) {
  switch (v.kind) {
    case Value::Kind::undefined:
      return "";
    case Value::Kind::none:
      return "None";
    case Value::Kind::boolean:
      return v.boolean ? "True" : "False";
    case Value::Kind::integer:
      return std::to_string(v.integer);
    case Value::Kind::number:
      return float_repr(v.number);
    case Value::Kind::string:
      return v.string;
    case Value::Kind::list: {
      std::string out = "[";
      for (std::size_t i = 0; i < v.list->size(); ++i) out += (i ? ", " : "") + repr((*v.list)[i]);
      return out + "]";
    }
    case Value::Kind::dict: {
      if (v.is_namespace) return "<Namespace>";
      std::string out = "{";
      bool first = true;
      for (auto& [k, e] : *v.dict) {
        out += (first ? "" : ", ") + repr(Value::of(k)) + ": " + repr(e);
        first = false;
      }
      return out + "}";
    }
    case Value::Kind::function:
      return "<function>";
  }
  return "";
}

std::string repr(const Value& v) {
  if (v.kind != Value::Kind::string) return str(v);
  // Python prefers single quotes unless the text holds one and no double quote.
  const char quote =
      v.string.find('\'') != std::string::npos && v.string.find('"') == std::string::npos ? '"'
                                                                                          : '\'';
  std::string out(1, quote);
  for (char c : v.string) {
    if (c == quote || c == '\\')
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
  return out + quote;
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

// transformers' tojson: json.dumps(x, ensure_ascii=False, indent=indent), so Python's separators
// (", " and ": "; "," between items when indenting) and non-ASCII text as is.
void to_json(const Value& v, int indent, int depth, std::string& out) {
  auto newline = [&](int d) {
    out += '\n';
    out.append(static_cast<std::size_t>(indent * d), ' ');
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
      const bool is_list = v.kind == Value::Kind::list;
      const std::size_t n = is_list ? v.list->size() : v.dict->size();
      out += is_list ? '[' : '{';
      for (std::size_t i = 0; i < n; ++i) {
        if (i) out += indent > 0 ? "," : ", ";
        if (indent > 0) newline(depth + 1);
        if (is_list) {
          to_json((*v.list)[i], indent, depth + 1, out);
        } else {
          json_string((*v.dict)[i].first, out);
          out += ": ";
          to_json((*v.dict)[i].second, indent, depth + 1, out);
        }
      }
      if (indent > 0 && n > 0) newline(depth);
      out += is_list ? ']' : '}';
      return;
    }
  }
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
      return a.list->size() == b.list->size() &&
             std::equal(a.list->begin(), a.list->end(), b.list->begin(), equal);
    case Value::Kind::dict:
      if (a.dict->size() != b.dict->size()) return false;
      for (auto& [k, v] : *a.dict) {
        const Value* other = b.find(k);
        if (other == nullptr || !equal(v, *other)) return false;
      }
      return true;
    case Value::Kind::function:
      return a.function == b.function;
    default:
      return false;
  }
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

// --- Lexer -----------------------------------------------------------------------------------

enum class Tok { name, string, integer, number, op, end };

struct Token {
  Tok type;
  std::string text;
  int line;
};

struct Located {
  std::string origin;
  [[noreturn]] void error(int line, const std::string& message) const {
    fail(origin + ":" + std::to_string(line) + ": " + message);
  }
};

std::vector<Token> lex_expression(std::string_view src, int line, const Located& where) {
  std::vector<Token> tokens;
  std::size_t i = 0;
  while (i < src.size()) {
    const char c = src[i];
    if (c == '\n') {
      ++line;
      ++i;
      continue;
    }
    if (std::isspace(static_cast<unsigned char>(c))) {
      ++i;
      continue;
    }
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      std::size_t j = i;
      while (j < src.size() && (std::isalnum(static_cast<unsigned char>(src[j])) || src[j] == '_'))
        ++j;
      tokens.push_back({Tok::name, std::string(src.substr(i, j - i)), line});
      i = j;
      continue;
    }
    if (std::isdigit(static_cast<unsigned char>(c))) {
      std::size_t j = i;
      while (j < src.size() && (std::isdigit(static_cast<unsigned char>(src[j])) || src[j] == '_'))
        ++j;
      bool is_float = false;
      if (j + 1 < src.size() && src[j] == '.' &&
          std::isdigit(static_cast<unsigned char>(src[j + 1]))) {
        is_float = true;
        ++j;
        while (j < src.size() && std::isdigit(static_cast<unsigned char>(src[j]))) ++j;
      }
      std::string digits;
      for (char d : src.substr(i, j - i))
        if (d != '_') digits += d;
      tokens.push_back({is_float ? Tok::number : Tok::integer, digits, line});
      i = j;
      continue;
    }
    if (c == '\'' || c == '"') {
      std::string text;
      std::size_t j = i + 1;
      for (;; ++j) {
        if (j >= src.size()) where.error(line, "unterminated string literal");
        if (src[j] == c) break;
        if (src[j] == '\n') ++line;
        if (src[j] != '\\') {
          text += src[j];
          continue;
        }
        if (++j >= src.size()) where.error(line, "unterminated string literal");
        switch (src[j]) {
          case 'n':
            text += '\n';
            break;
          case 't':
            text += '\t';
            break;
          case 'r':
            text += '\r';
            break;
          case 'b':
            text += '\b';
            break;
          case 'f':
            text += '\f';
            break;
          case '0':
            text += '\0';
            break;
          case '\\':
            text += '\\';
            break;
          case '\'':
            text += '\'';
            break;
          case '"':
            text += '"';
            break;
          case '\n':
            ++line;
            break;
          case 'x':
          case 'u':
          case 'U': {
            const std::size_t digits = src[j] == 'x' ? 2 : src[j] == 'u' ? 4 : 8;
            if (j + digits >= src.size()) where.error(line, "truncated escape in string literal");
            const std::string hex(src.substr(j + 1, digits));
            if (hex.find_first_not_of("0123456789abcdefABCDEF") != std::string::npos)
              where.error(line,
                          "bad escape \\" + std::string(1, src[j]) + hex + " in string literal");
            const unsigned long cp = std::stoul(hex, nullptr, 16);
            if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
              where.error(line, "escape \\" + std::string(1, src[j]) + hex +
                                    " is not a Unicode scalar value");
            utf8::append_code_point(text, static_cast<std::uint32_t>(cp));
            j += digits;
            break;
          }
          default:  // Python keeps unknown escapes as written.
            text += '\\';
            text += src[j];
        }
      }
      tokens.push_back({Tok::string, std::move(text), line});
      i = j + 1;
      continue;
    }
    static const char* const kOps[] = {"//", "**", "==", "!=", "<=", ">=", "+", "-", "*",
                                       "/",  "%",  "~",  "<",  ">",  "=",  "(", ")", "[",
                                       "]",  "{",  "}",  ",",  ":",  ".",  "|"};
    bool matched = false;
    for (const char* op : kOps) {
      const std::size_t n = std::char_traits<char>::length(op);
      if (src.compare(i, n, op) == 0) {
        tokens.push_back({Tok::op, op, line});
        i += n;
        matched = true;
        break;
      }
    }
    if (!matched) where.error(line, std::string("unexpected character '") + c + "' in expression");
  }
  tokens.push_back({Tok::end, "", line});
  return tokens;
}

// A template split into text, {{ }} and {% %} pieces, with Jinja's whitespace control applied.
struct Piece {
  enum class Kind { text, output, statement } kind;
  std::string content;
  int line;
};

std::vector<Piece> split_template(std::string_view source, const Located& where) {
  std::string src(source);
  // Jinja drops a single trailing newline (keep_trailing_newline=False).
  if (!src.empty() && src.back() == '\n') src.pop_back();
  std::vector<Piece> pieces;
  std::size_t pos = 0;
  int line = 1;
  bool strip_leading = false;
  auto line_at = [&](std::size_t from, std::size_t to) {
    return static_cast<int>(std::count(src.begin() + static_cast<std::ptrdiff_t>(from),
                                       src.begin() + static_cast<std::ptrdiff_t>(to), '\n'));
  };
  while (pos <= src.size()) {
    std::size_t at = pos;
    while ((at = src.find('{', at)) != std::string::npos) {
      if (at + 1 < src.size() && (src[at + 1] == '{' || src[at + 1] == '%' || src[at + 1] == '#'))
        break;
      ++at;
    }
    std::string text = src.substr(pos, at == std::string::npos ? std::string::npos : at - pos);
    const int text_line = line;
    if (strip_leading) {
      const std::size_t keep = text.find_first_not_of(" \t\r\n\v\f");
      text.erase(0, keep == std::string::npos ? text.size() : keep);
    }
    if (at == std::string::npos) {
      if (!text.empty()) pieces.push_back({Piece::Kind::text, text, text_line});
      break;
    }
    line += line_at(pos, at);
    const char kind = src[at + 1];
    const char marker = at + 2 < src.size() ? src[at + 2] : '\0';
    if (marker == '-') {
      const std::size_t keep = text.find_last_not_of(" \t\r\n\v\f");
      text.erase(keep == std::string::npos ? 0 : keep + 1);
    } else if ((kind == '%' || kind == '#') && marker != '+') {
      // lstrip_blocks: spaces and tabs between a line start and a block tag go.
      const std::size_t nl = text.rfind('\n');
      const std::size_t from = nl == std::string::npos ? 0 : nl + 1;
      const bool at_line_start = nl != std::string::npos || pos == 0 || src[pos - 1] == '\n';
      if (at_line_start && text.find_first_not_of(" \t", from) == std::string::npos)
        text.erase(from);
    }
    if (!text.empty()) pieces.push_back({Piece::Kind::text, text, text_line});

    const std::string close = kind == '{' ? "}}" : kind == '%' ? "%}" : "#}";
    std::size_t end = at + 2;
    if (kind == '#') {
      end = src.find(close, end);
    } else {
      // Find the closing delimiter outside string literals.
      char quote = 0;
      for (; end + 1 < src.size(); ++end) {
        const char c = src[end];
        if (quote) {
          if (c == '\\')
            ++end;
          else if (c == quote)
            quote = 0;
        } else if (c == '\'' || c == '"') {
          quote = c;
        } else if (src.compare(end, 2, close) == 0) {
          break;
        }
      }
      if (end + 1 >= src.size()) end = std::string::npos;
    }
    if (end == std::string::npos)
      where.error(line, "'" + src.substr(at, 2) + "' is never closed by '" + close + "'");
    std::string inner = src.substr(at + 2, end - at - 2);
    strip_leading = !inner.empty() && inner.back() == '-';
    if (strip_leading) inner.pop_back();
    if (!inner.empty() && (inner[0] == '-' || inner[0] == '+')) inner.erase(0, 1);
    if (kind != '#')
      pieces.push_back({kind == '{' ? Piece::Kind::output : Piece::Kind::statement, inner, line});
    line += line_at(at, end);
    pos = end + 2;
    // trim_blocks: the first newline after a block tag goes.
    if (kind != '{' && !strip_leading && pos < src.size() && src[pos] == '\n') {
      ++pos;
      ++line;
    }
  }
  return pieces;
}

// --- Syntax tree -----------------------------------------------------------------------------

struct Context;

struct Expr {
  int line = 0;
  virtual ~Expr() = default;
  virtual Value eval(Context& ctx) const = 0;
  // How the expression reads, for "'x.y' is undefined" messages; empty when not a plain name.
  virtual std::string spelling() const { return ""; }
};
using ExprPtr = std::unique_ptr<Expr>;

enum class Flow { normal, break_loop, continue_loop };

struct Node {
  int line = 0;
  virtual ~Node() = default;
  virtual Flow exec(Context& ctx) const = 0;
};
using NodePtr = std::unique_ptr<Node>;
using Body = std::vector<NodePtr>;

struct Context {
  const Located* where;
  std::vector<std::unordered_map<std::string, Value>> scopes;
  std::string out;

  Value lookup(const std::string& name) const {
    for (auto it = scopes.rbegin(); it != scopes.rend(); ++it)
      if (auto found = it->find(name); found != it->end()) return found->second;
    return Value();
  }
  void assign(const std::string& name, Value v) { scopes.back()[name] = std::move(v); }
};

Flow run(const Body& body, Context& ctx) {
  for (const NodePtr& node : body) {
    const Flow flow = node->exec(ctx);
    if (flow != Flow::normal) return flow;
  }
  return Flow::normal;
}

// Runtime errors carry the line of the node that raised them.
template <typename F>
auto at_line(const Context& ctx, int line, F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const Error& e) {
    const std::string message = e.what();
    // Already located by an inner node.
    if (message.rfind(ctx.where->origin + ":", 0) == 0) throw;
    ctx.where->error(line, message);
  }
}

// --- Builtins: methods, filters, tests, globals ------------------------------------------------

const Value* named_arg(const Args& args, std::size_t index, const char* name) {
  if (index < args.positional.size()) return &args.positional[index];
  for (auto& [k, v] : args.named)
    if (k == name) return &v;
  return nullptr;
}

std::string need_string(const Value* v, const char* what) {
  if (v == nullptr || v->kind != Value::Kind::string)
    fail(std::string(what) + " expects a string argument");
  return v->string;
}

std::int64_t need_int(const Value* v, const char* what) {
  if (v == nullptr || (v->kind != Value::Kind::integer && v->kind != Value::Kind::boolean))
    fail(std::string(what) + " expects an integer argument");
  return v->kind == Value::Kind::boolean ? v->boolean : v->integer;
}

List python_split(const std::string& s, const Value* sep, std::int64_t max_split) {
  List parts;
  if (sep == nullptr || sep->kind == Value::Kind::none) {
    const auto cps = code_points(s);
    std::size_t i = 0;
    while (i < cps.size()) {
      while (i < cps.size() && is_python_space(cps[i])) ++i;
      if (i == cps.size()) break;
      std::size_t j = i;
      if (max_split >= 0 && static_cast<std::int64_t>(parts.size()) == max_split) {
        std::size_t end = cps.size();
        while (end > i && is_python_space(cps[end - 1])) --end;
        parts.push_back(Value::of(from_code_points(cps, i, end)));
        break;
      }
      while (j < cps.size() && !is_python_space(cps[j])) ++j;
      parts.push_back(Value::of(from_code_points(cps, i, j)));
      i = j;
    }
    return parts;
  }
  const std::string delimiter = need_string(sep, "split");
  if (delimiter.empty()) fail("split: empty separator");
  std::size_t from = 0;
  for (;;) {
    const std::size_t at = s.find(delimiter, from);
    if (at == std::string::npos ||
        (max_split >= 0 && static_cast<std::int64_t>(parts.size()) == max_split)) {
      parts.push_back(Value::of(s.substr(from)));
      return parts;
    }
    parts.push_back(Value::of(s.substr(from, at - from)));
    from = at + delimiter.size();
  }
}

std::string replace_all(std::string s, const std::string& from, const std::string& to,
                        std::int64_t count) {
  if (from.empty()) return s;
  std::size_t at = 0;
  for (std::int64_t n = 0; (count < 0 || n < count) && (at = s.find(from, at)) != std::string::npos;
       ++n) {
    s.replace(at, from.size(), to);
    at += to.size();
  }
  return s;
}

// Python's str.title() / str.capitalize(): a cased letter after an uncased character starts a
// word (title) or only the first character is upper-cased (capitalize); the rest go lower.
std::string title_case(const std::string& s, bool only_first) {
  std::string out;
  bool start = true;
  for (std::uint32_t c : code_points(s)) {
    const auto cp = static_cast<UChar32>(c);
    const bool cased = u_isUUppercase(cp) || u_isULowercase(cp) || u_istitle(cp);
    utf8::append_code_point(out, static_cast<std::uint32_t>(start ? u_totitle(cp) : u_tolower(cp)));
    start = only_first ? false : !cased;
  }
  return out;
}

// Python's str.upper() / str.lower(): full Unicode case mapping (so "ß".upper() is "SS").
std::string change_case(const std::string& s, bool upper) {
  if (std::all_of(s.begin(), s.end(),
                  [](char c) { return static_cast<unsigned char>(c) < 0x80; })) {
    std::string out = s;
    for (char& c : out)
      c = static_cast<char>(upper ? std::toupper(static_cast<unsigned char>(c))
                                  : std::tolower(static_cast<unsigned char>(c)));
    return out;
  }
  UErrorCode status = U_ZERO_ERROR;
  UCaseMap* map = ucasemap_open("", 0, &status);
  if (U_FAILURE(status)) fail(std::string("ICU case mapping unavailable: ") + u_errorName(status));
  std::string out(s.size() * 3 + 4, '\0');
  status = U_ZERO_ERROR;
  const auto convert = upper ? ucasemap_utf8ToUpper : ucasemap_utf8ToLower;
  const int32_t n = convert(map, out.data(), static_cast<int32_t>(out.size()), s.data(),
                            static_cast<int32_t>(s.size()), &status);
  ucasemap_close(map);
  if (U_FAILURE(status)) fail(std::string("case mapping failed: ") + u_errorName(status));
  out.resize(static_cast<std::size_t>(n));
  return out;
}

// Methods reachable as obj.name(...): Python's str and dict methods that templates call.
Value method(const Value& obj, const std::string& name) {
  if (obj.kind == Value::Kind::string) {
    const std::string s = obj.string;
    if (name == "strip" || name == "lstrip" || name == "rstrip") {
      const Side side = name == "strip" ? Side::both : name == "lstrip" ? Side::left : Side::right;
      return Value::fn(
          [s, side](const Args& a) { return Value::of(strip(s, named_arg(a, 0, "chars"), side)); });
    }
    if (name == "startswith" || name == "endswith") {
      const bool starts = name == "startswith";
      return Value::fn([s, starts](const Args& a) {
        const Value* arg = named_arg(a, 0, "prefix");
        List options = arg != nullptr && arg->kind == Value::Kind::list
                           ? *arg->list
                           : List{arg ? *arg : Value()};
        for (const Value& o : options) {
          const std::string p = need_string(&o, starts ? "startswith" : "endswith");
          const bool hit =
              starts ? s.rfind(p, 0) == 0
                     : s.size() >= p.size() && s.compare(s.size() - p.size(), p.size(), p) == 0;
          if (hit) return Value::of(true);
        }
        return Value::of(false);
      });
    }
    if (name == "split")
      return Value::fn([s](const Args& a) {
        const Value* max = named_arg(a, 1, "maxsplit");
        return Value::of(
            python_split(s, named_arg(a, 0, "sep"), max ? need_int(max, "split") : -1));
      });
    if (name == "upper" || name == "lower")
      return Value::fn(
          [s, upper = name == "upper"](const Args&) { return Value::of(change_case(s, upper)); });
    if (name == "title" || name == "capitalize")
      return Value::fn([s, first = name == "capitalize"](const Args&) {
        return Value::of(title_case(s, first));
      });
    if (name == "replace")
      return Value::fn([s](const Args& a) {
        const Value* count = named_arg(a, 2, "count");
        return Value::of(replace_all(s, need_string(named_arg(a, 0, "old"), "replace"),
                                     need_string(named_arg(a, 1, "new"), "replace"),
                                     count ? need_int(count, "replace") : -1));
      });
    if (name == "find")
      return Value::fn([s](const Args& a) {
        const std::size_t at = s.find(need_string(named_arg(a, 0, "sub"), "find"));
        return Value::of(at == std::string::npos
                             ? std::int64_t{-1}
                             : static_cast<std::int64_t>(code_points(s.substr(0, at)).size()));
      });
    if (name == "join")
      return Value::fn([s](const Args& a) {
        const Value* items = named_arg(a, 0, "iterable");
        if (items == nullptr) fail("join expects an iterable");
        std::string out;
        bool first = true;
        for (const Value& v : iterate(*items)) {
          out += (first ? "" : s) + str(v);
          first = false;
        }
        return Value::of(out);
      });
  }
  if (obj.kind == Value::Kind::dict && !obj.is_namespace) {
    auto d = obj.dict;
    if (name == "items")
      return Value::fn([d](const Args&) {
        List l;
        for (auto& [k, v] : *d) l.push_back(Value::of(List{Value::of(k), v}));
        return Value::of(std::move(l));
      });
    if (name == "keys" || name == "values")
      return Value::fn([d, keys = name == "keys"](const Args&) {
        List l;
        for (auto& [k, v] : *d) l.push_back(keys ? Value::of(k) : v);
        return Value::of(std::move(l));
      });
    if (name == "get")
      return Value::fn([obj](const Args& a) {
        const Value* found = obj.find(need_string(named_arg(a, 0, "key"), "get"));
        if (found) return *found;
        const Value* fallback = named_arg(a, 1, "default");
        return fallback ? *fallback : Value::none();
      });
  }
  return Value();
}

// obj.name: Jinja tries the attribute (here: a method) first, then the item.
Value get_attribute(const Value& obj, const std::string& name) {
  if (obj.kind == Value::Kind::undefined)
    fail("cannot read attribute '" + name + "' of an undefined value");
  if (obj.kind == Value::Kind::dict) {
    if (!obj.is_namespace) {
      Value m = method(obj, name);
      if (m.defined()) return m;
    }
    const Value* found = obj.find(name);
    return found ? *found : Value();
  }
  return method(obj, name);
}

std::int64_t normalize_index(std::int64_t i, std::size_t size) {
  return i < 0 ? i + static_cast<std::int64_t>(size) : i;
}

// obj[key]: the item first, then the attribute.
Value get_item(const Value& obj, const Value& key) {
  if (obj.kind == Value::Kind::undefined) fail("cannot index an undefined value with " + repr(key));
  if (obj.kind == Value::Kind::dict) {
    if (key.kind == Value::Kind::string) {
      const Value* found = obj.find(key.string);
      return found ? *found : get_attribute(obj, key.string);
    }
    return Value();
  }
  if ((obj.kind == Value::Kind::list || obj.kind == Value::Kind::string) &&
      key.kind == Value::Kind::integer) {
    if (obj.kind == Value::Kind::list) {
      const std::int64_t i = normalize_index(key.integer, obj.list->size());
      if (i < 0 || i >= static_cast<std::int64_t>(obj.list->size())) return Value();
      return (*obj.list)[static_cast<std::size_t>(i)];
    }
    const auto cps = code_points(obj.string);
    const std::int64_t i = normalize_index(key.integer, cps.size());
    if (i < 0 || i >= static_cast<std::int64_t>(cps.size())) return Value();
    return Value::of(
        from_code_points(cps, static_cast<std::size_t>(i), static_cast<std::size_t>(i) + 1));
  }
  if (key.kind == Value::Kind::string) return get_attribute(obj, key.string);
  return Value();
}

Value slice(const Value& obj, const Value& start, const Value& stop, const Value& step_value) {
  const std::int64_t step = step_value.defined() && step_value.kind != Value::Kind::none
                                ? need_int(&step_value, "slice")
                                : 1;
  if (step == 0) fail("slice step cannot be zero");
  const bool is_string = obj.kind == Value::Kind::string;
  if (!is_string && obj.kind != Value::Kind::list)
    fail(std::string("cannot slice a ") + kind_name(obj));
  std::vector<std::uint32_t> cps;
  if (is_string) cps = code_points(obj.string);
  const auto n = static_cast<std::int64_t>(is_string ? cps.size() : obj.list->size());
  // Python's slice.indices().
  auto bound = [&](const Value& v, std::int64_t fallback) {
    if (!v.defined() || v.kind == Value::Kind::none) return fallback;
    std::int64_t i = need_int(&v, "slice");
    if (i < 0) i += n;
    if (step > 0) return std::clamp<std::int64_t>(i, 0, n);
    return std::clamp<std::int64_t>(i, -1, n - 1);
  };
  const std::int64_t begin = bound(start, step > 0 ? 0 : n - 1),
                     end = bound(stop, step > 0 ? n : -1);
  std::string text;
  List items;
  for (std::int64_t i = begin; step > 0 ? i < end : i > end; i += step) {
    if (is_string)
      utf8::append_code_point(text, cps[static_cast<std::size_t>(i)]);
    else
      items.push_back((*obj.list)[static_cast<std::size_t>(i)]);
  }
  return is_string ? Value::of(text) : Value::of(std::move(items));
}

using TestFn = std::function<bool(const Value&, const std::vector<Value>&)>;

std::int64_t test_int(const std::vector<Value>& args, const char* test) {
  if (args.empty()) fail(std::string("test '") + test + "' needs an argument");
  return need_int(&args[0], test);
}

const std::map<std::string, std::pair<int, TestFn>>& tests() {
  using K = Value::Kind;
  auto compare = [](auto cmp) {
    return [cmp](const Value& v, const std::vector<Value>& a) {
      if (!v.is_number() || a.empty() || !a[0].is_number()) fail("comparison test needs numbers");
      return cmp(v.as_double(), a[0].as_double());
    };
  };
  // Name -> (number of arguments, test).
  static const std::map<std::string, std::pair<int, TestFn>> table = {
      {"defined", {0, [](const Value& v, auto&) { return v.defined(); }}},
      {"undefined", {0, [](const Value& v, auto&) { return !v.defined(); }}},
      {"none", {0, [](const Value& v, auto&) { return v.kind == K::none; }}},
      {"boolean", {0, [](const Value& v, auto&) { return v.kind == K::boolean; }}},
      {"true", {0, [](const Value& v, auto&) { return v.kind == K::boolean && v.boolean; }}},
      {"false", {0, [](const Value& v, auto&) { return v.kind == K::boolean && !v.boolean; }}},
      {"string", {0, [](const Value& v, auto&) { return v.kind == K::string; }}},
      {"number",
       {0, [](const Value& v, auto&) { return v.kind == K::integer || v.kind == K::number; }}},
      {"integer", {0, [](const Value& v, auto&) { return v.kind == K::integer; }}},
      {"float", {0, [](const Value& v, auto&) { return v.kind == K::number; }}},
      {"mapping", {0, [](const Value& v, auto&) { return v.kind == K::dict; }}},
      {"iterable",
       {0, [](const Value& v,
              auto&) { return v.kind == K::list || v.kind == K::dict || v.kind == K::string; }}},
      {"sequence",
       {0, [](const Value& v,
              auto&) { return v.kind == K::list || v.kind == K::dict || v.kind == K::string; }}},
      {"callable", {0, [](const Value& v, auto&) { return v.kind == K::function; }}},
      {"odd", {0, [](const Value& v, auto&) { return need_int(&v, "odd") % 2 != 0; }}},
      {"even", {0, [](const Value& v, auto&) { return need_int(&v, "even") % 2 == 0; }}},
      {"lower",
       {0, [](const Value& v,
              auto&) { return v.kind == K::string && change_case(v.string, false) == v.string; }}},
      {"upper",
       {0, [](const Value& v,
              auto&) { return v.kind == K::string && change_case(v.string, true) == v.string; }}},
      {"divisibleby",
       {1,
        [](const Value& v, auto& a) {
          const std::int64_t d = test_int(a, "divisibleby");
          return d != 0 && need_int(&v, "divisibleby") % d == 0;
        }}},
      {"equalto", {1, [](const Value& v, auto& a) { return !a.empty() && equal(v, a[0]); }}},
      {"eq", {1, [](const Value& v, auto& a) { return !a.empty() && equal(v, a[0]); }}},
      {"ne", {1, [](const Value& v, auto& a) { return a.empty() || !equal(v, a[0]); }}},
      {"sameas",
       {1, [](const Value& v,
              auto& a) { return !a.empty() && equal(v, a[0]) && v.kind == a[0].kind; }}},
      {"lt", {1, compare([](double x, double y) { return x < y; })}},
      {"le", {1, compare([](double x, double y) { return x <= y; })}},
      {"gt", {1, compare([](double x, double y) { return x > y; })}},
      {"ge", {1, compare([](double x, double y) { return x >= y; })}},
      {"in",
       {1,
        [](const Value& v, auto& a) {
          if (a.empty()) return false;
          for (const Value& e : iterate(a[0]))
            if (equal(e, v)) return true;
          return a[0].kind == K::string && v.kind == K::string &&
                 a[0].string.find(v.string) != std::string::npos;
        }}},
  };
  return table;
}

bool run_test(const std::string& name, const Value& v, const std::vector<Value>& args) {
  return tests().at(name).second(v, args);
}

using FilterFn = std::function<Value(const Value&, const Args&)>;

List select_items(const Value& seq, const Args& args, bool by_attribute, bool keep_matching) {
  // select/reject(test, args...) and selectattr/rejectattr(attribute, test, args...).
  const std::size_t first = by_attribute ? 1 : 0;
  std::string attribute;
  if (by_attribute) attribute = need_string(named_arg(args, 0, "attribute"), "selectattr");
  std::string test;
  std::vector<Value> test_args;
  if (args.positional.size() > first) {
    test = need_string(&args.positional[first], "select");
    if (!tests().count(test)) fail("test '" + test + "' is not supported");
    test_args.assign(args.positional.begin() + static_cast<std::ptrdiff_t>(first) + 1,
                     args.positional.end());
  }
  List kept;
  for (const Value& item : iterate(seq)) {
    const Value subject = by_attribute ? get_attribute(item, attribute) : item;
    const bool hit = test.empty() ? truthy(subject) : run_test(test, subject, test_args);
    if (hit == keep_matching) kept.push_back(item);
  }
  return kept;
}

const std::map<std::string, FilterFn>& filters() {
  using K = Value::Kind;
  static const std::map<std::string, FilterFn> table = {
      {"trim",
       [](const Value& v, const Args& a) {
         return Value::of(strip(str(v), named_arg(a, 0, "chars"), Side::both));
       }},
      {"length", [](const Value& v,
                    const Args&) { return Value::of(static_cast<std::int64_t>(length_of(v))); }},
      {"count", [](const Value& v,
                   const Args&) { return Value::of(static_cast<std::int64_t>(length_of(v))); }},
      {"upper", [](const Value& v, const Args&) { return Value::of(change_case(str(v), true)); }},
      {"lower", [](const Value& v, const Args&) { return Value::of(change_case(str(v), false)); }},
      {"capitalize",
       [](const Value& v, const Args&) { return Value::of(title_case(str(v), true)); }},
      {"title", [](const Value& v, const Args&) { return Value::of(title_case(str(v), false)); }},
      {"string", [](const Value& v, const Args&) { return Value::of(str(v)); }},
      {"safe", [](const Value& v, const Args&) { return v; }},
      {"list", [](const Value& v, const Args&) { return Value::of(iterate(v)); }},
      {"first",
       [](const Value& v, const Args&) {
         const List items = iterate(v);
         return items.empty() ? Value() : items.front();
       }},
      {"last",
       [](const Value& v, const Args&) {
         const List items = iterate(v);
         return items.empty() ? Value() : items.back();
       }},
      {"default",
       [](const Value& v, const Args& a) {
         const Value* fallback = named_arg(a, 0, "default_value");
         const Value* boolean = named_arg(a, 1, "boolean");
         const bool use_fallback = boolean && truthy(*boolean) ? !truthy(v) : !v.defined();
         return use_fallback ? (fallback ? *fallback : Value::of(std::string())) : v;
       }},
      {"join",
       [](const Value& v, const Args& a) {
         const Value* sep = named_arg(a, 0, "d");
         const Value* attribute = named_arg(a, 1, "attribute");
         std::string out;
         bool first = true;
         for (const Value& item : iterate(v)) {
           out += (first ? "" : (sep ? str(*sep) : "")) +
                  str(attribute ? get_attribute(item, str(*attribute)) : item);
           first = false;
         }
         return Value::of(out);
       }},
      {"replace",
       [](const Value& v, const Args& a) {
         const Value* count = named_arg(a, 2, "count");
         return Value::of(replace_all(str(v), need_string(named_arg(a, 0, "old"), "replace"),
                                      need_string(named_arg(a, 1, "new"), "replace"),
                                      count ? need_int(count, "replace") : -1));
       }},
      {"tojson",
       [](const Value& v, const Args& a) {
         const Value* indent = named_arg(a, 0, "indent");
         std::string out;
         to_json(
             v,
             indent && indent->kind != K::none ? static_cast<int>(need_int(indent, "tojson")) : 0,
             0, out);
         return Value::of(out);
       }},
      {"items",
       [](const Value& v, const Args&) {
         if (v.kind != K::dict) fail(std::string("items expects a dict, got ") + kind_name(v));
         return (*method(v, "items").function)(Args{});
       }},
      {"int",
       [](const Value& v, const Args&) {
         if (v.kind == K::string) {
           try {
             return Value::of(static_cast<std::int64_t>(std::stoll(v.string)));
           } catch (const std::exception&) {
             return Value::of(std::int64_t{0});
           }
         }
         return Value::of(v.kind == K::number ? static_cast<std::int64_t>(v.number)
                          : v.is_number()     ? need_int(&v, "int")
                                              : 0);
       }},
      {"abs",
       [](const Value& v, const Args&) {
         if (v.kind == K::number) return Value::of_number(std::fabs(v.number));
         const std::int64_t i = need_int(&v, "abs");
         return Value::of(i < 0 ? -i : i);
       }},
      {"select",
       [](const Value& v, const Args& a) { return Value::of(select_items(v, a, false, true)); }},
      {"reject",
       [](const Value& v, const Args& a) { return Value::of(select_items(v, a, false, false)); }},
      {"selectattr",
       [](const Value& v, const Args& a) { return Value::of(select_items(v, a, true, true)); }},
      {"rejectattr",
       [](const Value& v, const Args& a) { return Value::of(select_items(v, a, true, false)); }},
      {"map",
       [](const Value& v, const Args& a) {
         const Value* attribute = nullptr;
         for (auto& [k, e] : a.named)
           if (k == "attribute") attribute = &e;
         if (attribute == nullptr) fail("map is supported only as map(attribute=...)");
         List out;
         for (const Value& item : iterate(v)) out.push_back(get_attribute(item, str(*attribute)));
         return Value::of(std::move(out));
       }},
  };
  return table;
}

// Globals transformers puts in every chat template's environment.
std::unordered_map<std::string, Value> globals() {
  std::unordered_map<std::string, Value> g;
  g["raise_exception"] = Value::fn([](const Args& a) -> Value {
    fail("template raised an exception: " +
         (a.positional.empty() ? std::string() : str(a.positional[0])));
  });
  g["namespace"] = Value::fn([](const Args& a) {
    Value ns = Value::of(Dict{});
    ns.is_namespace = true;
    for (const Value& p : a.positional)
      if (p.kind == Value::Kind::dict)
        for (auto& [k, v] : *p.dict) ns.put(k, v);
    for (auto& [k, v] : a.named) ns.put(k, v);
    return ns;
  });
  g["range"] = Value::fn([](const Args& a) {
    std::int64_t start = 0, stop = 0, step = 1;
    if (a.positional.size() == 1) {
      stop = need_int(&a.positional[0], "range");
    } else if (a.positional.size() >= 2) {
      start = need_int(&a.positional[0], "range");
      stop = need_int(&a.positional[1], "range");
      if (a.positional.size() > 2) step = need_int(&a.positional[2], "range");
    }
    if (step == 0) fail("range step cannot be zero");
    // A template loops over messages; a range this long is a mistake, not a prompt.
    constexpr std::int64_t kMaxRange = 1 << 20;
    const std::int64_t count =
        step > 0 ? (stop - start + step - 1) / step : (start - stop - step - 1) / -step;
    if (count > kMaxRange) fail("range of " + std::to_string(count) + " items is too long");
    List out;
    for (std::int64_t i = start; step > 0 ? i < stop : i > stop; i += step)
      out.push_back(Value::of(i));
    return Value::of(std::move(out));
  });
  g["strftime_now"] = Value::fn([](const Args& a) {
    const std::string format = need_string(named_arg(a, 0, "format"), "strftime_now");
    const std::time_t now = std::time(nullptr);
    std::tm local{};
    localtime_r(&now, &local);
    char buf[256];
    const std::size_t n = std::strftime(buf, sizeof buf, format.c_str(), &local);
    return Value::of(std::string(buf, n));
  });
  return g;
}

// --- Expressions -----------------------------------------------------------------------------

struct Literal : Expr {
  Value value;
  Value eval(Context&) const override { return value; }
  std::string spelling() const override { return repr(value); }
};

struct Name : Expr {
  std::string name;
  Value eval(Context& ctx) const override { return ctx.lookup(name); }
  std::string spelling() const override { return name; }
};

struct ListExpr : Expr {
  std::vector<ExprPtr> items;
  Value eval(Context& ctx) const override {
    List l;
    for (const ExprPtr& e : items) l.push_back(e->eval(ctx));
    return Value::of(std::move(l));
  }
};

struct DictExpr : Expr {
  std::vector<std::pair<ExprPtr, ExprPtr>> items;
  Value eval(Context& ctx) const override {
    Value d = Value::of(Dict{});
    for (auto& [k, v] : items) {
      const Value key = k->eval(ctx);
      if (key.kind != Value::Kind::string) ctx.where->error(line, "dict keys must be strings");
      d.put(key.string, v->eval(ctx));
    }
    return d;
  }
};

struct Attribute : Expr {
  ExprPtr object;
  std::string name;
  Value eval(Context& ctx) const override {
    const Value obj = object->eval(ctx);
    if (!obj.defined()) {
      const std::string s = object->spelling();
      ctx.where->error(line, (s.empty() ? std::string("value") : "'" + s + "'") +
                                 " is undefined (reading ." + name + ")");
    }
    return at_line(ctx, line, [&] { return get_attribute(obj, name); });
  }
  std::string spelling() const override {
    const std::string s = object->spelling();
    return s.empty() ? "" : s + "." + name;
  }
};

struct Subscript : Expr {
  ExprPtr object, index;
  Value eval(Context& ctx) const override {
    const Value obj = object->eval(ctx), key = index->eval(ctx);
    return at_line(ctx, line, [&] { return get_item(obj, key); });
  }
  std::string spelling() const override {
    const std::string o = object->spelling(), i = index->spelling();
    return o.empty() || i.empty() ? "" : o + "[" + i + "]";
  }
};

struct Slice : Expr {
  ExprPtr object, start, stop, step;
  Value eval(Context& ctx) const override {
    const Value obj = object->eval(ctx);
    auto opt = [&](const ExprPtr& e) { return e ? e->eval(ctx) : Value(); };
    const Value a = opt(start), b = opt(stop), c = opt(step);
    return at_line(ctx, line, [&] { return slice(obj, a, b, c); });
  }
};

struct ArgExprs {
  std::vector<ExprPtr> positional;
  std::vector<std::pair<std::string, ExprPtr>> named;
  Args eval(Context& ctx) const {
    Args a;
    for (const ExprPtr& e : positional) a.positional.push_back(e->eval(ctx));
    for (auto& [k, e] : named) a.named.emplace_back(k, e->eval(ctx));
    return a;
  }
};

struct Call : Expr {
  ExprPtr callee;
  ArgExprs args;
  Value eval(Context& ctx) const override {
    const Value f = callee->eval(ctx);
    if (f.kind != Value::Kind::function) {
      const std::string s = callee->spelling();
      ctx.where->error(line, (s.empty() ? std::string("value") : "'" + s + "'") +
                                 (f.defined() ? " is not callable"
                                              : " is undefined or not a supported function"));
    }
    const Args a = args.eval(ctx);
    return at_line(ctx, line, [&] { return (*f.function)(a); });
  }
};

struct FilterExpr : Expr {
  ExprPtr value;
  std::string name;
  ArgExprs args;
  Value eval(Context& ctx) const override {
    const Value v = value->eval(ctx);
    const Args a = args.eval(ctx);
    return at_line(ctx, line, [&] { return filters().at(name)(v, a); });
  }
};

struct TestExpr : Expr {
  ExprPtr value;
  std::string name;
  std::vector<ExprPtr> args;
  bool negated = false;
  Value eval(Context& ctx) const override {
    const Value v = value->eval(ctx);
    std::vector<Value> a;
    for (const ExprPtr& e : args) a.push_back(e->eval(ctx));
    return Value::of(at_line(ctx, line, [&] { return run_test(name, v, a); }) != negated);
  }
};

struct Unary : Expr {
  std::string op;
  ExprPtr operand;
  Value eval(Context& ctx) const override {
    const Value v = operand->eval(ctx);
    if (op == "not") return Value::of(!truthy(v));
    if (v.kind == Value::Kind::number) return Value::of_number(op == "-" ? -v.number : v.number);
    if (v.kind == Value::Kind::integer || v.kind == Value::Kind::boolean) {
      const std::int64_t i = v.kind == Value::Kind::boolean ? v.boolean : v.integer;
      return Value::of(op == "-" ? -i : i);
    }
    ctx.where->error(line, "unary " + op + " needs a number, got " + kind_name(v));
  }
};

Value arithmetic(const std::string& op, const Value& a, const Value& b) {
  using K = Value::Kind;
  if (op == "~") return Value::of(str(a) + str(b));
  if (op == "+") {
    if (a.kind == K::string && b.kind == K::string) return Value::of(a.string + b.string);
    if (a.kind == K::list && b.kind == K::list) {
      List l = *a.list;
      l.insert(l.end(), b.list->begin(), b.list->end());
      return Value::of(std::move(l));
    }
  }
  if (op == "*" && ((a.kind == K::string && b.kind == K::integer) ||
                    (a.kind == K::integer && b.kind == K::string))) {
    const Value& s = a.kind == K::string ? a : b;
    std::string out;
    for (std::int64_t n = a.kind == K::integer ? a.integer : b.integer; n > 0; --n) out += s.string;
    return Value::of(out);
  }
  if (!a.is_number() || !b.is_number())
    fail("cannot apply '" + op + "' to " + kind_name(a) + " and " + kind_name(b));
  const bool integral = a.kind != K::number && b.kind != K::number;
  if (integral && op != "/") {
    const std::int64_t x = a.kind == K::boolean ? a.boolean : a.integer,
                       y = b.kind == K::boolean ? b.boolean : b.integer;
    if (op == "+") return Value::of(x + y);
    if (op == "-") return Value::of(x - y);
    if (op == "*") return Value::of(x * y);
    if (op == "**") {
      std::int64_t r = 1;
      for (std::int64_t n = 0; n < y; ++n) r *= x;
      return Value::of(r);
    }
    if (y == 0) fail("integer division or modulo by zero");
    // Python floors both // and %.
    std::int64_t q = x / y, r = x % y;
    if (r != 0 && ((r < 0) != (y < 0))) {
      --q;
      r += y;
    }
    return Value::of(op == "//" ? q : r);
  }
  const double x = a.as_double(), y = b.as_double();
  if (op == "+") return Value::of_number(x + y);
  if (op == "-") return Value::of_number(x - y);
  if (op == "*") return Value::of_number(x * y);
  if (op == "**") return Value::of_number(std::pow(x, y));
  if (y == 0) fail("division by zero");
  if (op == "/") return Value::of_number(x / y);
  if (op == "//") return Value::of_number(std::floor(x / y));
  return Value::of_number(x - y * std::floor(x / y));
}

bool contains(const Value& container, const Value& item) {
  if (container.kind == Value::Kind::undefined) return false;
  if (container.kind == Value::Kind::string) {
    if (item.kind != Value::Kind::string) fail("'in <string>' requires a string on the left");
    return container.string.find(item.string) != std::string::npos;
  }
  if (container.kind == Value::Kind::dict)
    return item.kind == Value::Kind::string && container.find(item.string) != nullptr;
  if (container.kind == Value::Kind::list)
    return std::any_of(container.list->begin(), container.list->end(),
                       [&](const Value& e) { return equal(e, item); });
  fail(std::string("argument of type ") + kind_name(container) + " is not a container ('in')");
}

bool less(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) return a.as_double() < b.as_double();
  if (a.kind == Value::Kind::string && b.kind == Value::Kind::string) return a.string < b.string;
  fail(std::string("cannot order ") + kind_name(a) + " and " + kind_name(b));
}

struct Binary : Expr {
  std::string op;
  ExprPtr left, right;
  Value eval(Context& ctx) const override {
    if (op == "and") {
      Value l = left->eval(ctx);
      return truthy(l) ? right->eval(ctx) : l;
    }
    if (op == "or") {
      Value l = left->eval(ctx);
      return truthy(l) ? l : right->eval(ctx);
    }
    const Value l = left->eval(ctx), r = right->eval(ctx);
    return at_line(ctx, line, [&] {
      if (op == "==") return Value::of(equal(l, r));
      if (op == "!=") return Value::of(!equal(l, r));
      if (op == "<") return Value::of(less(l, r));
      if (op == ">") return Value::of(less(r, l));
      if (op == "<=") return Value::of(!less(r, l));
      if (op == ">=") return Value::of(!less(l, r));
      if (op == "in") return Value::of(contains(r, l));
      if (op == "not in") return Value::of(!contains(r, l));
      return arithmetic(op, l, r);
    });
  }
};

struct Conditional : Expr {
  ExprPtr condition, then, otherwise;
  Value eval(Context& ctx) const override {
    if (truthy(condition->eval(ctx))) return then->eval(ctx);
    return otherwise ? otherwise->eval(ctx) : Value();
  }
};

// --- Statements ------------------------------------------------------------------------------

struct Text : Node {
  std::string text;
  Flow exec(Context& ctx) const override {
    ctx.out += text;
    return Flow::normal;
  }
};

struct Output : Node {
  ExprPtr value;
  Flow exec(Context& ctx) const override {
    ctx.out += str(value->eval(ctx));
    return Flow::normal;
  }
};

struct If : Node {
  std::vector<std::pair<ExprPtr, Body>> branches;
  Body otherwise;
  Flow exec(Context& ctx) const override {
    for (auto& [condition, body] : branches)
      if (truthy(condition->eval(ctx))) return run(body, ctx);
    return run(otherwise, ctx);
  }
};

void assign_targets(Context& ctx, const std::vector<std::string>& targets, const Value& v,
                    int line) {
  if (targets.size() == 1) {
    ctx.assign(targets[0], v);
    return;
  }
  if (v.kind != Value::Kind::list || v.list->size() != targets.size())
    ctx.where->error(line, "cannot unpack " + std::string(kind_name(v)) + " into " +
                               std::to_string(targets.size()) + " names");
  for (std::size_t i = 0; i < targets.size(); ++i) ctx.assign(targets[i], (*v.list)[i]);
}

struct For : Node {
  std::vector<std::string> targets;
  ExprPtr iterable, filter;
  Body body, otherwise;
  Flow exec(Context& ctx) const override {
    const Value seq = iterable->eval(ctx);
    List items = at_line(ctx, line, [&] { return iterate(seq); });
    if (filter) {
      // `for x in xs if cond` filters before loop.index and loop.length are counted.
      List kept;
      for (const Value& item : items) {
        ctx.scopes.emplace_back();
        assign_targets(ctx, targets, item, line);
        if (truthy(filter->eval(ctx))) kept.push_back(item);
        ctx.scopes.pop_back();
      }
      items = std::move(kept);
    }
    const auto n = static_cast<std::int64_t>(items.size());
    for (std::int64_t i = 0; i < n; ++i) {
      // Each iteration has its own scope: a `set` in the body does not outlive it (Jinja's rule,
      // which is why templates carry state in namespace()).
      ctx.scopes.emplace_back();
      Value loop = Value::of(Dict{});
      loop.put("index", Value::of(i + 1));
      loop.put("index0", Value::of(i));
      loop.put("revindex", Value::of(n - i));
      loop.put("revindex0", Value::of(n - i - 1));
      loop.put("first", Value::of(i == 0));
      loop.put("last", Value::of(i == n - 1));
      loop.put("length", Value::of(n));
      loop.put("previtem", i > 0 ? items[static_cast<std::size_t>(i - 1)] : Value());
      loop.put("nextitem", i + 1 < n ? items[static_cast<std::size_t>(i + 1)] : Value());
      ctx.assign("loop", loop);
      assign_targets(ctx, targets, items[static_cast<std::size_t>(i)], line);
      const Flow flow = run(body, ctx);
      ctx.scopes.pop_back();
      if (flow == Flow::break_loop) break;
    }
    if (n == 0) return run(otherwise, ctx);
    return Flow::normal;
  }
};

struct Set : Node {
  std::vector<std::string> targets;
  std::string attribute;  // set ns.attribute = ...
  ExprPtr value;
  Body block;  // {% set x %}...{% endset %}
  Flow exec(Context& ctx) const override {
    Value v;
    if (value) {
      v = value->eval(ctx);
    } else {
      std::string saved;
      std::swap(saved, ctx.out);
      run(block, ctx);
      std::swap(saved, ctx.out);
      v = Value::of(saved);
    }
    if (attribute.empty()) {
      assign_targets(ctx, targets, v, line);
      return Flow::normal;
    }
    Value ns = ctx.lookup(targets[0]);
    if (ns.kind != Value::Kind::dict || !ns.is_namespace)
      ctx.where->error(line, "cannot set '" + targets[0] + "." + attribute + "': '" + targets[0] +
                                 "' is not a namespace()");
    ns.put(attribute, std::move(v));
    return Flow::normal;
  }
};

struct LoopControl : Node {
  Flow flow;
  Flow exec(Context&) const override { return flow; }
};

// --- Parser ----------------------------------------------------------------------------------

class ExprParser {
 public:
  ExprParser(std::vector<Token> tokens, const Located& where)
      : tokens_(std::move(tokens)), where_(where) {}

  const Token& peek(std::size_t ahead = 0) const {
    return tokens_[std::min(pos_ + ahead, tokens_.size() - 1)];
  }
  bool at_end() const { return peek().type == Tok::end; }
  bool is_op(const char* op, std::size_t ahead = 0) const {
    return peek(ahead).type == Tok::op && peek(ahead).text == op;
  }
  bool is_name(const char* name, std::size_t ahead = 0) const {
    return peek(ahead).type == Tok::name && peek(ahead).text == name;
  }
  bool accept_op(const char* op) { return is_op(op) && (++pos_, true); }
  bool accept_name(const char* name) { return is_name(name) && (++pos_, true); }
  [[noreturn]] void error(const std::string& message) const { where_.error(peek().line, message); }
  void expect_op(const char* op) {
    if (!accept_op(op)) error(std::string("expected '") + op + "', found " + describe(peek()));
  }
  std::string expect_name() {
    if (peek().type != Tok::name) error("expected a name, found " + describe(peek()));
    return tokens_[pos_++].text;
  }
  void expect_end() {
    if (!at_end()) error("unexpected " + describe(peek()));
  }
  static std::string describe(const Token& t) {
    return t.type == Tok::end ? "end of tag" : "'" + t.text + "'";
  }

  ExprPtr expression() {
    ExprPtr e = or_expr();
    if (is_name("if")) {
      auto c = make<Conditional>();
      ++pos_;
      c->then = std::move(e);
      c->condition = or_expr();
      if (accept_name("else")) c->otherwise = expression();
      return c;
    }
    return e;
  }

  // An expression that leaves a trailing `if` alone (the filter of `for x in xs if cond`).
  ExprPtr without_condition() { return or_expr(); }
  ExprPtr primary_with_postfix() { return postfix(primary()); }

 private:
  template <typename T>
  std::unique_ptr<T> make() {
    auto p = std::make_unique<T>();
    p->line = peek().line;
    return p;
  }

  ExprPtr binary(const std::string& op, ExprPtr l, ExprPtr r, int line) {
    auto b = std::make_unique<Binary>();
    b->line = line;
    b->op = op;
    b->left = std::move(l);
    b->right = std::move(r);
    return b;
  }

  ExprPtr or_expr() {
    ExprPtr e = and_expr();
    while (is_name("or")) {
      const int line = peek().line;
      ++pos_;
      e = binary("or", std::move(e), and_expr(), line);
    }
    return e;
  }
  ExprPtr and_expr() {
    ExprPtr e = not_expr();
    while (is_name("and")) {
      const int line = peek().line;
      ++pos_;
      e = binary("and", std::move(e), not_expr(), line);
    }
    return e;
  }
  ExprPtr not_expr() {
    if (is_name("not")) {
      auto u = make<Unary>();
      ++pos_;
      u->op = "not";
      u->operand = not_expr();
      return u;
    }
    return compare();
  }
  ExprPtr compare() {
    ExprPtr e = sum();
    for (;;) {
      const int line = peek().line;
      std::string op;
      for (const char* candidate : {"==", "!=", "<=", ">=", "<", ">"})
        if (is_op(candidate)) op = candidate;
      if (!op.empty()) {
        ++pos_;
      } else if (is_name("in")) {
        ++pos_;
        op = "in";
      } else if (is_name("not") && is_name("in", 1)) {
        pos_ += 2;
        op = "not in";
      } else {
        return e;
      }
      e = binary(op, std::move(e), sum(), line);
    }
  }
  ExprPtr sum() {
    ExprPtr e = concat();
    while (is_op("+") || is_op("-")) {
      const Token t = tokens_[pos_++];
      e = binary(t.text, std::move(e), concat(), t.line);
    }
    return e;
  }
  ExprPtr concat() {
    ExprPtr e = product();
    while (is_op("~")) {
      const int line = tokens_[pos_++].line;
      e = binary("~", std::move(e), product(), line);
    }
    return e;
  }
  ExprPtr product() {
    ExprPtr e = power();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      const Token t = tokens_[pos_++];
      e = binary(t.text, std::move(e), power(), t.line);
    }
    return e;
  }
  ExprPtr power() {
    ExprPtr e = unary();
    while (is_op("**")) {
      const int line = tokens_[pos_++].line;
      e = binary("**", std::move(e), unary(), line);
    }
    return e;
  }
  ExprPtr unary() {
    if (is_op("-") || is_op("+")) {
      auto u = make<Unary>();
      u->op = tokens_[pos_++].text;
      u->operand = unary();
      return u;
    }
    return postfix(primary());
  }

  ArgExprs call_args() {
    ArgExprs args;
    while (!accept_op(")")) {
      if (!args.positional.empty() || !args.named.empty()) expect_op(",");
      if (accept_op(")")) break;
      if (peek().type == Tok::name && is_op("=", 1)) {
        std::string key = expect_name();
        ++pos_;
        args.named.emplace_back(std::move(key), expression());
      } else {
        args.positional.push_back(expression());
      }
    }
    return args;
  }

  ExprPtr postfix(ExprPtr e) {
    for (;;) {
      if (is_op(".")) {
        auto a = make<Attribute>();
        ++pos_;
        a->object = std::move(e);
        a->name = expect_name();
        e = std::move(a);
      } else if (is_op("[")) {
        const int line = peek().line;
        ++pos_;
        ExprPtr parts[3];
        int colons = 0;
        while (!is_op("]")) {
          if (accept_op(":")) {
            if (++colons > 2) error("a slice has at most two ':'");
            continue;
          }
          if (parts[colons]) error("expected ':' or ']' in subscript");
          parts[colons] = expression();
        }
        ++pos_;
        if (colons == 0) {
          if (!parts[0]) error("empty subscript");
          auto s = std::make_unique<Subscript>();
          s->line = line;
          s->object = std::move(e);
          s->index = std::move(parts[0]);
          e = std::move(s);
        } else {
          auto s = std::make_unique<Slice>();
          s->line = line;
          s->object = std::move(e);
          s->start = std::move(parts[0]);
          s->stop = std::move(parts[1]);
          s->step = std::move(parts[2]);
          e = std::move(s);
        }
      } else if (is_op("(")) {
        auto c = make<Call>();
        ++pos_;
        c->callee = std::move(e);
        c->args = call_args();
        e = std::move(c);
      } else if (is_op("|")) {
        auto f = make<FilterExpr>();
        ++pos_;
        f->value = std::move(e);
        f->name = expect_name();
        if (!filters().count(f->name))
          where_.error(f->line, "filter '" + f->name + "' is not supported");
        if (accept_op("(")) f->args = call_args();
        e = std::move(f);
      } else if (is_name("is")) {
        auto t = make<TestExpr>();
        ++pos_;
        t->value = std::move(e);
        t->negated = accept_name("not");
        t->name = expect_name();
        auto found = tests().find(t->name);
        if (found == tests().end())
          where_.error(t->line, "test '" + t->name + "' is not supported");
        if (accept_op("(")) {
          ArgExprs args = call_args();
          t->args = std::move(args.positional);
        } else if (found->second.first > 0) {
          t->args.push_back(primary_with_postfix());
        }
        e = std::move(t);
      } else {
        return e;
      }
    }
  }

  ExprPtr primary() {
    const Token t = peek();
    if (t.type == Tok::string) {
      auto l = make<Literal>();
      std::string text;
      // Adjacent string literals concatenate, as in Python.
      while (peek().type == Tok::string) text += tokens_[pos_++].text;
      l->value = Value::of(text);
      return l;
    }
    if (t.type == Tok::integer || t.type == Tok::number) {
      auto l = make<Literal>();
      ++pos_;
      try {
        l->value = t.type == Tok::integer ? Value::of(static_cast<std::int64_t>(std::stoll(t.text)))
                                          : Value::of_number(std::stod(t.text));
      } catch (const std::exception&) {
        error("number '" + t.text + "' is out of range");
      }
      return l;
    }
    if (t.type == Tok::name) {
      ++pos_;
      auto l = make<Literal>();
      if (t.text == "true" || t.text == "True")
        l->value = Value::of(true);
      else if (t.text == "false" || t.text == "False")
        l->value = Value::of(false);
      else if (t.text == "none" || t.text == "None")
        l->value = Value::none();
      else {
        auto n = make<Name>();
        n->name = t.text;
        return n;
      }
      return l;
    }
    if (accept_op("(")) {
      ExprPtr first = expression();
      if (accept_op(")")) return first;
      auto tuple = make<ListExpr>();
      tuple->items.push_back(std::move(first));
      while (accept_op(",")) {
        if (is_op(")")) break;
        tuple->items.push_back(expression());
      }
      expect_op(")");
      return tuple;
    }
    if (accept_op("[")) {
      auto list = make<ListExpr>();
      while (!accept_op("]")) {
        if (!list->items.empty()) expect_op(",");
        if (accept_op("]")) break;
        list->items.push_back(expression());
      }
      return list;
    }
    if (accept_op("{")) {
      auto dict = make<DictExpr>();
      while (!accept_op("}")) {
        if (!dict->items.empty()) expect_op(",");
        if (accept_op("}")) break;
        ExprPtr key = expression();
        expect_op(":");
        dict->items.emplace_back(std::move(key), expression());
      }
      return dict;
    }
    error("expected an expression, found " + describe(t));
  }

  std::vector<Token> tokens_;
  std::size_t pos_ = 0;
  const Located& where_;
};

class TemplateParser {
 public:
  TemplateParser(std::vector<Piece> pieces, const Located& where)
      : pieces_(std::move(pieces)), where_(where) {}

  Body parse_all() {
    std::string end_tag;
    Body body = parse_body({}, end_tag);
    return body;
  }

 private:
  // Parses nodes until a statement whose keyword is in `ends`; returns it in `end_tag` with its
  // parser positioned after the keyword (in `end_parser_`).
  Body parse_body(const std::vector<std::string>& ends, std::string& end_tag) {
    Body body;
    while (index_ < pieces_.size()) {
      const Piece& piece = pieces_[index_++];
      if (piece.kind == Piece::Kind::text) {
        auto t = std::make_unique<Text>();
        t->line = piece.line;
        t->text = piece.content;
        body.push_back(std::move(t));
        continue;
      }
      auto parser =
          std::make_unique<ExprParser>(lex_expression(piece.content, piece.line, where_), where_);
      if (piece.kind == Piece::Kind::output) {
        auto o = std::make_unique<Output>();
        o->line = piece.line;
        o->value = parser->expression();
        parser->expect_end();
        body.push_back(std::move(o));
        continue;
      }
      const std::string keyword = parser->expect_name();
      if (std::find(ends.begin(), ends.end(), keyword) != ends.end()) {
        end_tag = keyword;
        end_parser_ = std::move(parser);
        return body;
      }
      body.push_back(statement(keyword, *parser, piece.line));
    }
    if (!ends.empty())
      where_.error(pieces_.empty() ? 1 : pieces_.back().line, "missing {% " + ends.back() + " %}");
    return body;
  }

  std::unique_ptr<ExprParser> take_end() { return std::move(end_parser_); }

  NodePtr statement(const std::string& keyword, ExprParser& p, int line) {
    if (keyword == "if") {
      auto node = std::make_unique<If>();
      node->line = line;
      ExprPtr condition = p.expression();
      p.expect_end();
      for (;;) {
        std::string end;
        Body body = parse_body({"elif", "else", "endif"}, end);
        node->branches.emplace_back(std::move(condition), std::move(body));
        auto ep = take_end();
        if (end == "elif") {
          condition = ep->expression();
          ep->expect_end();
          continue;
        }
        ep->expect_end();
        if (end == "else") {
          node->otherwise = parse_body({"endif"}, end);
          take_end()->expect_end();
        }
        return node;
      }
    }
    if (keyword == "for") {
      auto node = std::make_unique<For>();
      node->line = line;
      do node->targets.push_back(p.expect_name());
      while (p.accept_op(","));
      if (!p.accept_name("in")) p.error("expected 'in' in for loop");
      node->iterable = p.without_condition();
      if (p.accept_name("if")) node->filter = p.expression();
      if (p.is_name("recursive")) p.error("'recursive' loops are not supported");
      p.expect_end();
      std::string end;
      node->body = parse_body({"else", "endfor"}, end);
      take_end()->expect_end();
      if (end == "else") {
        node->otherwise = parse_body({"endfor"}, end);
        take_end()->expect_end();
      }
      return node;
    }
    if (keyword == "set") {
      auto node = std::make_unique<Set>();
      node->line = line;
      node->targets.push_back(p.expect_name());
      if (p.accept_op(".")) {
        node->attribute = p.expect_name();
      } else {
        while (p.accept_op(",")) node->targets.push_back(p.expect_name());
      }
      if (p.accept_op("=")) {
        node->value = p.expression();
        if (p.is_op(",")) {
          // `set a, b = x, y` builds a tuple.
          auto tuple = std::make_unique<ListExpr>();
          tuple->line = line;
          tuple->items.push_back(std::move(node->value));
          while (p.accept_op(",")) tuple->items.push_back(p.expression());
          node->value = std::move(tuple);
        }
        p.expect_end();
      } else {
        p.expect_end();
        if (node->targets.size() != 1 || !node->attribute.empty())
          p.error("a {% set %} block assigns one name");
        std::string end;
        node->block = parse_body({"endset"}, end);
        take_end()->expect_end();
      }
      return node;
    }
    if (keyword == "break" || keyword == "continue") {
      p.expect_end();
      auto node = std::make_unique<LoopControl>();
      node->line = line;
      node->flow = keyword == "break" ? Flow::break_loop : Flow::continue_loop;
      return node;
    }
    where_.error(line, "tag '{% " + keyword + " %}' is not supported");
  }

  std::vector<Piece> pieces_;
  std::size_t index_ = 0;
  const Located& where_;
  std::unique_ptr<ExprParser> end_parser_;
};

}  // namespace

struct Template::Impl {
  Located where;
  Body body;
};

Template Template::parse(std::string_view source, const std::string& origin) {
  auto impl = std::make_unique<Impl>();
  impl->where.origin = origin;
  TemplateParser parser(split_template(source, impl->where), impl->where);
  impl->body = parser.parse_all();
  return Template(std::move(impl));
}

Template::Template(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Template::Template(Template&&) noexcept = default;
Template& Template::operator=(Template&&) noexcept = default;
Template::~Template() = default;

std::string Template::render(const nlohmann::ordered_json& variables) const {
  if (!variables.is_object())
    fail(impl_->where.origin + ": template variables must be a JSON object");
  Context ctx;
  ctx.where = &impl_->where;
  ctx.scopes.push_back(globals());
  ctx.scopes.emplace_back();
  for (auto& [k, v] : variables.items()) ctx.assign(k, from_json(v));
  const Flow flow = run(impl_->body, ctx);
  if (flow != Flow::normal)
    fail(impl_->where.origin + ": {% break %} or {% continue %} outside a loop");
  return std::move(ctx.out);
}

}  // namespace telos::jinja
