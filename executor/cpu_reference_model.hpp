#pragma once
// The CPU reference engine: an interpreter of the artifact's graph (manifest.json "graph", the
// optimized IR ir.txt prints) in plain fp32 C++. Each op runs over all of a step's tokens through
// its function in cpu_reference_ops.hpp, in program order; read those top to bottom like
// llama2.c's run.c. Matrices are widened from their stored dtype to f32 row by row as they are
// used, so a large artifact costs page cache, not a second f32 copy. The KV cache has the GPU
// engine's paged layout and page tables, in f32 (the engine is an fp32 ground truth), or in e4m3
// with its scales for an FP8 cache (CpuKvCache: quantized and read back as the kernels are to).
//
// A tensor-parallel artifact (serving.tensor_parallel N) runs as N simulated ranks in one process:
// each its own binding of the graph (its weight file) and its own KV pool (its KV heads), all
// under the same page tables; every op runs on rank 0, then rank 1, ..., before the next op, so
// all_reduce sums partials every rank has computed, in rank order. Every rank then holds the same
// residual stream and computes the same logits, which the engine checks bit for bit each step.
#include <memory>
#include <vector>

#include "executor/artifact.hpp"
#include "executor/cpu_reference_ops.hpp"
#include "executor/model_backend.hpp"

namespace telos::exec {

class CpuReferenceModel : public ModelBackend {
 public:
  // `kv_pages` 0: serving.kv_pool.pages, or, for a pool sized as a fraction of GPU memory, enough
  // pages for max_batch sequences of max_seq_len within 4 GiB of host memory (at least one
  // sequence's worth), counting every rank's pool. `ops`: the op kinds the graph may use (a test
  // adds its own). Throws telos::Error (check_kv_pool) when the pool takes more host memory than
  // there is, and, naming the manifest field, for a graph op it does not know or cannot run.
  explicit CpuReferenceModel(std::shared_ptr<const Artifact> artifact, int kv_pages = 0,
                             const CpuOpTable& ops = cpu_reference_ops());

  // The pool's pages for `kv_pages` as the constructor takes it, after checking that the pool
  // fits the host's available memory (runtime_limits.hpp, check_host_memory), naming --kv-pages
  // when it does not: what the engine would refuse, for `telos-run check` to refuse too.
  static int check_kv_pool(const Artifact& artifact, int kv_pages);
  // Binds the artifact's graph as the constructor does, refusing what it would refuse (an op kind
  // `ops` lacks, an op it cannot compute), naming the manifest field: for `telos-run check`.
  static void check_graph(const Artifact& artifact, const CpuOpTable& ops = cpu_reference_ops());

  int num_kv_pages() const override { return num_pages_; }
  int vocab_size() const override { return artifact_->model().vocab_size; }
  std::string name() const override { return "cpu"; }
  void forward(const Step& step, std::vector<float>& logits) override;

 private:
  struct BoundGraph {
    // Per rank: the graph's ops bound to the rank's weights, in program order.
    std::vector<std::vector<CpuOpRun>> ranks;
    std::vector<std::vector<int>> last_uses;  // per op: the values it defines or reads that no
                                              // later op reads
  };
  static BoundGraph bind_graph(const Artifact& artifact, const CpuOpTable& ops);
  // The step's tokens as rows; refuses a token id outside the vocabulary, naming the request.
  CpuStep step_rows(const Step& step) const;

  std::shared_ptr<const Artifact> artifact_;
  int num_pages_ = 0;
  std::vector<CpuKvCache> kv_caches_;  // one a rank
  BoundGraph graph_;
};

}  // namespace telos::exec
