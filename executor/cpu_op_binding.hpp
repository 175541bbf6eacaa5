#pragma once
// What an op of the CPU reference engine (cpu_reference_ops.hpp) sees: at load, its graph op
// through CpuOpBinding, whose every accessor checks what the op reads against the artifact and
// refuses, naming the manifest field, what it cannot use; while a step runs, the step's rows, its
// values and the KV cache (CpuStep). A tensor-parallel artifact's graph is bound once a rank, each
// binding reading its rank's weights, and a step runs on every rank's CpuStep in turn.
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "executor/artifact.hpp"
#include "executor/kv_page_pool.hpp"

namespace telos::exec {

// The KV cache: pages of [layer][kv][head][slot][dim], the GPU engine's paged layout addressed
// through the same page tables. A bf16 cache (kv_cache.dtype) is kept in f32, the engine's ground
// truth; an e4m3 one in e4m3 bytes, q = e4m3(x / scale) (round to nearest even, saturating) read
// back as float(q) * scale with the layer's K or V scale, as the GPU kernels are to read it.
class CpuKvCache {
 public:
  CpuKvCache(const KvCacheConfig& geometry, int pages);
  // Host bytes of one page.
  static std::size_t bytes_per_page(const KvCacheConfig& geometry);
  // Writes the K (kv = 0) or V (kv = 1) vector of one head at one position: head_dim floats.
  void store(std::span<const PageId> pages, int layer, int kv, int head, int position,
             const float* x);
  // Reads that vector back into `out` (head_dim floats).
  void load(std::span<const PageId> pages, int layer, int kv, int head, int position,
            float* out) const;

 private:
  std::size_t index(std::span<const PageId> pages, int layer, int kv, int head, int position) const;
  float scale(int layer, int kv) const;

  KvCacheConfig geometry_;
  std::vector<float> f32_;          // a bf16 cache
  std::vector<std::uint8_t> e4m3_;  // an e4m3 cache
};

// What an op computes with while a step runs. Rows are the step's tokens, its sequences' in order.
struct CpuStep {
  int rank = 0;
  // Every rank's step, in rank order (this one among them): what all_reduce sums over.
  const std::vector<CpuStep>* ranks = nullptr;
  int rows = 0;
  std::vector<std::int32_t> tokens, positions;  // the graph's inputs %tokens and %positions
  std::vector<std::span<const PageId>> pages;   // each row's sequence's page table
  std::vector<int> sample_rows;                 // rows whose logits come back, in step order
  std::vector<float>* logits = nullptr;         // vocab_size floats a sample row
  CpuKvCache* kv = nullptr;                     // the rank's
  std::vector<std::vector<float>> values;       // each graph value, [rows, cols], while it is live

  const float* in(int value) const { return values[static_cast<std::size_t>(value)].data(); }
  // Allocates value `value` as [rows, cols] zeros.
  float* out(int value, int cols);
};

using CpuOpRun = std::function<void(CpuStep&)>;

// One op of the graph as its binding function reads it. Every accessor refuses, naming the
// manifest and the field ("graph.ops[3] (linear).attrs.layer: ..."), what the op cannot use.
class CpuOpBinding {
 public:
  // Op `index` of the graph as rank `rank` runs it, on that rank's weights.
  CpuOpBinding(const Artifact& artifact, std::size_t index, int rank, bool* writes_logits);

  const GraphOp& op() const { return op_; }
  const ModelConfig& model() const { return artifact_.model(); }
  const KvCacheConfig& kv_cache() const { return artifact_.kv_cache(); }
  int ranks() const { return artifact_.ranks(); }
  [[noreturn]] void refuse(const std::string& field, const std::string& what) const;

  void counts(std::size_t operands, std::size_t params_min, std::size_t params_max,
              std::size_t results) const;
  // Operand or result i: a [T, cols] value (any width when cols is 0); returns its index.
  int operand(std::size_t i, std::int64_t cols) const;
  int result(std::size_t i, std::int64_t cols) const;
  int cols(int value) const;
  // Operand i is the graph input `name` (i32[T]), which the step provides.
  void input(std::size_t i, const char* name) const;
  void result_type(std::size_t i, const std::string& type) const;  // e.g. "i32[S]"
  // Parameter i: a matrix [rows, cols] (either 0: any), or an f32 vector of n.
  const WeightTensor& matrix(std::size_t i, std::int64_t rows, std::int64_t cols) const;
  std::span<const float> vector(std::size_t i, std::int64_t n) const;
  std::int64_t int_attr(const char* name, std::int64_t min_value, std::int64_t max_value) const;
  double positive_attr(const char* name) const;
  std::string string_attr(const char* name) const;
  bool has_attr(const char* name) const { return op_.attr(name) != nullptr; }
  // The op writes the step's logits (the engine needs exactly one such op).
  void writes_logits() const { *writes_logits_ = true; }

 private:
  const GraphValue& value(int index) const;
  void shape(const std::string& field, int value, std::int64_t cols) const;

  const Artifact& artifact_;
  const GraphOp& op_;
  int rank_;
  std::string name_;  // "graph.ops[3] (linear)"
  bool* writes_logits_;
};

}  // namespace telos::exec
