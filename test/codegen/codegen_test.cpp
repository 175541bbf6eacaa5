// Codegen without a GPU: every kernel template instantiates and compiles through NVRTC for sm_90a
// for each model family and for a real-size shape, with zero spills and no local memory (codegen
// refuses otherwise), and the PTX has what the kernels are built around.
#include "codegen/codegen.hpp"

#include <gtest/gtest.h>

#include <array>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "codegen/kernel_plan.hpp"
#include "codegen/lowering.hpp"
#include "codegen/nvrtc_driver.hpp"
#include "codegen/rope_table.hpp"
#include "support/error.hpp"
#include "test/codegen/test_models.hpp"

namespace telos::codegen {
namespace {

std::string temp_cache(const std::string& name) {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("telos-codegen-test-" + name + "-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  return dir.string();
}

// The body of PTX entry `entry`.
std::string ptx_function(const std::string& ptx, const std::string& entry) {
  const auto at = ptx.find(".entry " + entry + "(");
  if (at == std::string::npos) return "";
  // Up to the next entry: a line holding only "}" may close an inline asm block (mbarrier waits).
  const auto end = ptx.find(".entry ", at + 1);
  return ptx.substr(at, end == std::string::npos ? std::string::npos : end - at);
}

class CodegenFamily : public ::testing::TestWithParam<std::string> {};

TEST_P(CodegenFamily, CompilesEveryKernelWithoutSpills) {
  const std::string cache = temp_cache(GetParam());
  const GeneratedKernels k = generate_kernels(tiny(GetParam()), {cache});
  const TargetKernels& t = k.compiled;
  EXPECT_EQ(t.arch, "sm_90a");
  EXPECT_FALSE(t.from_cache);
  EXPECT_NE(t.ptx.find(".target sm_90a"), std::string::npos);
  EXPECT_GT(t.cubin.size(), 1000u);

  std::set<std::string> kinds;
  for (const auto& e : k.kernels) {
    const std::string entry = e.at("entry");
    const std::string instance = e.at("instance");
    kinds.insert(instance.substr(0, instance.find('<')));
    const auto& r = e.at("resources").at("sm_90a");
    EXPECT_EQ(r.at("spill_stores"), 0) << instance;
    EXPECT_EQ(r.at("spill_loads"), 0) << instance;
    EXPECT_EQ(r.at("stack_frame"), 0) << instance;
    EXPECT_GT(r.at("registers").get<int>(), 0) << instance;
    const std::string body = ptx_function(t.ptx, entry);
    ASSERT_FALSE(body.empty()) << "no PTX entry for " << instance;
    EXPECT_EQ(body.find(".local"), std::string::npos) << instance;
    // The executor launches every kernel but a step's first with programmatic stream
    // serialization: a kernel that did not wait for its predecessor could read its inputs early.
    EXPECT_NE(body.find("griddepcontrol.wait"), std::string::npos) << instance;
    EXPECT_NE(body.find("griddepcontrol.launch_dependents"), std::string::npos) << instance;
    // The LM head runs on the small GEMM: weights by TMA into wgmma.
    if (instance.find("gemm_small_f32cand") != std::string::npos) {
      EXPECT_NE(body.find("cp.async.bulk.tensor.2d"), std::string::npos) << instance;
      EXPECT_NE(body.find("wgmma.mma_async"), std::string::npos) << instance;
    }
    // Decode attention's q·k and p·v run on tensor cores.
    if (instance.find("attn_split") != std::string::npos) {
      EXPECT_NE(body.find("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32"), std::string::npos);
    }
  }
  const std::set<std::string> expected = {"telos_kernels::embed_gather",
                                          "telos_kernels::rmsnorm",
                                          "telos_kernels::attn_split",
                                          "telos_kernels::attn_combine",
                                          "telos_kernels::gemm_small_f32cand",
                                          "telos_kernels::sample",
                                          "telos_kernels::gemm_prefill_residual",
                                          "telos_kernels::gemm_prefill_swiglu",
                                          "telos_kernels::gemm_prefill_bf16",
                                          "telos_kernels::qkv_rope_append_rows",
                                          "telos_kernels::gemm_small_residual",
                                          "telos_kernels::gemm_small_swiglu",
                                          "telos_kernels::gemm_small_bf16",
                                          "telos_kernels::gemm_small_residual_cl",
                                          "telos_kernels::gemm_small_swiglu_cl",
                                          "telos_kernels::gemm_small_bf16_cl",
                                          "telos_kernels::gemm_small_norm_bf16",
                                          "telos_kernels::gemm_small_norm_swiglu",
                                          "telos_kernels::decode_layer_persistent"};
  EXPECT_EQ(kinds, expected);

  // Every bucket launches something valid, decode buckets first and largest first.
  const auto& buckets = k.programs.at("buckets");
  ASSERT_EQ(buckets.size(), 8u);
  EXPECT_EQ(buckets[0].at("kind"), "decode");
  EXPECT_EQ(buckets[0].at("size"), 8);
  EXPECT_EQ(buckets[4].at("kind"), "prefill");
  EXPECT_EQ(buckets[4].at("size"), 512);
  EXPECT_EQ(buckets[4].at("sample_rows"), 8);
  EXPECT_EQ(buckets[5].at("size"), 128);
  for (const auto& b : buckets)
    for (const auto& l : b.at("launches")) {
      const int kernel = l.at("kernel");
      ASSERT_LT(kernel, static_cast<int>(k.kernels.size()));
      EXPECT_EQ(l.at("args").size(), k.kernels[kernel].at("args").size());
    }

  // Prefill at 512 tokens (kPrefillGemmMinRows) runs qkv, o, gate/up and down on the wgmma + TMA
  // prefill GEMM, operands as tensor maps, the QKV epilogue as its own kernel; prefill at 128 and
  // 64 and decode run the small-M GEMM (the same wgmma chain per element) with the same launch
  // sequence. The layer weights come from the one-token layer's slot images (`timg:`, in its
  // tiles: qkv and o 32 rows, gate/up 32 + 32, down 16), the weights' only copy: the prefill
  // GEMM's 256 rows (SwiGLU: 128 of each half) are whole tiles of them, one box a stage.
  auto instance_of = [&](const nlohmann::ordered_json& launch) {
    return k.kernels[launch.at("kernel").get<int>()].at("instance").get<std::string>();
  };
  const auto& p512 = buckets[4].at("launches");
  EXPECT_EQ(instance_of(p512[2]), "telos_kernels::gemm_prefill_bf16<512, 256, 128, 32, 256>");
  EXPECT_EQ(p512[2].at("args"),
            nlohmann::ordered_json({"tmap:buf:h:512:128:128:64", "timg:layers.0.qkv:32:1:256",
                                    "tmap:buf:qkv:512:256:64:64"}));
  EXPECT_EQ(p512[2].at("grid"), nlohmann::ordered_json({4, 1, 1}));
  EXPECT_EQ(instance_of(p512[3]).rfind("telos_kernels::qkv_rope_append_rows<4, 2, 32, ", 0), 0u);
  EXPECT_EQ(p512[3].at("grid"), nlohmann::ordered_json({8, 512, 1}));
  EXPECT_EQ(p512[3].at("args")[0], "buf:qkv");
  EXPECT_EQ(p512[3].at("args")[7], "kv:0");
  // Attention in tiles of 8 tokens (G = 2: 16 MMA rows) in prefill, one token per block in decode.
  EXPECT_EQ(instance_of(p512[4]).rfind("telos_kernels::attn_split<4, 2, 32, ", 0), 0u);
  // Four blocks an SM: the bucket's split rows reach kAttnSplitFourBlocksMinRows.
  EXPECT_EQ(instance_of(p512[4]).substr(instance_of(p512[4]).size() - 20), ", 8, false, true, 4>");
  // Two partial slots: max_seq_len 512 in splits of 256.
  EXPECT_EQ(p512[4].at("grid"), nlohmann::ordered_json({512 / 8, 2, 2}));
  EXPECT_EQ(instance_of(p512[6]), "telos_kernels::gemm_prefill_residual<512, 128, 128, 32, 256>");
  EXPECT_EQ(p512[6].at("args"),
            nlohmann::ordered_json({"tmap:buf:attn:512:128:128:64", "timg:layers.0.o:32:1:256",
                                    "tmap:buf:x:512:128:64:32"}));
  EXPECT_EQ(p512[6].at("grid"), nlohmann::ordered_json({4, 1, 1}));
  EXPECT_EQ(instance_of(p512[8]), "telos_kernels::gemm_prefill_swiglu<512, 256, 128, 32, 128>");
  EXPECT_EQ(p512[8].at("args"),
            nlohmann::ordered_json({"tmap:buf:h:512:128:128:64", "timg:layers.0.gate_up:64:2:128",
                                    "tmap:buf:act:512:256:64:64"}));
  EXPECT_EQ(p512[8].at("grid"), nlohmann::ordered_json({8, 1, 1}));
  EXPECT_EQ(instance_of(p512[9]), "telos_kernels::gemm_prefill_residual<512, 128, 256, 16, 256>");
  EXPECT_EQ(p512[9].at("args")[1], "timg:layers.0.down:16:1:256");
  EXPECT_EQ(p512[9].at("args")[2], "tmap:buf:x:512:128:64:32");
  // Prefill 128, under kPrefillGemmMinRows: the small-M GEMM on two consumer warpgroups a CTA
  // (M tiles of 128 rows: the `_cl` instances, on clusters of one), the same launch sequence and
  // QKV epilogue as prefill 512, the A box the bucket's 128 rows.
  const auto& p128 = buckets[5].at("launches");
  EXPECT_EQ(instance_of(p128[2]),
            "telos_kernels::gemm_small_bf16_cl<128, 256, 128, 32, 2, 1, 2, 32, 32>");
  EXPECT_EQ(p128[2].at("args"), nlohmann::ordered_json({"tmap:buf:h:128:128:128:64",
                                                        "timg:layers.0.qkv:32:1:32", "buf:qkv"}));
  EXPECT_EQ(p128[2].at("grid"), nlohmann::ordered_json({1, 8, 1}));
  EXPECT_EQ(instance_of(p128[3]), instance_of(p512[3]));
  EXPECT_EQ(p128[3].at("grid"), nlohmann::ordered_json({8, 128, 1}));
  EXPECT_EQ(instance_of(p128[6]),
            "telos_kernels::gemm_small_residual_cl<128, 128, 128, 32, 2, 1, 2, 32, 32>");
  EXPECT_EQ(p128[6].at("args"), nlohmann::ordered_json({"tmap:buf:attn:128:128:128:64",
                                                        "timg:layers.0.o:32:1:32", "buf:x"}));
  EXPECT_EQ(instance_of(p128[8]),
            "telos_kernels::gemm_small_swiglu_cl<128, 256, 128, 256, 2, 1, 2, 32, 128>");
  EXPECT_EQ(p128[8].at("args"),
            nlohmann::ordered_json(
                {"tmap:buf:h:128:128:128:64", "timg:layers.0.gate_up:64:2:128", "buf:act"}));
  EXPECT_EQ(instance_of(p128[9]),
            "telos_kernels::gemm_small_residual_cl<128, 128, 256, 32, 4, 1, 2, 16, 32>");
  // Prefill 64: one 64-token tile, 32 weight rows per CTA (SwiGLU: 32 gate and 32 up rows), the
  // weights through image maps of 32-row boxes (down: 16-row tiles, two boxes), bf16 outputs
  // through plain pointers.
  const auto& p64 = buckets[6].at("launches");
  EXPECT_EQ(instance_of(p64[2]), "telos_kernels::gemm_small_bf16<64, 256, 128, 32, 2, 1, 32, 32>");
  EXPECT_EQ(p64[2].at("args"), nlohmann::ordered_json({"tmap:buf:h:64:128:64:64",
                                                       "timg:layers.0.qkv:32:1:32", "buf:qkv"}));
  EXPECT_EQ(p64[2].at("grid"), nlohmann::ordered_json({1, 8, 1}));
  EXPECT_EQ(instance_of(p64[3]), instance_of(p512[3]));
  EXPECT_EQ(instance_of(p64[6]),
            "telos_kernels::gemm_small_residual<64, 128, 128, 32, 2, 1, 32, 32>");
  EXPECT_EQ(p64[6].at("args"), nlohmann::ordered_json({"tmap:buf:attn:64:128:64:64",
                                                       "timg:layers.0.o:32:1:32", "buf:x"}));
  EXPECT_EQ(instance_of(p64[8]),
            "telos_kernels::gemm_small_swiglu<64, 256, 128, 64, 2, 1, 32, 32>");
  EXPECT_EQ(p64[8].at("args"),
            nlohmann::ordered_json(
                {"tmap:buf:h:64:128:64:64", "timg:layers.0.gate_up:64:2:32", "buf:act"}));
  EXPECT_EQ(p64[8].at("grid"), nlohmann::ordered_json({1, 8, 1}));
  EXPECT_EQ(instance_of(p64[9]),
            "telos_kernels::gemm_small_residual<64, 128, 256, 32, 2, 2, 16, 32>");
  // Decode at 8 tokens: the norms fold into the QKV and gate/up GEMMs (A = RMSNorm(x) in the
  // kernel, no rmsnorm launch, the stages hold weights only); the o projection's activations come
  // in boxes of the bucket's 8 rows, not 64 (the kernel expects that many bytes per stage).
  const auto& d8 = buckets[0].at("launches");
  ASSERT_EQ(d8.size(), 1u + 7u * 2u + 3u);  // embed, 7 a layer, final norm, LM head, sample
  EXPECT_EQ(instance_of(d8[1]).rfind("telos_kernels::gemm_small_norm_bf16<8, 256, 128, 32, ", 0), 0u);
  EXPECT_EQ(d8[1].at("args"), nlohmann::ordered_json({"buf:x", "w:layers.0.attn_norm",
                                                      "timg:layers.0.qkv:32:1:32", "buf:qkv"}));
  EXPECT_EQ(instance_of(d8[2]), instance_of(p512[3]));
  // One token a block, the next chunk's loads ahead (8 rows: kAttnSplitAheadMaxRows), the split's
  // page ids loaded when it starts, the PDL wait inside each item (EARLY: a decode bucket).
  EXPECT_EQ(instance_of(d8[3]).substr(instance_of(d8[3]).size() - 28),
            ", 1, true, true, 0, 0, true>");
  EXPECT_EQ(d8[3].at("grid"), nlohmann::ordered_json({8, 2, 2}));
  EXPECT_EQ(d8[5].at("args")[0], "tmap:buf:attn:8:128:8:64");
  EXPECT_EQ(instance_of(d8[6]).rfind("telos_kernels::gemm_small_norm_swiglu<8, 256, 128, 64, ", 0), 0u);
  EXPECT_EQ(d8[6].at("args")[0], "buf:x");
  EXPECT_EQ(d8[6].at("args")[1], "w:layers.0.mlp_norm");
  // Decode at 1 token: each layer is one persistent launch (decode_layer_persistent), a CTA per SM.
  ASSERT_EQ(buckets[3].at("size"), 1);
  const auto& d1 = buckets[3].at("launches");
  ASSERT_EQ(d1.size(), 1u + 1u * 2u + 3u);
  EXPECT_EQ(instance_of(d1[1]).rfind("telos_kernels::decode_layer_persistent<128, 4, 2, 32, ", 0), 0u);
  EXPECT_EQ(d1[1].at("grid"), nlohmann::ordered_json({132, 1, 1}));
  const auto& layer_args = d1[1].at("args");
  ASSERT_EQ(layer_args.size(), 21u);
  // The QKV epilogue in the QKV tiles (QKV_ROPE) but with QK norm (qwen3).
  const bool qk_norm = GetParam() == std::string("qwen3");
  // Every weight from its slot image, one bulk copy a ring slot (BULK): the tiny models'
  // gate/up takes 8 tiles of 64 rows, a last round that leaves most SMs idle; each image in the
  // layer's tiles (gate/up's two halves).
  const PersistentLayerTiling lt = decode_layer_tiling(128, 256, 128, 256, 32);
  ASSERT_EQ(lt.bg, 64);
  EXPECT_EQ(lt.bulk, 0b1111);
  EXPECT_EQ(layer_args[0], "wimg:layers.0.qkv:" + std::to_string(lt.bq) + ":1");
  EXPECT_EQ(layer_args[1], "wimg:layers.0.o:" + std::to_string(lt.bo) + ":1");
  EXPECT_EQ(layer_args[2], "wimg:layers.0.gate_up:64:2");
  EXPECT_EQ(layer_args[3], "wimg:layers.0.down:" + std::to_string(lt.bd) + ":1");
  EXPECT_TRUE(instance_of(d1[1]).ends_with(qk_norm ? ", false, 15>" : ", true, 15>"));
  EXPECT_EQ(layer_args[4], "w:layers.0.attn_norm");
  EXPECT_EQ(layer_args[5], "w:layers.0.mlp_norm");
  EXPECT_EQ(layer_args[12], "kv:0");
  EXPECT_EQ(layer_args[13], "buf:x");
  EXPECT_EQ(layer_args[20], "buf:layer_sync");
  EXPECT_EQ(instance_of(d1[2]), instance_of(d1[1]));  // the same instance for every layer
  for (const auto& e : k.kernels) {
    const std::string instance = e.at("instance");
    const bool prefill = instance.rfind("telos_kernels::gemm_prefill", 0) == 0;
    const bool small = instance.rfind("telos_kernels::gemm_small", 0) == 0;
    if (instance.rfind("telos_kernels::decode_layer_persistent", 0) == 0) {
      // One CTA per SM: the ring fills what the resident A leaves of the 227 KB.
      EXPECT_GT(e.at("dynamic_smem").get<int>(), 114 * 1024) << instance;
      EXPECT_LE(e.at("dynamic_smem").get<int>(), 227 * 1024) << instance;
      EXPECT_EQ(e.at("block"), nlohmann::ordered_json({160, 1, 1}));
      const std::string body = ptx_function(t.ptx, e.at("entry"));
      EXPECT_NE(body.find("wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16"), std::string::npos);
      EXPECT_NE(body.find("ld.acquire.gpu.global.u32"), std::string::npos);  // the grid-wide count
      // The copies of the 2D maps (the weights stream as slot images, not as tensor maps).
      EXPECT_NE(body.find("cp.async.bulk.tensor.2d"), std::string::npos);
      continue;
    }
    if (!prefill && !small) {
      EXPECT_EQ(e.at("dynamic_smem").get<int>(), 0) << instance;
      continue;
    }
    if (prefill) {
      EXPECT_EQ(e.at("dynamic_smem").get<int>(), 230464) << instance;
    }
    // The small GEMM's 128-row M tiles (the 128-token bucket's `_cl` instances) on two consumer
    // warpgroups, the rest on one; each beside its producer warp.
    const int small_threads = instance.find("_cl<") != std::string::npos ? 288 : 160;
    EXPECT_EQ(e.at("block"), nlohmann::ordered_json({prefill ? 384 : small_threads, 1, 1}));
    const std::string body = ptx_function(t.ptx, e.at("entry"));
    ASSERT_FALSE(body.empty()) << instance;
    // The LM head (f32cand): 128-row weight tiles for the tiny vocabulary of 512; the 128-token
    // bucket's gate/up (swiglu_cl): 256-row tiles, 128 gate and 128 up rows.
    const std::string n = prefill || instance.find("swiglu_cl") != std::string::npos ? "256"
                          : instance.find("swiglu") != std::string::npos             ? "64"
                          : instance.find("f32cand") != std::string::npos            ? "128"
                                                                                     : "32";
    EXPECT_NE(body.find("wgmma.mma_async.sync.aligned.m64n" + n + "k16.f32.bf16.bf16"), std::string::npos)
        << instance;
    // Weights by tensor copies: the LM head's through the embedding's 2D map, the layer weights'
    // through their slot images' 5D maps (`timg:`; the tiny models' one-token layer streams every
    // layer weight from its image).
    const bool lm_head = instance.find("f32cand") != std::string::npos;
    EXPECT_NE(body.find(lm_head ? "cp.async.bulk.tensor.2d.shared::cluster.global"
                                : "cp.async.bulk.tensor.5d.shared::cluster.global"),
              std::string::npos)
        << instance;
    // The folded norm reads x with plain loads and writes A to shared memory itself.
    if (instance.rfind("telos_kernels::gemm_small_norm", 0) == 0) {
      EXPECT_NE(body.find("ld.global.v4.f32"), std::string::npos) << instance;
    }
    if (prefill) {
      EXPECT_NE(body.find("setmaxnreg.inc.sync.aligned.u32 232"), std::string::npos) << instance;
    }
    // The prefill residual epilogue adds into x through TMA reductions, not loads and stores of x.
    if (instance.rfind("telos_kernels::gemm_prefill_residual", 0) == 0) {
      EXPECT_NE(body.find("cp.reduce.async.bulk.tensor.2d.global.shared::cta.add"), std::string::npos);
      EXPECT_EQ(body.find("ld.global"), std::string::npos) << instance;
    }
  }

  // The family's extras are wired into the QKV epilogue's launch, in the persistent layer (decode 1)
  // or its own kernel (prefill 64).
  EXPECT_EQ(layer_args[6] != "null", GetParam() == "qwen2");
  EXPECT_EQ(layer_args[7] != "null", GetParam() == "qwen3");
  EXPECT_EQ(p64[3].at("args")[1] != "null", GetParam() == "qwen2");
  EXPECT_EQ(p64[3].at("args")[2] != "null", GetParam() == "qwen3");

  // A second generation comes from the cache, identical, and marks the entries it read as used
  // now (their directories' modification time; tools/gpu_check.sh carries such entries along).
  namespace fs = std::filesystem;
  const auto long_ago = fs::file_time_type::clock::now() - std::chrono::hours(48);
  std::vector<fs::path> entries;
  for (const auto& e : fs::directory_iterator(cache)) {
    fs::last_write_time(e.path(), long_ago);
    entries.push_back(e.path());
  }
  ASSERT_FALSE(entries.empty());
  const GeneratedKernels again = generate_kernels(tiny(GetParam()), {cache});
  EXPECT_TRUE(again.compiled.from_cache);
  EXPECT_EQ(again.compiled.cubin, t.cubin);
  EXPECT_EQ(again.kernels, k.kernels);
  for (const fs::path& e : entries)
    EXPECT_GT(fs::last_write_time(e), long_ago + std::chrono::hours(47)) << e;
  std::filesystem::remove_all(cache);
}

INSTANTIATE_TEST_SUITE_P(Tiny, CodegenFamily, ::testing::Values("llama", "qwen2", "qwen3"));

TEST(Codegen, RealSizeShapesCompileWithoutSpills) {
  const GeneratedKernels k = generate_kernels(llama_1b(), {""});
  for (const auto& e : k.kernels)
    EXPECT_EQ(e.at("resources").at("sm_90a").at("stack_frame"), 0) << e.at("instance");
  // Ragged decode bucket 6: one M tile of 6 tokens, 64 CTAs of 32 weight rows, 12 stages of two K
  // blocks (a ring of 96 KB of weights); prefill
  // 512: the tensor-core prefill GEMM at the real shape, no spills (checked by codegen itself).
  std::set<std::string> instances;
  for (const auto& e : k.kernels) instances.insert(e.at("instance").get<std::string>());
  EXPECT_EQ(instances.count("telos_kernels::gemm_small_residual<6, 2048, 2048, 32, 12, 2>"), 1u);
  EXPECT_TRUE(instances.count("telos_kernels::gemm_prefill_residual<512, 2048, 2048>"));
  EXPECT_TRUE(instances.count("telos_kernels::gemm_prefill_swiglu<512, 8192, 2048>"));
  EXPECT_TRUE(instances.count("telos_kernels::gemm_prefill_residual<512, 2048, 8192>"));
}

// The sampler holds a row in registers over a cluster of 8 blocks of 512 threads at a real
// vocabulary (32 values a thread at 128256), so a bucket launches 8 blocks a sampling row; the
// greedy candidates come from the LM head's blocks of 128 rows (1002 a row).
TEST(Codegen, SamplerSpansAClusterOfBlocksARow) {
  const GeneratedKernels k = generate_kernels(llama_1b(), {""});
  std::set<std::string> samplers;
  for (const auto& b : k.programs.at("buckets"))
    for (const auto& l : b.at("launches")) {
      const std::string instance = k.kernels[l.at("kernel").get<int>()].at("instance");
      if (instance.rfind("telos_kernels::sample<", 0) != 0) continue;
      samplers.insert(instance);
      EXPECT_EQ(l.at("grid")[0].get<int>(), 8 * b.at("sample_rows").get<int>()) << instance;
    }
  EXPECT_EQ(samplers, std::set<std::string>{"telos_kernels::sample<128256, 512, 1002, 8>"});
}

// The persistent decode layer's tiles: the fewest rows on the busiest of 132 CTAs, the larger tile
// on a tie: 32 rows where that gives an SM a tile (the 8B's 4096-row o and down), 16 where 32 would
// leave SMs idle (the 1B's o and down: 64 tiles of 32 rows), 48 and 24 for the 8B's and the 1B's
// qkv (128 tiles in one wave, not 192 of 32 or 16 rows), larger where K is not whole 8 KB slots of
// smaller tiles (tiny's o, K 128); gate/up 32 + 32; the ring fills what the resident A (the largest
// K) and 16 KB of static shared memory leave of 227 KB. Without QK norm the QKV epilogue runs in
// the QKV tiles (qkv_rope), the same tiles.
// Shapes it cannot take (K not whole slots) run the kernel-per-operation path.
TEST(Codegen, DecodeLayerTiling) {
  auto tiling = [](int h, int nqkv, int ko, int i, int d, bool qk_norm = true) {
    const PersistentLayerTiling t = decode_layer_tiling(h, nqkv, ko, i, d, qk_norm);
    return std::array<int, 7>{t.bq, t.bo, t.bg, t.bd, t.stages, t.smem, t.fits ? 1 : 0};
  };
  EXPECT_EQ(tiling(4096, 6144, 4096, 14336, 128, false), tiling(4096, 6144, 4096, 14336, 128));
  EXPECT_EQ(tiling(2048, 3072, 2048, 8192, 64, false), tiling(2048, 3072, 2048, 8192, 64));
  EXPECT_TRUE(decode_layer_tiling(2048, 3072, 2048, 8192, 64, false).qkv_rope);
  EXPECT_FALSE(decode_layer_tiling(1024, 4096, 2048, 3072, 128, true).qkv_rope);
  // Llama-3.1-8B: resident A 28 KB + 128 B (K 14336), 22 slots.
  EXPECT_EQ(tiling(4096, 6144, 4096, 14336, 128),
            (std::array<int, 7>{48, 32, 64, 32, 22, 211296, 1}));
  // Llama-3.2-1B: 96 qkv and 64 o / down tiles of 32 rows leave SMs idle (192 of 16: 1.45 waves).
  EXPECT_EQ(tiling(2048, 3072, 2048, 8192, 64),
            (std::array<int, 7>{24, 16, 64, 16, 24, 215424, 1}));
  // Qwen3-0.6B: o's K (Hq · D = 2048) differs from H.
  EXPECT_EQ(tiling(1024, 4096, 2048, 3072, 128), (std::array<int, 7>{32, 16, 64, 16, 25, 213392, 1}));
  // tiny-llama: o's K 128 is not a slot of 16-row tiles (four K blocks), so 32 rows.
  EXPECT_EQ(tiling(128, 256, 128, 256, 32)[1], 32);
  // Not whole slots, or a head dimension attention does not take: the plan keeps separate kernels.
  EXPECT_EQ(tiling(1000, 3000, 1000, 3000, 100)[6], 0);
  EXPECT_EQ(tiling(4096, 6144, 4096, 14336, 256)[6], 0);
  for (auto t : {tiling(4096, 6144, 4096, 14336, 128), tiling(2048, 3072, 2048, 8192, 64)})
    EXPECT_LE(t[5] + 16 * 1024, 227 * 1024);
  // Every weight from its slot image where gate/up's last round leaves half the SMs or more idle:
  // the 8B (448 tiles: 52 in the last round) and Qwen2.5-1.5B (280: 16), not the 1B
  // (256: 124) nor Qwen3-0.6B (96: one round of 96).
  EXPECT_EQ(decode_layer_tiling(4096, 6144, 4096, 14336, 128).bulk, 0b1111);
  EXPECT_EQ(decode_layer_tiling(1536, 2048, 1536, 8960, 128).bulk, 0b1111);
  EXPECT_EQ(decode_layer_tiling(2048, 3072, 2048, 8192, 64).bulk, 0);
  EXPECT_EQ(decode_layer_tiling(1024, 4096, 2048, 3072, 128).bulk, 0);
}

// The persistent layer on e4m3 weights (decode_layer_persistent_e4m3): the bf16 layer's tiles and
// QKV epilogue (a raw slot holds a ring slot's K blocks), kPersistentE4m3Slots ring slots, and the
// raw ring of 4 KB slots in the rest of the shared memory: at the 8B 37 raw slots (148 KB of e4m3
// in flight against the bf16 layer's 22 slots of 8 KB); no slot images.
TEST(Codegen, DecodeLayerTilingE4m3) {
  for (const auto& [h, nqkv, ko, i, d] : {std::array<int, 5>{4096, 6144, 4096, 14336, 128},
                                          std::array<int, 5>{2048, 3072, 2048, 8192, 64},
                                          std::array<int, 5>{128, 256, 128, 256, 32}}) {
    const PersistentLayerTiling b = decode_layer_tiling(h, nqkv, ko, i, d, false);
    const PersistentLayerTiling e = decode_layer_tiling(h, nqkv, ko, i, d, false, true);
    EXPECT_EQ((std::array<int, 4>{e.bq, e.bo, e.bg, e.bd}),
              (std::array<int, 4>{b.bq, b.bo, b.bg, b.bd}));
    EXPECT_EQ(e.qkv_rope, b.qkv_rope);
    EXPECT_TRUE(e.fits);
    EXPECT_EQ(e.stages, kPersistentE4m3Slots);
    EXPECT_EQ(e.bulk, 0);
    EXPECT_LE(e.smem + 16 * 1024, 227 * 1024);
    EXPECT_GT(e.smem + kPersistentRawSlotBytes + 16 * 1024, 227 * 1024);  // the raw ring fills it
    EXPECT_EQ(b.raw_stages, 0);
  }
  const PersistentLayerTiling e = decode_layer_tiling(4096, 6144, 4096, 14336, 128, false, true);
  EXPECT_EQ(e.raw_stages, 37);
  EXPECT_EQ(e.smem, 1024 + 29696 + 4 * kPersistentSlotBytes + 37 * kPersistentRawSlotBytes);
}

// The W8A8 layer (decode_layer_persistent_w8a8): a slot holds twice a bf16 slot's K, so K must be
// whole slots of 128 · (64 / BN) columns; among those, the bf16 layer's choice (the 8B's tiles are
// the bf16 layer's but gate/up's, 32 rows; Qwen2.5-1.5B's down, K 8960 = 70 blocks, cannot take 16
// rows (four blocks a slot) and takes 24); the ring fills what the bf16 and e4m3 resident A and
// 16 KB of static shared memory leave; no slot images. K not whole 128-column blocks does not fit.
TEST(Codegen, DecodeLayerTilingW8a8) {
  EXPECT_TRUE(persistent_w8a8_tile_fits(16, 512, 256));
  EXPECT_FALSE(persistent_w8a8_tile_fits(16, 256, 256));  // four 128-column blocks a slot
  EXPECT_FALSE(persistent_w8a8_tile_fits(64, 192, 256));  // a partial K block
  EXPECT_TRUE(persistent_tile_fits(16, 256, 256));
  auto tiling = [](int h, int nqkv, int ko, int i, int d, bool qk_norm) {
    const PersistentLayerTiling t = decode_layer_w8a8_tiling(h, nqkv, ko, i, d, qk_norm);
    return std::array<int, 8>{t.bq, t.bo, t.bg, t.bd, t.stages, t.smem, t.fits ? 1 : 0, t.bulk};
  };
  // Llama-3.1-8B: resident A 29 KB, e4m3 A 14 KB + 16 + 448 bytes, 20 slots.
  EXPECT_EQ(tiling(4096, 6144, 4096, 14336, 128, false),
            (std::array<int, 8>{48, 32, 32, 32, 20, 209680, 1, 0}));
  EXPECT_EQ(decode_layer_w8a8_tiling(4096, 6144, 4096, 14336, 128, false).smem,
            1024 + 29696 + 20 * kPersistentSlotBytes + persistent_w8a8_a_bytes(14336));
  EXPECT_EQ(tiling(2048, 3072, 2048, 8192, 64, false),
            (std::array<int, 8>{24, 16, 64, 16, 23, 215680, 1, 0}));
  EXPECT_EQ(tiling(1536, 2048, 1536, 8960, 128, false)[3], 24);
  // Gate/up on 32-row tiles where the busiest CTA then streams fewer slots: the 8B 112 against 128,
  // Qwen2.5-1.5B 30 against 36; the 1B 32 either way keeps 64.
  EXPECT_EQ(tiling(1536, 2048, 1536, 8960, 128, false)[2], 32);
  EXPECT_EQ(decode_layer_tiling(4096, 6144, 4096, 14336, 128, false).bg, 64);
  EXPECT_EQ(decode_layer_tiling(1536, 2048, 1536, 8960, 128, false).bd, 16);
  EXPECT_TRUE(decode_layer_w8a8_tiling(2048, 3072, 2048, 8192, 64, false).qkv_rope);
  EXPECT_FALSE(decode_layer_w8a8_tiling(1024, 4096, 2048, 3072, 128, true).qkv_rope);
  for (const auto& t :
       {tiling(4096, 6144, 4096, 14336, 128, false), tiling(2048, 3072, 2048, 8192, 64, false),
        tiling(1024, 4096, 2048, 3072, 128, true), tiling(128, 256, 128, 256, 32, false)}) {
    EXPECT_EQ(t[6], 1);
    EXPECT_LE(t[5] + 16 * 1024, 227 * 1024);
    EXPECT_GT(t[5] + kPersistentSlotBytes + 16 * 1024, 227 * 1024);  // the ring fills it
  }
  EXPECT_EQ(tiling(1000, 3000, 1000, 3000, 100, false)[6], 0);
  EXPECT_EQ(tiling(2112, 3168, 2112, 8448, 64, false)[6], 0);  // K 2112: 16.5 blocks
}

// serving.decode_weight_images = false keeps one copy of the weights: the one-token layer takes
// its weights through tensor maps (no wimg: argument, BULK 0) where the plan would take images.
TEST(Codegen, OneCopyOfTheWeightsWithoutSlotImages) {
  auto layer_args = [](const TestModel& in) {
    const KernelPlan plan = plan_kernels(in);
    for (const BucketProgram& b : plan.buckets)
      for (const Launch& l : b.launches)
        if (plan.kernels[static_cast<std::size_t>(l.kernel)].instance.starts_with(
                "telos_kernels::decode_layer_persistent<"))
          return std::make_pair(plan.kernels[static_cast<std::size_t>(l.kernel)].instance, l.args);
    return std::make_pair(std::string(), std::vector<std::string>());
  };
  TestModel in = tiny("llama");
  const auto [with, with_args] = layer_args(in);
  ASSERT_FALSE(with.empty());
  EXPECT_TRUE(with.ends_with(", 15>"));
  EXPECT_TRUE(with_args[2].starts_with("wimg:layers.0.gate_up:"));
  in.serving.decode_weight_images = false;
  const auto [without, without_args] = layer_args(in);
  EXPECT_TRUE(without.ends_with(", 0>"));
  for (int i = 0; i < 4; ++i)
    EXPECT_TRUE(without_args[static_cast<std::size_t>(i)].starts_with("tmap:w:layers.0."));
}

// With slot images every GEMM of every bucket reads the layer weights from them (`timg:`), so no
// argument names those weights themselves and the engine keeps no second copy; without, none
// names an image.
TEST(Codegen, LayerWeightsHaveOneCopyEitherWay) {
  auto args_of = [](const TestModel& in) {
    std::set<std::string> kinds;
    const KernelPlan plan = plan_kernels(in);
    for (const BucketProgram& b : plan.buckets)
      for (const Launch& l : b.launches)
        for (const std::string& a : l.args) {
          for (const char* w : {"qkv:", "o:", "gate_up:", "down:"})
            if (a.find("layers.0." + std::string(w)) != std::string::npos)
              kinds.insert(a.substr(0, 5));
        }
    return kinds;
  };
  TestModel in = tiny("llama");
  in.serving.prefill_buckets = {16, 64, 256, 512};
  EXPECT_EQ(args_of(in), (std::set<std::string>{"timg:", "wimg:"}));
  in.serving.decode_weight_images = false;
  EXPECT_EQ(args_of(in), (std::set<std::string>{"tmap:"}));
}

// Which layer weights the one-token layer streams from slot images, and in which tiles: all four on
// the Llama-3.1-8B shapes (qkv 48 rows, o and down 32, gate/up 32 + 32), none on Llama-3.2-1B's.
TEST(Codegen, LayerWeightImages) {
  const PersistentLayerTiling big = decode_layer_tiling(4096, 6144, 4096, 14336, 128, false);
  const PersistentLayerTiling small = decode_layer_tiling(2048, 3072, 2048, 8192, 64, false);
  auto pair = [](const WeightImage& w) { return std::make_pair(w.bn, w.halves); };
  EXPECT_EQ(pair(layer_weight_image(big, "qkv")), std::make_pair(48, 1));
  EXPECT_EQ(pair(layer_weight_image(big, "o")), std::make_pair(32, 1));
  EXPECT_EQ(pair(layer_weight_image(big, "gate_up")), std::make_pair(64, 2));
  EXPECT_EQ(pair(layer_weight_image(big, "down")), std::make_pair(32, 1));
  for (const char* w : {"qkv", "o", "gate_up", "down"}) EXPECT_EQ(layer_weight_image(small, w).bn, 0);
  EXPECT_THROW(layer_weight_image(big, "lm_head"), telos::Error);
}

// The boxes through which a GEMM reads its weight rows from a slot image: the rows where they lie
// in one tile or make whole tiles, else their greatest common divisor with a tile's half, and none
// where that is not whole 8-row swizzle repeats.
TEST(Codegen, ImageBoxRows) {
  EXPECT_EQ(image_box_rows({32, 1}, 256), 256);  // 8 tiles
  EXPECT_EQ(image_box_rows({32, 1}, 16), 16);    // half a tile
  EXPECT_EQ(image_box_rows({48, 1}, 256), 16);   // the 8B's qkv in the prefill GEMM: 16 boxes
  EXPECT_EQ(image_box_rows({48, 1}, 48), 48);
  EXPECT_EQ(image_box_rows({64, 2}, 128), 128);  // gate/up: 32 + 32-row tiles, 4 of a half
  EXPECT_EQ(image_box_rows({40, 1}, 64), 8);
  EXPECT_EQ(image_box_rows({24, 1}, 20), 0);  // gcd 4
  EXPECT_EQ(image_box_rows({}, 64), 0);       // no image
}

// The prefill GEMM takes one box a stage where image_box_rows would cut its 256 rows into several:
// the whole tiles that cover any window of them (the 8B's qkv: 6 tiles of 48 cover 256 rows that
// start 0, 16 or 32 rows into one), in three stages of 288 rows where four of 256 fit.
TEST(Codegen, PrefillImageBoxRows) {
  EXPECT_EQ(prefill_image_box_rows({48, 1}, 256), 288);
  EXPECT_EQ(prefill_image_box_rows({24, 1}, 256), 288);  // offsets 0, 8, 16: 12 tiles of 24
  EXPECT_EQ(prefill_image_box_rows({32, 1}, 256), 256);  // whole tiles: as image_box_rows
  EXPECT_EQ(prefill_image_box_rows({64, 2}, 128), 128);
  EXPECT_EQ(prefill_image_box_rows({96, 2}, 128), 16);   // two halves: image_box_rows's boxes
  EXPECT_EQ(prefill_image_box_rows({56, 1}, 256), 336);  // offsets up to 48: 6 tiles of 56
  EXPECT_EQ(prefill_image_box_rows({44, 1}, 256), 0);    // gcd 4
  EXPECT_EQ(prefill_image_box_rows({}, 256), 0);
  EXPECT_EQ(prefill_gemm_smem(0), 230464);  // 4 stages of 128 + 256 rows (the weight's own map)
  EXPECT_EQ(prefill_gemm_smem(256), 230464);
  EXPECT_EQ(prefill_gemm_smem(288), 193584);  // 3 stages of 128 + 288 rows
  for (int box : {0, 288, 320}) EXPECT_LE(prefill_gemm_smem(box), kMaxSmemPerBlock);
}

// The small-M GEMM covers the GPU at Llama-3.1-8B shapes, and its stage ring fills the shared
// memory of the CTAs that share an SM (whole grid resident).
TEST(Codegen, SmallGemmTilingOfLlama8bShapes) {
  SmallGemmLimits one;  // one consumer warpgroup a CTA at every size
  one.warpgroups = 1;
  auto tiling = [](int n, int k, int tokens, bool swiglu, const SmallGemmLimits& limits = {}) {
    const SmallGemmTiling t = small_gemm_tiling(n, k, tokens, swiglu, false, limits);
    return std::array<int, 6>{t.bn, t.tiles_m, t.tiles_n, t.stages, t.smem(), t.warpgroups};
  };
  // o and down: 128 CTAs, two K blocks a stage, a ring of 96 KB of weights (12
  // stages) where the CTA's shared memory holds it (9 stages at 64 tokens); a K block's slot holds
  // 4 KB of weights and the tokens' rows: one 8-row group (1 KB) up to 8 tokens, the 64-row tile
  // (8 KB) beyond; a stage's two barriers 16 bytes.
  EXPECT_EQ(tiling(4096, 4096, 1, false),
            (std::array<int, 6>{32, 1, 128, 12, 12 * (2 * 5120 + 16) + 1024, 1}));
  EXPECT_EQ(small_gemm_tiling(4096, 4096, 1, false).kps, 2);
  EXPECT_EQ(tiling(4096, 14336, 64, false),
            (std::array<int, 6>{32, 1, 128, 9, 9 * (2 * 12288 + 16) + 1024, 1}));
  // qkv: 128 CTAs of 48 rows, one an SM, 8 stages of two K blocks (32-row tiles would make 192
  // CTAs on 132 SMs); with the norm prologue (the QKV fold keeps a tile inside a 128-wide head) 32
  // rows, 192 CTAs, two an SM, one K block a stage. The 1B's qkv (96 tiles of 32 rows) keeps 32.
  EXPECT_EQ(tiling(6144, 4096, 8, false),
            (std::array<int, 6>{48, 1, 128, 8, 8 * (2 * 7168 + 16) + 1024, 1}));
  EXPECT_EQ(tiling(6144, 4096, 64, false)[3], 8);
  const SmallGemmTiling fold = small_gemm_tiling(6144, 4096, 8, false, true);
  EXPECT_EQ(fold.bn, 32);
  EXPECT_EQ(fold.kps, 1);
  EXPECT_EQ(fold.tiles_n, 192);
  EXPECT_EQ(tiling(3072, 2048, 8, false)[0], 32);
  // gate_up: 224 CTAs of 64 gate and 64 up rows, two an SM, 6 stages of 17 KB (16 KB of weights).
  EXPECT_EQ(tiling(14336, 4096, 1, true),
            (std::array<int, 6>{128, 1, 224, 6, 6 * 17424 + 1024, 1}));
  // Where 128-row tiles would leave SMs without a CTA (I = 8192: 128 CTAs), 64-row ones.
  EXPECT_EQ(tiling(8192, 2048, 1, true)[0], 64);
  // The ring never goes below 2 stages nor beyond the K blocks.
  EXPECT_EQ(tiling(128, 128, 1, false)[3], 2);
  EXPECT_EQ(tiling(128, 256, 1, false)[3], 2);  // two stages of two K blocks
  EXPECT_EQ(small_gemm_tiling(128, 256, 1, false).kps, 2);
  // From two M tiles on, on one warpgroup: wider weight tiles of 4 to 8 stages: SwiGLU 128 gate +
  // 128 up rows; the others 128 rows where that gives 88 CTAs or more (2/3 of 132 SMs), else 64,
  // else 32.
  EXPECT_EQ(tiling(14336, 4096, 100, true, one),
            (std::array<int, 6>{256, 2, 112, 4, 4 * 40976 + 1024, 1}));
  EXPECT_EQ(tiling(14336, 4096, 256, true, one),
            (std::array<int, 6>{256, 4, 112, 4, 4 * 40976 + 1024, 1}));
  EXPECT_EQ(tiling(6144, 4096, 256, false, one),
            (std::array<int, 6>{128, 4, 48, 4, 4 * 24592 + 1024, 1}));
  EXPECT_EQ(tiling(4096, 4096, 256, false, one),
            (std::array<int, 6>{128, 4, 32, 8, 8 * 24592 + 1024, 1}));
  EXPECT_EQ(tiling(3072, 2048, 256, false, one)[0], 128);  // Llama-3.2-1B: 96 CTAs
  EXPECT_EQ(tiling(2048, 2048, 256, false, one)[0], 64);   // 128 CTAs of 64 rows, 64 of 128
  EXPECT_EQ(tiling(2048, 2048, 128, false, one)[0], 32);   // two M tiles: 128 CTAs of 32 rows
  // The plan, up to K = 4096: two consumer warpgroups on 128-row M tiles and A boxes (288
  // threads, 32 KB of A a stage at 128 rows), the same weight tiles for SwiGLU and the same
  // stages; the others' weight tiles again the widest that gives 88 CTAs, now on 128-row tiles.
  EXPECT_EQ(tiling(14336, 4096, 100, true),
            (std::array<int, 6>{256, 1, 112, 4, 4 * 49168 + 1024, 2}));
  EXPECT_EQ(tiling(14336, 4096, 256, true),
            (std::array<int, 6>{256, 2, 112, 4, 4 * 49168 + 1024, 2}));
  EXPECT_EQ(tiling(6144, 4096, 256, false),
            (std::array<int, 6>{128, 2, 48, 4, 4 * 32784 + 1024, 2}));
  EXPECT_EQ(tiling(4096, 4096, 256, false),
            (std::array<int, 6>{64, 2, 64, 8, 8 * 24592 + 1024, 2}));
  EXPECT_EQ(tiling(3072, 2048, 256, false)[0], 64);  // Llama-3.2-1B: 96 CTAs
  EXPECT_EQ(tiling(2048, 2048, 256, false)[0], 32);  // 128 CTAs
  EXPECT_EQ(tiling(2048, 2048, 128, false)[0], 32);  // one M tile: 64 CTAs, none narrower
  EXPECT_EQ(small_gemm_tiling(4096, 4096, 256, false).threads(), 288);
  // Deeper K (the downs) stays on one warpgroup (8 stages, clusters below) except where those
  // tiles take clusters of two: then two warpgroups at half the weight tile, still on clusters of
  // two (the 8B's down at 256 tokens).
  EXPECT_EQ(tiling(4096, 14336, 256, false, one),
            (std::array<int, 6>{128, 4, 32, 8, 8 * 24592 + 1024, 1}));
  EXPECT_EQ(tiling(4096, 14336, 256, false),
            (std::array<int, 6>{64, 2, 64, 8, 8 * 24592 + 1024, 2}));
  EXPECT_EQ(small_gemm_tiling(4096, 14336, 256, false).cluster, 2);
  EXPECT_EQ(small_gemm_tiling(4096, 14336, 256, false).w_box(), 32);
  EXPECT_EQ(tiling(4096, 14336, 128, false)[5], 1);  // 64-row tiles of one warpgroup, no cluster
  EXPECT_EQ(tiling(2048, 8192, 256, false)[5], 1);
  EXPECT_EQ(tiling(2048, 2048, 64, false)[0], 32);    // one M tile: the narrow tiles as before
  EXPECT_EQ(tiling(2048, 2048, 64, false)[5], 1);
  EXPECT_EQ(tiling(128, 128, 100, false)[3], 2);      // K = 2 blocks: the ring stays within K
  // One wave of 128-row tiles on four M tiles of one warpgroup (the 8B's down at 256 tokens, and
  // its o on one warpgroup): clusters of two M tiles, each loading 64 of the 128 rows (the weight
  // map's box); nowhere else.
  for (const SmallGemmTiling& t : {small_gemm_tiling(4096, 14336, 256, false, false, one),
                                   small_gemm_tiling(4096, 4096, 256, false, false, one)}) {
    EXPECT_EQ(t.cluster, 2);
    EXPECT_EQ(t.w_box(), 64);
  }
  EXPECT_EQ(small_gemm_tiling(4096, 4096, 256, false).cluster, 1);  // two warpgroups: none
  EXPECT_EQ(small_gemm_tiling(6144, 4096, 256, false, false, one).cluster, 1);  // 192 CTAs
  EXPECT_EQ(small_gemm_tiling(14336, 4096, 256, true, false, one).cluster, 1);  // SwiGLU
  EXPECT_EQ(small_gemm_tiling(2048, 2048, 256, false, false, one).cluster, 1);  // 64-row tiles
  EXPECT_EQ(small_gemm_tiling(4096, 4096, 128, false, false, one).cluster, 1);  // 64-row tiles
  EXPECT_EQ(small_gemm_tiling(4096, 4096, 64, false).cluster, 1);
  EXPECT_EQ(small_gemm_tiling(4096, 14336, 192, false).cluster, 1);  // three M tiles
  EXPECT_EQ(small_gemm_tiling(4096, 14336, 192, false).warpgroups, 1);
  // What a cluster needs of the tiles: it divides the M tiles, and a CTA's slice of a weight tile
  // is whole 8-row groups.
  const SmallGemmTiling o = small_gemm_tiling(4096, 14336, 256, false, false, one);  // 4 M tiles
  EXPECT_TRUE(o.cluster_fits(4));
  EXPECT_FALSE(o.cluster_fits(3));
  EXPECT_FALSE(small_gemm_tiling(4096, 14336, 192, false).cluster_fits(2));
  const SmallGemmTiling narrow = lm_head_tiling(16 * 1001, 2048, 256);  // 16-row tiles, 4 M tiles
  EXPECT_TRUE(narrow.cluster_fits(2));
  EXPECT_FALSE(narrow.cluster_fits(4));  // slices of 4 rows
}

// The small-M W8A8 tiles: the plan's on one warpgroup, no cluster, one K block of 128 columns a
// stage, the weight tile narrowed to divide a 128-row scale block (SwiGLU: its halves dividing I),
// the stages filling the plan's shared memory share up to K's blocks and within a block's.
TEST(Codegen, SmallGemmW8a8Tiling) {
  // The 8B's qkv at 8 tokens: 48-row tiles become 32 (stages of one 8-row A group and 32 W rows of
  // 128 bytes and two barriers, 16 of them: K's 32 blocks beyond the ring's limit).
  const SmallGemmTiling qkv = small_gemm_w8a8_tiling(6144, 4096, 8, false);
  EXPECT_EQ(qkv.bn, 32);
  EXPECT_EQ(qkv.tiles_n, 192);
  EXPECT_EQ(qkv.stages, 16);
  EXPECT_EQ(qkv.smem(), 16 * ((8 + 32) * 128 + 16) + 1024);
  EXPECT_EQ(small_gemm_w8a8_instance(qkv, "bf16", 8, 6144, 4096),
            "telos_kernels::gemm_small_w8a8_bf16<8, 6144, 4096, 32, 16>");
  // The 8B's gate/up at 256 tokens: 128 gate and 128 up rows become 64 and 64.
  const SmallGemmTiling gate_up = small_gemm_w8a8_tiling(14336, 4096, 256, true);
  EXPECT_EQ(gate_up.bn, 128);
  EXPECT_EQ(gate_up.cols, 64);
  EXPECT_EQ(gate_up.tiles_m, 4);
  EXPECT_EQ(gate_up.tiles_n, 224);
  // I = 136: halves of 8 rows (16-row tiles), the only ones dividing both 64 and 136.
  EXPECT_EQ(small_gemm_w8a8_tiling(136, 1040, 5, true).bn, 16);
  // A K of one block: two stages.
  EXPECT_EQ(small_gemm_w8a8_tiling(256, 128, 1, false).stages, 2);
  for (int tokens : {1, 2, 8, 64, 128, 200, 256})
    for (const auto& [n, k, swiglu] : std::vector<std::tuple<int, int, bool>>{{3072, 2048, false},
                                                                              {6144, 4096, false},
                                                                              {4096, 14336, false},
                                                                              {8192, 2048, true},
                                                                              {14336, 4096, true},
                                                                              {136, 1040, true},
                                                                              {520, 144, false}}) {
      const SmallGemmTiling t = small_gemm_w8a8_tiling(n, k, tokens, swiglu);
      const std::string what =
          small_gemm_w8a8_instance(t, swiglu ? "swiglu" : "bf16", tokens, n, k);
      EXPECT_EQ(128 % t.bn, 0) << what;
      EXPECT_TRUE(!swiglu || n % (t.bn / 2) == 0) << what;
      EXPECT_EQ(t.cols, swiglu ? t.bn / 2 : t.bn) << what;
      EXPECT_EQ(t.tiles_n, (n + t.cols - 1) / t.cols) << what;
      EXPECT_EQ(t.tiles_m, (tokens + 63) / 64) << what;
      EXPECT_EQ(t.a_box, std::min(tokens, 64)) << what;
      EXPECT_EQ(t.kps, 1) << what;
      EXPECT_EQ(t.cluster, 1) << what;
      EXPECT_EQ(t.warpgroups, 1) << what;
      EXPECT_EQ(t.threads(), 160) << what;
      EXPECT_GE(t.stages, 2) << what;
      EXPECT_LE(t.stages, std::max(2, (k + 127) / 128)) << what;
      EXPECT_LE(t.smem(), kMaxSmemPerBlock) << what;
    }
}

// The W8A8 LM head's tiles: lm_head_tiling's 128-row weight tiles (one scale block) where the
// projections' small-M tiles take 32, on one warpgroup, the stages of one 128-column K block in the
// bf16 head's shared memory; 256-row tiles (above 64 rows) narrowed to 128.
TEST(Codegen, LmHeadW8a8Tiling) {
  const SmallGemmTiling one = lm_head_w8a8_tiling(128256, 2048, 1);
  EXPECT_EQ(small_gemm_w8a8_tiling(128256, 2048, 1, false).bn, 32);
  EXPECT_EQ(one.bn, 128);
  EXPECT_EQ(one.tiles_n, 1002);
  EXPECT_EQ(one.stages, lm_head_tiling(128256, 2048, 1).stages);
  EXPECT_EQ(one.warpgroups, 1);
  for (int rows : {1, 8, 64, 128, 256}) {
    const SmallGemmTiling t = lm_head_w8a8_tiling(128256, 4096, rows);
    const std::string what = small_gemm_w8a8_instance(t, "f32cand", rows, 128256, 4096);
    EXPECT_EQ(t.bn, 128) << what;
    EXPECT_EQ(t.warpgroups, 1) << what;
    EXPECT_EQ(t.cluster, 1) << what;
    EXPECT_EQ(t.tiles_m, (rows + 63) / 64) << what;
    EXPECT_GE(t.stages, 2) << what;
    EXPECT_LE(t.smem(), kMaxSmemPerBlock) << what;
  }
  // A vocabulary of 16-row multiples only: 16-row tiles, as the bf16 head's.
  EXPECT_EQ(lm_head_w8a8_tiling(16 * 1001, 2048, 1).bn, 16);
}

// Two consumer warpgroups a CTA from a one-warpgroup tiling: 128-row M tiles and A boxes, 288
// threads, the stages that fit, the cluster kept where it still divides the M tiles; the instance
// is the _cl kernel's with WG last.
TEST(Codegen, SmallGemmOnTwoWarpgroups) {
  SmallGemmLimits one;
  one.warpgroups = 1;
  const SmallGemmTiling o = small_gemm_tiling(4096, 4096, 256, false, false, one);  // 128 rows, cl2
  EXPECT_EQ(o.instance("residual", 256, 4096, 4096),
            "telos_kernels::gemm_small_residual_cl<256, 4096, 4096, 128, 8, 2>");
  const SmallGemmTiling t = small_gemm_two_warpgroups(o, 256);
  EXPECT_EQ(t.warpgroups, 2);
  EXPECT_EQ(t.block_m(), 128);
  EXPECT_EQ(t.threads(), 288);
  EXPECT_EQ(t.tiles_m, 2);
  EXPECT_EQ(t.a_box, 128);
  EXPECT_EQ(t.cluster, 2);
  EXPECT_EQ(t.stages, 7);  // 32 KB stages (128 rows of A, 128 of W): 7 fit in 227 KB
  EXPECT_LE(t.smem(), 227 * 1024);
  EXPECT_EQ(t.smem(), 7 * ((128 + 128) * 128 + 16) + 1024);
  EXPECT_EQ(t.instance("residual", 256, 4096, 4096),
            "telos_kernels::gemm_small_residual_cl<256, 4096, 4096, 128, 7, 2, 2>");
  SmallGemmTiling plain = o;
  plain.cluster = 1;
  EXPECT_EQ(plain.instance("residual", 256, 4096, 4096),
            "telos_kernels::gemm_small_residual<256, 4096, 4096, 128, 8>");
  EXPECT_EQ(small_gemm_two_warpgroups(plain, 256).instance("residual", 256, 4096, 4096),
            "telos_kernels::gemm_small_residual_cl<256, 4096, 4096, 128, 7, 1, 2>");
  // The plan's own: 64-row weight tiles, no cluster, 8 stages.
  EXPECT_EQ(small_gemm_tiling(4096, 4096, 256, false).instance("residual", 256, 4096, 4096),
            "telos_kernels::gemm_small_residual_cl<256, 4096, 4096, 64, 8, 1, 2>");
  // 100 rows: one M tile, its box the 100 rows (the other 28 are never loaded); a cluster of two
  // no longer divides the M tiles.
  const SmallGemmTiling r =
      small_gemm_two_warpgroups(small_gemm_tiling(4096, 4096, 200, false, false, one), 100);
  EXPECT_EQ(r.tiles_m, 1);
  EXPECT_EQ(r.a_box, 100);
  EXPECT_EQ(r.cluster, 1);
  EXPECT_THROW(small_gemm_two_warpgroups(small_gemm_tiling(4096, 4096, 64, false), 64), Error);
  EXPECT_THROW(small_gemm_two_warpgroups(small_gemm_tiling(4096, 4096, 8, false, true), 8), Error);
}

// Two K blocks a stage: the instance's trailing KPS, and kps slots a stage behind one barrier pair
// (the same bytes as twice the stages of one block, less 16 a stage).
TEST(Codegen, SmallGemmKBlocksAStage) {
  SmallGemmTiling o = small_gemm_tiling(4096, 4096, 1, false);  // 32 rows
  o.kps = 1;
  o.stages = 16;  // of 5136 B
  const int one = o.smem();
  o.kps = 2;
  o.stages = 8;
  EXPECT_EQ(o.instance("residual", 1, 4096, 4096),
            "telos_kernels::gemm_small_residual<1, 4096, 4096, 32, 8, 2>");
  EXPECT_EQ(o.smem(), one - 8 * 16);
  o.kps = 1;
  EXPECT_EQ(o.instance("residual", 1, 4096, 4096),
            "telos_kernels::gemm_small_residual<1, 4096, 4096, 32, 8>");
}

// The LM head on the small GEMM: in every bucket over the final norm's sample rows (hf) and the
// tied embedding, M tiles of 64 rows along x; weight tiles of 128 rows (1002 for 128256) up to 64
// rows, 256 (501) above, where 256 divides the vocabulary; else the largest of 128, 64, 32, 16
// dividing it. The sampler's greedy rows take the bucket's candidate count.
TEST(Codegen, LmHeadRunsOnTheSmallGemm) {
  const KernelPlan plan = plan_kernels(llama_1b());
  int seen = 0;
  for (const BucketProgram& b : plan.buckets)
    for (const Launch& l : b.launches) {
      const std::string& instance = plan.kernels[l.kernel].instance;
      if (instance.find("gemm_small_f32cand") == std::string::npos) continue;
      const int S = b.sample_rows, box = std::min(S, 64), bn = S > 64 ? 256 : 128;
      const SmallGemmTiling t = lm_head_tiling(128256, 2048, S);
      EXPECT_EQ(t.stages, S > 64 ? 4 : t.stages);
      EXPECT_EQ(instance, "telos_kernels::gemm_small_f32cand<" + std::to_string(S) +
                              ", 128256, 2048, " + std::to_string(bn) + ", " +
                              std::to_string(t.stages) + ">");
      EXPECT_EQ(l.grid, (std::array<int, 3>{(S + 63) / 64, 128256 / bn, 1})) << instance;
      EXPECT_EQ(l.args,
                (std::vector<std::string>{
                    "tmap:buf:hf:" + std::to_string(S) + ":2048:" + std::to_string(box) + ":64",
                    "tmap:w:embed:128256:2048:" + std::to_string(bn) + ":64", "buf:logits",
                    "buf:lm_cand"}))
          << instance;
      EXPECT_EQ(plan.kernels[l.kernel].dynamic_smem, t.smem()) << instance;
      // The sampler after it reads this bucket's candidate count a row.
      const std::string& sample = plan.kernels[b.launches.back().kernel].instance;
      EXPECT_EQ(sample.rfind("telos_kernels::sample<128256, ", 0), 0u) << sample;
      EXPECT_NE(sample.find(", " + std::to_string(128256 / bn) + ", "), std::string::npos)
          << sample;
      ++seen;
    }
  EXPECT_EQ(seen, static_cast<int>(plan.buckets.size()));
  EXPECT_EQ(lm_head_tiling(512, 128, 1).bn, 128);
  EXPECT_EQ(lm_head_tiling(528, 128, 1).bn, 16);
  EXPECT_EQ(lm_head_tiling(151936, 1536, 64).bn, 128);  // Qwen2.5
  EXPECT_EQ(lm_head_tiling(151936, 1536, 64).tiles_n, 1187);
  EXPECT_EQ(lm_head_tiling(151936, 1536, 256).bn, 128);  // 256 does not divide it
  EXPECT_EQ(lm_head_tiling(128256, 4096, 65).bn, 256);
  EXPECT_EQ(lm_head_tiling(128256, 4096, 64).bn, 128);
  EXPECT_EQ(lm_head_tiling(512, 64, 256).stages, 2);  // one K block: the fewest stages
  // The 256-row tiles on two consumer warpgroups up to a hidden size of 4096 (4 stages of 48 KB).
  const SmallGemmTiling two = lm_head_tiling(128256, 4096, 256);
  EXPECT_EQ(two.warpgroups, 2);
  EXPECT_EQ(two.tiles_m, 2);
  EXPECT_EQ(two.stages, 4);
  EXPECT_EQ(two.instance("f32cand", 256, 128256, 4096),
            "telos_kernels::gemm_small_f32cand_cl<256, 128256, 4096, 256, 4, 1, 2>");
  EXPECT_EQ(lm_head_tiling(128256, 4096, 256, 1).warpgroups, 1);
  EXPECT_EQ(lm_head_tiling(128256, 4096, 256, 1).tiles_m, 4);
  EXPECT_EQ(lm_head_tiling(128256, 8192, 256).warpgroups, 1);
  EXPECT_EQ(lm_head_tiling(128256, 4096, 64).warpgroups, 1);
  EXPECT_THROW(lm_head_tiling(1000, 128, 1), Error);
}

TEST(Codegen, AttentionSplitIsAPerModelConstant) {
  // Splits of 256 positions; a slot per split up to 32 of them, then splits share slots.
  EXPECT_EQ(attn_partial_slots(256), 1);
  EXPECT_EQ(attn_partial_slots(257), 2);
  EXPECT_EQ(attn_partial_slots(4096), 16);
  EXPECT_EQ(attn_partial_slots(8192), 32);
  EXPECT_EQ(attn_partial_slots(8193), 32);
  EXPECT_EQ(attn_partial_slots(131072), 32);
  EXPECT_EQ(attn_partial_slots(200), 1);
  const KernelPlan plan = plan_kernels(llama_1b());
  EXPECT_EQ(plan.attn_split, kAttnSplit);
  EXPECT_EQ(plan.attn_num_splits, 32);
  for (const BucketProgram& b : plan.buckets)
    for (const Launch& l : b.launches)
      if (plan.kernels[l.kernel].instance.find("attn_split") != std::string::npos) {
        // Prefill: tiles of 4 over the first max_batch (64) rows, the generated ones.
        EXPECT_EQ(l.grid[0], b.kind == "prefill" ? 64 / 4 : b.tokens);
        EXPECT_EQ(l.grid[1], 8);
        EXPECT_EQ(l.grid[2], attn_grid_slots(l.grid[0], 8, 32));
        EXPECT_EQ(plan.kernels[l.kernel].block, 128);
      }
}

// The attention partials (part_o, part_ml) hold the rows the split kernels write: a prefill
// bucket's generated rows (at most max_batch) where its prompt rows run attn_prefill, every row
// with an e4m3 cache (attn_prefill reads bf16 pages), one in the one-token layer.
TEST(Codegen, AttentionPartialsHoldTheSplitRowsOnly) {
  auto partial_bytes = [](const KernelPlan& plan) {
    for (const ArenaBuffer& b : plan.arena)
      if (b.name == "part_o") return b.bytes;
    return std::int64_t{-1};
  };
  TestModel in = llama_1b();  // max_batch 64, a 512-token prefill bucket
  const std::int64_t row = 32LL * 32 * 64 * 4;  // heads x slots x head_dim f32
  const KernelPlan bf16 = plan_kernels(in);
  EXPECT_EQ(bf16.max_tokens, 512);
  EXPECT_EQ(partial_bytes(bf16), 64 * row);
  for (const BucketProgram& b : bf16.buckets)
    EXPECT_EQ(b.split_rows, b.kind == "prefill" ? 64 : b.tokens) << b.kind << ":" << b.size;
  in.serving.kv_dtype = DType::E4M3;
  in.serving.kv_k_scales = in.serving.kv_v_scales = std::vector<float>(16, 1.f);
  EXPECT_EQ(partial_bytes(plan_kernels(in)), 512 * row);
}

// The serving config's attention_split 512: half the partial slots (16 at max_seq_len 8192), the
// split and its slots in every attention instance (attn_split, attn_combine, the one-token
// layer's), nothing else of the plan changed; any other value is refused by name.
TEST(Codegen, AttentionSplitFromTheServingConfig) {
  EXPECT_EQ(attn_partial_slots(512, kAttnSplitLong), 1);
  EXPECT_EQ(attn_partial_slots(513, kAttnSplitLong), 2);
  EXPECT_EQ(attn_partial_slots(8192, kAttnSplitLong), 16);
  EXPECT_EQ(attn_partial_slots(131072, kAttnSplitLong), 32);
  TestModel in = llama_1b();
  in.serving.attention_split = kAttnSplitLong;
  const KernelPlan base = plan_kernels(llama_1b()), plan = plan_kernels(in);
  EXPECT_EQ(plan.attn_split, 512);
  EXPECT_EQ(plan.attn_num_splits, 16);
  ASSERT_EQ(plan.kernels.size(), base.kernels.size());
  int attention = 0;
  for (size_t i = 0; i < plan.kernels.size(); ++i) {
    const std::string& inst = plan.kernels[i].instance;
    if (inst.find("attn_split<") != std::string::npos ||
        inst.find("decode_layer_persistent<") != std::string::npos) {
      EXPECT_NE(inst.find(", 512, 16, "), std::string::npos) << inst;
      EXPECT_EQ(base.kernels[i].instance.find(", 512, 16, "), std::string::npos);
      ++attention;
    } else if (inst.find("attn_combine") != std::string::npos) {
      EXPECT_NE(inst.find("<32, 64, 16, 512>"), std::string::npos) << inst;
      ++attention;
    } else {
      EXPECT_EQ(inst, base.kernels[i].instance);
    }
  }
  EXPECT_GT(attention, 2);
  in.serving.attention_split = 384;
  try {
    plan_kernels(in);
    ADD_FAILURE() << "split 384 accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("serving.attention_split must be 256 or 512"),
              std::string::npos)
        << e.what();
  }
}

// attn_split's grid along the slots: about kAttnSplitGridBlocks blocks a bucket, each slot still
// computed (a block runs slots z, z + S, ...), never more blocks a (tile, KV head) than slots.
TEST(Codegen, AttentionGridSlotsPerBucket) {
  EXPECT_EQ(kAttnSplitGridBlocks, 4096);
  EXPECT_EQ(attn_grid_slots(1, 8, 32), 32);   // batch 1: every slot in parallel
  EXPECT_EQ(attn_grid_slots(16, 8, 32), 32);  // 128 pairs: 4096 blocks
  EXPECT_EQ(attn_grid_slots(64, 8, 32), 8);   // 512 pairs
  EXPECT_EQ(attn_grid_slots(48, 8, 32), 11);  // 384 pairs: 10.7 rounded up
  EXPECT_EQ(attn_grid_slots(256, 8, 32), 2);
  EXPECT_EQ(attn_grid_slots(512, 8, 32), 1);  // 4096 pairs already
  EXPECT_EQ(attn_grid_slots(2048, 8, 32), 1);
  EXPECT_EQ(attn_grid_slots(1, 8, 3), 3);     // a short model: its own slots
  EXPECT_EQ(attn_grid_slots(256, 2, 32), 8);  // fewer KV heads, more slots a pair
}

// Prefill attention reads K/V once per tile of TPT tokens: the largest power of two with
// TPT * G <= 16 that divides the bucket; decode keeps one token per block.
TEST(Codegen, AttentionTokensPerTile) {
  EXPECT_EQ(attn_tokens_per_tile(true, 512, 4), 4);   // Llama (GQA 32/8)
  EXPECT_EQ(attn_tokens_per_tile(true, 512, 2), 8);   // Qwen3-0.6B (16/8)
  EXPECT_EQ(attn_tokens_per_tile(true, 512, 16), 1);
  EXPECT_EQ(attn_tokens_per_tile(true, 512, 1), 16);
  EXPECT_EQ(attn_tokens_per_tile(true, 512, 3), 4);   // 12 of the 16 rows
  EXPECT_EQ(attn_tokens_per_tile(true, 512, 8), 2);
  EXPECT_EQ(attn_tokens_per_tile(true, 6, 2), 2);     // tiles must be whole
  EXPECT_EQ(attn_tokens_per_tile(true, 97, 1), 1);
  EXPECT_EQ(attn_tokens_per_tile(false, 64, 4), 1);  // decode: one token per sequence

  // Llama-3.2-1B (G = 4): the prefill bucket's attn_split has TPT = 4 (the last template
  // argument) and a grid of max_batch / 4 tiles (the generated rows; attn_prefill has the prompt
  // rows); the decode buckets' has TPT = 1 and one block per token, and loads ahead (LOAD_AHEAD,
  // two blocks an SM) in buckets of at most kAttnSplitAheadMaxRows tokens and from
  // kAttnSplitBulkMinRows rows on (decode:64) streams through the BULK ring, and every decode
  // bucket's waits for its predecessor inside its items (EARLY, the last argument); the prefill
  // bucket's 64 split rows in tiles of 4 run four blocks an SM and wait at entry. The others load a
  // split's page ids when it starts (PAGE_AHEAD: pages of 16 positions).
  const KernelPlan plan = plan_kernels(llama_1b());
  const std::string prefix = "telos_kernels::attn_split<32, 8, 64, 16, 512, " +
                             std::to_string(2LL * 16 * 8 * 16 * 64) + "ll, 256, 32, " +
                             float_literal(1.4426950408889634 / 8.0) + ", ";
  int seen_prefill = 0, seen_decode = 0;
  for (const BucketProgram& b : plan.buckets)
    for (const Launch& l : b.launches) {
      const std::string& instance = plan.kernels[l.kernel].instance;
      if (instance.find("attn_split") == std::string::npos) continue;
      if (b.kind == "prefill") {
        EXPECT_EQ(instance, prefix + "4, false, true, 4>");      // 64 split rows: four blocks an SM
        EXPECT_EQ(l.grid, (std::array<int, 3>{64 / 4, 8, 32}));  // 128 pairs, every slot
        ++seen_prefill;
      } else {
        EXPECT_EQ(instance,
                  prefix + (b.tokens <= kAttnSplitAheadMaxRows  ? "1, true, true, 0, 0, true>"
                            : b.tokens >= kAttnSplitBulkMinRows ? "1, false, false, 0, 2, true>"
                                                                : "1, false, true, 0, 0, true>"));
        EXPECT_EQ(l.grid, (std::array<int, 3>{b.tokens, 8, b.tokens == 64 ? 8 : 32}));
        ++seen_decode;
      }
    }
  EXPECT_EQ(seen_prefill, 16);     // one a layer
  EXPECT_EQ(seen_decode, 2 * 16);  // three decode buckets, decode:1's layers persistent
  EXPECT_TRUE(attn_split_page_ahead(16));
  EXPECT_FALSE(attn_split_page_ahead(8));  // a 16-position chunk would span two pages
}

// BULK in the plan (kAttnSplitBulkMinRows): decode buckets of 16 rows or more, one token a tile,
// where the ring fits (attn_split_bulk_fits: pages of 16, G up to 6, Qwen2.5-1.5B's included),
// stream their chunks through kAttnSplitBulk ring slots a warp at three blocks an SM, without
// PAGE_AHEAD, with the ring as the kernel's dynamic shared memory; the others keep their loads
// (G = 8: four blocks an SM from kAttnSplitFourBlocksMinRows rows).
TEST(Codegen, AttnSplitBulkInBucketsOfSixteenRowsOrMore) {
  auto split_kernels = [](const TestModel& in) {
    std::map<int, KernelInstance> by_bucket;  // decode bucket size -> its attn_split
    const KernelPlan plan = plan_kernels(in);
    for (const BucketProgram& b : plan.buckets)
      for (const Launch& l : b.launches)
        if (b.kind == "decode" &&
            plan.kernels[l.kernel].instance.find("attn_split<") != std::string::npos)
          by_bucket[b.size] = plan.kernels[l.kernel];
    return by_bucket;
  };
  auto ends_with = [](const std::string& s, const std::string& tail) {
    return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
  };
  TestModel in = llama_1b();
  in.serving.decode_buckets = {1, 8, 15, 16, 32, 63, 64};
  const auto llama = split_kernels(in);
  for (const int size : {8, 15, 16, 32, 63, 64}) {
    const KernelInstance& k = llama.at(size);
    const bool bulk = size >= kAttnSplitBulkMinRows;
    EXPECT_EQ(
        ends_with(k.instance, "1, false, false, 0, " + std::to_string(kAttnSplitBulk) + ", true>"),
        bulk)
        << k.instance;
    EXPECT_EQ(k.dynamic_smem, bulk ? attn_split_ring_bytes(16, 64, kAttnSplitBulk) : 0) << size;
  }
  TestModel g8 = in;  // 8 query heads a KV head: no ring, four blocks an SM from 64 rows
  g8.spec.num_kv_heads = 4;
  ASSERT_FALSE(attn_split_bulk_fits(16, 8));
  EXPECT_TRUE(ends_with(split_kernels(g8).at(32).instance, "1, false, true, 0, 0, true>"));
  EXPECT_TRUE(ends_with(split_kernels(g8).at(64).instance, "1, false, true, 4, 0, true>"));

  TestModel qwen = in;  // Qwen2.5-1.5B's heads: 12 query heads on 2 KV heads of 128 dims
  qwen.spec.num_heads = 12;
  qwen.spec.num_kv_heads = 2;
  qwen.spec.head_dim = 128;
  qwen.spec.hidden_size = 1536;
  ASSERT_FALSE(attn_split_four_blocks(128, 6));
  EXPECT_TRUE(ends_with(split_kernels(qwen).at(64).instance, "1, false, false, 0, 2, true>"));
  EXPECT_EQ(split_kernels(qwen).at(64).dynamic_smem, attn_split_ring_bytes(16, 128, 2));

  TestModel pages8 = in;  // a chunk of 16 positions spans two pages: no BULK
  pages8.serving.kv_page_size = 8;
  EXPECT_EQ(split_kernels(pages8).at(32).dynamic_smem, 0);
  EXPECT_FALSE(attn_split_bulk_fits(8, 4));
  EXPECT_TRUE(attn_split_bulk_fits(16, 6));
  EXPECT_FALSE(attn_split_bulk_fits(16, 8));  // two blocks an SM: the test below
}

// EARLY (attn_split's PDL wait inside its items) only in decode buckets of one token a tile up to
// kAttnSplitEarlyMaxRows rows: a prefill bucket's split rows may be several tokens of one sequence,
// whose K/V the step itself writes; the instance names it last, after BLOCKS and BULK.
TEST(Codegen, AttnSplitEarlyInDecodeBucketsOnly) {
  const AttnSplitKernel k{32, 8, 128, 16, 512, 2LL * 2 * 8 * 16 * 128, 256, 32, 1};
  EXPECT_TRUE(attn_split_for_rows(k, 1, true).early);
  EXPECT_TRUE(attn_split_for_rows(k, kAttnSplitEarlyMaxRows, true).early);
  EXPECT_FALSE(attn_split_for_rows(k, kAttnSplitEarlyMaxRows + 1, true).early);
  EXPECT_FALSE(attn_split_for_rows(k, 8, false).early);
  AttnSplitKernel tiled = k;
  tiled.tpt = 4;
  EXPECT_FALSE(attn_split_for_rows(tiled, 8, true).early);
  const std::string name = attn_split_for_rows(k, 8, true).instance();
  EXPECT_TRUE(name.ends_with(", 1, true, true, 0, 0, true>")) << name;
  const std::string late = attn_split_for_rows(k, 128, true).instance();
  EXPECT_TRUE(late.ends_with(", 1, false, false, 0, 2>")) << late;
}

// On an e4m3 cache, buckets of fewer than kAttnSplitAheadThreeBlocksMinRows split rows stream
// through the BULK ring where it fits (pages of 16, G <= 6), and from there to
// kAttnSplitAheadMaxRows LOAD_AHEAD runs three blocks an SM (its chunk in flight holds half a bf16
// chunk's registers); a bf16 cache, and a group the ring does not fit, load ahead at two (blocks 0:
// the kernel's default with LOAD_AHEAD).
TEST(Codegen, AttnSplitOnE4m3StreamsFewRowsAndLoadsAheadFromFour) {
  AttnSplitKernel k{32, 8, 128, 16, 512, 2LL * 2 * 8 * 16 * 128, 256, 32, 1};
  for (int rows : {1, kAttnSplitAheadThreeBlocksMinRows}) {
    const AttnSplitKernel a = attn_split_for_rows(k, rows, true);
    EXPECT_TRUE(a.ahead && a.bulk == 0 && a.blocks == 0) << rows;
  }
  k.kv = kv_format(true, 1.f, 1.f);
  for (int rows = 1; rows <= kAttnSplitAheadMaxRows; ++rows) {
    const AttnSplitKernel a = attn_split_for_rows(k, rows, true);
    const bool few = rows < kAttnSplitAheadThreeBlocksMinRows;
    EXPECT_EQ(a.ahead, !few) << rows;
    EXPECT_EQ(a.pages, !few) << rows;
    EXPECT_EQ(a.bulk, few ? kAttnSplitBulk : 0) << rows;
    EXPECT_EQ(a.blocks, few ? 0 : 3) << rows;
    EXPECT_TRUE(a.early) << rows;
  }
  EXPECT_EQ(attn_split_for_rows(k, 1, true).instance(),
            "telos_kernels::attn_split<32, 8, 128, 16, 512, 65536ll, 256, 32, 0.127517432f, 1, "
            "false, false, 0, 2, true, telos_kernels::KvE4m3<1.0f, 1.0f>>");
  EXPECT_EQ(attn_split_for_rows(k, 8, true).instance(),
            "telos_kernels::attn_split<32, 8, 128, 16, 512, 65536ll, 256, 32, 0.127517432f, 1, "
            "true, true, 3, 0, true, telos_kernels::KvE4m3<1.0f, 1.0f>>");
  EXPECT_FALSE(attn_split_for_rows(k, kAttnSplitAheadMaxRows + 1, true).ahead);
  AttnSplitKernel g8{64, 8, 128, 16, 512, 2LL * 2 * 8 * 16 * 128, 256, 32, 1};
  g8.kv = k.kv;
  const AttnSplitKernel a = attn_split_for_rows(g8, 1, true);
  EXPECT_TRUE(a.ahead && a.bulk == 0 && a.blocks == 0);
}

// Prompt and generated tokens (docs/artifact.md): in a prefill bucket the split kernels read
// desc:split_positions and attn_prefill (after them, tiles of 32 tokens at G = 4) writes the prompt
// rows from desc:prompt_positions; decode buckets keep desc:positions; a head dim attn_prefill does
// not take (32, the tiny fixtures') keeps the split kernels on desc:positions everywhere.
TEST(Codegen, PromptRowsOfPrefillBucketsRunOnAttnPrefill) {
  EXPECT_TRUE(attn_prefill_fits(64, 4));
  EXPECT_TRUE(attn_prefill_fits(128, 6));
  EXPECT_FALSE(attn_prefill_fits(32, 2));
  EXPECT_EQ(attn_prefill_tokens_per_tile(512, 4), 32);
  EXPECT_EQ(attn_prefill_tokens_per_tile(512, 6), 16);  // 96 of the 128 rows
  EXPECT_EQ(attn_prefill_tokens_per_tile(16, 2), 16);   // tiles must be whole
  // Persistent where K/V come by TMA and two segment tables fit: not with pages of 7, nor at D 128
  // with 128 tokens a tile (MHA); at most one CTA an SM.
  EXPECT_TRUE(attn_prefill_persistent_fits(128, 16, 64));
  EXPECT_TRUE(attn_prefill_persistent_fits(64, 16, 128));
  EXPECT_FALSE(attn_prefill_persistent_fits(128, 16, 128));
  EXPECT_FALSE(attn_prefill_persistent_fits(128, 7, 32));
  EXPECT_EQ(attn_prefill_persistent_grid(8, 16), 128);
  EXPECT_EQ(attn_prefill_persistent_grid(8, 128), 132);
  const auto positions_arg = [](const KernelPlan& plan, const Launch& l) {
    const std::vector<std::string>& params = plan.kernels[l.kernel].params;
    const auto at = std::find(params.begin(), params.end(), "positions") - params.begin();
    return at < static_cast<long>(l.args.size()) ? l.args[at] : std::string("(none)");
  };
  {
    const KernelPlan plan = plan_kernels(llama_1b());
    int prompt_launches = 0;
    for (const BucketProgram& b : plan.buckets)
      for (std::size_t i = 0; i < b.launches.size(); ++i) {
        const Launch& l = b.launches[i];
        const std::string& instance = plan.kernels[l.kernel].instance;
        if (instance.find("attn_prefill") != std::string::npos) {
          ASSERT_EQ(b.kind, "prefill");
          EXPECT_EQ(positions_arg(plan, l), "desc:prompt_positions");
          // Persistent (512 / 32 tiles of each of 8 KV heads on 128 CTAs).
          EXPECT_NE(instance.find(", 32, 16>"), std::string::npos) << instance;
          EXPECT_EQ(l.grid, (std::array<int, 3>{8 * 512 / 32, 1, 1}));
          EXPECT_EQ(plan.kernels[l.kernel].block, kAttnPrefillThreads);
          EXPECT_EQ(plan.kernels[l.kernel].dynamic_smem, attn_prefill_smem(64));
          ASSERT_GE(i, 2u);  // after the split kernels, whose zeros it overwrites for prompt rows
          EXPECT_NE(plan.kernels[b.launches[i - 1].kernel].instance.find("attn_combine"),
                    std::string::npos);
          ++prompt_launches;
        } else if (instance.find("attn_split") != std::string::npos ||
                   instance.find("attn_combine") != std::string::npos) {
          EXPECT_EQ(positions_arg(plan, l),
                    b.kind == "prefill" ? "desc:split_positions" : "desc:positions");
        }
      }
    EXPECT_EQ(prompt_launches, 16);  // one a layer of the one prefill bucket
  }
  {
    const KernelPlan plan = plan_kernels(tiny("llama"));
    for (const BucketProgram& b : plan.buckets)
      for (const Launch& l : b.launches) {
        const std::string& instance = plan.kernels[l.kernel].instance;
        EXPECT_EQ(instance.find("attn_prefill"), std::string::npos);
        if (instance.find("attn_split") != std::string::npos) {
          EXPECT_EQ(positions_arg(plan, l), "desc:positions");
        }
      }
  }
}

// A prefill step's generated rows are its first, at most max_batch of them (the engine packs them
// so: executor/gpu/step_descriptor.hpp): the split kernels of a prefill bucket that has
// attn_prefill cover min(T, max_batch) rows (attn_split in whole tiles of TPT), not the bucket's T;
// decode buckets, and prefill buckets without attn_prefill (head dim 32), keep all T rows.
TEST(Codegen, SplitKernelsOfPrefillBucketsCoverTheGeneratedRowsOnly) {
  // {attn_split's grid x, attn_combine's grid x} of each bucket, by kind and size; checks that
  // every layer of a bucket has the same.
  const auto split_grids = [](const KernelPlan& plan) {
    std::map<std::pair<std::string, int>, std::pair<int, int>> grids;
    for (const BucketProgram& b : plan.buckets) {
      std::set<int> split, combine;
      for (const Launch& l : b.launches) {
        const std::string& instance = plan.kernels[l.kernel].instance;
        if (instance.find("attn_split<") != std::string::npos) split.insert(l.grid[0]);
        if (instance.find("attn_combine<") != std::string::npos) combine.insert(l.grid[0]);
      }
      if (split.empty() && combine.empty()) continue;  // decode_layer_persistent
      EXPECT_EQ(split.size(), 1u) << b.kind << " " << b.size;
      EXPECT_EQ(combine.size(), 1u) << b.kind << " " << b.size;
      grids[{b.kind, b.size}] = {*split.begin(), *combine.begin()};
    }
    return grids;
  };
  using Grids = std::map<std::pair<std::string, int>, std::pair<int, int>>;
  TestModel in = llama_1b();  // G = 4: TPT 4 in prefill buckets; max_batch 64
  in.serving.prefill_buckets = {32, 512};
  EXPECT_EQ(split_grids(plan_kernels(in)),
            (Grids{{{"prefill", 512}, {64 / 4, 64}},
                   {{"prefill", 32}, {32 / 4, 32}},  // T below max_batch: all T rows
                   {{"decode", 6}, {6, 6}},
                   {{"decode", 64}, {64, 64}}}));
  // max_batch 6: two tiles of 4 rows, the second's last two rows prompt or padding (-1 in
  // desc:split_positions, written by no split kernel).
  in.serving.max_batch = 6;
  in.serving.decode_buckets = {1, 6};
  EXPECT_EQ(
      split_grids(plan_kernels(in)),
      (Grids{{{"prefill", 512}, {2, 6}}, {{"prefill", 32}, {2, 6}}, {{"decode", 6}, {6, 6}}}));
  // Head dim 32 (attn_prefill does not take it): the split kernels have every row of every bucket.
  const KernelPlan tiny_plan = plan_kernels(tiny("llama"));
  for (const auto& [bucket, grid] : split_grids(tiny_plan)) {
    const int tpt = attn_tokens_per_tile(bucket.first == "prefill", bucket.second, 2);
    EXPECT_EQ(grid, std::make_pair(bucket.second / tpt, bucket.second))
        << bucket.first << " " << bucket.second;
  }
}

// The persistent decode kernel runs attention's work items on its consumer warpgroup (threads
// 0..127) while another warp of the block does something else, so the bodies must synchronize
// through the barrier they are given, never the whole block (a bar.sync 0 there would wait for
// the other warp forever). Two kernels of that shape at Llama-3.1-8B's sizes (D = 128: the
// combine's D threads are the warpgroup) run the items in grid-stride loops with warp 4 gone.
TEST(Codegen, AttentionBodiesRunOnANamedBarrier) {
  const std::string source = R"(#include "attention.cuh"
#include "hexel/sync.cuh"
namespace telos_test {
using telos_kernels::bf16;
template <int HQ, int HKV, int D, int PAGE, int MAXP, long long PAGE_ELEMS, int SPLIT, int NSPLIT,
          float SCALE_LOG2, int TPT>
__global__ void __launch_bounds__(160) split_items(const float* q, const int* positions,
    const int* token_seq, const int* page_tables, const bf16* kv_layer, float* part_o,
    float* part_ml, const int* tiles) {
  if (threadIdx.x >= 128) return;
  for (int i = blockIdx.x; i < tiles[0] * HKV * NSPLIT; i += gridDim.x)
    telos_kernels::attn_split_block<HQ, HKV, D, PAGE, MAXP, PAGE_ELEMS, SPLIT, NSPLIT, SCALE_LOG2,
                                    TPT>(i / (HKV * NSPLIT), i / NSPLIT % HKV, i % NSPLIT, q,
        positions, token_seq, page_tables, kv_layer, part_o, part_ml,
        [] { hexel::named_barrier_sync(1, 128); });
}
template <int HQ, int D, int NSPLIT, int SPLIT>
__global__ void __launch_bounds__(160) combine_rows(const float* part_o, const float* part_ml,
    const int* positions, bf16* out, const int* tokens) {
  if (threadIdx.x >= D) return;
  const auto sync = [] { hexel::named_barrier_sync(1, D); };
  for (int i = blockIdx.x; i < tokens[0] * HQ; i += gridDim.x) {
    telos_kernels::attn_combine_row<HQ, D, NSPLIT, SPLIT>(i / HQ, i % HQ, part_o, part_ml,
                                                          positions, out, sync);
    sync();
  }
}
}  // namespace telos_test
)";
  const std::vector<std::string> names = {
      "telos_test::split_items<32, 8, 128, 16, 528, 262144ll, 256, 32, 0.127517432f, 1>",
      "telos_test::combine_rows<32, 128, 32, 256>"};
  const CompiledModule m = compile_module(source, "sm_90a", names, "");
  const std::regex whole_block(R"(bar(rier)?\.sync(\.aligned)?\s+0\s*;)");
  for (const auto& name : names) {
    const std::string entry = m.lowered.at(name);
    const std::string body = ptx_function(m.ptx, entry);
    ASSERT_FALSE(body.empty()) << name;
    EXPECT_NE(body.find("bar.sync"), std::string::npos) << name;
    EXPECT_FALSE(std::regex_search(body, whole_block)) << name;
    const KernelResources& r = m.resources.at(entry);
    EXPECT_EQ(r.spill_stores, 0) << name;
    EXPECT_EQ(r.stack_frame, 0) << name;
  }
}

// compile_modules (the GPU tests' and the kernel bench's parallel compiles): names i, i + parts,
// ... in module i, each module reporting its own kernels; more parts than names give a module a
// name; a name that does not compile throws, naming NVRTC's complaint.
TEST(Codegen, CompileModulesSplitsTheNamesOverModules) {
  const std::string eps = float_literal(1e-5);
  std::vector<std::string> names;
  for (int h : {128, 256, 512, 1024, 2048})
    names.push_back("telos_kernels::rmsnorm<" + std::to_string(h) + ", " + eps + ", false>");
  const std::vector<CompiledModule> ms =
      compile_modules("#include \"norm.cuh\"\n", "sm_90a", names, "", 3);
  ASSERT_EQ(ms.size(), 3u);
  for (int i = 0; i < 5; ++i) {
    const CompiledModule& m = ms[i % 3];
    ASSERT_EQ(m.lowered.count(names[i]), 1u) << names[i];
    EXPECT_EQ(m.resources.count(m.lowered.at(names[i])), 1u) << names[i];
    EXPECT_EQ(ms[(i + 1) % 3].lowered.count(names[i]), 0u) << names[i];
  }
  EXPECT_EQ(ms[2].lowered.size(), 1u);
  EXPECT_EQ(compile_modules("#include \"norm.cuh\"\n", "sm_90a", names, "", 16).size(), 5u);
  std::vector<std::string> bad = names;
  bad.push_back("telos_kernels::no_such_kernel<1>");
  EXPECT_THROW(compile_modules("#include \"norm.cuh\"\n", "sm_90a", bad, "", 2), Error);
}

// attn_split four blocks an SM (128 registers) wherever attn_split_four_blocks allows it: head dim
// 128 at G = 2, 4, 8 and head dim 64 at G = 1-16, one token a block and in the plan's tiles
// (attn_tokens_per_tile: the largest power of two with TPT · G <= 16), compile without spills; and
// the rule refuses the shapes that spill under ptxas (G = 6 and 16 at head dim 128).
TEST(Codegen, AttnSplitFourBlocksCompileWithoutSpills) {
  std::vector<std::string> names;
  for (int d : {64, 128})
    for (int g : {1, 2, 3, 4, 6, 8, 16}) {
      if (!attn_split_four_blocks(d, g)) continue;
      for (int tpt : {1, attn_tokens_per_tile(true, 1024, g)}) {
        AttnSplitKernel k{2 * g, 2, d, 16, 528, 2LL * 2 * 2 * 16 * d, 256, 32, tpt};
        k.pages = true;
        k.blocks = 4;
        names.push_back(k.instance());
      }
    }
  EXPECT_EQ(names.size(), 2u * 7 + 2u * 3);
  const CompiledModule m = compile_module("#include \"attention.cuh\"\n", "sm_90a", names, "");
  for (const auto& name : names) {
    const KernelResources& r = m.resources.at(m.lowered.at(name));
    EXPECT_EQ(r.stack_frame, 0) << name;
    EXPECT_EQ(r.spill_stores, 0) << name;
    EXPECT_LE(r.registers, 128) << name;
  }
  EXPECT_FALSE(attn_split_four_blocks(128, 6));
  EXPECT_FALSE(attn_split_four_blocks(128, 16));
  EXPECT_FALSE(attn_split_four_blocks(128, 1));
}

// attn_split on an e4m3 KV cache (KvE4m3, kernels/common.cuh; scales 1 and not) in every load
// scheme the plan takes (LOAD_AHEAD with PAGE_AHEAD at two and at three blocks an SM, BULK, four
// blocks an SM where attn_split_four_blocks allows it, tiles), at head dims 32 to 128 (each width
// of the V loads) and pages of 7: no spills, no stack frame, registers within the blocks an SM;
// the BULK ring is half the bf16 one.
TEST(Codegen, AttnSplitE4m3FormsCompileWithoutSpills) {
  struct Case {
    int hq, d, page, tpt;
    bool ahead, pages;
    int blocks, bulk;
  };
  const Case cases[] = {{8, 128, 16, 1, true, true, 0, 0},  {8, 128, 16, 1, false, false, 3, 2},
                        {32, 128, 16, 1, true, true, 3, 0}, {8, 64, 16, 1, true, true, 3, 0},
                        {8, 128, 16, 4, false, true, 4, 0}, {8, 64, 16, 1, false, true, 4, 0},
                        {8, 32, 16, 4, false, true, 0, 0},  {6, 96, 16, 2, false, false, 0, 0},
                        {12, 128, 7, 1, true, false, 0, 0}, {12, 128, 16, 1, false, false, 3, 2}};
  std::vector<std::string> names;
  for (const Case& c : cases)
    for (const std::string& kv : {kv_format(true, 1.f, 1.f), kv_format(true, 0.3f, 5.f)}) {
      AttnSplitKernel k{c.hq, 2, c.d, c.page, 528, 2LL * 2 * 2 * c.page * c.d, 256, 32, c.tpt};
      k.ahead = c.ahead, k.pages = c.pages, k.blocks = c.blocks, k.bulk = c.bulk, k.kv = kv;
      names.push_back(k.instance());
    }
  EXPECT_EQ(names[0],
            "telos_kernels::attn_split<8, 2, 128, 16, 528, 16384ll, 256, 32, 0.127517432f, 1, "
            "true, true, 0, 0, false, telos_kernels::KvE4m3<1.0f, 1.0f>>");
  EXPECT_EQ(kv_format(true, 0.3f, 5.f), "telos_kernels::KvE4m3<0.300000012f, 5.0f>");
  EXPECT_EQ(kv_format(false, 1.f, 1.f), "");
  const CompiledModule m = compile_module("#include \"attention.cuh\"\n", "sm_90a", names, "");
  for (std::size_t i = 0; i < names.size(); ++i) {
    const Case& c = cases[i / 2];
    const KernelResources& r = m.resources.at(m.lowered.at(names[i]));
    EXPECT_EQ(r.stack_frame, 0) << names[i];
    EXPECT_EQ(r.spill_stores, 0) << names[i];
    EXPECT_LE(r.registers, 65536 / (128 * (c.blocks ? c.blocks : c.ahead ? 2 : 3))) << names[i];
  }
  AttnSplitKernel bulk{32, 8, 128, 16, 528, 2LL * 2 * 8 * 16 * 128, 256, 32, 1};
  bulk.bulk = 2;
  bulk.kv = kv_format(true, 1.f, 1.f);
  EXPECT_EQ(bulk.smem(), attn_split_ring_bytes(16, 128, 2, 1));
  EXPECT_EQ(attn_split_ring_bytes(16, 128, 2, 1), 4 * 2 * (4096 + 8));
}

// attn_split through BULK ring slots (the plan's kAttnSplitBulk) at the Llama shapes' head dims
// and groups and G = 6, 1, 8 and 16: 2 slots a warp under three blocks' registers, 3 and 4 under
// two's, and with EARLY; no spills or stack frame, and the ring with the
// kernel's static shared memory fits the SM at least `resident` times (attn_split_ring_bytes: 64 KB
// at head dim 128 and 2 slots, three blocks; 4 slots, 128 KB: one; at G = 8 and 16, Q's staging
// leaves room for two, hence attn_split_bulk_fits).
TEST(Codegen, AttnSplitBulkRingCompilesWithoutSpills) {
  struct Case {
    int hq, d, bulk, blocks, resident;
    bool early = false;  // the PDL wait inside the items (the decode buckets' EARLY)
  };
  const Case cases[] = {{32, 128, 2, 3, 3},       {32, 128, 3, 2, 2},      {32, 128, 4, 2, 1},
                        {32, 64, 2, 3, 3},        {48, 128, 2, 3, 3},      {8, 128, 2, 3, 3},
                        {64, 128, 2, 3, 2},       {128, 128, 2, 3, 2},     {32, 128, 2, 3, 3, true},
                        {32, 128, 4, 2, 1, true}, {48, 128, 2, 3, 3, true}};
  std::vector<std::string> names;
  for (const Case& c : cases) {
    AttnSplitKernel k{c.hq, 8, c.d, 16, 528, 2LL * 2 * 8 * 16 * c.d, 256, 32, 1};
    k.blocks = c.blocks;
    k.bulk = c.bulk;
    k.early = c.early;
    names.push_back(k.instance());
  }
  const CompiledModule m = compile_module("#include \"attention.cuh\"\n", "sm_90a", names, "");
  for (std::size_t i = 0; i < names.size(); ++i) {
    const KernelResources& r = m.resources.at(m.lowered.at(names[i]));
    EXPECT_EQ(r.stack_frame, 0) << names[i];
    EXPECT_EQ(r.spill_stores, 0) << names[i];
    EXPECT_LE(r.registers, 65536 / (128 * cases[i].blocks)) << names[i];
    const int per_block = attn_split_ring_bytes(16, cases[i].d, cases[i].bulk) + r.shared_static;
    EXPECT_LE(cases[i].resident * (per_block + 1024), 228 * 1024) << names[i];
  }
  EXPECT_EQ(attn_split_ring_bytes(16, 128, 2), 4 * 2 * (8192 + 8));
}

// The prefill attention kernel (kernels/attention_prefill.cuh) at the real head shapes, in the
// tiles of TPT = 128 / G (rounded down to a power of two) tokens a prefill bucket would use:
// Llama-3.2-1B (32/8/64), Llama-3.1-8B (32/8/128), Qwen2.5-1.5B (12/2/128), Qwen3-0.6B (16/8/128),
// and the GQA 1 / 8 extremes of the GPU tests. Every instance compiles without spills or a stack
// frame (the consumers' S, O and P registers fit under setmaxnreg's 240), runs both products on
// wgmma, and ptxas does not serialize the wgmmas (its C7513 warning: a register an in-flight wgmma
// reads written before the wait). Pages of 16 (the engine's) load K/V by TMA with the cp.async
// tail; pages of 7 (the GPU tests' odd size) by cp.async alone. The stages and the static segment
// table fit the 227 KB a CTA may have. The persistent form (NT > 0) likewise, at 32 and 64 tokens a
// tile (two segment tables). attn_prefill's instance names: NT only where it is not the kernel's
// default (0), as the plan, the bench and the tests name them.
TEST(Codegen, PrefillAttentionInstanceNames) {
  const std::string head =
      "telos_kernels::attn_prefill<32, 8, 128, 16, 512, 65536ll, 0.127517432f, 32";
  EXPECT_EQ(attn_prefill_instance(32, 8, 128, 16, 512, 65536, 32), head + ">");
  EXPECT_EQ(attn_prefill_instance(32, 8, 128, 16, 512, 65536, 32, 128), head + ", 128>");
}

TEST(Codegen, PrefillAttentionCompilesWithoutSpills) {
  struct Shape {
    int hq, hkv, d, tpt;
  };
  std::vector<std::string> names;
  std::map<std::string, int> head_dim;
  for (const Shape& s : {Shape{32, 8, 64, 32}, Shape{32, 8, 128, 32}, Shape{12, 2, 128, 16},
                         Shape{16, 8, 128, 64}, Shape{8, 8, 64, 128}, Shape{64, 8, 128, 16}}) {
    const long long page_elems = 2LL * 2 * s.hkv * 16 * s.d;
    names.push_back("telos_kernels::attn_prefill<" + std::to_string(s.hq) + ", " +
                    std::to_string(s.hkv) + ", " + std::to_string(s.d) + ", 16, 512, " +
                    std::to_string(page_elems) + "ll, " +
                    float_literal(1.4426950408889634 / std::sqrt(double(s.d))) + ", " +
                    std::to_string(s.tpt) + ">");
    head_dim[names.back()] = s.d;
  }
  const std::string odd_page =
      "telos_kernels::attn_prefill<8, 8, 128, 7, 512, 28672ll, 0.127517432f, 128>";
  names.push_back(odd_page);
  head_dim[odd_page] = 128;
  // Persistent (NT > 0); its producer keeps 40 registers (the scan of each tile) and its consumers
  // take 232.
  std::set<std::string> persistent;
  for (const int d : {64, 128})
    for (const auto& [hq, tpt] : {std::pair{32, 32}, std::pair{16, 64}}) {
      names.push_back(
          attn_prefill_instance(hq, 8, d, 16, 512, 2LL * 2 * 8 * 16 * d, tpt, 4096 / tpt));
      head_dim[names.back()] = d;
      persistent.insert(names.back());
    }
  const CompiledModule m =
      compile_module("#include \"attention_prefill.cuh\"\n", "sm_90a", names, "");
  EXPECT_EQ(m.log.find("C7513"), std::string::npos) << m.log;
  // Nor for want of registers (C7512: what the consumers' 240 would give way to first).
  EXPECT_EQ(m.log.find("C7512"), std::string::npos) << m.log;
  // ptxas allocates each role's code within its setmaxnreg count (C7508: setmaxnreg ignored).
  EXPECT_EQ(m.log.find("C7508"), std::string::npos) << m.log;
  for (const auto& name : names) {
    const std::string entry = m.lowered.at(name);
    const std::string body = ptx_function(m.ptx, entry);
    ASSERT_FALSE(body.empty()) << name;
    EXPECT_NE(body.find("wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16"), std::string::npos)
        << name;
    EXPECT_NE(body.find("cp.async.mbarrier.arrive.noinc"), std::string::npos) << name;
    EXPECT_NE(body.find(persistent.count(name) > 0 ? "setmaxnreg.inc.sync.aligned.u32 232"
                                                   : "setmaxnreg.inc.sync.aligned.u32 240"),
              std::string::npos)
        << name;
    EXPECT_NE(body.find(persistent.count(name) > 0 ? "setmaxnreg.dec.sync.aligned.u32 40"
                                                   : "setmaxnreg.dec.sync.aligned.u32 24"),
              std::string::npos)
        << name;
    EXPECT_EQ(body.find("cp.async.bulk.tensor.2d") != std::string::npos, name != odd_page) << name;
    const KernelResources& r = m.resources.at(entry);
    EXPECT_LE(r.shared_static + attn_prefill_smem(head_dim.at(name)), 232448) << name;
    EXPECT_EQ(r.spill_stores, 0) << name;
    EXPECT_EQ(r.spill_loads, 0) << name;
    EXPECT_EQ(r.stack_frame, 0) << name;
  }
}

// The sm_100a prefill attention (kernels/attention_prefill_sm100.cuh) for sm_100a and its Hopper
// twin for sm_90a at the head shapes of PrefillAttentionCompilesWithoutSpills (not persistent) and
// pages of 16 and 7: no spill or stack frame, setmaxnreg honoured (C7508) and not starved (C7512),
// wgmma not serialized in the twin (C7513); the tcgen05 form issues tcgen05.mma and reads and
// writes Tensor Memory (tcgen05.ld / st), the twin wgmma, each with the softmax's 240 registers;
// K/V by TMA with pages of 16 only; the dynamic and static shared memory fit a CTA's.
TEST(Codegen, PrefillAttentionSm100CompilesWithoutSpills) {
  struct Shape {
    int hq, hkv, d, page, tpt;
  };
  for (const bool twin : {false, true}) {
    std::vector<std::string> names;
    std::map<std::string, Shape> shapes;
    for (const Shape& s :
         {Shape{32, 8, 64, 16, 32}, Shape{32, 8, 128, 16, 32}, Shape{12, 2, 128, 16, 16},
          Shape{16, 8, 128, 16, 64}, Shape{8, 8, 64, 16, 128}, Shape{64, 8, 128, 16, 16},
          Shape{8, 8, 128, 7, 128}, Shape{8, 2, 64, 7, 32}}) {
      const long long page_elems = 2LL * 2 * s.hkv * s.page * s.d;
      names.push_back(
          attn_prefill_sm100_instance(s.hq, s.hkv, s.d, s.page, 512, page_elems, s.tpt, twin));
      shapes[names.back()] = s;
    }
    const CompiledModule m = compile_module("#include \"attention_prefill_sm100.cuh\"\n",
                                            twin ? "sm_90a" : "sm_100a", names, "");
    for (const char* warning : {"C7508", "C7512", "C7513"})
      EXPECT_EQ(m.log.find(warning), std::string::npos) << m.log;
    for (const auto& name : names) {
      const std::string body = ptx_function(m.ptx, m.lowered.at(name));
      ASSERT_FALSE(body.empty()) << name;
      for (const char* op :
           twin ? std::vector<const char*>{"wgmma.mma_async.sync.aligned.m64n128k16"}
                : std::vector<const char*>{"tcgen05.mma.cta_group::1.kind::f16",
                                           "tcgen05.ld.sync.aligned.32x32b.x32",
                                           "tcgen05.st.sync.aligned.32x32b.x32", "tcgen05.commit"})
        EXPECT_NE(body.find(op), std::string::npos) << name << ": " << op;
      EXPECT_EQ(body.find(twin ? "tcgen05" : "wgmma"), std::string::npos) << name;
      EXPECT_NE(body.find("setmaxnreg.inc.sync.aligned.u32 240"), std::string::npos) << name;
      EXPECT_NE(body.find("setmaxnreg.dec.sync.aligned.u32 56"), std::string::npos) << name;
      const Shape& s = shapes.at(name);
      EXPECT_EQ(body.find("cp.async.bulk.tensor.2d") != std::string::npos, s.page == 16) << name;
      const KernelResources& r = m.resources.at(m.lowered.at(name));
      EXPECT_LE(r.shared_static + attn_prefill_sm100_smem(s.d, twin), 232448) << name;
      EXPECT_EQ(r.spill_stores, 0) << name;
      EXPECT_EQ(r.spill_loads, 0) << name;
      EXPECT_EQ(r.stack_frame, 0) << name;
    }
  }
}

// Llama-3.2-1B's prefill bucket runs attn_prefill once a layer, reading that layer's K/V through
// `tmap:kv:L:ROWS:COLS:BOX_ROWS:BOX_COLS` (docs/artifact.md): ROWS a page's rows (2 · 16 layers ·
// 8 heads · 16 positions), COLS the head dim, boxes of a page by 64 dims; the launch states the
// kernel's threads and shared memory (3 stages at D = 128, 6 at 64).
TEST(Codegen, PrefillAttentionReadsKvThroughATensorMap) {
  const KernelPlan plan = plan_kernels(llama_1b());
  int layer = 0;
  for (const BucketProgram& b : plan.buckets)
    for (const Launch& l : b.launches) {
      const KernelInstance& k = plan.kernels[l.kernel];
      if (k.instance.rfind("telos_kernels::attn_prefill<", 0) != 0) continue;
      ASSERT_EQ(b.kind, "prefill");
      EXPECT_EQ(k.params, std::vector<std::string>({"q", "positions", "token_seq", "page_tables",
                                                    "kv_layer", "kv_map", "out"}));
      ASSERT_EQ(l.args.size(), 7u);
      EXPECT_EQ(l.args[4], "kv:" + std::to_string(layer));
      EXPECT_EQ(l.args[5], "tmap:kv:" + std::to_string(layer) + ":" +
                               std::to_string(2 * 16 * 8 * 16) + ":64:16:64");
      EXPECT_EQ(k.block, kAttnPrefillThreads);
      EXPECT_EQ(k.dynamic_smem, 128 * 64 * 2 + 6 * 2 * 128 * 64 * 2 + 4 * 6 * 8 + 1024);
      ++layer;
    }
  EXPECT_EQ(layer, 16);
  EXPECT_EQ(attn_prefill_smem(128), 128 * 128 * 2 + 3 * 2 * 128 * 128 * 2 + 4 * 3 * 8 + 1024);
}

TEST(Codegen, Llama3RopeScaling) {
  // Wavelengths longer than original/low_freq_factor are slowed by `factor`; short ones kept.
  const RopeInput rope{"llama3", 500000.0, 8.0, 1.0, 4.0, 64};
  const std::vector<float> f = rope_inv_freq(rope, 32);
  EXPECT_FLOAT_EQ(f[0], 1.0f);
  const double plain_last = 1.0 / std::pow(500000.0, 30.0 / 32.0);
  EXPECT_NEAR(f[15], plain_last / 8.0, plain_last * 1e-6);
}

// The plan refuses a model the kernels do not take with a message naming the field.
TEST(Codegen, RefusesUnsupportedShapes) {
  auto refusal = [](const TestModel& in) {
    try {
      plan_kernels(in);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  TestModel in = tiny("llama");
  in.spec.head_dim = 24;
  EXPECT_EQ(refusal(in), "codegen: head_dim must be a multiple of 32 up to 128");
  in.spec.head_dim = 256;  // attention holds a head's output in registers
  EXPECT_EQ(refusal(in), "codegen: head_dim must be a multiple of 32 up to 128");
  in = tiny("llama");
  in.spec.num_heads = 64;  // 32 query heads per KV head: more than one MMA tile of rows
  EXPECT_EQ(refusal(in), "codegen: at most 16 query heads per KV head");
  in = tiny("llama");
  in.spec.hidden_size = 136;  // not whole 32-element K steps
  EXPECT_EQ(refusal(in), "codegen: hidden_size must be a positive multiple of 32");
  in = tiny("llama");
  in.spec.vocab_size = 500;  // not whole row groups of 16
  EXPECT_EQ(refusal(in), "codegen: vocab_size must be a multiple of 16 (the LM head's weight tiles)");
  // The IR verifier refuses another RoPE scaling before codegen; the table refuses it too.
  try {
    rope_inv_freq({"yarn", 10000.0}, 32);
    ADD_FAILURE() << "yarn RoPE tabulated";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              "codegen: rope.type 'yarn' is not supported (expected default or llama3)");
  }
}

TEST(Codegen, ParsesPtxasReport) {
  const auto r = parse_ptxas_log(
      "ptxas info    : Compiling entry function '_Z1kPf' for 'sm_90a'\n"
      "ptxas info    : Function properties for _Z1kPf\n"
      "ptxas         .     16 bytes stack frame, 8 bytes spill stores, 4 bytes spill loads\n"
      "ptxas info    : Used 40 registers, used 1 barriers, 4096 bytes smem, 400 bytes cmem[0]\n");
  ASSERT_EQ(r.count("_Z1kPf"), 1u);
  const KernelResources& k = r.at("_Z1kPf");
  EXPECT_EQ(k.registers, 40);
  EXPECT_EQ(k.stack_frame, 16);
  EXPECT_EQ(k.spill_stores, 8);
  EXPECT_EQ(k.spill_loads, 4);
  EXPECT_EQ(k.shared_static, 4096);
}

// A kernel that spills, or whose static and dynamic shared memory together pass the 227 KB a
// block may have, fails the compile with a message naming it; at the limit it passes.
TEST(Codegen, KernelResourcesOverTheLimitsFailNamingTheKernel) {
  auto message = [](const KernelResources& r, int dynamic_smem) -> std::string {
    try {
      check_kernel_resources("telos_kernels::k<1>", "_Z1kILi1EEvv", "sm_90a", r, dynamic_smem);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  KernelResources r;
  r.registers = 128;
  r.shared_static = 8 * 1024;
  EXPECT_EQ(message(r, kMaxSmemPerBlock - 8 * 1024), "");
  const std::string over = message(r, kMaxSmemPerBlock - 8 * 1024 + 16);
  EXPECT_NE(over.find("telos_kernels::k<1>"), std::string::npos) << over;
  EXPECT_NE(over.find("8192 bytes of static and 224272 of dynamic shared memory on sm_90a"),
            std::string::npos)
      << over;
  r.spill_stores = 4;
  const std::string spill = message(r, 0);
  EXPECT_NE(spill.find("_Z1kILi1EEvv"), std::string::npos) << spill;
  EXPECT_NE(spill.find("must not spill"), std::string::npos) << spill;
}

}  // namespace
}  // namespace telos::codegen
