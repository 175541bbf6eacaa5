// telos-run bench: how fast an artifact runs on this machine. Every scenario uses synthetic prompts
// (token ids from a fixed seed) with ignore_eos, so lengths are exact and runs repeat, and a
// cache_salt per request, so that no prompt is served from the prefix cache; decoding is
// greedy unless --temperature (with --top-p, --top-k, --min-p) asks for sampling, each request
// seeded from --seed and its place in the run. Figures:
//  - always: artifact load time (process start → engine ready, graphs captured) and load → first
//    token (a one-token warm-up request submitted once the engine is ready);
//  - per --batch size B: B requests of --prompt-len tokens generating --gen each, submitted
//    together: total time, output tokens/s, the median decode step (ms per token; full-batch
//    decode steps after the first), the host time per decode step (scheduling, descriptor
//    packing, launch), how many of those steps were launched before the previous one was back
//    (overlapped; --no-overlap turns that off) and the device's idle gap between steps (GPU
//    engine only); GPU engine: of the host time, the device API calls that launch the step, in
//    total and by call group (descriptor upload, stream wait, graph launch, the rest: which
//    grows with the batch) with the descriptor bytes uploaded, medians; the
//    bench's own idle-gap events (two a step) are timed apart and left out of the host time; the
//    loop thread's CPU time over the same work (below the host time by what it spent off its CPU),
//    and over the whole run the share of the machine's CPU time stolen by the hypervisor
//    (/proc/stat; null when the run took less than one of its clock ticks) and the process's
//    involuntary context switches: whether a slow step was slow work or a descheduled thread;
//    before the run, a probe of the CPU's speed (an integer chain, random walks over 128 KB and
//    64 MB): whether slow work is a slow core or slow memory;
//  - --mixed N: N requests with prompt and output lengths drawn from --seed, through the
//    scheduler at once: total time, output tokens/s, mean and largest TTFT;
//  - --ttft L1,L2,...: one request at a time, prompt of L tokens: submit → first token;
//  - --profile (GPU engine): after each batch run, a decode step of its largest bucket (a
//    full-batch step) replayed as its graph and kernel by kernel (GpuStepExecutor::profile_step):
//    time per kernel template, the sum against the graph's time (what programmatic launches
//    overlap);
//  - always: the process's resident memory at the end and its peak (VmRSS, VmHWM).
// A table on stdout, or with --json one JSON object with every figure (tools/bench_suite.py
// parses it).
#include <sys/resource.h>
#include <time.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

#include "executor/commands.hpp"
#include "executor/engine.hpp"
#include "executor/gpu/gpu_step_executor.hpp"
#include "support/error.hpp"

