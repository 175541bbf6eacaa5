#include "executor/gpu/gpu_step_executor.hpp"

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <fstream>
#include <iomanip>
#include <limits>
#include <map>
#include <ostream>
#include <set>
#include <sstream>
#include <stdexcept>

#include "executor/runtime_limits.hpp"
#include "hexel/tensor_map_encode.h"
#include "support/error.hpp"
#include "support/slot_image.hpp"
#include "support/slot_image_map.hpp"
#include "support/threads.hpp"

namespace telos::exec {
namespace {

void check(cudaError_t e, const std::string& what) {
  if (e == cudaErrorMemoryAllocation)
    fail("gpu engine: " + what + ": " + cudaGetErrorString(e) +
         " (the KV pool takes what the rest leaves: pick a smaller one with --kv-pages)");
  if (e != cudaSuccess) fail("gpu engine: " + what + ": " + cudaGetErrorString(e));
}

std::int64_t align_up(std::int64_t v, std::int64_t a) { return (v + a - 1) / a * a; }

// Weight upload staging: two pinned buffers, so that filling one from the mapped file overlaps
// the copy of the other to the device. 64 MiB each keeps the copies near full PCIe bandwidth.
constexpr std::size_t kStagingBytes = 64u << 20;

// The staging buffers are filled on up to kFillThreads threads (for_each_part): one thread's copy
// from the mapped weights (its page faults included) is slower than the pinned copies to the
// device (docs/performance.md, the load).
constexpr std::size_t kFillThreads = 8;

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

std::string mib(std::int64_t bytes) {
  std::ostringstream o;
  o << std::fixed << std::setprecision(1) << static_cast<double>(bytes) / (1 << 20) << " MiB";
  return o.str();
}

std::int64_t device_free_bytes() {
  std::size_t free_b = 0, total_b = 0;
  check(cudaMemGetInfo(&free_b, &total_b), "memory info");
  return static_cast<std::int64_t>(free_b);
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(path + ": cannot open (the artifact has no kernels for this GPU)");
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

int json_int(const nlohmann::json& j, const char* key, const std::string& where) {
  if (!j.contains(key) || !j.at(key).is_number_integer())
    fail("manifest.json: " + where + "." + key + ": expected an integer");
  return j.at(key).get<int>();
}

}  // namespace

struct GpuStepExecutor::State {
  struct LaunchRecord {
    int kernel = 0;
    dim3 grid;
    std::vector<void*> values;  // one device pointer per kernel parameter
    std::vector<void*> params;  // pointers to `values`, what cudaLaunchKernel takes
  };
  struct Bucket : BucketShape {  // decode: kind == "decode"
    std::string kind;
    // By step parity (parity_copy): the arguments, and the graph captured from them.
    std::vector<LaunchRecord> launches[2];
    cudaGraphExec_t graph[2] = {};
  };

  std::shared_ptr<const Artifact> art;
  GpuExecutorOptions opt;
  int vocab = 0, page_size = 0, kv_pages = 0;
  std::int64_t bytes_per_page = 0, layer_bytes = 0;
  std::int64_t weight_bytes = 0, kv_bytes = 0, arena_bytes = 0;
  std::int64_t image_bytes = 0;  // the slot images (`wimg:`, `timg:`), after the weights
  // Weights on the device as they are: those a `w:` or `tmap:w:` argument names. A weight that is
  // only read from its slot image has no other copy there.
  std::set<std::string> plain_weights;
  std::int64_t graph_bytes = 0;  // device memory the graphs took (cudaMemGetInfo around capture)
  std::int64_t total_bytes = 0;  // device memory this executor took (context aside)

  // launch()'s per-sequence sampling parameters, reused from step to step.
  std::vector<DeviceSampling> sampling_scratch;
  // Graphs run on `stream`; a step's descriptor goes up on `upload`, beside the other step's graph
  // (launch()).
  cudaStream_t stream = nullptr, upload = nullptr;
  cudaLibrary_t library = nullptr;
  std::vector<cudaKernel_t> kernels;
  std::vector<std::string> kernel_instances;
  std::vector<dim3> blocks;
  std::vector<unsigned> dynamic_smem;
  // TMA tensor maps of the `tmap:` and `timg:` arguments, encoded once (weights and arena never
  // move) and kept in device memory, 128 bytes each; `tmap_index` maps an argument to its slot.
  hexel::TensorMap* tmaps = nullptr;
  std::map<std::string, std::size_t> tmap_index;
  char* base = nullptr;
  std::map<std::string, char*> weights, arena;
  // Slot images (docs/artifact.md, `wimg:`, `timg:`) by their `wimg:` argument (key()): its parse
  // and its device copy, built from the weight's bytes while they are uploaded.
  struct Image {
    WeightImageArg arg;
    std::int64_t bytes = 0;  // its place beside the weights (the weight's bytes, 256-aligned)
    char* dev = nullptr;
  };
  std::map<std::string, Image> images;
  char* kv = nullptr;

  // Step descriptor: the same layout on host (pinned) and device. The device has one descriptor
  // per step parity (launched % 2; parity_copy).
  StepDescriptorLayout desc;
  char* desc_dev[2] = {};
  char* logits_dev = nullptr;
  // By parity: the descriptor's upload done (upload stream).
  cudaEvent_t desc_ready[2] = {};
  // One step's host side. Two alternate, so that step N+1 is packed and launched while step N is
  // in flight (ModelBackend::feeds_sampled_tokens) without touching N's pinned buffers. Step N
  // uses slot N % 2, like its parity.
  struct Slot {
    char* desc_host = nullptr;             // pinned
    PageRowCache page_rows;                // what desc_host's page-table rows hold
    // Pinned and mapped: the step's sample kernel writes its tokens here (`host:sampled`, through
    // the device's view of it).
    std::int32_t* sampled_host = nullptr;
    void* sampled_host_device = nullptr;
    // The step's graph done: recorded by the graph's last node (an external event-record node,
    // so that a step costs no event-record call; cudaEventRecord after the launch without
    // graphs).
    cudaEvent_t done = nullptr;
    cudaEvent_t logits_done = nullptr;     // recorded after the logits' copy back, when it has one
    int rows = 0;                          // sampling rows
    bool logits = false;                   // the logits come back to logits_host
    std::vector<std::uint8_t> picks;       // per sampling row: the engine wants the device's pick
    double api_seconds = 0;                // the host's time in the launch's device API calls
    LaunchCallTimes calls;                 // api_seconds by call group
  };
  Slot slots[2];
  int oldest = 0, in_flight = 0;
  // Sampling rows of the last step launched: the `sampled` buffer holds that step's tokens when
  // the next step's embedding kernel reads it.
  int last_sample_rows = 0;
  // Every bucket's embed_gather reads fed tokens from `sampled` (artifacts written before fed
  // tokens existed pass it no such buffer: the engine must not feed them).
  bool feeds = true;
  // Pinned logits: one buffer, since a step is launched while another is in flight only when the
  // one in flight wants no logits.
  float* logits_host = nullptr;

