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
    write_artifact((dir / "tiny.telos").string(), model, serving, graph,
                   {{plan, codegen::GeneratedKernels{}}}, ArtifactOptions{});
  } catch (const Error& e) {
    error = e.what();
  }
  EXPECT_NE(error.find("would be refused by telos-run"), std::string::npos) << error;
  EXPECT_NE(error.find("weights.tensors (layers.0.gate): not a tensor of the model"),
            std::string::npos)
      << error;
  EXPECT_TRUE(fs::is_empty(dir));
  fs::remove_all(dir);
}

// The writer packs each rank's part of a split parameter as the shard says, and refuses, naming
// the parameter, a part it cannot take from the checkpoint: rows past the checkpoint tensors', or
// columns in more than one range.
std::string write_error(const ir::Graph& graph, const ImportedModel& model,
                        const ServingConfig& serving, const fs::path& dir) {
  fs::remove_all(dir);
  fs::create_directories(dir);
  codegen::GeneratedKernels no_kernels;  // an empty kernel table: the CPU engine's artifact
  no_kernels.kernels = nlohmann::ordered_json::array();
  try {
    write_artifact((dir / "tiny.telos").string(), model, serving, graph,
                   {{ArenaPlan{}, no_kernels}}, ArtifactOptions{});
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(ArtifactWriter, RefusesARanksPartItCannotTakeFromTheCheckpoint) {
  const ImportedModel model = import_model(TELOS_SOURCE_DIR "/models/tiny-llama/model.json");
  const ServingConfig serving = resolve_serving(
      nlohmann::json{{"max_batch", 8}, {"kv_pool", {{"pages", 128}}}, {"tensor_parallel", 2}},
      model.spec, model.source);
  const auto sharded = [&] {
    ir::Graph g = ir::build_model_graph(model.spec);
    run_passes(g, fusion_pipeline(), nullptr);
    run_passes(g, {tensor_parallel_pass(2)}, nullptr);
    return g;
  };
  const fs::path dir = fs::path(::testing::TempDir()) / "artifact_writer_tp_test";
  EXPECT_EQ(write_error(sharded(), model, serving, dir), "");
  EXPECT_TRUE(fs::exists(dir / "tiny.telos" / "weights.rank1.bin"));

  ir::Graph past = sharded();
  past.find_param("layers.0.gate_up")->shard =
      ir::ParamShard{0, 1024, {{{0, 128}, {256, 384}}, {{512, 640}, {896, 1024}}}};
  EXPECT_EQ(write_error(past, model, serving, dir),
            "layers.0.gate_up: rows 512:640 run past the 512 rows of its checkpoint tensors");
  EXPECT_FALSE(fs::exists(dir / "tiny.telos"));

  ir::Graph columns = sharded();
  columns.find_param("layers.0.o")->shard =
      ir::ParamShard{1, 128, {{{0, 32}, {96, 128}}, {{32, 96}}}};
  EXPECT_EQ(write_error(columns, model, serving, dir),
            "layers.0.o: rank 0's columns are 2 ranges; the writer packs one range of columns");
  EXPECT_TRUE(fs::is_empty(dir));
  fs::remove_all(dir);
}

}  // namespace
}  // namespace telos::compiler