namespace telos::exec {
namespace {

// Static initialization runs before main: the closest this program gets to its own start.
const Clock::time_point kProcessStart = Clock::now();

struct BenchOptions {
  std::string artifact;
  std::vector<int> batches = {1};
  int prompt_len = 32;
  int gen = 256;
  int mixed = 0;
  std::uint64_t seed = 0;
  std::vector<int> ttft;
  bool json = false;
  bool profile = false;
  bool no_overlap = false;
  // Every request's sampling (ignore_eos, max_tokens and seed set per request).
  SamplingParams sampling = [] {
    SamplingParams p;
    p.temperature = 0;
    p.ignore_eos = true;
    return p;
  }();
  EngineChoice engine = EngineChoice::Auto;
  RuntimeLimits limits;
  bool prefix_cache = true;  // --no-prefix-cache: false
};

double seconds(Clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

// The q-quantile (0..1) by nearest rank; 0 for no samples.
double quantile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const auto i = static_cast<std::size_t>(q * static_cast<double>(v.size() - 1) + 0.5);
  return v[std::min(i, v.size() - 1)];
}

std::vector<std::int32_t> synthetic_prompt(std::mt19937_64& rng, int length, int vocab) {
  std::uniform_int_distribution<std::int32_t> token(0, vocab - 1);
  std::vector<std::int32_t> prompt(static_cast<std::size_t>(length));
  for (std::int32_t& t : prompt) t = token(rng);
  return prompt;
}

// A request of `gen` tokens with the bench's sampling and the seed `seed`. Each has a cache_salt of
// its own: the scenarios draw their prompts from the same seed, so they share prefixes that the
// prefix cache would otherwise serve, and the figures are those of prompts computed in full.
GenerationRequest bench_request(const SamplingParams& sampling, std::vector<std::int32_t> prompt,
                                int gen, std::uint64_t seed) {
  static std::uint64_t requests = 0;
  GenerationRequest r;
  r.prompt = std::move(prompt);
  r.sampling = sampling;
  r.sampling.max_tokens = gen;
  r.sampling.seed = seed;
  r.cache_salt = "bench-" + std::to_string(requests++);
  return r;
}

struct Finished {
  int tokens = 0;
  double first_token_seconds = 0;
};

// Reads a stream to its end; a request that does not end by length is a failed run.
Finished drain(const RequestHandle& h) {
  Finished f;
  RequestEvent e;
  while (h->next(e)) {
    if (e.token) ++f.tokens;
    if (!e.finish) continue;
    if (*e.finish == FinishReason::Error) fail("bench: request " + std::to_string(h->id()) + ": " + e.error);
    if (*e.finish != FinishReason::Length)
      fail("bench: request " + std::to_string(h->id()) + " ended early (" +
           std::string(finish_reason_name(*e.finish)) + ")");
    f.first_token_seconds = e.timings.first_token_seconds;
  }
  return f;
}

// `f` as the double of its shortest decimal form (0.8f as 0.8, not 0.800000011920929), for the
// JSON.
double decimal(float f) {
  char buf[32];
  const auto end = std::to_chars(buf, buf + sizeof buf, f).ptr;
  return std::strtod(std::string(buf, end).c_str(), nullptr);
}

nlohmann::json or_null(bool known, double value) {
  return known ? nlohmann::json(value) : nlohmann::json(nullptr);
}

// The machine's CPU time so far, from /proc/stat's first line: all of it and the part stolen by
// the hypervisor (other guests ran on the vCPUs), in clock ticks; {0, 0} where unreadable.
struct CpuTicks {
  double total = 0, steal = 0;
};
CpuTicks cpu_ticks() {
  std::ifstream in("/proc/stat");
  std::string cpu;
  double user = 0, nice = 0, system = 0, idle = 0, iowait = 0, irq = 0, softirq = 0, steal = 0;
  if (!(in >> cpu >> user >> nice >> system >> idle >> iowait >> irq >> softirq >> steal) ||
      cpu != "cpu")
    return {};
  return {user + nice + system + idle + iowait + irq + softirq + steal, steal};
}

// What reading the thread CPU clock twice in a row measures (median of 201 pairs, µs): the clock's
// own cost, which each step's host_cpu_us_per_step includes once (a system call where the vDSO
// does not serve that clock).
double thread_cpu_clock_us() {
  std::vector<double> d;
  for (int i = 0; i < 201; ++i) {
    timespec a{}, b{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &a);
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &b);
    d.push_back(1e6 * static_cast<double>(b.tv_sec - a.tv_sec) +
                1e-3 * static_cast<double>(b.tv_nsec - a.tv_nsec));
  }
  std::nth_element(d.begin(), d.begin() + 100, d.end());
  return d[100];
}

// How fast this process's CPU runs, by three loops of fixed work (ns a step, median of 5 runs of
// each): `alu` a chain of dependent integer operations (the core alone), `cache` a random walk
// over 128 KB (the core's caches), `dram` a random walk over 64 MB (memory and address
// translation). Slow host steps with a slow `alu` are a slow core; with only the walks slow, the
// process's memory.
struct CpuProbe {
  double alu_ns = 0, cache_ns = 0, dram_ns = 0;
};
CpuProbe cpu_probe() {
  auto median_ns = [](auto&& loop, long steps) {
    std::vector<double> t;
    for (int i = 0; i < 5; ++i) {
      const Clock::time_point a = Clock::now();
      loop(steps);
      t.push_back(1e9 * seconds(Clock::now() - a) / static_cast<double>(steps));
    }
    std::nth_element(t.begin(), t.begin() + 2, t.end());
    return t[2];
  };
  volatile std::uint64_t sink = 0;
  CpuProbe p;
  p.alu_ns = median_ns(
      [&](long n) {
        std::uint64_t x = 88172645463325252ull;
        for (long i = 0; i < n; ++i) x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        sink = x;
      },
      2000000);
  // A random cycle through `n` slots (Sattolo's shuffle): each load's address is the last load.
  auto walk_ns = [&](std::size_t n, long steps) {
    std::vector<std::uint32_t> next(n);
    for (std::size_t i = 0; i < n; ++i) next[i] = static_cast<std::uint32_t>(i);
    std::mt19937_64 rng(7);
    for (std::size_t i = n - 1; i > 0; --i)
      std::swap(next[i], next[std::uniform_int_distribution<std::size_t>(0, i - 1)(rng)]);
    return median_ns(
        [&](long k) {
          std::uint32_t at = 0;
          for (long i = 0; i < k; ++i) at = next[at];
          sink = at;
        },
        steps);
  };
  p.cache_ns = walk_ns(32 * 1024, 1000000);
  p.dram_ns = walk_ns(16 * 1024 * 1024, 200000);
  return p;
}

// The process's involuntary context switches so far (preempted while runnable).
long involuntary_switches() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_nivcsw;
}

