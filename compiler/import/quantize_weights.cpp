// telosc --quantize: a bf16, f16 or f32 checkpoint's linear weights to E4M3 with f32 scales, in the
// importer, so that what follows sees exactly what an FP8 checkpoint of the hub gives it.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "compiler/import/checkpoint.hpp"
#include "compiler/import/json_fields.hpp"
#include "support/error.hpp"

namespace telos::compiler {
namespace {

constexpr std::int64_t kBlock = 128;

float element(const TensorView& t, std::size_t i) {
  std::uint16_t h;
  float f;
  switch (t.dtype) {
    case DType::BF16:
      std::memcpy(&h, t.data + 2 * i, 2);
      return bf16_to_f32(h);
    case DType::F16:
      std::memcpy(&h, t.data + 2 * i, 2);
      return f16_to_f32(h);
    case DType::F32:
      std::memcpy(&f, t.data + 4 * i, 4);
      return f;
    default:
      fail(t.name + ": cannot quantize a tensor of " + std::string(dtype_name(t.dtype)));
  }
}

// The tensor's elements as f32, refusing a non-finite one (its block's scale would be too).
std::vector<float> widen(const TensorView& t, std::int64_t cols) {
  std::vector<float> w(t.bytes / dtype_size(t.dtype));
  for (std::size_t i = 0; i < w.size(); ++i) {
    w[i] = element(t, i);
    if (!std::isfinite(w[i]))
      fail((t.file ? t.file->path() + ": " : std::string()) + "tensor " + t.name + ": element " +
           std::to_string(i) + " (row " + std::to_string(i / static_cast<std::size_t>(cols)) +
           ") is not finite; it cannot be quantized (the checkpoint is damaged)");
  }
  return w;
}

struct Quantized {
  std::vector<std::uint8_t> q;      // E4M3, row-major like the weight
  std::vector<std::uint8_t> scale;  // f32 [ceil(rows / br), ceil(cols / bc)]
};

// Each block of br x bc gets scale = amax / 448 (1 for a block of zeros) and q = e4m3(w / scale).
Quantized quantize(const std::vector<float>& w, std::int64_t rows, std::int64_t cols,
                   std::int64_t br, std::int64_t bc) {
  const std::int64_t grid_rows = (rows + br - 1) / br, grid_cols = (cols + bc - 1) / bc;
  Quantized out{std::vector<std::uint8_t>(w.size()),
                std::vector<std::uint8_t>(static_cast<std::size_t>(grid_rows * grid_cols) * 4)};
  for (std::int64_t gr = 0; gr < grid_rows; ++gr)
    for (std::int64_t gc = 0; gc < grid_cols; ++gc) {
      const std::int64_t r0 = gr * br, r1 = std::min(rows, r0 + br);
      const std::int64_t c0 = gc * bc, c1 = std::min(cols, c0 + bc);
      float amax = 0.0f;
      for (std::int64_t r = r0; r < r1; ++r)
        for (std::int64_t c = c0; c < c1; ++c)
          amax = std::max(amax, std::fabs(w[static_cast<std::size_t>(r * cols + c)]));
      const float scale = amax > 0.0f ? amax / kE4M3Max : 1.0f;
      std::memcpy(out.scale.data() + (gr * grid_cols + gc) * 4, &scale, 4);
      for (std::int64_t r = r0; r < r1; ++r)
        for (std::int64_t c = c0; c < c1; ++c) {
          const auto i = static_cast<std::size_t>(r * cols + c);
          out.q[i] = f32_to_e4m3(w[i] / scale);
        }
    }
  return out;
}

}  // namespace

bool parse_quantize(std::string_view text, Quantize* out) {
  if (text == "none")
    *out = Quantize::kNone;
  else if (text == "fp8")
    *out = Quantize::kFp8Block;
  else if (text == "fp8-channel")
    *out = Quantize::kFp8Channel;
  else
    return false;
  return true;
}

void quantize_weights(ImportedModel& model, Quantize how, bool lm_head, const std::string& where) {
  if (how == Quantize::kNone) return;
  if (model.spec.quant.scheme != WeightQuant::Scheme::kNone)
    fail(where +
         ": the checkpoint is quantized already (config.json's quantization_config, "
         "quant_method " +
         json_quote(model.spec.quant.method) + "); compile it without quantize");
  WeightQuant& q = model.spec.quant;
  q.method = "telosc --quantize";
  if (lm_head)
    q.not_converted.clear();
  else
    q.not_converted = {"lm_head"};
  if (lm_head && model.spec.tie_word_embeddings) {
    model.spec.tie_word_embeddings = false;
    if (model.has_weights) {
      TensorView head = model.tensors.at("model.embed_tokens.weight");
      head.name = "lm_head.weight";
      model.tensors.emplace(head.name, std::move(head));
    }
  }
  if (how == Quantize::kFp8Block) {
    q.scheme = WeightQuant::Scheme::kBlock;
    q.scale_suffix = "weight_scale_inv";
    q.block_size = kBlock;
  } else {
    q.scheme = WeightQuant::Scheme::kChannel;
    q.scale_suffix = "weight_scale";
  }
  if (!model.has_weights) return;
  for (const RequiredTensor& want : required_tensors(model.spec)) {
    if (want.kind != RequiredTensor::Kind::kE4M3) continue;
    TensorView& weight = model.tensors.at(want.name);
    const std::int64_t rows = want.shape[0], cols = want.shape[1];
    Quantized out = quantize(widen(weight, cols), rows, cols, q.block_rows(), q.block_cols(cols));
    const std::int64_t br = q.block_rows(), bc = q.block_cols(cols);
    TensorView scale;
    scale.name = q.scale_name(want.module);
    scale.dtype = DType::F32;
    scale.shape = {(rows + br - 1) / br, (cols + bc - 1) / bc};
    scale.data = model.made.emplace_back(std::move(out.scale)).data();
    scale.bytes = model.made.back().size();
    weight.dtype = DType::E4M3;
    weight.data = model.made.emplace_back(std::move(out.q)).data();
    weight.bytes = model.made.back().size();
    weight.file = nullptr;
    model.tensors.emplace(scale.name, std::move(scale));
  }
}

}  // namespace telos::compiler
