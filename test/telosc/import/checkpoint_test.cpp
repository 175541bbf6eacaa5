// import_model over the committed tiny checkpoints (one per family and storage form) and over
// scratch checkpoints that break one rule each.
#include <gtest/gtest.h>

#include <string>

#include "compiler/import/checkpoint.hpp"
#include "compiler/import/json_fields.hpp"
#include "support/error.hpp"
#include "test_checkpoint.hpp"

namespace telos::compiler {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing::write_file;
using testing::zero_f32_checkpoint;

const std::string kSrc = TELOS_SOURCE_DIR;

TEST(ImportFixture, TinyLlamaThroughModelJson) {
  const ImportedModel m = import_model(kSrc + "/models/tiny-llama/model.json");
  EXPECT_EQ(m.spec.name, "tiny-llama");
  EXPECT_EQ(m.spec.family, "llama");
  EXPECT_TRUE(m.spec.tie_word_embeddings);
  EXPECT_EQ(m.spec.rope.type, "llama3");  // from transformers 5's rope_parameters
  EXPECT_EQ(m.spec.rope.original_max_position_embeddings, 64);
  EXPECT_EQ(m.spec.head_dim, 32);
  EXPECT_EQ(m.serving["max_batch"], 8);
  ASSERT_TRUE(m.has_weights);
  EXPECT_EQ(m.shards.size(), 1u);
  EXPECT_EQ(m.find("lm_head.weight"), nullptr);
  const TensorView* embed = m.find("model.embed_tokens.weight");
  ASSERT_NE(embed, nullptr);
  EXPECT_EQ(embed->dtype, DType::BF16);
  EXPECT_EQ(embed->shape, (std::vector<std::int64_t>{512, 128}));
  EXPECT_EQ(embed->bytes, 512u * 128u * 2u);
  EXPECT_EQ(embed->file, m.shards[0].get());
  // Random normal weights: a real bf16 value, not an offset into the header.
  const float first = bf16_to_f32(static_cast<std::uint16_t>(embed->data[0] | embed->data[1] << 8));
  EXPECT_GT(std::abs(first), 0.0f);
  EXPECT_LT(std::abs(first), 1.0f);
  EXPECT_EQ(m.tensors.size(), required_tensors(m.spec).size());
}

TEST(ImportFixture, TinyQwen2ThroughDirectory) {
  const ImportedModel m = import_model(kSrc + "/test/fixtures/tiny-qwen2");
  EXPECT_EQ(m.spec.name, "tiny-qwen2");
  EXPECT_TRUE(m.spec.qkv_bias);
  EXPECT_TRUE(m.serving.is_null());
  const TensorView* bias = m.find("model.layers.1.self_attn.k_proj.bias");
  ASSERT_NE(bias, nullptr);
  EXPECT_EQ(bias->dtype, DType::F16);
  EXPECT_EQ(bias->shape, (std::vector<std::int64_t>{2 * 32}));
}

TEST(ImportFixture, TinyQwen3ShardedThroughConfigJson) {
  const ImportedModel m = import_model(kSrc + "/test/fixtures/tiny-qwen3/config.json");
  EXPECT_TRUE(m.spec.qk_norm);
  EXPECT_FALSE(m.spec.tie_word_embeddings);
  EXPECT_EQ(m.shards.size(), 3u);
  const TensorView* head = m.find("lm_head.weight");
  ASSERT_NE(head, nullptr);
  EXPECT_EQ(head->dtype, DType::F32);
  EXPECT_NE(head->file->path().find("model-00003-of-00003.safetensors"), std::string::npos);
  EXPECT_EQ(m.find("model.layers.0.self_attn.q_norm.weight")->shape,
            (std::vector<std::int64_t>{32}));
}

TEST(ImportFixture, NoWeightsReadsOnlyTheConfig) {
  const ImportedModel m = import_model(kSrc + "/test/telosc/Inputs/configs/Llama-3.1-8B",
                                       ImportOptions{.weights = false});
  EXPECT_EQ(m.spec.name, "Llama-3.1-8B");
  EXPECT_FALSE(m.has_weights);
  EXPECT_TRUE(m.shards.empty());
  EXPECT_TRUE(m.tensors.empty());
}

// Scratch checkpoints: a small Llama whose tensors each test writes itself.
class ImportCheckpoint : public testing::ScratchDir {
 protected:
  json config() const {
    return {{"architectures", {"LlamaForCausalLM"}},
            {"vocab_size", 16},
            {"hidden_size", 8},
            {"intermediate_size", 12},
            {"num_hidden_layers", 1},
            {"num_attention_heads", 2},
            {"num_key_value_heads", 1},
            {"max_position_embeddings", 32},
            {"rms_norm_eps", 1e-6},
            {"tie_word_embeddings", true}};
  }
  std::vector<std::pair<std::string, std::vector<std::int64_t>>> tensors() const {
    std::vector<std::pair<std::string, std::vector<std::int64_t>>> out;
    for (const auto& t : required_tensors(spec_from_config(config(), "config.json"))) {
      out.emplace_back(t.name, t.shape);
    }
    return out;
  }
  void write(const json& cfg,
             const std::vector<std::pair<std::string, std::vector<std::int64_t>>>& ts) {
    write_file(dir() / "config.json", cfg.dump());
    write_file(dir() / "model.safetensors", zero_f32_checkpoint(ts));
  }
  std::string error_of(const std::string& path) {
    try {
      import_model(path);
    } catch (const Error& e) {
      return e.what();
    }
    return "(accepted)";
  }
  std::string model_file() const { return (dir() / "model.safetensors").string(); }
};

TEST_F(ImportCheckpoint, AcceptsExactlyTheRequiredTensors) {
  write(config(), tensors());
  const ImportedModel m = import_model(dir().string());
  EXPECT_EQ(m.tensors.size(), 1 + 9 + 1u);
}

TEST_F(ImportCheckpoint, MissingTensor) {
  auto ts = tensors();
  ts.erase(ts.begin() + 3);  // model.layers.0.self_attn.k_proj.weight
  write(config(), ts);
  EXPECT_EQ(error_of(dir().string()),
            model_file() +
                ": tensor \"model.layers.0.self_attn.k_proj.weight\" is missing "
                "(LlamaForCausalLM needs it with shape [4, 8])");
}

TEST_F(ImportCheckpoint, ShapeMismatch) {
  auto ts = tensors();
  ts[1].second = {9};  // input_layernorm
  write(config(), ts);
  EXPECT_EQ(error_of(dir().string()),
            model_file() +
                ": tensor \"model.layers.0.input_layernorm.weight\": expected shape "
                "[8], found [9]");
}

TEST_F(ImportCheckpoint, UntiedNeedsLmHead) {
  json cfg = config();
  cfg["tie_word_embeddings"] = false;
  write(cfg, tensors());
  EXPECT_NE(error_of(dir().string()).find("tensor \"lm_head.weight\" is missing"),
            std::string::npos);
}

TEST_F(ImportCheckpoint, TiedMayKeepACopyOfTheEmbedding) {
  auto ts = tensors();
  ts.emplace_back("lm_head.weight", std::vector<std::int64_t>{16, 8});
  ts.emplace_back("model.layers.0.self_attn.rotary_emb.inv_freq", std::vector<std::int64_t>{2});
  write(config(), ts);
  EXPECT_EQ(import_model(dir().string()).tensors.size(), 1 + 9 + 1 + 2u);
}

TEST_F(ImportCheckpoint, TensorOfAnotherLayerCount) {
  auto ts = tensors();
  ts.emplace_back("model.layers.1.input_layernorm.weight", std::vector<std::int64_t>{8});
  write(config(), ts);
  EXPECT_EQ(error_of(dir().string()),
            model_file() +
                ": tensor \"model.layers.1.input_layernorm.weight\" is not part of "
                "LlamaForCausalLM with 1 layers and tied embeddings (do config.json "
                "and the weights belong together?)");
}

TEST_F(ImportCheckpoint, NoWeightsFiles) {
  write_file(dir() / "config.json", config().dump());
  EXPECT_EQ(error_of(dir().string()),
            dir().string() +
                ": no model.safetensors or model.safetensors.index.json in the "
                "checkpoint (use --no-weights to plan from config.json alone)");
}

TEST_F(ImportCheckpoint, MissingPath) {
  EXPECT_EQ(error_of((dir() / "nope.json").string()),
            (dir() / "nope.json").string() + ": no such file or directory");
  EXPECT_EQ(error_of(dir().string()),
            (dir() / "config.json").string() + ": cannot open: No such file or directory");
}

TEST_F(ImportCheckpoint, MalformedConfig) {
  write_file(dir() / "config.json", "{\"vocab_size\": 16,,}");
  EXPECT_NE(error_of(dir().string())
                .find("/config.json: malformed JSON: parse error at line 1, column 19"),
            std::string::npos)
      << error_of(dir().string());
}

TEST_F(ImportCheckpoint, ModelJsonResolvesCheckpointRelativeToItself) {
  fs::create_directories(dir() / "ckpt");
  write_file(dir() / "ckpt" / "config.json", config().dump());
  write_file(dir() / "ckpt" / "model.safetensors", zero_f32_checkpoint(tensors()));
  write_file(dir() / "model.json", R"({"name": "small", "checkpoint": "ckpt"})");
  const ImportedModel m = import_model((dir() / "model.json").string());
  EXPECT_EQ(m.spec.name, "small");
  EXPECT_EQ(fs::path(m.checkpoint_dir), dir() / "ckpt");
  EXPECT_TRUE(m.serving.is_null());

  write_file(dir() / "model.json", R"({"checkpoint": "elsewhere"})");
  EXPECT_EQ(error_of((dir() / "model.json").string()),
            (dir() / "model.json").string() + ": field \"checkpoint\": " +
                (dir() / "elsewhere").string() + " is not a directory");
  write_file(dir() / "model.json", R"({"checkpoint": "ckpt", "servign": {}})");
  EXPECT_NE(error_of((dir() / "model.json").string()).find("field \"servign\": unknown field"),
            std::string::npos);
  write_file(dir() / "model.json", R"({"checkpoint": "ckpt", "serving": 3})");
  EXPECT_NE(error_of((dir() / "model.json").string())
                .find("field \"serving\": expected an object, found integer"),
            std::string::npos);
}

class ImportSharded : public ImportCheckpoint {
 protected:
  // Splits the tensors over two shards, the first `split` in shard 1.
  void write_sharded(std::size_t split, const json& weight_map_patch = json::object()) {
    const auto ts = tensors();
    std::vector<std::pair<std::string, std::vector<std::int64_t>>> a(ts.begin(),
                                                                     ts.begin() + split),
        b(ts.begin() + split, ts.end());
    write_file(dir() / "config.json", config().dump());
    write_file(dir() / "s1.safetensors", zero_f32_checkpoint(a));
    write_file(dir() / "s2.safetensors", zero_f32_checkpoint(b));
    json map = json::object();
    for (const auto& t : a) map[t.first] = "s1.safetensors";
    for (const auto& t : b) map[t.first] = "s2.safetensors";
    map.merge_patch(weight_map_patch);
    write_file(dir() / "model.safetensors.index.json",
               json{{"metadata", {{"total_size", 0}}}, {"weight_map", map}}.dump());
  }
  std::string index_file() const { return (dir() / "model.safetensors.index.json").string(); }
};

TEST_F(ImportSharded, ReadsEveryShard) {
  write_sharded(4);
  const ImportedModel m = import_model(dir().string());
  EXPECT_EQ(m.shards.size(), 2u);
  EXPECT_EQ(m.find("model.embed_tokens.weight")->file->path(), (dir() / "s1.safetensors").string());
  EXPECT_EQ(m.find("model.norm.weight")->file->path(), (dir() / "s2.safetensors").string());
}

TEST_F(ImportSharded, ListedTensorAbsentFromItsShard) {
  write_sharded(4, {{"model.norm.weight", "s1.safetensors"}});
  EXPECT_EQ(error_of(dir().string()),
            index_file() +
                ": tensor \"model.norm.weight\" is listed in weight_map for "
                "s1.safetensors but " +
                (dir() / "s1.safetensors").string() + " does not contain it");
}

TEST_F(ImportSharded, MissingShardFile) {
  write_sharded(4);
  fs::remove(dir() / "s2.safetensors");
  EXPECT_EQ(error_of(dir().string()),
            (dir() / "s2.safetensors").string() + ": cannot open: No such file or directory");
}

TEST_F(ImportSharded, ShardNamesStayInTheCheckpoint) {
  write_sharded(4, {{"model.norm.weight", "../s2.safetensors"}});
  EXPECT_EQ(error_of(dir().string()),
            index_file() + ": field \"weight_map.model.norm.weight\": expected a file name in " +
                dir().string() + ", found \"../s2.safetensors\"");
}

TEST_F(ImportSharded, UnlistedTensorInAShard) {
  write_sharded(4, {{"model.norm.weight", nullptr}});
  EXPECT_EQ(error_of(dir().string()), (dir() / "s2.safetensors").string() +
                                          ": tensor \"model.norm.weight\" is not listed "
                                          "for this shard in " +
                                          index_file());
}

}  // namespace
}  // namespace telos::compiler
