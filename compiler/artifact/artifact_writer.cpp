#include "compiler/artifact/artifact_writer.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <vector>

#include "compiler/artifact/compact_json.hpp"
#include "compiler/artifact/graph_section.hpp"
#include "compiler/artifact/output_file.hpp"
#include "compiler/artifact/staging_dir.hpp"
#include "compiler/ir/verifier.hpp"
#include "support/artifact_format.hpp"
#include "support/artifact_limits.hpp"
#include "support/checksum.hpp"
#include "support/dtype.hpp"
#include "support/error.hpp"
#include "support/mapped_file.hpp"
#include "support/qkv_layout.hpp"

namespace telos::compiler {
namespace fs = std::filesystem;
namespace {

constexpr std::size_t kPackBufferBytes = 8u << 20;  // the bounded buffer weights pass through

// Refuses a converted value that is not finite: a NaN or infinity in the checkpoint, or a finite
// value beyond the output dtype's range. Such a weight makes every logit NaN, and the model then
// generates token 0 forever; telosc names the tensor and the element instead.
void check_finite(const TensorView& src, std::size_t first, std::size_t count, DType to,
                  const std::uint8_t* out) {
  std::size_t bad = count;
  if (to == DType::E4M3) {
    for (std::size_t i = 0; i < count && bad == count; ++i)
      if ((out[i] & 0x7fu) == 0x7fu) bad = i;
  } else if (to == DType::BF16) {
    for (std::size_t i = 0; i < count && bad == count; ++i) {
      std::uint16_t h;
      std::memcpy(&h, out + 2 * i, 2);
      if ((h & 0x7f80u) == 0x7f80u) bad = i;
    }
  } else {
    for (std::size_t i = 0; i < count && bad == count; ++i) {
      std::uint32_t u;
      std::memcpy(&u, out + 4 * i, 4);
      if ((u & 0x7f800000u) == 0x7f800000u) bad = i;
    }
  }
  if (bad == count) return;
  const std::size_t index = first + bad;
  std::string where = "element " + std::to_string(index);
  if (src.shape.size() == 2)
    where += " (row " + std::to_string(index / static_cast<std::size_t>(src.shape[1])) +
             ", column " + std::to_string(index % static_cast<std::size_t>(src.shape[1])) + ")";
  float value = 0;
  const std::uint8_t* in = src.data + index * dtype_size(src.dtype);
  std::uint16_t h = 0;
  switch (src.dtype) {
    case DType::BF16:
      std::memcpy(&h, in, 2);
      value = bf16_to_f32(h);
      break;
    case DType::F16:
      std::memcpy(&h, in, 2);
      value = f16_to_f32(h);
      break;
    case DType::E4M3:
      value = e4m3_to_f32(*in);
      break;
    default:
      std::memcpy(&value, in, 4);
      break;
  }
  char text[32];
  std::snprintf(text, sizeof text, "%g", static_cast<double>(value));
  const std::string file = src.file ? src.file->path() + ": " : std::string();
  fail(file + "tensor " + src.name + ": " + where + " is " + text +
       (std::isfinite(value) ? ", beyond the range of " + std::string(dtype_name(to)) : "") +
       " (a model with a non-finite weight computes NaN logits; the checkpoint is damaged)");
}

void convert(const TensorView& src, std::size_t first, std::size_t count, DType to,
             std::uint8_t* out) {
  const std::size_t in_size = dtype_size(src.dtype);
  const std::uint8_t* in = src.data + first * in_size;
  if (src.dtype == to) {
    std::memcpy(out, in, count * in_size);
    check_finite(src, first, count, to, out);
    return;
  }
  // E4M3 weights come from the importer (a checkpoint's, or --quantize's) with their scales.
  if (src.dtype == DType::E4M3 || to == DType::E4M3)
    fail(src.name + ": " + std::string(dtype_name(src.dtype)) + " cannot be packed as " +
         std::string(dtype_name(to)) + " (e4m3 weights keep their own scales)");
  for (std::size_t i = 0; i < count; ++i) {
    float f = 0;
    std::uint16_t h = 0;
    switch (src.dtype) {
      case DType::BF16:
        std::memcpy(&h, in + 2 * i, 2);
        f = bf16_to_f32(h);
        break;
      case DType::F16:
        std::memcpy(&h, in + 2 * i, 2);
        f = f16_to_f32(h);
        break;
      case DType::F32:
        std::memcpy(&f, in + 4 * i, 4);
        break;
      default:
        fail(src.name + ": unsupported checkpoint dtype " + std::string(dtype_name(src.dtype)));
    }
    if (to == DType::BF16) {
      const std::uint16_t b = f32_to_bf16(f);
      std::memcpy(out + 2 * i, &b, 2);
    } else {
      std::memcpy(out + 4 * i, &f, 4);
    }
  }
  check_finite(src, first, count, to, out);
}

class ProgressBar {
 public:
  ProgressBar(bool enabled, std::int64_t total)
      : enabled_(enabled), total_(std::max<std::int64_t>(total, 1)) {}
  void update(std::int64_t done) {
    if (!enabled_) return;
    const int percent = static_cast<int>(done * 100 / total_);
    if (percent == last_) return;
    last_ = percent;
    // MiB below a GiB, so a small model's bar does not read "0.00 / 0.00".
    const bool gib = total_ >= (1ll << 30);
    const double unit = gib ? double(1ll << 30) : double(1ll << 20);
    std::fprintf(stderr, "\rtelosc: packing weights %3d%% (%.2f / %.2f %s)", percent, done / unit,
                 total_ / unit, gib ? "GiB" : "MiB");
    std::fflush(stderr);
  }
  void finish() {
    if (enabled_) std::fprintf(stderr, "\n");
  }

