#include "compiler/plan/memory_plan.hpp"

#include <algorithm>
#include <map>
#include <optional>

#include "support/dtype.hpp"
#include "support/error.hpp"
#include "support/tensor_parallel.hpp"

namespace telos::compiler {
namespace {

using codegen::BufferLifetime;

std::int64_t align_up(std::int64_t n) {
  return (n + kArenaAlignment - 1) / kArenaAlignment * kArenaAlignment;
}

// The buffer a launch argument names: `buf:NAME`, or the target of a tensor map over one
// (`tmap:buf:NAME:...`); empty for every other argument.
std::string named_buffer(const std::string& arg) {
  std::string rest;
  if (arg.rfind("buf:", 0) == 0)
    rest = arg.substr(4);
  else if (arg.rfind("tmap:buf:", 0) == 0)
    rest = arg.substr(9);
  return rest.substr(0, rest.find(':'));
}

struct Span {
  int first = 0, last = 0;  // launch indices, inclusive
};

// Per bucket, the launches over which each buffer holds what a later one reads.
std::vector<std::map<std::string, Span>> live_spans(const codegen::KernelPlan& lowered) {
  std::map<std::string, BufferLifetime> lifetime;
  for (const codegen::ArenaBuffer& b : lowered.arena) lifetime[b.name] = b.lifetime;
  std::vector<std::map<std::string, Span>> out;
  for (const codegen::BucketProgram& p : lowered.buckets) {
    std::map<std::string, Span> spans;
    for (int i = 0; i < static_cast<int>(p.launches.size()); ++i)
      for (const std::string& arg : p.launches[static_cast<std::size_t>(i)].all_args()) {
        const std::string name = named_buffer(arg);
        if (name.empty()) continue;
        if (!lifetime.count(name))
          fail("plan: bucket " + p.kind + ":" + std::to_string(p.size) + " names buffer \"" + name +
               "\", which the lowering did not declare");
        auto [it, fresh] = spans.try_emplace(name, Span{i, i});
        it->second.last = i;
      }
    for (auto& [name, span] : spans)
      if (lifetime.at(name) != BufferLifetime::launches)
        span.last = static_cast<int>(p.launches.size());
    out.push_back(std::move(spans));
  }
  return out;
}

bool conflict(const codegen::ArenaBuffer& a, const codegen::ArenaBuffer& b,
              const std::vector<std::map<std::string, Span>>& spans) {
  if (a.lifetime == BufferLifetime::steps || b.lifetime == BufferLifetime::steps) return true;
  for (const auto& bucket : spans) {
    const auto ia = bucket.find(a.name), ib = bucket.find(b.name);
    if (ia == bucket.end() || ib == bucket.end()) continue;
    if (ia->second.first <= ib->second.last && ib->second.first <= ia->second.last) return true;
  }
  return false;
}

}  // namespace

ArenaPlan plan_arena(const codegen::KernelPlan& lowered) {
  const std::vector<codegen::ArenaBuffer>& buffers = lowered.arena;
  const auto spans = live_spans(lowered);
  std::vector<std::size_t> order(buffers.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return buffers[a].bytes > buffers[b].bytes;
  });

  ArenaPlan plan;
  std::vector<std::optional<std::int64_t>> offset(buffers.size());
  for (std::size_t i : order) {
    std::vector<std::pair<std::int64_t, std::int64_t>> busy;  // [offset, end) of conflicting ones
    for (std::size_t j = 0; j < buffers.size(); ++j)
      if (offset[j] && conflict(buffers[i], buffers[j], spans))
        busy.push_back({*offset[j], *offset[j] + align_up(buffers[j].bytes)});
    std::sort(busy.begin(), busy.end());
    std::int64_t at = 0;
    for (const auto& [begin, end] : busy) {
      if (at + align_up(buffers[i].bytes) <= begin) break;
      at = std::max(at, end);
    }
    offset[i] = at;
    plan.bytes = std::max(plan.bytes, at + align_up(buffers[i].bytes));
  }
  for (std::size_t i = 0; i < buffers.size(); ++i)
    plan.buffers.push_back({buffers[i].name, *offset[i], buffers[i].bytes});
  return plan;
}

KvCacheGeometry kv_cache_geometry(const ModelSpec& spec, const ServingConfig& serving) {
  KvCacheGeometry kv;
  kv.page_size = serving.kv_page_size;
  kv.num_layers = spec.num_layers;
  // Each rank's pool holds its own KV heads (support/tensor_parallel.hpp).
  kv.num_kv_heads =
      rank_shape(serving.tensor_parallel, spec.num_heads, spec.num_kv_heads, spec.intermediate_size)
          .kv_heads;
  kv.head_dim = spec.head_dim;
  kv.dtype = serving.kv_dtype;
  kv.bytes_per_page = 2 * kv.num_layers * kv.page_size * kv.num_kv_heads * kv.head_dim *
                      static_cast<std::int64_t>(dtype_size(kv.dtype));
  if (kv.dtype == DType::E4M3) {
    kv.k_scales.assign(static_cast<std::size_t>(kv.num_layers), 1.0f);
    kv.v_scales = kv.k_scales;
  }
  return kv;
}

nlohmann::ordered_json kv_cache_to_json(const KvCacheGeometry& kv) {
  nlohmann::ordered_json j;
  j["dtype"] = dtype_name(kv.dtype);
  j["page_size"] = kv.page_size;
  j["num_layers"] = kv.num_layers;
  j["num_kv_heads"] = kv.num_kv_heads;
  j["head_dim"] = kv.head_dim;
  j["bytes_per_page"] = kv.bytes_per_page;
  j["layout"] = "page[layer][kv][head][slot][dim]";
  if (kv.dtype == DType::E4M3) {
    j["k_scales"] = kv.k_scales;
    j["v_scales"] = kv.v_scales;
  }
  return j;
}

nlohmann::ordered_json plan_to_json(const ArenaPlan& plan) {
  nlohmann::ordered_json buffers = nlohmann::ordered_json::array();
  for (const ArenaSlot& b : plan.buffers)
    buffers.push_back({{"buffer", b.buffer}, {"offset", b.offset}, {"bytes", b.bytes}});
  nlohmann::ordered_json j;
  j["arena"] = {{"alignment", kArenaAlignment}, {"bytes", plan.bytes}, {"buffers", buffers}};
  return j;
}

}  // namespace telos::compiler