  std::vector<Bucket> buckets;
  std::vector<BucketShape> bucket_shapes;  // buckets' shapes, what choose_bucket() reads

  // Descriptors kept for profile_step(), by bucket (keep_step_descriptors).
  bool keep_descriptors = false;
  std::map<const Bucket*, std::vector<char>> kept;
  // Idle gap timing: events at the start and end of each step's graph, by step number modulo 3:
  // when step k is collected, step k+1 may have recorded its pair already and step k-1's end
  // must still be there.
  bool timing = false;
  cudaEvent_t graph_begin[3] = {}, graph_end[3] = {};
  std::uint64_t launched = 0, collected = 0;  // steps so far
  std::uint64_t timed_from = 0;               // the first step launched with timing on

  ~State() {
    // The graphs first: their event-record nodes name the slots' events.
    for (auto& b : buckets)
      for (cudaGraphExec_t g : b.graph)
        if (g) cudaGraphExecDestroy(g);
    for (int i = 0; i < 3; ++i) {
      if (graph_begin[i]) cudaEventDestroy(graph_begin[i]);
      if (graph_end[i]) cudaEventDestroy(graph_end[i]);
    }
    for (int i = 0; i < 2; ++i) {
      if (desc_ready[i]) cudaEventDestroy(desc_ready[i]);
    }
    for (Slot& sl : slots) {
      if (sl.done) cudaEventDestroy(sl.done);
      if (sl.logits_done) cudaEventDestroy(sl.logits_done);
      if (sl.desc_host) cudaFreeHost(sl.desc_host);
      if (sl.sampled_host) cudaFreeHost(sl.sampled_host);
    }
    if (library) cudaLibraryUnload(library);
    if (tmaps) cudaFree(tmaps);
    if (base) cudaFree(base);
    if (logits_host) cudaFreeHost(logits_host);
    for (cudaStream_t st : {stream, upload})
      if (st) cudaStreamDestroy(st);
  }

  // The device address of argument `arg` of a bucket's launch `launch` in a step of parity
  // `parity`.
  void* resolve(const std::string& arg, int parity) const {
    auto field = [&](const std::string& prefix) { return arg.substr(prefix.size()); };
    if (arg == "null") return nullptr;
    if (arg == "host:sampled") return slots[parity_copy(arg, parity)].sampled_host_device;
    if (arg.rfind("w:", 0) == 0) {
      auto it = weights.find(field("w:"));
      if (it == weights.end()) fail("manifest.json: programs: argument " + arg + ": no such weight");
      return it->second;
    }
    if (arg.rfind("buf:", 0) == 0) {
      auto it = arena.find(field("buf:"));
      if (it == arena.end()) fail("manifest.json: programs: argument " + arg + ": no such buffer");
      return it->second;
    }
    if (arg.rfind("kv:", 0) == 0) return kv + std::stoll(field("kv:")) * layer_bytes;
    if (arg.rfind("tmap:", 0) == 0 || arg.rfind("timg:", 0) == 0) return tmaps + tmap_index.at(arg);
    if (arg.rfind("wimg:", 0) == 0) return images.at(arg).dev;
    const std::map<std::string, std::int64_t> fields = {
        {"tokens", desc.off_tokens},
        {"positions", desc.off_positions},
        {"token_seq", desc.off_token_seq},
        {"sample_rows", desc.off_sample_rows},
        {"split_positions", desc.off_split_positions},
        {"prompt_positions", desc.off_prompt_positions},
        {"page_tables", desc.off_page_tables},
        {"sample_params", desc.off_params}};
    if (arg.rfind("desc:", 0) == 0) {
      auto it = fields.find(field("desc:"));
      if (it == fields.end()) fail("manifest.json: programs: argument " + arg + ": no such field");
      return desc_dev[parity_copy(arg, parity)] + it->second;
    }
    fail("manifest.json: programs: argument " + arg + ": unknown kind");
  }

  // Every kernel after a step's first is launched with programmatic stream serialization (PTX
  // griddepcontrol; codegen/kernels/common.cuh, pdl_entry): its blocks are scheduled while its
  // predecessor finishes and wait there, so launch latency overlaps the previous kernel's tail.
  // The first kernel follows the previous step's graph and the wait for the step descriptor's copy
  // in plain stream order.
  void launch_all(const Bucket& b, int parity) {
    cudaLaunchAttribute pdl{};
    pdl.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    pdl.val.programmaticStreamSerializationAllowed = 1;
    for (std::size_t i = 0; i < b.launches[parity].size(); ++i) {
      const auto& l = b.launches[parity][i];
      cudaLaunchConfig_t config{};
      config.gridDim = l.grid;
      config.blockDim = blocks[l.kernel];
      config.dynamicSmemBytes = dynamic_smem[l.kernel];
      config.stream = stream;
      config.attrs = i == 0 ? nullptr : &pdl;
      config.numAttrs = i == 0 ? 0 : 1;
      check(cudaLaunchKernelExC(&config, reinterpret_cast<const void*>(kernels[l.kernel]),
                                const_cast<void**>(l.params.data())),
            "launch");
    }
  }

  const Bucket& choose(const Step& step, int sampling_rows) const {
    return buckets[static_cast<std::size_t>(
        choose_bucket(bucket_shapes, step, sampling_rows, desc.max_batch))];
  }