 private:
  bool enabled_;
  std::int64_t total_;
  int last_ = -1;
};

nlohmann::ordered_json model_json(const ModelSpec& s) {
  nlohmann::ordered_json rope;
  rope["type"] = s.rope.type;
  rope["theta"] = s.rope.theta;
  if (s.rope.type == "llama3") {
    rope["factor"] = s.rope.factor;
    rope["low_freq_factor"] = s.rope.low_freq_factor;
    rope["high_freq_factor"] = s.rope.high_freq_factor;
    rope["original_max_position_embeddings"] = s.rope.original_max_position_embeddings;
  }
  nlohmann::ordered_json j;
  j["name"] = s.name;
  j["architecture"] = s.architecture;
  j["family"] = s.family;
  j["vocab_size"] = s.vocab_size;
  j["hidden_size"] = s.hidden_size;
  j["intermediate_size"] = s.intermediate_size;
  j["num_layers"] = s.num_layers;
  j["num_heads"] = s.num_heads;
  j["num_kv_heads"] = s.num_kv_heads;
  j["head_dim"] = s.head_dim;
  j["rms_norm_eps"] = s.rms_norm_eps;
  j["max_position_embeddings"] = s.max_position_embeddings;
  j["rope"] = rope;
  j["tie_word_embeddings"] = s.tie_word_embeddings;
  j["qkv_bias"] = s.qkv_bias;
  j["qk_norm"] = s.qk_norm;
  j["sliding_window"] = nullptr;
  // A checkpoint without a BOS token (bos_token_id null or absent in config.json) has null.
  j["bos_token_id"] = s.bos_token_id >= 0 ? nlohmann::ordered_json(s.bos_token_id) : nullptr;
  j["eos_token_ids"] = s.eos_token_ids;
  return j;
}

// layers.N.qkv, the projection packed in RoPE's pair order.
bool is_qkv(const std::string& name) {
  return name.starts_with("layers.") && name.ends_with(".qkv");
}

// Converts runs of checkpoint elements into one tensor of the weight file through the bounded
// buffer, hashing what it writes and releasing the checkpoint's pages behind it.
class TensorPacker {
 public:
  TensorPacker(OutputFile& out, DType to, std::vector<std::uint8_t>& buffer, Xxh64& hash)
      : out_(out), to_(to), out_size_(dtype_size(to)), buffer_(buffer), hash_(hash) {}

