#pragma once
// The Telos IR verifier, and the op set it knows. H hidden size, I intermediate size, V vocab,
// Hq/Hkv query/KV heads, D head dim; T/S the step's tokens/sequences. Activations are bf16,
// matrices bf16 [out, in], vectors (norm weights, biases) f32.
//
// Ops the importer produces:
//   embed(%tokens: i32[T], @embed: [V,H])                      -> bf16[T,H]
//   rmsnorm(%x: [T,H], @w: f32[H]) {eps}                         -> bf16[T,H]
//   linear(%x: [T,K], @w: [M,K] [, @bias: f32[M]])               -> bf16[T,M]
//   slice(%x: [T,N]) {begin, end}                                -> bf16[T,end-begin]
//   head_rmsnorm(%x: [T,n*D], @w: f32[D]) {heads, head_dim, eps}  (Qwen3 QK norm, per head)
//   rope(%x: [T,n*D], %positions: i32[T]) {heads, head_dim, theta, scaling, ...}
//   attention(%q: [T,Hq*D], %k: [T,Hkv*D], %v: [T,Hkv*D]) {layer, heads, kv_heads, head_dim}
//       appends k and v to the layer's KV pages at the step's positions, then causal GQA
//       attention over each sequence's pages, scale 1/sqrt(D)   -> bf16[T,Hq*D]
//   swiglu(%gate: [T,I], %up: [T,I])                             -> bf16[T,I]
//   add(%a, %b)                                                  -> same type
//   lm_head(%x: [T,H], @w: [V,H])  the last token of each sequence -> f32[S,V]
//   sample(%logits: f32[S,V])  per-sequence sampling params from the step descriptor -> i32[S]
//
// Fused forms the passes produce:
//   add_rmsnorm(%a, %b, @w: f32[H]) {eps}                   -> bf16[T,H] (a+b), bf16[T,H] (normed)
//   linear {epilogue = "residual"}(%x, %residual, @w)       -> residual + x·wᵀ
//   linear {epilogue = "swiglu"}(%x, @gate_up: [2I,H])      -> silu(g) * u, bf16[T,I]
//   linear {epilogue = "rope_kv_append", layer, heads, kv_heads, head_dim, rope attrs [, eps]}
//       (%x, %positions, @qkv [, @qkv_bias] [, @q_norm, @k_norm])
//       q/k/v = x·qkvᵀ (+ bias); QK norm when the norms are given; RoPE on q and k; k and v
//       appended to the layer's KV pages                   -> q, bf16[T,Hq*D]
//   paged_attention(%q) {layer, heads, kv_heads, head_dim}  attention over pages already appended
//   lm_head_sample(%x: [T,H], @w: [V,H])                    -> i32[S], logits never stored
//
// Tensor parallelism (the shard pass, for a graph of `ranks` > 1; parameters then carry the rows
// or columns each rank packs, graph.hpp's ParamShard):
//   linear {epilogue = "partial"}(%x: [T,K], @w: [M,K])     -> f32[T,M], a rank's partial product
//   all_reduce(%partial: f32[T,H], %residual: [T,H]) {ranks, epilogue = "residual"}
//       residual + the sum of every rank's partial, in rank order: the same bits on every rank
//                                                           -> bf16[T,H]
//
// W8A8 (the last pass, for weights graph.hpp's w8a8_refusal accepts): any linear, lm_head or
// lm_head_sample may carry activations = "e4m3": its input quantized per token and 128 columns
// before the product.
#include <functional>
#include <map>
#include <string>

#include "compiler/ir/graph.hpp"

namespace telos::compiler::ir {

// The rule of an op kind beyond the set above (a test's own op): throws telos::Error when `op` is
// malformed. verify() has already checked its operands' dominance and its parameters' existence.
using OpRule = std::function<void(const Graph& graph, const Op& op)>;
using OpRules = std::map<std::string, OpRule, std::less<>>;

// Checks every op's operand, parameter and result types and shapes, attributes, SSA dominance
// (operands defined by an earlier op or a graph input), unknown parameters and graph outputs;
// then the parameters themselves, which the artifact writer packs as they are: each a bf16 matrix
// or an f32 vector of constant dimensions, with checkpoint sources, read by some op. An op kind
// outside the set above is checked by its rule in `extra_rules`.
// Throws telos::Error "IR verifier: op N (%result = kind): what is wrong" ("IR verifier:
// parameter @NAME ..." for a parameter).
void verify(const Graph& graph, const OpRules& extra_rules = {});

}  // namespace telos::compiler::ir
