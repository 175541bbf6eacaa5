#include "compiler/artifact/artifact_inspector.hpp"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "compiler/artifact/artifact_writer.hpp"
#include "support/checksum.hpp"
#include "support/error.hpp"
#include "support/mapped_file.hpp"

namespace telos::compiler {
namespace fs = std::filesystem;
namespace {

// Reads a manifest field, refusing a missing one with the file and JSON path named.
class ManifestReader {
 public:
  ManifestReader(const nlohmann::json& root, std::string file)
      : root_(root), file_(std::move(file)) {}
  const nlohmann::json& at(const std::string& pointer, nlohmann::json::value_t type) const {
    const nlohmann::json::json_pointer ptr(pointer);
    if (!root_.contains(ptr)) fail(file_ + ": " + field(pointer) + ": missing");
    const nlohmann::json& v = root_.at(ptr);
    const bool ok = type == nlohmann::json::value_t::number_integer ? v.is_number_integer()
                    : type == nlohmann::json::value_t::number_float ? v.is_number()
                                                                    : v.type() == type;
    if (!ok) fail(file_ + ": " + field(pointer) + ": unexpected type (" + v.type_name() + ")");
    return v;
  }
  std::int64_t integer(const std::string& p) const {
    return at(p, nlohmann::json::value_t::number_integer).get<std::int64_t>();
  }
  std::string string(const std::string& p) const {
    return at(p, nlohmann::json::value_t::string).get<std::string>();
  }
  const nlohmann::json& array(const std::string& p) const {
    return at(p, nlohmann::json::value_t::array);
  }
  const nlohmann::json& object(const std::string& p) const {
    return at(p, nlohmann::json::value_t::object);
  }
  [[noreturn]] void fail_field(const std::string& pointer, const std::string& message) const {
    fail(file_ + ": " + field(pointer) + ": " + message);
  }

 private:
  static std::string field(const std::string& pointer) {
    std::string f = pointer.substr(1);
    for (char& c : f)
      if (c == '/') c = '.';
    return f;
  }
  const nlohmann::json& root_;
  std::string file_;
};

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
std::string text_summary(const fs::path& dir, const nlohmann::json& files) {
  const auto has = [&](const char* name) { return files.is_object() && files.contains(name); };
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

}  // namespace

std::string inspect_artifact(const std::string& path, bool verify) {
  const fs::path dir(path);
  const std::string manifest_path = (dir / "manifest.json").string();
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) fail(path + ": not an artifact directory");
  std::ifstream in(manifest_path);
  if (!in) fail(manifest_path + ": cannot open");
  nlohmann::json m;
  try {
    m = nlohmann::json::parse(in);
  } catch (const nlohmann::json::parse_error& e) {
    fail(manifest_path + ": malformed JSON: " + e.what());
  }
  const ManifestReader r(m, manifest_path);
  const std::int64_t schema = r.integer("/schema_version");
  if (schema > kSchemaVersion || schema < 1)
    r.fail_field("/schema_version", std::to_string(schema) +
                                        " is not supported (this telosc reads " +
                                        std::to_string(kSchemaVersion) + ")");

