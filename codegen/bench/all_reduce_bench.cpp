// telos-allreduce-bench: the tensor-parallel all-reduce's latency (docs/multi-gpu.md) at messages
// of 8 KB, 64 KB, 1 MB and 16 MB of f32 partials (1, 8, 128 and 2048 rows of 2048 floats,
// Llama-3.2-1B's hidden size), our three forms (kernels/all_reduce.cuh: one-shot, two-shot,
// one-shot with the next RMSNorm) beside NCCL's ncclAllReduce and the form the plan gives large
// prefill messages (ncclAllGather of the partials, then gather_sum_residual), in one table.
//
// Every form is timed as a bucket's graph runs it: each rank captures a CUDA graph of kOps
// all-reduces back to back on its own stream (ours: the kernel's launches; NCCL: ncclAllReduce,
// sum, f32, in place, over one communicator a GPU from ncclCommInitAll), the ranks' graphs are
// launched together, and a figure is the median over kReps launches of rank 0's graph time over
// kOps, after kWarm launches; the all-gather form's graph holds ncclAllGather and the kernel after
// it, kOps times. NCCL_NVLS_ENABLE=0 (NcclGroup sets it unless the environment does); nothing here
// calls cuMulticastCreate.
//
// With two GPUs or more it takes every visible GPU up to 8, a rank each, peer access between each
// pair. With one GPU it times ours with two ranks on that GPU (their blocks share its SMs, their
// reads its HBM: no NVLink, so the figures are not the multi-GPU ones) and says that the NCCL rows
// need two GPUs. The kernels compile through NVRTC at start (the kernel cache holds them after).
//   telos-allreduce-bench
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "codegen/compile_cache.hpp"
#include "codegen/emit_source.hpp"
#include "codegen/kernel_plan.hpp"
#include "codegen/nvrtc_driver.hpp"
#include "executor/gpu/nccl_library.hpp"
#include "support/error.hpp"

namespace {

using namespace telos::codegen;

constexpr int kHidden = 2048;
constexpr int kRows[] = {1, 8, 128, 2048};  // 8 KB, 64 KB, 1 MB, 16 MB of f32
constexpr int kMaxRows = 2048;
constexpr int kOps = 50, kWarm = 5, kReps = 15;
constexpr const char* kEps = "9.99999975e-06f";  // 1e-5 as float_literal prints it

void check(cudaError_t e, const std::string& what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "telos-allreduce-bench: %s: %s\n", what.c_str(), cudaGetErrorString(e));
    std::exit(1);
  }
}

std::string I(long long v) {
  return std::to_string(v);
}

// One of our forms: its template and launch at `rows` rows over `ranks` ranks.
struct Form {
  const char* label;
  bool norm;  // all_reduce_residual_rmsnorm: blocks of kNormThreads, also w and h
  const char* name;
  std::string instance(int rows, int ranks) const {
    return "telos_kernels::" + std::string(name) + "<" + I(rows) + ", " + I(kHidden) + ", " +
           I(ranks) + ", " + (norm ? std::string(kEps) : I(kAllReduceThreads)) + ">";
  }
  int blocks(int rows) const {
    return norm ? all_reduce_norm_blocks(rows) : all_reduce_blocks(rows, kHidden);
  }
  int threads() const { return norm ? kNormThreads : kAllReduceThreads; }
};
constexpr Form kForms[] = {{"one-shot", false, "all_reduce_residual"},
                           {"two-shot", false, "all_reduce_residual_two_shot"},
                           {"one-shot + rmsnorm", true, "all_reduce_residual_rmsnorm"}};

// A rank's buffers on its device: the partial, x, h and the norm's weight at the largest size,
// the all-gather's buffer (every rank's partial), the barrier flags, its index, and the tables of
// every rank's partials and flags.
struct Rank {
  int device = 0;
  cudaStream_t stream = nullptr;
  float *partial = nullptr, *x = nullptr, *w = nullptr, *gather = nullptr;
  unsigned short* h = nullptr;
  unsigned* flags = nullptr;
  int* index = nullptr;
  float** partials = nullptr;
  unsigned** flag_table = nullptr;
};

template <class T>
T* device_alloc(std::size_t n) {
  T* p = nullptr;
  check(cudaMalloc(&p, n * sizeof(T)), "alloc");
  check(cudaMemset(p, 0, n * sizeof(T)), "clear");
  return p;
}

