#include "support/artifact_format.hpp"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>

#include "support/artifact_limits.hpp"
#include "support/artifact_programs.hpp"
#include "support/checksum.hpp"
#include "support/error.hpp"
#include "support/manifest_fields.hpp"
#include "support/tensor_parallel.hpp"

namespace telos {
namespace {

using nlohmann::json;

RopeConfig read_rope(const ManifestFields& f, const json& rope) {
  const std::string p = "model.rope";
  RopeConfig c;
  c.type = f.string(rope, p, "type");
  c.theta = f.positive_number(rope, p, "theta");
  if (c.type == "llama3") {
    c.factor = f.positive_number(rope, p, "factor");
    c.low_freq_factor = f.positive_number(rope, p, "low_freq_factor");
    c.high_freq_factor = f.positive_number(rope, p, "high_freq_factor");
    // llama3 smooths between the two wavelength thresholds, dividing by their difference.
    if (c.high_freq_factor <= c.low_freq_factor)
      f.refuse("model.rope.high_freq_factor", "must be larger than low_freq_factor");
    c.original_max_position_embeddings =
        f.small_integer(rope, p, "original_max_position_embeddings", 1, limits::kMaxPositions);
  } else if (c.type != "default") {
    f.refuse("model.rope.type", "\"" + c.type + "\" is not default or llama3");
  }
  return c;
}

std::vector<std::int32_t> read_eos(const ManifestFields& f, const json& m, int vocab_size) {
  const json& eos = f.array(m, "model", "eos_token_ids");
  std::vector<std::int32_t> ids;
  for (std::size_t i = 0; i < eos.size(); ++i)
    ids.push_back(static_cast<std::int32_t>(f.integer_value(
        eos[i], "model.eos_token_ids[" + std::to_string(i) + "]", 0, vocab_size - 1)));
  return ids;
}

ModelConfig read_model(const ManifestFields& f, const json& m) {
  const std::string p = "model";
  ModelConfig c;
  c.name = f.string(m, p, "name");
  c.architecture = f.string(m, p, "architecture");
  c.family = f.string(m, p, "family");
  if (c.family != "llama" && c.family != "qwen2" && c.family != "qwen3" && c.family != "mistral")
    f.refuse("model.family", "\"" + c.family + "\" is not one of llama, qwen2, qwen3, mistral");
  c.vocab_size = f.small_integer(m, p, "vocab_size", 1, limits::kMaxVocabSize);
  c.hidden_size = f.small_integer(m, p, "hidden_size", 1, limits::kMaxHiddenSize);
  c.intermediate_size = f.small_integer(m, p, "intermediate_size", 1, limits::kMaxIntermediateSize);
  c.num_layers = f.small_integer(m, p, "num_layers", 1, limits::kMaxLayers);
  c.num_heads = f.small_integer(m, p, "num_heads", 1, limits::kMaxHeads);
  c.num_kv_heads = f.small_integer(m, p, "num_kv_heads", 1, limits::kMaxHeads);
  c.head_dim = f.small_integer(m, p, "head_dim", 2, limits::kMaxHeadDim);
  if (c.num_heads % c.num_kv_heads != 0)
    f.refuse("model.num_kv_heads", std::to_string(c.num_kv_heads) + " does not divide num_heads " +
                                       std::to_string(c.num_heads));
  if (c.head_dim % 2 != 0) f.refuse("model.head_dim", "RoPE needs an even head_dim");
  // The importer's bound: eps is added to a mean of squares before its square root.
  c.rms_norm_eps = f.positive_number(m, p, "rms_norm_eps");
  if (c.rms_norm_eps >= 1.0) f.refuse("model.rms_norm_eps", "expected a value below 1");
  c.max_position_embeddings =
      f.small_integer(m, p, "max_position_embeddings", 1, limits::kMaxPositions);
  c.rope = read_rope(f, f.object(m, p, "rope"));
  c.tie_word_embeddings = f.boolean(m, p, "tie_word_embeddings");
  c.qkv_bias = f.boolean(m, p, "qkv_bias");
  c.qk_norm = f.boolean(m, p, "qk_norm");
  if (const json& sw = f.member(m, p, "sliding_window"); !sw.is_null())
    f.refuse("model.sliding_window", "sliding-window attention is not supported (expected null)");
  // A checkpoint without a BOS token has null here.
  if (const json& bos = f.member(m, p, "bos_token_id"); !bos.is_null())
    c.bos_token_id =
        static_cast<int>(f.integer_value(bos, "model.bos_token_id", 0, c.vocab_size - 1));
  c.eos_token_ids = read_eos(f, m, c.vocab_size);
  return c;
}

// Strictly increasing bucket sizes from 1, the largest equal to `largest` (the scheduler pads every
// step to a bucket, so the largest must hold the largest step).
std::vector<int> read_buckets(const ManifestFields& f, const json& s, const char* key, int largest,
                              const char* largest_name) {
  const std::string field = std::string("serving.") + key;
  const json& v = f.array(s, "serving", key);
  if (v.empty()) f.refuse(field, "expected a non-empty array");
  std::vector<int> out;
  for (std::size_t i = 0; i < v.size(); ++i) {
    const int x =
        static_cast<int>(f.integer_value(v[i], field + "[" + std::to_string(i) + "]", 1, largest));
    if (!out.empty() && x <= out.back()) f.refuse(field, "expected ascending values");
    out.push_back(x);
  }
  if (out.back() != largest)
    f.refuse(field, "the largest bucket " + std::to_string(out.back()) + " is not " + largest_name +
                        " " + std::to_string(largest));
  return out;
}

ServingConfig read_serving(const ManifestFields& f, const json& s, const ModelConfig& model) {
  const std::string p = "serving";
  ServingConfig c;
  c.max_batch = f.small_integer(s, p, "max_batch", 1, limits::kMaxBatch);
  c.max_seq_len = f.small_integer(s, p, "max_seq_len", 1, model.max_position_embeddings);
  c.kv_page_size = f.small_integer(s, p, "kv_page_size", 1, limits::kMaxKvPageSize);
  if ((c.kv_page_size & (c.kv_page_size - 1)) != 0)
    f.refuse("serving.kv_page_size", std::to_string(c.kv_page_size) + " is not a power of two");
  const json& pool = f.object(s, p, "kv_pool");
  if (pool.contains("pages")) {
    c.kv_pool_pages = f.small_integer(pool, "serving.kv_pool", "pages", 1, limits::kMaxKvPoolPages);
  } else if (pool.contains("memory_fraction")) {
    const double fraction = f.positive_number(pool, "serving.kv_pool", "memory_fraction");
    if (fraction > 1.0) f.refuse("serving.kv_pool.memory_fraction", "expected at most 1");
    c.kv_pool_memory_fraction = fraction;
  } else {
    f.refuse("serving.kv_pool", "expected {\"pages\": N} or {\"memory_fraction\": F}");
  }
  c.prefill_chunk = f.small_integer(s, p, "prefill_chunk", 1, c.max_seq_len);
  c.decode_buckets = read_buckets(f, s, "decode_buckets", c.max_batch, "max_batch");
  c.prefill_buckets = read_buckets(f, s, "prefill_buckets", c.prefill_chunk, "prefill_chunk");
  const json& targets = f.array(s, p, "targets");
  for (const json& t : targets) {
    if (!t.is_string()) f.refuse("serving.targets", "expected strings like \"sm_90a\"");
    c.targets.push_back(t.get<std::string>());
  }
  c.tensor_parallel = f.small_integer(s, p, "tensor_parallel", 1, kMaxTensorParallel);
  if (const std::string why = tensor_parallel_refusal(c.tensor_parallel, model.num_heads,
                                                      model.num_kv_heads, model.intermediate_size);
      !why.empty())
    f.refuse("serving.tensor_parallel", why);
  return c;
}

// An e4m3 cache's scales: one positive normal f32 a layer (what the KV append divides by).
std::vector<float> read_kv_scales(const ManifestFields& f, const json& k, const char* key,
                                  int num_layers) {
  const std::string field = ManifestFields::join("kv_cache", key);
  const json& scales = f.array(k, "kv_cache", key);
  if (scales.size() != static_cast<std::size_t>(num_layers))
    f.refuse(field, std::to_string(scales.size()) + " scales, expected one a layer (" +
                        std::to_string(num_layers) + ")");
  std::vector<float> out;
  for (const json& s : scales) {
    const double x = s.is_number() ? s.get<double>() : 0.0;
    if (!(x >= std::numeric_limits<float>::min() && x <= std::numeric_limits<float>::max()))
      f.refuse(field, "expected positive normal f32 numbers, found " + s.dump());
    out.push_back(static_cast<float>(x));
  }
  return out;
}

KvCacheConfig read_kv_cache(const ManifestFields& f, const json& k, const ModelConfig& model,
                            const ServingConfig& serving) {
  const std::string p = "kv_cache";
  KvCacheConfig c;
  const std::string dtype = f.string(k, p, "dtype");
  if (!parse_dtype(dtype, &c.dtype) || (c.dtype != DType::BF16 && c.dtype != DType::E4M3))
    f.refuse("kv_cache.dtype", "\"" + dtype + "\" is not bf16 or e4m3");
  auto expect_equal = [&](const char* field, std::int64_t want, const std::string& from) {
    const std::int64_t got = f.integer(k, p, field, 1, std::numeric_limits<std::int64_t>::max());
    if (got != want)
      f.refuse(std::string("kv_cache.") + field,
               std::to_string(got) + " does not match " + from + " " + std::to_string(want));
    return got;
  };
  c.page_size =
      static_cast<int>(expect_equal("page_size", serving.kv_page_size, "serving.kv_page_size"));
  c.num_layers = static_cast<int>(expect_equal("num_layers", model.num_layers, "model.num_layers"));
  // Each rank's pool holds its own KV heads (support/tensor_parallel.hpp).
  c.num_kv_heads = static_cast<int>(
      expect_equal("num_kv_heads", rank_shape_of(model, serving).kv_heads,
                   serving.tensor_parallel > 1 ? "a rank's KV heads of model.num_kv_heads"
                                               : "model.num_kv_heads"));
  c.head_dim = static_cast<int>(expect_equal("head_dim", model.head_dim, "model.head_dim"));
  // Each factor is bounded (artifact_limits.hpp), so the product stays far inside 64 bits.
  c.bytes_per_page =
      expect_equal("bytes_per_page",
                   std::int64_t{2} * c.num_layers * c.page_size * c.num_kv_heads * c.head_dim *
                       static_cast<std::int64_t>(dtype_size(c.dtype)),
                   "2 * num_layers * page_size * num_kv_heads * head_dim * dtype size");
  c.layout = f.string(k, p, "layout");
  if (c.layout != "page[layer][kv][head][slot][dim]")
    f.refuse("kv_cache.layout", "\"" + c.layout + "\" is not page[layer][kv][head][slot][dim]");
  if (c.dtype == DType::E4M3) {
    c.k_scales = read_kv_scales(f, k, "k_scales", c.num_layers);
    c.v_scales = read_kv_scales(f, k, "v_scales", c.num_layers);
  } else if (k.contains("k_scales") || k.contains("v_scales")) {
    f.refuse("kv_cache", "k_scales and v_scales belong to an e4m3 cache only");
  }
  return c;
}

// A file name the manifest gives: a relative path that stays inside the artifact directory.
bool inside_artifact(const std::string& name) {
  if (name.empty() || name.front() == '/') return false;
  for (const auto& part : std::filesystem::path(name))
    if (part == ".." || part == ".") return false;
  return true;
}

bool is_checksum(const json& v) {
  if (!v.is_string()) return false;
  const std::string& s = v.get_ref<const std::string&>();
  return s.size() == 22 && s.rfind("xxh64:", 0) == 0 &&
         s.find_first_not_of("0123456789abcdef", 6) == std::string::npos;
}

std::vector<std::pair<std::string, std::string>> read_files(const ManifestFields& f,
                                                            const json& files) {
  if (static_cast<std::int64_t>(files.size()) > limits::kMaxArtifactFiles)
    f.refuse("files", std::to_string(files.size()) + " files, more than " +
                          std::to_string(limits::kMaxArtifactFiles));
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& [name, sum] : files.items()) {
    if (!inside_artifact(name))
      f.refuse("files." + name, "file names must stay inside the artifact directory");
    if (name == "manifest.json")
      f.refuse("files." + name, "the manifest has no checksum of itself");
    if (!is_checksum(sum)) f.refuse("files." + name, "expected a checksum string \"xxh64:...\"");
    out.emplace_back(name, sum.get<std::string>());
  }
  return out;
}

// A tensor-parallel entry's "split": {"dim", "of", "ranges"}, read as far as its types and
// bounds; read_weight_file compares it with the part the rank must hold.
WeightSplit read_split(const ManifestFields& f, const json& t, const std::string& named) {
  const std::string field = named + ".split";
  const json& split = f.object(t, named, "split");
  WeightSplit w;
  w.dim = f.small_integer(split, field, "dim", 0, 1);
  w.whole = f.integer(split, field, "of", 1, limits::kMaxValueDim);
  const json& ranges = f.array(split, field, "ranges");
  if (ranges.empty() || static_cast<std::int64_t>(ranges.size()) > limits::kMaxOpEntries)
    f.refuse(field + ".ranges",
             "expected 1 to " + std::to_string(limits::kMaxOpEntries) + " ranges [begin, end]");
  for (std::size_t i = 0; i < ranges.size(); ++i) {
    const std::string at = field + ".ranges[" + std::to_string(i) + "]";
    if (!ranges[i].is_array() || ranges[i].size() != 2) f.refuse(at, "expected [begin, end]");
    w.ranges.emplace_back(f.integer_value(ranges[i][0], at + "[0]", 0, w.whole - 1),
                          f.integer_value(ranges[i][1], at + "[1]", 1, w.whole));
  }
  return w;
}

// One entry of a weight file's tensors, checked on its own: dtype, a shape that fits the file,
// layout, offset and size inside the file.
WeightEntry read_weight_entry(const ManifestFields& f, const json& t, const std::string& path,
                              const WeightFile& file, const ModelConfig& model) {
  if (!t.is_object()) f.refuse(path, "expected an object");
  const std::int64_t size = file.size;
  WeightEntry e;
  e.name = f.string(t, path, "name");
  const std::string named = path + " (" + e.name + ")";
  if (!parse_dtype(f.string(t, named, "dtype"), &e.dtype))
    f.refuse(named + ".dtype", "unknown dtype");
  const json& shape = f.array(t, named, "shape");
  if (shape.empty() || shape.size() > 2)
    f.refuse(named + ".shape", "expected one or two dimensions (a vector or a matrix)");
  std::int64_t elements = 1;
  for (const json& d : shape) {
    if (!d.is_number_integer() || d.get<std::int64_t>() < 1)
      f.refuse(named + ".shape", "expected positive dimensions");
    e.shape.push_back(d.get<std::int64_t>());
    // No tensor has more elements than its file has bytes; checking as we go also keeps the
    // product from overflowing.
    if (e.shape.back() > size || elements > size / e.shape.back())
      f.refuse(named + ".shape", format_shape(e.shape) + "... is larger than " + file.file + " (" +
                                     std::to_string(size) + " bytes)");
    elements *= e.shape.back();
  }
  // row_major, or for the QKV projection its rows in RoPE's pair order (docs/artifact.md), which
  // groups a head's rows by 8.
  e.layout = f.string(t, named, "layout");
  const bool qkv = e.name.starts_with("layers.") && e.name.ends_with(".qkv");
  if (e.layout != "row_major" && !(qkv && e.layout == "qkv_rope_pairs"))
    f.refuse(named + ".layout", "\"" + e.layout + "\" is not row_major" +
                                    (qkv ? " or qkv_rope_pairs" : "") + " (the schema 1 layouts)");
  if (e.layout == "qkv_rope_pairs" && model.head_dim % 8 != 0)
    f.refuse(named + ".layout", "qkv_rope_pairs needs a head_dim that is a multiple of 8, not " +
                                    std::to_string(model.head_dim));
  e.offset = f.integer(t, named, "offset", 0, std::numeric_limits<std::int64_t>::max());
  e.bytes = f.integer(t, named, "bytes", 1, std::numeric_limits<std::int64_t>::max());
  if (e.offset % limits::kWeightAlignment != 0)
    f.refuse(named + ".offset", std::to_string(e.offset) +
                                    " is not a multiple of weights.alignment " +
                                    std::to_string(limits::kWeightAlignment));
  if (e.bytes != elements * static_cast<std::int64_t>(dtype_size(e.dtype)))
    f.refuse(named + ".bytes", std::to_string(e.bytes) + " does not match shape " +
                                   format_shape(e.shape) + " of " +
                                   std::string(dtype_name(e.dtype)));
  if (e.offset > size || e.bytes > size - e.offset)  // written so that nothing overflows
    f.refuse(named + ".offset", std::to_string(e.offset) + " plus " + std::to_string(e.bytes) +
                                    " bytes runs past the end of " + file.file + " (" +
                                    std::to_string(size) + " bytes)");
  const json& sum = f.member(t, named, "checksum");
  if (!is_checksum(sum)) f.refuse(named + ".checksum", "expected a checksum string \"xxh64:...\"");
  e.checksum = sum.get<std::string>();
  if (t.contains("split")) e.split = read_split(f, t, named);
  if (t.contains("scale")) {
    const std::string field = named + ".scale";
    const json& scale = f.object(t, named, "scale");
    const json& block = f.array(scale, field, "block");
    if (block.size() != 2) f.refuse(field + ".block", "expected [rows, columns]");
    e.scale = WeightScale{f.string(scale, field, "tensor"),
                          f.integer_value(block[0], field + ".block[0]", 1, limits::kMaxValueDim),
                          f.integer_value(block[1], field + ".block[1]", 1, limits::kMaxValueDim)};
  }
  if ((e.dtype == DType::E4M3) != e.scale.has_value())
    f.refuse(named + ".scale", e.scale ? "only an e4m3 tensor has scales"
                                       : "an e4m3 tensor needs its scales (expected "
                                         "{\"tensor\", \"block\"})");
  if (e.scale && e.shape.size() != 2) f.refuse(named + ".shape", "an e4m3 tensor is a matrix");
  return e;
}

// Each e4m3 entry's scale tensor: an f32 entry of the same file, of the shape its blocks give,
// that scales nothing else and has no scales or split of its own. Returns the scale tensors' names.
std::set<std::string> check_scales(const ManifestFields& f, const WeightFile& file,
                                   const std::string& path) {
  std::set<std::string> scales;
  for (const WeightEntry& e : file.tensors) {
    if (!e.scale) continue;
    const std::string field = path + ".tensors (" + e.name + ").scale.tensor";
    const WeightEntry* s = nullptr;
    for (const WeightEntry& t : file.tensors)
      if (t.name == e.scale->tensor) s = &t;
    if (!s) f.refuse(field, "no tensor \"" + e.scale->tensor + "\" in " + file.file);
    const std::vector<std::int64_t> want = {
        (e.shape[0] + e.scale->block_rows - 1) / e.scale->block_rows,
        (e.shape[1] + e.scale->block_cols - 1) / e.scale->block_cols};
    if (s->dtype != DType::F32 || s->shape != want || s->scale || s->split)
      f.refuse(field, "\"" + s->name + "\" is " + std::string(dtype_name(s->dtype)) +
                          format_shape(s->shape) + ", expected f32" + format_shape(want) +
                          " (one scale a " + std::to_string(e.scale->block_rows) + "x" +
                          std::to_string(e.scale->block_cols) + " block), unsplit");
    if (!scales.insert(s->name).second)
      f.refuse(field, "\"" + s->name + "\" scales another tensor too");
  }
  return scales;
}

// One weight file (`w`, the weights section or an entry of its ranks, at `path`) of rank `rank`:
// every entry valid, and exactly the tensors the model needs, with their shapes and, split over
// ranks, the rank's part of each.
WeightFile read_weight_file(const ManifestFields& f, const json& w, const std::string& path,
                            const std::vector<ExpectedTensor>& want, std::size_t rank,
                            const ModelConfig& model) {
  WeightFile file;
  file.field = path;
  file.file = f.string(w, path, "file");
  if (!inside_artifact(file.file))
    f.refuse(path + ".file", "file names must stay inside the artifact directory");
  file.size = f.integer(w, path, "size", 0, std::numeric_limits<std::int64_t>::max());
  const json& tensors = f.array(w, path, "tensors");
  // At most the tensors the model has, each with its scales: each entry is then checked once
  // against a set of names.
  if (tensors.size() > 2 * want.size())
    f.refuse(path + ".tensors", std::to_string(tensors.size()) + " tensors, but the model has " +
                                    std::to_string(want.size()) + " (and their scales)");
  std::set<std::string> names;
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const std::string at = path + ".tensors[" + std::to_string(i) + "]";
    WeightEntry e = read_weight_entry(f, tensors[i], at, file, model);
    if (!names.insert(e.name).second)
      f.refuse(at + " (" + e.name + ")", "a second tensor of the same name");
    file.tensors.push_back(std::move(e));
  }
  const std::set<std::string> scales = check_scales(f, file, path);
  for (const WeightEntry& t : file.tensors) {
    bool wanted = scales.count(t.name) > 0;
    for (const ExpectedTensor& e : want) wanted |= e.name == t.name;
    if (!wanted)
      f.refuse(path + ".tensors (" + t.name + ")",
               "not a tensor of the model, nor the scales of one");
  }
  for (const ExpectedTensor& e : want) {
    const WeightEntry* t = nullptr;
    for (const WeightEntry& have : file.tensors)
      if (have.name == e.name) t = &have;
    const std::string named = path + ".tensors (" + e.name + ")";
    if (!t) f.refuse(path + ".tensors", "no tensor \"" + e.name + "\" (the model needs it)");
    if (t->shape != e.shape)
      f.refuse(named + ".shape", format_shape(t->shape) + ", expected " + format_shape(e.shape));
    const bool ok = e.matrix ? t->dtype != DType::I32 : t->dtype == DType::F32;
    if (!ok)
      f.refuse(named + ".dtype",
               std::string(dtype_name(t->dtype)) +
                   (e.matrix ? " is not a floating-point type" : ", expected f32"));
    // How the ranks' parts make up the whole: exactly the part this rank runs its graph on.
    if (e.ranks.empty() && t->split)
      f.refuse(named + ".split", "every rank holds this tensor whole (expected no split)");
    if (!e.ranks.empty() && (!t->split || *t->split != e.ranks[rank]))
      f.refuse(named + ".split", (t->split ? t->split->str() : std::string("missing")) +
                                     ", expected rank " + std::to_string(rank) + "'s part, " +
                                     e.ranks[rank].str());
  }
  return file;
}

