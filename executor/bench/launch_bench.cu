// telos-launch-bench: what the host pays per CUDA call of a decode step (the target: <= 20 us of
// host time per step). telos-run's step is five calls (executor/gpu/gpu_step_executor.cpp,
// launch()): the step descriptor's cudaMemcpyAsync from pinned memory on an upload stream,
// cudaEventRecord, cudaStreamWaitEvent, cudaGraphLaunch, cudaEventRecord. This times each call on
// the host (steady_clock around the call alone; median and p90 after a warm-up) over the things
// that might make it cost: graph nodes, programmatic (PDL) edges, kernel parameters, descriptor
// bytes, and whether the GPU is still running the previous step. Nothing here loads an artifact:
// the kernels are stand-ins that spin ~2 us on %globaltimer across 132 blocks.
//
//   telos-launch-bench [--calls N] [--json PATH] [--wait auto|spin|yield|block|poll] [--steps-only]
//
// --wait sets how the host waits for the GPU (cudaSetDeviceFlags before the context exists:
// cudaDeviceScheduleAuto, the default, Spin, Yield or BlockingSync; poll: Auto, and each wait a
// loop of cudaEventQuery, as the engine waits), to tell whether the calls cost more after a long
// step because of how the host waited through it; --steps-only runs the step rows alone.
//
// Table rows (host us; "gpu us" is the graph's device time between CUDA events, idle):
//   graph   BUILD N STATE   cudaGraphLaunch of a straight line of N kernels. BUILD: plain (stream
//                           order), pdl (programmatic stream serialization on every kernel after
//                           the first, as the engine launches), pdl8 (pdl, 8 kernel parameters).
//                           STATE: idle (launch, then synchronize) or queue2 (the engine's pattern:
//                           launch N+1 while N runs, then wait for N; two graph instances by
//                           parity).
//   copy    SIZE STATE     cudaMemcpyAsync H2D pinned on the upload stream, then cudaEventRecord
//                           and the main stream's cudaStreamWaitEvent; busy = a 100 us kernel runs
//                           on the main stream meanwhile.
//   memnode SIZE N STATE   the alternative: the graph starts with a memcpy node from the pinned
//                           buffer (no separate upload call), N pdl kernels after it; "gpu us"
//                           minus the pdl graph's gives the device time the copy adds.
//   step    SHAPE LEN CALL the engine's five calls in its order, queue 2 deep, for bench_suite's
//                           four decode shapes (descriptor bytes, graph nodes) with 2 us kernels
//                           and with the model's real step length; upload (copy + record, as
//                           telos-run bench splits it), launch, and all5 (the five together).
// "busy%" is the share of timed calls after which the previous step (or the busy kernel) was still
// running: the state the call actually saw.
// Exit codes: 0 ok, 1 CUDA error or no device, 2 usage.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

constexpr int kBlocks = 132;  // one per H200 SM, like the engine's decode GEMMs
constexpr int kThreads = 128;
constexpr unsigned long long kSpinNs = 2000;
constexpr unsigned long long kBusyNs = 100000;  // the busy kernel: longer than any timed call
constexpr int kMinCalls = 300;                  // timed calls a row, at least (p90 of >= 300)

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

// --wait poll: the host waits for a step by calling cudaEventQuery until the event is done, as
// telos-run's engine does, instead of in cudaEventSynchronize.
bool g_poll = false;
void wait_event(cudaEvent_t e, const char* what) {
  if (!g_poll) return check(cudaEventSynchronize(e), what);
  cudaError_t r;
  while ((r = cudaEventQuery(e)) == cudaErrorNotReady) {
  }
  check(r, what);
}

// PTX ISA, "Special Registers: %globaltimer": a nanosecond timer, the same on every SM.
__device__ __forceinline__ unsigned long long global_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// Like codegen/kernels/common.cuh's pdl_entry (PTX ISA, "Parallel Synchronization and Communication
// Instructions: griddepcontrol"): let the successor be scheduled, then wait for the predecessor.
// No-ops when launched without programmatic stream serialization.
__device__ __forceinline__ void pdl_entry() {
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  asm volatile("griddepcontrol.wait;" ::: "memory");
}

// One thread per block spins so that the kernel's length is set by the timer, not by the SMs' load.
__device__ __forceinline__ void spin(unsigned long long ns) {
  if (threadIdx.x == 0) {
    const unsigned long long t0 = global_ns();
    while (global_ns() - t0 < ns) {
    }
  }
  __syncthreads();
}