  // The most elements one run may hold.
  std::size_t capacity() const { return buffer_.size() / out_size_; }

  // Elements [first, first + count) of `src`, whose rows are `cols` long; count <= capacity().
  void add(const TensorView& src, std::size_t first, std::size_t count, std::size_t cols) {
    if ((used_ + count) * out_size_ > buffer_.size()) flush();
    convert(src, first, count, to_, buffer_.data() + used_ * out_size_);
    used_ += count;
    const std::size_t begin = first / cols * cols, end = (first + count + cols - 1) / cols * cols;
    for (Read& r : read_)
      if (r.src == &src) {
        r.begin = std::min(r.begin, begin);
        r.end = std::max(r.end, end);
        return;
      }
    read_.push_back({&src, begin, end});
  }

  // Writes what the buffer holds, then drops the checkpoint rows it was read from, so they do not
  // accumulate as resident memory (whole pages only: a head's rows in RoPE's pair order, or a
  // column slice's rows, are dropped together; another rank's columns are read again from the
  // page cache).
  void flush() {
    const std::size_t bytes = used_ * out_size_;
    out_.write(buffer_.data(), bytes);
    hash_.update(buffer_.data(), bytes);
    used_ = 0;
    for (const Read& r : read_)
      if (r.src->file) {
        const std::size_t in = dtype_size(r.src->dtype);
        const std::size_t end = std::min(r.src->bytes / in, r.end);
        r.src->file->release(
            static_cast<std::size_t>(r.src->data - r.src->file->data()) + r.begin * in,
            (end - r.begin) * in);
      }
    read_.clear();
  }

 private:
  OutputFile& out_;
  DType to_;
  std::size_t out_size_;
  std::vector<std::uint8_t>& buffer_;
  Xxh64& hash_;
  std::size_t used_ = 0;
  // The elements of each checkpoint tensor the buffer was filled from, in whole rows.
  struct Read {
    const TensorView* src;
    std::size_t begin, end;
  };
  std::vector<Read> read_;
};

// A parameter's whole (its checkpoint tensors concatenated along dim 0) as rows of `cols`. The
// importer has checked every tensor's shape against the model (checkpoint.hpp).
struct WholeRows {
  std::vector<const TensorView*> sources;
  std::vector<std::int64_t> first_row;  // of each source in the whole; then the total
  std::int64_t cols = 1;

