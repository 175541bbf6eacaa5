#pragma once
// The CPU reference engine's op set. For each op kind of the manifest's graph (docs/artifact.md,
// "graph"), one binding function: when the artifact loads it reads an op's operands, parameters
// and attributes through CpuOpBinding (cpu_op_binding.hpp), refusing what it cannot compute, and
// returns the op's arithmetic for a step, plain f32 C++ over the step's tokens. Every value is f32
// here whatever dtype the IR gives it: the engine is the fp32 ground truth of the kernels. A new
// op is one entry in the table, beside its IR rule (compiler/ir/verifier.hpp) and its kernel.
#include <functional>
#include <map>
#include <string>

#include "executor/cpu_op_binding.hpp"

namespace telos::exec {

using CpuOpBinder = CpuOpRun (*)(const CpuOpBinding&);
using CpuOpTable = std::map<std::string, CpuOpBinder, std::less<>>;

// The ops of the graphs telosc writes: embed, rmsnorm, linear (plain with an optional bias, and
// the residual, swiglu, rope_kv_append and partial epilogues), paged_attention, lm_head_sample,
// and a tensor-parallel graph's all_reduce (a sum over the simulated ranks).
const CpuOpTable& cpu_reference_ops();

}  // namespace telos::exec
