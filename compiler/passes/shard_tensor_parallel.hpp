#pragma once
// The tensor-parallel pass: the fused graph becomes the graph each of N ranks runs, every rank the
// same ops on the same shapes, each on its own part of the split parameters (docs/multi-gpu.md).
#include "compiler/ir/graph.hpp"

namespace telos::compiler {

// Splits the fused graph (after the fusion pipeline) over `ranks` ranks (2, 4 or 8):
// - QKV column-parallel by heads: each rank's @layers.N.qkv (and qkv_bias) holds its query heads'
//   rows and its KV heads' rows of k and v; the rope_kv_append linear and paged_attention see the
//   rank's heads. With fewer KV heads than ranks, the ranks whose query heads read a KV head each
//   hold that head (support/tensor_parallel.hpp), and each rank's KV cache holds its own KV heads.
// - gate/up column-parallel: each rank's @layers.N.gate_up holds its gate rows and its up rows.
// - o and down row-parallel: each rank's weight holds the columns its activations cover; the
//   linear becomes one of the partial epilogue, the rank's f32 partial product, and an all_reduce
//   adds the partials of every rank, in rank order, to the residual once: the residual stream has
//   the same bits on every rank, so every rank's next RMSNorm, and its logits, are the same.
// - embedding, norms and LM head replicated: every rank holds them whole. A vocabulary-parallel
//   head would save each rank (1 - 1/N) of the head's bytes a step but needs a collective of the
//   logits (or of each rank's best candidates) before sampling, and an all-reduce after the
//   embedding; replicated, the logits are whole on every rank and sampling stays one rank's.
// Throws telos::Error naming the op when the graph is not in the fused form, and the reason when
// the model's heads or intermediate rows do not split evenly (support/tensor_parallel.hpp).
void shard_tensor_parallel(ir::Graph& graph, int ranks);

}  // namespace telos::compiler
