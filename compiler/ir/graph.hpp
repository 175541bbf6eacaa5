#pragma once
// Telos IR: one forward step of a model as a typed SSA graph. A step processes T tokens that
// belong to S sequences (T = S in decode; a prefill chunk has T >= S); both stay symbolic in the
// IR and become numbers per bucket in the plan. Weights are named parameters (`@layers.0.qkv`),
// each built from checkpoint tensors concatenated along dim 0. The printed form, one op a line:
//
//   %l0.h = rmsnorm(%x, @layers.0.attn_norm) {eps = 1e-05} : bf16[T,128]
//
// The ops, their operands, attributes and result types are listed in verifier.hpp.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "support/dtype.hpp"

namespace telos::compiler::ir {

// A tensor dimension: a non-negative constant, or one of the step's symbolic sizes.
using Dim = std::int64_t;
constexpr Dim kTokens = -1;     // printed "T": tokens in the step
constexpr Dim kSequences = -2;  // printed "S": sequences in the step

struct TensorType {
  DType dtype = DType::BF16;
  std::vector<Dim> dims;

  bool operator==(const TensorType&) const = default;
  // Bytes for a step of `tokens` tokens over `sequences` sequences.
  std::int64_t bytes(std::int64_t tokens, std::int64_t sequences) const;
  std::string str() const;  // "bf16[T,128]"
};

// A tensor-parallel parameter: the part of the whole parameter (its sources concatenated along
// dim 0) each rank packs: rows (dim 0) or columns (dim 1), the ranges of a rank concatenated in
// order. Printed after the sources: `rows of 256: rank 0 [0:64, 128:160], rank 1 [...]`.
struct ParamShard {
  using Range = std::pair<std::int64_t, std::int64_t>;  // [begin, end)

  int dim = 0;
  std::int64_t whole = 0;                 // the whole parameter's extent along dim
  std::vector<std::vector<Range>> ranks;  // per rank, in rank order
};

// The f32 scales of an e4m3 parameter: w[r][c] = float(q[r][c]) * s[r / block_rows][c / block_cols]
// over a scale tensor s of [ceil(rows / block_rows), ceil(cols / block_cols)], packed beside the
// weight (docs/artifact.md, "NAME.scale"). Printed after the sources:
// `scale f32[2,1] blocks 128x128 = ["...weight_scale_inv", ...]`.
struct ParamScale {
  std::int64_t block_rows = 0, block_cols = 0;
  // The checkpoint's scale tensors, one a source of the weight, concatenated along dim 0 as the
  // weights are; each has blocks of source_block_rows x source_block_cols.
  std::vector<std::string> sources;
  std::int64_t source_block_rows = 0, source_block_cols = 0;
};

struct Param {
  std::string name;                  // as in docs/artifact.md's weight table, e.g. "layers.0.qkv"
  TensorType type;                   // constant dims only; a rank's part when sharded
  std::vector<std::string> sources;  // checkpoint tensors, concatenated along dim 0
  // Set by the tensor-parallel pass (passes/shard_tensor_parallel.hpp) on the parameters it
  // splits; absent where every rank packs the whole parameter.
  std::optional<ParamShard> shard = std::nullopt;
  std::optional<ParamScale> scale = std::nullopt;  // exactly for e4m3 parameters

  // The scale tensor's dims (a parameter with a scale only).
  std::vector<std::int64_t> scale_dims() const;
};

struct Op;

struct Value {
  std::string name;  // without the '%'
  TensorType type;
  Op* def = nullptr;  // null for the graph's inputs
};

using AttrValue = std::variant<std::int64_t, double, std::string>;
struct Attr {
  std::string name;
  AttrValue value;
};

struct Op {
  std::string kind;  // "linear", "rmsnorm", ... (see verifier.hpp)
  std::vector<Value*> operands;
  std::vector<std::string> params;  // parameter names, printed after the operands
  std::vector<Attr> attrs;          // printed in this order
  std::vector<Value*> results;

  const AttrValue* attr(const std::string& name) const;
  std::int64_t int_attr(const std::string& name) const;  // throws naming the op when absent
  std::string str_attr(const std::string& name) const;
  void set_attr(const std::string& name, AttrValue value);
};

class Graph {
 public:
  std::string name;  // the model's name, printed in the header
  // The tensor-parallel ranks that run this graph, each on its part of the parameters (their
  // shards); 1 until the tensor-parallel pass splits the graph.
  int ranks = 1;