std::vector<Rank> make_ranks(const std::vector<int>& devices) {
  const std::size_t n = static_cast<std::size_t>(kMaxRows) * kHidden;
  std::vector<Rank> ranks(devices.size());
  for (std::size_t r = 0; r < ranks.size(); ++r) {
    Rank& k = ranks[r];
    k.device = devices[r];
    check(cudaSetDevice(k.device), "device");
    check(cudaStreamCreateWithFlags(&k.stream, cudaStreamNonBlocking), "stream");
    k.partial = device_alloc<float>(n);
    k.x = device_alloc<float>(n);
    k.w = device_alloc<float>(kHidden);
    k.h = device_alloc<unsigned short>(n);
    k.gather = device_alloc<float>(n * devices.size());
    k.flags = device_alloc<unsigned>(static_cast<std::size_t>(kAllReduceMaxBlocks) * ranks.size());
    k.index = device_alloc<int>(1);
    const int index = static_cast<int>(r);
    check(cudaMemcpy(k.index, &index, sizeof index, cudaMemcpyHostToDevice), "rank");
  }
  std::vector<float*> partials;
  std::vector<unsigned*> flags;
  for (const Rank& k : ranks) partials.push_back(k.partial), flags.push_back(k.flags);
  for (Rank& k : ranks) {
    check(cudaSetDevice(k.device), "device");
    k.partials = device_alloc<float*>(ranks.size());
    k.flag_table = device_alloc<unsigned*>(ranks.size());
    check(cudaMemcpy(k.partials, partials.data(), partials.size() * sizeof(float*),
                     cudaMemcpyHostToDevice),
          "partials table");
    check(cudaMemcpy(k.flag_table, flags.data(), flags.size() * sizeof(unsigned*),
                     cudaMemcpyHostToDevice),
          "flags table");
  }
  return ranks;
}

// Peer access between every pair of distinct devices (the kernels read the others' partials).
void enable_peer_access(const std::vector<int>& devices) {
  for (int a : devices)
    for (int b : devices) {
      if (a == b) continue;
      check(cudaSetDevice(a), "device");
      const cudaError_t e = cudaDeviceEnablePeerAccess(b, 0);
      if (e == cudaErrorPeerAccessAlreadyEnabled)
        cudaGetLastError();
      else
        check(e, "peer access " + I(a) + " -> " + I(b));
    }
}

// Every rank's stream done within a deadline: a barrier that never opens ends the bench with a
// message instead of hanging it.
void wait_all(const std::vector<Rank>& ranks, const std::string& what) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  for (const Rank& k : ranks) {
    cudaError_t e;
    while ((e = cudaStreamQuery(k.stream)) == cudaErrorNotReady)
      if (std::chrono::steady_clock::now() > deadline) {
        std::fprintf(stderr, "telos-allreduce-bench: %s: the ranks did not finish in 30 s\n",
                     what.c_str());
        std::exit(1);
      }
    check(e, what);
  }
}

// Each rank's graph of kOps operations, captured by `record(rank)` on its stream.
template <class Record>
std::vector<cudaGraphExec_t> capture(const std::vector<Rank>& ranks, Record record) {
  std::vector<cudaGraphExec_t> execs;
  for (const Rank& k : ranks) {
    check(cudaSetDevice(k.device), "device");
    check(cudaStreamBeginCapture(k.stream, cudaStreamCaptureModeThreadLocal), "capture");
  }
  record();
  // Every capture ends before any graph is instantiated: instantiation is refused while a stream
  // of this thread is still capturing.
  std::vector<cudaGraph_t> graphs;
  for (const Rank& k : ranks) {
    cudaGraph_t g = nullptr;
    check(cudaSetDevice(k.device), "device");
    check(cudaStreamEndCapture(k.stream, &g), "end capture");
    graphs.push_back(g);
  }
  for (std::size_t r = 0; r < ranks.size(); ++r) {
    cudaGraphExec_t e = nullptr;
    check(cudaSetDevice(ranks[r].device), "device");
    check(cudaGraphInstantiate(&e, graphs[r], 0), "instantiate");
    cudaGraphDestroy(graphs[r]);
    execs.push_back(e);
  }
  return execs;
}

