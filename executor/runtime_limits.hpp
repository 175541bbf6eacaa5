#pragma once
// Limits a deployment sets when telos-run starts, at most what the artifact was compiled for
// (issue 5: "runtime limits are set at start up to the compiled maxima"): the sequences a step,
// the tokens of one request, the KV pool's pages and the prompt tokens a step, as vLLM's
// --max-num-seqs, --max-model-len, --num-gpu-blocks-override and --max-num-batched-tokens. One
// artifact then serves a smaller batch, shorter requests, a smaller pool (memory left to
// something else) or shorter prefill steps (decode tokens wait less behind a long prompt) without
// compiling again. The compiled programs
// stay what they are: a step still pads to the smallest bucket that holds it, so a row's tokens
// do not change with the limits.
#include <string>

#include "executor/artifact.hpp"

namespace telos::exec {

struct RuntimeLimits {
  int max_batch = 0;    // sequences a step; 0: serving.max_batch
  int max_seq_len = 0;  // prompt + generated tokens of one request; 0: serving.max_seq_len
  int kv_pages = 0;  // pages of the KV pool; 0: serving.kv_pool (its pages, or a memory fraction)
  int prefill_chunk = 0;  // prompt tokens a step (the token budget); 0: serving.prefill_chunk
};

// The limits in force: each one given is checked (at least 1, at most the compiled maximum:
// serving.max_batch, serving.max_seq_len, serving.prefill_chunk, and serving.kv_pool.pages where
// the artifact fixes the pool; a pool sized by a memory fraction has no compiled count, the
// device's memory bounds it),
// the others are the artifact's (kv_pages stays 0 for a pool sized by a memory fraction: the
// backend sizes it). Throws telos::Error naming the option and the maximum.
RuntimeLimits resolve_runtime_limits(const Artifact& artifact, const RuntimeLimits& asked);

// What a message calls a limit: "--max-seq-len 16" where it was set at start, else "the
// artifact's max_seq_len 256".
std::string describe_limit(const char* option, const char* field, int value, bool set_at_start);

// One line for the start-up log, e.g. "runtime limits: max_batch 8 (compiled 256), kv_pages 512
// (compiled: a memory fraction)"; empty when no limit was set.
std::string runtime_limits_summary(const Artifact& artifact, const RuntimeLimits& asked);

}  // namespace telos::exec
