#include "compiler/artifact/artifact_inspector.hpp"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "support/artifact_files.hpp"
#include "support/artifact_format.hpp"
#include "support/error.hpp"

namespace telos::compiler {
namespace fs = std::filesystem;
namespace {

std::string human_bytes(std::int64_t n) {
  char buf[32];
  if (n >= (1ll << 30))
    std::snprintf(buf, sizeof buf, "%.2f GiB", n / double(1ll << 30));
  else if (n >= (1ll << 20))
    std::snprintf(buf, sizeof buf, "%.2f MiB", n / double(1ll << 20));
  else if (n >= (1ll << 10))
    std::snprintf(buf, sizeof buf, "%.1f KiB", n / double(1ll << 10));
  else
    std::snprintf(buf, sizeof buf, "%lld B", static_cast<long long>(n));
  return buf;
}

// Whether the artifact takes text, as telos-run finds it: tokenizer.json, and a chat template in
// tokenizer_config.json ("chat_template") or in chat_template.jinja beside it.
std::string text_summary(const fs::path& dir,
                         const std::vector<std::pair<std::string, std::string>>& files) {
  const auto has = [&](const char* name) {
    for (const auto& f : files)
      if (f.first == name) return true;
    return false;
  };
  if (!has("tokenizer.json")) return "text: no tokenizer (token-id prompts only)\n";
  bool chat = has("tokenizer_config.json") && has("chat_template.jinja");
  if (has("tokenizer_config.json") && !chat) {
    std::ifstream in(dir / "tokenizer_config.json");
    const nlohmann::json config = nlohmann::json::parse(in, nullptr, false);
    chat = config.is_object() && config.contains("chat_template") &&
           !config["chat_template"].is_null();
  }
  return chat ? "text: tokenizer and chat template (text prompts and chat requests)\n"
              : "text: tokenizer, no chat template (text prompts; chat requests refused)\n";
}

std::string arena_summary(const LaunchPrograms& p) {
  return human_bytes(p.arena_bytes) + " (" + std::to_string(p.arena.size()) + " buffers)";
}

// One line a kernel set: its kernels and target (each further set with its own arena).
std::string kernel_sets_summary(const ArtifactManifest& a) {
  if (!a.has_kernels) return "kernels: 0\n";
  std::string s;
  for (std::size_t i = 0; i < a.kernel_sets.size(); ++i) {
    const LaunchPrograms& p = a.kernel_sets[i];
    s += "kernels: " + std::to_string(p.kernels.size()) + " for " + p.target +
         (i > 0 ? ", activation arena " + arena_summary(p) : "") + "\n";
  }
  return s;
}

// One line for the weight file, or for tensor parallelism one a rank and what is split.
std::string weights_summary(const ArtifactManifest& a) {
  const std::size_t tensors = a.weights[0].tensors.size();
  if (a.weights.size() == 1)
    return "weights: " + std::to_string(tensors) + " tensors, " + human_bytes(a.weights[0].size) +
           " in " + a.weights[0].file + "\n";
  int split = 0;
  for (const WeightEntry& t : a.weights[0].tensors) split += t.split.has_value();
  std::string s = "tensor parallel: " + std::to_string(a.weights.size()) +
                  " ranks, each the same graph and kernels on its own weight file; " +
                  std::to_string(split) + " of " + std::to_string(tensors) +
                  " tensors split (rows or columns), the rest whole on every rank; a rank's KV "
                  "pool holds " +
                  std::to_string(a.kv_cache.num_kv_heads) + " of " +
                  std::to_string(a.model.num_kv_heads) + " KV heads\n";
  for (std::size_t r = 0; r < a.weights.size(); ++r)
    s += "weights: rank " + std::to_string(r) + ": " + std::to_string(tensors) + " tensors, " +
         human_bytes(a.weights[r].size) + " in " + a.weights[r].file + "\n";
  return s;
}

// One line a tensor of rank 0's weight file: its format and layout, and an e4m3 tensor's scales
// (which are not listed again on their own).
std::string tensors_summary(const ArtifactManifest& a) {
  const std::vector<WeightEntry>& tensors = a.weights[0].tensors;
  std::string s = "tensors:\n";
  for (const WeightEntry& t : tensors) {
    bool is_scale = false;
    for (const WeightEntry& w : tensors) is_scale |= w.scale && w.scale->tensor == t.name;
    if (is_scale) continue;
    s += "  " + t.name + ": " + std::string(dtype_name(t.dtype)) + format_shape(t.shape) + " " +
         t.layout;
    for (const WeightEntry& scale : tensors)
      if (t.scale && scale.name == t.scale->tensor)
        s += ", scales " + std::string(dtype_name(scale.dtype)) + format_shape(scale.shape) +
             " in " + scale.name + " (one a " + std::to_string(t.scale->block_rows) + "x" +
             std::to_string(t.scale->block_cols) + " block" +
             (t.scale->block_rows == 1 && t.scale->block_cols == t.shape[1] ? ": one a row" : "") +
             ")";
    s += "\n";
  }
  return s;
}

// The page geometry, the element type with its scales, and the tokens a GiB of pool holds (which
// an e4m3 cache doubles against bf16).
std::string kv_cache_summary(const KvCacheConfig& kv) {
  std::string s = std::to_string(kv.bytes_per_page) + " bytes per page of " +
                  std::to_string(kv.page_size) + " tokens (" + kv.layout + "), " +
                  std::string(dtype_name(kv.dtype));
  if (kv.dtype == DType::E4M3) {
    std::vector<float> scales = kv.k_scales;
    scales.insert(scales.end(), kv.v_scales.begin(), kv.v_scales.end());
    const auto [low, high] = std::minmax_element(scales.begin(), scales.end());
    s += " (a K and a V scale a layer, " + nlohmann::json(*low).dump() + " to " +
         nlohmann::json(*high).dump() + ")";
  }
  const std::int64_t tokens_a_gib = (std::int64_t{1} << 30) / kv.bytes_per_page * kv.page_size;
  return s + ", " + std::to_string(tokens_a_gib) + " tokens a GiB";
}

std::string summary(const std::string& path, const nlohmann::json& j, const ArtifactManifest& a) {
  const ModelConfig& m = a.model;
  const ServingConfig& sv = a.serving;
  std::string targets = nlohmann::json(sv.targets).dump();
  std::string s;
  s += "artifact: " + path + " (schema " + std::to_string(a.schema_version) + ", " +
       j.value("generator", std::string("unknown generator")) + ")\n";
  s += "model: " + m.name + " (" + m.architecture + ", " + m.family +
       "): " + std::to_string(m.num_layers) + " layers, hidden " + std::to_string(m.hidden_size) +
       ", heads " + std::to_string(m.num_heads) + "/" + std::to_string(m.num_kv_heads) + " x " +
       std::to_string(m.head_dim) + ", intermediate " + std::to_string(m.intermediate_size) +
       ", vocab " + std::to_string(m.vocab_size) + "\n";
  s +=
      "serving: max_batch " + std::to_string(sv.max_batch) + ", max_seq_len " +
      std::to_string(sv.max_seq_len) + ", kv_page_size " + std::to_string(sv.kv_page_size) +
      ", kv_pool " +
      (sv.kv_pool_pages ? std::to_string(*sv.kv_pool_pages) + " pages"
                        : "memory_fraction " + nlohmann::json(*sv.kv_pool_memory_fraction).dump()) +
      ", prefill_chunk " + std::to_string(sv.prefill_chunk) + ", targets " + targets +
      ", tensor_parallel " + std::to_string(sv.tensor_parallel) + "\n";
  s += "kv cache: " + kv_cache_summary(a.kv_cache) + "\n";
  for (const auto& [kind, sizes] :
       {std::pair{"decode", &sv.decode_buckets}, std::pair{"prefill", &sv.prefill_buckets}}) {
    s += std::string(kind) + " buckets:";
    for (int n : *sizes) s += " " + std::to_string(n);
    s += "\n";
  }
  if (a.has_kernels) s += "activation arena: " + arena_summary(a.kernel_sets[0]) + "\n";
  s += weights_summary(a);
  s += kernel_sets_summary(a);
  s += text_summary(fs::path(path), a.files);
  return s;
}

}  // namespace

std::string inspect_artifact(const std::string& path, bool verify) {
  if (verify) {
    const OpenedArtifact a = open_artifact(path, WeightChecks::kEveryByte);
    std::size_t tensors = 0;
    for (const WeightFile& w : a.manifest.weights) tensors += w.tensors.size();
    return summary(path, a.json, a.manifest) + "checksums: verified (" + std::to_string(tensors) +
           " tensors, " + std::to_string(a.manifest.files.size()) + " files)\n" +
           tensors_summary(a.manifest);
  }
  std::error_code ec;
  if (!fs::is_directory(path, ec))
    fail(path + ": not an artifact directory (expected NAME.telos/)");
  const nlohmann::json j = read_manifest_file(path);
  const ArtifactManifest a = validate_manifest(j, (fs::path(path) / "manifest.json").string());
  return summary(path, j, a) + tensors_summary(a);
}

}  // namespace telos::compiler
