#pragma once
// A small interpreter for the Jinja2 subset that Hugging Face chat templates use, configured as
// transformers configures Jinja (trim_blocks, lstrip_blocks, loop controls, raise_exception,
// namespace, tojson with Python's separators). Syntax it does not implement (an unknown tag,
// filter or test) is refused when the template is parsed, naming the construct and the line, so
// a model whose template we would render wrongly is caught at load time.
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace telos::jinja {

// Lists and dicts nest at most this deep in any value a walk reaches (the conversion of the
// variables from JSON, printing, tojson, equality); deeper ones are refused with an Error naming
// the limit instead of exhausting the stack. Request data is bounded far below this by the
// server; a template that nests values in a loop, or a namespace that holds itself, meets it.
inline constexpr int kMaxValueDepth = 128;

class Template {
 public:
  // Throws Error "ORIGIN:LINE: ..." for syntax errors and unsupported constructs.
  static Template parse(std::string_view source, const std::string& origin);

  Template(Template&&) noexcept;
  Template& operator=(Template&&) noexcept;
  ~Template();

  // Renders with `variables` (an object) as the global names. Key order of objects is kept, as
  // Python dicts keep it, so tojson prints tool schemas the way the model saw them in training.
  // Runtime errors (raise_exception, a type error) throw Error naming the origin and line.
  std::string render(const nlohmann::ordered_json& variables) const;

 private:
  struct Impl;
  explicit Template(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Whether `name` is a function every template's environment defines (raise_exception, namespace,
// range, strftime_now), which a variable of the same name would hide.
bool is_global(std::string_view name);

}  // namespace telos::jinja
