#pragma once
// The lowering table: how each op of the optimized Telos IR becomes kernel instances and their
// launches. A rule is found by the op (its kind and, for a linear, its epilogue), its dtype, the
// bucket's shape class and the target; in one-token decode buckets a layer's ops lower together
// (`layer`). plan_kernels walks the IR once a bucket and applies each op's rule; the heuristics the
// rules consult (tiles, splits, folds) are named in kernel_plan.hpp.
#include <string>
#include <vector>

#include "codegen/codegen_input.hpp"
#include "codegen/kernel_plan.hpp"
#include "compiler/ir/graph.hpp"

namespace telos::codegen {

class BucketLowering;  // one bucket's kernels and launches, as the rules add them (lowering.cpp)
using LowerFn = void (*)(BucketLowering& bucket, const std::vector<const compiler::ir::Op*>& ops);

struct LoweringRule {
  const char* name;      // "linear.residual"
  const char* op;        // the IR op kind, or "layer": the ops of one layers.N together
  const char* epilogue;  // a linear's epilogue; "" for every other op
  DType dtype;           // of the op's weight matrix, or its result where it has none
  unsigned shapes;       // the shape classes it lowers: bit ShapeClass
  const char* target;    // "sm_90a" or "sm_100a"
  const char* kernels;   // the kernel templates it instantiates, for people (--emit=lowering)
  LowerFn lower;
  bool w8a8 = false;  // linears with activations = "e4m3" (the W8A8 pass), else without
};

// Every rule, in the table's order.
const std::vector<LoweringRule>& lowering_table();

// The rule for `ops` (one op, or a layer's ops with `layer` set) in buckets of `shape` for
// `target`. Throws telos::Error naming the op (its printed IR) and what was looked up when there is
// none, and naming the target when only the target has none.
const LoweringRule& find_lowering_rule(const compiler::ir::Graph& graph,
                                       const std::vector<const compiler::ir::Op*>& ops, bool layer,
                                       ShapeClass shape, const std::string& target);

// The kernel instances `graph` (the fully fused IR) needs on `target` for the serving config `in`
// and every bucket's launches: the target's kernel set. Throws telos::Error naming the field when
// the model is outside what the kernels support, naming the op when an op has no rule, and naming
// the target when the table has no rules for it.
KernelPlan plan_kernels(const compiler::ir::Graph& graph, const CodegenInput& in,
                        const std::string& target);
// The same for the one target of in.targets (throws when there are several).
KernelPlan plan_kernels(const compiler::ir::Graph& graph, const CodegenInput& in);
// One kernel set a target of in.targets, in its order.
std::vector<KernelPlan> plan_kernel_sets(const compiler::ir::Graph& graph, const CodegenInput& in);

// `telosc compile --emit=lowering`: every bucket's ops, the rule each took and the launches (and
// kernels declared) it made.
std::string print_lowering(const KernelPlan& plan);

}  // namespace telos::codegen