nlohmann::json batch_run(Engine& engine, const SamplingParams& sampling, int batch, int prompt_len,
                         int gen, std::uint64_t seed) {
  const int vocab = engine.artifact().model().vocab_size;
  std::mt19937_64 rng(seed);
  std::vector<GenerationRequest> requests;
  for (int i = 0; i < batch; ++i)
    requests.push_back(
        bench_request(sampling, synthetic_prompt(rng, prompt_len, vocab), gen, seed + i));
  engine.take_step_timings();
  const CpuProbe probe = cpu_probe();
  const CpuTicks ticks_before = cpu_ticks();
  const long switches_before = involuntary_switches();
  const Clock::time_point start = Clock::now();
  // At once, so the batch is scheduled into the same steps (one by one, the loop could start the
  // first request's prefill before the last arrived, and no step would hold the whole batch).
  const std::vector<RequestHandle> handles = engine.submit_all(std::move(requests));
  int tokens = 0;
  for (const RequestHandle& h : handles) tokens += drain(h).tokens;
  const double total = seconds(Clock::now() - start);
  engine.wait_idle();
  const CpuTicks ticks_after = cpu_ticks();
  const long switches = involuntary_switches() - switches_before;
  const double ticks = ticks_after.total - ticks_before.total;
  const nlohmann::json steal_pct =
      or_null(ticks > 0, 100 * (ticks_after.steal - ticks_before.steal) / ticks);
  const nlohmann::json probe_json = {
      {"alu", probe.alu_ns}, {"cache", probe.cache_ns}, {"dram", probe.dram_ns}};

  // Full-batch decode steps after the first (which follows the prefill and pays for it). The time
  // per token is the interval from one such step's start to the next's: the loop's period,
  // sampling and event delivery included.
  std::vector<double> step_s, host_s, host_cpu_s, gap_s, api_s;
  std::vector<double> upload_s, wait_s, graph_s, other_s, timing_s, upload_bytes;
  int overlapped = 0;
  const std::vector<StepTiming> steps = engine.take_step_timings();
  for (std::size_t i = 1; i < steps.size(); ++i) {
    const StepTiming& t = steps[i];
    const StepTiming& before = steps[i - 1];
    if (!t.decode || t.sequences != batch || !before.decode || before.sequences != batch) continue;
    step_s.push_back(seconds(t.started - before.started));
    host_s.push_back(t.host_seconds);
    if (t.host_cpu_seconds >= 0) host_cpu_s.push_back(t.host_cpu_seconds);
    if (t.idle_gap_seconds >= 0) gap_s.push_back(t.idle_gap_seconds);
    if (t.launch_call_seconds >= 0) api_s.push_back(t.launch_call_seconds);
    const LaunchCallTimes& c = t.launch_calls;
    if (c.upload_bytes >= 0) {
      upload_s.push_back(c.upload_seconds);
      wait_s.push_back(c.wait_seconds);
      graph_s.push_back(c.graph_launch_seconds);
      other_s.push_back(c.other_seconds);
      timing_s.push_back(c.timing_seconds);
      upload_bytes.push_back(static_cast<double>(c.upload_bytes));
    }
    overlapped += t.overlapped ? 1 : 0;
  }
  // A quantile of `v` times `scale`, or null when nothing was measured.
  auto stat = [](const std::vector<double>& v, double q, double scale) {
    return or_null(!v.empty(), quantile(v, q) * scale);
  };
  return {{"batch", batch},
          {"prompt_len", prompt_len},
          {"gen", gen},
          {"output_tokens", tokens},
          {"total_s", total},
          {"output_tokens_per_s", tokens / total},
          {"decode_steps", step_s.size()},
          {"overlapped_steps", overlapped},
          {"ms_per_token", stat(step_s, 0.5, 1e3)},
          {"host_us_per_step", stat(host_s, 0.5, 1e6)},
          {"host_us_per_step_p90", stat(host_s, 0.9, 1e6)},
          {"host_cpu_us_per_step", stat(host_cpu_s, 0.5, 1e6)},
          {"thread_cpu_clock_us", thread_cpu_clock_us()},
          {"cpu_probe_ns", probe_json},
          {"cpu_steal_pct", steal_pct},
          {"involuntary_switches", switches},
          {"host_launch_calls_us_per_step", stat(api_s, 0.5, 1e6)},
          {"host_upload_us", stat(upload_s, 0.5, 1e6)},
          {"host_wait_us", stat(wait_s, 0.5, 1e6)},
          {"host_graph_launch_us", stat(graph_s, 0.5, 1e6)},
          {"host_other_us", stat(other_s, 0.5, 1e6)},
          {"host_timing_events_us", stat(timing_s, 0.5, 1e6)},
          {"descriptor_upload_bytes", stat(upload_bytes, 0.5, 1)},
          {"gpu_idle_gap_us", stat(gap_s, 0.5, 1e6)},
          {"gpu_idle_gap_us_p90", stat(gap_s, 0.9, 1e6)}};
}

