#include "test/executor/tiny_artifact.hpp"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <random>

#include "support/artifact_format.hpp"
#include "support/checksum.hpp"
#include "support/dtype.hpp"

namespace telos::exec::testing {
namespace fs = std::filesystem;
using nlohmann::json;

std::string temp_dir(const std::string& name) {
  static int counter = 0;
  const char* base = std::getenv("TMPDIR");
  fs::path dir =
      fs::path(base ? base : "/tmp") / ("telos-executor-test-" + std::to_string(::getpid()) + "-" +
                                        std::to_string(counter++) + "-" + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir.string();
}

void rewrite_manifest(const std::string& dir, json manifest, Signing signing) {
  if (signing == Signing::kResign && manifest.is_object() && manifest.contains("model") &&
      manifest.contains("weights") && manifest.contains("graph"))
    manifest["manifest_checksum"] = manifest_checksum(manifest);
  std::ofstream(fs::path(dir) / "manifest.json") << manifest.dump(2);
}

namespace {

// The fused graph telosc writes for a model of this shape (docs/artifact.md, "graph").
class TinyGraph {
 public:
  explicit TinyGraph(const TinyArtifactSpec& s) : s_(s) {}

  json build(const json& rope) {
    const int H = s_.hidden_size, D = s_.head_dim, Hq = s_.num_heads, Hkv = s_.num_kv_heads;
    const json eps = {{"eps", 1e-5}};
    std::string x = op("embed", {"tokens"}, {"embed"}, json::object(), "x", act(H));
    for (int l = 0; l < s_.num_layers; ++l) {
      const std::string p = "layers." + std::to_string(l) + ".", v = "l" + std::to_string(l) + ".";
      const std::string h = op("rmsnorm", {x}, {p + "attn_norm"}, eps, v + "attn_in", act(H));
      std::vector<std::string> qkv_params = {p + "qkv"};
      if (s_.qkv_bias) qkv_params.push_back(p + "qkv_bias");
      json rope_attrs = {{"epilogue", "rope_kv_append"},
                         {"layer", l},
                         {"heads", Hq},
                         {"kv_heads", Hkv},
                         {"head_dim", D}};
      for (const auto& [key, value] : rope.items())
        rope_attrs[key == "type" ? "scaling" : key] = value;
      if (s_.qk_norm) {
        qkv_params.push_back(p + "q_norm");
        qkv_params.push_back(p + "k_norm");
        rope_attrs["eps"] = 1e-5;
      }
      const std::string q =
          op("linear", {h, "positions"}, qkv_params, rope_attrs, v + "q_rope", act(Hq * D));
      const json heads = {{"layer", l}, {"heads", Hq}, {"kv_heads", Hkv}, {"head_dim", D}};
      const std::string attn = op("paged_attention", {q}, {}, heads, v + "attn", act(Hq * D));
      const json residual = {{"epilogue", "residual"}};
      x = op("linear", {attn, x}, {p + "o"}, residual, v + "x_attn", act(H));
      const std::string m = op("rmsnorm", {x}, {p + "mlp_norm"}, eps, v + "mlp_in", act(H));
      const std::string a = op("linear", {m}, {p + "gate_up"}, {{"epilogue", "swiglu"}}, v + "act",
                               act(s_.intermediate_size));
      x = op("linear", {a, x}, {p + "down"}, residual, v + "x", act(H));
    }
    const std::string f = op("rmsnorm", {x}, {"final_norm"}, eps, "final", act(H));
    const std::string head = s_.tie_word_embeddings ? "embed" : "lm_head";
    op("lm_head_sample", {f}, {head}, json::object(), "next_tokens",
       {{"dtype", "i32"}, {"shape", {"S"}}});
    const json input = {{"dtype", "i32"}, {"shape", {"T"}}};
    return {{"inputs", {named("tokens", input), named("positions", input)}},
            {"ops", ops_},
            {"outputs", {"next_tokens"}}};
  }

 private:
  static json act(int cols) { return {{"dtype", "bf16"}, {"shape", {"T", cols}}}; }
  static json named(const std::string& name, json type) {
    type["name"] = name;
    return type;
  }
  std::string op(const std::string& kind, const std::vector<std::string>& operands,
                 const std::vector<std::string>& params, const json& attrs,
                 const std::string& result, const json& type) {
    ops_.push_back({{"op", kind},
                    {"operands", operands},
                    {"params", params},
                    {"attrs", attrs},
                    {"results", {named(result, type)}}});
    return result;
  }

  const TinyArtifactSpec& s_;
  json ops_ = json::array();
};

}  // namespace

json write_tiny_artifact(const std::string& dir, const TinyArtifactSpec& s) {
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::mt19937_64 rng(s.seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);

  std::vector<std::uint8_t> blob;
  json tensors = json::array();
  auto align = [&] { blob.resize((blob.size() + 255) / 256 * 256, 0); };
  // Matrices: bf16 with std 1/sqrt(in) so activations stay O(1); vectors: f32 around `center`.
  auto add_matrix = [&](const std::string& name, int rows, int cols) {
    align();
    const std::size_t offset = blob.size();
    const float scale = 1.0f / std::sqrt(static_cast<float>(cols));
    for (int i = 0; i < rows * cols; ++i) {
      const std::uint16_t v = f32_to_bf16(normal(rng) * scale);
      blob.push_back(static_cast<std::uint8_t>(v & 0xff));
      blob.push_back(static_cast<std::uint8_t>(v >> 8));
    }
    const std::size_t bytes = blob.size() - offset;
    tensors.push_back({{"name", name},
                       {"dtype", "bf16"},
                       {"shape", {rows, cols}},
                       {"layout", "row_major"},
                       {"offset", offset},
                       {"bytes", bytes},
                       {"checksum", checksum_string(xxh64(blob.data() + offset, bytes))},
                       {"sources", json::array()}});
  };
  auto add_vector = [&](const std::string& name, int n, float center, float spread) {
    align();
    const std::size_t offset = blob.size();
    for (int i = 0; i < n; ++i) {
      const float v = center + spread * normal(rng);
      const auto* p = reinterpret_cast<const std::uint8_t*>(&v);
      blob.insert(blob.end(), p, p + 4);
    }
    const std::size_t bytes = blob.size() - offset;
    tensors.push_back({{"name", name},
                       {"dtype", "f32"},
                       {"shape", {n}},
                       {"layout", "row_major"},
                       {"offset", offset},
                       {"bytes", bytes},
                       {"checksum", checksum_string(xxh64(blob.data() + offset, bytes))},
                       {"sources", json::array()}});
  };

  const int H = s.hidden_size, D = s.head_dim, qkv_rows = (s.num_heads + 2 * s.num_kv_heads) * D;
  add_matrix("embed", s.vocab_size, H);
  for (int l = 0; l < s.num_layers; ++l) {
    const std::string p = "layers." + std::to_string(l) + ".";
    add_vector(p + "attn_norm", H, 1.0f, 0.1f);
    add_matrix(p + "qkv", qkv_rows, H);
    if (s.qkv_bias) add_vector(p + "qkv_bias", qkv_rows, 0.0f, 0.05f);
    if (s.qk_norm) {
      add_vector(p + "q_norm", D, 1.0f, 0.1f);
      add_vector(p + "k_norm", D, 1.0f, 0.1f);
    }
    add_matrix(p + "o", H, s.num_heads * D);
    add_vector(p + "mlp_norm", H, 1.0f, 0.1f);
    add_matrix(p + "gate_up", 2 * s.intermediate_size, H);
    add_matrix(p + "down", H, s.intermediate_size);
  }
  add_vector("final_norm", H, 1.0f, 0.1f);
  if (!s.tie_word_embeddings) add_matrix("lm_head", s.vocab_size, H);
  align();

  std::ofstream(fs::path(dir) / "weights.bin", std::ios::binary)
      .write(reinterpret_cast<const char*>(blob.data()), static_cast<std::streamsize>(blob.size()));
  const std::string ir = "# hand-written test artifact: no IR\n";
  std::ofstream(fs::path(dir) / "ir.txt") << ir;

  json rope = {{"type", s.rope_type}, {"theta", 10000.0}};
  if (s.rope_type == "llama3")
    rope.update({{"factor", 8.0},
                 {"low_freq_factor", 1.0},
                 {"high_freq_factor", 4.0},
                 {"original_max_position_embeddings", 16}});
  std::vector<int> decode_buckets, prefill_buckets;
  for (int b = 1; b < s.max_batch; b *= 2) decode_buckets.push_back(b);
  decode_buckets.push_back(s.max_batch);
  for (int b = 8; b < s.prefill_chunk; b *= 2) prefill_buckets.push_back(b);
  prefill_buckets.push_back(s.prefill_chunk);

  json manifest = {
      {"format", kArtifactFormat},
      {"schema_version", kArtifactSchemaVersion},
      {"generator", "test/executor/tiny_artifact.cpp"},
      {"model",
       {{"name", "tiny-test"},
        {"architecture", "TestForCausalLM"},
        {"family", s.family},
        {"vocab_size", s.vocab_size},
        {"hidden_size", H},
        {"intermediate_size", s.intermediate_size},
        {"num_layers", s.num_layers},
        {"num_heads", s.num_heads},
        {"num_kv_heads", s.num_kv_heads},
        {"head_dim", D},
        {"rms_norm_eps", 1e-5},
        {"max_position_embeddings", s.max_seq_len},
        {"rope", rope},
        {"tie_word_embeddings", s.tie_word_embeddings},
        {"qkv_bias", s.qkv_bias},
        {"qk_norm", s.qk_norm},
        {"sliding_window", nullptr},
        {"bos_token_id", 1},
        {"eos_token_ids", {2}}}},
      {"serving",
       {{"max_batch", s.max_batch},
        {"max_seq_len", s.max_seq_len},
        {"kv_page_size", s.page_size},
        {"kv_pool", {{"pages", s.kv_pages}}},
        {"prefill_chunk", s.prefill_chunk},
        {"decode_buckets", decode_buckets},
        {"prefill_buckets", prefill_buckets},
        {"targets", {"sm_90a"}},
        {"tensor_parallel", 1}}},
      {"kv_cache",
       {{"dtype", "bf16"},
        {"page_size", s.page_size},
        {"num_layers", s.num_layers},
        {"num_kv_heads", s.num_kv_heads},
        {"head_dim", D},
        {"bytes_per_page", 2 * s.num_layers * s.page_size * s.num_kv_heads * D * 2},
        {"layout", "page[layer][kv][head][slot][dim]"}}},
      {"weights",
       {{"file", "weights.bin"}, {"alignment", 256}, {"size", blob.size()}, {"tensors", tensors}}},
      {"graph", TinyGraph(s).build(rope)},
      {"plan", json::object()},
      {"kernels", json::array()},
      {"files",
       {{"weights.bin", checksum_string(xxh64(blob.data(), blob.size()))},
        {"ir.txt", checksum_string(xxh64(ir.data(), ir.size()))}}}};
  manifest["manifest_checksum"] = manifest_checksum(manifest);
  rewrite_manifest(dir, manifest, Signing::kAsIs);
  return manifest;
}

}  // namespace telos::exec::testing
