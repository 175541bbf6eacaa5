#include "support/launch_args.hpp"

#include <vector>

#include "support/error.hpp"

namespace telos {

TensorMapArg parse_tensor_map_arg(const std::string& arg, const std::string& where) {
  auto bad = [&](const std::string& what) -> void {
    fail(where + ": " + arg + ": " + what +
         " (expected tmap:<w:NAME|buf:NAME|kv:L>:ROWS:COLS:BOX_ROWS:BOX_COLS)");
  };
  if (arg.rfind("tmap:", 0) != 0) bad("not a tensor-map argument");
  // The four sizes are the last four fields; the target is everything between.
  std::vector<std::string> fields;
  std::size_t end = arg.size();
  for (int i = 0; i < 4; ++i) {
    const std::size_t colon = end == 0 ? std::string::npos : arg.rfind(':', end - 1);
    if (colon == std::string::npos || colon < 5) bad("too few fields");
    fields.insert(fields.begin(), arg.substr(colon + 1, end - colon - 1));
    end = colon;
  }
  const std::string target = arg.substr(5, end - 5);
  if (target.rfind("w:", 0) != 0 && target.rfind("buf:", 0) != 0 && target.rfind("kv:", 0) != 0)
    bad("the target must be w:NAME, buf:NAME or kv:L");
  if (target == "w:" || target == "buf:" || target == "kv:") bad("the target names nothing");
  TensorMapArg t;
  t.target = target;
  std::int64_t v[4];
  for (int i = 0; i < 4; ++i) {
    const std::string& x = fields[static_cast<std::size_t>(i)];
    // At most 10 digits, then below 2^31: the products the checks form stay inside 64 bits.
    if (x.empty() || x.size() > 10 || x.find_first_not_of("0123456789") != std::string::npos)
      bad("\"" + x + "\" is not a positive integer");
    v[i] = std::stoll(x);
    if (v[i] <= 0 || v[i] > 0x7fffffff) bad("sizes must be positive and below 2^31");
  }
  t.rows = v[0];
  t.cols = v[1];
  if (t.cols % 8 != 0) bad("COLS must be a multiple of 8 (rows of 16-byte multiples)");
  if (v[2] > 256) bad("BOX_ROWS must be 1..256");
  if (v[3] != 64 && v[3] != 32 && v[3] != 128)
    bad("BOX_COLS must be 64 (bf16), 32 (f32) or 128 (bytes): one 128-byte swizzle span");
  t.box_rows = static_cast<int>(v[2]);
  t.box_cols = static_cast<int>(v[3]);
  t.elem_bytes = 128 / t.box_cols;
  return t;
}

WeightImageArg parse_weight_image_arg(const std::string& arg, const std::string& where) {
  const bool map = arg.rfind("timg:", 0) == 0;
  auto bad = [&](const std::string& what) -> void {
    fail(where + ": " + arg + ": " + what +
         (map ? " (expected timg:NAME:BN:HALVES:BOX)" : " (expected wimg:NAME:BN:HALVES)"));
  };
  if (!map && arg.rfind("wimg:", 0) != 0) bad("not a slot-image argument");
  // The numbers are the last two (timg: three) fields; the name is what comes before them.
  std::vector<std::string> numbers;
  std::size_t end = arg.size();
  for (int i = 0; i < (map ? 3 : 2); ++i) {
    const std::size_t c = end <= 5 ? std::string::npos : arg.rfind(':', end - 1);
    if (c == std::string::npos || c < 5) bad("too few fields");
    numbers.insert(numbers.begin(), arg.substr(c + 1, end - c - 1));
    end = c;
  }
  WeightImageArg img;
  img.weight = arg.substr(5, end - 5);
  if (img.weight.empty()) bad("the weight names nothing");
  for (const std::string& x : numbers)
    if (x.empty() || x.size() > 3 || x.find_first_not_of("0123456789") != std::string::npos)
      bad("\"" + x + "\" is not a positive integer");
  img.bn = std::stoi(numbers[0]);
  img.halves = std::stoi(numbers[1]);
  if (map) img.box_rows = std::stoi(numbers[2]);
  if (img.bn <= 0 || img.halves <= 0 || (map && img.box_rows <= 0)) bad("sizes must be positive");
  return img;
}

std::string WeightImageArg::key() const {
  return "wimg:" + weight + ":" + std::to_string(bn) + ":" + std::to_string(halves);
}

}  // namespace telos
