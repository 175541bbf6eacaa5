#pragma once
// How tensor parallelism cuts a model over its ranks (docs/multi-gpu.md): the degrees Telos
// accepts and what one rank holds. Every rank runs the same graph on the same shapes: its query
// heads, its KV heads and its intermediate rows. Where the model has fewer KV heads than ranks,
// each KV head is held by ranks / num_kv_heads consecutive ranks (the ranks whose query heads read
// it), each with its own copy of that head's K and V. One description for telosc's sharding pass,
// the manifest validation (artifact_format.hpp) and the engines.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace telos {

// The degrees a serving config may ask for: a power of two up to the GPUs of one host.
inline constexpr std::int64_t kMaxTensorParallel = 8;

// A range [first, second) of rows or columns of a whole weight.
using ShardRange = std::pair<std::int64_t, std::int64_t>;

// One rank's share of a model over `ranks` ranks (a shape tensor_parallel_refusal accepts).
struct RankShape {
  std::int64_t ranks = 1;
  std::int64_t heads = 0, kv_heads = 0, intermediate = 0;  // a rank's: the same on every rank
  std::int64_t model_heads = 0, model_kv_heads = 0, model_intermediate = 0;

  // The first of rank r's KV heads: its query heads read it (query head h reads KV head
  // h / (heads / kv_heads) of the model).
  std::int64_t first_kv_head(std::int64_t r) const { return r * model_kv_heads / ranks; }

  // Rank r's rows of the QKV projection [q heads | k heads | v heads] of head dim d (and of its
  // bias): its query heads' rows, then its KV heads' rows of k and of v.
  std::vector<ShardRange> qkv_rows(std::int64_t r, std::int64_t d) const {
    const std::int64_t q = r * heads * d, k = (model_heads + first_kv_head(r)) * d,
                       v = (model_heads + model_kv_heads + first_kv_head(r)) * d;
    return {{q, q + heads * d}, {k, k + kv_heads * d}, {v, v + kv_heads * d}};
  }
  // Rank r's rows of [gate | up]: its intermediate rows of each.
  std::vector<ShardRange> gate_up_rows(std::int64_t r) const {
    const std::int64_t g = r * intermediate, u = model_intermediate + g;
    return {{g, g + intermediate}, {u, u + intermediate}};
  }
  // Rank r's columns of a row-parallel projection of `k` input columns (o, down): the columns of
  // the activations it holds (its query heads' outputs, its intermediate rows).
  std::vector<ShardRange> input_columns(std::int64_t r, std::int64_t k) const {
    return {{r * k / ranks, (r + 1) * k / ranks}};
  }
};

// Why `ranks` cannot split a model of these shapes evenly ("" when it can): a degree other than
// 1, 2, 4 or 8; query heads or intermediate rows that do not divide by it; KV heads that neither
// divide by it nor divide it (a rank's query heads must read whole KV heads, one of them at least).
inline std::string tensor_parallel_refusal(std::int64_t ranks, std::int64_t heads,
                                           std::int64_t kv_heads, std::int64_t intermediate) {
  const std::string n = std::to_string(ranks);
  if (ranks < 1 || ranks > kMaxTensorParallel || (ranks & (ranks - 1)) != 0)
    return n + " is not 1, 2, 4 or 8 (a power of two up to the GPUs of one host)";
  if (heads % ranks != 0)
    return n + " does not divide num_heads " + std::to_string(heads) +
           " (each rank takes whole query heads)";
  if (kv_heads % ranks != 0 && ranks % kv_heads != 0)
    return n + " neither divides num_kv_heads " + std::to_string(kv_heads) +
           " nor is a multiple of it (each rank takes whole KV heads, or one shared with others)";
  if (intermediate % ranks != 0)
    return n + " does not divide intermediate_size " + std::to_string(intermediate) +
           " (each rank takes as many gate/up rows)";
  return "";
}

// A rank's share; `ranks` must pass tensor_parallel_refusal.
inline RankShape rank_shape(std::int64_t ranks, std::int64_t heads, std::int64_t kv_heads,
                            std::int64_t intermediate) {
  return {ranks,
          heads / ranks,
          kv_heads >= ranks ? kv_heads / ranks : 1,
          intermediate / ranks,
          heads,
          kv_heads,
          intermediate};
}

}  // namespace telos
