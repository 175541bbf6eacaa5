#pragma once
// What executes a step's forward pass: the CPU reference engine today, the GPU engine once
// kernels exist (issue 4). The engine loop owns scheduling and sampling; a backend owns the KV
// cache memory and the arithmetic.
//
// The GPU engine will overlap host work of step N+1 with device work of step N by splitting
// forward() into a launch (write the step descriptor, launch the bucket's graph) and a wait for
// the sampled tokens; the scheduler already hands out steps whose page tables stay valid until
// commit, which is what that split needs.
#include <string>
#include <vector>

#include "executor/scheduler.hpp"

namespace telos::exec {

class ModelBackend {
 public:
  virtual ~ModelBackend() = default;

  // How many KV pages this backend holds; the engine sizes its page pool to match.
  virtual int num_kv_pages() const = 0;
  virtual int vocab_size() const = 0;
  // "cpu" or "gpu", for logs and stats.
  virtual std::string name() const = 0;

  // Computes every token of `step`, writing its K and V into the pages its page table names.
  // For each sequence with `samples` set, in step order, appends the vocab_size logits of its
  // last token to `logits` (which it first clears). Throws telos::Error on failure; the engine
  // then fails the requests of this step and keeps serving.
  virtual void forward(const Step& step, std::vector<float>& logits) = 0;
};

}  // namespace telos::exec
