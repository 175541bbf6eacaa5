#pragma once
// The memory plan of an artifact: for each bucket (a decode batch size or a prefill chunk size,
// each captured as one CUDA graph by the executor) an activation arena in which every IR value
// has a fixed offset, reused once the value is dead; and the geometry of the KV page pool.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "compiler/import/model_spec.hpp"
#include "compiler/ir/graph.hpp"
#include "compiler/plan/serving_config.hpp"

namespace telos::compiler {

constexpr std::int64_t kArenaAlignment = 256;  // every buffer offset; TMA needs 128, wgmma 16

struct ArenaBuffer {
  std::string value;  // the IR value, without '%'
  std::int64_t offset = 0;
  std::int64_t bytes = 0;
};

struct BucketPlan {
  std::string kind;            // "decode" or "prefill"
  std::int64_t tokens = 0;     // T
  std::int64_t sequences = 0;  // S: at most this many sequences share the step
  std::int64_t arena_bytes = 0;
  std::vector<ArenaBuffer> buffers;  // in program order of their defining ops
};

struct KvCacheGeometry {
  std::int64_t page_size = 0;
  std::int64_t num_layers = 0;
  std::int64_t num_kv_heads = 0;
  std::int64_t head_dim = 0;
  std::int64_t bytes_per_page = 0;  // K and V of every layer for page_size tokens, bf16
  std::int64_t max_pages_per_sequence = 0;
  std::optional<std::int64_t> pages;      // when the serving config fixes the pool
  std::optional<double> memory_fraction;  // otherwise the executor sizes it at load
};

struct Plan {
  std::vector<BucketPlan> decode;
  std::vector<BucketPlan> prefill;
  KvCacheGeometry kv;
};

// Assigns arena offsets for one step shape: values live from their defining op to their last
// use (graph outputs to the end); largest first, each at the lowest aligned offset that does not
// overlap a value live at the same time.
BucketPlan plan_bucket(const ir::Graph& graph, const std::string& kind, std::int64_t tokens,
                       std::int64_t sequences);

Plan make_plan(const ir::Graph& graph, const ModelSpec& spec, const ServingConfig& serving);

nlohmann::ordered_json plan_to_json(const Plan& plan);               // manifest.json "plan"
nlohmann::ordered_json kv_cache_to_json(const KvCacheGeometry& kv);  // manifest.json "kv_cache"

}  // namespace telos::compiler
