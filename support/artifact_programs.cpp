#include "support/artifact_programs.hpp"

#include <algorithm>
#include <map>
#include <string>

#include "support/artifact_limits.hpp"
#include "support/launch_args.hpp"
#include "support/slot_image.hpp"

namespace telos {
namespace {

using nlohmann::json;
using WeightsByName = std::map<std::string, const WeightEntry*>;

std::string at(const std::string& path, std::size_t i) {
  return path + "[" + std::to_string(i) + "]";
}

const json& bounded_array(const ManifestFields& f, const json& obj, const std::string& path,
                          const char* key) {
  const json& v = f.array(obj, path, key);
  if (static_cast<std::int64_t>(v.size()) > limits::kMaxProgramEntries)
    f.refuse(ManifestFields::join(path, key), std::to_string(v.size()) + " entries, more than " +
                                                  std::to_string(limits::kMaxProgramEntries));
  return v;
}

// Three integers: a grid's or a block's dimensions.
void check_dims(const ManifestFields& f, const json& obj, const std::string& path, const char* key,
                std::int64_t max_x, std::int64_t max_yz) {
  const json& v = f.array(obj, path, key);
  const std::string field = ManifestFields::join(path, key);
  if (v.size() != 3) f.refuse(field, "expected three dimensions");
  for (std::size_t d = 0; d < 3; ++d)
    f.integer_value(v[d], at(field, d), 1, d == 0 ? max_x : max_yz);
}

void check_kernels(const ManifestFields& f, const json& kernels) {
  if (static_cast<std::int64_t>(kernels.size()) > limits::kMaxProgramEntries)
    f.refuse("kernels", std::to_string(kernels.size()) + " kernels, more than " +
                            std::to_string(limits::kMaxProgramEntries));
  for (std::size_t i = 0; i < kernels.size(); ++i) {
    const std::string path = at("kernels", i);
    if (!kernels[i].is_object()) f.refuse(path, "expected an object");
    f.string(kernels[i], path, "entry");
    if (kernels[i].contains("instance")) f.string(kernels[i], path, "instance");
    check_dims(f, kernels[i], path, "block", limits::kMaxBlockThreads, limits::kMaxBlockThreads);
    const json& block = kernels[i].at("block");
    if (block[0].get<std::int64_t>() * block[1].get<std::int64_t>() * block[2].get<std::int64_t>() >
        limits::kMaxBlockThreads)
      f.refuse(path + ".block",
               "more than " + std::to_string(limits::kMaxBlockThreads) + " threads a block");
    f.integer(kernels[i], path, "dynamic_smem", 0, limits::kMaxDynamicSmem);
  }
}

// The arena's buffers by name, with their sizes.
std::map<std::string, std::int64_t> read_arena(const ManifestFields& f, const json& programs) {
  const json& arena = bounded_array(f, programs, "programs", "arena");
  std::map<std::string, std::int64_t> out;
  std::int64_t total = 0;
  for (std::size_t i = 0; i < arena.size(); ++i) {
    const std::string path = at("programs.arena", i);
    if (!arena[i].is_object()) f.refuse(path, "expected an object");
    const std::string name = f.string(arena[i], path, "buffer");
    const std::int64_t bytes = f.integer(arena[i], path, "bytes", 0, limits::kMaxDeviceBytes);
    if (!out.emplace(name, bytes).second) f.refuse(path, "a second buffer \"" + name + "\"");
    total += bytes;
    if (total > limits::kMaxDeviceBytes)
      f.refuse("programs.arena", "more than " + std::to_string(limits::kMaxDeviceBytes) + " bytes");
  }
  return out;
}

// The step descriptor's sizes follow from the serving configuration (codegen/kernel_plan.cpp).
int check_descriptor(const ManifestFields& f, const json& programs, const ServingConfig& s) {
  const json& d = f.object(programs, "programs", "descriptor");
  const std::string p = "programs.descriptor";
  const int most_tokens = std::max(s.decode_buckets.back(), s.prefill_buckets.back());
  const int max_tokens = f.small_integer(d, p, "max_tokens", 1, most_tokens);
  f.integer(d, p, "max_sample_rows", 1, max_tokens);
  f.integer(d, p, "max_batch", s.max_batch, s.max_batch);
  const int pages = (s.max_seq_len + s.kv_page_size - 1) / s.kv_page_size;
  f.integer(d, p, "max_pages_per_seq", pages, pages);
  return max_tokens;
}

void check_weight_image(const ManifestFields& f, const std::string& field, const std::string& arg,
                        const WeightsByName& weights) {
  const WeightImageArg img = parse_weight_image_arg(arg, f.file() + ": " + field);
  const auto it = weights.find(img.weight);
  if (it == weights.end()) f.refuse(field, arg + ": no weight tensor \"" + img.weight + "\"");
  const WeightEntry* w = it->second;
  if (w->dtype != DType::BF16 || w->shape.size() != 2)
    f.refuse(field, arg + ": a slot image is of a bf16 matrix");
  std::string why = slot_image_refusal(w->shape[0], w->shape[1], img.bn, img.halves);
  if (why.empty() && img.box_rows > 0)
    why = slot_image_box_refusal(img.bn, img.halves, img.box_rows);
  if (!why.empty()) f.refuse(field, arg + ": " + why);
}

// A `tmap:` argument fits inside the bf16 weight or arena buffer it maps (f32 maps: arena buffers
// only), so the GPU engine never encodes a map over memory it does not own.
void check_tensor_map(const ManifestFields& f, const std::string& field, const std::string& arg,
                      const ArtifactManifest& a, const WeightsByName& weights,
                      const std::map<std::string, std::int64_t>& arena) {
  const TensorMapArg t = parse_tensor_map_arg(arg, f.file() + ": " + field);
  // Each size is below 2^31 (parse_tensor_map_arg), so the product stays inside 64 bits.
  const std::int64_t need = t.rows * t.cols * t.elem_bytes;
  if (t.target.rfind("kv:", 0) == 0) {
    // The pool from layer L's base, a page's rows at a time: the engine spans the map over the
    // pages it allocates, so only its shape is checked here.
    const KvCacheConfig& kv = a.kv_cache;
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
                          ") and its BOX_ROWS the page size (" + std::to_string(kv.page_size) +
                          ")");
    return;
  }
  std::int64_t have = 0;
  if (t.target.rfind("w:", 0) == 0) {
    const std::string name = t.target.substr(2);
    const auto it = weights.find(name);
    if (it == weights.end()) f.refuse(field, arg + ": no weight tensor \"" + name + "\"");
    const WeightEntry* w = it->second;
    if (w->dtype != DType::BF16)
      f.refuse(field, arg + ": tensor maps over weights are bf16, the weight is " +
                          std::string(dtype_name(w->dtype)));
    if (t.elem_bytes != 2)
      f.refuse(field, arg + ": a weight is bf16, its map's BOX_COLS must be 64");
    have = w->bytes;
  } else {
    auto it = arena.find(t.target.substr(4));
    if (it == arena.end())
      f.refuse(field, arg + ": no arena buffer \"" + t.target.substr(4) + "\"");
    have = it->second;
  }
  if (need > have)
    f.refuse(field, arg + ": the map spans " + std::to_string(need) + " bytes, but " + t.target +
                        " has " + std::to_string(have));
}

void check_launch(const ManifestFields& f, const json& launch, const std::string& path,
                  std::size_t kernels, const ArtifactManifest& a, const WeightsByName& weights,
                  const std::map<std::string, std::int64_t>& arena) {
  if (!launch.is_object()) f.refuse(path, "expected an object");
  f.integer(launch, path, "kernel", 0, static_cast<std::int64_t>(kernels) - 1);
  check_dims(f, launch, path, "grid", limits::kMaxGridX, limits::kMaxGridYZ);
  const json& args = bounded_array(f, launch, path, "args");
  for (std::size_t k = 0; k < args.size(); ++k) {
    const std::string field = at(path + ".args", k);
    if (!args[k].is_string()) f.refuse(field, "expected a string");
    const std::string& arg = args[k].get_ref<const std::string&>();
    if (arg.rfind("wimg:", 0) == 0 || arg.rfind("timg:", 0) == 0)
      check_weight_image(f, field, arg, weights);
    else if (arg.rfind("tmap:", 0) == 0)
      check_tensor_map(f, field, arg, a, weights, arena);
  }
}

}  // namespace

