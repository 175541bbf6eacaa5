#include "executor/cpu_reference_model.hpp"

#include <algorithm>
#include <cstring>

#include "executor/runtime_limits.hpp"
#include "support/error.hpp"

namespace telos::exec {

int CpuReferenceModel::check_kv_pool(const Artifact& artifact, int kv_pages) {
  const ServingConfig& s = artifact.serving();
  // A page of every rank's pool: each rank holds its own KV heads of the page.
  const std::size_t ranks = static_cast<std::size_t>(artifact.ranks());
  const std::size_t page_bytes = CpuKvCache::bytes_per_page(artifact.kv_cache()) * ranks;
  const std::size_t per_sequence = static_cast<std::size_t>(max_pages_per_sequence(s));
  std::size_t pages = 0;
  if (kv_pages > 0) {
    pages = static_cast<std::size_t>(kv_pages);
  } else if (s.kv_pool_pages) {
    pages = static_cast<std::size_t>(*s.kv_pool_pages);
  } else {
    // A fraction of GPU memory means nothing on the host: hold max_batch full sequences, within
    // kHostKvBytes, and never less than one full sequence so that every valid request can run.
    constexpr std::size_t kHostKvBytes = std::size_t{4} << 30;
    pages = std::max(per_sequence, std::min(per_sequence * static_cast<std::size_t>(s.max_batch),
                                            kHostKvBytes / page_bytes));
  }
  // The manifest's bounds keep pages below 2^24 and a page below 2^41 bytes (over its ranks too:
  // together they hold at most max(num_kv_heads, 8) heads): no overflow.
  check_host_memory("the CPU engine's KV pool of " + std::to_string(pages) + " pages (" +
                        (artifact.kv_cache().dtype == DType::E4M3 ? "e4m3" : "f32") + ", " +
                        std::to_string(page_bytes) + " bytes a page" +
                        (ranks > 1 ? " over " + std::to_string(ranks) + " ranks" : "") + ")",
                    static_cast<std::int64_t>(pages * page_bytes),
                    "pick a smaller pool with --kv-pages (one sequence of max_seq_len " +
                        std::to_string(s.max_seq_len) + " needs " + std::to_string(per_sequence) +
                        ")");
  return static_cast<int>(pages);
}

CpuReferenceModel::CpuReferenceModel(std::shared_ptr<const Artifact> artifact, int kv_pages,
                                     const CpuOpTable& ops)
    : artifact_(std::move(artifact)),
      num_pages_(check_kv_pool(*artifact_, kv_pages)),
      graph_(bind_graph(*artifact_, ops)) {
  for (int r = 0; r < artifact_->ranks(); ++r)
    kv_caches_.emplace_back(artifact_->kv_cache(), num_pages_);
}

void CpuReferenceModel::check_graph(const Artifact& artifact, const CpuOpTable& ops) {
  bind_graph(artifact, ops);
}

namespace {

void check_inputs(const Artifact& artifact) {
  const ArtifactGraph& graph = artifact.graph();
  for (std::size_t i = 0; i < graph.inputs.size(); ++i) {
    const std::string& name = graph.values[static_cast<std::size_t>(graph.inputs[i])].name;
    if (name != "tokens" && name != "positions")
      fail(artifact.dir() + "/manifest.json: graph.inputs[" + std::to_string(i) + "]: %" + name +
           " is not an input the CPU reference engine provides (tokens, positions)");
  }
}

const CpuOpBinder& binder(const Artifact& artifact, const CpuOpTable& table, std::size_t index) {
  const std::string& kind = artifact.graph().ops[index].op;
  const auto it = table.find(kind);
  if (it != table.end()) return it->second;
  std::string known;
  for (const auto& [name, bind] : table) known += (known.empty() ? "" : ", ") + name;
  fail(artifact.dir() + "/manifest.json: graph.ops[" + std::to_string(index) + "].op: \"" + kind +
       "\" is not an op the CPU reference engine runs (" + known + ")");
}

}  // namespace

// Binds each op through its kind's function for every rank, and finds where each value is read for
// the last time, so that a step holds only the values still to be read.
CpuReferenceModel::BoundGraph CpuReferenceModel::bind_graph(const Artifact& artifact,
                                                            const CpuOpTable& table) {
  check_inputs(artifact);
  const ArtifactGraph& graph = artifact.graph();
  BoundGraph bound;
  int logit_ops = 0;
  std::vector<std::size_t> last_use(graph.values.size(), 0);
  for (int r = 0; r < artifact.ranks(); ++r) {
    std::vector<CpuOpRun>& ops = bound.ranks.emplace_back();
    for (std::size_t i = 0; i < graph.ops.size(); ++i) {
      bool writes_logits = false;
      ops.push_back(binder(artifact, table, i)(CpuOpBinding(artifact, i, r, &writes_logits)));
      if (r == 0) logit_ops += writes_logits;
    }
  }
  for (std::size_t i = 0; i < graph.ops.size(); ++i) {
    for (int v : graph.ops[i].operands) last_use[static_cast<std::size_t>(v)] = i;
    for (int v : graph.ops[i].results) last_use[static_cast<std::size_t>(v)] = i;
  }
  if (logit_ops != 1)
    fail(artifact.dir() + "/manifest.json: graph.ops: " + std::to_string(logit_ops) +
         " ops compute the logits, expected one (lm_head_sample)");
  bound.last_uses.assign(graph.ops.size(), {});
  for (const GraphOp& op : graph.ops)
    for (int v : op.results) bound.last_uses[last_use[static_cast<std::size_t>(v)]].push_back(v);
  return bound;
}

CpuStep CpuReferenceModel::step_rows(const Step& step) const {
  const int vocab = vocab_size();
  CpuStep s;
  for (const ScheduledSequence& seq : step.sequences) {
    for (std::size_t i = 0; i < seq.tokens.size(); ++i) {
      const std::int32_t token = seq.tokens[i];
      if (token < 0 || token >= vocab)
        fail("request " + std::to_string(seq.request) + ": token id " + std::to_string(token) +
             " is outside the vocabulary of " + std::to_string(vocab));
      s.tokens.push_back(token);
      s.positions.push_back(seq.first_position + static_cast<int>(i));
      s.pages.push_back(seq.page_table);
    }
    if (seq.samples && !seq.tokens.empty())
      s.sample_rows.push_back(static_cast<int>(s.tokens.size()) - 1);
  }
  s.rows = static_cast<int>(s.tokens.size());
  return s;
}

void CpuReferenceModel::forward(const Step& step, std::vector<float>& logits) {
  const std::size_t ranks = graph_.ranks.size();
  std::vector<CpuStep> steps(ranks, step_rows(step));
  logits.assign(steps[0].sample_rows.size() * static_cast<std::size_t>(vocab_size()), 0.0f);
  std::vector<std::vector<float>> rank_logits(ranks, logits);
  for (std::size_t r = 0; r < ranks; ++r) {
    CpuStep& s = steps[r];
    s.rank = static_cast<int>(r);
    s.ranks = &steps;
    s.logits = r == 0 ? &logits : &rank_logits[r];
    s.kv = &kv_caches_[r];
    s.values.resize(artifact_->graph().values.size());
  }
  // Op by op, every rank before the next op: all_reduce reads what every rank has computed.
  for (std::size_t i = 0; i < graph_.last_uses.size(); ++i) {
    for (std::size_t r = 0; r < ranks; ++r) graph_.ranks[r][i](steps[r]);
    for (CpuStep& s : steps)
      for (int v : graph_.last_uses[i])
        s.values[static_cast<std::size_t>(v)] = std::vector<float>();
  }
  for (std::size_t r = 1; r < ranks; ++r)
    if (std::memcmp(rank_logits[r].data(), logits.data(), logits.size() * sizeof(float)) != 0)
      fail("CPU reference engine: rank " + std::to_string(r) +
           "'s logits differ from rank 0's: the ranks' residual streams diverged (an all_reduce "
           "that does not give every rank the same sum)");
}

}  // namespace telos::exec