  // Packs the descriptor into slot p and queues, for step N of parity p = N % 2: its descriptor's
  // copy to desc_dev[p] on the upload stream; a wait for it, graph p (whose sample kernel writes
  // the tokens into slot p's mapped pinned buffer) and the slot's event on the main stream (the
  // logits' copy back before the event when asked). So the main stream holds only graphs and a
  // wait due before the previous graph ends: step N+1's graph follows step N's by the launch
  // latency alone. collect() waits for the oldest slot.
  void launch(const Step& step, std::span<const DeviceSampling> sampling, bool want_logits,
              std::span<const std::uint8_t> picks) {
    if (in_flight == 2) fail("gpu engine: a third step launched before the first was collected");
    if (want_logits && in_flight == 1 && slots[oldest].logits)
      fail("gpu engine: two steps in flight both want logits");
    // The engine calls from its loop thread, not the one that loaded: the current device is per
    // thread in the runtime API.
    int current = -1;
    check(cudaGetDevice(&current), "current device");
    if (current != opt.device) check(cudaSetDevice(opt.device), "select device " + std::to_string(opt.device));
    int sampling_rows = 0;
    for (const auto& s : step.sequences) sampling_rows += s.samples ? 1 : 0;
    const Bucket& b = choose(step, sampling_rows);
    // Slot and parity agree: each launch moves both oldest + in_flight and launched on by one,
    // each collect moves oldest on and in_flight back.
    const int p = static_cast<int>(launched % 2);
    Slot& slot = slots[p];
    // Negative tokens read what the last step launched sampled (embed_gather reads `sampled`),
    // which its graph wrote before this step's graph starts: graphs run in the main stream's order.
    const PackedStep packed =
        pack_step_descriptor(desc, step, b.tokens, b.sample_rows, sampling, last_sample_rows,
                             slot.desc_host, &slot.page_rows);
    const int r = packed.sample_rows;
    // Clock reads between the call groups (tens of ns each) split api_seconds (LaunchCallTimes).
    using clock = std::chrono::steady_clock;
    const clock::time_point api_start = clock::now();
    // No wait before overwriting desc_dev[p]: step N-2 read it last, and N-2's graph is done.
    // A step is launched only while at most one is in flight, so N-2 was collected, and collect()
    // waited for N-2's slot.done, which N-2's graph recorded last (or for the logits' copy after
    // it). The same holds for the slot's pinned buffers, which N-2 used: its upload was done
    // before its graph began, and collect() read its tokens before this launch.
    check(cudaMemcpyAsync(desc_dev[p], slot.desc_host, static_cast<std::size_t>(packed.upload),
                          cudaMemcpyHostToDevice, upload),
          "step descriptor upload");
    check(cudaEventRecord(desc_ready[p], upload), "step event");
    const clock::time_point uploaded = clock::now();
    check(cudaStreamWaitEvent(stream, desc_ready[p], 0), "step event");
    const clock::time_point waited = clock::now();
    // Once per bucket, so that keeping costs the measured steps nothing.
    if (keep_descriptors && !kept.count(&b)) kept[&b].assign(slot.desc_host, slot.desc_host + packed.upload);
    const int ev = static_cast<int>(launched % 3);
    // The bench's idle-gap events are not production calls: their time is kept apart.
    clock::duration timing_calls{};
    if (timing) {
      const clock::time_point t = clock::now();
      check(cudaEventRecord(graph_begin[ev], stream), "timing event");
      timing_calls += clock::now() - t;
    }
    const clock::time_point graph_start = clock::now();
    if (b.graph[p])
      check(cudaGraphLaunch(b.graph[p], stream), "graph launch");
    else
      launch_all(b, p);
    const clock::time_point graph_queued = clock::now();
    if (timing) {
      check(cudaEventRecord(graph_end[ev], stream), "timing event");
      timing_calls += clock::now() - graph_queued;
    }
    // A graph records slot.done itself (its last node).
    if (!b.graph[p]) check(cudaEventRecord(slot.done, stream), "step event");
    // The logits' copy back is in stream order: the next graph, which overwrites them, waits for
    // it (the engine does not overlap a step that wants logits anyway). collect() waits for its
    // own event then.
    if (want_logits) {
      check(cudaMemcpyAsync(logits_host, logits_dev, sizeof(float) * r * vocab,
                            cudaMemcpyDeviceToHost, stream),
            "logits download");
      check(cudaEventRecord(slot.logits_done, stream), "step event");
    }
    const clock::time_point api_end = clock::now();
    const auto secs = [](clock::duration d) { return std::chrono::duration<double>(d).count(); };
    slot.api_seconds = secs(api_end - api_start - timing_calls);
    slot.calls.upload_seconds = secs(uploaded - api_start);
    slot.calls.wait_seconds = secs(waited - uploaded);
    slot.calls.graph_launch_seconds = secs(graph_queued - graph_start);
    slot.calls.other_seconds =
        secs((graph_start - waited) + (api_end - graph_queued) - timing_calls);
    slot.calls.timing_seconds = secs(timing_calls);
    slot.calls.upload_bytes = packed.upload;
    slot.rows = r;
    slot.logits = want_logits;
    slot.picks.assign(picks.begin(), picks.end());
    last_sample_rows = r;
    ++launched;
    ++in_flight;
  }

  // Waits for the oldest launched step; returns the idle gap before it (negative when unknown).
  double collect(std::vector<std::int32_t>& tokens_out, std::vector<float>* logits_out) {
    if (in_flight == 0) fail("gpu engine: wait without a launched step");
    Slot& slot = slots[oldest];
    oldest ^= 1;
    --in_flight;
    const std::uint64_t step = collected++;
    // A loop of event queries rather than cudaEventSynchronize's own spin: on a VM the calls after
    // a long wait in that spin can cost several times more than after the query loop
    // (telos-launch-bench --wait auto / poll; docs/performance.md).
    const cudaEvent_t step_done = slot.logits ? slot.logits_done : slot.done;
    cudaError_t done;
    while ((done = cudaEventQuery(step_done)) == cudaErrorNotReady) {
    }
    check(done, "step");
    tokens_out.assign(slot.sampled_host, slot.sampled_host + slot.rows);
    if (logits_out) {
      if (slot.logits)
        logits_out->assign(logits_host, logits_host + static_cast<std::size_t>(slot.rows) * vocab);
      else
        logits_out->clear();
    }
    double gap = -1;
    if (timing && step > timed_from) {
      float ms = 0;
      check(cudaEventElapsedTime(&ms, graph_end[(step - 1) % 3], graph_begin[step % 3]), "idle gap");
      gap = ms * 1e-3;
    }
    return gap;
  }

