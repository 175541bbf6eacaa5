#include "executor/artifact.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "support/checksum.hpp"
#include "support/error.hpp"
#include "support/slot_image.hpp"

namespace telos::exec {
namespace {

using nlohmann::json;

// Reads manifest fields by dotted path ("model.vocab_size") so that every refusal names the
// field it is about.
class ManifestFields {
 public:
  explicit ManifestFields(std::string file) : file_(std::move(file)) {}
  const std::string& file() const { return file_; }

  [[noreturn]] void refuse(const std::string& field, const std::string& what) const {
    fail(file_ + ": " + field + ": " + what);
  }

  const json& member(const json& obj, const std::string& path, const char* key) const {
    auto it = obj.find(key);
    if (it == obj.end()) refuse(join(path, key), "missing");
    return *it;
  }
  const json& object(const json& obj, const std::string& path, const char* key) const {
    const json& v = member(obj, path, key);
    if (!v.is_object()) refuse(join(path, key), "expected an object");
    return v;
  }
  std::int64_t integer(const json& obj, const std::string& path, const char* key,
                       std::int64_t min_value) const {
    const json& v = member(obj, path, key);
    if (!v.is_number_integer()) refuse(join(path, key), "expected an integer");
    std::int64_t x = v.get<std::int64_t>();
    if (x < min_value)
      refuse(join(path, key), std::to_string(x) + " is below " + std::to_string(min_value));
    return x;
  }
  int small_integer(const json& obj, const std::string& path, const char* key,
                    int min_value) const {
    std::int64_t x = integer(obj, path, key, min_value);
    if (x > (1 << 30)) refuse(join(path, key), std::to_string(x) + " is implausibly large");
    return static_cast<int>(x);
  }
  double number(const json& obj, const std::string& path, const char* key) const {
    const json& v = member(obj, path, key);
    if (!v.is_number()) refuse(join(path, key), "expected a number");
    return v.get<double>();
  }
  double positive_number(const json& obj, const std::string& path, const char* key) const {
    double x = number(obj, path, key);
    if (!(x > 0)) refuse(join(path, key), "expected a positive number");
    return x;
  }
  std::string string(const json& obj, const std::string& path, const char* key) const {
    const json& v = member(obj, path, key);
    if (!v.is_string()) refuse(join(path, key), "expected a string");
    return v.get<std::string>();
  }
  bool boolean(const json& obj, const std::string& path, const char* key) const {
    const json& v = member(obj, path, key);
    if (!v.is_boolean()) refuse(join(path, key), "expected true or false");
    return v.get<bool>();
  }
  std::vector<int> ascending_integers(const json& obj, const std::string& path,
                                      const char* key) const {
    const json& v = member(obj, path, key);
    if (!v.is_array() || v.empty()) refuse(join(path, key), "expected a non-empty array");
    std::vector<int> out;
    for (const json& e : v) {
      if (!e.is_number_integer() || e.get<std::int64_t>() < 1 || e.get<std::int64_t>() > (1 << 30))
        refuse(join(path, key), "expected positive integers");
      int x = e.get<int>();
      if (!out.empty() && x <= out.back()) refuse(join(path, key), "expected ascending values");
      out.push_back(x);
    }
    return out;
  }

  static std::string join(const std::string& path, const char* key) {
    return path.empty() ? std::string(key) : path + "." + key;
  }

