#include "executor/artifact.hpp"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>

#include "executor/cpu_reference_model.hpp"
#include "support/error.hpp"
#include "test/executor/tiny_artifact.hpp"

namespace telos::exec {
namespace {

namespace fs = std::filesystem;
using testing::TinyArtifactSpec;

// Loads `dir` expecting a refusal whose message contains every one of `parts`.
void expect_refused(const std::string& dir, std::initializer_list<std::string> parts,
                    WeightChecks checks = WeightChecks::kEveryTensor) {
  try {
    Artifact::load(dir, checks);
    FAIL() << "expected " << dir << " to be refused";
  } catch (const Error& e) {
    for (const std::string& p : parts)
      EXPECT_NE(std::string(e.what()).find(p), std::string::npos)
          << "message: " << e.what() << "\nmissing: " << p;
  }
}

TEST(Artifact, LoadsAHandWrittenArtifact) {
  const std::string dir = testing::temp_dir("ok");
  TinyArtifactSpec spec;
  spec.family = "qwen3";
  spec.qk_norm = true;
  spec.tie_word_embeddings = false;
  testing::write_tiny_artifact(dir, spec);
  auto a = Artifact::load(dir);
  EXPECT_EQ(a->model().family, "qwen3");
  EXPECT_TRUE(a->model().qk_norm);
  EXPECT_EQ(a->serving().max_batch, 4);
  EXPECT_EQ(a->serving().kv_pool_pages, 64);
  EXPECT_EQ(a->tensor("lm_head").shape, (std::vector<std::int64_t>{64, 32}));
  EXPECT_EQ(a->tensor("layers.1.q_norm").dtype, DType::F32);
  EXPECT_FALSE(a->has_kernels());
  EXPECT_THROW(a->tensor("nope"), Error);
}

TEST(Artifact, RefusesANewerSchema) {
  const std::string dir = testing::temp_dir("schema");
  auto m = testing::write_tiny_artifact(dir, {});
  m["schema_version"] = 999;
  m["model"] = "a future layout this reader must not try to read";
  testing::rewrite_manifest(dir, m);
  expect_refused(dir, {"manifest.json", "schema_version", "999 is newer", "(1)"});
}

TEST(Artifact, RefusesATruncatedWeightsFile) {
  const std::string dir = testing::temp_dir("truncated");
  testing::write_tiny_artifact(dir, {});
  const fs::path weights = fs::path(dir) / "weights.bin";
  const auto size = fs::file_size(weights);
  fs::resize_file(weights, size - 100);
  expect_refused(dir, {"weights.bin", std::to_string(size - 100) + " bytes",
                       "weights.size says " + std::to_string(size), "truncated"});
}

TEST(Artifact, RefusesAMissingWeightsFile) {
  const std::string dir = testing::temp_dir("missing");
  testing::write_tiny_artifact(dir, {});
  fs::remove(fs::path(dir) / "weights.bin");
  expect_refused(dir, {"weights.bin: missing"});
}

// Overwrites one byte of `dir`/weights.bin at `offset`.
void change_weight_byte(const std::string& dir, std::int64_t offset) {
  std::fstream f(fs::path(dir) / "weights.bin", std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(offset);
  const char was = static_cast<char>(f.get());
  f.seekp(offset);
  f.put(static_cast<char>(was ^ 0x5a));
}

TEST(Artifact, RefusesAChangedByteNamingTheTensorOrWithEveryByteTheFile) {
  const std::string dir = testing::temp_dir("flipped");
  testing::write_tiny_artifact(dir, {});
  change_weight_byte(dir, 300);  // in `embed`, the first tensor
  expect_refused(dir, {"weights.bin: tensor embed (offset 0,", "checksum",
                       "weights.tensors[0] (embed).checksum"});
  expect_refused(dir, {"weights.bin: checksum", "files.weights.bin"}, WeightChecks::kEveryByte);
}

// The alignment padding between tensors is no tensor's: a serving load, which hashes the tensors,
// takes a change there; a check of every byte does not.
TEST(Artifact, PaddingIsCheckedOnlyWithEveryByte) {
  const std::string dir = testing::temp_dir("padding");
  const auto m = testing::write_tiny_artifact(dir, {});
  std::int64_t padding = -1;
  for (const auto& t : m["weights"]["tensors"])
    if (t["bytes"].get<std::int64_t>() % 256 != 0) {
      padding = t["offset"].get<std::int64_t>() + t["bytes"].get<std::int64_t>();
      break;
    }
  ASSERT_GE(padding, 0) << "the tiny artifact has no padding between tensors";
  change_weight_byte(dir, padding);
  EXPECT_NO_THROW(Artifact::load(dir));
  expect_refused(dir, {"weights.bin: checksum", "files.weights.bin"}, WeightChecks::kEveryByte);
}

// Every tensor's checksum is computed (on several threads); the first mismatch in manifest order
// is the one reported, whichever thread found it.
TEST(Artifact, ReportsTheFirstTensorThatDisagreesInManifestOrder) {
  const std::string dir = testing::temp_dir("two-sums");
  auto m = testing::write_tiny_artifact(dir, {});
  const std::size_t last = m["weights"]["tensors"].size() - 1;
  m["weights"]["tensors"][last]["checksum"] = "xxh64:0000000000000001";
  m["weights"]["tensors"][2]["checksum"] = "xxh64:0000000000000002";
  testing::rewrite_manifest(dir, m);
  expect_refused(dir, {"weights.tensors[2]", "xxh64:0000000000000002"});
}

TEST(Artifact, RefusesATensorWhoseChecksumDisagreesNamingTheTensor) {
  const std::string dir = testing::temp_dir("tensor-sum");
  auto m = testing::write_tiny_artifact(dir, {});
  m["weights"]["tensors"][1]["checksum"] = "xxh64:0000000000000000";
  testing::rewrite_manifest(dir, m);
  expect_refused(dir, {"tensor layers.0.attn_norm", "checksum", "xxh64:0000000000000000"});
}

TEST(Artifact, RefusesMissingAndMalformedFieldsByName) {
  const std::string dir = testing::temp_dir("fields");
  const auto good = testing::write_tiny_artifact(dir, {});
  auto m = good;
  m["model"].erase("num_kv_heads");
  testing::rewrite_manifest(dir, m);
  expect_refused(dir, {"manifest.json: model.num_kv_heads: missing"});

  m = good;
  m["serving"]["max_batch"] = "eight";
  testing::rewrite_manifest(dir, m);
  expect_refused(dir, {"serving.max_batch: expected an integer"});

  m = good;
  m["model"]["sliding_window"] = 4096;
  testing::rewrite_manifest(dir, m);
  expect_refused(dir, {"model.sliding_window", "not supported"});

  m = good;
  m["kv_cache"]["bytes_per_page"] = 12;
  testing::rewrite_manifest(dir, m);
  expect_refused(dir, {"kv_cache.bytes_per_page"});

  m = good;
  m["weights"]["tensors"][0]["shape"] = {64, 31};
  testing::rewrite_manifest(dir, m);
  expect_refused(dir, {"(embed).bytes", "[64, 31]"});

  // Layouts: qkv_rope_pairs only for a layer's QKV projection; nothing unknown.
  m = good;
  m["weights"]["tensors"][0]["layout"] = "qkv_rope_pairs";
  testing::rewrite_manifest(dir, m);
  expect_refused(dir, {"(embed).layout", "\"qkv_rope_pairs\" is not row_major"});
  m = good;
  m["weights"]["tensors"][0]["layout"] = "column_major";
  testing::rewrite_manifest(dir, m);
  expect_refused(dir, {"(embed).layout", "\"column_major\""});

  m = good;
  m["weights"]["tensors"].erase(m["weights"]["tensors"].size() - 1);  // final_norm
  testing::rewrite_manifest(dir, m);
  expect_refused(dir, {"no tensor \"final_norm\""});

  // Sizes chosen to overflow 64-bit arithmetic must be refused, not wrap around.
  m = good;
  m["weights"]["tensors"][0]["offset"] = std::int64_t{1} << 62;
  m["weights"]["tensors"][0]["bytes"] = (std::int64_t{1} << 62) + 1;
  testing::rewrite_manifest(dir, m);
  expect_refused(dir, {"(embed).bytes"});
  m = good;
  m["weights"]["tensors"][0]["offset"] = std::int64_t{1} << 62;
  testing::rewrite_manifest(dir, m);
  expect_refused(dir, {"(embed).offset", "runs past the end of weights.bin"});
  m = good;
  m["weights"]["tensors"][0]["shape"] = {std::int64_t{1} << 40, std::int64_t{1} << 40};
  testing::rewrite_manifest(dir, m);
  expect_refused(dir, {"(embed).shape", "is larger than weights.bin"});

  std::ofstream(fs::path(dir) / "manifest.json") << "{ not json";
  expect_refused(dir, {"manifest.json: not valid JSON"});
}

// `parse` (a launch argument's parser) refuses `arg` with an error naming where it stands and why.
template <class Parse>
void expect_parse_refused(Parse parse, const std::string& arg, const std::string& why) {
  try {
    parse(arg, "programs.buckets[0].launches[1].args[0]");
    ADD_FAILURE() << arg << " was accepted";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("programs.buckets[0].launches[1].args[0]: " + arg), std::string::npos)
        << msg;
    EXPECT_NE(msg.find(why), std::string::npos) << msg;
  }
}

TEST(Artifact, ParsesTensorMapArguments) {
  const TensorMapArg t = parse_tensor_map_arg("tmap:w:layers.0.o:4096:4096:256:64", "here");
  EXPECT_EQ(t.target, "w:layers.0.o");
  EXPECT_EQ(t.rows, 4096);
  EXPECT_EQ(t.cols, 4096);
  EXPECT_EQ(t.box_rows, 256);
  EXPECT_EQ(t.box_cols, 64);
  EXPECT_EQ(t.elem_bytes, 2);
  EXPECT_EQ(parse_tensor_map_arg("tmap:buf:act:200:14336:64:64", "here").target, "buf:act");
  // 32-column boxes are f32 (the residual stream x, reduced into by the prefill GEMM).
  const TensorMapArg x = parse_tensor_map_arg("tmap:buf:x:4096:4096:64:32", "here");
  EXPECT_EQ(x.box_cols, 32);
  EXPECT_EQ(x.elem_bytes, 4);
  auto refused = [](const std::string& arg, const std::string& why) {
    expect_parse_refused(parse_tensor_map_arg, arg, why);
  };
  refused("tmap:w:128:128:128", "too few fields");
  EXPECT_EQ(parse_tensor_map_arg("tmap:kv:3:8192:128:16:64", "here").target, "kv:3");
  refused("tmap:kvx:0:128:128:128:64", "must be w:NAME, buf:NAME or kv:L");
  refused("tmap:kv::128:128:128:64", "names nothing");
  refused("tmap:buf::128:128:128:64", "names nothing");
  refused("tmap:w:o:128:12x:128:64", "\"12x\" is not a positive integer");
  refused("tmap:w:o:0:128:128:64", "positive");
  refused("tmap:w:o:128:100:128:64", "multiple of 8");
  refused("tmap:w:o:128:128:512:64", "BOX_ROWS");
  refused("tmap:w:o:128:128:128:16", "BOX_COLS must be 64 (bf16), 32 (f32) or 128 (bytes)");
  refused("tmap:w:o:128:128:128:256", "BOX_COLS must be 64 (bf16), 32 (f32) or 128 (bytes)");
  const TensorMapArg bytes = parse_tensor_map_arg("tmap:buf:aq:128:256:128:128", "here");
  EXPECT_EQ(bytes.elem_bytes, 1);
  EXPECT_TRUE(bytes.swizzle);
}

// wimg:NAME:BN:HALVES, a weight's slot image (the persistent decode layer's bulk copies).
TEST(Artifact, ParsesSlotImageArguments) {
  const WeightImageArg g = parse_weight_image_arg("wimg:layers.0.gate_up:64:2", "here");
  EXPECT_EQ(g.weight, "layers.0.gate_up");
  EXPECT_EQ(g.bn, 64);
  EXPECT_EQ(g.halves, 2);
  EXPECT_EQ(parse_weight_image_arg("wimg:layers.3.o:16:1", "here").bn, 16);
  auto refused = [](const std::string& arg, const std::string& why) {
    expect_parse_refused(parse_weight_image_arg, arg, why);
  };
  refused("wimg:o:32", "too few fields");
  refused("wimg::32:1", "names nothing");
  refused("wimg:o:3x:1", "\"3x\" is not a positive integer");
  refused("wimg:o:32:", "\"\" is not a positive integer");
  refused("wimg:o:0:1", "positive");
  refused("wimg:o:-8:1", "\"-8\" is not a positive integer");
  // The map over an image (`timg:`): the image's fields, then the box rows; its key names the
  // image.
  const WeightImageArg t = parse_weight_image_arg("timg:layers.0.gate_up:64:2:128", "here");
  EXPECT_EQ(t.weight, "layers.0.gate_up");
  EXPECT_EQ(t.bn, 64);
  EXPECT_EQ(t.halves, 2);
  EXPECT_EQ(t.box_rows, 128);
  EXPECT_EQ(t.key(), "wimg:layers.0.gate_up:64:2");
  EXPECT_EQ(g.box_rows, 0);
  refused("timg:o:32:1", "too few fields");
  refused("timg:o:32:1:0", "positive");
  refused("timg:o:32:1:x", "\"x\" is not a positive integer");
  refused("timg::32:1:32", "names nothing");
}

// What a weight allows is checked at load, naming the argument: the weight exists, is a bf16
// matrix, and divides into the image's tiles and slots (support/slot_image.hpp).
// `m` with a kernel table of one kernel and a launch program of one bucket, whose one launch
// passes `args` and then host:sampled (every bucket's tokens reach the host), over an arena of the
// buffers `arena` ({buffer, bytes}) one after another (the tiny artifact's default serving limits).
nlohmann::json with_program(nlohmann::json m, nlohmann::json args, const nlohmann::json& arena) {
  m["kernels"] = {{{"entry", "k"}, {"block", {128, 1, 1}}, {"dynamic_smem", 0}}};
  nlohmann::json buffers = nlohmann::json::array();
  std::int64_t at = 0;
  for (const auto& b : arena) {
    buffers.push_back({{"buffer", b["buffer"]}, {"offset", at}, {"bytes", b["bytes"]}});
    at += (b["bytes"].get<std::int64_t>() + 255) / 256 * 256;
  }
  m["plan"] = {{"arena", {{"alignment", 256}, {"bytes", at}, {"buffers", buffers}}}};
  args.push_back("host:sampled");
  m["programs"] = {{"descriptor", {{"max_tokens", 16}, {"max_sample_rows", 4}}},
                   {"buckets",
                    {{{"kind", "prefill"},
                      {"size", 16},
                      {"tokens", 16},
                      {"sample_rows", 4},
                      {"launches", {{{"kernel", 0}, {"grid", {1, 1, 1}}, {"args", args}}}}}}}};
  return m;
}

TEST(Artifact, RefusesSlotImagesTheWeightCannotHave) {
  const std::string dir = testing::temp_dir("wimg");
  testing::TinyArtifactSpec spec;
  spec.hidden_size = 64;  // embed [64, 64], gate_up [96, 64], down [64, 48]
  auto m = testing::write_tiny_artifact(dir, spec);
  auto with_arg = [&](const std::string& arg) {
    testing::rewrite_manifest(dir, with_program(m, {arg}, nlohmann::json::array()));
  };
  with_arg("wimg:embed:64:1");  // one tile of 64 rows, one K block a slot
  EXPECT_NO_THROW(Artifact::load(dir));
  with_arg("wimg:layers.0.gate_up:16:2");  // 6 tiles of 8 + 8 rows, four K blocks a slot: 64 < 256
  expect_refused(dir, {"programs.buckets[0].launches[0].args[0]", "cols must be whole slots of 4"});
  with_arg("wimg:layers.0.gate_up:64:2");  // 96 rows: not whole tiles of 64
  expect_refused(dir, {"rows must be whole tiles of 64"});
  with_arg("wimg:embed:24:2");
  expect_refused(dir, {"tile rows must be a multiple of 16"});
  with_arg("wimg:embed:64:3");
  expect_refused(dir, {"halves must be 1 or 2"});
  with_arg("wimg:nope:64:1");
  expect_refused(dir, {"no weight tensor \"nope\""});
  with_arg("wimg:final_norm:64:1");
  expect_refused(dir, {"a slot image is of a bf16 matrix"});
  // A map over an image: the image's checks, then its boxes (whole 8-row groups in one tile, or
  // whole tiles).
  with_arg("timg:embed:64:1:256");
  EXPECT_NO_THROW(Artifact::load(dir));
  with_arg("timg:embed:64:1:16");
  EXPECT_NO_THROW(Artifact::load(dir));
  with_arg("timg:layers.0.gate_up:64:2:32");
  expect_refused(dir, {"rows must be whole tiles of 64"});
  with_arg("timg:embed:64:1:12");
  expect_refused(dir, {"programs.buckets[0].launches[0].args[0]", "a positive multiple of 8"});
  with_arg("timg:embed:64:1:24");
  expect_refused(dir, {"divide a tile's 64 rows"});
  with_arg("timg:embed:64:1:72");  // 72 rows are neither in one tile of 64 nor whole tiles
  expect_refused(dir, {"divide a tile's 64 rows"});
}

TEST(Artifact, RefusesTensorMapsOverMemoryTheyDoNotFit) {
  const std::string dir = testing::temp_dir("tmap");
  auto m = testing::write_tiny_artifact(dir, {});
  auto with_arg = [&](const std::string& arg) {
    testing::rewrite_manifest(
        dir, with_program(m, {"buf:h", arg}, {{{"buffer", "h"}, {"bytes", 4096}}}));
  };
  with_arg("tmap:buf:h:16:64:16:64");  // 2048 bytes of 4096
  EXPECT_NO_THROW(Artifact::load(dir));
  with_arg("tmap:buf:h:64:64:64:64");
  expect_refused(dir,
                 {"programs.buckets[0].launches[0].args[1]", "spans 8192 bytes", "buf:h has 4096"});
  with_arg("tmap:buf:hh:16:64:16:64");
  expect_refused(dir, {"programs.buckets[0].launches[0].args[1]", "no arena buffer \"hh\""});
  with_arg("tmap:w:nope:16:64:16:64");
  expect_refused(dir, {"no weight tensor \"nope\""});
  with_arg("tmap:w:embed:64:32:64:64");  // the whole bf16 [64, 32] embedding
  EXPECT_NO_THROW(Artifact::load(dir));
  with_arg("tmap:w:final_norm:16:64:16:64");
  expect_refused(dir, {"tensor maps over weights are bf16 or e4m3, the weight is f32"});
  with_arg("tmap:w:embed:64:32:64:32");
  expect_refused(dir, {"a weight's map has BOX_COLS 64 (bf16 or e4m3 elements)"});
  // BOX_COLS 128 (bytes, swizzled) maps e4m3 weights only; over an arena buffer it counts bytes.
  with_arg("tmap:w:embed:64:32:64:128");
  expect_refused(dir, {"over an e4m3 weight, 128"});
  with_arg("tmap:buf:h:32:128:32:128");  // 4096 bytes: the whole buffer
  EXPECT_NO_THROW(Artifact::load(dir));
  with_arg("tmap:buf:h:16:64:16:16");
  expect_refused(dir,
                 {"programs.buckets[0].launches[0].args[1]", "BOX_COLS must be 64 (bf16), 32 (f32) or 128"});
  // An f32 map counts 4 bytes an element: [16, 64] f32 is the whole 4096-byte buffer, [32, 64] is
  // twice it.
  with_arg("tmap:buf:h:16:64:16:32");
  EXPECT_NO_THROW(Artifact::load(dir));
  with_arg("tmap:buf:h:32:64:16:32");
  expect_refused(dir, {"spans 8192 bytes", "buf:h has 4096"});
}

// A KV map (attn_prefill's K/V by TMA): layer L of the pool in rows of one position of one head,
// ROWS a page's rows, boxes of a page; the engine sizes it to the pool it allocates.
TEST(Artifact, ChecksKvTensorMaps) {
  const std::string dir = testing::temp_dir("tmap_kv");
  testing::TinyArtifactSpec spec;
  spec.hidden_size = 256, spec.num_heads = 4, spec.num_kv_heads = 2, spec.head_dim = 64;
  auto m = testing::write_tiny_artifact(dir, spec);  // pages of 4: 2 · 2 · 4 · 2 · 64 · 2 bytes
  auto with_arg = [&](const std::string& arg) {
    testing::rewrite_manifest(dir,
                              with_program(m, {"kv:1", arg}, {{{"buffer", "h"}, {"bytes", 4096}}}));
  };
  with_arg("tmap:kv:1:32:64:4:64");
  EXPECT_NO_THROW(Artifact::load(dir));
  with_arg("tmap:kv:2:32:64:4:64");
  expect_refused(
      dir, {"programs.buckets[0].launches[0].args[1]", "\"2\" is not a layer of the KV cache"});
  with_arg("tmap:kv:1x:32:64:4:64");
  expect_refused(dir, {"\"1x\" is not a layer of the KV cache"});
  with_arg("tmap:kv:1:16:128:4:64");
  expect_refused(dir, {"a KV map's rows are one position of one head (COLS 64"});
  with_arg("tmap:kv:1:32:64:4:32");
  expect_refused(dir, {"read in bf16 boxes of 64 columns"});
  with_arg("tmap:kv:1:64:64:4:64");
  expect_refused(dir, {"a KV map's ROWS are one page's (32) and its BOX_ROWS the page size (4)"});
  with_arg("tmap:kv:1:32:64:8:64");
  expect_refused(dir, {"a KV map's ROWS are one page's (32)"});
}

// Only a manifest marked as a Telos artifact's is read; one edited after it was written (a value
// that is valid, but not what telosc wrote) is refused by its checksum.
TEST(Artifact, RefusesAnUnmarkedOrEditedManifest) {
  const std::string dir = testing::temp_dir("marker");
  const auto good = testing::write_tiny_artifact(dir, {});
  auto m = good;
  m.erase("format");
  testing::rewrite_manifest(dir, m);
  expect_refused(dir, {"manifest.json: format: expected \"telos-artifact\"", "compile it again"});
  m = good;
  m["model"]["rms_norm_eps"] = 1e-3;
  testing::rewrite_manifest(dir, m, testing::Signing::kAsIs);
  expect_refused(
      dir, {"manifest.json: manifest_checksum: " + good["manifest_checksum"].get<std::string>() +
            " does not match the model, weights and graph sections"});
  m = good;
  m.erase("manifest_checksum");
  testing::rewrite_manifest(dir, m, testing::Signing::kAsIs);
  expect_refused(dir, {"manifest.json: manifest_checksum: missing"});
  // Re-signed, the same edit loads: the checksum, not the value, refused it.
  m = good;
  m["model"]["rms_norm_eps"] = 1e-3;
  testing::rewrite_manifest(dir, m);
  EXPECT_EQ(Artifact::load(dir)->model().rms_norm_eps, 1e-3);
}

// The graph section's own checks, each edit signed as telosc signs: a name defined twice, an
// attribute that is not a number or string, a dimension that is not T, S or a positive integer,
// a graph that returns nothing. What the CPU engine refuses at load beyond them: an input the step
// does not provide, other than one op that computes the logits.
TEST(Artifact, RefusesAMalformedGraph) {
  const std::string dir = testing::temp_dir("graph");
  const auto good = testing::write_tiny_artifact(dir, {});
  auto edited = [&](const std::function<void(nlohmann::json&)>& edit) {
    auto m = good;
    edit(m["graph"]);
    testing::rewrite_manifest(dir, m);
  };
  edited([](auto& g) { g["ops"][1]["results"][0]["name"] = "x"; });
  expect_refused(dir,
                 {"manifest.json: graph.ops[1] (rmsnorm).results[0].name: %x is defined twice"});
  edited([](auto& g) { g["ops"][1]["attrs"]["eps"] = true; });
  expect_refused(dir,
                 {"graph.ops[1] (rmsnorm).attrs.eps: expected an integer, a number or a string"});
  edited([](auto& g) { g["ops"][0]["results"][0]["shape"][0] = "B"; });
  expect_refused(
      dir, {"graph.ops[0] (embed).results[0].shape[0]: \"B\" is not \"T\", \"S\" or an integer"});
  edited([](auto& g) { g["ops"][0]["results"][0]["shape"][1] = 0; });
  expect_refused(dir, {"graph.ops[0] (embed).results[0].shape[1]: 0 is below 1"});
  edited([](auto& g) { g["outputs"] = nlohmann::json::array(); });
  expect_refused(dir, {"graph.outputs: expected at least one value"});

  auto engine_refuses = [&](const std::string& part) {
    try {
      CpuReferenceModel model(Artifact::load(dir));
      FAIL() << "expected the CPU engine to refuse the graph";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
    }
  };
  edited([](auto& g) {
    auto slots = g["inputs"][1];
    slots["name"] = "slots";
    g["inputs"].push_back(slots);
  });
  engine_refuses(
      "manifest.json: graph.inputs[2]: %slots is not an input the CPU reference engine "
      "provides (tokens, positions)");
  edited([](auto& g) {
    g["ops"].erase(g["ops"].size() - 1);
    g["outputs"] = {"final"};
  });
  engine_refuses("graph.ops: 0 ops compute the logits, expected one (lm_head_sample)");
  edited([](auto& g) {
    auto head = g["ops"].back();
    head["results"][0]["name"] = "again";
    g["ops"].push_back(head);
  });
  engine_refuses("graph.ops: 2 ops compute the logits, expected one (lm_head_sample)");
  edited([](auto&) {});
  CpuReferenceModel model(Artifact::load(dir));
}

// A checkpoint without a BOS token has null; token ids are within the vocabulary.
TEST(Artifact, TakesANullBosAndRefusesTokenIdsOutsideTheVocabulary) {
  const std::string dir = testing::temp_dir("bos");
  const auto good = testing::write_tiny_artifact(dir, {});
  auto m = good;
  m["model"]["bos_token_id"] = nullptr;
  m["model"]["eos_token_ids"] = nlohmann::json::array();
  testing::rewrite_manifest(dir, m);
  EXPECT_EQ(Artifact::load(dir)->model().bos_token_id, -1);
  m["model"]["bos_token_id"] = 64;
  testing::rewrite_manifest(dir, m);
  expect_refused(dir, {"model.bos_token_id: 64 is above 63"});
  m = good;
  m["model"]["eos_token_ids"] = {2, -1};
  testing::rewrite_manifest(dir, m);
  expect_refused(dir, {"model.eos_token_ids[1]: -1 is below 0"});
}

// The weight table holds at most the model's tensors: a table padded with a million entries is
// refused before any is read.
TEST(Artifact, RefusesMoreTensorsThanTheModelHas) {
  const std::string dir = testing::temp_dir("many");
  auto m = testing::write_tiny_artifact(dir, {});
  const std::size_t have = m["weights"]["tensors"].size();
  // Each tensor may have scales beside it: the bound is twice the model's tensors.
  for (std::size_t i = 0; i <= have; ++i)
    m["weights"]["tensors"].push_back(m["weights"]["tensors"][0]);
  testing::rewrite_manifest(dir, m);
  expect_refused(dir, {"weights.tensors: " + std::to_string(2 * have + 1) +
                       " tensors, but the model has " + std::to_string(have)});
}

// The sizes the GPU engine reads of the kernel table and launch programs are within CUDA's limits
// and the serving configuration's.
TEST(Artifact, RefusesLaunchProgramsBeyondTheirBounds) {
  const std::string dir = testing::temp_dir("programs");
  const auto m = testing::write_tiny_artifact(dir, {});
  const auto good = with_program(m, {"buf:h"}, {{{"buffer", "h"}, {"bytes", 4096}}});
  testing::rewrite_manifest(dir, good);
  EXPECT_TRUE(Artifact::load(dir)->has_kernels());
  auto refused_with = [&](auto edit, std::initializer_list<std::string> parts) {
    auto c = good;
    edit(c);
    testing::rewrite_manifest(dir, c);
    expect_refused(dir, parts);
  };
  refused_with(
      [](auto& c) {
        c["kernels"][0]["block"] = {1024, 2, 1};
      },
      {"kernels[0].block: more than 1024 threads a block"});
  refused_with([](auto& c) { c["kernels"][0]["dynamic_smem"] = 1 << 20; },
               {"kernels[0].dynamic_smem: 1048576 is above 232448"});
  refused_with([](auto& c) { c["programs"]["buckets"][0]["launches"][0]["kernel"] = 1; },
               {"programs.buckets[0].launches[0].kernel: 1 is above 0"});
  refused_with(
      [](auto& c) {
        c["programs"]["buckets"][0]["launches"][0]["grid"] = {1, 70000, 1};
      },
      {"programs.buckets[0].launches[0].grid[1]: 70000 is above 65535"});
  refused_with([](auto& c) { c["programs"]["descriptor"]["max_tokens"] = 1 << 30; },
               {"programs.descriptor.max_tokens: 1073741824 is above 16"});
  refused_with([](auto& c) { c["programs"]["descriptor"]["max_sample_rows"] = 17; },
               {"programs.descriptor.max_sample_rows: 17 is above 16"});
  refused_with([](auto& c) { c["plan"]["arena"]["bytes"] = std::int64_t{1} << 50; },
               {"plan.arena.bytes", "is above 1099511627776"});
  refused_with([](auto& c) { c["plan"]["arena"]["buffers"][0]["bytes"] = 4097; },
               {"plan.arena.buffers[0].bytes: 4097 is above 4096"});
  refused_with([](auto& c) { c["plan"]["arena"]["buffers"][0]["offset"] = 128; },
               {"plan.arena.buffers[0].offset: 128 is not a multiple of the alignment"});
  refused_with(
      [](auto& c) {
        c["plan"]["arena"]["bytes"] = 8192;
        c["plan"]["arena"]["buffers"].push_back({{"buffer", "h"}, {"offset", 4096}, {"bytes", 1}});
      },
      {"plan.arena.buffers[1]: a second buffer \"h\""});
  refused_with([](auto& c) { c.erase("plan"); }, {"plan: missing"});
  refused_with([](auto& c) { c["programs"]["buckets"][0]["tokens"] = 17; },
               {"programs.buckets[0].tokens: 17 is above 16"});
  refused_with([](auto& c) { c["programs"].erase("descriptor"); },
               {"programs.descriptor: missing"});
}

// Every launch argument names something the artifact has, checked at load, naming the argument.
TEST(Artifact, RefusesLaunchArgumentsThatNameNothing) {
  const std::string dir = testing::temp_dir("args");
  const auto m = testing::write_tiny_artifact(dir, {});
  auto with_arg = [&](const std::string& arg) {
    testing::rewrite_manifest(dir, with_program(m, {arg}, {{{"buffer", "h"}, {"bytes", 4096}}}));
  };
  for (const char* good : {"null", "w:embed", "buf:h", "kv:1", "desc:page_tables"}) {
    with_arg(good);
    EXPECT_NO_THROW(Artifact::load(dir)) << good;
  }
  with_arg("w:nope");
  expect_refused(dir, {"programs.buckets[0].launches[0].args[0]: w:nope: no weight tensor"});
  with_arg("buf:hh");
  expect_refused(dir, {"args[0]: buf:hh: no arena buffer \"hh\" (plan.arena)"});
  with_arg("kv:2");
  expect_refused(dir, {"args[0]: kv:2: \"2\" is not a layer of the KV cache"});
  with_arg("desc:colour");
  expect_refused(dir, {"args[0]: desc:colour: no descriptor field \"colour\""});
  with_arg("host:sampled_x");
  expect_refused(dir, {"args[0]: host:sampled_x: not a launch argument"});
  // A bucket whose launches never pass host:sampled would return no tokens.
  auto c = with_program(m, {"buf:h"}, {{{"buffer", "h"}, {"bytes", 4096}}});
  c["programs"]["buckets"][0]["launches"][0]["args"] = {"buf:h"};
  testing::rewrite_manifest(dir, c);
  expect_refused(dir, {"programs.buckets[0].launches: no launch passes host:sampled"});
}

// Descriptor fields and host:sampled have one copy per step parity, the rest one: `sampled` on the
// device included (the next step's embed_gather reads it in stream order).
TEST(Artifact, OnlyDescriptorFieldsAndHostTokensHaveACopyPerParity) {
  const std::string dir = testing::temp_dir("parity");
  const auto m = testing::write_tiny_artifact(dir, {});
  testing::rewrite_manifest(
      dir, with_program(m,
                        {"w:embed", "desc:tokens", "buf:sampled", "kv:0", "desc:sample_params",
                         "tmap:buf:sampled:1:64:1:64", "null"},
                        {{{"buffer", "sampled"}, {"bytes", 4096}}}));
  const auto a = Artifact::load(dir);
  const auto& args = a->programs().buckets.at(0).launches.at(0).args;
  ASSERT_EQ(args.size(), 8u);
  for (const LaunchArg& arg : args)
    EXPECT_EQ(arg.per_parity(), arg.text.starts_with("desc:") || arg.text == "host:sampled")
        << arg.text;
  EXPECT_EQ(args[2].kind, ArgKind::buffer);
  EXPECT_EQ(args[2].name, "sampled");
  EXPECT_EQ(args[3].layer, 0);
  EXPECT_EQ(args[4].field, DescriptorField::sample_params);
  EXPECT_EQ(args[5].map_target, ArgKind::buffer);
}

TEST(Artifact, ChecksTheTargetArchitecture) {
  const std::string dir = testing::temp_dir("arch");
  testing::write_tiny_artifact(dir, {});
  auto a = Artifact::load(dir);
  a->check_target("sm_90a");
  a->check_target("sm_90");
  try {
    a->check_target("sm_100a");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("serving.targets is [sm_90a]"), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("sm_100a"), std::string::npos) << e.what();
  }
}

// The kernel set a GPU runs, by its compute capability: sm_90a on 9.0, sm_100a on 10.0, whichever
// position the target has in serving.targets.
TEST(KernelSet, ChosenByComputeCapability) {
  const std::vector<std::string> both = {"sm_90a", "sm_100a"};
  EXPECT_EQ(kernel_set_for_device(9, 0, both, "m.json"), 0u);
  EXPECT_EQ(kernel_set_for_device(10, 0, both, "m.json"), 1u);
  EXPECT_EQ(kernel_set_for_device(10, 0, {"sm_100a"}, "m.json"), 0u);
  EXPECT_EQ(kernel_set_for_device(9, 0, {"sm_100a", "sm_90a"}, "m.json"), 1u);
  EXPECT_EQ(kernel_target_for_device(9, 0), "sm_90a");
  EXPECT_EQ(kernel_target_for_device(10, 0), "sm_100a");
  EXPECT_EQ(kernel_target_for_device(10, 3), "");
  EXPECT_EQ(kernel_target_for_device(8, 0), "");
}

// An artifact without a set for the device is refused naming the manifest, the device, the sets
// it has and the --target to compile with; so is a device Telos has no kernels for.
TEST(KernelSet, RefusesAnArtifactWithoutTheDevicesSet) {
  auto refusal = [](int major, int minor, const std::vector<std::string>& targets) {
    try {
      kernel_set_for_device(major, minor, targets, "a.telos/manifest.json");
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_EQ(refusal(9, 0, {"sm_100a"}),
            "a.telos/manifest.json: serving.targets is [sm_100a], no kernel set for this device "
            "(compute capability 9.0, sm_90a): compile the artifact with --target sm_90a (or "
            "--target sm_100a,sm_90a for one artifact with both)");
  EXPECT_NE(refusal(10, 0, {"sm_90a"}).find("compile the artifact with --target sm_100a"),
            std::string::npos);
  EXPECT_EQ(refusal(10, 3, {"sm_90a", "sm_100a"}),
            "a.telos/manifest.json: serving.targets is [sm_90a, sm_100a]; this device has compute "
            "capability 10.3, for which Telos has no kernels (sm_90a runs on 9.0, sm_100a on 10.0 "
            "only)");
  EXPECT_NE(refusal(8, 0, {"sm_90a"}).find("compute capability 8.0"), std::string::npos);
}

// An artifact without kernels (the CPU engine's) has no set for any device, said so by name.
TEST(KernelSet, AnArtifactWithoutKernelsHasNone) {
  const std::string dir = testing::temp_dir("kernel_set");
  testing::write_tiny_artifact(dir, {});
  auto a = Artifact::load(dir);
  ASSERT_FALSE(a->has_kernels());
  try {
    a->kernel_set(9, 0);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("manifest.json: kernels is empty"), std::string::npos)
        << e.what();
  }
}

// check_target takes the architecture's name (telos-run check --arch) by the same rule, and refuses
// a name that is none.
TEST(KernelSet, CheckTargetReadsTheArchitectureName) {
  const std::string dir = testing::temp_dir("check_target");
  testing::write_tiny_artifact(dir, {});
  auto a = Artifact::load(dir);
  EXPECT_NO_THROW(a->check_target("sm_90a"));
  EXPECT_NO_THROW(a->check_target("sm_90"));
  for (const std::string bad : {"gfx90a", "sm_", "sm_9x", "sm_1000"}) try {
      a->check_target(bad);
      ADD_FAILURE() << bad << " accepted";
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()), "architecture \"" + bad +
                                           "\": expected sm_ and a compute capability, such as "
                                           "sm_90a");
    }
  EXPECT_THROW(a->check_target("sm_103a"), Error);
}

}  // namespace
}  // namespace telos::exec