  void upload_weights(const Artifact& a, std::ostream* log, bool progress) {
    char* staging[2] = {nullptr, nullptr};
    cudaEvent_t drained[2] = {nullptr, nullptr};
    auto cleanup = [&] {
      for (int i = 0; i < 2; ++i) {
        if (drained[i]) cudaEventDestroy(drained[i]);
        if (staging[i]) cudaFreeHost(staging[i]);
      }
    };
    try {
      for (int i = 0; i < 2; ++i) {
        check(cudaMallocHost(&staging[i], kStagingBytes), "pinned staging buffer");
        check(cudaEventCreateWithFlags(&drained[i], cudaEventDisableTiming), "staging event");
      }
      const auto started = std::chrono::steady_clock::now();
      int current = 0;
      std::size_t used = 0;
      std::int64_t done = 0;
      int last_percent = -1;
      // Room for n bytes in the current staging buffer (switching buffers once the other's copies
      // have drained).
      auto room = [&](std::size_t n) {
        if (used + n > kStagingBytes) {
          check(cudaEventRecord(drained[current], stream), "staging event");
          current ^= 1;
          check(cudaEventSynchronize(drained[current]), "weight upload");
          used = 0;
        }
        return staging[current] + used;
      };
      auto sent = [&](char* dst, std::size_t n, const std::string& what) {
        check(cudaMemcpyAsync(dst, staging[current] + used, n, cudaMemcpyHostToDevice, stream),
              "upload " + what);
        used += n;
        done += static_cast<std::int64_t>(n);
        const int percent =
            static_cast<int>(100 * done / std::max<std::int64_t>(1, weight_bytes + image_bytes));
        if (progress && log && percent != last_percent) {
          *log << "\rtelos-run: uploading weights " << percent << "% (" << mib(done) << ")"
               << std::flush;
          last_percent = percent;
        }
      };
      char* p = base;
      for (const auto& t : a.tensors()) {
        // Its slot images first, a run of whole tiles a staging buffer, while its pages are mapped.
        for (auto& [arg, img] : images) {
          if (img.arg.weight != t.name) continue;
          const std::int64_t rows = t.shape[0], cols = t.shape[1];
          const auto tile_bytes = static_cast<std::size_t>(img.arg.bn * cols * 2);
          const std::int64_t per =
              std::max<std::int64_t>(1, static_cast<std::int64_t>(kStagingBytes / tile_bytes));
          for (std::int64_t t0 = 0; t0 < rows / img.arg.bn; t0 += per) {
            const std::int64_t t1 = std::min(rows / img.arg.bn, t0 + per);
            const std::size_t n = static_cast<std::size_t>(t1 - t0) * tile_bytes;
            char* dst = room(n);
            for_each_part(static_cast<std::size_t>(t1 - t0), 1, kFillThreads,
                          [&](std::size_t b, std::size_t e) {
                            pack_slot_image(reinterpret_cast<const std::uint16_t*>(t.data), rows,
                                            cols, img.arg.bn, img.arg.halves,
                                            t0 + static_cast<std::int64_t>(b),
                                            t0 + static_cast<std::int64_t>(e),
                                            reinterpret_cast<std::uint16_t*>(dst + b * tile_bytes));
                          });
            sent(img.dev + static_cast<std::size_t>(t0) * tile_bytes, n, arg);
          }
        }
        if (!plain_weights.count(t.name)) {
          // Only its images go to the device: the mapped file's pages can go now.
          a.release_weight_pages(t, 0, t.bytes);
          continue;
        }
        weights[t.name] = p;
        for (std::size_t off = 0; off < t.bytes;) {
          // What fits in the current buffer, or a whole one once it is full.
          const std::size_t fit = used < kStagingBytes ? kStagingBytes - used : kStagingBytes;
          const std::size_t n = std::min(t.bytes - off, fit);
          char* dst = room(n);
          for_each_part(n, std::size_t{4} << 20, kFillThreads, [&](std::size_t b, std::size_t e) {
            std::memcpy(dst + b, t.data + off + b, e - b);
          });
          sent(p + off, n, t.name);
          // The bytes are in pinned memory now: the mapped file's pages can go.
          a.release_weight_pages(t, off, n);
          off += n;
        }
        p += align_up(static_cast<std::int64_t>(t.bytes), 256);
      }
      check(cudaStreamSynchronize(stream), "weight upload");
      const double secs = seconds_since(started);
      if (progress && log) *log << "\n";
      if (log)
        *log << "telos-run: weights" << (images.empty() ? " " : " and slot images ") << mib(done)
             << " uploaded in " << std::fixed << std::setprecision(2) << secs << " s ("
             << std::setprecision(1) << static_cast<double>(done) / (1 << 30) / std::max(secs, 1e-9)
             << " GiB/s)\n"
             << std::defaultfloat;
    } catch (...) {
      cudaStreamSynchronize(stream);
      cleanup();
      throw;
    }
    cleanup();
  }
};

GpuStepExecutor::GpuStepExecutor(std::shared_ptr<const Artifact> artifact, GpuExecutorOptions options)
    : s_(std::make_unique<State>()) {
  State& s = *s_;
  s.art = std::move(artifact);
  s.opt = options;
  const Artifact& a = *s.art;
  const nlohmann::json& m = a.manifest();
  if (!a.has_kernels() || !m.contains("programs"))
    fail(a.dir() + ": the artifact has no kernels (compile it with a telosc that runs codegen)");
  // Where the load's time goes, a phase at a time, for the log's last line (docs/benchmarks.md:
  // load to first token).
  const auto load_start = std::chrono::steady_clock::now();
  auto phase_start = load_start;
  std::ostringstream phases;
  auto phase_done = [&](const char* name) {
    phases << (phases.tellp() > 0 ? ", " : "") << name << " " << std::fixed << std::setprecision(2)
           << seconds_since(phase_start) << " s";
    phase_start = std::chrono::steady_clock::now();
  };

  check(cudaSetDevice(options.device), "select device " + std::to_string(options.device));
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, options.device), "device properties");
  const std::string arch = "sm_" + std::to_string(prop.major) + std::to_string(prop.minor) + "a";
  a.check_target(arch);
  for (cudaStream_t* st : {&s.stream, &s.upload})
    check(cudaStreamCreateWithFlags(st, cudaStreamNonBlocking), "stream");
  for (cudaEvent_t& e : s.desc_ready) check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "step event");
  const std::int64_t free_at_start = device_free_bytes();
  phase_done("device");

  // Kernels.
  const std::string cubin = read_file(a.dir() + "/kernels/" + arch + ".cubin");
  check(cudaLibraryLoadData(&s.library, cubin.data(), nullptr, nullptr, 0, nullptr, nullptr, 0),
        "load kernels/" + arch + ".cubin");
  const nlohmann::json& table = m.at("kernels");
  for (std::size_t i = 0; i < table.size(); ++i) {
    const std::string entry = table[i].at("entry").get<std::string>();
    cudaKernel_t k = nullptr;
    check(cudaLibraryGetKernel(&k, s.library, entry.c_str()), "kernel " + entry);
    s.kernels.push_back(k);
    s.kernel_instances.push_back(table[i].value("instance", entry));
    const auto& blk = table[i].at("block");
    s.blocks.emplace_back(blk.at(0).get<unsigned>(), blk.at(1).get<unsigned>(), blk.at(2).get<unsigned>());
    const int smem = json_int(table[i], "dynamic_smem", "kernels[" + std::to_string(i) + "]");
    // Above 48 KiB a kernel must opt in to its dynamic shared memory.
    if (smem > 48 * 1024)
      check(cudaFuncSetAttribute(reinterpret_cast<const void*>(k),
                                 cudaFuncAttributeMaxDynamicSharedMemorySize, smem),
            "shared memory of " + entry);
    s.dynamic_smem.push_back(static_cast<unsigned>(smem));
  }
  phase_done("kernels");

  // Sizes.
  const nlohmann::json& programs = m.at("programs");
  const nlohmann::json& d = programs.at("descriptor");
  s.vocab = a.model().vocab_size;
  s.page_size = a.kv_cache().page_size;
  s.bytes_per_page = a.kv_cache().bytes_per_page;
  s.layer_bytes = s.bytes_per_page / a.kv_cache().num_layers;

  // Weights the launches read as they are, and slot images (the loader checked each wimg: and
  // timg: argument against its weight), one image per key, after the weights.
  for (const auto& bj : programs.at("buckets"))
    for (const auto& lj : bj.at("launches"))
      for (const auto& arg_j : lj.at("args")) {
        const std::string arg = arg_j.get<std::string>();
        if (arg.rfind("w:", 0) == 0) s.plain_weights.insert(arg.substr(2));
        if (arg.rfind("tmap:w:", 0) == 0)
          s.plain_weights.insert(
              parse_tensor_map_arg(arg, "manifest.json: programs").target.substr(2));
        if (arg.rfind("wimg:", 0) != 0 && arg.rfind("timg:", 0) != 0) continue;
        State::Image img;
        img.arg = parse_weight_image_arg(arg, "manifest.json: programs");
        if (s.images.count(img.arg.key())) continue;
        img.arg.box_rows = 0;
        img.bytes = align_up(static_cast<std::int64_t>(a.find_tensor(img.arg.weight)->bytes), 256);
        s.image_bytes += img.bytes;
        s.images[img.arg.key()] = img;
      }
  for (const auto& t : a.tensors())
    if (s.plain_weights.count(t.name))
      s.weight_bytes += align_up(static_cast<std::int64_t>(t.bytes), 256);
  for (const auto& buf : programs.at("arena"))
    s.arena_bytes += align_up(buf.at("bytes").get<std::int64_t>(), 256);
  // The pool size is known below; the layout does not depend on it.
  s.desc = StepDescriptorLayout::make(json_int(d, "max_tokens", "programs.descriptor"),
                                      json_int(d, "max_sample_rows", "programs.descriptor"),
                                      json_int(d, "max_batch", "programs.descriptor"),
                                      json_int(d, "max_pages_per_seq", "programs.descriptor"),
                                      s.page_size, s.vocab, 0);

  // Beside the arena: the step descriptors, one per step parity.
  const std::int64_t fixed = s.weight_bytes + s.image_bytes + s.arena_bytes + 2 * s.desc.bytes;
  // The pool: --kv-pages, else the artifact's, within the memory free now (another process may
  // hold some; runtime_limits.hpp, device_kv_pool_pages).
  std::size_t free_b = 0, total_b = 0;
  check(cudaMemGetInfo(&free_b, &total_b), "memory info");
  std::string pool_note;
  s.kv_pages = device_kv_pool_pages(
      {options.kv_pages, a.serving().kv_pool_pages, a.serving().kv_pool_memory_fraction,
       static_cast<std::int64_t>(free_b), static_cast<std::int64_t>(total_b), fixed,
       s.bytes_per_page, (a.serving().max_seq_len + s.page_size - 1) / s.page_size},
      &pool_note);
  if (options.log && !pool_note.empty()) *options.log << "telos-run: " << pool_note << "\n";
  s.kv_bytes = static_cast<std::int64_t>(s.kv_pages) * s.bytes_per_page;
  s.desc.kv_pages = s.kv_pages;

  // One allocation: weights, KV pool, arena, descriptors; where the device lacks it, the message
  // says what it was for (and check() which flag asks for less).
  check(cudaMalloc(&s.base, static_cast<std::size_t>(fixed + s.kv_bytes)),
        "device memory for the weights, slot images, arena and descriptors (" + mib(fixed) +
            ") and a KV pool of " + std::to_string(s.kv_pages) + " pages (" + mib(s.kv_bytes) +
            ")");
  char* p = s.base + s.weight_bytes;
  for (auto& [arg, img] : s.images) {
    img.dev = p;
    p += img.bytes;
  }
  phase_done("allocation");
  s.upload_weights(a, options.log, options.progress);
  phase_done("weights");
  s.kv = p;
  p += s.kv_bytes;
  // The arena starts zeroed (docs/artifact.md): kernels that keep state across launches (the
  // folded QKV epilogue's arrival counters) leave it zero after each launch and rely on the first.
  check(cudaMemset(p, 0, static_cast<std::size_t>(s.arena_bytes)), "arena init");
  for (const auto& buf : programs.at("arena")) {
    s.arena[buf.at("buffer").get<std::string>()] = p;
    p += align_up(buf.at("bytes").get<std::int64_t>(), 256);
  }
  s.desc_dev[0] = p;
  s.desc_dev[1] = p + s.desc.bytes;
  s.logits_dev = s.arena.at("logits");
  for (State::Slot& slot : s.slots) {
    check(cudaMallocHost(&slot.desc_host, static_cast<std::size_t>(s.desc.bytes)), "pinned descriptor");
    check(cudaHostAlloc(&slot.sampled_host, sizeof(std::int32_t) * s.desc.max_sample_rows, cudaHostAllocMapped),
          "pinned tokens");
    check(cudaHostGetDevicePointer(&slot.sampled_host_device, slot.sampled_host, 0), "pinned tokens");
    check(cudaEventCreateWithFlags(&slot.done, cudaEventDisableTiming), "step event");
    check(cudaEventCreateWithFlags(&slot.logits_done, cudaEventDisableTiming), "step event");
    std::memset(slot.desc_host, 0, static_cast<std::size_t>(s.desc.bytes));
  }
  check(cudaMallocHost(&s.logits_host, sizeof(float) * s.desc.max_sample_rows * s.vocab), "pinned logits");
  check(cudaMemset(p, 0, static_cast<std::size_t>(2 * s.desc.bytes)), "descriptor init");

  // Tensor maps (the loader checked each tmap: argument against its weight, buffer or the KV
  // cache).
  std::vector<hexel::TensorMap> maps;
  for (const auto& bj : programs.at("buckets"))
    for (const auto& lj : bj.at("launches"))
      for (const auto& arg_j : lj.at("args")) {
        const std::string arg = arg_j.get<std::string>();
        if (s.tmap_index.count(arg)) continue;
        if (arg.rfind("timg:", 0) == 0) {
          const WeightImageArg img = parse_weight_image_arg(arg, "manifest.json: programs");
          const WeightTensor& w = *a.find_tensor(img.weight);
          try {
            maps.push_back(encode_slot_image_map(s.images.at(img.key()).dev, w.shape[0], w.shape[1],
                                                 img.bn, img.halves, img.box_rows));
          } catch (const std::runtime_error& e) {
            fail("gpu engine: argument " + arg + ": " + e.what());
          }
          s.tmap_index[arg] = maps.size() - 1;
          continue;
        }
        if (arg.rfind("tmap:", 0) != 0) continue;
        const TensorMapArg t = parse_tensor_map_arg(arg, "manifest.json: programs");
        try {
          if (t.target.rfind("kv:", 0) == 0) {
            // The pool from layer L's base to its end, rows of one position of one head
            // (docs/artifact.md): kernels address a row as page · ROWS + offset in int32.
            const std::int64_t layer = std::stoll(t.target.substr(3));
            const std::int64_t rows = static_cast<std::int64_t>(s.kv_pages) * t.rows -
                                      layer * (t.rows / a.kv_cache().num_layers);
            if (static_cast<std::int64_t>(s.kv_pages) * t.rows >
                std::numeric_limits<std::int32_t>::max())
              fail("the KV pool's " + std::to_string(s.kv_pages) +
                   " pages hold more rows than 32-bit TMA coordinates reach");
            maps.push_back(hexel::encode_2d(
                hexel::TmaDtype::BF16, s.resolve(t.target, 0), static_cast<std::uint64_t>(rows),
                static_cast<std::uint64_t>(t.cols), static_cast<std::uint64_t>(t.cols) * 2,
                t.box_rows, t.box_cols, hexel::Swizzle::B128));
            s.tmap_index[arg] = maps.size() - 1;
            continue;
          }
          // The element type follows from the box width (docs/artifact.md): 64 bf16 or 32 f32.
          maps.push_back(hexel::encode_2d(
              t.elem_bytes == 4 ? hexel::TmaDtype::F32 : hexel::TmaDtype::BF16,
              s.resolve(t.target, 0), static_cast<std::uint64_t>(t.rows),
              static_cast<std::uint64_t>(t.cols),
              static_cast<std::uint64_t>(t.cols) * static_cast<std::uint64_t>(t.elem_bytes),
              t.box_rows, t.box_cols, hexel::Swizzle::B128));
        } catch (const std::runtime_error& e) {
          fail("gpu engine: argument " + arg + ": " + e.what());
        }
        s.tmap_index[arg] = maps.size() - 1;
      }
  if (!maps.empty()) {
    // cudaMalloc's alignment (256 bytes) covers the 64 a tensor map needs.
    check(cudaMalloc(&s.tmaps, sizeof(hexel::TensorMap) * maps.size()), "tensor maps");
    check(cudaMemcpy(s.tmaps, maps.data(), sizeof(hexel::TensorMap) * maps.size(),
                     cudaMemcpyHostToDevice),
          "tensor map upload");
  }

  // Launch programs, captured two graphs per bucket (one per step parity) in manifest order
  // (largest first); under runtime limits, not the buckets no step can choose.
  const auto shape_of = [](const nlohmann::json& bj) {
    BucketShape b;
    b.decode = bj.at("kind").get<std::string>() == "decode";
    b.size = json_int(bj, "size", "programs.buckets[]");
    b.tokens = json_int(bj, "tokens", "programs.buckets[]");
    b.sample_rows = json_int(bj, "sample_rows", "programs.buckets[]");
    return b;
  };
  const nlohmann::json& buckets_j = programs.at("buckets");
  std::vector<BucketShape> shapes;
  for (const auto& bj : buckets_j) shapes.push_back(shape_of(bj));
  int unreachable = 0;
  for (std::size_t bi = 0; bi < buckets_j.size(); ++bi) {
    const nlohmann::json& bj = buckets_j[bi];
    if (!bucket_reachable(shapes, shapes[bi], options.max_batch, options.prefill_chunk)) {
      ++unreachable;
      continue;
    }
    State::Bucket b;
    static_cast<BucketShape&>(b) = shapes[bi];
    b.kind = bj.at("kind").get<std::string>();
    const auto& first_args = bj.at("launches").at(0).at("args");
    s.feeds = s.feeds && std::find(first_args.begin(), first_args.end(), "buf:sampled") != first_args.end();
    // The tokens reach the host only through the sample kernel's `host:sampled`.
    const auto& launches_j = bj.at("launches");
    if (std::none_of(launches_j.begin(), launches_j.end(), [](const nlohmann::json& lj) {
          const auto& a = lj.at("args");
          return std::find(a.begin(), a.end(), "host:sampled") != a.end();
        }))
      fail("manifest.json: programs: bucket " + b.kind + ":" + std::to_string(b.size) +
           " passes no launch host:sampled (an artifact written before the sample kernel wrote its "
           "tokens to the host): compile it again with this telosc");
    const auto& launches = bj.at("launches");
    for (int parity = 0; parity < 2; ++parity)
      for (std::size_t i = 0; i < launches.size(); ++i) {
        const auto& lj = launches[i];
        State::LaunchRecord l;
        l.kernel = lj.at("kernel").get<int>();
        if (l.kernel < 0 || l.kernel >= static_cast<int>(s.kernels.size()))
          fail("manifest.json: programs: launch of kernel " + std::to_string(l.kernel) + ": no such kernel");
        const auto& g = lj.at("grid");
        l.grid = dim3(g.at(0).get<unsigned>(), g.at(1).get<unsigned>(), g.at(2).get<unsigned>());
        for (const auto& arg : lj.at("args"))
          l.values.push_back(s.resolve(arg.get<std::string>(), parity));
        for (auto& v : l.values) l.params.push_back(&v);
        b.launches[parity].push_back(std::move(l));
      }
    s.bucket_shapes.push_back(b);
    s.buckets.push_back(std::move(b));
  }
  check(cudaStreamSynchronize(s.stream), "load");
  phase_done("tensor maps and launches");
  if (options.use_graphs) {
    const std::int64_t free_before = device_free_bytes();
    const auto started = std::chrono::steady_clock::now();
    std::ostringstream times;
    for (auto& b : s.buckets) {
      const auto t0 = std::chrono::steady_clock::now();
      const std::string name = b.kind + ":" + std::to_string(b.size);
      for (int parity = 0; parity < 2; ++parity) {
        cudaGraph_t graph = nullptr;
        check(cudaStreamBeginCapture(s.stream, cudaStreamCaptureModeThreadLocal), "begin capture");
        s.launch_all(b, parity);
        // The step's done event as the graph's last node: each launch records it (CUDA runtime
        // API, cudaEventRecordWithFlags, cudaEventRecordExternal during capture).
        check(cudaEventRecordWithFlags(s.slots[parity].done, s.stream, cudaEventRecordExternal),
              "capture the step's done event");
        check(cudaStreamEndCapture(s.stream, &graph), "end capture");
        const cudaError_t e = cudaGraphInstantiate(&b.graph[parity], graph, 0);
        cudaGraphDestroy(graph);
        check(e, "instantiate graph for " + name);
        // Uploaded now, so the first step does not pay for it and the memory shows below.
        check(cudaGraphUpload(b.graph[parity], s.stream), "upload graph for " + name);
      }
      check(cudaStreamSynchronize(s.stream), "upload graph for " + name);
      times << " " << name << " " << std::fixed << std::setprecision(1)
            << seconds_since(t0) * 1e3 << " ms";
    }
    s.graph_bytes = free_before - device_free_bytes();
    // Times per bucket, both parities' graphs together.
    if (options.log)
      *options.log << "telos-run: captured " << 2 * s.buckets.size()
                   << " graphs (2 per bucket, one per step parity) in " << std::fixed
                   << std::setprecision(1) << seconds_since(started) * 1e3 << " ms, "
                   << mib(s.graph_bytes) << " of graph memory:" << times.str()
                   << (unreachable > 0 ? " (" + std::to_string(unreachable) +
                                             " buckets past the runtime limits not loaded)"
                                       : std::string())
                   << "\n"
                   << std::defaultfloat;
  }
  check(cudaStreamSynchronize(s.stream), "load");
  if (options.use_graphs) phase_done("graphs");
  s.total_bytes = free_at_start - device_free_bytes();
  if (options.log) {
    std::istringstream report(memory_report());
    for (std::string line; std::getline(report, line);)
      *options.log << "telos-run: memory: " << line << "\n";
    *options.log << "telos-run: gpu engine built in " << std::fixed << std::setprecision(2)
                 << seconds_since(load_start) << " s: " << phases.str() << "\n"
                 << std::defaultfloat;
  }
}