 private:
  std::string file_;
};

std::string format_shape(const std::vector<std::int64_t>& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

ModelConfig read_model(const ManifestFields& f, const json& m) {
  const std::string p = "model";
  ModelConfig c;
  c.name = f.string(m, p, "name");
  c.architecture = f.string(m, p, "architecture");
  c.family = f.string(m, p, "family");
  if (c.family != "llama" && c.family != "qwen2" && c.family != "qwen3" && c.family != "mistral")
    f.refuse("model.family", "\"" + c.family + "\" is not one of llama, qwen2, qwen3, mistral");
  c.vocab_size = f.small_integer(m, p, "vocab_size", 1);
  c.hidden_size = f.small_integer(m, p, "hidden_size", 1);
  c.intermediate_size = f.small_integer(m, p, "intermediate_size", 1);
  c.num_layers = f.small_integer(m, p, "num_layers", 1);
  c.num_heads = f.small_integer(m, p, "num_heads", 1);
  c.num_kv_heads = f.small_integer(m, p, "num_kv_heads", 1);
  c.head_dim = f.small_integer(m, p, "head_dim", 2);
  if (c.num_heads % c.num_kv_heads != 0)
    f.refuse("model.num_kv_heads", std::to_string(c.num_kv_heads) + " does not divide num_heads " +
                                       std::to_string(c.num_heads));
  if (c.head_dim % 2 != 0) f.refuse("model.head_dim", "RoPE needs an even head_dim");
  c.rms_norm_eps = f.positive_number(m, p, "rms_norm_eps");
  c.max_position_embeddings = f.small_integer(m, p, "max_position_embeddings", 1);

  const json& rope = f.object(m, p, "rope");
  c.rope.type = f.string(rope, "model.rope", "type");
  c.rope.theta = f.positive_number(rope, "model.rope", "theta");
  if (c.rope.type == "llama3") {
    c.rope.factor = f.positive_number(rope, "model.rope", "factor");
    c.rope.low_freq_factor = f.positive_number(rope, "model.rope", "low_freq_factor");
    c.rope.high_freq_factor = f.positive_number(rope, "model.rope", "high_freq_factor");
    if (c.rope.high_freq_factor <= c.rope.low_freq_factor)
      f.refuse("model.rope.high_freq_factor", "must be larger than low_freq_factor");
    c.rope.original_max_position_embeddings =
        f.small_integer(rope, "model.rope", "original_max_position_embeddings", 1);
  } else if (c.rope.type != "default") {
    f.refuse("model.rope.type", "\"" + c.rope.type + "\" is not default or llama3");
  }

  c.tie_word_embeddings = f.boolean(m, p, "tie_word_embeddings");
  c.qkv_bias = f.boolean(m, p, "qkv_bias");
  c.qk_norm = f.boolean(m, p, "qk_norm");
  if (const json& sw = f.member(m, p, "sliding_window"); !sw.is_null())
    f.refuse("model.sliding_window", "sliding-window attention is not supported (expected null)");
  // Some checkpoints have no BOS token: null reads as -1.
  c.bos_token_id =
      f.member(m, p, "bos_token_id").is_null() ? -1 : f.small_integer(m, p, "bos_token_id", 0);
  const json& eos = f.member(m, p, "eos_token_ids");
  if (!eos.is_array()) f.refuse("model.eos_token_ids", "expected an array of token ids");
  for (const json& e : eos) {
    if (!e.is_number_integer() || e.get<std::int64_t>() < 0 ||
        e.get<std::int64_t>() >= c.vocab_size)
      f.refuse("model.eos_token_ids",
               "expected token ids below vocab_size " + std::to_string(c.vocab_size));
    c.eos_token_ids.push_back(e.get<std::int32_t>());
  }
  return c;
}

ServingConfig read_serving(const ManifestFields& f, const json& s) {
  const std::string p = "serving";
  ServingConfig c;
  c.max_batch = f.small_integer(s, p, "max_batch", 1);
  c.max_seq_len = f.small_integer(s, p, "max_seq_len", 1);
  c.kv_page_size = f.small_integer(s, p, "kv_page_size", 1);
  const json& pool = f.object(s, p, "kv_pool");
  if (pool.contains("pages")) {
    c.kv_pool_pages = f.small_integer(pool, "serving.kv_pool", "pages", 1);
  } else if (pool.contains("memory_fraction")) {
    double fraction = f.positive_number(pool, "serving.kv_pool", "memory_fraction");
    if (fraction > 1.0) f.refuse("serving.kv_pool.memory_fraction", "expected at most 1");
    c.kv_pool_memory_fraction = fraction;
  } else {
    f.refuse("serving.kv_pool", "expected {\"pages\": N} or {\"memory_fraction\": F}");
  }
  c.prefill_chunk = f.small_integer(s, p, "prefill_chunk", 1);
  c.decode_buckets = f.ascending_integers(s, p, "decode_buckets");
  c.prefill_buckets = f.ascending_integers(s, p, "prefill_buckets");
  // The scheduler pads every step to a bucket, so the largest buckets must hold the largest steps.
  if (c.decode_buckets.back() < c.max_batch)
    f.refuse("serving.decode_buckets", "the largest bucket " +
                                           std::to_string(c.decode_buckets.back()) +
                                           " is below max_batch " + std::to_string(c.max_batch));
  if (c.prefill_buckets.back() < c.prefill_chunk)
    f.refuse("serving.prefill_buckets",
             "the largest bucket " + std::to_string(c.prefill_buckets.back()) +
                 " is below prefill_chunk " + std::to_string(c.prefill_chunk));
  const json& targets = f.member(s, p, "targets");
  if (!targets.is_array()) f.refuse("serving.targets", "expected an array of architectures");
  for (const json& t : targets) {
    if (!t.is_string()) f.refuse("serving.targets", "expected strings like \"sm_90a\"");
    c.targets.push_back(t.get<std::string>());
  }
  c.tensor_parallel = f.small_integer(s, p, "tensor_parallel", 1);
  return c;
}

KvCacheConfig read_kv_cache(const ManifestFields& f, const json& k, const ModelConfig& model,
                            const ServingConfig& serving) {
  const std::string p = "kv_cache";
  KvCacheConfig c;
  c.dtype = f.string(k, p, "dtype");
  DType dt;
  if (!parse_dtype(c.dtype, &dt)) f.refuse("kv_cache.dtype", "unknown dtype \"" + c.dtype + "\"");
  c.page_size = f.small_integer(k, p, "page_size", 1);
  c.num_layers = f.small_integer(k, p, "num_layers", 1);
  c.num_kv_heads = f.small_integer(k, p, "num_kv_heads", 1);
  c.head_dim = f.small_integer(k, p, "head_dim", 1);
  c.bytes_per_page = f.integer(k, p, "bytes_per_page", 1);
  c.layout = f.string(k, p, "layout");
  auto expect_equal = [&](const char* field, std::int64_t got, std::int64_t want,
                          const std::string& from) {
    if (got != want)
      f.refuse(std::string("kv_cache.") + field,
               std::to_string(got) + " does not match " + from + " " + std::to_string(want));
  };
  expect_equal("page_size", c.page_size, serving.kv_page_size, "serving.kv_page_size");
  expect_equal("num_layers", c.num_layers, model.num_layers, "model.num_layers");
  expect_equal("num_kv_heads", c.num_kv_heads, model.num_kv_heads, "model.num_kv_heads");
  expect_equal("head_dim", c.head_dim, model.head_dim, "model.head_dim");
  expect_equal("bytes_per_page", c.bytes_per_page,
               std::int64_t{2} * c.num_layers * c.page_size * c.num_kv_heads * c.head_dim *
                   static_cast<std::int64_t>(dtype_size(dt)),
               "2 * num_layers * page_size * num_kv_heads * head_dim * dtype size");
  if (c.layout != "page[layer][kv][head][slot][dim]")
    f.refuse("kv_cache.layout", "\"" + c.layout + "\" is not page[layer][kv][head][slot][dim]");
  return c;
}

// The tensors docs/artifact.md says a model of this configuration has, with their shapes.
struct ExpectedTensor {
  std::string name;
  std::vector<std::int64_t> shape;
  bool matrix;  // matrices may be bf16, f16 or f32; vectors are f32
};

std::vector<ExpectedTensor> expected_tensors(const ModelConfig& m) {
  const std::int64_t V = m.vocab_size, H = m.hidden_size, I = m.intermediate_size, D = m.head_dim,
                     Hq = m.num_heads, Hkv = m.num_kv_heads;
  std::vector<ExpectedTensor> out = {{"embed", {V, H}, true}};
  for (int l = 0; l < m.num_layers; ++l) {
    const std::string p = "layers." + std::to_string(l) + ".";
    out.push_back({p + "attn_norm", {H}, false});
    out.push_back({p + "qkv", {(Hq + 2 * Hkv) * D, H}, true});
    if (m.qkv_bias) out.push_back({p + "qkv_bias", {(Hq + 2 * Hkv) * D}, false});
    if (m.qk_norm) {
      out.push_back({p + "q_norm", {D}, false});
      out.push_back({p + "k_norm", {D}, false});
    }
    out.push_back({p + "o", {H, Hq * D}, true});
    out.push_back({p + "mlp_norm", {H}, false});
    out.push_back({p + "gate_up", {2 * I, H}, true});
    out.push_back({p + "down", {H, I}, true});
  }
  out.push_back({"final_norm", {H}, false});
  if (!m.tie_word_embeddings) out.push_back({"lm_head", {V, H}, true});
  return out;
}

// Every tmap: argument of the launch programs parses and fits inside the bf16 weight or arena
// buffer it maps (f32 maps: arena buffers only), so the GPU engine never encodes a map over
// memory it does not own.
void check_tensor_map_args(const ManifestFields& f, const json& programs, const Artifact& a) {
  if (!programs.is_object() || !programs.contains("buckets") || !programs.at("buckets").is_array())
    return;
  std::map<std::string, std::int64_t> arena;
  if (programs.contains("arena") && programs.at("arena").is_array())
    for (const json& b : programs.at("arena"))
      if (b.is_object() && b.contains("buffer") && b.at("buffer").is_string() && b.contains("bytes") &&
          b.at("bytes").is_number_integer())
        arena[b.at("buffer").get<std::string>()] = b.at("bytes").get<std::int64_t>();
  const json& buckets = programs.at("buckets");
  for (std::size_t i = 0; i < buckets.size(); ++i) {
    if (!buckets[i].is_object() || !buckets[i].contains("launches")) continue;
    const json& launches = buckets[i].at("launches");
    for (std::size_t j = 0; j < launches.size(); ++j) {
      if (!launches[j].is_object() || !launches[j].contains("args")) continue;
      const json& args = launches[j].at("args");
      for (std::size_t k = 0; k < args.size(); ++k) {
        if (!args[k].is_string()) continue;
        const std::string arg = args[k].get<std::string>();
        const std::string field = "programs.buckets[" + std::to_string(i) + "].launches[" +
                                  std::to_string(j) + "].args[" + std::to_string(k) + "]";
        if (arg.rfind("wimg:", 0) == 0 || arg.rfind("timg:", 0) == 0) {
          const WeightImageArg img = parse_weight_image_arg(arg, f.file() + ": " + field);
          const WeightTensor* w = a.find_tensor(img.weight);
          if (!w) f.refuse(field, arg + ": no weight tensor \"" + img.weight + "\"");
          if (w->dtype != DType::BF16 || w->shape.size() != 2)
            f.refuse(field, arg + ": a slot image is of a bf16 matrix");
          std::string why = slot_image_refusal(w->shape[0], w->shape[1], img.bn, img.halves);
          if (why.empty() && img.box_rows > 0)
            why = slot_image_box_refusal(img.bn, img.halves, img.box_rows);
          if (!why.empty()) f.refuse(field, arg + ": " + why);
          continue;
        }
        if (arg.rfind("tmap:", 0) != 0) continue;
        const TensorMapArg t = parse_tensor_map_arg(arg, f.file() + ": " + field);
        const std::int64_t need = t.rows * t.cols * t.elem_bytes;
        std::int64_t have = 0;
        if (t.target.rfind("kv:", 0) == 0) {
          // The pool from layer L's base, a page's rows at a time: the engine spans the map over
          // the pages it allocates, so only its shape is checked here.
          const KvCacheConfig& kv = a.kv_cache();
          const std::string l = t.target.substr(3);
          if (l.empty() || l.size() > 6 || l.find_first_not_of("0123456789") != std::string::npos ||
              std::stoi(l) >= kv.num_layers)
            f.refuse(field, arg + ": \"" + l + "\" is not a layer of the KV cache");
          if (t.elem_bytes != 2 || t.cols != kv.head_dim || kv.head_dim % 64 != 0)
            f.refuse(field, arg + ": a KV map's rows are one position of one head (COLS " +
                                std::to_string(kv.head_dim) +
                                ", a multiple of 64), read in bf16 boxes of 64 columns");
          if (t.rows * t.cols * 2 != kv.bytes_per_page || t.box_rows != kv.page_size)
            f.refuse(field, arg + ": a KV map's ROWS are one page's (" +
                                std::to_string(kv.bytes_per_page / (2 * kv.head_dim)) +
                                ") and its BOX_ROWS the page size (" +
                                std::to_string(kv.page_size) + ")");
          continue;
        }
        if (t.target.rfind("w:", 0) == 0) {
          const WeightTensor* w = a.find_tensor(t.target.substr(2));
          if (!w) f.refuse(field, arg + ": no weight tensor \"" + t.target.substr(2) + "\"");
          if (w->dtype != DType::BF16)
            f.refuse(field, arg + ": tensor maps over weights are bf16, the weight is " +
                                std::string(dtype_name(w->dtype)));
          if (t.elem_bytes != 2)
            f.refuse(field, arg + ": a weight is bf16, its map's BOX_COLS must be 64");
          have = static_cast<std::int64_t>(w->bytes);
        } else {
          auto it = arena.find(t.target.substr(4));
          if (it == arena.end())
            f.refuse(field, arg + ": no arena buffer \"" + t.target.substr(4) + "\"");
          have = it->second;
        }
        if (need > have)
          f.refuse(field, arg + ": the map spans " + std::to_string(need) + " bytes, but " +
                              t.target + " has " + std::to_string(have));
      }
    }
  }
}

}  // namespace

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
    const std::size_t colon = arg.rfind(':', end - 1);
    if (colon == std::string::npos || colon < 5 || end == 0) bad("too few fields");
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
    if (x.empty() || x.size() > 12 || x.find_first_not_of("0123456789") != std::string::npos)
      bad("\"" + x + "\" is not a positive integer");
    v[i] = std::stoll(x);
    if (v[i] <= 0) bad("sizes must be positive");
  }
  t.rows = v[0];
  t.cols = v[1];
  if (t.cols % 8 != 0) bad("COLS must be a multiple of 8 (rows of 16-byte multiples)");
  if (v[2] > 256) bad("BOX_ROWS must be 1..256");
  if (v[3] != 64 && v[3] != 32)
    bad("BOX_COLS must be 64 (bf16) or 32 (f32): one 128-byte swizzle span");
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

std::shared_ptr<const Artifact> Artifact::load(const std::string& dir, WeightChecks checks) {
  namespace fs = std::filesystem;
  std::shared_ptr<Artifact> a(new Artifact());
  a->dir_ = dir;
  const fs::path root(dir);
  if (!fs::is_directory(root)) fail(dir + ": not an artifact directory (expected NAME.telos/)");

  const std::string manifest_path = (root / "manifest.json").string();
  {
    std::ifstream in(manifest_path);
    if (!in) fail(manifest_path + ": missing (every artifact has a manifest.json)");
    std::stringstream text;
    text << in.rdbuf();
    try {
      a->manifest_ = json::parse(text.str());
    } catch (const json::parse_error& e) {
      fail(manifest_path + ": not valid JSON: " + e.what());
    }
  }
  const json& m = a->manifest_;
  ManifestFields f(manifest_path);
  if (!m.is_object()) f.refuse("(top level)", "expected a JSON object");

  // The schema version first: a newer manifest may mean anything below, so nothing else is read.
  std::int64_t schema = f.integer(m, "", "schema_version", 1);
  if (schema > kArtifactSchemaVersion)
    f.refuse("schema_version", std::to_string(schema) + " is newer than this telos-run reads (" +
                                   std::to_string(kArtifactSchemaVersion) +
                                   "); use the telos-run that matches the telosc that wrote it");

  a->model_ = read_model(f, f.object(m, "", "model"));
  a->serving_ = read_serving(f, f.object(m, "", "serving"));
  a->kv_cache_ = read_kv_cache(f, f.object(m, "", "kv_cache"), a->model_, a->serving_);
  if (a->serving_.max_seq_len > a->model_.max_position_embeddings)
    f.refuse("serving.max_seq_len", std::to_string(a->serving_.max_seq_len) +
                                        " exceeds model.max_position_embeddings " +
                                        std::to_string(a->model_.max_position_embeddings));
  const json& kernels = f.member(m, "", "kernels");
  if (!kernels.is_array()) f.refuse("kernels", "expected an array");

  // Every other file: present and matching its checksum.
  const json& files = f.object(m, "", "files");
  for (const auto& [name, sum] : files.items()) {
    if (!sum.is_string()) f.refuse("files." + name, "expected a checksum string \"xxh64:...\"");
    if (name.find("..") != std::string::npos || fs::path(name).is_absolute())
      f.refuse("files." + name, "file names must stay inside the artifact directory");
    const fs::path path = root / name;
    if (!fs::is_regular_file(path))
      fail(path.string() + ": missing (manifest.json files." + name + " lists it)");
  }

  const json& w = f.object(m, "", "weights");
  const std::string weights_name = f.string(w, "weights", "file");
  const std::int64_t alignment = f.integer(w, "weights", "alignment", 1);
  const std::int64_t size = f.integer(w, "weights", "size", 0);
  const fs::path weights_path = root / weights_name;
  if (!fs::is_regular_file(weights_path))
    fail(weights_path.string() + ": missing (manifest.json weights.file names it)");
  // Size before checksums: a truncated file gets the message that says so.
  const auto actual_size = static_cast<std::int64_t>(fs::file_size(weights_path));
  if (actual_size != size)
    fail(weights_path.string() + ": " + std::to_string(actual_size) +
         " bytes, but manifest.json weights.size says " + std::to_string(size) +
         (actual_size < size ? " (truncated)" : " (not the file this manifest describes)"));

  // The checksums, all computed together below (xxh64_ranges) and reported in manifest order: the
  // files first, then the tensors. weights.bin's own checksum only with kEveryByte: its tensors'
  // checksums cover every byte a model reads.
  a->weights_ = MappedFile(weights_path.string());
  std::vector<MappedFile> other_files;
  other_files.reserve(files.size());  // the ranges point at them
  std::vector<ChecksumRange> ranges;
  std::vector<std::string> file_names;
  for (const auto& [name, sum] : files.items()) {
    if (name == weights_name && checks == WeightChecks::kEveryTensor) continue;
    file_names.push_back(name);
    const MappedFile* file = &a->weights_;
    if (name != weights_name) file = &other_files.emplace_back((root / name).string());
    ranges.push_back({file, 0, file->size()});
  }
  const std::size_t file_ranges = ranges.size();

  const json& tensors = f.member(w, "weights", "tensors");
  if (!tensors.is_array()) f.refuse("weights.tensors", "expected an array");
  std::vector<std::string> tensor_sums;
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const json& t = tensors[i];
    const std::string path = "weights.tensors[" + std::to_string(i) + "]";
    if (!t.is_object()) f.refuse(path, "expected an object");
    WeightTensor wt;
    wt.name = f.string(t, path, "name");
    const std::string named = path + " (" + wt.name + ")";
    if (a->find_tensor(wt.name)) f.refuse(named, "a second tensor of the same name");
    if (!parse_dtype(f.string(t, named, "dtype"), &wt.dtype))
      f.refuse(named + ".dtype", "unknown dtype");
    const json& shape = f.member(t, named, "shape");
    if (!shape.is_array()) f.refuse(named + ".shape", "expected an array of dimensions");
    std::int64_t elements = 1;
    for (const json& d : shape) {
      if (!d.is_number_integer() || d.get<std::int64_t>() < 1)
        f.refuse(named + ".shape", "expected positive dimensions");
      wt.shape.push_back(d.get<std::int64_t>());
      // No tensor has more elements than weights.bin has bytes; checking as we go also keeps the
      // product from overflowing.
      if (wt.shape.back() > size || elements > size / wt.shape.back())
        f.refuse(named + ".shape", format_shape(wt.shape) + "... is larger than " + weights_name +
                                       " (" + std::to_string(size) + " bytes)");
      elements *= wt.shape.back();
    }
    // row_major, or for the QKV projection its rows in RoPE's pair order (docs/artifact.md).
    wt.layout = f.string(t, named, "layout");
    const bool qkv = wt.name.starts_with("layers.") && wt.name.ends_with(".qkv");
    if (wt.layout != "row_major" && !(qkv && wt.layout == "qkv_rope_pairs"))
      f.refuse(named + ".layout", "\"" + wt.layout + "\" is not row_major" +
                                      (qkv ? " or qkv_rope_pairs" : "") +
                                      " (the schema 1 layouts)");
    const std::int64_t offset = f.integer(t, named, "offset", 0);
    const std::int64_t bytes = f.integer(t, named, "bytes", 1);
    if (offset % alignment != 0)
      f.refuse(named + ".offset", std::to_string(offset) +
                                      " is not a multiple of weights.alignment " +
                                      std::to_string(alignment));
    if (bytes != elements * static_cast<std::int64_t>(dtype_size(wt.dtype)))
      f.refuse(named + ".bytes", std::to_string(bytes) + " does not match shape " +
                                     format_shape(wt.shape) + " of " +
                                     std::string(dtype_name(wt.dtype)));
    if (offset > size || bytes > size - offset)  // written so that nothing overflows
      f.refuse(named + ".offset", std::to_string(offset) + " plus " + std::to_string(bytes) +
                                      " bytes runs past the end of " + weights_name + " (" +
                                      std::to_string(size) + " bytes)");
    wt.data = a->weights_.data() + offset;
    wt.bytes = static_cast<std::size_t>(bytes);
    tensor_sums.push_back(f.string(t, named, "checksum"));
    ranges.push_back({&a->weights_, static_cast<std::size_t>(offset), wt.bytes});
    a->tensors_.push_back(std::move(wt));
  }