void validate_programs(const ManifestFields& f, const json& kernels, const json& programs,
                       const ArtifactManifest& a) {
  check_kernels(f, kernels);
  const int max_tokens = check_descriptor(f, programs, a.serving);
  const std::map<std::string, std::int64_t> arena = read_arena(f, programs);
  WeightsByName weights;
  for (const WeightEntry& t : a.tensors) weights[t.name] = &t;
  const json& buckets = bounded_array(f, programs, "programs", "buckets");
  for (std::size_t i = 0; i < buckets.size(); ++i) {
    const std::string path = at("programs.buckets", i);
    const json& b = buckets[i];
    if (!b.is_object()) f.refuse(path, "expected an object");
    const std::string kind = f.string(b, path, "kind");
    if (kind != "decode" && kind != "prefill")
      f.refuse(path + ".kind", "\"" + kind + "\" is not decode or prefill");
    for (const char* size : {"size", "tokens", "sample_rows"})
      f.integer(b, path, size, 1, max_tokens);
    const json& launches = bounded_array(f, b, path, "launches");
    if (launches.empty()) f.refuse(path + ".launches", "expected at least one launch");
    for (std::size_t j = 0; j < launches.size(); ++j)
      check_launch(f, launches[j], at(path + ".launches", j), kernels.size(), a, weights, arena);
  }
}

}  // namespace telos
