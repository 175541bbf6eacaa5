#pragma once
// What Jinja templates can call and apply: Python's str and dict methods, item and attribute
// access, the filters, tests and globals that transformers' chat templates use, and the
// operators. Internal to executor/tokenizer.
#include <map>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "executor/tokenizer/jinja_value.hpp"

namespace telos::jinja {

// obj.name: Jinja tries the attribute (here: a method) first, then the item.
Value get_attribute(const Value& obj, const std::string& name);
// obj[key]: the item first, then the attribute.
Value get_item(const Value& obj, const Value& key);
Value slice(const Value& obj, const Value& start, const Value& stop, const Value& step);

using TestFn = std::function<bool(const Value&, const std::vector<Value>&)>;
// Name -> (number of arguments, test).
const std::map<std::string, std::pair<int, TestFn>>& tests();
bool run_test(const std::string& name, const Value& v, const std::vector<Value>& args);

using FilterFn = std::function<Value(const Value&, const Args&)>;
const std::map<std::string, FilterFn>& filters();

// Globals transformers puts in every chat template's environment.
std::unordered_map<std::string, Value> globals();

// Binary operators with Python's semantics: + - * / // % ** ~ on numbers, strings and lists.
Value arithmetic(const std::string& op, const Value& a, const Value& b);
bool contains(const Value& container, const Value& item);  // `item in container`
bool less(const Value& a, const Value& b);

}  // namespace telos::jinja
