#pragma once
// Prints a KernelPlan as CUDA C++: the kernel headers, the model's RoPE table, and the list of
// instances (NVRTC instantiates each through its name expression).
#include <string>

#include "codegen/kernel_plan.hpp"

namespace telos::codegen {

std::string emit_source(const KernelPlan& plan);

}  // namespace telos::codegen