// The weights section: one file, or (tensor parallelism) one a rank in "ranks", each listed in
// `files` once.
void read_weights(const ManifestFields& f, const json& w, const std::vector<ExpectedTensor>& want,
                  ArtifactManifest& a) {
  if (const json& align = f.member(w, "weights", "alignment"); align != limits::kWeightAlignment)
    f.refuse("weights.alignment", align.dump() + ", expected " +
                                      std::to_string(limits::kWeightAlignment) +
                                      " (every tensor starts at a multiple of it)");
  const int ranks = a.serving.tensor_parallel;
  if (ranks == 1) {
    if (w.contains("ranks"))
      f.refuse("weights.ranks",
               "one weight file a rank is a tensor-parallel artifact's (serving.tensor_parallel is "
               "1): expected weights.file");
    a.weights.push_back(read_weight_file(f, w, "weights", want, 0, a.model));
    return;
  }
  if (w.contains("file"))
    f.refuse("weights.file", "a tensor-parallel artifact (serving.tensor_parallel " +
                                 std::to_string(ranks) +
                                 ") names one weight file a rank, in weights.ranks");
  const json& files = f.array(w, "weights", "ranks");
  if (files.size() != static_cast<std::size_t>(ranks))
    f.refuse("weights.ranks", std::to_string(files.size()) +
                                  " weight files, expected one a rank: serving.tensor_parallel " +
                                  std::to_string(ranks));
  for (std::size_t r = 0; r < files.size(); ++r) {
    const std::string path = "weights.ranks[" + std::to_string(r) + "]";
    if (!files[r].is_object()) f.refuse(path, "expected an object {file, size, tensors}");
    a.weights.push_back(read_weight_file(f, files[r], path, want, r, a.model));
    for (std::size_t q = 0; q < r; ++q)
      if (a.weights[q].file == a.weights[r].file)
        f.refuse(path + ".file", a.weights[r].file + " is rank " + std::to_string(q) +
                                     "'s weight file too (each rank has its own)");
  }
}

}  // namespace