GpuStepExecutor::~GpuStepExecutor() = default;

int GpuStepExecutor::num_kv_pages() const { return s_->kv_pages; }
bool GpuStepExecutor::feeds_sampled_tokens() const { return s_->feeds; }
int GpuStepExecutor::vocab_size() const { return s_->vocab; }

void GpuStepExecutor::forward(const Step& step, std::vector<float>& logits) {
  std::vector<std::int32_t> tokens;
  s_->launch(step, {}, true, {});
  s_->collect(tokens, &logits);
}

void GpuStepExecutor::run(const Step& step, std::span<const DeviceSampling> sampling,
                          std::vector<std::int32_t>& tokens, std::vector<float>* logits) {
  s_->launch(step, sampling, logits != nullptr, {});
  s_->collect(tokens, logits);
}

void GpuStepExecutor::launch(const Step& step, std::span<const std::uint8_t> device_picks,
                             std::span<const DeviceSampling> device_sampling, bool want_logits) {
  // Per sequence, as the descriptor takes them: a picked row's parameters; greedy for the others
  // (the engine samples those on the host and ignores the device's pick).
  std::vector<DeviceSampling>& per_seq = s_->sampling_scratch;
  per_seq.assign(step.sequences.size(), DeviceSampling{});
  std::size_t row = 0;
  for (std::size_t i = 0; i < step.sequences.size(); ++i) {
    if (!step.sequences[i].samples) continue;
    if (row < device_picks.size() && device_picks[row] && row < device_sampling.size())
      per_seq[i] = device_sampling[row];
    ++row;
  }
  s_->launch(step, per_seq, want_logits, device_picks);
}

