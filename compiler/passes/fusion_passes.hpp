#pragma once
// The fusion passes (each in its own file). Each rewrites every occurrence of its pattern and
// leaves the rest of the graph untouched; the ops they produce are listed in ir/verifier.hpp.
#include "compiler/ir/graph.hpp"

namespace telos::compiler {

// linear(@layers.N.q), linear(@layers.N.k), linear(@layers.N.v) on the same input become one
// linear on @layers.N.qkv (and @layers.N.qkv_bias) followed by three slices: one GEMM reads the
// normalized activations once instead of three times.
void fuse_qkv(ir::Graph& graph);

// slice/[head_rmsnorm]/rope/attention after the QKV linear fold into that linear's epilogue
// (QK norm, RoPE, KV-page append) plus paged_attention: q, k and v never round-trip through
// memory between the GEMM and the cache.
void fuse_rope_kv_append(ir::Graph& graph);

// linear(@gate), linear(@up), swiglu become one linear on @layers.N.gate_up with a SwiGLU
// epilogue: the [T, 2I] intermediate is never stored.
void fuse_gate_up_swiglu(ir::Graph& graph);

// add(residual, linear(x, @w)) becomes linear {epilogue = "residual"}: the GEMM adds the residual
// as it stores, so the branch output is never written and read back.
void fuse_residual_epilogue(ir::Graph& graph);

// rmsnorm(add(a, b)) becomes add_rmsnorm producing both the sum (the next residual) and the
// normalized value, in one pass over the row.
void fuse_add_rmsnorm(ir::Graph& graph);

// sample(lm_head(x)) becomes lm_head_sample: logits ([S, V] f32) are reduced as they are produced.
void fuse_lm_head_sample(ir::Graph& graph);

}  // namespace telos::compiler
