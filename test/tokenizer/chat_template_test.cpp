// Unit tests of the Jinja subset and ChatTemplate. Expected strings follow Python Jinja2 as
// transformers configures it; the cases here are the ones where @huggingface/jinja (the reference
// in compare.mjs) prints or computes differently from Python, plus every refusal.
#include "executor/tokenizer/chat_template.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "executor/tokenizer/jinja.hpp"
#include "support/error.hpp"

namespace {

using nlohmann::ordered_json;

std::string render(const std::string& source, const ordered_json& vars = ordered_json::object()) {
  return telos::jinja::Template::parse(source, "t.jinja").render(vars);
}

void expect_error(const std::function<void()>& f, const std::vector<std::string>& fragments) {
  try {
    f();
    ADD_FAILURE() << "expected telos::Error";
  } catch (const telos::Error& e) {
    for (const std::string& fragment : fragments)
      EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos)
          << e.what() << "\nmissing: " << fragment;
  }
}

TEST(Jinja, PrintsValuesAsPython) {
  EXPECT_EQ(render("{{ true }} {{ false }} {{ none }} {{ undefined_name }}|"), "True False None |");
  EXPECT_EQ(render("{{ ['a', 1, 2.5, none, \"it's\"] }}"), "['a', 1, 2.5, None, \"it's\"]");
  EXPECT_EQ(render("{{ {'k': 'v'} }}"), "{'k': 'v'}");
  EXPECT_EQ(render("{{ 1.0 }} {{ 10 / 4 }} {{ 0.1 + 0.2 }}"), "1.0 2.5 0.30000000000000004");
}

TEST(Jinja, ArithmeticFollowsPython) {
  EXPECT_EQ(render("{{ -7 % 3 }} {{ 7 % -3 }} {{ -7 // 2 }} {{ 'ab' * 3 }} {{ 'a' < 'b' }}"),
            "2 -2 -4 ababab True");
  expect_error([] { render("{{ 1 // 0 }}"); }, {"t.jinja:1", "division"});
  expect_error([] { render("{{ 'a' + 1 }}"); },
               {"t.jinja:1", "cannot apply '+' to string and integer"});
}

TEST(Jinja, StringMethodsTakeCharacterSets) {
  EXPECT_EQ(render("[{{ '--x--'.strip('-') }}][{{ '\\n\\n  reply\\n'.lstrip('\\n') }}][{{ "
                   "'ab\\n\\n'.rstrip('\\n') }}]"),
            "[x][  reply\n][ab]");
  EXPECT_EQ(
      render("{{ 'a b  c'.split() }}{{ 'a,b'.split(',', 1) }}{{ '  x '.split(' ') | length }}"),
      "['a', 'b', 'c']['a', 'b']4");
  EXPECT_EQ(render("{{ 'straße'.upper() }} {{ 'ÉCOLE'.lower() }} {{ 'hello wORLD'.title() }}"),
            "STRASSE école Hello World");
}

TEST(Jinja, FiltersAndTestsBeyondTheReference) {
  EXPECT_EQ(render("{{ ['a', 'b', 'c'] | reject('equalto', 'b') | join }}{{ [1, 2, 3, 4] | "
                   "select('odd') | join(',') }}"),
            "ac1,3");
  EXPECT_EQ(render("{{ 9 is divisibleby(3) }}{{ 9 is divisibleby 4 }}{{ 'x' is in ['x'] }}"),
            "TrueFalseTrue");
  EXPECT_EQ(render("{% for c in 'héllo' %}{{ c }}.{% endfor %}"), "h.é.l.l.o.");
  EXPECT_EQ(render("{{ {'b': 1, 'a': [1, {'c': 'é\\u2028'}]} | tojson(indent=2) }}"),
            "{\n  \"b\": 1,\n  \"a\": [\n    1,\n    {\n      \"c\": \"é\u2028\"\n    }\n  ]\n}");
}

TEST(Jinja, WhitespaceControlMatchesTransformersSettings) {
  // trim_blocks removes the newline after a block tag; lstrip_blocks the indentation before it;
  // a single trailing newline of the template goes (keep_trailing_newline=False).
  EXPECT_EQ(render("a\n  {% if true %}\n  b\n  {% endif %}\nc\n"), "a\n  b\nc");
  EXPECT_EQ(render("a  {%- if true -%}  b  {%- endif -%}  c"), "abc");
  EXPECT_EQ(render("x {{- ' y ' -}} z"), "x y z");
  // {%+ keeps the indentation lstrip_blocks would remove.
  EXPECT_EQ(render("  {%+ if true %}k{% endif %}"), "  k");
}

TEST(Jinja, ScopingOfSetInLoopsAndNamespaces) {
  EXPECT_EQ(
      render("{% set x = 1 %}{% for i in [1, 2] %}{% set x = x + i %}{{ x }}{% endfor %}{{ x }}"),
      "231");
  EXPECT_EQ(render("{% set ns = namespace(x=1) %}{% for i in [1, 2] %}{% set ns.x = ns.x + i %}{% "
                   "endfor %}{{ ns.x }}"),
            "4");
  expect_error([] { render("{% set y = 1 %}\n{% set y.z = 2 %}"); },
               {"t.jinja:2", "'y' is not a namespace()"});
}