void GpuStepExecutor::wait(StepOutput& out) {
  const State::Slot& slot = s_->slots[s_->oldest];
  out.launch_call_seconds = slot.api_seconds;
  out.launch_calls = slot.calls;
  out.idle_gap_seconds = s_->collect(out.device_tokens, &out.logits);
  for (std::size_t r = 0; r < out.device_tokens.size(); ++r)
    if (r >= slot.picks.size() || !slot.picks[r]) out.device_tokens[r] = -1;
}

void GpuStepExecutor::set_step_timing(bool on) {
  State& s = *s_;
  if (on)
    for (int i = 0; i < 3; ++i) {
      if (!s.graph_begin[i]) check(cudaEventCreate(&s.graph_begin[i]), "timing event");
      if (!s.graph_end[i]) check(cudaEventCreate(&s.graph_end[i]), "timing event");
    }
  s.timing = on;
  s.timed_from = s.launched;
}

void GpuStepExecutor::keep_step_descriptors(bool on) {
  s_->keep_descriptors = on;
  if (!on) s_->kept.clear();
}

StepProfile GpuStepExecutor::profile_step(int reps) {
  State& s = *s_;
  // Decode before prefill, then the most tokens.
  auto rank = [](const State::Bucket* b) { return std::pair{b->kind == "decode", b->tokens}; };
  const State::Bucket* pick = nullptr;
  for (const auto& [bucket, bytes] : s.kept)
    if (!pick || rank(bucket) > rank(pick)) pick = bucket;
  if (!pick) fail("gpu engine: profile: no step was kept (keep_step_descriptors)");
  check(cudaSetDevice(s.opt.device), "select device");
  const State::Bucket& b = *pick;
  const std::vector<char>& bytes = s.kept.at(pick);
  // Parity 0's descriptor, graph and launches; on the stream they run on, so that the graph reads
  // the whole descriptor (a plain cudaMemcpy from pageable memory may return before its DMA ends
  // and would be ordered only against the legacy default stream).
  const auto& launches = b.launches[0];
  check(cudaMemcpyAsync(s.desc_dev[0], bytes.data(), bytes.size(), cudaMemcpyHostToDevice, s.stream),
        "profile descriptor");
  const std::size_t n = launches.size();
  std::vector<cudaEvent_t> ev(n + 1);
  for (auto& e : ev) check(cudaEventCreate(&e), "profile event");
  auto elapsed_us = [&](cudaEvent_t from, cudaEvent_t to) {
    float ms = 0;
    check(cudaEventElapsedTime(&ms, from, to), "profile timing");
    return 1e3 * static_cast<double>(ms);
  };
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  reps = std::max(reps, 1);
  // The kernel-by-kernel replay is itself a graph (plain launches with event records between
  // them), so the host's launch rate never starves the GPU and each interval is GPU time.
  cudaGraph_t g = nullptr;
  cudaGraphExec_t serial = nullptr;
  check(cudaStreamBeginCapture(s.stream, cudaStreamCaptureModeThreadLocal), "profile capture");
  check(cudaEventRecordWithFlags(ev[0], s.stream, cudaEventRecordExternal), "profile event");
  for (std::size_t i = 0; i < n; ++i) {
    const auto& l = launches[i];
    check(cudaLaunchKernel(reinterpret_cast<const void*>(s.kernels[l.kernel]), l.grid, s.blocks[l.kernel],
                           const_cast<void**>(l.params.data()), s.dynamic_smem[l.kernel], s.stream),
          "launch");
    check(cudaEventRecordWithFlags(ev[i + 1], s.stream, cudaEventRecordExternal), "profile event");
  }
  check(cudaStreamEndCapture(s.stream, &g), "profile capture");
  const cudaError_t inst = cudaGraphInstantiate(&serial, g, 0);
  cudaGraphDestroy(g);
  check(inst, "profile graph");
  std::vector<double> graph, launch_host;
  std::vector<std::vector<double>> per(n);
  for (int r = 0; r < reps + 2; ++r) {  // the first two are warm-ups
    check(cudaEventRecord(ev[0], s.stream), "profile event");
    const auto t0 = std::chrono::steady_clock::now();
    if (b.graph[0])
      check(cudaGraphLaunch(b.graph[0], s.stream), "graph launch");
    else
      s.launch_all(b, 0);
    if (r >= 2) launch_host.push_back(seconds_since(t0) * 1e6);
    check(cudaEventRecord(ev[1], s.stream), "profile event");
    check(cudaEventSynchronize(ev[1]), "profile");
    if (r >= 2) graph.push_back(elapsed_us(ev[0], ev[1]));
    check(cudaGraphLaunch(serial, s.stream), "profile graph launch");
    check(cudaStreamSynchronize(s.stream), "profile");
    if (r >= 2)
      for (std::size_t i = 0; i < n; ++i) per[i].push_back(elapsed_us(ev[i], ev[i + 1]));
  }
  cudaGraphExecDestroy(serial);
  for (auto& e : ev) cudaEventDestroy(e);
  StepProfile p;
  p.bucket = b.kind + ":" + std::to_string(b.size);
  s.kept.clear();
  p.graph_us = median(graph);
  p.launch_host_us = median(launch_host);
  for (std::size_t i = 0; i < n; ++i) {
    p.launches.push_back({s.kernel_instances[launches[i].kernel], median(per[i])});
    p.serial_us += p.launches.back().us;
  }
  return p;
}

