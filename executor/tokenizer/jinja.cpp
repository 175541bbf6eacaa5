#include "executor/tokenizer/jinja.hpp"

#include <algorithm>
#include <cctype>
#include <unordered_map>
#include <vector>

#include "executor/tokenizer/jinja_builtins.hpp"
#include "executor/tokenizer/jinja_value.hpp"
#include "executor/tokenizer/utf8.hpp"
#include "support/error.hpp"

namespace telos::jinja {
namespace {

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

bool is_global(std::string_view name) {
  return globals().count(std::string(name)) > 0;
}

}  // namespace telos::jinja
