// telos-device-launch-probe: whether decode steps launched from the device, with no CUDA call on
// the host per step, keep the GPU as busy as host launches do. A VM's slow spells multiply the
// host cost of every device call (docs/performance.md, the host); with device graph launch (CUDA
// runtime API: graphs instantiated with cudaGraphInstantiateFlagDeviceLaunch, launched from a
// kernel into cudaStreamGraphTailLaunch) the host would only write memory. This measures that
// design on stand-in kernels before the engine takes it.
//
//   telos-device-launch-probe [--steps N]
//
// The step graph: 36 kernels in stream order, the first and the spinning ones 132 blocks (one
// thread each spins on %globaltimer for its share of the step), the last one block, which stamps
// the step's end and counts it done in device memory and in mapped pinned memory. Step lengths 0.1,
// 1 and 5 ms (the 1B's and 8B's batch-1 steps are ~0.95 and ~4.5 ms). Modes:
//   host           the host launches each step's graph (cudaGraphLaunch on one stream), keeping two
//                  steps in flight as telos-run does; host µs a step: the call.
//   device         a one-block scheduler graph waits until the host has posted a step past the
//                  ones done (a counter in mapped pinned memory), tail-launches the step graph and
//                  then itself (cudaGetCurrentGraphExec); the host posts step i + 1 while step i
//                  runs, two in flight; host µs a step: the store.
//   device-serial  as device, but the host posts a step only once it has seen the last one done:
//                  the round trip of a step whose inputs the host makes from the last one's output.
// Per row: host µs a step (p50 / p90) and the GPU's idle µs between consecutive steps (p50 / p90),
// from the %globaltimer stamps of each step's first kernel start and last kernel end.
// Exit codes: 0 ok, 1 CUDA error or no device, 2 usage.
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

constexpr int kBlocks = 132;
constexpr int kKernels = 36;
constexpr unsigned kExit = 0xffffffffu;

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

// PTX ISA, "Special Registers: %globaltimer": a nanosecond timer, the same on every SM.
__device__ __forceinline__ unsigned long long global_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__device__ __forceinline__ void spin(unsigned long long ns) {
  const unsigned long long t0 = global_ns();
  while (global_ns() - t0 < ns) {
  }
}

// What the step kernels and the scheduler share: device memory but `posted` and `completed`,
// which are mapped pinned memory (the host writes posted, the device writes completed).
struct Shared {
  unsigned* done;                   // steps done (device memory)
  unsigned long long* begin;        // per step: its first kernel's start
  unsigned long long* end;          // per step: its last kernel's end
  const volatile unsigned* posted;  // steps the host has posted, or kExit
  volatile unsigned* completed;     // steps done, for the host
};

__global__ void step_first(Shared s, unsigned long long ns) {
  if (threadIdx.x != 0) return;
  if (blockIdx.x == 0) s.begin[*s.done] = global_ns();
  spin(ns);
}

__global__ void step_spin(unsigned long long ns) {
  if (threadIdx.x == 0) spin(ns);
}

__global__ void step_last(Shared s) {
  const unsigned i = *s.done;
  s.end[i] = global_ns();
  *s.done = i + 1;
  *s.completed = i + 1;
  __threadfence_system();
}

// One thread: wait until the host has posted a step past the ones done, then run it and come back
// (both tail launches: they run in order, each after the launching graph is done).
__global__ void scheduler(Shared s, cudaGraphExec_t step) {
  const unsigned done = *s.done;
  unsigned p;
  while ((p = *s.posted) <= done) {
  }
  if (p == kExit) return;
  if (cudaGraphLaunch(step, cudaStreamGraphTailLaunch) != cudaSuccess ||
      cudaGraphLaunch(cudaGetCurrentGraphExec(), cudaStreamGraphTailLaunch) != cudaSuccess)
    __trap();
}

double pct(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<std::size_t>(q * static_cast<double>(v.size())))];
}

struct Probe {
  cudaStream_t stream{};
  Shared s{};
  unsigned* host_posted = nullptr;  // mapped pinned: [0] posted, [1] completed
  int max_steps;