  std::int64_t rows() const { return first_row.back(); }
  // Where row `row` of the whole is: its source, its row there, and the rows left there from it.
  struct Place {
    const TensorView* source;
    std::int64_t row, rows_left;
  };
  Place at(std::int64_t row) const {
    std::size_t s = 0;
    while (first_row[s + 1] <= row) ++s;
    return {sources[s], row - first_row[s], first_row[s + 1] - row};
  }
};

WholeRows whole_rows(const ImportedModel& model, const ir::Param& p) {
  WholeRows w;
  if (p.type.dims.size() == 2)
    w.cols = p.shard && p.shard->dim == 1 ? p.shard->whole : p.type.dims[1];
  w.first_row.push_back(0);
  for (const std::string& name : p.sources) {
    const TensorView* src = model.find(name);
    if (!src) fail(model.checkpoint_dir + ": tensor " + name + " (for " + p.name + ") is missing");
    const auto elements = static_cast<std::int64_t>(src->bytes / dtype_size(src->dtype));
    w.sources.push_back(src);
    w.first_row.push_back(w.first_row.back() + elements / w.cols);
  }
  return w;
}

// Rank `rank`'s part of parameter `p` (the whole where it is not split): the rows of the whole in
// the order they are packed, and the columns of each. The QKV projection's rows go in RoPE's pair
// order within each head (layout qkv_rope_pairs); its parts are whole heads.
struct PackedPart {
  std::vector<ShardRange> rows;  // runs of whole rows, in order; a run of the pair order is one row
  ShardRange columns;
};

PackedPart packed_part(const ir::Param& p, const WholeRows& w, int rank, int head_dim) {
  PackedPart part{{{0, w.rows()}}, {0, w.cols}};
  if (p.shard && p.shard->dim == 0) part.rows = p.shard->ranks[static_cast<std::size_t>(rank)];
  if (p.shard && p.shard->dim == 1) {
    const std::vector<ShardRange>& columns = p.shard->ranks[static_cast<std::size_t>(rank)];
    if (columns.size() != 1)
      fail(p.name + ": rank " + std::to_string(rank) + "'s columns are " +
           std::to_string(columns.size()) + " ranges; the writer packs one range of columns");
    part.columns = columns[0];
  }
  for (const auto& [begin, end] : part.rows)
    if (end > w.rows())
      fail(p.name + ": rows " + std::to_string(begin) + ":" + std::to_string(end) +
           " run past the " + std::to_string(w.rows()) + " rows of its checkpoint tensors");
  if (part.columns.second > w.cols)
    fail(p.name + ": columns run past the " + std::to_string(w.cols) +
         " of its checkpoint tensors");
  if (!is_qkv(p.name)) return part;
  std::vector<std::int64_t> natural;
  for (const auto& [begin, end] : part.rows)
    for (std::int64_t r = begin; r < end; ++r) natural.push_back(r);
  PackedPart pairs{{}, part.columns};
  for (std::size_t o = 0; o < natural.size(); ++o) {
    const std::int64_t r =
        natural[static_cast<std::size_t>(qkv_pair_row(static_cast<long long>(o), head_dim))];
    pairs.rows.push_back({r, r + 1});
  }
  return pairs;
}

// Packs `part` of the whole `w` through `packer`: runs of consecutive rows of one source (whole
// rows), or row by row (a column slice).
void pack_part(TensorPacker& packer, const WholeRows& w, const PackedPart& part,
               const std::string& name, const ArtifactOptions& options,
               const std::function<void(std::size_t)>& progress) {
  const auto width = static_cast<std::size_t>(part.columns.second - part.columns.first);
  const bool whole_rows = width == static_cast<std::size_t>(w.cols);
  const std::size_t rows_a_run =
      whole_rows ? std::max<std::size_t>(1, packer.capacity() / width) : 1;
  if (width > packer.capacity())
    fail(name + ": a row of " + std::to_string(width) + " elements does not fit the " +
         std::to_string(kPackBufferBytes) + "-byte packing buffer");
  for (auto [row, end] : part.rows)
    while (row < end) {
      if (options.cancel && *options.cancel) fail("interrupted while packing " + name);
      const WholeRows::Place at = w.at(row);
      const std::int64_t n =
          std::min({end - row, at.rows_left, static_cast<std::int64_t>(rows_a_run)});
      const auto first = static_cast<std::size_t>(at.row * w.cols + part.columns.first);
      const std::size_t count = static_cast<std::size_t>(n) * width;
      packer.add(*at.source, first, count, static_cast<std::size_t>(w.cols));
      progress(count);
      row += n;
    }
}

// Row `row` of a checkpoint scale tensor as f32 (scales are f32 or bf16: checkpoint.hpp).
void scale_row(const TensorView& scale, std::int64_t row, std::int64_t cols, float* out) {
  for (std::int64_t c = 0; c < cols; ++c) {
    const std::size_t i = static_cast<std::size_t>(row * cols + c);
    if (scale.dtype == DType::BF16) {
      std::uint16_t h;
      std::memcpy(&h, scale.data + 2 * i, 2);
      out[c] = bf16_to_f32(h);
    } else {
      std::memcpy(out + c, scale.data + 4 * i, 4);
    }
    if (!std::isfinite(out[c]) || out[c] <= 0.0f)
      fail((scale.file ? scale.file->path() + ": " : std::string()) + "tensor " + scale.name +
           ": element " + std::to_string(i) + " is " + std::to_string(out[c]) +
           ", not a positive finite scale (the checkpoint is damaged)");
  }
}

// The f32 scales of e4m3 parameter `p`'s part, in the part's blocks (ir::shard_scale chose them so
// that each lies inside one block of one source: ir::concat_params for the fused rows): scale row j
// covers packed rows [j * block_rows, (j + 1) * block_rows), found through the first of those rows;
// scale column k covers the part's columns from k * block_cols, found through the first of those.
std::vector<std::uint8_t> packed_scales(const ImportedModel& model, const ir::Param& p,
                                        const WholeRows& w, const PackedPart& part) {
  std::vector<std::int64_t> natural;  // the whole's row of each packed row
  for (const auto& [begin, end] : part.rows)
    for (std::int64_t r = begin; r < end; ++r) natural.push_back(r);
  const ir::ParamScale& sc = p.scale.value();
  const std::vector<std::int64_t> dims = p.scale_dims();
  const std::int64_t source_cols = (w.cols + sc.source_block_cols - 1) / sc.source_block_cols;
  std::vector<float> source_row(static_cast<std::size_t>(source_cols));
  std::vector<std::uint8_t> out(static_cast<std::size_t>(dims[0] * dims[1]) * sizeof(float));
  for (std::int64_t j = 0; j < dims[0]; ++j) {
    const WholeRows::Place at = w.at(natural[static_cast<std::size_t>(j * sc.block_rows)]);
    const auto s = static_cast<std::size_t>(
        std::find(w.sources.begin(), w.sources.end(), at.source) - w.sources.begin());
    const TensorView* scale = model.find(sc.sources[s]);
    if (!scale)
      fail(model.checkpoint_dir + ": tensor " + sc.sources[s] + " (the scales of " + p.name +
           ") is missing");
    const std::int64_t row = at.row / sc.source_block_rows;
    if (scale->shape.size() != 2 || scale->shape[0] <= row || scale->shape[1] != source_cols)
      fail("tensor " + scale->name + " is " + format_shape(scale->shape) + ": no scale row " +
           std::to_string(row) + " of " + std::to_string(source_cols) + " for " + p.name);
    scale_row(*scale, row, source_cols, source_row.data());
    for (std::int64_t k = 0; k < dims[1]; ++k) {
      const std::int64_t column = part.columns.first + k * sc.block_cols;
      const float v = source_row[static_cast<std::size_t>(column / sc.source_block_cols)];
      std::memcpy(out.data() + static_cast<std::size_t>(j * dims[1] + k) * sizeof(float), &v,
                  sizeof(float));
    }
  }
  return out;
}

// Writes the scales of e4m3 parameter `p` as the tensor "NAME.scale" after it; returns its entry.
nlohmann::ordered_json pack_scales(OutputFile& out, const ImportedModel& model, const ir::Param& p,
                                   const WholeRows& w, const PackedPart& part) {
  const std::int64_t offset = (out.written() + limits::kWeightAlignment - 1) /
                              limits::kWeightAlignment * limits::kWeightAlignment;
  out.pad_to(offset);
  const std::vector<std::uint8_t> bytes = packed_scales(model, p, w, part);
  out.write(bytes.data(), bytes.size());
  nlohmann::ordered_json t;
  t["name"] = p.name + ".scale";
  t["dtype"] = dtype_name(DType::F32);
  t["shape"] = p.scale_dims();
  t["layout"] = "row_major";
  t["offset"] = offset;
  t["bytes"] = bytes.size();
  t["checksum"] = checksum_string(xxh64(bytes.data(), bytes.size()));
  t["sources"] = p.scale->sources;
  return t;
}

// Packs rank `rank`'s part of every parameter into the weight file `path` (weights.bin, or the
// rank's file); returns its entry of the manifest's "weights" section, with its checksum. An e4m3
// parameter is followed by its scales, a tensor of its own.
nlohmann::ordered_json pack_weight_file(const fs::path& path, const ImportedModel& model,
                                        const ir::Graph& graph, int rank,
                                        std::vector<std::uint8_t>& buffer,
                                        const ArtifactOptions& options,
                                        const std::function<void(std::size_t)>& progress) {
  OutputFile out(path);
  nlohmann::ordered_json tensors = nlohmann::ordered_json::array();
  for (const ir::Param& p : graph.params()) {
    const std::int64_t offset = (out.written() + limits::kWeightAlignment - 1) /
                                limits::kWeightAlignment * limits::kWeightAlignment;
    out.pad_to(offset);
    Xxh64 tensor_hash;
    TensorPacker packer(out, p.type.dtype, buffer, tensor_hash);
    const bool pairs = is_qkv(p.name);
    const int head_dim = static_cast<int>(model.spec.head_dim);
    if (pairs && head_dim % 8 != 0)
      fail(p.name + ": a head of " + std::to_string(head_dim) +
           " rows does not pack in RoPE's pair order (head_dim a multiple of 8)");
    const WholeRows w = whole_rows(model, p);
    const std::size_t out_size = dtype_size(p.type.dtype);
    const PackedPart part = packed_part(p, w, rank, head_dim);
    pack_part(packer, w, part, p.name, options,
              [&](std::size_t elements) { progress(elements * out_size); });
    packer.flush();
    const std::int64_t bytes = p.type.bytes(0, 0);
    if (out.written() - offset != bytes)
      fail(p.name + ": packed " + std::to_string(out.written() - offset) + " bytes from " +
           std::to_string(p.sources.size()) + " checkpoint tensors, expected " +
           std::to_string(bytes));
    nlohmann::ordered_json t;
    t["name"] = p.name;
    t["dtype"] = dtype_name(p.type.dtype);
    t["shape"] = p.type.dims;
    t["layout"] = pairs ? "qkv_rope_pairs" : "row_major";
    t["offset"] = offset;
    t["bytes"] = bytes;
    t["checksum"] = checksum_string(tensor_hash.digest());
    t["sources"] = p.sources;
    if (p.shard) {
      nlohmann::ordered_json ranges = nlohmann::ordered_json::array();
      for (const auto& [begin, end] : p.shard->ranks[static_cast<std::size_t>(rank)])
        ranges.push_back({begin, end});
      t["split"] = {{"dim", p.shard->dim}, {"of", p.shard->whole}, {"ranges", ranges}};
    }
    if (p.scale)
      t["scale"] = {{"tensor", p.name + ".scale"},
                    {"block", {p.scale->block_rows, p.scale->block_cols}}};
    tensors.push_back(t);
    if (p.scale) tensors.push_back(pack_scales(out, model, p, w, part));
  }
  out.close();
  nlohmann::ordered_json f;
  f["file"] = path.filename().string();
  f["size"] = out.written();
  f["tensors"] = tensors;
  f["checksum"] = checksum_string(out.digest());
  return f;
}

// The weight files' names: weights.bin, or one a tensor-parallel rank.
std::vector<std::string> weight_file_names(int ranks) {
  if (ranks == 1) return {"weights.bin"};
  std::vector<std::string> names;
  for (int r = 0; r < ranks; ++r) names.push_back("weights.rank" + std::to_string(r) + ".bin");
  return names;
}

// Packs every rank's weight file into `dir`; returns the manifest's "weights" section and adds
// each file's checksum to `files`.
nlohmann::ordered_json pack_weights(const fs::path& dir, const ImportedModel& model,
                                    const ir::Graph& graph, const ArtifactOptions& options,
                                    nlohmann::ordered_json& files) {
  std::int64_t total = 0;
  for (const ir::Param& p : graph.params()) total += p.type.bytes(0, 0) * graph.ranks;
  ProgressBar progress(options.progress, total);
  std::int64_t packed = 0;
  const auto advance = [&](std::size_t bytes) {
    packed += static_cast<std::int64_t>(bytes);
    progress.update(packed);
  };
  std::vector<std::uint8_t> buffer(kPackBufferBytes);
  std::vector<nlohmann::ordered_json> ranks;
  const std::vector<std::string> names = weight_file_names(graph.ranks);
  for (int r = 0; r < graph.ranks; ++r) {
    nlohmann::ordered_json f = pack_weight_file(dir / names[static_cast<std::size_t>(r)], model,
                                                graph, r, buffer, options, advance);
    files[f["file"].get<std::string>()] = f["checksum"];
    f.erase("checksum");
    ranks.push_back(std::move(f));
  }
  progress.finish();

  nlohmann::ordered_json w;
  if (graph.ranks == 1) {
    w["file"] = ranks[0]["file"];
    w["alignment"] = limits::kWeightAlignment;
    w["size"] = ranks[0]["size"];
    w["tensors"] = ranks[0]["tensors"];
    return w;
  }
  w["alignment"] = limits::kWeightAlignment;
  w["ranks"] = ranks;
  return w;
}

std::uint64_t copy_file_hashed(const fs::path& from, const fs::path& to) {
  const MappedFile in(from.string());
  OutputFile out(to);
  out.write(in.data(), in.size());
  out.close();
  return out.digest();
}

// Writes codegen's files (docs/artifact.md, "Kernels") into `dir`: per kernel set its generated
// source (the first set's kernels/src/model.cu, every further one's kernels/src/model.ARCH.cu),
// PTX and cubin. Returns their checksums by file name, for the manifest's "files".
nlohmann::ordered_json write_kernel_files(const fs::path& dir,
                                          const std::vector<TargetKernelSet>& sets) {
  for (const char* sub : {"kernels", "kernels/src"})
    if (::mkdir((dir / sub).c_str(), 0777) != 0)
      fail((dir / sub).string() + ": cannot create: " + std::strerror(errno));
  nlohmann::ordered_json files;
  for (std::size_t i = 0; i < sets.size(); ++i) {
    const codegen::GeneratedKernels& k = sets[i].kernels;
    const std::string src =
        i == 0 ? "kernels/src/model.cu" : "kernels/src/model." + k.compiled.arch + ".cu";
    files[src] = checksum_string(write_file(dir / src, k.source));
    if (k.compiled.arch.empty()) continue;
    for (const auto& [ext, bytes] :
         {std::pair{".ptx", &k.compiled.ptx}, std::pair{".cubin", &k.compiled.cubin}}) {
      const std::string rel = "kernels/" + k.compiled.arch + ext;
      files[rel] = checksum_string(write_file(dir / rel, *bytes));
    }
  }
  // The staging directory itself is synced at commit; its subdirectories here.
  for (const char* sub : {"kernels/src", "kernels"})
    if (!sync_directory(dir / sub))
      fail((dir / sub).string() + ": fsync failed: " + std::strerror(errno));
  return files;
}

// The manifest's kernel sections: the first set's plan, kernels and programs at the top level,
// each further set's under kernel_sets.ARCH (docs/artifact.md, "Kernel sets").
void kernel_sections(nlohmann::ordered_json& m, const std::vector<TargetKernelSet>& sets) {
  if (sets.empty()) {  // --target cpu: no plan, kernels or programs
    m["plan"] = plan_to_json(ArenaPlan{});
    m["kernels"] = nlohmann::ordered_json::array();
    m["programs"] = nlohmann::ordered_json::object();
    return;
  }
  m["plan"] = plan_to_json(sets[0].plan);
  m["kernels"] = sets[0].kernels.kernels;
  m["programs"] = sets[0].kernels.programs;
  if (sets.size() == 1) return;
  nlohmann::ordered_json further = nlohmann::ordered_json::object();
  for (std::size_t i = 1; i < sets.size(); ++i)
    further[sets[i].kernels.compiled.arch] = {{"plan", plan_to_json(sets[i].plan)},
                                              {"kernels", sets[i].kernels.kernels},
                                              {"programs", sets[i].kernels.programs}};
  m["kernel_sets"] = std::move(further);
}

// The model, serving and kv_cache sections of the manifest.
nlohmann::ordered_json config_sections(const ModelSpec& spec, const ServingConfig& serving) {
  nlohmann::ordered_json m;
  m["model"] = model_json(spec);
  m["serving"] = serving_to_json(serving);
  m["kv_cache"] = kv_cache_to_json(kv_cache_geometry(spec, serving));
  return m;
}

// The manifest text, with its checksum, validated as every reader validates it (support/
// artifact_format.hpp) before it is written: telosc never writes what telos-run would refuse.
std::string manifest_text(nlohmann::ordered_json m, const fs::path& staged) {
  const std::string where = (staged / "manifest.json").string();
  m["manifest_checksum"] = manifest_checksum(parse_manifest_text(compact_json(m), where));
  const std::string text = compact_json(m);
  try {
    validate_manifest(parse_manifest_text(text, where), where);
  } catch (const Error& e) {
    fail(std::string("the artifact telosc was about to write would be refused by telos-run: ") +
         e.what());
  }
  return text;
}

}  // namespace

codegen::CodegenInput codegen_input(const ModelSpec& spec, const ServingConfig& serving) {
  codegen::CodegenInput in;
  in.max_batch = static_cast<int>(serving.max_batch);
  in.max_seq_len = static_cast<int>(serving.max_seq_len);
  in.kv_page_size = static_cast<int>(serving.kv_page_size);
  for (auto b : serving.decode_buckets) in.decode_buckets.push_back(static_cast<int>(b));
  for (auto b : serving.prefill_buckets) in.prefill_buckets.push_back(static_cast<int>(b));
  in.targets = serving.targets;
  in.decode_weight_images = serving.decode_weight_images;
  in.attention_split = static_cast<int>(serving.attention_split);
  in.kv_dtype = serving.kv_dtype;
  // The manifest's scales (kv_cache_to_json writes the same geometry's).
  const KvCacheGeometry kv = kv_cache_geometry(spec, serving);
  in.kv_k_scales = kv.k_scales;
  in.kv_v_scales = kv.v_scales;
  return in;
}

void validate_configuration(const std::string& source, const ModelSpec& spec,
                            const ServingConfig& serving) {
  const nlohmann::ordered_json sections = config_sections(spec, serving);
  const std::string where = source + " (as the artifact's manifest.json)";
  validate_config_sections(parse_manifest_text(compact_json(sections), where), where);
}

void write_artifact(const std::string& destination, const ImportedModel& model,
                    const ServingConfig& serving, const ir::Graph& graph,
                    const std::vector<TargetKernelSet>& sets, const ArtifactOptions& options) {
  // The packer relies on the verifier's parameter rules (types it writes, sources to pack).
  ir::verify(graph);
  if (!model.has_weights) fail(model.source + ": the model was imported without weights");
  validate_configuration(model.source, model.spec, serving);
  const fs::path dest = fs::path(destination).lexically_normal();
  check_destination(dest);

  StagingDir staging(dest);
  nlohmann::ordered_json files;
  const nlohmann::ordered_json weights = pack_weights(staging.path(), model, graph, options, files);
  files["ir.txt"] = checksum_string(write_file(staging.path() / "ir.txt", ir::print_graph(graph)));
  for (const char* name : {"tokenizer.json", "tokenizer_config.json", "chat_template.jinja"}) {
    const fs::path from = fs::path(model.checkpoint_dir) / name;
    std::error_code ec;
    if (fs::is_regular_file(from, ec))
      files[name] = checksum_string(copy_file_hashed(from, staging.path() / name));
  }
  // A --target cpu artifact has no kernel set: no kernel files.
  if (!sets.empty()) files.update(write_kernel_files(staging.path(), sets));

  nlohmann::ordered_json m;
  m["format"] = kArtifactFormat;
  m["schema_version"] = kArtifactSchemaVersion;
  m["generator"] = kGenerator;
  m["manifest_checksum"] = "";  // set by manifest_text
  m.update(config_sections(model.spec, serving));
  m["weights"] = weights;
  m["graph"] = graph_section(graph);
  kernel_sections(m, sets);
  m["files"] = files;
  write_file(staging.path() / "manifest.json", manifest_text(std::move(m), staging.path()));

  if (options.cancel && *options.cancel)
    fail("interrupted before " + dest.string() + " was complete");
  staging.commit(dest);
}

}  // namespace telos::compiler
