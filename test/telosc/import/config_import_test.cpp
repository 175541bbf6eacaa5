// spec_from_config: the real configs of the supported families, both RoPE forms, the defaults
// HF leaves implicit, and one refusal per kind of unsupported or broken field.
#include <gtest/gtest.h>

#include <string>

#include "compiler/import/checkpoint.hpp"
#include "compiler/import/json_fields.hpp"
#include "support/error.hpp"

namespace telos::compiler {
namespace {

using nlohmann::json;

json real_config(const std::string& name) {
  return read_json_file(std::string(TELOS_SOURCE_DIR) + "/test/telosc/Inputs/configs/" + name +
                        "/config.json");
}

// The smallest config the importer accepts; tests add or change one field at a time.
json minimal_llama() {
  return {{"architectures", {"LlamaForCausalLM"}},
          {"vocab_size", 512},
          {"hidden_size", 128},
          {"intermediate_size", 256},
          {"num_hidden_layers", 2},
          {"num_attention_heads", 4},
          {"max_position_embeddings", 256},
          {"rms_norm_eps", 1e-5}};
}

std::string error_of(const json& config) {
  try {
    spec_from_config(config, "cfg.json");
  } catch (const Error& e) {
    return e.what();
  }
  return "(accepted)";
}

TEST(ConfigImport, Llama32_1B) {
  const ModelSpec s = spec_from_config(real_config("Llama-3.2-1B"), "config.json");
  EXPECT_EQ(s.architecture, "LlamaForCausalLM");
  EXPECT_EQ(s.family, "llama");
  EXPECT_EQ(s.vocab_size, 128256);
  EXPECT_EQ(s.hidden_size, 2048);
  EXPECT_EQ(s.intermediate_size, 8192);
  EXPECT_EQ(s.num_layers, 16);
  EXPECT_EQ(s.num_heads, 32);
  EXPECT_EQ(s.num_kv_heads, 8);
  EXPECT_EQ(s.head_dim, 64);
  EXPECT_DOUBLE_EQ(s.rms_norm_eps, 1e-5);
  EXPECT_EQ(s.max_position_embeddings, 131072);
  EXPECT_EQ(s.rope.type, "llama3");
  EXPECT_DOUBLE_EQ(s.rope.theta, 500000.0);
  EXPECT_DOUBLE_EQ(s.rope.factor, 32.0);
  EXPECT_DOUBLE_EQ(s.rope.low_freq_factor, 1.0);
  EXPECT_DOUBLE_EQ(s.rope.high_freq_factor, 4.0);
  EXPECT_EQ(s.rope.original_max_position_embeddings, 8192);
  EXPECT_TRUE(s.tie_word_embeddings);
  EXPECT_FALSE(s.qkv_bias);
  EXPECT_FALSE(s.qk_norm);
  EXPECT_EQ(s.bos_token_id, 128000);
  EXPECT_EQ(s.eos_token_ids, std::vector<std::int64_t>{128001});
}

TEST(ConfigImport, Llama31_8BDerivesHeadDimAndIsUntied) {
  const ModelSpec s = spec_from_config(real_config("Llama-3.1-8B"), "config.json");
  EXPECT_EQ(s.head_dim, 128);  // 4096 / 32: the config has no head_dim
  EXPECT_FALSE(s.tie_word_embeddings);
  EXPECT_DOUBLE_EQ(s.rope.factor, 8.0);
  EXPECT_EQ(required_tensors(s).back().name, "lm_head.weight");
  EXPECT_EQ(required_tensors(s).size(), 1 + 32 * 9 + 2u);
}

TEST(ConfigImport, Qwen25_1_5BHasQkvBias) {
  const ModelSpec s = spec_from_config(real_config("Qwen2.5-1.5B"), "config.json");
  EXPECT_EQ(s.family, "qwen2");
  EXPECT_TRUE(s.qkv_bias);
  EXPECT_FALSE(s.qk_norm);
  EXPECT_EQ(s.num_kv_heads, 2);
  EXPECT_EQ(s.head_dim, 128);
  EXPECT_EQ(s.rope.type, "default");
  EXPECT_DOUBLE_EQ(s.rope.theta, 1e6);
  EXPECT_TRUE(s.tie_word_embeddings);
  EXPECT_EQ(required_tensors(s).size(), 1 + 28 * 12 + 1u);
}

TEST(ConfigImport, Qwen3_0_6BTakesHeadDimFromConfig) {
  const ModelSpec s = spec_from_config(real_config("Qwen3-0.6B"), "config.json");
  EXPECT_EQ(s.family, "qwen3");
  EXPECT_TRUE(s.qk_norm);
  EXPECT_EQ(s.head_dim, 128);           // not 1024 / 16 = 64
  EXPECT_DOUBLE_EQ(s.rope.theta, 1e6);  // written as the integer 1000000
  EXPECT_EQ(s.eos_token_ids, std::vector<std::int64_t>{151645});
  const auto tensors = required_tensors(s);
  EXPECT_EQ(tensors[2].name, "model.layers.0.self_attn.q_proj.weight");
  EXPECT_EQ(tensors[2].shape, (std::vector<std::int64_t>{16 * 128, 1024}));
}

TEST(ConfigImport, Mistral7BWithoutWindow) {
  const ModelSpec s = spec_from_config(real_config("Mistral-7B-v0.3"), "config.json");
  EXPECT_EQ(s.family, "mistral");
  EXPECT_EQ(s.vocab_size, 32768);
  EXPECT_EQ(s.bos_token_id, 1);
}

TEST(ConfigImport, BothRopeFormsGiveTheSameSpec) {
  json legacy = minimal_llama();
  legacy["rope_theta"] = 500000.0;
  legacy["rope_scaling"] = {{"type", "llama3"},
                            {"factor", 8.0},
                            {"low_freq_factor", 1.0},
                            {"high_freq_factor", 4.0},
                            {"original_max_position_embeddings", 64}};
  json v5 = minimal_llama();
  v5["rope_parameters"] = {{"rope_type", "llama3"},   {"rope_theta", 500000.0},
                           {"factor", 8.0},           {"low_freq_factor", 1.0},
                           {"high_freq_factor", 4.0}, {"original_max_position_embeddings", 64}};
  const RopeSpec a = spec_from_config(legacy, "a").rope, b = spec_from_config(v5, "b").rope;
  EXPECT_EQ(a.type, "llama3");
  EXPECT_EQ(b.type, "llama3");
  EXPECT_DOUBLE_EQ(a.theta, b.theta);
  EXPECT_DOUBLE_EQ(a.factor, b.factor);
  EXPECT_DOUBLE_EQ(a.low_freq_factor, b.low_freq_factor);
  EXPECT_DOUBLE_EQ(a.high_freq_factor, b.high_freq_factor);
  EXPECT_EQ(a.original_max_position_embeddings, b.original_max_position_embeddings);

  // Both forms at once are fine when they agree, refused when they do not.
  json both = v5;
  both["rope_theta"] = 500000;
  EXPECT_DOUBLE_EQ(spec_from_config(both, "both").rope.theta, 500000.0);
  both["rope_theta"] = 10000.0;
  EXPECT_NE(error_of(both).find("\"rope_theta\": disagrees with rope_parameters.rope_theta"),
            std::string::npos)
      << error_of(both);
}

TEST(ConfigImport, Defaults) {
  const ModelSpec s = spec_from_config(minimal_llama(), "cfg.json");
  EXPECT_EQ(s.num_kv_heads, 4);  // num_key_value_heads defaults to the head count
  EXPECT_EQ(s.head_dim, 32);     // hidden / heads
  EXPECT_EQ(s.rope.type, "default");
  EXPECT_DOUBLE_EQ(s.rope.theta, 10000.0);
  EXPECT_FALSE(s.tie_word_embeddings);
  EXPECT_EQ(s.bos_token_id, -1);
  EXPECT_TRUE(s.eos_token_ids.empty());
}

TEST(ConfigImport, EosTokenIdIntOrList) {
  json c = minimal_llama();
  c["eos_token_id"] = {2, 7, 9};
  EXPECT_EQ(spec_from_config(c, "cfg").eos_token_ids, (std::vector<std::int64_t>{2, 7, 9}));
  c["eos_token_id"] = 5;
  EXPECT_EQ(spec_from_config(c, "cfg").eos_token_ids, (std::vector<std::int64_t>{5}));
}

struct Refusal {
  const char* what;
  json patch;           // merged into minimal_llama() (null values delete the field)
  const char* message;  // must appear in the error
};

class ConfigRefusal : public ::testing::TestWithParam<Refusal> {};

TEST_P(ConfigRefusal, NamesFileAndField) {
  json config = minimal_llama();
  config.merge_patch(GetParam().patch);
  const std::string message = error_of(config);
  EXPECT_EQ(message.rfind("cfg.json: ", 0), 0u) << message;
  EXPECT_NE(message.find(GetParam().message), std::string::npos) << message;
  EXPECT_EQ(message.find('\n'), std::string::npos) << message;
}

const Refusal kRefusals[] = {
    {"unknown_architecture",
     {{"architectures", {"GPT2LMHeadModel"}}},
     "field \"architectures\": unsupported architecture \"GPT2LMHeadModel\""},
    {"architectures_not_a_list",
     {{"architectures", "LlamaForCausalLM"}},
     "field \"architectures\": expected an array of one string, found string"},
    {"missing_field", {{"hidden_size", nullptr}}, "required field \"hidden_size\" is missing"},
    {"wrong_type",
     {{"hidden_size", "128"}},
     "field \"hidden_size\": expected an integer in [1, 65536], found string"},
    {"float_for_integer",
     {{"num_hidden_layers", 2.5}},
     "field \"num_hidden_layers\": expected an integer in [1, 1024], found number 2.5"},
    {"zero_size",
     {{"intermediate_size", 0}},
     "field \"intermediate_size\": expected an integer in [1, 262144], found 0"},
    {"negative_size", {{"vocab_size", -512}}, "field \"vocab_size\": expected an integer"},
    {"huge_size", {{"vocab_size", 18446744073709551615ull}}, "found 18446744073709551615"},
    {"heads_do_not_divide_hidden",
     {{"num_attention_heads", 3}},
     "field \"num_attention_heads\": 3 does not divide hidden_size (128)"},
    {"kv_heads_do_not_divide_heads",
     {{"num_key_value_heads", 3}},
     "field \"num_key_value_heads\": 3 does not divide num_attention_heads (4)"},
    {"odd_head_dim", {{"head_dim", 33}}, "field \"head_dim\": the head dimension must be even"},
    {"gelu", {{"hidden_act", "gelu"}}, "field \"hidden_act\": unsupported activation \"gelu\""},
    {"yarn",
     {{"rope_scaling", {{"rope_type", "yarn"}, {"factor", 4.0}}}},
     "field \"rope_scaling.rope_type\": unsupported RoPE type \"yarn\""},
    {"dynamic_legacy_key",
     {{"rope_scaling", {{"type", "dynamic"}, {"factor", 2.0}}}},
     "field \"rope_scaling.type\": unsupported RoPE type \"dynamic\""},
    {"yarn_v5",
     {{"rope_parameters", {{"rope_type", "yarn"}, {"rope_theta", 1e4}}}},
     "field \"rope_parameters.rope_type\": unsupported RoPE type \"yarn\""},
    {"llama3_missing_factor",
     {{"rope_scaling",
       {{"rope_type", "llama3"},
        {"low_freq_factor", 1.0},
        {"high_freq_factor", 4.0},
        {"original_max_position_embeddings", 64}}}},
     "required field \"rope_scaling.factor\" is missing"},
    {"llama3_equal_freq_factors",
     {{"rope_scaling",
       {{"rope_type", "llama3"},
        {"factor", 8.0},
        {"low_freq_factor", 4.0},
        {"high_freq_factor", 4.0},
        {"original_max_position_embeddings", 64}}}},
     "field \"rope_scaling.high_freq_factor\": must be greater than low_freq_factor"},
    {"rope_theta_negative",
     {{"rope_theta", -1.0}},
     "field \"rope_theta\": expected a number greater than 0"},
    {"rope_scaling_wrong_type",
     {{"rope_scaling", 8}},
     "field \"rope_scaling\": expected an object, found integer"},
    {"partial_rotary",
     {{"rope_parameters", {{"rope_theta", 1e4}, {"partial_rotary_factor", 0.5}}}},
     "field \"rope_parameters.partial_rotary_factor\": only 1.0"},
    {"eps_type", {{"rms_norm_eps", "1e-5"}}, "field \"rms_norm_eps\": expected a number"},
    {"tie_type",
     {{"tie_word_embeddings", 1}},
     "field \"tie_word_embeddings\": expected true or false"},
    {"eos_out_of_vocab",
     {{"eos_token_id", 512}},
     "field \"eos_token_id\": expected an integer in [0, 511]"},
    {"eos_list_element",
     {{"eos_token_id", {1, "2"}}},
     "field \"eos_token_id[1]\": expected an integer"},
    {"attention_bias", {{"attention_bias", true}}, "field \"attention_bias\""},
    {"mlp_bias", {{"mlp_bias", true}}, "field \"mlp_bias\""},
    {"mistral_window",
     {{"architectures", {"MistralForCausalLM"}}, {"sliding_window", 128}},
     "field \"sliding_window\": sliding-window attention is not supported: window 128 is shorter "
     "than max_position_embeddings (256)"},
    {"qwen2_sliding",
     {{"architectures", {"Qwen2ForCausalLM"}}, {"use_sliding_window", true}},
     "field \"use_sliding_window\""},
    {"qwen3_sliding_layer",
     {{"architectures", {"Qwen3ForCausalLM"}},
      {"layer_types", {"full_attention", "sliding_attention"}}},
     "field \"layer_types\": only \"full_attention\" layers are supported, found "
     "\"sliding_attention\""},
};

INSTANTIATE_TEST_SUITE_P(Fields, ConfigRefusal, ::testing::ValuesIn(kRefusals),
                         [](const auto& info) { return std::string(info.param.what); });

TEST(ConfigImport, MistralWindowAsLongAsContextIsFullAttention) {
  json c = minimal_llama();
  c["architectures"] = {"MistralForCausalLM"};
  c["sliding_window"] = 256;
  EXPECT_EQ(spec_from_config(c, "cfg").family, "mistral");
}

TEST(ConfigImport, NumberBeyondDoubleIsMalformedJson) {
  // nlohmann reports this as out_of_range rather than parse_error (found by the config fuzzer).
  try {
    parse_json_text(R"({"rope_theta": 1e400})", "cfg.json");
    FAIL() << "accepted";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "cfg.json: malformed JSON: number overflow parsing '1e400'");
  }
}

TEST(ConfigImport, TopLevelMustBeAnObject) {
  EXPECT_EQ(error_of(json::array()), "cfg.json: expected a JSON object, found array");
}

}  // namespace
}  // namespace telos::compiler
