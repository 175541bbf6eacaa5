#pragma once
// Writes an artifact directory exactly as docs/artifact.md describes.
//
// Atomic: everything is written into a hidden staging directory beside the destination and
// renamed into place only when complete (an earlier artifact is swapped out in one rename and then
// removed; staging_dir.hpp says what telosc replaces and removes). On any error, nothing is left
// behind. The manifest is validated as telos-run validates it (support/artifact_format.hpp) before
// anything is renamed: whatever telosc writes, telos-run reads.
//
// Streaming: weights are packed tensor by tensor through a bounded buffer, and the checkpoint's
// pages are released behind the reader, so resident memory stays small for any model size.
#include <csignal>
#include <string>
#include <vector>

#include "codegen/codegen.hpp"
#include "codegen/codegen_input.hpp"
#include "compiler/import/checkpoint.hpp"
#include "compiler/ir/graph.hpp"
#include "compiler/plan/memory_plan.hpp"
#include "compiler/plan/serving_config.hpp"

namespace telos::compiler {

inline const char* kGenerator = "telosc 0.1.0";

struct ArtifactOptions {
  bool progress = false;  // a progress bar on stderr while packing weights
  // Polled while packing: when it becomes non-zero the write stops with an error (and cleans up).
  const volatile std::sig_atomic_t* cancel = nullptr;
};

// What codegen takes from the serving config and the KV cache's geometry (the model reaches it as
// the optimized IR).
codegen::CodegenInput codegen_input(const ModelSpec& spec, const ServingConfig& serving);

// Refuses (naming `source`, the model the user gave, and the manifest field) a model and serving
// configuration whose manifest telos-run would refuse: the checks of support/artifact_format.hpp
// on the model, serving and kv_cache sections, before anything is compiled or written.
void validate_configuration(const std::string& source, const ModelSpec& spec,
                            const ServingConfig& serving);

// One target's kernels in the artifact: the arena of its lowered programs (plan_arena) and
// codegen's output for it (compiled.arch names the target; empty: an artifact without kernels).
struct TargetKernelSet {
  ArenaPlan plan;
  codegen::GeneratedKernels kernels;
};

// Writes the artifact of the stages before it: `graph`, the optimized IR (ir.txt; its parameters,
// in order, are the weights packed into weights.bin), and `sets`, one kernel set a target of
// `serving` in its order (docs/artifact.md, "Kernels": the first set's plan, kernels and programs
// at the top level, every further one under "kernel_sets"). The manifest the writer is about to
// write is validated as telos-run validates it, so an IR whose parameters are not the weight table
// telos-run expects is refused, and nothing is left behind.
void write_artifact(const std::string& destination, const ImportedModel& model,
                    const ServingConfig& serving, const ir::Graph& graph,
                    const std::vector<TargetKernelSet>& sets, const ArtifactOptions& options);

}  // namespace telos::compiler
