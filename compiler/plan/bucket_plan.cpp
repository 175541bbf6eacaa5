#include "compiler/plan/bucket_plan.hpp"

#include <algorithm>
#include <map>

namespace telos::compiler {
namespace {

std::int64_t align_up(std::int64_t n) {
  return (n + kArenaAlignment - 1) / kArenaAlignment * kArenaAlignment;
}

struct Interval {
  const ir::Value* value;
  std::size_t first, last;  // op indices, inclusive
  std::int64_t bytes;
  std::int64_t offset = -1;
};

}  // namespace

BucketPlan plan_bucket(const ir::Graph& graph, const std::string& kind, std::int64_t tokens,
                       std::int64_t sequences) {
  const auto& ops = graph.ops();
  std::vector<Interval> live;
  std::map<const ir::Value*, std::size_t> index;
  for (std::size_t i = 0; i < ops.size(); ++i) {
    for (const ir::Value* operand : ops[i]->operands) {
      auto it = index.find(operand);
      if (it != index.end()) live[it->second].last = i;
    }
    for (const ir::Value* r : ops[i]->results) {
      index[r] = live.size();
      live.push_back({r, i, i, r->type.bytes(tokens, sequences)});
    }
  }
  for (const ir::Value* out : graph.outputs()) live[index.at(out)].last = ops.size();

  std::vector<std::size_t> order(live.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return live[a].bytes > live[b].bytes; });

  BucketPlan plan{kind, tokens, sequences, 0, {}};
  std::vector<std::size_t> placed;
  for (std::size_t i : order) {
    Interval& v = live[i];
    std::vector<std::pair<std::int64_t, std::int64_t>> busy;  // [offset, end) of overlapping
    for (std::size_t j : placed) {
      const Interval& u = live[j];
      if (u.first <= v.last && v.first <= u.last)
        busy.push_back({u.offset, u.offset + align_up(u.bytes)});
    }
    std::sort(busy.begin(), busy.end());
    std::int64_t offset = 0;
    for (const auto& [begin, end] : busy) {
      if (offset + align_up(v.bytes) <= begin) break;
      offset = std::max(offset, end);
    }
    v.offset = offset;
    plan.arena_bytes = std::max(plan.arena_bytes, offset + align_up(v.bytes));
    placed.push_back(i);
  }
  for (const Interval& v : live) plan.buffers.push_back({v.value->name, v.offset, v.bytes});
  return plan;
}

Plan make_plan(const ir::Graph& graph, const ModelSpec& spec, const ServingConfig& serving) {
  Plan plan;
  for (std::int64_t b : serving.decode_buckets)
    plan.decode.push_back(plan_bucket(graph, "decode", b, b));
  // A prefill chunk may carry the ends of several sequences' prompts, up to max_batch of them.
  for (std::int64_t c : serving.prefill_buckets)
    plan.prefill.push_back(plan_bucket(graph, "prefill", c, std::min(c, serving.max_batch)));

  KvCacheGeometry& kv = plan.kv;
  kv.page_size = serving.kv_page_size;
  kv.num_layers = spec.num_layers;
  kv.num_kv_heads = spec.num_kv_heads;
  kv.head_dim = spec.head_dim;
  kv.bytes_per_page = 2 * kv.num_layers * kv.page_size * kv.num_kv_heads * kv.head_dim *
                      static_cast<std::int64_t>(dtype_size(DType::BF16));
  kv.max_pages_per_sequence = (serving.max_seq_len + kv.page_size - 1) / kv.page_size;
  kv.pages = serving.kv_pool_pages;
  kv.memory_fraction = serving.kv_pool_memory_fraction;
  return plan;
}

nlohmann::ordered_json kv_cache_to_json(const KvCacheGeometry& kv) {
  nlohmann::ordered_json j;
  j["dtype"] = "bf16";
  j["page_size"] = kv.page_size;
  j["num_layers"] = kv.num_layers;
  j["num_kv_heads"] = kv.num_kv_heads;
  j["head_dim"] = kv.head_dim;
  j["bytes_per_page"] = kv.bytes_per_page;
  j["layout"] = "page[layer][kv][head][slot][dim]";
  return j;
}

nlohmann::ordered_json plan_to_json(const Plan& plan) {
  auto buckets = [](const std::vector<BucketPlan>& list) {
    nlohmann::ordered_json out = nlohmann::ordered_json::array();
    for (const BucketPlan& b : list) {
      nlohmann::ordered_json j;
      j["tokens"] = b.tokens;
      j["sequences"] = b.sequences;
      j["arena_bytes"] = b.arena_bytes;
      nlohmann::ordered_json buffers = nlohmann::ordered_json::array();
      for (const ArenaBuffer& a : b.buffers)
        buffers.push_back({{"value", a.value}, {"offset", a.offset}, {"bytes", a.bytes}});
      j["buffers"] = buffers;
      out.push_back(j);
    }
    return out;
  };
  nlohmann::ordered_json pool;
  pool["page_size"] = plan.kv.page_size;
  pool["bytes_per_page"] = plan.kv.bytes_per_page;
  pool["max_pages_per_sequence"] = plan.kv.max_pages_per_sequence;
  if (plan.kv.pages) {
    pool["pages"] = *plan.kv.pages;
    pool["bytes"] = *plan.kv.pages * plan.kv.bytes_per_page;
  } else {
    pool["memory_fraction"] = *plan.kv.memory_fraction;
  }
  nlohmann::ordered_json j;
  j["alignment"] = kArenaAlignment;
  j["kv_pool"] = pool;
  j["decode_buckets"] = buckets(plan.decode);
  j["prefill_buckets"] = buckets(plan.prefill);
  return j;
}

}  // namespace telos::compiler
