#pragma once
// The models codegen's tests plan: a model described by its spec, as the importer would give it,
// and a serving config. Codegen reads the model as the fused IR, built from the spec as telosc
// builds it.
#include <string>

#include "codegen/codegen.hpp"
#include "codegen/lowering.hpp"
#include "compiler/import/model_spec.hpp"
#include "compiler/ir/model_graph.hpp"
#include "compiler/passes/pass_manager.hpp"

namespace telos::codegen {

struct TestModel {
  compiler::ModelSpec spec;
  CodegenInput serving;
};

inline compiler::ir::Graph fused_ir(const compiler::ModelSpec& spec) {
  compiler::ir::Graph g = compiler::ir::build_model_graph(spec);
  compiler::run_passes(g, compiler::fusion_pipeline(), nullptr);
  return g;
}

inline KernelPlan plan_kernels(const TestModel& m) {
  return codegen::plan_kernels(fused_ir(m.spec), m.serving);
}

inline GeneratedKernels generate_kernels(const TestModel& m, const CodegenOptions& options) {
  return codegen::generate_kernels(plan_kernels(m), options);
}

inline TestModel tiny(const std::string& family) {
  TestModel in;
  in.spec.vocab_size = 512;
  in.spec.hidden_size = 128;
  in.spec.intermediate_size = 256;
  in.spec.num_layers = 2;
  in.spec.num_heads = 4;
  in.spec.num_kv_heads = 2;
  in.spec.head_dim = 32;
  in.spec.rms_norm_eps = family == "llama" ? 1e-5 : 1e-6;
  in.spec.rope.theta = family == "llama" ? 500000.0 : 1000000.0;
  if (family == "llama") {
    in.spec.rope = {"llama3", 500000.0, 8.0, 1.0, 4.0, 64};
  }
  in.spec.tie_word_embeddings = family != "qwen3";
  in.spec.qkv_bias = family == "qwen2";
  in.spec.qk_norm = family == "qwen3";
  in.serving.max_batch = 8;
  in.serving.max_seq_len = 512;
  in.serving.kv_page_size = 16;
  in.serving.decode_buckets = {1, 2, 4, 8};
  in.serving.prefill_buckets = {32, 64, 128, 512};
  in.serving.targets = {"sm_90a"};
  return in;
}

// Llama-3.2-1B's shape with a few buckets (a ragged one included).
inline TestModel llama_1b() {
  TestModel in;
  in.spec.vocab_size = 128256;
  in.spec.hidden_size = 2048;
  in.spec.intermediate_size = 8192;
  in.spec.num_layers = 16;
  in.spec.num_heads = 32;
  in.spec.num_kv_heads = 8;
  in.spec.head_dim = 64;
  in.spec.rms_norm_eps = 1e-5;
  in.spec.rope = {"llama3", 500000.0, 32.0, 1.0, 4.0, 8192};
  in.spec.tie_word_embeddings = true;
  in.serving.max_batch = 64;
  in.serving.max_seq_len = 8192;
  in.serving.kv_page_size = 16;
  in.serving.decode_buckets = {1, 6, 64};
  in.serving.prefill_buckets = {512};
  in.serving.targets = {"sm_90a"};
  return in;
}

}  // namespace telos::codegen