  xxh64_ranges(ranges);
  for (std::size_t i = 0; i < file_ranges; ++i) {
    const std::string& name = file_names[i];
    const std::string want = files.at(name).get<std::string>();
    const std::string got = checksum_string(ranges[i].digest);
    if (got != want)
      fail((root / name).string() + ": checksum " + got + " does not match manifest.json files." +
           name + " " + want + " (the file is corrupt or was changed)");
  }
  for (std::size_t i = 0; i < a->tensors_.size(); ++i) {
    const WeightTensor& wt = a->tensors_[i];
    const std::string got = checksum_string(ranges[file_ranges + i].digest);
    if (got != tensor_sums[i])
      fail(weights_path.string() + ": tensor " + wt.name + " (offset " +
           std::to_string(ranges[file_ranges + i].offset) + ", " + std::to_string(wt.bytes) +
           " bytes): checksum " + got + " does not match " + manifest_path + " weights.tensors[" +
           std::to_string(i) + "] (" + wt.name + ").checksum " + tensor_sums[i]);
  }

  for (const ExpectedTensor& e : expected_tensors(a->model_)) {
    const WeightTensor* t = a->find_tensor(e.name);
    if (!t) f.refuse("weights.tensors", "no tensor \"" + e.name + "\" (the model needs it)");
    if (t->shape != e.shape)
      f.refuse("weights.tensors (" + e.name + ").shape",
               format_shape(t->shape) + ", expected " + format_shape(e.shape));
    const bool ok = e.matrix ? t->dtype != DType::I32 : t->dtype == DType::F32;
    if (!ok)
      f.refuse("weights.tensors (" + e.name + ").dtype",
               std::string(dtype_name(t->dtype)) +
                   (e.matrix ? " is not a floating-point type" : ", expected f32"));
  }
  if (m.contains("programs")) check_tensor_map_args(f, m.at("programs"), *a);
  return a;
}

