#pragma once
// Limits a deployment sets when telos-run starts, at most what the artifact was compiled for: the
// sequences a step, the tokens of one request, the KV pool's pages and the prompt tokens a step, as
// vLLM's --max-num-seqs, --max-model-len, --num-gpu-blocks-override and --max-num-batched-tokens.
// One artifact then serves a smaller batch, shorter requests, a smaller pool (memory left to
// something else) or shorter prefill steps (decode tokens wait less behind a long prompt) without
// compiling again. The compiled programs stay what they are: a step still pads to the smallest
// bucket that holds it, so a row's tokens do not change with the limits.
#include <cstdint>
#include <optional>
#include <string>

#include "executor/artifact.hpp"

namespace telos::exec {

struct RuntimeLimits {
  int max_batch = 0;    // sequences a step; 0: serving.max_batch
  int max_seq_len = 0;  // prompt + generated tokens of one request; 0: serving.max_seq_len
  int kv_pages = 0;  // pages of the KV pool; 0: serving.kv_pool (its pages, or a memory fraction),
                     // within the memory the backend has
  int prefill_chunk = 0;  // prompt tokens a step (the token budget); 0: serving.prefill_chunk
  int mixed_chunk = 0;    // tokens a step that also carries decodes; 0: kDefaultMixedChunk
};

// The tokens a step that also carries decodes holds by default (at most the prefill chunk): every
// decoding request waits for such a step, so its length is their inter-token latency. A 2048-token
// chunk takes ~50 ms against a decode step's ~5; at 128 tokens (the 128-row bucket: the 8B's GEMMs
// 141 µs a layer against 197 at 256 rows) the 8B's ITL p99 stays under twice its median while
// 8,000-token prompts arrive (1.9 at 4 and 8 req/s on an H100, against 2.3 at 256), at the cost of
// those prompts' TTFT under load (p99 0.69 s against 0.43 at 4 req/s): docs/benchmarks.md.
inline constexpr int kDefaultMixedChunk = 128;

// The limits in force: each one given is checked (at least 1, at most the compiled maximum:
// serving.max_batch, serving.max_seq_len, serving.prefill_chunk (for --mixed-chunk the prefill
// chunk in force, which is also its default where it is under kDefaultMixedChunk), and
// serving.kv_pool.pages where the artifact fixes the pool; a pool sized by a memory fraction has no
// compiled count, the device's memory bounds it), the others are the artifact's, but for kv_pages,
// which stays 0 unless given: the backend sizes the artifact's pool within the memory it has.
// Throws telos::Error naming the option and the maximum.
RuntimeLimits resolve_runtime_limits(const Artifact& artifact, const RuntimeLimits& asked);

// What a message calls a limit: "--max-seq-len 16" where it was set at start, else "the
// artifact's max_seq_len 256".
std::string describe_limit(const char* option, const char* field, int value, bool set_at_start);

// One line for the start-up log, e.g. "runtime limits: max_batch 8 (compiled 256), kv_pages 512
// (compiled: a memory fraction)"; empty when no limit was set.
std::string runtime_limits_summary(const Artifact& artifact, const RuntimeLimits& asked);

// Host memory this process can still have: /proc/meminfo's MemAvailable (what the kernel gives
// without swapping), else sysconf's available physical pages; the lower of that and what
// RLIMIT_AS leaves of the address space.
std::int64_t host_memory_available();

// Refuses an allocation of `bytes` of host memory for `what` that is more than
// host_memory_available(), naming what it is for, both sizes and `remedy` (the option that asks
// for less), before anything is allocated.
void check_host_memory(const std::string& what, std::int64_t bytes, const std::string& remedy);

// Device memory the GPU engine leaves outside its one allocation (weights, slot images, KV pool,
// arena, descriptors) when it sizes the KV pool itself: the CUDA graphs of every bucket (26 MiB
// for the 8B shape's, docs/benchmarks.md), the tensor maps, and what the CUDA runtime allocates
// during capture, with room to spare.
inline constexpr std::int64_t kDeviceHeadroomBytes = std::int64_t{256} << 20;

// What the GPU engine's KV pool is sized from.
struct DevicePoolInputs {
  int asked_pages = 0;                    // --kv-pages; 0: not given
  std::optional<int> artifact_pages;      // serving.kv_pool.pages
  std::optional<double> memory_fraction;  // serving.kv_pool.memory_fraction
  std::int64_t free_bytes = 0;            // cudaMemGetInfo, just before the allocation
  std::int64_t total_bytes = 0;
  std::int64_t fixed_bytes = 0;     // weights, slot images, arena, descriptors
  std::int64_t bytes_per_page = 1;  // kv_cache.bytes_per_page
  int sequence_pages = 1;           // pages of one sequence of serving.max_seq_len
};

// The KV pool's pages: --kv-pages as given, when its pages and the rest fit the free memory; else
// the artifact's pool (its pages, or its fraction of the device's memory) within the memory free
// now, less kDeviceHeadroomBytes, so that a pool another process's memory no longer leaves room
// for shrinks instead of failing. Throws telos::Error naming --kv-pages (and --max-seq-len) when
// not even one sequence of max_seq_len fits, or --kv-pages asks for more than is free. `note` says
// when the artifact's pool was lowered.
int device_kv_pool_pages(const DevicePoolInputs& in, std::string* note);

}  // namespace telos::exec