// Prompts uniform in [32, 1024] and outputs in [16, 256] tokens, narrowed to fit max_seq_len
// (prompts to at most half of it, outputs to the rest) so that small artifacts run it too.
nlohmann::json mixed_run(Engine& engine, const SamplingParams& sampling, int n,
                         std::uint64_t seed) {
  const int vocab = engine.artifact().model().vocab_size;
  const int max_len = engine.max_seq_len();
  const int prompt_hi = std::min(1024, max_len / 2), prompt_lo = std::min(32, prompt_hi);
  const int out_hi = std::min(256, max_len - prompt_hi), out_lo = std::min(16, out_hi);
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> prompt_len(prompt_lo, prompt_hi), out_len(out_lo, out_hi);
  std::vector<GenerationRequest> requests;
  for (int i = 0; i < n; ++i) {
    const int p = prompt_len(rng);
    const int gen = out_len(rng);
    requests.push_back(bench_request(sampling, synthetic_prompt(rng, p, vocab), gen, seed + i));
  }
  const Clock::time_point start = Clock::now();
  // At once, so the batch is scheduled into the same steps (one by one, the loop could start the
  // first request's prefill before the last arrived, and no step would hold the whole batch).
  const std::vector<RequestHandle> handles = engine.submit_all(std::move(requests));
  int tokens = 0;
  std::vector<double> ttft;
  for (const RequestHandle& h : handles) {
    const Finished f = drain(h);
    tokens += f.tokens;
    ttft.push_back(f.first_token_seconds);
  }
  const double total = seconds(Clock::now() - start);
  engine.wait_idle();
  double mean = 0;
  for (double t : ttft) mean += t / static_cast<double>(ttft.size());
  return {{"requests", n},
          {"seed", seed},
          {"prompt_len_range", {prompt_lo, prompt_hi}},
          {"gen_range", {out_lo, out_hi}},
          {"output_tokens", tokens},
          {"total_s", total},
          {"output_tokens_per_s", tokens / total},
          {"mean_ttft_s", mean},
          {"max_ttft_s", *std::max_element(ttft.begin(), ttft.end())}};
}

