// config.json -> ModelSpec. Hugging Face configs carry many fields we do not need (dropout,
// initializer ranges); those are ignored. Every field that changes the forward pass is either
// understood here or refused by name, so a model we cannot run exactly is never compiled.
#include <cmath>
#include <limits>
#include <string>

#include "compiler/import/checkpoint.hpp"
#include "compiler/import/json_fields.hpp"
#include "compiler/import/quantization_config.hpp"
#include "support/artifact_limits.hpp"
#include "support/error.hpp"

namespace telos::compiler {
namespace {

using nlohmann::json;

constexpr double kInf = std::numeric_limits<double>::infinity();

struct Family {
  const char* architecture;
  const char* family;
  bool qkv_bias;
  bool qk_norm;
};

constexpr Family kFamilies[] = {
    {"LlamaForCausalLM", "llama", false, false},
    {"MistralForCausalLM", "mistral", false, false},
    {"Qwen2ForCausalLM", "qwen2", true, false},
    {"Qwen3ForCausalLM", "qwen3", false, true},
};

const Family& find_family(const JsonObject& config) {
  const json* architectures = config.get("architectures");
  if (!architectures) config.fail_field("architectures", "required field is missing");
  if (!architectures->is_array() || architectures->size() != 1 ||
      !(*architectures)[0].is_string()) {
    config.fail_field(
        "architectures",
        "expected an array of one string, found " +
            (architectures->is_array() ? "an array of " + std::to_string(architectures->size())
                                       : json_kind(*architectures)));
  }
  const std::string name = (*architectures)[0].get<std::string>();
  for (const Family& f : kFamilies) {
    if (name == f.architecture) return f;
  }
  config.fail_field("architectures",
                    "unsupported architecture " + json_quote(name) +
                        " (supported: LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, "
                        "Qwen3ForCausalLM)");
}

// One RoPE description: either the legacy `rope_scaling` object (with the theta beside it in
// `rope_theta`) or transformers 5's `rope_parameters` (theta inside). Older legacy configs name
// the type "type" rather than "rope_type".
RopeSpec read_rope(const JsonObject& rope, double theta) {
  std::string type = "default";
  if (auto t = rope.optional_string("rope_type")) {
    type = *t;
  } else if (auto legacy = rope.optional_string("type")) {
    type = *legacy;
  }
  const std::string type_field = rope.has("rope_type") ? "rope_type" : "type";
  if (type != "default" && type != "llama3") {
    rope.fail_field(type_field, "unsupported RoPE type " + json_quote(type) +
                                    " (supported: \"default\", \"llama3\")");
  }
  // Partial rotary embedding changes which dimensions rotate; only the full rotation is built.
  if (auto partial = rope.optional_number("partial_rotary_factor", 0.0, kInf);
      partial && *partial != 1.0) {
    rope.fail_field("partial_rotary_factor", "only 1.0 (full rotation) is supported, found " +
                                                 rope.get("partial_rotary_factor")->dump());
  }
  RopeSpec spec;
  spec.type = type;
  spec.theta = theta;
  if (type == "llama3") {
    spec.factor = rope.number("factor", 0.0, kInf);
    spec.low_freq_factor = rope.number("low_freq_factor", 0.0, kInf);
    spec.high_freq_factor = rope.number("high_freq_factor", 0.0, kInf);
    spec.original_max_position_embeddings =
        rope.integer("original_max_position_embeddings", 1, limits::kMaxPositions);
    // llama3 smooths between the two wavelength thresholds, dividing by their difference.
    if (!(spec.high_freq_factor > spec.low_freq_factor)) {
      rope.fail_field("high_freq_factor", "must be greater than low_freq_factor (" +
                                              rope.get("low_freq_factor")->dump() + "), found " +
                                              rope.get("high_freq_factor")->dump());
    }
  }
  return spec;
}

RopeSpec read_rope_config(const JsonObject& config) {
  const std::optional<double> legacy_theta = config.optional_number("rope_theta", 0.0, kInf);
  std::optional<RopeSpec> legacy;
  if (config.has("rope_scaling")) {
    legacy = read_rope(config.object("rope_scaling"), legacy_theta.value_or(10000.0));
  } else if (legacy_theta) {
    legacy = RopeSpec{};
    legacy->theta = *legacy_theta;
  }
  if (!config.has("rope_parameters")) return legacy.value_or(RopeSpec{});

  const JsonObject params = config.object("rope_parameters");
  RopeSpec spec = read_rope(params, params.number("rope_theta", 0.0, kInf));
  // A config may carry both forms; they must then describe the same rotation.
  if (legacy_theta && *legacy_theta != spec.theta) {
    config.fail_field("rope_theta", "disagrees with rope_parameters.rope_theta (" +
                                        config.get("rope_theta")->dump() + " vs " +
                                        params.get("rope_theta")->dump() + ")");
  }
  if (config.has("rope_scaling") && legacy->type != spec.type) {
    config.fail_field("rope_scaling", "RoPE type " + json_quote(legacy->type) +
                                          " disagrees with rope_parameters (" +
                                          json_quote(spec.type) + ")");
  }
  return spec;
}

std::vector<std::int64_t> read_eos(const JsonObject& config, std::int64_t vocab) {
  const json* eos = config.get("eos_token_id");
  if (!eos) return {};
  const std::string field = config.where() + ": field " + json_quote("eos_token_id");
  if (eos->is_array()) {
    std::vector<std::int64_t> ids;
    for (std::size_t i = 0; i < eos->size(); ++i) {
      ids.push_back(json_integer(
          (*eos)[i], 0, vocab - 1,
          config.where() + ": field " + json_quote("eos_token_id[" + std::to_string(i) + "]")));
    }
    return ids;
  }
  if (!eos->is_number_integer()) {
    fail(field + ": expected a token id or a list of token ids, found " + json_kind(*eos));
  }
  return {json_integer(*eos, 0, vocab - 1, field)};
}

void refuse_sliding_window(const JsonObject& config, const ModelSpec& spec) {
  if (spec.family == "mistral") {
    // Mistral applies its window whenever one is set; a window at least as long as the context
    // never masks anything, so it is the same model as full attention.
    if (auto window =
            config.optional_integer("sliding_window", 1, std::numeric_limits<std::int64_t>::max());
        window && *window < spec.max_position_embeddings) {
      config.fail_field("sliding_window", "sliding-window attention is not supported: window " +
                                              std::to_string(*window) +
                                              " is shorter than max_position_embeddings (" +
                                              std::to_string(spec.max_position_embeddings) + ")");
    }
    return;
  }
  // Qwen2/Qwen3 keep `sliding_window` as a value but apply it only with use_sliding_window.
  if (config.boolean("use_sliding_window", false)) {
    config.fail_field("use_sliding_window", "sliding-window attention is not supported");
  }
  if (const json* layer_types = config.get("layer_types")) {
    if (!layer_types->is_array()) {
      config.fail_field("layer_types",
                        "expected an array of strings, found " + json_kind(*layer_types));
    }
    for (const json& t : *layer_types) {
      if (!t.is_string() || t.get<std::string>() != "full_attention") {
        config.fail_field("layer_types",
                          "only \"full_attention\" layers are supported, found " +
                              t.dump(-1, ' ', false, json::error_handler_t::replace));
      }
    }
  }
}

}  // namespace

ModelSpec spec_from_config(const json& config_json, const std::string& where) {
  const JsonObject config(config_json, where);
  const Family& family = find_family(config);

  ModelSpec spec;
  spec.architecture = family.architecture;
  spec.family = family.family;
  spec.qkv_bias = family.qkv_bias;
  spec.qk_norm = family.qk_norm;

  // The bounds every tool shares (support/artifact_limits.hpp): a config beyond them is refused
  // here, before anything is sized from it.
  spec.vocab_size = config.integer("vocab_size", 1, limits::kMaxVocabSize);
  spec.hidden_size = config.integer("hidden_size", 1, limits::kMaxHiddenSize);
  spec.intermediate_size = config.integer("intermediate_size", 1, limits::kMaxIntermediateSize);
  spec.num_layers = config.integer("num_hidden_layers", 1, limits::kMaxLayers);
  spec.num_heads = config.integer("num_attention_heads", 1, limits::kMaxHeads);
  spec.num_kv_heads =
      config.optional_integer("num_key_value_heads", 1, limits::kMaxHeads).value_or(spec.num_heads);
  spec.max_position_embeddings =
      config.integer("max_position_embeddings", 1, limits::kMaxPositions);
  spec.rms_norm_eps = config.number("rms_norm_eps", 0.0, 1.0);

  if (spec.num_heads % spec.num_kv_heads != 0) {
    config.fail_field("num_key_value_heads", std::to_string(spec.num_kv_heads) +
                                                 " does not divide num_attention_heads (" +
                                                 std::to_string(spec.num_heads) + ")");
  }
  if (auto head_dim = config.optional_integer("head_dim", 1, limits::kMaxHeadDim)) {
    spec.head_dim = *head_dim;
  } else {
    if (spec.hidden_size % spec.num_heads != 0) {
      config.fail_field("num_attention_heads",
                        std::to_string(spec.num_heads) + " does not divide hidden_size (" +
                            std::to_string(spec.hidden_size) + ") and no head_dim is given");
    }
    spec.head_dim = spec.hidden_size / spec.num_heads;
    if (spec.head_dim > limits::kMaxHeadDim) {
      config.fail_field("num_attention_heads",
                        "the head dimension hidden_size / num_attention_heads is " +
                            std::to_string(spec.head_dim) + ", above " +
                            std::to_string(limits::kMaxHeadDim));
    }
  }
  // Rotate-half RoPE pairs dimension i with i + D/2.
  if (spec.head_dim % 2 != 0) {
    config.fail_field(
        config.has("head_dim") ? "head_dim" : "num_attention_heads",
        "the head dimension must be even for RoPE, found " + std::to_string(spec.head_dim));
  }

  if (auto act = config.optional_string("hidden_act"); act && *act != "silu") {
    config.fail_field("hidden_act",
                      "unsupported activation " + json_quote(*act) + " (supported: \"silu\")");
  }
  // Qwen2 always has the bias and its config has no switch for it; elsewhere it is refused.
  if (!family.qkv_bias && config.boolean("attention_bias", false)) {
    config.fail_field("attention_bias",
                      "attention projection biases are not supported for " + spec.architecture);
  }
  if (config.boolean("mlp_bias", false)) {
    config.fail_field("mlp_bias", "MLP biases are not supported");
  }
  if (config.boolean("use_mrope", false)) {
    config.fail_field("use_mrope", "multimodal RoPE is not supported");
  }

  spec.rope = read_rope_config(config);
  refuse_sliding_window(config, spec);

  spec.tie_word_embeddings = config.boolean("tie_word_embeddings", false);
  spec.bos_token_id = config.optional_integer("bos_token_id", 0, spec.vocab_size - 1).value_or(-1);
  spec.eos_token_ids = read_eos(config, spec.vocab_size);
  spec.quant = read_quantization_config(config);
  return spec;
}

}  // namespace telos::compiler
