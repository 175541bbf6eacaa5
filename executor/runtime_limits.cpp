#include "executor/runtime_limits.hpp"

#include "support/error.hpp"

namespace telos::exec {
namespace {

// `asked` where it is set (checked against 1 and `compiled`), else `compiled`.
int resolve(const char* option, const char* field, int asked, int compiled) {
  if (asked == 0) return compiled;
  if (asked < 1) fail(std::string(option) + " " + std::to_string(asked) + ": expected at least 1");
  if (asked > compiled)
    fail(std::string(option) + " " + std::to_string(asked) + " is above the artifact's " + field +
         " " + std::to_string(compiled) + " (the most it was compiled for)");
  return asked;
}

}  // namespace

RuntimeLimits resolve_runtime_limits(const Artifact& artifact, const RuntimeLimits& asked) {
  const ServingConfig& s = artifact.serving();
  RuntimeLimits r;
  r.max_batch = resolve("--max-batch", "serving.max_batch", asked.max_batch, s.max_batch);
  r.max_seq_len = resolve("--max-seq-len", "serving.max_seq_len", asked.max_seq_len, s.max_seq_len);
  r.prefill_chunk =
      resolve("--prefill-chunk", "serving.prefill_chunk", asked.prefill_chunk, s.prefill_chunk);
  if (s.kv_pool_pages) {
    r.kv_pages = resolve("--kv-pages", "serving.kv_pool.pages", asked.kv_pages, *s.kv_pool_pages);
  } else {
    if (asked.kv_pages < 0)
      fail("--kv-pages " + std::to_string(asked.kv_pages) + ": expected at least 1");
    r.kv_pages = asked.kv_pages;
  }
  // A pool chosen at start must hold one request of max_seq_len tokens, or the limits would admit
  // requests that can never run.
  const int pages_per_sequence = (r.max_seq_len + s.kv_page_size - 1) / s.kv_page_size;
  if (asked.kv_pages > 0 && asked.kv_pages < pages_per_sequence)
    fail("--kv-pages " + std::to_string(asked.kv_pages) + " cannot hold one sequence of " +
         describe_limit("--max-seq-len", "max_seq_len", r.max_seq_len, asked.max_seq_len > 0) +
         " (" + std::to_string(pages_per_sequence) + " pages of " + std::to_string(s.kv_page_size) +
         " positions): lower --max-seq-len or raise --kv-pages");
  return r;
}

std::string describe_limit(const char* option, const char* field, int value, bool set_at_start) {
  return (set_at_start ? std::string(option) + " " : std::string("the artifact's ") + field + " ") +
         std::to_string(value);
}

std::string runtime_limits_summary(const Artifact& artifact, const RuntimeLimits& asked) {
  const ServingConfig& s = artifact.serving();
  std::string out;
  auto add = [&](const char* name, int value, const std::string& compiled) {
    if (value == 0) return;
    out += (out.empty() ? "runtime limits: " : ", ") + std::string(name) + " " +
           std::to_string(value) + " (" + compiled + ")";
  };
  auto compiled = [](int v) { return "compiled " + std::to_string(v); };
  add("max_batch", asked.max_batch, compiled(s.max_batch));
  add("max_seq_len", asked.max_seq_len, compiled(s.max_seq_len));
  add("prefill_chunk", asked.prefill_chunk, compiled(s.prefill_chunk));
  add("kv_pages", asked.kv_pages,
      s.kv_pool_pages ? compiled(*s.kv_pool_pages) : std::string("compiled: a memory fraction"));
  return out;
}

}  // namespace telos::exec