  // Parameters in artifact order.
  const std::vector<Param>& params() const { return params_; }
  const Param* find_param(const std::string& name) const;
  Param* find_param(const std::string& name);
  void add_param(Param param);
  // Puts `param` just before parameter `before` (fused weights take the place of their parts).
  void insert_param(Param param, const std::string& before);
  // Drops every parameter no op uses (the parts, once a pass has rewired their ops).
  void drop_unused_params();

  Value* add_input(const std::string& name, TensorType type);
  const std::vector<Value*>& inputs() const { return inputs_; }
  const std::vector<Value*>& outputs() const { return outputs_; }
  void set_outputs(std::vector<Value*> outputs) { outputs_ = std::move(outputs); }

  // Ops in program order.
  const std::vector<std::unique_ptr<Op>>& ops() const { return ops_; }
  // Creates an op with one result per entry of `result_types`, inserted before position `at`
  // (ops().size() appends). Result names are made unique.
  Op* insert_op(std::size_t at, std::string kind, std::vector<Value*> operands,
                std::vector<std::string> params, std::vector<Attr> attrs,
                const std::vector<std::pair<std::string, TensorType>>& results);
  Op* append_op(std::string kind, std::vector<Value*> operands, std::vector<std::string> params,
                std::vector<Attr> attrs,
                const std::vector<std::pair<std::string, TensorType>>& results) {
    return insert_op(ops_.size(), std::move(kind), std::move(operands), std::move(params),
                     std::move(attrs), results);
  }
  std::size_t index_of(const Op* op) const;
  // Removes ops (their results must have no remaining uses).
  void erase_ops(const std::vector<Op*>& ops);
  // Every use of `from` (operands and graph outputs) now reads `to`.
  void replace_uses(Value* from, Value* to);
  std::vector<Op*> users(const Value* value) const;

  // Every value the graph holds: its inputs and the results of its ops.
  const std::vector<std::unique_ptr<Value>>& values() const { return values_; }

 private:
  std::string unique_name(const std::string& wanted);

  std::vector<Param> params_;
  std::vector<Value*> inputs_;
  std::vector<Value*> outputs_;
  std::vector<std::unique_ptr<Op>> ops_;
  std::vector<std::unique_ptr<Value>> values_;
};

// Parameters `names` of `g` concatenated along dim 0 as one parameter `fused_name`: their sources
// and, for e4m3 parts, their scales. The fused scale blocks are the largest that still fall inside
// one part's block (rows a divisor of every part's rows and of its block rows) and, with
// `row_group` > 1, hold whole groups of that many rows (the QKV weight's heads, whose rows the
// writer reorders within a head); else one row each. Refuses parts of different dtypes.
Param concat_params(const Graph& g, const std::vector<std::string>& names,
                    const std::string& fused_name, std::int64_t row_group);

// The scale blocks of e4m3 parameter `p` (the whole, with the whole's blocks) once split by
// `shard`, the same on every rank, such that each of a rank's scale blocks lies inside one block of
// the whole: its scales are then the whole's scales of its elements, and every rank's dequantized
// part equals that part of the whole's. Where every rank's ranges start and end on block
// boundaries along the split dimension, the whole's blocks (a rank gets the blocks its ranges
// cover); else, for a row split, blocks of one row; for a column split, the rank's columns as one
// block where each rank's columns lie inside one block of the whole, else the largest block that
// divides the whole's block and every rank's column bounds, which the e4m3 kernels take only as a
// multiple of 64 columns (kernels/gemm_e4m3.cuh). Refuses a column split no block fits, naming the
// weight, its block and the rank's columns.
ParamScale shard_scale(const Param& p, const ParamShard& shard);

// W8A8 (docs/fp8.md): a linear whose weight is e4m3 in 128 x 128 scale blocks (the hub's `fp8`
// format and `--quantize fp8`) runs on e4m3 activations too, quantized per token and 128 columns
// (executor/w8a8_reference.hpp), the attribute `activations = "e4m3"` saying so. Empty where weight
// `w` of a linear with epilogue `epilogue` takes it; else why not: another dtype or scale layout,
// columns not a multiple of 16 (the quantized rows' TMA), or SwiGLU halves not a multiple of 64
// rows (a weight tile's gate and up rows inside one scale block).
std::string w8a8_refusal(const Param& w, const std::string& epilogue);

// The printed form (see the top of this file).
std::string print_graph(const Graph& graph);
std::string print_op(const Op& op);

}  // namespace telos::compiler::ir
