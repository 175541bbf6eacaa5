#pragma once
// The memory plan of an artifact: the activation arena, one device block in which every buffer the
// lowered launch programs name (codegen/kernel_plan.hpp, `buf:NAME`) has a fixed offset, shared
// with buffers never live at the same time; and the geometry of the KV page pool. The GPU engine
// carves the arena exactly as planned (docs/artifact.md, "plan").
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "codegen/kernel_plan.hpp"
#include "compiler/import/model_spec.hpp"
#include "compiler/plan/serving_config.hpp"
#include "support/artifact_programs.hpp"

namespace telos::compiler {

constexpr std::int64_t kArenaAlignment = 256;  // every buffer offset; TMA needs 128, wgmma 16

using telos::ArenaSlot;

struct ArenaPlan {
  std::int64_t bytes = 0;
  std::vector<ArenaSlot> buffers;  // in the lowering's order
};

// Places the lowered programs' buffers. A buffer is live in a bucket from the first launch that
// names it to the last (to the step's end, or always, by its lifetime); two buffers may share
// bytes when no bucket has both live at once. Largest first, each at the lowest aligned offset
// that overlaps no placed buffer it conflicts with.
ArenaPlan plan_arena(const codegen::KernelPlan& lowered);

struct KvCacheGeometry {
  std::int64_t page_size = 0;
  std::int64_t num_layers = 0;
  std::int64_t num_kv_heads = 0;
  std::int64_t head_dim = 0;
  DType dtype = DType::BF16;        // serving.kv_dtype: BF16 or E4M3
  std::int64_t bytes_per_page = 0;  // K and V of every layer for page_size tokens, at dtype
  // E4M3 only: one f32 scale a layer for K and one for V, k = float(q) * scale. 1.0 each: the
  // checkpoints telosc reads carry none, and 1.0 is what vLLM assumes then (docs/fp8.md).
  std::vector<float> k_scales, v_scales;
};

KvCacheGeometry kv_cache_geometry(const ModelSpec& spec, const ServingConfig& serving);

nlohmann::ordered_json plan_to_json(const ArenaPlan& plan);          // manifest.json "plan"
nlohmann::ordered_json kv_cache_to_json(const KvCacheGeometry& kv);  // manifest.json "kv_cache"

}  // namespace telos::compiler