std::string WeightSplit::str() const {
  std::string s = dim == 0 ? "rows " : "columns ";
  for (std::size_t i = 0; i < ranges.size(); ++i)
    s += (i ? ", " : "") + std::to_string(ranges[i].first) + ":" + std::to_string(ranges[i].second);
  return s + " of " + std::to_string(whole);
}

std::vector<ExpectedTensor> expected_tensors(const ModelConfig& m, const ServingConfig& serving) {
  const RankShape rank = rank_shape_of(m, serving);
  const std::int64_t V = m.vocab_size, H = m.hidden_size, I = rank.intermediate, D = m.head_dim,
                     Hq = rank.heads, Hkv = rank.kv_heads;
  // Each rank's part of a split tensor (support/tensor_parallel.hpp); none for one rank.
  const auto split = [&](int dim, std::int64_t whole, auto part) {
    std::vector<WeightSplit> parts;
    for (std::int64_t r = 0; serving.tensor_parallel > 1 && r < rank.ranks; ++r)
      parts.push_back({dim, whole, part(r)});
    return parts;
  };
  const std::int64_t qkv_whole = (m.num_heads + 2 * m.num_kv_heads) * D;
  const auto qkv = split(0, qkv_whole, [&](std::int64_t r) { return rank.qkv_rows(r, D); });
  std::vector<ExpectedTensor> out = {{"embed", {V, H}, true}};
  for (int l = 0; l < m.num_layers; ++l) {
    const std::string p = "layers." + std::to_string(l) + ".";
    out.push_back({p + "attn_norm", {H}, false});
    out.push_back({p + "qkv", {(Hq + 2 * Hkv) * D, H}, true, qkv});
    if (m.qkv_bias) out.push_back({p + "qkv_bias", {(Hq + 2 * Hkv) * D}, false, qkv});
    if (m.qk_norm) {
      out.push_back({p + "q_norm", {D}, false});
      out.push_back({p + "k_norm", {D}, false});
    }
    out.push_back({p + "o", {H, Hq * D}, true, split(1, m.num_heads * D, [&](std::int64_t r) {
                     return rank.input_columns(r, m.num_heads * D);
                   })});
    out.push_back({p + "mlp_norm", {H}, false});
    out.push_back({p + "gate_up",
                   {2 * I, H},
                   true,
                   split(0, 2 * rank.model_intermediate,
                         [&](std::int64_t r) { return rank.gate_up_rows(r); })});
    out.push_back({p + "down", {H, I}, true, split(1, rank.model_intermediate, [&](std::int64_t r) {
                     return rank.input_columns(r, rank.model_intermediate);
                   })});
  }
  out.push_back({"final_norm", {H}, false});
  if (!m.tie_word_embeddings) out.push_back({"lm_head", {V, H}, true});
  return out;
}

