#include "executor/tokenizer/jinja_builtins.hpp"

#include <unicode/ucasemap.h>
#include <unicode/uchar.h>

#include <algorithm>
#include <cmath>
#include <ctime>

#include "executor/tokenizer/utf8.hpp"
#include "support/error.hpp"

namespace telos::jinja {
namespace {

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

std::int64_t normalize_index(std::int64_t i, std::size_t size) {
  return i < 0 ? i + static_cast<std::int64_t>(size) : i;
}

std::int64_t test_int(const std::vector<Value>& args, const char* test) {
  if (args.empty()) fail(std::string("test '") + test + "' needs an argument");
  return need_int(&args[0], test);
}

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

}  // namespace

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
         return Value::of(to_json(v, indent && indent->kind != K::none
                                         ? static_cast<int>(need_int(indent, "tojson"))
                                         : 0));
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

}  // namespace telos::jinja