TEST(Jinja, UnsupportedConstructsAreRefusedAtParseTime) {
  expect_error([] { telos::jinja::Template::parse("ok\n{{ x | wordwrap }}", "t.jinja"); },
               {"t.jinja:2", "filter 'wordwrap' is not supported"});
  expect_error([] { telos::jinja::Template::parse("{% macro m() %}{% endmacro %}", "t.jinja"); },
               {"t.jinja:1", "tag '{% macro %}' is not supported"});
  expect_error([] { telos::jinja::Template::parse("{{ x is prime }}", "t.jinja"); },
               {"test 'prime' is not supported"});
  expect_error([] { telos::jinja::Template::parse("{% if x %}never closed", "t.jinja"); },
               {"missing {% endif %}"});
  expect_error([] { telos::jinja::Template::parse("a\n\n{{ x ", "t.jinja"); },
               {"t.jinja:3", "never closed by '}}'"});
  expect_error([] { telos::jinja::Template::parse("{{ 'abc }}", "t.jinja"); }, {"never closed"});
  expect_error([] { telos::jinja::Template::parse("{{ x $ y }}", "t.jinja"); },
               {"unexpected character '$'"});
  expect_error([] { telos::jinja::Template::parse("{{ (x }}", "t.jinja"); }, {"expected ')'"});
  expect_error([] { telos::jinja::Template::parse("{{ '\\U00110000' }}", "t.jinja"); },
               {"not a Unicode scalar value"});
  expect_error(
      [] { telos::jinja::Template::parse("{% for x in y recursive %}{% endfor %}", "t.jinja"); },
      {"recursive"});
}

TEST(Jinja, RuntimeErrorsNameTheLine) {
  expect_error(
      [] { render("a\n{{ raise_exception('Only user and assistant roles are supported') }}"); },
      {"t.jinja:2", "Only user and assistant roles are supported"});
  expect_error([] { render("{{ no_such_function(1) }}"); }, {"'no_such_function' is undefined"});
  expect_error([] { render("{{ missing.attribute }}"); }, {"'missing' is undefined", ".attribute"});
  expect_error(
      [] {
        render("{{ messages[0].role }}", {{"messages", ordered_json::array()}});
      },
      {"'messages[0]' is undefined", ".role"});
  expect_error([] { render("{% for x in 5 %}{% endfor %}"); }, {"integer is not iterable"});
  expect_error([] { render("{{ 'a' in 5 }}"); }, {"not a container"});
  expect_error([] { render("{% for i in range(100000000) %}{% endfor %}"); }, {"too long"});
  EXPECT_EQ(render("{{ range(5, 0, -2) | join }}{{ range(0) | length }}"), "5310");
}

// `depth` lists, each holding the next, built without recursion.
ordered_json deep_list(std::size_t depth) {
  ordered_json value = ordered_json::array();
  for (std::size_t i = 1; i < depth; ++i) {
    ordered_json outer = ordered_json::array();
    outer.push_back(std::move(value));
    value = std::move(outer);
  }
  return value;
}

TEST(Jinja, DeepValuesAreRefusedNotOverflowed) {
  const std::string limit = "nested more than " + std::to_string(telos::jinja::kMaxValueDepth);
  // At the limit every walk works; the conversion from JSON refuses one more level.
  const ordered_json at_limit = deep_list(telos::jinja::kMaxValueDepth);
  EXPECT_EQ(render("{{ x | tojson }}", {{"x", at_limit}}), at_limit.dump(-1, ' '));
  EXPECT_EQ(render("{{ x == x }}{{ x | length }}", {{"x", at_limit}}), "True1");
  expect_error(
      [] {
        render("{{ x }}", {{"x", deep_list(telos::jinja::kMaxValueDepth + 1)}});
      },
      {limit});
  // Deep enough to overflow the stack of a recursive conversion.
  expect_error([] { render("{{ x }}", {{"x", deep_list(100000)}}); }, {limit});
  // A namespace that holds itself: printing it is "<Namespace>", but tojson and == walk into it.
  const std::string cycle =
      "{% set ns = namespace(x=none) %}{% set ns.x = ns %}{% set d = {'ns': ns} %}";
  EXPECT_EQ(render(cycle + "{{ ns }}"), "<Namespace>");
  expect_error([&] { render(cycle + "{{ d | tojson }}"); }, {"t.jinja:1", limit});
  expect_error([&] { render(cycle + "{{ d == {'ns': ns} }}"); }, {"t.jinja:1", limit});
  expect_error([&] { render(cycle + "{{ d in [d] }}"); }, {"t.jinja:1", limit});
}

TEST(Jinja, IntegersBeyondInt64KeepTheirMagnitude) {
  EXPECT_EQ(render("{{ x }} {{ y }}", {{"x", ordered_json::parse("18446744073709551615")},
                                       {"y", ordered_json::parse("9223372036854775807")}}),
            "1.8446744073709552e+19 9223372036854775807");
}

