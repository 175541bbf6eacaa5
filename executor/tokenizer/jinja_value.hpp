#pragma once
// Values of the Jinja interpreter (jinja.cpp) and the Python semantics they follow: printing
// (str/repr), truthiness, equality, length and iteration, and tojson as transformers defines it.
// Internal to executor/tokenizer.
#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace telos::jinja {

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

const char* kind_name(const Value& v);
Value from_json(const nlohmann::ordered_json& j);

// Python strings index, slice and strip by code point; invalid UTF-8 reads as U+FFFD.
std::vector<std::uint32_t> code_points(std::string_view s);
std::string from_code_points(const std::vector<std::uint32_t>& cps, std::size_t begin,
                             std::size_t end);

std::string str(const Value& v);   // what {{ }} prints
std::string repr(const Value& v);  // how a value prints inside a list or dict
// transformers' tojson: json.dumps(x, ensure_ascii=False, indent=indent).
std::string to_json(const Value& v, int indent);
bool truthy(const Value& v);
bool equal(const Value& a, const Value& b);
std::size_t length_of(const Value& v);
// The items a for loop or filter walks: list elements, dict keys, string characters.
List iterate(const Value& v);

}  // namespace telos::jinja