nlohmann::json ttft_run(Engine& engine, const SamplingParams& sampling, int prompt_len,
                        std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  // The median of three, so that one stray scheduling delay does not decide the figure.
  std::vector<double> ttft;
  for (int i = 0; i < 3; ++i) {
    RequestHandle h = engine.submit(bench_request(
        sampling, synthetic_prompt(rng, prompt_len, engine.artifact().model().vocab_size), 1,
        seed + i));
    ttft.push_back(drain(h).first_token_seconds);
    engine.wait_idle();
  }
  return {{"prompt_len", prompt_len}, {"ttft_s", quantile(ttft, 0.5)}};
}

// Against the limits in force: the artifact's, or those set at start (--max-batch, --max-seq-len).
void check_flags(const BenchOptions& o, const Artifact& a) {
  const RuntimeLimits r = resolve_runtime_limits(a, o.limits);
  const std::string max_batch =
      describe_limit("--max-batch", "max_batch", r.max_batch, o.limits.max_batch > 0);
  const std::string max_seq_len =
      describe_limit("--max-seq-len", "max_seq_len", r.max_seq_len, o.limits.max_seq_len > 0);
  for (int b : o.batches)
    if (b > r.max_batch) fail("bench: --batch " + std::to_string(b) + " is above " + max_batch);
  if (o.prompt_len + o.gen > r.max_seq_len)
    fail("bench: --prompt-len " + std::to_string(o.prompt_len) + " plus --gen " +
         std::to_string(o.gen) + " is above " + max_seq_len);
  for (int l : o.ttft)
    if (l + 1 > r.max_seq_len)
      fail("bench: --ttft " + std::to_string(l) + " leaves no room for a token within " +
           max_seq_len);
}

std::string fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}
std::string cell(const nlohmann::json& v, int digits) {
  return v.is_null() ? "-" : fixed(v.get<double>(), digits);
}

// kB of a /proc/self/status line ("VmRSS:", "VmHWM:"); -1 where there is none.
long long proc_status_kb(const std::string& key) {
  std::ifstream in("/proc/self/status");
  for (std::string line; std::getline(in, line);)
    if (line.rfind(key, 0) == 0) return std::atoll(line.c_str() + key.size());
  return -1;
}

// A step profile grouped by kernel instance, in first-launch order.
nlohmann::json profile_json(const StepProfile& p) {
  nlohmann::json kernels = nlohmann::json::array();
  std::map<std::string, std::size_t> at;
  for (const KernelTime& k : p.launches) {
    auto [it, fresh] = at.emplace(k.instance, kernels.size());
    if (fresh) kernels.push_back({{"instance", k.instance}, {"launches", 0}, {"total_us", 0.0}});
    nlohmann::json& e = kernels[it->second];
    e["launches"] = e["launches"].get<int>() + 1;
    e["total_us"] = e["total_us"].get<double>() + k.us;
  }
  return {{"bucket", p.bucket},
          {"graph_us", p.graph_us},
          {"serial_us", p.serial_us},
          {"launch_host_us", p.launch_host_us},
          {"kernels", kernels}};
}

