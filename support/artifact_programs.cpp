#include "support/artifact_programs.hpp"

#include <algorithm>
#include <cstdlib>
#include <map>
#include <sstream>
#include <string>

#include "support/artifact_format.hpp"
#include "support/artifact_limits.hpp"
#include "support/slot_image.hpp"

namespace telos {
namespace {

using nlohmann::json;
using WeightsByName = std::map<std::string, const WeightEntry*>;
using ArenaByName = std::map<std::string, const ArenaSlot*>;

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
std::array<unsigned, 3> read_dims(const ManifestFields& f, const json& obj, const std::string& path,
                                  const char* key, std::int64_t max_x, std::int64_t max_yz) {
  const json& v = f.array(obj, path, key);
  const std::string field = ManifestFields::join(path, key);
  if (v.size() != 3) f.refuse(field, "expected three dimensions");
  std::array<unsigned, 3> dims{};
  for (std::size_t d = 0; d < 3; ++d)
    dims[d] =
        static_cast<unsigned>(f.integer_value(v[d], at(field, d), 1, d == 0 ? max_x : max_yz));
  return dims;
}

std::vector<KernelEntry> read_kernels(const ManifestFields& f, const json& kernels) {
  if (static_cast<std::int64_t>(kernels.size()) > limits::kMaxProgramEntries)
    f.refuse("kernels", std::to_string(kernels.size()) + " kernels, more than " +
                            std::to_string(limits::kMaxProgramEntries));
  std::vector<KernelEntry> out;
  for (std::size_t i = 0; i < kernels.size(); ++i) {
    const std::string path = at("kernels", i);
    if (!kernels[i].is_object()) f.refuse(path, "expected an object");
    KernelEntry k;
    k.entry = f.string(kernels[i], path, "entry");
    k.instance = kernels[i].contains("instance") ? f.string(kernels[i], path, "instance") : k.entry;
    k.block =
        read_dims(f, kernels[i], path, "block", limits::kMaxBlockThreads, limits::kMaxBlockThreads);
    if (std::int64_t{k.block[0]} * k.block[1] * k.block[2] > limits::kMaxBlockThreads)
      f.refuse(path + ".block",
               "more than " + std::to_string(limits::kMaxBlockThreads) + " threads a block");
    k.dynamic_smem =
        static_cast<int>(f.integer(kernels[i], path, "dynamic_smem", 0, limits::kMaxDynamicSmem));
    out.push_back(std::move(k));
  }
  return out;
}

// plan.arena: every buffer inside the arena at an aligned offset, each name once.
void read_arena(const ManifestFields& f, const json& plan, LaunchPrograms& p) {
  const json& arena = f.object(plan, "plan", "arena");
  const std::string path = "plan.arena";
  const std::int64_t align = f.integer(arena, path, "alignment", 256, 256);
  p.arena_bytes = f.integer(arena, path, "bytes", 0, limits::kMaxDeviceBytes);
  const json& buffers = bounded_array(f, arena, path, "buffers");
  for (std::size_t i = 0; i < buffers.size(); ++i) {
    const std::string b = at(path + ".buffers", i);
    if (!buffers[i].is_object()) f.refuse(b, "expected an object");
    ArenaSlot s;
    s.buffer = f.string(buffers[i], b, "buffer");
    s.offset = f.integer(buffers[i], b, "offset", 0, p.arena_bytes);
    if (s.offset % align != 0)
      f.refuse(b + ".offset", std::to_string(s.offset) + " is not a multiple of the alignment");
    s.bytes = f.integer(buffers[i], b, "bytes", 0, p.arena_bytes - s.offset);
    for (const ArenaSlot& o : p.arena)
      if (o.buffer == s.buffer) f.refuse(b, "a second buffer \"" + s.buffer + "\"");
    p.arena.push_back(std::move(s));
  }
}

// The step descriptor's rows (its batch and page-table sizes follow from the serving config).
void read_descriptor(const ManifestFields& f, const json& programs, const ServingConfig& s,
                     LaunchPrograms& p) {
  const json& d = f.object(programs, "programs", "descriptor");
  const std::string path = "programs.descriptor";
  const int most_tokens = std::max(s.decode_buckets.back(), s.prefill_buckets.back());
  p.max_tokens = f.small_integer(d, path, "max_tokens", 1, most_tokens);
  p.max_sample_rows = f.small_integer(d, path, "max_sample_rows", 1, p.max_tokens);
}

void check_weight_image(const ManifestFields& f, const std::string& field, const LaunchArg& arg,
                        const WeightsByName& weights) {
  const WeightImageArg& img = arg.image;
  const auto it = weights.find(img.weight);
  if (it == weights.end()) f.refuse(field, arg.text + ": no weight tensor \"" + img.weight + "\"");
  const WeightEntry* w = it->second;
  if (w->dtype != DType::BF16 || w->shape.size() != 2)
    f.refuse(field, arg.text + ": a slot image is of a bf16 matrix");
  std::string why = slot_image_refusal(w->shape[0], w->shape[1], img.bn, img.halves);
  if (why.empty() && img.box_rows > 0)
    why = slot_image_box_refusal(img.bn, img.halves, img.box_rows);
  if (!why.empty()) f.refuse(field, arg.text + ": " + why);
}

// A KV layer index: kv:L with L a layer of the cache.
int kv_layer(const ManifestFields& f, const std::string& field, const std::string& arg,
             const std::string& l, const KvCacheConfig& kv) {
  if (l.empty() || l.size() > 6 || l.find_first_not_of("0123456789") != std::string::npos ||
      std::stoi(l) >= kv.num_layers)
    f.refuse(field, arg + ": \"" + l + "\" is not a layer of the KV cache");
  return std::stoi(l);
}

// A tensor map over the KV pool from layer L's base, a page's rows at a time: the engine spans it
// over the pages it allocates, so only its shape is checked here.
void check_kv_map(const ManifestFields& f, const std::string& field, const LaunchArg& arg,
                  const KvCacheConfig& kv) {
  const TensorMapArg& t = arg.map;
  if (t.elem_bytes != 2 || t.cols != kv.head_dim || kv.head_dim % 64 != 0)
    f.refuse(field, arg.text + ": a KV map's rows are one position of one head (COLS " +
                        std::to_string(kv.head_dim) +
                        ", a multiple of 64), read in bf16 boxes of 64 columns");
  if (t.rows * t.cols * 2 != kv.bytes_per_page || t.box_rows != kv.page_size)
    f.refuse(field, arg.text + ": a KV map's ROWS are one page's (" +
                        std::to_string(kv.bytes_per_page / (2 * kv.head_dim)) +
                        ") and its BOX_ROWS the page size (" + std::to_string(kv.page_size) + ")");
}

const WeightEntry& weight(const ManifestFields& f, const std::string& field, const std::string& arg,
                          const std::string& name, const WeightsByName& weights) {
  const auto it = weights.find(name);
  if (it == weights.end()) f.refuse(field, arg + ": no weight tensor \"" + name + "\"");
  return *it->second;
}

const ArenaSlot& buffer(const ManifestFields& f, const std::string& field, const std::string& arg,
                        const std::string& name, const ArenaByName& arena) {
  const auto it = arena.find(name);
  if (it == arena.end()) f.refuse(field, arg + ": no arena buffer \"" + name + "\" (plan.arena)");
  return *it->second;
}

// A `tmap:` argument fits inside the bf16 weight or arena buffer it maps (f32 maps: arena buffers
// only), so the GPU engine never encodes a map over memory it does not own.
void read_tensor_map(const ManifestFields& f, const std::string& field, LaunchArg& arg,
                     const ArtifactManifest& a, const WeightsByName& weights,
                     const ArenaByName& arena) {
  arg.map = parse_tensor_map_arg(arg.text, f.file() + ": " + field);
  const TensorMapArg& t = arg.map;
  const std::size_t colon = t.target.find(':');
  const std::string prefix = t.target.substr(0, colon), name = t.target.substr(colon + 1);
  if (prefix == "kv") {
    arg.map_target = ArgKind::kv_layer;
    arg.layer = kv_layer(f, field, arg.text, name, a.kv_cache);
    check_kv_map(f, field, arg, a.kv_cache);
    return;
  }
  arg.name = name;
  std::int64_t have = 0;
  arg.map_target = prefix == "w" ? ArgKind::weight : ArgKind::buffer;
  if (prefix == "w") {
    const WeightEntry& w = weight(f, field, arg.text, name, weights);
    if (w.dtype != DType::BF16 && w.dtype != DType::E4M3)
      f.refuse(field, arg.text + ": tensor maps over weights are bf16 or e4m3, the weight is " +
                          std::string(dtype_name(w.dtype)));
    if (t.box_cols != 64 && !(t.box_cols == 128 && w.dtype == DType::E4M3))
      f.refuse(field, arg.text +
                          ": a weight's map has BOX_COLS 64 (bf16 or e4m3 elements) or, "
                          "over an e4m3 weight, 128 (its bytes with the 128-byte swizzle)");
    // An e4m3 weight's map of BOX_COLS 64: one-byte elements, boxes of 64 bytes, no swizzle.
    if (w.dtype == DType::E4M3 && t.box_cols == 64) {
      arg.map.elem_bytes = 1;
      arg.map.swizzle = false;
    }
    have = w.bytes;
  } else {
    have = buffer(f, field, arg.text, name, arena).bytes;
  }
  // Each size is below 2^31 (parse_tensor_map_arg), so the product stays inside 64 bits.
  const std::int64_t need = t.rows * t.cols * t.elem_bytes;
  if (need > have)
    f.refuse(field, arg.text + ": the map spans " + std::to_string(need) + " bytes, but " +
                        t.target + " has " + std::to_string(have));
}

DescriptorField descriptor_field(const ManifestFields& f, const std::string& field,
                                 const std::string& arg, const std::string& name) {
  static const std::map<std::string, DescriptorField> fields = {
      {"tokens", DescriptorField::tokens},
      {"positions", DescriptorField::positions},
      {"token_seq", DescriptorField::token_seq},
      {"split_positions", DescriptorField::split_positions},
      {"prompt_positions", DescriptorField::prompt_positions},
      {"sample_rows", DescriptorField::sample_rows},
      {"sample_params", DescriptorField::sample_params},
      {"page_tables", DescriptorField::page_tables}};
  const auto it = fields.find(name);
  if (it == fields.end()) f.refuse(field, arg + ": no descriptor field \"" + name + "\"");
  return it->second;
}

LaunchArg read_arg(const ManifestFields& f, const json& v, const std::string& field,
                   const ArtifactManifest& a, const WeightsByName& weights,
                   const ArenaByName& arena) {
  if (!v.is_string()) f.refuse(field, "expected a string");
  LaunchArg arg;
  arg.text = v.get<std::string>();
  const std::string& s = arg.text;
  const auto after = [&](std::size_t n) { return s.substr(n); };
  if (s == "null") {
    arg.kind = ArgKind::null;
  } else if (s == "host:sampled") {
    arg.kind = ArgKind::host_sampled;
  } else if (s.rfind("w:", 0) == 0) {
    arg.kind = ArgKind::weight;
    arg.name = weight(f, field, s, after(2), weights).name;
  } else if (s.rfind("buf:", 0) == 0) {
    arg.kind = ArgKind::buffer;
    arg.name = buffer(f, field, s, after(4), arena).buffer;
  } else if (s.rfind("kv:", 0) == 0) {
    arg.kind = ArgKind::kv_layer;
    arg.layer = kv_layer(f, field, s, after(3), a.kv_cache);
  } else if (s.rfind("desc:", 0) == 0) {
    arg.kind = ArgKind::descriptor;
    arg.field = descriptor_field(f, field, s, after(5));
  } else if (s.rfind("tmap:", 0) == 0) {
    arg.kind = ArgKind::tensor_map;
    read_tensor_map(f, field, arg, a, weights, arena);
  } else if (s.rfind("wimg:", 0) == 0 || s.rfind("timg:", 0) == 0) {
    arg.kind = s[0] == 'w' ? ArgKind::weight_image : ArgKind::image_map;
    arg.image = parse_weight_image_arg(s, f.file() + ": " + field);
    arg.name = arg.image.weight;
    check_weight_image(f, field, arg, weights);
  } else if (s.rfind("peer:", 0) == 0 || s == "rank") {
    // What a tensor-parallel rank reads of the others (docs/artifact.md, "Kernels").
    if (a.serving.tensor_parallel < 2)
      f.refuse(field, s + ": a tensor-parallel argument in an artifact of one rank "
                          "(serving.tensor_parallel 1)");
    arg.kind = s == "rank" ? ArgKind::rank : ArgKind::peer_buffer;
    if (arg.kind == ArgKind::peer_buffer) arg.name = buffer(f, field, s, after(5), arena).buffer;
  } else {
    f.refuse(field, s + ": not a launch argument (null, host:sampled, w:, buf:, kv:, desc:, tmap:, "
                        "wimg:, timg:, peer: or rank)");
  }
  return arg;
}

// A kernel that takes kv:L appends to or reads the pages in one element format, a template
// argument of its instance (codegen/kernels/common.cuh): telos_kernels::KvE4m3<K_SCALE, V_SCALE>
// for an e4m3 cache, with layer L's scales, none for a bf16 one. An instance of the other format
// would address the pool's pages at the other size.
void check_kv_format(const ManifestFields& f, const std::string& field, const KernelEntry& k,
                     int layer, const KvCacheConfig& kv) {
  const std::string tag = "telos_kernels::KvE4m3<";
  const std::size_t at = k.instance.find(tag);
  if (kv.dtype != DType::E4M3) {
    if (at != std::string::npos)
      f.refuse(field, "kernel " + k.instance + " reads an e4m3 KV cache; kv_cache.dtype is " +
                          std::string(dtype_name(kv.dtype)));
    return;
  }
  const auto l = static_cast<std::size_t>(layer);
  float scales[2] = {0.f, 0.f};
  if (at != std::string::npos) {
    const char* p = k.instance.c_str() + at + tag.size();
    char* end = nullptr;
    scales[0] = std::strtof(p, &end);
    if (end[0] == 'f' && end[1] == ',') scales[1] = std::strtof(end + 2, nullptr);
  }
  if (at == std::string::npos || scales[0] != kv.k_scales[l] || scales[1] != kv.v_scales[l]) {
    std::ostringstream want;
    want.precision(9);
    want << tag << kv.k_scales[l] << ", " << kv.v_scales[l] << ">";
    f.refuse(field, "kernel " + k.instance + " does not read layer " + std::to_string(layer) +
                        "'s e4m3 KV cache as kv_cache.dtype, k_scales and v_scales give it (" +
                        want.str() + ")");
  }
}

ProgramLaunch read_launch(const ManifestFields& f, const json& launch, const std::string& path,
                          const std::vector<KernelEntry>& kernels, const ArtifactManifest& a,
                          const WeightsByName& weights, const ArenaByName& arena) {
  if (!launch.is_object()) f.refuse(path, "expected an object");
  if (launch.contains("collective"))
    f.refuse(path, "a collective entry's launches are kernel launches (kernel, grid, args)");
  ProgramLaunch l;
  l.kernel = static_cast<int>(
      f.integer(launch, path, "kernel", 0, static_cast<std::int64_t>(kernels.size()) - 1));
  l.grid = read_dims(f, launch, path, "grid", limits::kMaxGridX, limits::kMaxGridYZ);
  const json& args = bounded_array(f, launch, path, "args");
  for (std::size_t k = 0; k < args.size(); ++k) {
    l.args.push_back(read_arg(f, args[k], at(path + ".args", k), a, weights, arena));
    if (l.args.back().kind == ArgKind::kv_layer)
      check_kv_format(f, at(path + ".args", k), kernels[static_cast<std::size_t>(l.kernel)],
                      l.args.back().layer, a.kv_cache);
  }
  return l;
}

// A collective entry's arena buffer (send or recv): buf:NAME of at least `need` bytes.
LaunchArg collective_buffer(const ManifestFields& f, const json& entry, const std::string& path,
                            const char* key, std::int64_t need, const ArtifactManifest& a,
                            const WeightsByName& weights, const ArenaByName& arena) {
  const std::string field = ManifestFields::join(path, key);
  if (!entry.contains(key)) f.refuse(field, "missing (an arena buffer, buf:NAME)");
  LaunchArg arg = read_arg(f, entry.at(key), field, a, weights, arena);
  if (arg.kind != ArgKind::buffer)
    f.refuse(field, arg.text + ": expected an arena buffer, buf:NAME");
  const std::int64_t have = arena.at(arg.name)->bytes;
  if (have < need)
    f.refuse(field, arg.text + " has " + std::to_string(have) + " bytes, the collective moves " +
                        std::to_string(need) + " into it or out of it");
  return arg;
}

// A collective entry's `then` or `fallback`: one or more kernel launches.
void read_collective_launches(const ManifestFields& f, const json& entry, const std::string& path,
                              const char* key, LaunchPath on,
                              const std::vector<KernelEntry>& kernels, const ArtifactManifest& a,
                              const WeightsByName& weights, const ArenaByName& arena,
                              std::vector<ProgramLaunch>& out) {
  const json& launches = bounded_array(f, entry, path, key);
  const std::string field = ManifestFields::join(path, key);
  if (launches.empty()) f.refuse(field, "expected at least one launch");
  for (std::size_t j = 0; j < launches.size(); ++j) {
    out.push_back(read_launch(f, launches[j], at(field, j), kernels, a, weights, arena));
    out.back().path = on;
  }
}

// A collective entry (docs/artifact.md, "Collectives"), its `then` and `fallback` launches after
// it: every rank's `count` f32, the bucket's tokens x hidden_size (a rank's partial), from `send`
// into `recv` (ranks x count).
void read_collective(const ManifestFields& f, const json& entry, const std::string& path,
                     const ProgramBucket& bucket, const std::vector<KernelEntry>& kernels,
                     const ArtifactManifest& a, const WeightsByName& weights,
                     const ArenaByName& arena, std::vector<ProgramLaunch>& out) {
  const int ranks = a.serving.tensor_parallel;
  if (ranks < 2)
    f.refuse(path + ".collective",
             "a collective in an artifact of one rank (serving.tensor_parallel 1)");
  ProgramLaunch c;
  const std::string name = f.string(entry, path, "collective");
  if (name != "all_gather")
    f.refuse(path + ".collective", "\"" + name + "\" is not a collective Telos runs (all_gather)");
  c.collective = Collective::all_gather;
  const std::int64_t expected = static_cast<std::int64_t>(bucket.tokens) * a.model.hidden_size;
  c.count = f.integer(entry, path, "count", 0, limits::kMaxDeviceBytes);
  if (c.count != expected)
    f.refuse(path + ".count", std::to_string(c.count) + ", expected the bucket's tokens x " +
                                  "hidden_size, " + std::to_string(expected) +
                                  " (a rank's partial)");
  c.send = collective_buffer(f, entry, path, "send", 4 * c.count, a, weights, arena);
  c.recv = collective_buffer(f, entry, path, "recv", 4 * c.count * ranks, a, weights, arena);
  out.push_back(std::move(c));
  read_collective_launches(f, entry, path, "then", LaunchPath::with_collective, kernels, a, weights,
                           arena, out);
  read_collective_launches(f, entry, path, "fallback", LaunchPath::without_collective, kernels, a,
                           weights, arena, out);
}

ProgramBucket read_bucket(const ManifestFields& f, const json& b, const std::string& path,
                          const LaunchPrograms& p, const ArtifactManifest& a,
                          const WeightsByName& weights, const ArenaByName& arena) {
  if (!b.is_object()) f.refuse(path, "expected an object");
  ProgramBucket bucket;
  const std::string kind = f.string(b, path, "kind");
  if (kind != "decode" && kind != "prefill")
    f.refuse(path + ".kind", "\"" + kind + "\" is not decode or prefill");
  bucket.decode = kind == "decode";
  bucket.size = f.small_integer(b, path, "size", 1, p.max_tokens);
  bucket.tokens = f.small_integer(b, path, "tokens", 1, p.max_tokens);
  bucket.sample_rows = f.small_integer(b, path, "sample_rows", 1, p.max_sample_rows);
  const json& launches = bounded_array(f, b, path, "launches");
  if (launches.empty()) f.refuse(path + ".launches", "expected at least one launch");
  for (std::size_t j = 0; j < launches.size(); ++j) {
    const std::string entry = at(path + ".launches", j);
    if (launches[j].is_object() && launches[j].contains("collective"))
      read_collective(f, launches[j], entry, bucket, p.kernels, a, weights, arena, bucket.launches);
    else
      bucket.launches.push_back(read_launch(f, launches[j], entry, p.kernels, a, weights, arena));
  }
  // The tokens reach the host only through the sample kernel's host:sampled.
  const bool samples =
      std::any_of(bucket.launches.begin(), bucket.launches.end(), [](const auto& l) {
        return std::any_of(l.args.begin(), l.args.end(),
                           [](const LaunchArg& x) { return x.kind == ArgKind::host_sampled; });
      });
  if (!samples) f.refuse(path + ".launches", "no launch passes host:sampled (the step's tokens)");
  return bucket;
}

}  // namespace

std::string ProgramBucket::name() const {
  return std::string(decode ? "decode:" : "prefill:") + std::to_string(size);
}

LaunchPrograms read_launch_programs(const ManifestFields& f, const json& kernels, const json& plan,
                                    const json& programs, const ArtifactManifest& a) {
  LaunchPrograms p;
  p.kernels = read_kernels(f, kernels);
  read_arena(f, plan, p);
  read_descriptor(f, programs, a.serving, p);
  WeightsByName weights;
  // Every rank has the same tensors of the same shapes (artifact_format.hpp), and one kernel set.
  for (const WeightEntry& t : a.weights[0].tensors) weights[t.name] = &t;
  ArenaByName arena;
  for (const ArenaSlot& s : p.arena) arena[s.buffer] = &s;
  const json& buckets = bounded_array(f, programs, "programs", "buckets");
  for (std::size_t i = 0; i < buckets.size(); ++i)
    p.buckets.push_back(
        read_bucket(f, buckets[i], at("programs.buckets", i), p, a, weights, arena));
  return p;
}

std::vector<LaunchPrograms> read_kernel_sets(const ManifestFields& f, const json& m,
                                             const ArtifactManifest& a) {
  const std::vector<std::string>& targets = a.serving.targets;
  std::vector<LaunchPrograms> sets;
  sets.push_back(read_launch_programs(f, f.array(m, "", "kernels"), f.object(m, "", "plan"),
                                      f.object(m, "", "programs"), a));
  sets.back().target = targets.at(0);
  const auto further = m.find("kernel_sets");
  if (further == m.end()) {
    if (targets.size() > 1)
      f.refuse("kernel_sets", "missing: serving.targets lists " + std::to_string(targets.size()) +
                                  " targets, the top-level kernels are " + targets[0] + "'s");
    return sets;
  }
  if (!further->is_object()) f.refuse("kernel_sets", "expected an object");
  for (const auto& [arch, set] : further->items()) {
    const auto listed = std::find(targets.begin() + 1, targets.end(), arch);
    if (listed == targets.end())
      f.refuse("kernel_sets." + arch, "not a target of serving.targets after the first (" +
                                          targets[0] + ", whose kernels are the top-level ones)");
    if (!set.is_object()) f.refuse("kernel_sets." + arch, "expected an object");
    const ManifestFields in_set(f.file() + ": kernel_sets." + arch);
    sets.push_back(read_launch_programs(in_set, in_set.array(set, "", "kernels"),
                                        in_set.object(set, "", "plan"),
                                        in_set.object(set, "", "programs"), a));
    sets.back().target = arch;
  }
  for (std::size_t t = 1; t < targets.size(); ++t)
    if (!further->contains(targets[t]))
      f.refuse("kernel_sets", "no kernel set for " + targets[t] + " (serving.targets lists it)");
  std::sort(sets.begin() + 1, sets.end(), [&](const LaunchPrograms& x, const LaunchPrograms& y) {
    return std::find(targets.begin(), targets.end(), x.target) <
           std::find(targets.begin(), targets.end(), y.target);
  });
  return sets;
}

std::string kernel_target_for_device(int major, int minor) {
  if (major == 9 && minor == 0) return "sm_90a";
  if (major == 10 && minor == 0) return "sm_100a";
  return "";
}

std::size_t kernel_set_for_device(int major, int minor, const std::vector<std::string>& targets,
                                  const std::string& where) {
  const std::string device = std::to_string(major) + "." + std::to_string(minor);
  const std::string want = kernel_target_for_device(major, minor);
  std::string have;
  for (const std::string& t : targets) have += (have.empty() ? "" : ", ") + t;
  if (want.empty())
    fail(where + ": serving.targets is [" + have + "]; this device has compute capability " +
         device + ", for which Telos has no kernels (sm_90a runs on 9.0, sm_100a on 10.0 only)");
  const auto it = std::find(targets.begin(), targets.end(), want);
  if (it == targets.end())
    fail(where + ": serving.targets is [" + have + "], no kernel set for this device (compute " +
         "capability " + device + ", " + want + "): compile the artifact with --target " + want +
         " (or --target " + have + "," + want + " for one artifact with both)");
  return static_cast<std::size_t>(it - targets.begin());
}

}  // namespace telos