TEST(ChatTemplate, ExtraVariablesCannotReplaceWhatRenderSets) {
  const telos::ChatTemplate chat = telos::ChatTemplate::from_config_json(
      {{"chat_template", "{{ messages | length }}{{ x }}"}}, "cfg.json");
  const ordered_json messages = {{{"role", "user"}, {"content", "hi"}}};
  EXPECT_EQ(chat.render(messages, false, {{"x", "!"}}), "1!");
  for (const char* name : {"messages", "add_generation_prompt", "bos_token", "eos_token",
                           "raise_exception", "namespace", "range", "strftime_now"}) {
    EXPECT_TRUE(telos::ChatTemplate::is_reserved_variable(name)) << name;
    expect_error(
        [&] {
          chat.render(messages, false, {{name, ordered_json::array()}});
        },
        {"cfg.json", std::string("'") + name + "' is reserved"});
  }
  EXPECT_FALSE(telos::ChatTemplate::is_reserved_variable("tools"));
  EXPECT_FALSE(telos::ChatTemplate::is_reserved_variable("enable_thinking"));
}

TEST(ChatTemplate, ReadsConfigForms) {
  const ordered_json config = {
      {"bos_token", {{"content", "<s>"}, {"lstrip", false}}},
      {"eos_token", "</s>"},
      {"chat_template",
       {{{"name", "tool_use"}, {"template", "tools"}},
        {{"name", "default"},
         {"template",
          "{{ bos_token }}{% for m in messages %}[{{ m.role }}:{{ m.content }}]{% endfor %}"
          "{% if add_generation_prompt %}{{ greeting }}{% endif %}{{ eos_token }}"}}}}};
  const telos::ChatTemplate chat = telos::ChatTemplate::from_config_json(config, "cfg.json");
  EXPECT_EQ(chat.bos_token(), "<s>");
  EXPECT_EQ(chat.eos_token(), "</s>");
  const ordered_json messages = {{{"role", "user"}, {"content", "hi"}}};
  EXPECT_EQ(chat.render(messages, false), "<s>[user:hi]</s>");
  EXPECT_EQ(chat.render(messages, true, {{"greeting", "go"}}), "<s>[user:hi]go</s>");
}

TEST(ChatTemplate, ConfigErrorsNameTheField) {
  expect_error(
      [] {
        telos::ChatTemplate::from_config_json({{"eos_token", "x"}}, "cfg.json");
      },
      {"cfg.json", "chat_template", "missing"});
  expect_error(
      [] {
        telos::ChatTemplate::from_config_json({{"chat_template", 3}}, "cfg.json");
      },
      {"cfg.json", "chat_template", "must be a string"});
  expect_error(
      [] {
        telos::ChatTemplate::from_config_json({{"chat_template", "x"}, {"bos_token", 3}},
                                              "cfg.json");
      },
      {"cfg.json", "bos_token"});
  expect_error(
      [] {
        telos::ChatTemplate::from_config_json({{"chat_template", "{% if %}"}}, "cfg.json");
      },
      {"cfg.json: chat_template:1", "expected an expression"});
  expect_error(
      [] { telos::ChatTemplate::from_tokenizer_config("/nonexistent/tokenizer_config.json"); },
      {"/nonexistent/tokenizer_config.json", "cannot open"});
  const telos::ChatTemplate chat =
      telos::ChatTemplate::from_config_json({{"chat_template", "x"}}, "cfg.json");
  expect_error([&] { chat.render(ordered_json::object(), true); }, {"messages must be an array"});
}

TEST(ChatTemplate, ReadsChatTemplateJinjaBesideTheConfig) {
  const std::filesystem::path dir =
      std::filesystem::path(testing::TempDir()) / ("chat_template_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "tokenizer_config.json") << R"({"eos_token": "<|im_end|>"})";
  expect_error(
      [&] { telos::ChatTemplate::from_tokenizer_config((dir / "tokenizer_config.json").string()); },
      {"tokenizer_config.json", "no chat_template.jinja"});
  EXPECT_FALSE(telos::ChatTemplate::load_if_present((dir / "tokenizer_config.json").string()));
  EXPECT_FALSE(telos::ChatTemplate::load_if_present((dir / "absent.json").string()));
  std::ofstream(dir / "chat_template.jinja")
      << "{% for m in messages %}{{ m.content }}{{ eos_token }}{% endfor %}\n";
  const auto chat =
      telos::ChatTemplate::from_tokenizer_config((dir / "tokenizer_config.json").string());
  EXPECT_EQ(chat.render(ordered_json::array({{{"role", "user"}, {"content", "hi"}}}), false),
            "hi<|im_end|>");
  EXPECT_TRUE(telos::ChatTemplate::load_if_present((dir / "tokenizer_config.json").string()));
  std::ofstream(dir / "broken.json") << R"({"chat_template": "{% if %}"})";
  expect_error([&] { telos::ChatTemplate::load_if_present((dir / "broken.json").string()); },
               {"broken.json: chat_template:1"});
  std::filesystem::remove_all(dir);
}

}  // namespace