// Per kernel template (the instance up to '<'): launches, µs, share of the serial sum.
void print_profile(const nlohmann::json& p) {
  std::map<std::string, std::pair<int, double>> by;
  std::vector<std::string> order;
  for (const nlohmann::json& k : p["kernels"]) {
    const std::string inst = k["instance"];
    const std::string name = inst.substr(0, inst.find('<'));
    if (!by.count(name)) order.push_back(name);
    by[name].first += k["launches"].get<int>();
    by[name].second += k["total_us"].get<double>();
  }
  const double serial = p["serial_us"].get<double>();
  std::cout << "profile of one " << p["bucket"].get<std::string>() << " step: graph "
            << fixed(p["graph_us"].get<double>(), 1) << " us, kernels one by one "
            << fixed(serial, 1) << " us; host time of the graph launch "
            << fixed(p["launch_host_us"].get<double>(), 1) << " us\n";
  std::printf("  %-40s %8s %10s %7s\n", "kernel", "launches", "total us", "share");
  for (const std::string& name : order)
    std::printf("  %-40s %8d %10s %6.1f%%\n", name.c_str(), by[name].first, fixed(by[name].second, 1).c_str(),
                serial > 0 ? 100.0 * by[name].second / serial : 0.0);
}

void print_table(const nlohmann::json& r) {
  std::cout << "telos-run bench: " << r["model"].get<std::string>() << " on the "
            << r["engine"].get<std::string>() << " engine\n"
            << "load " << fixed(r["load_s"].get<double>(), 3) << " s (artifact checked at "
            << fixed(r["artifact_checked_s"].get<double>(), 3) << " s), load to first token "
            << fixed(r["load_to_first_token_s"].get<double>(), 3) << " s\n";
  const nlohmann::json& sp = r["sampling"];
  if (sp["temperature"].get<double>() <= 0)
    std::cout << "sampling: greedy\n";
  else
    std::cout << "sampling: temperature " << sp["temperature"] << ", top_p " << sp["top_p"]
              << ", top_k " << sp["top_k"] << ", min_p " << sp["min_p"] << "\n";
  if (!r["runs"].empty()) {
    std::printf("%6s %7s %5s %9s %10s %9s %11s %11s %13s %13s\n", "batch", "prompt", "gen",
                "total s", "tok/s", "ms/token", "host us", "host us p90", "gpu idle us",
                "gpu idle p90");
    for (const nlohmann::json& run : r["runs"])
      std::printf("%6d %7d %5d %9s %10s %9s %11s %11s %13s %13s\n", run["batch"].get<int>(),
                  run["prompt_len"].get<int>(), run["gen"].get<int>(),
                  fixed(run["total_s"].get<double>(), 3).c_str(),
                  fixed(run["output_tokens_per_s"].get<double>(), 1).c_str(),
                  cell(run["ms_per_token"], 3).c_str(), cell(run["host_us_per_step"], 1).c_str(),
                  cell(run["host_us_per_step_p90"], 1).c_str(),
                  cell(run["gpu_idle_gap_us"], 1).c_str(),
                  cell(run["gpu_idle_gap_us_p90"], 1).c_str());
  }
  for (const nlohmann::json& run : r["runs"])
    std::cout << "host at batch " << run["batch"] << ": " << cell(run["host_cpu_us_per_step"], 1)
              << " us of CPU time a step (median; the clock's own cost "
              << fixed(run["thread_cpu_clock_us"].get<double>(), 1)
              << " us of it); over the run, CPU stolen by the hypervisor "
              << (run["cpu_steal_pct"].is_null()
                      ? std::string("-")
                      : fixed(run["cpu_steal_pct"].get<double>(), 2) + "%")
              << " of the machine's, " << run["involuntary_switches"].get<long>()
              << " involuntary context switches; CPU probe "
              << fixed(run["cpu_probe_ns"]["alu"].get<double>(), 2) << " / "
              << fixed(run["cpu_probe_ns"]["cache"].get<double>(), 2) << " / "
              << fixed(run["cpu_probe_ns"]["dram"].get<double>(), 1)
              << " ns a step (integer chain / 128 KB walk / 64 MB walk)\n";
  for (const nlohmann::json& run : r["runs"])
    if (!run["host_upload_us"].is_null())
      std::cout << "launch calls at batch " << run["batch"] << ": upload "
                << fixed(run["host_upload_us"].get<double>(), 1) << ", wait "
                << fixed(run["host_wait_us"].get<double>(), 1) << ", graph launch "
                << fixed(run["host_graph_launch_us"].get<double>(), 1) << ", other "
                << fixed(run["host_other_us"].get<double>(), 1) << " us (the bench's timing events "
                << fixed(run["host_timing_events_us"].get<double>(), 1) << " us apart); descriptor "
                << fixed(run["descriptor_upload_bytes"].get<double>(), 0) << " bytes (medians)\n";
  if (!r["mixed"].is_null()) {
    const nlohmann::json& m = r["mixed"];
    std::cout << "mixed: " << m["requests"] << " requests (seed " << m["seed"] << ", prompts "
              << m["prompt_len_range"][0] << ".." << m["prompt_len_range"][1] << ", outputs "
              << m["gen_range"][0] << ".." << m["gen_range"][1] << "): "
              << m["output_tokens"] << " tokens in " << fixed(m["total_s"].get<double>(), 3)
              << " s, " << fixed(m["output_tokens_per_s"].get<double>(), 1)
              << " tok/s, TTFT mean " << fixed(m["mean_ttft_s"].get<double>() * 1e3, 1)
              << " ms, max " << fixed(m["max_ttft_s"].get<double>() * 1e3, 1) << " ms\n";
  }
  for (const nlohmann::json& t : r["ttft"])
    std::cout << "ttft: prompt " << t["prompt_len"] << " tokens: "
              << fixed(t["ttft_s"].get<double>() * 1e3, 2) << " ms\n";
  for (const nlohmann::json& run : r["runs"])
    if (run.contains("profile")) print_profile(run["profile"]);
  std::cout << "host memory: resident " << fixed(r["host_rss_mb"].get<double>(), 1) << " MB at the end, peak "
            << fixed(r["host_peak_rss_mb"].get<double>(), 1) << " MB\n";
}