  std::string s;
  s += "artifact: " + path + " (schema " + std::to_string(schema) + ", " + r.string("/generator") +
       ")\n";
  s += "model: " + r.string("/model/name") + " (" + r.string("/model/architecture") + ", " +
       r.string("/model/family") + "): " + std::to_string(r.integer("/model/num_layers")) +
       " layers, hidden " + std::to_string(r.integer("/model/hidden_size")) + ", heads " +
       std::to_string(r.integer("/model/num_heads")) + "/" +
       std::to_string(r.integer("/model/num_kv_heads")) + " x " +
       std::to_string(r.integer("/model/head_dim")) + ", intermediate " +
       std::to_string(r.integer("/model/intermediate_size")) + ", vocab " +
       std::to_string(r.integer("/model/vocab_size")) + "\n";
  const nlohmann::json& pool = r.object("/serving/kv_pool");
  s += "serving: max_batch " + std::to_string(r.integer("/serving/max_batch")) + ", max_seq_len " +
       std::to_string(r.integer("/serving/max_seq_len")) + ", kv_page_size " +
       std::to_string(r.integer("/serving/kv_page_size")) + ", kv_pool " +
       (pool.contains("pages")
            ? pool["pages"].dump() + " pages"
            : "memory_fraction " + pool.value("memory_fraction", nlohmann::json()).dump()) +
       ", prefill_chunk " + std::to_string(r.integer("/serving/prefill_chunk")) + ", targets " +
       r.array("/serving/targets").dump() + ", tensor_parallel " +
       std::to_string(r.integer("/serving/tensor_parallel")) + "\n";
  s += "kv cache: " + std::to_string(r.integer("/kv_cache/bytes_per_page")) +
       " bytes per page of " + std::to_string(r.integer("/kv_cache/page_size")) + " tokens (" +
       r.string("/kv_cache/layout") + ")\n";
  for (const char* kind : {"decode", "prefill"}) {
    const std::string key = std::string("/plan/") + kind + "_buckets";
    s += std::string(kind) + " buckets:";
    for (const auto& b : r.array(key))
      s += " " + b.value("tokens", nlohmann::json()).dump() + " (arena " +
           human_bytes(b.value("arena_bytes", std::int64_t{0})) + ")";
    s += "\n";
  }
  const nlohmann::json& tensors = r.array("/weights/tensors");
  const std::int64_t size = r.integer("/weights/size");
  s += "weights: " + std::to_string(tensors.size()) + " tensors, " + human_bytes(size) + " in " +
       r.string("/weights/file") + "\n";
  s += "kernels: " + std::to_string(r.array("/kernels").size()) + "\n";
  s += text_summary(dir, m.value("files", nlohmann::json()));

  if (!verify) return s;
  const std::string weights_path = (dir / r.string("/weights/file")).string();
  const MappedFile weights(weights_path);
  if (static_cast<std::int64_t>(weights.size()) != size)
    fail(weights_path + ": is " + std::to_string(weights.size()) +
         " bytes, manifest.json weights.size says " + std::to_string(size));
  // Every checksum computed together (on several threads), then compared in manifest order: the
  // tensors, then the files.
  std::vector<ChecksumRange> ranges;
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const std::string at = "/weights/tensors/" + std::to_string(i);
    const std::string name = r.string(at + "/name");
    const std::int64_t offset = r.integer(at + "/offset"), bytes = r.integer(at + "/bytes");
    if (offset < 0 || bytes < 0 || offset + bytes > size || offset % kWeightAlignment != 0)
      r.fail_field(at, name + " lies outside weights.bin or is not 256-byte aligned");
    ranges.push_back({&weights, static_cast<std::size_t>(offset), static_cast<std::size_t>(bytes)});
  }
  const nlohmann::json& files = r.object("/files");
  std::vector<MappedFile> mapped;
  mapped.reserve(files.size());  // the ranges point at them
  for (const auto& [name, want] : files.items()) {
    const MappedFile& f = mapped.emplace_back((dir / name).string());
    ranges.push_back({&f, 0, f.size()});
  }
  xxh64_ranges(ranges);
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const std::string at = "/weights/tensors/" + std::to_string(i);
    const std::string want = r.string(at + "/checksum");
    const std::string got = checksum_string(ranges[i].digest);
    if (got != want)
      fail(weights_path + ": tensor " + r.string(at + "/name") + " has checksum " + got +
           ", manifest.json says " + want);
  }
  std::size_t k = tensors.size();
  for (const auto& [name, want] : files.items()) {
    const std::string got = checksum_string(ranges[k++].digest);
    if (!want.is_string() || got != want.get<std::string>())
      fail((dir / name).string() + ": checksum " + got + ", manifest.json files." + name +
           " says " + want.dump());
  }
  s += "checksums: verified (" + std::to_string(tensors.size()) + " tensors, " +
       std::to_string(files.size()) + " files)\n";
  return s;
}

}  // namespace telos::compiler