  explicit Probe(int steps) : max_steps(steps) {
    check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "stream");
    check(cudaMalloc(&s.done, sizeof(unsigned)), "alloc");
    check(cudaMalloc(&s.begin, sizeof(unsigned long long) * (steps + 1)), "alloc");
    check(cudaMalloc(&s.end, sizeof(unsigned long long) * (steps + 1)), "alloc");
    check(cudaHostAlloc(&host_posted, 2 * sizeof(unsigned), cudaHostAllocMapped), "mapped");
    unsigned* dev = nullptr;
    check(cudaHostGetDevicePointer(reinterpret_cast<void**>(&dev), host_posted, 0), "mapped");
    s.posted = dev;
    s.completed = dev + 1;
  }
  ~Probe() {
    posted() = kExit;  // a scheduler still waiting (a run that failed) ends
    std::atomic_thread_fence(std::memory_order_seq_cst);
    cudaStreamSynchronize(stream);
    cudaFree(s.done);
    cudaFree(s.begin);
    cudaFree(s.end);
    cudaFreeHost(host_posted);
    cudaStreamDestroy(stream);
  }
  volatile unsigned& posted() { return reinterpret_cast<volatile unsigned*>(host_posted)[0]; }
  unsigned completed() const { return reinterpret_cast<volatile unsigned*>(host_posted)[1]; }

  // Spins until at least `n` steps are done; a step that never ends (a device launch refused, a
  // trap) fails the probe after 10 s with the stream's error instead of hanging it.
  void wait_done(int n) {
    const auto t0 = std::chrono::steady_clock::now();
    for (unsigned k = 0; static_cast<int>(completed()) < n; ++k)
      if (k % 4096 == 0 && std::chrono::steady_clock::now() - t0 > std::chrono::seconds(10)) {
        const cudaError_t e = cudaStreamQuery(stream);
        throw std::runtime_error("step " + std::to_string(n - 1) +
                                 " not done after 10 s (stream: " + cudaGetErrorString(e) + ")");
      }
  }

  void reset() {
    check(cudaStreamSynchronize(stream), "sync");
    check(cudaMemsetAsync(s.done, 0, sizeof(unsigned), stream), "reset");
    check(cudaStreamSynchronize(stream), "sync");
    posted() = 0;
    reinterpret_cast<volatile unsigned*>(host_posted)[1] = 0;
    std::atomic_thread_fence(std::memory_order_seq_cst);
  }

  // A graph instantiated for device launch (it can be launched from the host too).
  cudaGraphExec_t capture(const auto& launches) {
    cudaGraph_t g;
    check(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), "capture");
    launches();
    check(cudaGetLastError(), "launch in capture");
    check(cudaStreamEndCapture(stream, &g), "capture");
    cudaGraphExec_t exec;
    const cudaError_t e = cudaGraphInstantiate(&exec, g, cudaGraphInstantiateFlagDeviceLaunch);
    cudaGraphDestroy(g);
    check(e, "instantiate for device launch");
    check(cudaGraphUpload(exec, stream), "upload");
    return exec;
  }

  cudaGraphExec_t step_graph(unsigned long long step_ns) {
    const unsigned long long share = step_ns / (kKernels - 1);
    return capture([&] {
      step_first<<<kBlocks, 32, 0, stream>>>(s, share);
      for (int k = 1; k < kKernels - 1; ++k) step_spin<<<kBlocks, 32, 0, stream>>>(share);
      step_last<<<1, 1, 0, stream>>>(s);
    });
  }

  // One mode over `steps` steps: host µs a step and the GPU's gaps between steps, in µs.
  void run(const char* mode, unsigned long long step_ns, int steps) {
    reset();
    const cudaGraphExec_t step = step_graph(step_ns);
    std::vector<double> host_us;
    using clock = std::chrono::steady_clock;
    const std::string m = mode;
    if (m == "host") {
      for (int i = 0; i < steps; ++i) {
        wait_done(i - 1);  // steps i - 1 and i in flight at most
        const auto t0 = clock::now();
        check(cudaGraphLaunch(step, stream), "launch");
        host_us.push_back(std::chrono::duration<double, std::micro>(clock::now() - t0).count());
      }
    } else {
      const cudaGraphExec_t sched = capture([&] { scheduler<<<1, 1, 0, stream>>>(s, step); });
      check(cudaGraphLaunch(sched, stream), "scheduler launch");
      const bool serial = m == "device-serial";
      for (int i = 0; i < steps; ++i) {
        // Serial: step i - 1 done; else steps i - 1 and i in flight at most, as above.
        wait_done(serial ? i : i - 1);
        const auto t0 = clock::now();
        posted() = static_cast<unsigned>(i + 1);
        std::atomic_thread_fence(std::memory_order_seq_cst);
        host_us.push_back(std::chrono::duration<double, std::micro>(clock::now() - t0).count());
      }
      wait_done(steps);
      posted() = kExit;
      std::atomic_thread_fence(std::memory_order_seq_cst);
      check(cudaStreamSynchronize(stream), "scheduler exit");
      check(cudaGraphExecDestroy(sched), "destroy");
    }
    check(cudaStreamSynchronize(stream), "steps");
    std::vector<unsigned long long> b(steps), e(steps);
    check(cudaMemcpy(b.data(), s.begin, sizeof(unsigned long long) * steps, cudaMemcpyDeviceToHost),
          "stamps");
    check(cudaMemcpy(e.data(), s.end, sizeof(unsigned long long) * steps, cudaMemcpyDeviceToHost),
          "stamps");
    check(cudaGraphExecDestroy(step), "destroy");
    std::vector<double> gap_us;
    for (int i = 10; i + 1 < steps; ++i)
      gap_us.push_back((static_cast<double>(b[i + 1]) - e[i]) * 1e-3);
    host_us.erase(host_us.begin(), host_us.begin() + std::min<std::size_t>(10, host_us.size()));
    std::printf("%-14s | %8.2f | %11.2f | %11.2f | %11.2f | %11.2f\n", mode, step_ns * 1e-6,
                pct(host_us, 0.5), pct(host_us, 0.9), pct(gap_us, 0.5), pct(gap_us, 0.9));
  }
};

}  // namespace

int main(int argc, char** argv) {
  int steps = 200;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--steps" && i + 1 < argc) {
      steps = std::atoi(argv[++i]);
    } else {
      std::fprintf(stderr, "usage: telos-device-launch-probe [--steps N]\n");
      return 2;
    }
  }
  if (steps < 20) {
    std::fprintf(stderr, "telos-device-launch-probe: --steps must be at least 20\n");
    return 2;
  }
  try {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
      std::printf("telos-device-launch-probe: no CUDA GPU\n");
      return 1;
    }
    cudaDeviceProp prop{};
    check(cudaGetDeviceProperties(&prop, 0), "device");
    std::printf("%s, %d SMs; %d steps a row, %d kernels a step\n", prop.name,
                prop.multiProcessorCount, steps, kKernels);
    std::printf("%-14s | %8s | %11s | %11s | %11s | %11s\n", "mode", "step ms", "host us p50",
                "host us p90", "gap us p50", "gap us p90");
    Probe probe(steps);
    for (unsigned long long ns : {100000ull, 1000000ull, 5000000ull})
      for (const char* mode : {"host", "device", "device-serial"}) probe.run(mode, ns, steps);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "telos-device-launch-probe: %s\n", e.what());
    return 1;
  }
  return 0;
}