__global__ void spin_kernel(unsigned long long ns) {
  pdl_entry();
  spin(ns);
}

// Eight parameters, as the engine's kernels carry pointers and sizes; the store never happens
// (ns is never 0) but keeps every parameter live.
__global__ void spin_kernel8(unsigned long long ns, int* out, const int* a, const int* b,
                             const int* c, const int* d, int e, int f) {
  pdl_entry();
  spin(ns);
  if (ns == 0 && threadIdx.x == 0) *out = *a + *b + *c + *d + e + f;
}

double quantile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[static_cast<std::size_t>(q * static_cast<double>(v.size() - 1) + 0.5)];
}

struct Row {
  std::string group, name;
  double median = 0, p90 = 0, busy_share = -1, gpu_us = -1;
};

using Clock = std::chrono::steady_clock;
double us(Clock::duration d) {
  return std::chrono::duration<double, std::micro>(d).count();
}

enum class Build { plain, pdl, pdl8 };
const char* build_name(Build b) {
  return b == Build::plain ? "plain" : b == Build::pdl ? "pdl" : "pdl8";
}

class Bench {
 public:
  explicit Bench(int calls) : calls_(calls) {
    check(cudaStreamCreateWithFlags(&main_, cudaStreamNonBlocking), "stream");
    check(cudaStreamCreateWithFlags(&upload_, cudaStreamNonBlocking), "stream");
    for (cudaEvent_t* e : {&done_[0], &done_[1], &ready_})
      check(cudaEventCreateWithFlags(e, cudaEventDisableTiming), "event");
    check(cudaEventCreate(&t0_), "event");
    check(cudaEventCreate(&t1_), "event");
    check(cudaMallocHost(&host_, kMaxBytes), "pinned buffer");
    std::memset(host_, 0, kMaxBytes);
    check(cudaMalloc(&dev_, kMaxBytes), "device buffer");
    check(cudaMalloc(&ints_, 8 * sizeof(int)), "device buffer");
    check(cudaMemset(ints_, 0, 8 * sizeof(int)), "device buffer");
  }
  ~Bench() {
    cudaStreamSynchronize(main_);
    cudaStreamSynchronize(upload_);
    for (cudaEvent_t e : {done_[0], done_[1], ready_, t0_, t1_}) cudaEventDestroy(e);
    cudaFreeHost(host_);
    cudaFree(dev_);
    cudaFree(ints_);
    cudaStreamDestroy(main_);
    cudaStreamDestroy(upload_);
  }

  std::vector<Row> rows;

  void graphs() {
    for (Build b : {Build::plain, Build::pdl, Build::pdl8})
      for (int n : {1, 20, 36, 145, 290}) {
        Graphs g(*this, b, n, 0);
        const std::string name = std::string(build_name(b)) + " " + std::to_string(n);
        const double gpu = g.gpu_us();
        time_graph(g, "graph", name + " idle", false).gpu_us = gpu;
        time_graph(g, "graph", name + " queue2", true);
      }
  }

  void copies() {
    for (std::size_t bytes : kSizes)
      for (bool busy : {false, true}) {
        const std::string name = kb(bytes) + (busy ? " busy" : " idle");
        std::vector<double> copy, record, wait;
        int still_busy = 0;
        for (int i = 0; i < kWarmup + calls_; ++i) {
          if (busy) {
            check(busy_kernel(), "busy kernel");
            check(cudaEventRecord(done_[0], main_), "record");
          }
          const Clock::time_point a = Clock::now();
          check(cudaMemcpyAsync(dev_, host_, bytes, cudaMemcpyHostToDevice, upload_), "copy");
          const Clock::time_point b = Clock::now();
          check(cudaEventRecord(ready_, upload_), "record");
          const Clock::time_point c = Clock::now();
          check(cudaStreamWaitEvent(main_, ready_, 0), "wait");
          const Clock::time_point d = Clock::now();
          // The busy kernel's own event: the main stream also waits for the copy itself.
          const bool running = busy && cudaEventQuery(done_[0]) == cudaErrorNotReady;
          check(cudaStreamSynchronize(main_), "copy");
          if (i < kWarmup) continue;
          copy.push_back(us(b - a)), record.push_back(us(c - b)), wait.push_back(us(d - c));
          still_busy += running;
        }
        add("copy", name + " memcpy", copy, still_busy);
        add("copy", name + " record", record, still_busy);
        add("copy", name + " wait", wait, still_busy);
      }
  }

