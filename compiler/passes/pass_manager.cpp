#include "compiler/passes/pass_manager.hpp"

#include "compiler/ir/verifier.hpp"
#include "compiler/passes/fusion_passes.hpp"
#include "compiler/passes/shard_tensor_parallel.hpp"
#include "compiler/passes/w8a8_activations.hpp"
#include "support/error.hpp"

namespace telos::compiler {

// Order matters where patterns overlap:
// - fuse-qkv before fuse-rope-kv-append: the epilogue fusion matches the concatenated GEMM.
// - fuse-residual-epilogue before fuse-add-rmsnorm: both want the residual add. In the GEMM
//   epilogue it costs one read of the residual and one write of the sum; as add_rmsnorm it costs
//   an extra write and read of the GEMM's output. add_rmsnorm remains for adds whose branch is
//   not a single-use GEMM (e.g. a branch that must be all-reduced first).
const std::vector<Pass>& fusion_pipeline() {
  static const std::vector<Pass> passes = {
      {"fuse-qkv", "q/k/v projections -> one linear on layers.N.qkv", fuse_qkv},
      {"fuse-rope-kv-append", "QK norm, RoPE and KV-page append -> the QKV linear's epilogue",
       fuse_rope_kv_append},
      {"fuse-gate-up-swiglu", "gate/up projections + SwiGLU -> one linear on layers.N.gate_up",
       fuse_gate_up_swiglu},
      {"fuse-residual-epilogue", "residual add -> the o-proj / down-proj GEMM epilogue",
       fuse_residual_epilogue},
      {"fuse-add-rmsnorm", "residual add + RMSNorm -> add_rmsnorm", fuse_add_rmsnorm},
      {"fuse-lm-head-sample", "LM head + sampling -> lm_head_sample", fuse_lm_head_sample},
  };
  return passes;
}

Pass tensor_parallel_pass(int ranks) {
  return {"shard-tensor-parallel",
          "the fused graph -> the graph each of serving.tensor_parallel ranks runs",
          [ranks](ir::Graph& graph) { shard_tensor_parallel(graph, ranks); }};
}

Pass w8a8_activations_pass() {
  return {"w8a8-activations",
          "linears on e4m3 weights of 128x128 scale blocks -> e4m3 activations (W8A8)",
          mark_w8a8_activations};
}

std::vector<Pass> select_passes(const std::string& list) {
  std::vector<Pass> out;
  std::size_t begin = 0;
  while (begin <= list.size()) {
    std::size_t end = list.find(',', begin);
    if (end == std::string::npos) end = list.size();
    const std::string name = list.substr(begin, end - begin);
    const Pass* found = nullptr;
    for (const Pass& p : fusion_pipeline())
      if (p.name == name) found = &p;
    if (!found) {
      std::string known;
      for (const Pass& p : fusion_pipeline()) known += (known.empty() ? "" : ", ") + p.name;
      fail("--passes: unknown pass \"" + name + "\" (known: " + known + ")");
    }
    out.push_back(*found);
    begin = end + 1;
  }
  return out;
}

void run_passes(ir::Graph& graph, const std::vector<Pass>& passes, std::ostream* print_after_all) {
  for (const Pass& pass : passes) {
    pass.run(graph);
    try {
      ir::verify(graph);
    } catch (const Error& e) {
      fail("after pass " + pass.name + ": " + e.what());
    }
    if (print_after_all)
      *print_after_all << "// -----// IR after " << pass.name << " //----- //\n"
                       << ir::print_graph(graph) << "\n";
  }
}

}  // namespace telos::compiler