std::string GpuStepExecutor::memory_report() const {
  const State& s = *s_;
  std::ostringstream o;
  std::set<std::string> only_images;
  for (const auto& [key, img] : s.images)
    if (!s.plain_weights.count(img.arg.weight)) only_images.insert(img.arg.weight);
  o << "weights " << s.weight_bytes << " B (" << s.plain_weights.size() << " tensors; "
    << only_images.size() << " more only as slot images)\n"
    << "slot images " << s.image_bytes << " B (" << s.images.size()
    << " weights in the layout of the one-token layer's bulk copies, docs/artifact.md)\n"
    << "kv pool " << s.kv_bytes << " B (" << s.kv_pages << " pages, "
    << static_cast<std::int64_t>(s.kv_pages) * s.page_size << " tokens)\n"
    << "activation arena " << s.arena_bytes << " B\n"
    << "step descriptors " << 2 * s.desc.bytes << " B (one per step parity)\n"
    << "graphs " << s.graph_bytes << " B (" << 2 * s.buckets.size()
    << " graphs: " << s.buckets.size() << " buckets, one per step parity)\n"
    << "beyond weights, slot images, kv pool and arena "
    << s.total_bytes - s.weight_bytes - s.image_bytes - s.kv_bytes - s.arena_bytes
    << " B (graphs, kernels, descriptors, rounding; target <= 1 GiB)\n";
  return o.str();
}

}  // namespace telos::exec
