#pragma once
// Writes an artifact directory exactly as docs/artifact.md describes (schema_version 1).
//
// Atomic: everything is written into a hidden temporary directory beside the destination and
// renamed into place only when complete (an existing artifact is swapped out in one rename and
// then removed). On any error, nothing is left behind.
//
// Streaming: weights are packed tensor by tensor through a bounded buffer, and the checkpoint's
// pages are released behind the reader, so resident memory stays small for any model size.
#include <csignal>
#include <string>

#include "codegen/codegen_input.hpp"
#include "compiler/import/checkpoint.hpp"
#include "compiler/ir/graph.hpp"
#include "compiler/plan/bucket_plan.hpp"
#include "compiler/plan/serving_config.hpp"

namespace telos::compiler {

constexpr int kSchemaVersion = 1;
constexpr std::int64_t kWeightAlignment = 256;
inline const char* kGenerator = "telosc 0.1.0";

struct ArtifactOptions {
  bool progress = false;  // a progress bar on stderr while packing weights
  // Polled while packing: when it becomes non-zero the write stops with an error (and cleans up).
  const volatile std::sig_atomic_t* cancel = nullptr;
};

// What codegen needs of the model and the serving config (codegen includes no compiler header).
codegen::CodegenInput codegen_input(const ModelSpec& spec, const ServingConfig& serving);

// `graph` must be the fully fused IR (its parameters equal docs/artifact.md's weight table).
void write_artifact(const std::string& destination, const ImportedModel& model,
                    const ServingConfig& serving, const ir::Graph& graph, const Plan& plan,
                    const ArtifactOptions& options);

}  // namespace telos::compiler