ArtifactConfig validate_config_sections(const json& m, const std::string& file) {
  const ManifestFields f(file);
  if (!m.is_object()) f.refuse("(top level)", "expected a JSON object");
  ArtifactConfig c;
  c.model = read_model(f, f.object(m, "", "model"));
  c.serving = read_serving(f, f.object(m, "", "serving"), c.model);
  c.kv_cache = read_kv_cache(f, f.object(m, "", "kv_cache"), c.model, c.serving);
  return c;
}

ArtifactManifest validate_manifest(const json& m, const std::string& file) {
  const ManifestFields f(file);
  if (!m.is_object()) f.refuse("(top level)", "expected a JSON object");
  // The marker first: anything else is not a Telos artifact's manifest at all.
  const auto format = m.find("format");
  if (format == m.end() || !format->is_string() || format->get<std::string>() != kArtifactFormat)
    f.refuse("format", "expected \"" + std::string(kArtifactFormat) +
                           "\" (not a Telos artifact, or one written by a telosc before the "
                           "format was marked: compile it again)");
  // The schema version next: a newer manifest may mean anything below, so nothing else is read.
  ArtifactManifest a;
  a.schema_version = static_cast<int>(
      f.integer(m, "", "schema_version", 1, std::numeric_limits<std::int32_t>::max()));
  if (a.schema_version > kArtifactSchemaVersion)
    f.refuse("schema_version", std::to_string(a.schema_version) + " is newer than this reader's (" +
                                   std::to_string(kArtifactSchemaVersion) +
                                   "); use the telos-run and telosc of the release that wrote it");
  static_cast<ArtifactConfig&>(a) = validate_config_sections(m, file);
  read_weights(f, f.object(m, "", "weights"), expected_tensors(a.model, a.serving), a);
  // Every rank's weight table has the same names (read_weight_file): the graph reads rank 0's.
  std::set<std::string> tensor_names;
  for (const WeightEntry& t : a.weights[0].tensors) tensor_names.insert(t.name);
  a.graph = read_graph(f, f.member(m, "", "graph"), tensor_names);
  a.files = read_files(f, f.object(m, "", "files"));
  for (const WeightFile& w : a.weights) {
    bool listed = false;
    for (const auto& [name, sum] : a.files) listed |= name == w.file;
    if (!listed) f.refuse("files", "no checksum of " + w.file + " (" + w.field + ".file)");
  }
  // The launch programs, which only the GPU engine runs, with the kernels.
  const json& kernels = f.array(m, "", "kernels");
  a.has_kernels = !kernels.empty();
  if (a.has_kernels) a.kernel_sets = read_kernel_sets(f, m, a);
  const json& sum = f.member(m, "", "manifest_checksum");
  if (!is_checksum(sum)) f.refuse("manifest_checksum", "expected a checksum string \"xxh64:...\"");
  if (const std::string got = manifest_checksum(m); got != sum.get<std::string>())
    f.refuse("manifest_checksum",
             sum.get<std::string>() + " does not match the model, weights and graph sections (" +
                 got + "): the manifest was edited after telosc wrote it; compile the model again");
  a.checksum = sum.get<std::string>();
  return a;
}