int run_bench(const BenchOptions& o) {
  std::shared_ptr<const Artifact> artifact = load_artifact(o.artifact, o.engine);
  // The manifest's checks and every checksum (and beside them the GPU's start), from the
  // process's start.
  const double artifact_checked = seconds(Clock::now() - kProcessStart);
  check_flags(o, *artifact);
  validate(o.sampling, artifact->model().vocab_size, "bench");
  std::unique_ptr<ModelBackend> backend = make_backend(artifact, o.engine, std::cerr, o.limits);
  const std::string engine_name = backend->name();
  GpuStepExecutor* gpu = dynamic_cast<GpuStepExecutor*>(backend.get());
  if (o.profile && !gpu) fail("bench: --profile needs the gpu engine");
  EngineOptions options;
  options.record_step_timings = true;
  // Invariant checks cost host time per step: a benchmark measures the engine without them.
  options.check_invariants = false;
  options.overlap_steps = !o.no_overlap;
  options.limits = o.limits;
  options.prefix_cache = o.prefix_cache;
  std::unique_ptr<Engine> engine = Engine::create(artifact, std::move(backend), options);
  const double load = seconds(Clock::now() - kProcessStart);

  // Warm-up, and the first token a freshly started server could give.
  std::mt19937_64 rng(o.seed);
  const int warm_len = std::min(o.prompt_len, engine->max_seq_len() - 1);
  drain(engine->submit(bench_request(
      o.sampling, synthetic_prompt(rng, warm_len, artifact->model().vocab_size), 1, o.seed)));
  const double load_to_first = seconds(Clock::now() - kProcessStart);
  engine->wait_idle();

  nlohmann::json result = {{"artifact", o.artifact},
                           {"model", artifact->model().name},
                           {"engine", engine_name},
                           {"sampling",
                            {{"temperature", decimal(o.sampling.temperature)},
                             {"top_p", decimal(o.sampling.top_p)},
                             {"top_k", o.sampling.top_k},
                             {"min_p", decimal(o.sampling.min_p)}}},
                           {"artifact_checked_s", artifact_checked},
                           {"load_s", load},
                           {"load_to_first_token_s", load_to_first},
                           {"runs", nlohmann::json::array()},
                           {"mixed", nullptr},
                           {"ttft", nlohmann::json::array()}};
  if (o.profile) gpu->keep_step_descriptors(true);
  for (int b : o.batches) {
    result["runs"].push_back(batch_run(*engine, o.sampling, b, o.prompt_len, o.gen, o.seed));
    if (o.profile) {
      engine->wait_idle();
      result["runs"].back()["profile"] = profile_json(gpu->profile_step(20));
    }
  }
  if (o.profile) gpu->keep_step_descriptors(false);
  if (o.mixed > 0) result["mixed"] = mixed_run(*engine, o.sampling, o.mixed, o.seed);
  for (int l : o.ttft) result["ttft"].push_back(ttft_run(*engine, o.sampling, l, o.seed));
  result["host_rss_mb"] = static_cast<double>(proc_status_kb("VmRSS:")) / 1024.0;
  result["host_peak_rss_mb"] = static_cast<double>(proc_status_kb("VmHWM:")) / 1024.0;
  if (o.json)
    std::cout << result.dump() << "\n";
  else
    print_table(result);
  return kExitOk;
}

}  // namespace