// Median µs of one operation: rank 0's time for its graph of kOps over kOps, every rank's graph
// launched together, after kWarm launches.
double time_graphs(const std::vector<Rank>& ranks, const std::vector<cudaGraphExec_t>& execs,
                   const std::string& what) {
  check(cudaSetDevice(ranks[0].device), "device");
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  std::vector<float> us;
  for (int i = 0; i < kWarm + kReps; ++i) {
    check(cudaEventRecord(a, ranks[0].stream), "event");
    for (std::size_t r = 0; r < ranks.size(); ++r)
      check(cudaGraphLaunch(execs[r], ranks[r].stream), "graph launch " + what);
    check(cudaEventRecord(b, ranks[0].stream), "event");
    wait_all(ranks, what);
    float ms = 0;
    cudaEventElapsedTime(&ms, a, b);
    if (i >= kWarm) us.push_back(ms * 1000.f / kOps);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  for (cudaGraphExec_t e : execs) cudaGraphExecDestroy(e);
  std::sort(us.begin(), us.end());
  return us[us.size() / 2];
}

class Kernels {
 public:
  Kernels(int ranks, const std::vector<std::string>& names) {
    KernelPlan plan;
    plan.ranks = ranks;  // the source includes all_reduce.cuh
    plan.rope_inv_freq.assign(64, 1.f);
    const int parts = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    for (const CompiledModule& m :
         compile_modules(emit_source(plan), "sm_90a", names, CompileCache::default_root(), parts)) {
      cudaLibrary_t lib = nullptr;
      check(cudaLibraryLoadData(&lib, m.cubin.data(), nullptr, nullptr, 0, nullptr, nullptr, 0),
            "load");
      for (const auto& [name, entry] : m.lowered) {
        cudaKernel_t k = nullptr;
        check(cudaLibraryGetKernel(&k, lib, entry.c_str()), "kernel " + name);
        kernels_[name] = reinterpret_cast<const void*>(k);
      }
    }
  }
  const void* get(const std::string& name) const { return kernels_.at(name); }

 private:
  std::map<std::string, const void*> kernels_;
};

double time_ours(const Kernels& kernels, const std::vector<Rank>& ranks, const Form& f, int rows) {
  const std::string name = f.instance(rows, static_cast<int>(ranks.size()));
  const void* k = kernels.get(name);
  auto execs = capture(ranks, [&] {
    for (const Rank& rk : ranks) {
      check(cudaSetDevice(rk.device), "device");
      std::vector<const void*> args = {rk.partials, rk.flag_table, rk.index, rk.x};
      if (f.norm) args.insert(args.end(), {rk.w, rk.h});
      std::vector<void*> params;
      for (auto& a : args) params.push_back(&a);
      for (int i = 0; i < kOps; ++i)
        check(cudaLaunchKernel(k, f.blocks(rows), f.threads(), params.data(), 0, rk.stream),
              "launch " + name);
    }
  });
  return time_graphs(ranks, execs, name);
}

double time_nccl(const telos::exec::NcclGroup& nccl, const std::vector<Rank>& ranks, int rows) {
  const std::size_t count = static_cast<std::size_t>(rows) * kHidden;
  auto execs = capture(ranks, [&] {
    for (int i = 0; i < kOps; ++i) {
      nccl.group_begin();
      for (std::size_t r = 0; r < ranks.size(); ++r)
        nccl.all_reduce_sum(static_cast<int>(r), ranks[r].partial, count, ranks[r].stream);
      nccl.group_end();
    }
  });
  return time_graphs(ranks, execs, "ncclAllReduce");
}

std::string gather_sum_instance(int rows, int ranks) {
  return "telos_kernels::gather_sum_residual<" + I(rows) + ", " + I(kHidden) + ", " + I(ranks) +
         ">";
}

// The plan's NCCL form (all_reduce_nccl): ncclAllGather of every rank's partial (a group call
// over the ranks, this being one thread), then each rank's gather_sum_residual.
double time_nccl_gather(const telos::exec::NcclGroup& nccl, const Kernels& kernels,
                        const std::vector<Rank>& ranks, int rows) {
  const std::size_t count = static_cast<std::size_t>(rows) * kHidden;
  const std::string name = gather_sum_instance(rows, static_cast<int>(ranks.size()));
  const void* k = kernels.get(name);
  auto execs = capture(ranks, [&] {
    for (int i = 0; i < kOps; ++i) {
      nccl.group_begin();
      for (std::size_t r = 0; r < ranks.size(); ++r)
        nccl.all_gather(static_cast<int>(r), ranks[r].partial, ranks[r].gather, count,
                        ranks[r].stream);
      nccl.group_end();
      for (const Rank& rk : ranks) {
        check(cudaSetDevice(rk.device), "device");
        std::vector<const void*> args = {rk.gather, rk.partial, rk.x};
        std::vector<void*> params;
        for (auto& a : args) params.push_back(&a);
        check(cudaLaunchKernel(k, gather_sum_blocks(rows, kHidden), kAllReduceThreads,
                               params.data(), 0, rk.stream),
              "launch " + name);
      }
    }
  });
  return time_graphs(ranks, execs, "ncclAllGather + " + name);
}

// One communicator a GPU over `devices`, or null with the reason in `note` (no libnccl.so.2, or
// NCCL refused); `note` says the version otherwise.
std::unique_ptr<telos::exec::NcclGroup> open_nccl(const std::vector<int>& devices,
                                                  std::string& note) {
  try {
    auto group = std::make_unique<telos::exec::NcclGroup>(devices);
    note =
        "NCCL " + I(telos::exec::NcclLibrary::get().version()) + ", " + I(group->ranks()) + " GPUs";
    return group;
  } catch (const telos::Error& e) {
    note = std::string("NCCL unavailable: ") + e.what();
    return nullptr;
  }
}

void row(int rows, const std::string& form, const std::string& where, double us,
         const char* planned) {
  const double bytes = 4.0 * rows * kHidden;
  char size[32];
  if (bytes >= 1 << 20)
    std::snprintf(size, sizeof size, "%.0f MB", bytes / (1 << 20));
  else
    std::snprintf(size, sizeof size, "%.0f KB", bytes / 1024);
  if (us < 0) {
    std::printf("%-6s | %-20s | %-26s | %9s | %8s |\n", size, form.c_str(), where.c_str(), "-",
                "-");
    return;
  }
  std::printf("%-6s | %-20s | %-26s | %9.2f | %8.1f | %s\n", size, form.c_str(), where.c_str(), us,
              bytes / us / 1e3, planned);
}

}  // namespace