const WeightTensor* Artifact::find_tensor(std::string_view name) const {
  for (const WeightTensor& t : tensors_)
    if (t.name == name) return &t;
  return nullptr;
}

const WeightTensor& Artifact::tensor(std::string_view name) const {
  if (const WeightTensor* t = find_tensor(name)) return *t;
  fail(dir_ + "/manifest.json: weights.tensors: no tensor \"" + std::string(name) + "\"");
}

bool Artifact::has_kernels() const {
  return !manifest_.at("kernels").empty();
}

void Artifact::check_target(const std::string& arch) const {
  auto base = [](std::string s) {
    if (!s.empty() && s.back() == 'a') s.pop_back();
    return s;
  };
  for (const std::string& t : serving_.targets)
    if (base(t) == base(arch)) return;
  std::string list;
  for (const std::string& t : serving_.targets) list += (list.empty() ? "" : ", ") + t;
  fail(dir_ + "/manifest.json: serving.targets is [" + list + "], but this device is " + arch +
       " (compile the artifact with --target " + arch + ")");
}

void Artifact::release_weight_pages(const WeightTensor& tensor, std::size_t offset,
                                    std::size_t length) const {
  weights_.release(static_cast<std::size_t>(tensor.data - weights_.data()) + offset, length);
}

}  // namespace telos::exec
