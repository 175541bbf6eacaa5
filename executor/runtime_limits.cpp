#include "executor/runtime_limits.hpp"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>
#include <sstream>

#include "support/artifact_limits.hpp"
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
  if (asked.mixed_chunk < 0)
    fail("--mixed-chunk " + std::to_string(asked.mixed_chunk) + ": expected at least 1");
  if (asked.mixed_chunk > r.prefill_chunk)
    fail("--mixed-chunk " + std::to_string(asked.mixed_chunk) + " is above the prefill chunk, " +
         describe_limit("--prefill-chunk", "prefill_chunk", r.prefill_chunk,
                        asked.prefill_chunk > 0));
  r.mixed_chunk =
      asked.mixed_chunk > 0 ? asked.mixed_chunk : std::min(r.prefill_chunk, kDefaultMixedChunk);
  // kv_pages stays 0 unless --kv-pages is given: the backend then sizes the artifact's pool within
  // the memory it has (device_kv_pool_pages, check_host_memory).
  if (s.kv_pool_pages && asked.kv_pages != 0) {
    resolve("--kv-pages", "serving.kv_pool.pages", asked.kv_pages, *s.kv_pool_pages);
  } else if (asked.kv_pages < 0) {
    fail("--kv-pages " + std::to_string(asked.kv_pages) + ": expected at least 1");
  } else if (asked.kv_pages > limits::kMaxKvPoolPages) {
    fail("--kv-pages " + std::to_string(asked.kv_pages) + " is above the most a pool holds (" +
         std::to_string(limits::kMaxKvPoolPages) + ")");
  }
  r.kv_pages = asked.kv_pages;
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

std::int64_t host_memory_available() {
  std::int64_t available = -1;
  std::ifstream meminfo("/proc/meminfo");
  for (std::string line; available < 0 && std::getline(meminfo, line);) {
    long long kib = 0;
    if (std::sscanf(line.c_str(), "MemAvailable: %lld kB", &kib) == 1) available = kib * 1024;
  }
  if (available < 0)
    available = static_cast<std::int64_t>(::sysconf(_SC_AVPHYS_PAGES)) * ::sysconf(_SC_PAGESIZE);
  // The address space a limit leaves (ulimit -v), less what is mapped already.
  struct rlimit as {};
  if (::getrlimit(RLIMIT_AS, &as) == 0 && as.rlim_cur != RLIM_INFINITY) {
    std::int64_t mapped = 0;
    std::ifstream status("/proc/self/status");
    for (std::string line; std::getline(status, line);) {
      long long kib = 0;
      if (std::sscanf(line.c_str(), "VmSize: %lld kB", &kib) == 1) mapped = kib * 1024;
    }
    available = std::min(available, static_cast<std::int64_t>(as.rlim_cur) - mapped);
  }
  return std::max<std::int64_t>(available, 0);
}

namespace {
std::string mib(std::int64_t bytes) {
  std::ostringstream o;
  o.setf(std::ios::fixed);
  o.precision(1);
  o << static_cast<double>(bytes) / (1 << 20) << " MiB";
  return o.str();
}
}  // namespace

void check_host_memory(const std::string& what, std::int64_t bytes, const std::string& remedy) {
  const std::int64_t available = host_memory_available();
  if (bytes > available)
    fail(what + " needs " + mib(bytes) + " of host memory, more than the " + mib(available) +
         " available: " + remedy);
}

int device_kv_pool_pages(const DevicePoolInputs& in, std::string* note) {
  const std::int64_t room = in.free_bytes - in.fixed_bytes;
  const std::string fixed = "the weights, slot images, arena and descriptors (" +
                            mib(in.fixed_bytes) + ") leave " +
                            mib(std::max<std::int64_t>(room, 0)) + " of the " + mib(in.free_bytes) +
                            " free on the device";
  if (in.asked_pages > 0) {
    if (static_cast<double>(in.asked_pages) * static_cast<double>(in.bytes_per_page) >
        static_cast<double>(room))
      fail("--kv-pages " + std::to_string(in.asked_pages) + " needs " +
           mib(in.asked_pages * in.bytes_per_page) + " of device memory, but " + fixed +
           ": pick a smaller pool with --kv-pages (at most " +
           std::to_string(std::max<std::int64_t>(room / in.bytes_per_page, 0)) + ")");
    return in.asked_pages;
  }
  // The default pool: the artifact's, within the free memory less the headroom.
  double budget = static_cast<double>(room - kDeviceHeadroomBytes);
  if (in.memory_fraction)
    budget = std::min(budget, static_cast<double>(in.total_bytes) * *in.memory_fraction -
                                  static_cast<double>(in.fixed_bytes));
  const std::int64_t fits = static_cast<std::int64_t>(
      std::clamp(std::floor(budget / static_cast<double>(in.bytes_per_page)), 0.0,
                 static_cast<double>(limits::kMaxKvPoolPages)));
  const std::int64_t pages =
      in.artifact_pages ? std::min<std::int64_t>(*in.artifact_pages, fits) : fits;
  if (pages < in.sequence_pages)
    fail("the KV pool: " + fixed + ", less " + mib(kDeviceHeadroomBytes) +
         " kept for graphs: room for " + std::to_string(pages) + " KV pages of " +
         mib(in.bytes_per_page) +
         ", fewer than one sequence of the artifact's max_seq_len needs (" +
         std::to_string(in.sequence_pages) +
         "); free device memory, or lower --max-seq-len and pick a pool with --kv-pages");
  if (in.artifact_pages && pages < *in.artifact_pages && note)
    *note = "the artifact's KV pool of " + std::to_string(*in.artifact_pages) + " pages (" +
            mib(*in.artifact_pages * in.bytes_per_page) + ") does not fit: " + fixed + ", less " +
            mib(kDeviceHeadroomBytes) + " kept for graphs; using " + std::to_string(pages) +
            " pages (--kv-pages picks a count)";
  return static_cast<int>(pages);
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
  add("mixed_chunk", asked.mixed_chunk, "default " + std::to_string(kDefaultMixedChunk));
  add("kv_pages", asked.kv_pages,
      s.kv_pool_pages ? compiled(*s.kv_pool_pages) : std::string("compiled: a memory fraction"));
  return out;
}

}  // namespace telos::exec
