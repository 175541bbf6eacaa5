#pragma once
// The W8A8 pass: every linear, and the LM head, whose weight takes e4m3 activations
// (ir::w8a8_refusal empty: e4m3 in 128 x 128 scale blocks) gets `activations = "e4m3"`, so that
// both engines, the GPU kernels lowered from the IR and the CPU reference engine reading the
// artifact's graph, quantize its input the same way (docs/fp8.md, "W8A8"). It runs last, after the
// tensor-parallel split, which may change a weight's scale blocks. Other linears keep bf16
// activations (weight-only FP8 for the per-channel and per-tensor formats).
#include "compiler/ir/graph.hpp"

namespace telos::compiler {

void mark_w8a8_activations(ir::Graph& graph);

}  // namespace telos::compiler
