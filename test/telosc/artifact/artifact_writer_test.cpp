// Unit tests of the artifact writer (compiler/artifact) on the bundled tiny model: it packs the
// IR's parameters as they are, and what telos-run would refuse it refuses before anything is
// renamed into place, leaving nothing behind.
#include "compiler/artifact/artifact_writer.hpp"

#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "compiler/ir/model_graph.hpp"
#include "compiler/passes/pass_manager.hpp"
#include "support/error.hpp"

namespace telos::compiler {
namespace {
namespace fs = std::filesystem;

// An IR whose parameters are not the weight table telos-run expects (gate and up left apart, so
// two tensors a layer where it reads one) is refused by the manifest's validation, and neither
// the artifact nor its staging directory is left.
TEST(ArtifactWriter, RefusesAnIrWhoseParametersAreNotTheWeightTable) {
  const ImportedModel model = import_model(TELOS_SOURCE_DIR "/models/tiny-llama/model.json");
  const ServingConfig serving = resolve_serving(model.serving, model.spec, model.source);
  ir::Graph graph = ir::build_model_graph(model.spec);
  run_passes(graph,
             select_passes("fuse-qkv,fuse-rope-kv-append,fuse-residual-epilogue,fuse-add-rmsnorm,"
                           "fuse-lm-head-sample"),
             nullptr);
  const ArenaPlan plan;  // without kernels the manifest has no arena to check

  const fs::path dir = fs::path(::testing::TempDir()) / "artifact_writer_test";
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::string error;
  try {
    write_artifact((dir / "tiny.telos").string(), model, serving, graph, plan,
                   codegen::GeneratedKernels{}, ArtifactOptions{});
  } catch (const Error& e) {
    error = e.what();
  }
  EXPECT_NE(error.find("would be refused by telos-run"), std::string::npos) << error;
  EXPECT_NE(error.find("weights.tensors: 16 tensors, but the model has 14"), std::string::npos)
      << error;
  EXPECT_TRUE(fs::is_empty(dir));
  fs::remove_all(dir);
}

}  // namespace
}  // namespace telos::compiler