int main() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
    std::printf("telos-allreduce-bench: no CUDA GPU\n");
    return 0;
  }
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  const bool one_gpu = n == 1;
  const int R = one_gpu ? 2 : std::min(n, 8);
  std::vector<int> devices(static_cast<std::size_t>(R), 0);
  if (!one_gpu)
    for (int r = 0; r < R; ++r) devices[static_cast<std::size_t>(r)] = r;
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, 0);
  const std::string where = one_gpu ? "ours, 2 ranks on 1 GPU" : "ours, " + I(R) + " GPUs";
  std::printf("%s; %s; NCCL_NVLS_ENABLE=%s\n", prop.name,
              one_gpu ? "one GPU: two ranks on it (no NVLink; not the multi-GPU figures)"
                      : (I(R) + " GPUs, a rank each, peer access").c_str(),
              telos::exec::disable_nvlink_multicast().c_str());
  if (!one_gpu) enable_peer_access(devices);

  std::vector<std::string> names;
  for (int rows : kRows)
    for (const Form& f : kForms) names.push_back(f.instance(rows, R));
  for (int rows : kRows) names.push_back(gather_sum_instance(rows, R));
  const Kernels kernels(R, names);
  const std::vector<Rank> ranks = make_ranks(devices);

  std::string nccl_note = "needs two GPUs";
  const std::unique_ptr<telos::exec::NcclGroup> nccl =
      one_gpu ? nullptr : open_nccl(devices, nccl_note);

  std::printf("\n%-6s | %-20s | %-26s | %9s | %8s |\n", "size", "form", "ranks", "median us",
              "GB/s");
  for (int rows : kRows) {
    const bool two_shot = all_reduce_two_shot(rows, kHidden, R);
    const bool nccl_form = all_reduce_nccl(ShapeClass::prefill_gemm, rows, kHidden);
    for (const Form& f : kForms) {
      const bool planned =
          !f.norm && two_shot == (std::string(f.name) == "all_reduce_residual_two_shot");
      const char* mark = "";
      if (planned) mark = nccl_form ? "the plan's (decode)" : "the plan's";
      row(rows, f.label, where, time_ours(kernels, ranks, f, rows), mark);
    }
    row(rows, "ncclAllReduce graph", nccl_note, nccl ? time_nccl(*nccl, ranks, rows) : -1, "");
    row(rows, "ncclAllGather + sum", nccl_note,
        nccl ? time_nccl_gather(*nccl, kernels, ranks, rows) : -1,
        nccl_form ? "the plan's (prefill)" : "");
  }
  std::printf(
      "\nmedian us: one all-reduce of f32 partials summed into x (one-shot + rmsnorm: and h "
      "normalized), %d back to back in each rank's graph; GB/s: the message's bytes over that "
      "time; the plan's: the form the lowering gives this size at %d ranks without the norm "
      "(from kAllReduceNcclMinBytes, NCCL's all-gather and gather_sum_residual in prefill "
      "buckets)\n",
      kOps, R);
  return 0;
}