std::string manifest_checksum(const json& m) {
  // nlohmann::json keeps keys sorted: the same sections give the same text however they were
  // written.
  const json sections = {
      {"graph", m.at("graph")}, {"model", m.at("model")}, {"weights", m.at("weights")}};
  const std::string text = sections.dump();
  return checksum_string(xxh64(text.data(), text.size()));
}

json parse_manifest_text(std::string_view text, const std::string& file) {
  auto within_depth = [&](int depth, json::parse_event_t, json&) {
    if (depth > limits::kMaxManifestDepth)
      fail(file + ": nested more than " + std::to_string(limits::kMaxManifestDepth) +
           " levels deep (not a Telos manifest)");
    return true;
  };
  try {
    return json::parse(text.begin(), text.end(), within_depth);
  } catch (const json::exception& e) {
    fail(file + ": not valid JSON: " + e.what());
  }
}

json read_manifest_file(const std::string& dir) {
  const std::string path = (std::filesystem::path(dir) / "manifest.json").string();
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0)
    fail(path + ": missing (every artifact has a manifest.json): " + std::strerror(errno));
  if (!S_ISREG(st.st_mode)) fail(path + ": not a regular file");
  if (st.st_size > limits::kMaxManifestBytes)
    fail(path + ": " + std::to_string(st.st_size) + " bytes, more than a manifest's " +
         std::to_string(limits::kMaxManifestBytes) + " (not a Telos manifest)");
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(path + ": cannot open: " + std::strerror(errno));
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) fail(path + ": cannot read: " + std::strerror(errno));
  return parse_manifest_text(text.str(), path);
}

}  // namespace telos