  void memcpy_nodes() {
    for (int n : {36, 290}) {
      Graphs kernels_only(*this, Build::pdl, n, 0);
      const double base = kernels_only.gpu_us();
      for (std::size_t bytes : kSizes) {
        Graphs g(*this, Build::pdl, n, bytes);
        const std::string name = kb(bytes) + " " + std::to_string(n);
        Row& r = time_graph(g, "memnode", name + " idle", false);
        r.gpu_us = g.gpu_us();
        std::printf(
            "# memnode %s: the copy adds %.2f us of GPU time to the %d-kernel graph (%.2f us)\n",
            name.c_str(), r.gpu_us - base, n, base);
        time_graph(g, "memnode", name + " queue2", true);
      }
    }
  }

  // The engine's launch(), call for call: copy and record on the upload stream, the main stream's
  // wait, the graph, the slot's event; then collect() waits for the step before. Each of the
  // four decode shapes bench_suite measures (descriptor bytes, graph nodes, ms a step on the H200,
  // docs/benchmarks.md) runs twice: with 2 us kernels, and with kernels as long as that model's
  // step, so a call's cost can be told apart by node count and by how long the host waited.
  void steps() {
    struct Shape {
      const char* name;
      std::size_t bytes;
      int nodes;
      double step_ms;
    };
    const Shape shapes[] = {{"1B-b1", 36 * 1024, 20, 1.06},
                            {"8B-b1", 36 * 1024, 36, 4.72},
                            {"1B-b64", 169 * 1024, 145, 1.75},
                            {"8B-b64", 169 * 1024, 290, 6.38}};
    for (const Shape& shape : shapes)
      for (bool real_length : {false, true}) {
        const auto spin_ns =
            real_length ? static_cast<unsigned long long>(shape.step_ms * 1e6 / shape.nodes)
                        : kSpinNs;
        Graphs g(*this, Build::pdl, shape.nodes, 0, spin_ns);
        std::vector<double> upload, launch, total;
        int still_busy = 0;
        // The long steps take ~14 ms a call together: the minimum of calls keeps a pass short.
        for (int i = 0; i < kStepWarmup + kMinCalls; ++i) {
          const int p = i % 2;
          const Clock::time_point a = Clock::now();
          check(cudaMemcpyAsync(dev_, host_, shape.bytes, cudaMemcpyHostToDevice, upload_), "copy");
          check(cudaEventRecord(ready_, upload_), "record");
          const Clock::time_point b = Clock::now();
          check(cudaStreamWaitEvent(main_, ready_, 0), "wait");
          const Clock::time_point c = Clock::now();
          check(cudaGraphLaunch(g.exec[p], main_), "graph launch");
          const Clock::time_point d = Clock::now();
          check(cudaEventRecord(done_[p], main_), "record");
          const Clock::time_point e = Clock::now();
          const bool running = i > 0 && cudaEventQuery(done_[p ^ 1]) == cudaErrorNotReady;
          if (i > 0) wait_event(done_[p ^ 1], "step");
          if (i < kStepWarmup) continue;
          upload.push_back(us(b - a)), launch.push_back(us(d - c)), total.push_back(us(e - a));
          still_busy += running;
        }
        check(cudaStreamSynchronize(main_), "step");
        char name[64];
        std::snprintf(
            name, sizeof name, "%s %.2fms", shape.name,
            real_length ? shape.step_ms : static_cast<double>(shape.nodes) * kSpinNs * 1e-6);
        add("step", std::string(name) + " upload", upload, still_busy);
        add("step", std::string(name) + " launch", launch, still_busy);
        add("step", std::string(name) + " all5", total, still_busy);
      }
  }

 private:
  static constexpr int kWarmup = 50, kStepWarmup = 20;
  static constexpr std::size_t kSizes[] = {4 * 1024, 36 * 1024, 169 * 1024};
  static constexpr std::size_t kMaxBytes = 169 * 1024;

  static std::string kb(std::size_t bytes) { return std::to_string(bytes / 1024) + "K"; }

  cudaError_t busy_kernel() { return launch_kernel(Build::plain, kBusyNs, false); }