void add_bench_command(CLI::App& app, std::function<int()>& run) {
  auto o = std::make_shared<BenchOptions>();
  CLI::App* cmd = app.add_subcommand(
      "bench", "Measure load time, decode latency, throughput and TTFT on synthetic prompts");
  cmd->footer(kExitCodes);
  cmd->add_option("ARTIFACT", o->artifact, "The artifact directory (NAME.telos)")->required();
  cmd->add_option("--batch", o->batches,
                  "Batch sizes to run, comma-separated (default 1: decode latency; e.g. "
                  "8,64,256 with --prompt-len 512 --gen 128 for throughput)")
      ->delimiter(',')
      ->check(CLI::PositiveNumber);
  cmd->add_option("--prompt-len", o->prompt_len, "Prompt tokens per request (default 32)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--gen", o->gen, "Tokens generated per request (default 256)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--mixed", o->mixed,
                  "Also run N requests of mixed prompt and output lengths at once (default 0: off)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--seed", o->seed, "Seed of the synthetic prompts and mixed lengths (default 0)");
  cmd->add_option("--ttft", o->ttft,
                  "Prompt lengths for time to first token, one request at a time, "
                  "comma-separated (e.g. 512,2048,8192)")
      ->delimiter(',')
      ->check(CLI::PositiveNumber);
  cmd->add_option("--temperature", o->sampling.temperature,
                  "Sample every request at this temperature (default 0: greedy)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--top-p", o->sampling.top_p,
                  "With --temperature: nucleus mass in (0, 1] (default 1: off)")
      ->check(CLI::Range(0.0, 1.0));
  cmd->add_option("--top-k", o->sampling.top_k,
                  "With --temperature: keep the k most likely tokens (default 0: off)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--min-p", o->sampling.min_p,
                  "With --temperature: keep tokens at least min-p times as likely as the best "
                  "(default 0: off)")
      ->check(CLI::Range(0.0, 1.0));
  cmd->add_flag("--json", o->json, "One JSON object with every figure on stdout");
  cmd->add_flag("--profile", o->profile,
                "GPU engine: after each batch run, time a full-batch decode step kernel by kernel");
  cmd->add_flag("--no-overlap", o->no_overlap,
                "Wait for each step before scheduling the next (the engine's synchronous loop, for "
                "comparison)");
  add_engine_option(*cmd, o->engine);
  add_limit_options(*cmd, o->limits);
  add_prefix_cache_option(*cmd, o->prefix_cache);
  cmd->callback([o, &run] { run = [o] { return run_bench(*o); }; });
}

}  // namespace telos::exec
