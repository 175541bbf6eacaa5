#include "executor/cpu_op_binding.hpp"

#include <algorithm>

#include "support/error.hpp"
#include "support/format_shape.hpp"

namespace telos::exec {

namespace {

std::size_t elements_per_page(const KvCacheConfig& g) {
  return std::size_t{2} * static_cast<std::size_t>(g.num_layers) *
         static_cast<std::size_t>(g.num_kv_heads) * static_cast<std::size_t>(g.page_size) *
         static_cast<std::size_t>(g.head_dim);
}

}  // namespace

CpuKvCache::CpuKvCache(const KvCacheConfig& geometry, int pages) : geometry_(geometry) {
  const std::size_t n = elements_per_page(geometry) * static_cast<std::size_t>(pages);
  if (geometry.dtype == DType::E4M3)
    e4m3_.resize(n);
  else
    f32_.resize(n);
}

std::size_t CpuKvCache::bytes_per_page(const KvCacheConfig& g) {
  return elements_per_page(g) * (g.dtype == DType::E4M3 ? 1 : sizeof(float));
}

std::size_t CpuKvCache::index(std::span<const PageId> pages, int layer, int kv, int head,
                              int position) const {
  const std::size_t S = static_cast<std::size_t>(geometry_.page_size);
  const std::size_t page = static_cast<std::size_t>(pages[static_cast<std::size_t>(position) / S]);
  const std::size_t L = static_cast<std::size_t>(geometry_.num_layers),
                    Hkv = static_cast<std::size_t>(geometry_.num_kv_heads),
                    D = static_cast<std::size_t>(geometry_.head_dim);
  return ((((page * L + static_cast<std::size_t>(layer)) * 2 + static_cast<std::size_t>(kv)) * Hkv +
           static_cast<std::size_t>(head)) *
              S +
          static_cast<std::size_t>(position) % S) *
         D;
}

float CpuKvCache::scale(int layer, int kv) const {
  const std::vector<float>& scales = kv == 0 ? geometry_.k_scales : geometry_.v_scales;
  return scales[static_cast<std::size_t>(layer)];
}

void CpuKvCache::store(std::span<const PageId> pages, int layer, int kv, int head, int position,
                       const float* x) {
  const std::size_t at = index(pages, layer, kv, head, position);
  const std::size_t D = static_cast<std::size_t>(geometry_.head_dim);
  if (geometry_.dtype != DType::E4M3) {
    std::copy(x, x + D, &f32_[at]);
    return;
  }
  const float s = scale(layer, kv);
  for (std::size_t d = 0; d < D; ++d) e4m3_[at + d] = f32_to_e4m3(x[d] / s);
}

void CpuKvCache::load(std::span<const PageId> pages, int layer, int kv, int head, int position,
                      float* out) const {
  const std::size_t at = index(pages, layer, kv, head, position);
  const std::size_t D = static_cast<std::size_t>(geometry_.head_dim);
  if (geometry_.dtype != DType::E4M3) {
    std::copy(&f32_[at], &f32_[at] + D, out);
    return;
  }
  const float s = scale(layer, kv);
  for (std::size_t d = 0; d < D; ++d) out[d] = e4m3_to_f32(e4m3_[at + d]) * s;
}

float* CpuStep::out(int value, int cols) {
  std::vector<float>& v = values[static_cast<std::size_t>(value)];
  v.assign(static_cast<std::size_t>(rows) * static_cast<std::size_t>(cols), 0.0f);
  return v.data();
}

CpuOpBinding::CpuOpBinding(const Artifact& artifact, std::size_t index, int rank,
                           bool* writes_logits)
    : artifact_(artifact),
      op_(artifact.graph().ops[index]),
      rank_(rank),
      name_("graph.ops[" + std::to_string(index) + "] (" + op_.op + ")"),
      writes_logits_(writes_logits) {}

void CpuOpBinding::refuse(const std::string& field, const std::string& what) const {
  fail(artifact_.dir() + "/manifest.json: " + name_ + (field.empty() ? "" : "." + field) + ": " +
       what);
}

void CpuOpBinding::counts(std::size_t operands, std::size_t params_min, std::size_t params_max,
                          std::size_t results) const {
  auto check = [&](const char* list, std::size_t have, std::size_t low, std::size_t high) {
    if (have < low || have > high)
      refuse(list, "expected " + std::to_string(low) +
                       (high != low ? " to " + std::to_string(high) : "") + ", found " +
                       std::to_string(have));
  };
  check("operands", op_.operands.size(), operands, operands);
  check("params", op_.params.size(), params_min, params_max);
  check("results", op_.results.size(), results, results);
}

const GraphValue& CpuOpBinding::value(int index) const {
  return artifact_.graph().values[static_cast<std::size_t>(index)];
}

void CpuOpBinding::shape(const std::string& field, int index, std::int64_t cols) const {
  const GraphValue& v = value(index);
  if (v.dtype == DType::I32 || v.shape.size() != 2 || v.shape[0] != kGraphTokens ||
      v.shape[1] < 1 || (cols != 0 && v.shape[1] != cols))
    refuse(field, "%" + v.name + " is " + graph_type_string(v) + ", expected a float [T," +
                      (cols != 0 ? std::to_string(cols) : std::string("N")) + "]");
}

int CpuOpBinding::operand(std::size_t i, std::int64_t cols) const {
  shape("operands[" + std::to_string(i) + "]", op_.operands[i], cols);
  return op_.operands[i];
}

int CpuOpBinding::result(std::size_t i, std::int64_t cols) const {
  shape("results[" + std::to_string(i) + "]", op_.results[i], cols);
  return op_.results[i];
}

int CpuOpBinding::cols(int index) const {
  return static_cast<int>(value(index).shape[1]);
}

void CpuOpBinding::input(std::size_t i, const char* name) const {
  const std::vector<int>& inputs = artifact_.graph().inputs;
  const GraphValue& v = value(op_.operands[i]);
  if (std::find(inputs.begin(), inputs.end(), op_.operands[i]) == inputs.end() || v.name != name ||
      graph_type_string(v) != "i32[T]")
    refuse("operands[" + std::to_string(i) + "]",
           "%" + v.name + " is not the graph input %" + name + ": i32[T]");
}

void CpuOpBinding::result_type(std::size_t i, const std::string& type) const {
  const GraphValue& v = value(op_.results[i]);
  if (graph_type_string(v) != type)
    refuse("results[" + std::to_string(i) + "]",
           "%" + v.name + " is " + graph_type_string(v) + ", expected " + type);
}

const WeightTensor& CpuOpBinding::matrix(std::size_t i, std::int64_t rows,
                                         std::int64_t cols) const {
  const WeightTensor& t = artifact_.tensor(op_.params[i], rank_);
  if (t.shape.size() != 2 || t.dtype == DType::I32 || (rows != 0 && t.shape[0] != rows) ||
      (cols != 0 && t.shape[1] != cols))
    refuse("params[" + std::to_string(i) + "]",
           "@" + t.name + " is " + std::string(dtype_name(t.dtype)) + format_shape(t.shape) +
               ", expected a matrix [" + (rows != 0 ? std::to_string(rows) : std::string("M")) +
               "," + (cols != 0 ? std::to_string(cols) : std::string("K")) + "]");
  return t;
}

std::span<const float> CpuOpBinding::vector(std::size_t i, std::int64_t n) const {
  const WeightTensor& t = artifact_.tensor(op_.params[i], rank_);
  if (t.shape.size() != 1 || t.dtype != DType::F32 || t.shape[0] != n)
    refuse("params[" + std::to_string(i) + "]",
           "@" + t.name + " is " + std::string(dtype_name(t.dtype)) + format_shape(t.shape) +
               ", expected f32[" + std::to_string(n) + "]");
  // weights.bin aligns every tensor to 256 bytes, and mmap to a page: f32 reads are aligned.
  return {reinterpret_cast<const float*>(t.data), static_cast<std::size_t>(n)};
}

std::int64_t CpuOpBinding::int_attr(const char* name, std::int64_t min_value,
                                    std::int64_t max_value) const {
  const GraphAttr* a = op_.attr(name);
  if (!a || !std::holds_alternative<std::int64_t>(*a) || std::get<std::int64_t>(*a) < min_value ||
      std::get<std::int64_t>(*a) > max_value)
    refuse(std::string("attrs.") + name, "expected an integer from " + std::to_string(min_value) +
                                             " to " + std::to_string(max_value));
  return std::get<std::int64_t>(*a);
}

double CpuOpBinding::positive_attr(const char* name) const {
  const GraphAttr* a = op_.attr(name);
  if (!a || !std::holds_alternative<double>(*a) || !(std::get<double>(*a) > 0))
    refuse(std::string("attrs.") + name, "expected a positive number");
  return std::get<double>(*a);
}

std::string CpuOpBinding::string_attr(const char* name) const {
  const GraphAttr* a = op_.attr(name);
  if (!a || !std::holds_alternative<std::string>(*a))
    refuse(std::string("attrs.") + name, "expected a string");
  return std::get<std::string>(*a);
}

}  // namespace telos::exec
