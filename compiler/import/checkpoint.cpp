// import_model: resolve the MODEL argument to a checkpoint directory, read its config, map its
// safetensors (one file, or shards named by model.safetensors.index.json) and check that the
// tensors are exactly the ones the architecture needs, with the shapes the config implies.
#include "compiler/import/checkpoint.hpp"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <set>
#include <string>

#include "compiler/import/json_fields.hpp"
#include "support/error.hpp"

namespace telos::compiler {
namespace fs = std::filesystem;
using nlohmann::json;

std::vector<RequiredTensor> required_tensors(const ModelSpec& spec) {
  const std::int64_t h = spec.hidden_size, d = spec.head_dim, i = spec.intermediate_size;
  const std::int64_t q = spec.num_heads * d, kv = spec.num_kv_heads * d;
  using Kind = RequiredTensor::Kind;
  const WeightQuant& quant = spec.quant;
  std::vector<RequiredTensor> out;
  auto linear = [&](const std::string& module, std::int64_t rows, std::int64_t cols) {
    if (!quant.quantizes(module)) {
      out.push_back({module + ".weight", {rows, cols}, Kind::kFloat, module});
      return;
    }
    out.push_back({module + ".weight", {rows, cols}, Kind::kE4M3, module});
    const std::int64_t br = quant.block_rows(), bc = quant.block_cols(cols);
    const std::vector<std::int64_t> scales =
        quant.per_tensor ? std::vector<std::int64_t>{1}
                         : std::vector<std::int64_t>{(rows + br - 1) / br, (cols + bc - 1) / bc};
    out.push_back({quant.scale_name(module), scales, Kind::kScale, module});
  };
  out.push_back({"model.embed_tokens.weight", {spec.vocab_size, h}});
  for (std::int64_t n = 0; n < spec.num_layers; ++n) {
    const std::string p = "model.layers." + std::to_string(n) + ".";
    out.push_back({p + "input_layernorm.weight", {h}});
    linear(p + "self_attn.q_proj", q, h);
    linear(p + "self_attn.k_proj", kv, h);
    linear(p + "self_attn.v_proj", kv, h);
    if (spec.qkv_bias) {
      out.push_back({p + "self_attn.q_proj.bias", {q}});
      out.push_back({p + "self_attn.k_proj.bias", {kv}});
      out.push_back({p + "self_attn.v_proj.bias", {kv}});
    }
    if (spec.qk_norm) {
      out.push_back({p + "self_attn.q_norm.weight", {d}});
      out.push_back({p + "self_attn.k_norm.weight", {d}});
    }
    linear(p + "self_attn.o_proj", h, q);
    out.push_back({p + "post_attention_layernorm.weight", {h}});
    linear(p + "mlp.gate_proj", i, h);
    linear(p + "mlp.up_proj", i, h);
    linear(p + "mlp.down_proj", h, i);
  }
  out.push_back({"model.norm.weight", {h}});
  if (!spec.tie_word_embeddings) linear("lm_head", spec.vocab_size, h);
  return out;
}

namespace {

// Tensors a checkpoint may carry that the forward pass does not read: older Llama exports saved
// the RoPE frequency buffer, tied checkpoints sometimes keep a copy of the embedding as
// lm_head.weight, and compressed-tensors checkpoints with static activation scales carry
// "M.input_scale" beside each quantized weight (decode keeps activations bf16).
bool ignorable_tensor(const std::string& name, const ModelSpec& spec) {
  if (name.ends_with(".rotary_emb.inv_freq")) return true;
  constexpr std::string_view kInputScale = ".input_scale";
  if (spec.quant.method == "compressed-tensors" && name.ends_with(kInputScale) &&
      spec.quant.quantizes(name.substr(0, name.size() - kInputScale.size())))
    return true;
  return spec.tie_word_embeddings && name == "lm_head.weight";
}

void add_tensor(ImportedModel& model, TensorView view, const std::string& where) {
  const std::string name = view.name;
  if (!model.tensors.emplace(name, std::move(view)).second) {
    fail(where + ": tensor " + json_quote(name) + " appears in more than one shard");
  }
}

// The shard index: {"metadata": {...}, "weight_map": {"tensor name": "shard file name"}}.
void map_sharded(ImportedModel& model, const fs::path& dir, const std::string& index_path) {
  const json index_json = read_json_file(index_path);
  const JsonObject index(index_json, index_path);
  const JsonObject weight_map = index.object("weight_map");
  if (weight_map.value().empty()) index.fail_field("weight_map", "names no tensors");

  std::map<std::string, std::vector<std::string>> listed_by_shard;
  for (const auto& [tensor, shard] : weight_map.value().items()) {
    if (!shard.is_string()) {
      weight_map.fail_field(tensor, "expected a shard file name, found " + json_kind(shard));
    }
    const std::string file = shard.get<std::string>();
    // Shards live beside the index; a path here could name any file on the machine.
    if (file.empty() || file.find('/') != std::string::npos || file == "." || file == "..") {
      weight_map.fail_field(
          tensor, "expected a file name in " + dir.string() + ", found " + json_quote(file));
    }
    listed_by_shard[file].push_back(tensor);
  }

  for (const auto& [file, listed] : listed_by_shard) {
    const std::string shard_path = (dir / file).string();
    model.shards.push_back(std::make_unique<MappedFile>(shard_path));
    const MappedFile& shard = *model.shards.back();
    std::map<std::string, TensorView> in_shard;
    for (TensorView& view : parse_safetensors(shard)) in_shard.emplace(view.name, std::move(view));
    for (const std::string& tensor : listed) {
      auto it = in_shard.find(tensor);
      if (it == in_shard.end()) {
        fail(index_path + ": tensor " + json_quote(tensor) + " is listed in weight_map for " +
             file + " but " + shard_path + " does not contain it");
      }
      add_tensor(model, std::move(it->second), index_path);
      in_shard.erase(it);
    }
    // What the index does not list would be invisible to every HF loader: a stale index.
    if (!in_shard.empty()) {
      fail(shard_path + ": tensor " + json_quote(in_shard.begin()->first) +
           " is not listed for this shard in " + index_path);
    }
  }
}

// Opens the weights and checks them against the spec; returns the file named in messages about
// missing tensors (the index when sharded).
std::string map_weights(ImportedModel& model, const fs::path& dir) {
  const fs::path index = dir / "model.safetensors.index.json";
  const fs::path single = dir / "model.safetensors";
  if (fs::exists(index)) {
    map_sharded(model, dir, index.string());
    return index.string();
  }
  if (!fs::exists(single)) {
    fail(dir.string() +
         ": no model.safetensors or model.safetensors.index.json in the checkpoint "
         "(use --no-weights to plan from config.json alone)");
  }
  model.shards.push_back(std::make_unique<MappedFile>(single.string()));
  for (TensorView& view : parse_safetensors(*model.shards.back())) {
    add_tensor(model, std::move(view), single.string());
  }
  return single.string();
}

// Layers the checkpoint holds: one more than the largest N of its "model.layers.N." tensors.
std::int64_t checkpoint_layers(const ImportedModel& model) {
  constexpr std::string_view kPrefix = "model.layers.";
  std::int64_t layers = 0;
  for (const auto& [name, view] : model.tensors) {
    if (!name.starts_with(kPrefix)) continue;
    const std::size_t dot = name.find('.', kPrefix.size());
    const std::string n = name.substr(kPrefix.size(), dot - kPrefix.size());
    if (n.empty() || n.size() > 9 || n.find_first_not_of("0123456789") != std::string::npos)
      continue;  // not a layer index: check_tensors names it
    layers = std::max<std::int64_t>(layers, std::stoll(n) + 1);
  }
  return layers;
}

// The config's sizes against the checkpoint's tensors, before anything is built from them: a config
// that names more layers or larger dimensions than the tensors hold is refused naming its field
// (the full shape check, check_tensors, then names the tensor for any other disagreement).
void check_config_fits_tensors(const ImportedModel& model, const std::string& config_path) {
  const ModelSpec& s = model.spec;
  auto refuse = [&](const char* field, const std::string& value, const std::string& what) {
    fail(config_path + ": field " + json_quote(field) + ": " + value + ", but " + what +
         " (do config.json and the weights belong together?)");
  };
  if (const std::int64_t layers = checkpoint_layers(model); s.num_layers > layers)
    refuse("num_hidden_layers", std::to_string(s.num_layers),
           "the checkpoint holds " + std::to_string(layers) + " layers");
  // `rows` of the config (described by `value`) against dimension `dim` of a tensor.
  auto fits = [&](const std::string& tensor, std::size_t dim, const char* field, std::int64_t rows,
                  const std::string& value) {
    const TensorView* t = model.find(tensor);
    if (t && t->shape.size() > dim && rows > t->shape[dim])
      refuse(field, value, tensor + " is " + format_shape(t->shape));
  };
  auto heads = [&](std::int64_t n) {
    return std::to_string(n) + " heads of " + std::to_string(s.head_dim) + " (" +
           std::to_string(n * s.head_dim) + " rows)";
  };
  fits("model.embed_tokens.weight", 0, "vocab_size", s.vocab_size, std::to_string(s.vocab_size));
  fits("model.embed_tokens.weight", 1, "hidden_size", s.hidden_size, std::to_string(s.hidden_size));
  fits("model.layers.0.mlp.gate_proj.weight", 0, "intermediate_size", s.intermediate_size,
       std::to_string(s.intermediate_size));
  fits("model.layers.0.self_attn.q_proj.weight", 0, "num_attention_heads", s.num_heads * s.head_dim,
       heads(s.num_heads));
  fits("model.layers.0.self_attn.k_proj.weight", 0, "num_key_value_heads",
       s.num_kv_heads * s.head_dim, heads(s.num_kv_heads));
}

// What a scale tensor holds, for messages: "one scale a 128x128 block of lm_head.weight".
std::string scale_layout(const ModelSpec& spec, const RequiredTensor& scale) {
  const WeightQuant& q = spec.quant;
  const std::string per =
      q.scheme == WeightQuant::Scheme::kBlock
          ? std::to_string(q.block_size) + "x" + std::to_string(q.block_size) + " block"
      : q.per_tensor ? std::string("tensor")
                     : std::string("row (output channel)");
  return "one scale a " + per + " of " + scale.module + ".weight, quantization_config " +
         json_quote(q.method);
}

// A tensor's dtype against what the config makes of it: E4M3 exactly where the quantization
// config quantizes, f32 or bf16 scales, floating point elsewhere.
void check_kind(const TensorView& have, const RequiredTensor& want, const WeightQuant& quant) {
  using Kind = RequiredTensor::Kind;
  const std::string tensor = have.file->path() + ": tensor " + json_quote(want.name) + " is " +
                             std::string(dtype_name(have.dtype));
  const bool e4m3 = have.dtype == DType::E4M3;
  if (want.kind == Kind::kE4M3 && !e4m3)
    fail(tensor + ", but config.json's quantization_config (quant_method " +
         json_quote(quant.method) + ") quantizes module " + json_quote(want.module) +
         ": expected F8_E4M3 (list the module in " +
         (quant.method == "fp8" ? "modules_to_not_convert" : "ignore") +
         " if the checkpoint keeps it unquantized)");
  if (want.kind == Kind::kScale && have.dtype != DType::F32 && have.dtype != DType::BF16)
    fail(tensor + ": expected F32 or BF16 scales of " + want.module + ".weight");
  if (want.kind == Kind::kFloat && e4m3)
    fail(tensor + ", but " +
         (quant.scheme == WeightQuant::Scheme::kNone
              ? std::string("config.json has no quantization_config")
          : want.module.empty()
              ? std::string("only linear layers' weights may be quantized")
              : "config.json's quantization_config leaves module " + json_quote(want.module) +
                    " unquantized (" +
                    (quant.method == "fp8" ? "modules_to_not_convert" : "ignore") + ")") +
         ": expected BF16, F16 or F32");
}

// compressed-tensors' one scale a weight, widened to one a row ([rows, 1], the same number in
// every row), so everything after the importer sees one per-row layout.
void widen_tensor_scales(ImportedModel& model) {
  for (const RequiredTensor& want : required_tensors(model.spec)) {
    if (want.kind != RequiredTensor::Kind::kScale) continue;
    TensorView& scale = model.tensors.at(want.name);
    float value = 0;
    if (scale.dtype == DType::BF16) {
      std::uint16_t h;
      std::memcpy(&h, scale.data, 2);
      value = bf16_to_f32(h);
    } else {
      std::memcpy(&value, scale.data, 4);
    }
    const std::int64_t rows = model.tensors.at(want.module + ".weight").shape[0];
    std::vector<std::uint8_t>& bytes =
        model.made.emplace_back(static_cast<std::size_t>(rows) * sizeof(float));
    for (std::int64_t r = 0; r < rows; ++r) std::memcpy(bytes.data() + r * 4, &value, 4);
    scale.dtype = DType::F32;
    scale.shape = {rows, 1};
    scale.file = nullptr;
    scale.data = bytes.data();
    scale.bytes = bytes.size();
  }
}

void check_tensors(const ImportedModel& model, const std::string& weights_file) {
  const ModelSpec& spec = model.spec;
  std::set<std::string> needed;
  for (const RequiredTensor& want : required_tensors(spec)) {
    needed.insert(want.name);
    const TensorView* have = model.find(want.name);
    if (!have) {
      fail(weights_file + ": tensor " + json_quote(want.name) + " is missing (" +
           spec.architecture + " needs it with shape " + format_shape(want.shape) + ")");
    }
    check_kind(*have, want, spec.quant);
    const bool scalar_scale =
        want.kind == RequiredTensor::Kind::kScale && spec.quant.per_tensor && have->shape.empty();
    if (have->shape != want.shape && !scalar_scale) {
      fail(have->file->path() + ": tensor " + json_quote(want.name) + ": expected shape " +
           format_shape(want.shape) + ", found " + format_shape(have->shape) +
           (want.kind == RequiredTensor::Kind::kScale ? " (" + scale_layout(spec, want) + ")"
                                                      : std::string()));
    }
  }
  for (const auto& [name, view] : model.tensors) {
    if (!needed.count(name) && !ignorable_tensor(name, spec)) {
      fail(view.file->path() + ": tensor " + json_quote(name) + " is not part of " +
           spec.architecture + " with " + std::to_string(spec.num_layers) + " layers" +
           (spec.tie_word_embeddings ? " and tied embeddings" : "") +
           " (do config.json and the weights belong together?)");
    }
  }
}

bool is_hf_config(const fs::path& path, const json& doc) {
  return path.filename() == "config.json" || (doc.is_object() && doc.contains("architectures"));
}

}  // namespace

ImportedModel import_model(const std::string& path, const ImportOptions& options) {
  ImportedModel model;
  model.source = path;
  const fs::path given(path);
  std::error_code ec;
  const fs::file_status status = fs::status(given, ec);
  if (!fs::exists(status)) fail(path + ": no such file or directory");

  fs::path dir;
  fs::path config_path;
  std::string name;
  if (fs::is_directory(status)) {
    dir = given;
  } else {
    const json doc = read_json_file(path);
    if (is_hf_config(given, doc)) {
      config_path = given;
      dir = given.parent_path();
    } else {
      // A Telos model.json: {"name", "checkpoint" (relative to this file), "serving"}.
      const JsonObject spec_file(doc, path);
      for (const auto& [key, value] : doc.items()) {
        if (key != "name" && key != "checkpoint" && key != "serving" && key != "description") {
          spec_file.fail_field(key,
                               "unknown field (a model.json has name, checkpoint, serving, "
                               "description)");
        }
      }
      name = spec_file.optional_string("name").value_or("");
      if (spec_file.has("name") && name.empty()) spec_file.fail_field("name", "must not be empty");
      const fs::path checkpoint = spec_file.string("checkpoint");
      dir = checkpoint.is_absolute() ? checkpoint : given.parent_path() / checkpoint;
      if (!fs::is_directory(dir, ec)) {
        spec_file.fail_field("checkpoint", dir.string() + " is not a directory");
      }
      if (spec_file.has("serving")) model.serving = spec_file.object("serving").value();
    }
  }
  if (dir.empty()) dir = ".";
  dir = dir.lexically_normal();
  if (config_path.empty()) config_path = dir / "config.json";

  const json config = read_json_file(config_path.lexically_normal().string());
  model.spec = spec_from_config(config, config_path.lexically_normal().string());
  model.spec.name = name.empty() ? fs::weakly_canonical(dir, ec).filename().string() : name;
  if (model.spec.name.empty()) model.spec.name = "model";
  model.checkpoint_dir = dir.string();

  if (options.weights) {
    const std::string weights_file = map_weights(model, dir);
    check_config_fits_tensors(model, config_path.lexically_normal().string());
    check_tensors(model, weights_file);
    if (model.spec.quant.per_tensor) widen_tensor_scales(model);
    model.has_weights = true;
  }
  return model;
}

}  // namespace telos::compiler
