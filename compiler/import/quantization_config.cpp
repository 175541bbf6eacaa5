#include "compiler/import/quantization_config.hpp"

#include <regex>
#include <string>

#include "support/error.hpp"

namespace telos::compiler {
namespace {

using nlohmann::json;

constexpr std::int64_t kBlock = 128;  // the one block size the hub's FP8 checkpoints use

// A list of module names (or null): modules_to_not_convert, ignore.
std::vector<std::string> name_list(const JsonObject& q, std::string_view key) {
  const json* list = q.get(key);
  if (!list) return {};
  if (!list->is_array())
    q.fail_field(key, "expected a list of module names, found " + json_kind(*list));
  std::vector<std::string> names;
  for (const json& n : *list) {
    if (!n.is_string()) q.fail_field(key, "expected module names (strings), found " + json_kind(n));
    names.push_back(n.get<std::string>());
  }
  return names;
}

void expect_string(const JsonObject& o, std::string_view key, const std::string& want,
                   bool required) {
  const std::optional<std::string> got = o.optional_string(key);
  if (!got && !required) return;
  if (!got) o.fail_field(key, "required field is missing (expected " + json_quote(want) + ")");
  if (*got != want)
    o.fail_field(key,
                 "unsupported value " + json_quote(*got) + " (expected " + json_quote(want) + ")");
}

WeightQuant read_fp8(const JsonObject& q) {
  WeightQuant w;
  w.scheme = WeightQuant::Scheme::kBlock;
  w.method = "fp8";
  w.scale_suffix = "weight_scale_inv";
  w.block_size = kBlock;
  expect_string(q, "fmt", "e4m3", false);
  expect_string(q, "activation_scheme", "dynamic", false);
  const json* block = q.get("weight_block_size");
  if (!block)
    q.fail_field("weight_block_size",
                 "required field is missing (per-tensor \"fp8\" checkpoints are not supported; "
                 "expected [128, 128])");
  if (*block != json::array({kBlock, kBlock}))
    q.fail_field("weight_block_size",
                 "unsupported block size " +
                     block->dump(-1, ' ', false, json::error_handler_t::replace) +
                     " (expected [128, 128])");
  w.not_converted = name_list(q, "modules_to_not_convert");
  w.match_substrings = true;
  return w;
}

// compressed-tensors' quantization arguments for weights or input activations.
void check_fp8_args(const JsonObject& args, const std::vector<std::string>& strategies) {
  if (args.integer("num_bits", 1, 64) != 8)
    args.fail_field("num_bits",
                    "only 8-bit floats are supported, found " + args.get("num_bits")->dump());
  expect_string(args, "type", "float", true);
  if (!args.boolean("symmetric", true))
    args.fail_field("symmetric", "only symmetric scales are supported");
  const std::string strategy = args.string("strategy");
  std::string list;
  for (const std::string& s : strategies) {
    if (s == strategy) return;
    list += (list.empty() ? "" : ", ") + json_quote(s);
  }
  args.fail_field("strategy",
                  "unsupported strategy " + json_quote(strategy) + " (expected " + list + ")");
}

WeightQuant read_compressed_tensors(const JsonObject& q) {
  WeightQuant w;
  w.scheme = WeightQuant::Scheme::kChannel;
  w.method = "compressed-tensors";
  w.scale_suffix = "weight_scale";
  expect_string(q, "format", "float-quantized", false);
  expect_string(q, "quantization_status", "compressed", false);
  if (q.has("kv_cache_scheme"))
    q.fail_field("kv_cache_scheme", "an FP8 KV cache from the checkpoint is not supported");
  const JsonObject groups = q.object("config_groups");
  if (groups.value().size() != 1)
    q.fail_field("config_groups",
                 "expected one group, found " + std::to_string(groups.value().size()));
  const std::string name = groups.value().begin().key();
  const JsonObject group = groups.object(name);
  const json* targets = group.get("targets");
  if (!targets || *targets != json::array({"Linear"}))
    group.fail_field("targets",
                     "expected [\"Linear\"], found " +
                         (targets ? targets->dump(-1, ' ', false, json::error_handler_t::replace)
                                  : std::string("nothing")));
  const JsonObject weights = group.object("weights");
  check_fp8_args(weights, {"channel", "tensor"});
  if (weights.boolean("dynamic", false))
    weights.fail_field("dynamic", "weights must carry their scales (expected false)");
  w.per_tensor = weights.string("strategy") == "tensor";
  if (group.has("input_activations")) {
    const JsonObject inputs = group.object("input_activations");
    check_fp8_args(inputs, {"token", "tensor"});
    if (!inputs.get("dynamic") || !inputs.get("dynamic")->is_boolean())
      inputs.fail_field("dynamic",
                        "expected true (scales computed at run time) or false (static "
                        "scales in the checkpoint)");
  }
  if (group.has("output_activations"))
    group.fail_field("output_activations", "quantized outputs are not supported");
  w.not_converted = name_list(q, "ignore");
  for (const std::string& n : w.not_converted) {
    if (!n.starts_with("re:")) continue;
    try {
      std::regex pattern(n.substr(3));
    } catch (const std::regex_error& e) {
      q.fail_field("ignore",
                   "entry " + json_quote(n) + " is not a regular expression: " + e.what());
    }
  }
  return w;
}

}  // namespace

bool WeightQuant::quantizes(const std::string& module) const {
  if (scheme == Scheme::kNone) return false;
  for (const std::string& n : not_converted) {
    if (n == module) return false;
    if (match_substrings && module.find(n) != std::string::npos) return false;
    if (!match_substrings && n.starts_with("re:") &&
        std::regex_match(module, std::regex(n.substr(3))))
      return false;
  }
  return true;
}

WeightQuant read_quantization_config(const JsonObject& config) {
  if (!config.has("quantization_config")) return {};
  const JsonObject q = config.object("quantization_config");
  const std::string method = q.string("quant_method");
  if (method == "fp8") return read_fp8(q);
  if (method == "compressed-tensors") return read_compressed_tensors(q);
  q.fail_field("quant_method", "unsupported quantization " + json_quote(method) +
                                   " (supported: \"fp8\" with 128x128 blocks, "
                                   "\"compressed-tensors\" FP8)");
}

}  // namespace telos::compiler