  cudaError_t launch_kernel(Build b, unsigned long long ns, bool serialize) {
    cudaLaunchAttribute pdl{};
    pdl.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    pdl.val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t config{};
    config.gridDim = dim3(kBlocks);
    config.blockDim = dim3(kThreads);
    config.stream = main_;
    config.attrs = serialize ? &pdl : nullptr;
    config.numAttrs = serialize ? 1 : 0;
    if (b == Build::pdl8) {
      int e = 0, f = 1;
      const int* in = ints_;
      void* args[] = {&ns, &ints_, &in, &in, &in, &in, &e, &f};
      return cudaLaunchKernelExC(&config, reinterpret_cast<const void*>(spin_kernel8), args);
    }
    void* args[] = {&ns};
    return cudaLaunchKernelExC(&config, reinterpret_cast<const void*>(spin_kernel), args);
  }

  // Two instances of one captured graph, one per step parity as the engine keeps them.
  struct Graphs {
    Graphs(Bench& bench, Build b, int n, std::size_t copy_bytes,
           unsigned long long spin_ns = kSpinNs)
        : bench(bench) {
      for (cudaGraphExec_t& e : exec) {
        cudaGraph_t graph = nullptr;
        check(cudaStreamBeginCapture(bench.main_, cudaStreamCaptureModeThreadLocal), "capture");
        if (copy_bytes)
          check(cudaMemcpyAsync(bench.dev_, bench.host_, copy_bytes, cudaMemcpyHostToDevice,
                                bench.main_),
                "capture copy");
        // The first kernel follows the step's start in plain stream order, as in the engine.
        for (int i = 0; i < n; ++i)
          check(bench.launch_kernel(b, spin_ns, b != Build::plain && i > 0), "capture");
        check(cudaStreamEndCapture(bench.main_, &graph), "capture");
        const cudaError_t err = cudaGraphInstantiate(&e, graph, 0);
        cudaGraphDestroy(graph);
        check(err, "instantiate");
        check(cudaGraphUpload(e, bench.main_), "graph upload");
      }
      check(cudaStreamSynchronize(bench.main_), "graph upload");
    }
    ~Graphs() {
      cudaStreamSynchronize(bench.main_);
      for (cudaGraphExec_t e : exec) cudaGraphExecDestroy(e);
    }
    // Device time of one launch, idle, median of 50.
    double gpu_us() {
      std::vector<double> t;
      for (int i = 0; i < 60; ++i) {
        check(cudaEventRecord(bench.t0_, bench.main_), "event");
        check(cudaGraphLaunch(exec[i % 2], bench.main_), "graph launch");
        check(cudaEventRecord(bench.t1_, bench.main_), "event");
        check(cudaEventSynchronize(bench.t1_), "graph");
        float ms = 0;
        check(cudaEventElapsedTime(&ms, bench.t0_, bench.t1_), "event");
        if (i >= 10) t.push_back(ms * 1e3);
      }
      return quantile(t, 0.5);
    }
    Bench& bench;
    cudaGraphExec_t exec[2] = {};
  };

  Row& time_graph(Graphs& g, const char* group, const std::string& name, bool queue2) {
    std::vector<double> t;
    int still_busy = 0;
    for (int i = 0; i < kWarmup + calls_; ++i) {
      const int p = i % 2;
      const Clock::time_point a = Clock::now();
      check(cudaGraphLaunch(g.exec[p], main_), "graph launch");
      const Clock::time_point b = Clock::now();
      bool running = false;
      if (queue2) {
        check(cudaEventRecord(done_[p], main_), "record");
        running = i > 0 && cudaEventQuery(done_[p ^ 1]) == cudaErrorNotReady;
        if (i > 0) wait_event(done_[p ^ 1], "graph");
      } else {
        check(cudaStreamSynchronize(main_), "graph");
      }
      if (i < kWarmup) continue;
      t.push_back(us(b - a));
      still_busy += running;
    }
    check(cudaStreamSynchronize(main_), "graph");
    return add(group, name, t, still_busy);
  }

  Row& add(const char* group, const std::string& name, const std::vector<double>& t,
           int still_busy) {
    rows.push_back({group, name, quantile(t, 0.5), quantile(t, 0.9),
                    100.0 * still_busy / static_cast<double>(t.size())});
    return rows.back();
  }

  int calls_;
  cudaStream_t main_ = nullptr, upload_ = nullptr;
  cudaEvent_t done_[2] = {}, ready_ = nullptr, t0_ = nullptr, t1_ = nullptr;
  char* host_ = nullptr;
  char* dev_ = nullptr;
  int* ints_ = nullptr;
};

void print_table(const std::vector<Row>& rows) {
  std::printf("%-8s %-22s %9s %9s %6s %9s\n", "group", "case", "host p50", "host p90", "busy%",
              "gpu us");
  for (const Row& r : rows) {
    std::printf("%-8s %-22s %9.2f %9.2f %5.0f%%", r.group.c_str(), r.name.c_str(), r.median, r.p90,
                r.busy_share);
    if (r.gpu_us >= 0)
      std::printf(" %9.2f\n", r.gpu_us);
    else
      std::printf(" %9s\n", "");
  }
}

void write_json(const std::vector<Row>& rows, const char* path, const cudaDeviceProp& prop,
                int driver, int calls) {
  FILE* f = std::fopen(path, "w");
  if (!f) throw std::runtime_error(std::string("cannot write ") + path);
  std::fprintf(f,
               "{\"device\": \"%s\", \"driver\": %d, \"runtime\": %d, \"calls\": %d, \"rows\": [",
               prop.name, driver, CUDART_VERSION, calls);
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const Row& r = rows[i];
    std::fprintf(
        f,
        "%s\n  {\"group\": \"%s\", \"case\": \"%s\", \"host_us_p50\": %.3f, \"host_us_p90\": %.3f, "
        "\"busy_percent\": %.1f",
        i ? "," : "", r.group.c_str(), r.name.c_str(), r.median, r.p90, r.busy_share);
    if (r.gpu_us >= 0) std::fprintf(f, ", \"gpu_us\": %.3f", r.gpu_us);
    std::fprintf(f, "}");
  }
  std::fprintf(f, "\n]}\n");
  std::fclose(f);
}

int run(int argc, char** argv) {
  int calls = 500;
  const char* json = nullptr;
  unsigned wait_flag = cudaDeviceScheduleAuto;
  bool steps_only = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--calls" && i + 1 < argc) {
      calls = std::atoi(argv[++i]);
    } else if (a == "--json" && i + 1 < argc) {
      json = argv[++i];
    } else if (a == "--steps-only") {
      steps_only = true;
    } else if (a == "--wait" && i + 1 < argc) {
      const std::string w = argv[++i];
      if (w == "auto")
        wait_flag = cudaDeviceScheduleAuto;
      else if (w == "spin")
        wait_flag = cudaDeviceScheduleSpin;
      else if (w == "yield")
        wait_flag = cudaDeviceScheduleYield;
      else if (w == "block")
        wait_flag = cudaDeviceScheduleBlockingSync;
      else if (w == "poll")
        g_poll = true;
      else {
        std::fprintf(stderr, "telos-launch-bench: --wait takes auto, spin, yield, block or poll\n");
        return 2;
      }
    } else {
      std::fprintf(stderr,
                   "usage: telos-launch-bench [--calls N (>= 300)] [--json PATH] "
                   "[--wait auto|spin|yield|block|poll] [--steps-only]\n");
      return 2;
    }
  }
  if (calls < kMinCalls) {
    std::fprintf(stderr, "telos-launch-bench: --calls must be at least 300 (p90 needs them)\n");
    return 2;
  }
  // Before the first call that creates the primary context (CUDA runtime API, cudaSetDeviceFlags).
  check(cudaSetDeviceFlags(wait_flag), "device flags");
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, 0), "device 0");
  if (prop.major != 9)
    throw std::runtime_error(std::string("needs a compute capability 9.0 GPU (sm_90a), found ") +
                             prop.name);
  int driver = 0;
  check(cudaDriverGetVersion(&driver), "driver version");
  std::printf(
      "# %s, driver %d, runtime %d, %d timed calls per row after 50 warm-up, wait flag %u%s\n",
      prop.name, driver, CUDART_VERSION, calls, wait_flag, g_poll ? ", cudaEventQuery loop" : "");
  Bench bench(calls);
  if (!steps_only) {
    bench.graphs();
    bench.copies();
    bench.memcpy_nodes();
  }
  bench.steps();
  if (json) write_json(bench.rows, json, prop, driver, calls);
  print_table(bench.rows);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "telos-launch-bench: %s\n", e.what());
    return 1;
  }
}
