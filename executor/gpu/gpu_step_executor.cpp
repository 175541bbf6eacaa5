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

#include "executor/backend_selection.hpp"
#include "executor/gpu/nccl_library.hpp"
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

// Laps of the host's time between device API calls, summed into LaunchCallTimes fields; reads no
// clock when off.
class CallTimer {
 public:
  explicit CallTimer(bool on) : on_(on) {
    if (on_) last_ = std::chrono::steady_clock::now();
  }
  void lap(double& into) {
    if (!on_) return;
    const auto now = std::chrono::steady_clock::now();
    into = std::max(into, 0.0) + std::chrono::duration<double>(now - last_).count();
    last_ = now;
  }

 private:
  bool on_;
  std::chrono::steady_clock::time_point last_;
};

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

dim3 dims(const std::array<unsigned, 3>& d) {
  return dim3(d[0], d[1], d[2]);
}

// Where the load's time goes, a phase at a time, for the log's last line (docs/benchmarks.md:
// load to first token).
class LoadPhases {
 public:
  void done(const char* name) {
    text_ << (text_.tellp() > 0 ? ", " : "") << name << " " << std::fixed << std::setprecision(2)
          << seconds_since(phase_start_) << " s";
    phase_start_ = std::chrono::steady_clock::now();
  }
  double total_seconds() const { return seconds_since(start_); }
  std::string text() const { return text_.str(); }

 private:
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now(),
                                        phase_start_ = start_;
  std::ostringstream text_;
};

}  // namespace

struct GpuStepExecutor::State {
  struct LaunchRecord {
    int kernel = 0;
    dim3 grid;
    std::vector<void*> values;  // one device pointer per kernel parameter
    std::vector<void*> params;  // pointers to `values`, what cudaLaunchKernel takes
    // A collective entry (opt.nccl's): kernel, grid and the parameters unused.
    Collective collective = Collective::none;
    void *send = nullptr, *recv = nullptr;
    std::int64_t count = 0;
  };
  struct Bucket : BucketShape {
    std::string name;  // decode:8
    // By step parity (LaunchArg::per_parity): the arguments, and the graph captured from them.
    std::vector<LaunchRecord> launches[2];
    cudaGraphExec_t graph[2] = {};
  };

  std::shared_ptr<const Artifact> art;
  GpuExecutorOptions opt;
  std::string arch;                          // the device's kernel set's target, e.g. sm_90a
  const LaunchPrograms* programs = nullptr;  // that set (Artifact::kernel_set)
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
  // move) and kept in device memory, 128 bytes each; `tmap_index` maps an argument's text to its
  // slot (at load: launches hold device addresses).
  hexel::TensorMap* tmaps = nullptr;
  std::map<std::string, std::size_t> tmap_index;
  char* base = nullptr;
  // Device addresses by name, at load: the plain weights, the arena's buffers (plan.arena).
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
  // Tensor parallelism: the `peer:NAME` tables (every rank's buffer NAME, rank order) and the
  // rank's index, in one device allocation (link_ranks).
  std::map<std::string, char**> peer_tables;
  int* rank_index = nullptr;
  void* rank_block = nullptr;

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
    // With step timing on: the host's time in the launch's device API calls, and by call group;
    // -1 when off.
    double api_seconds = -1;
    LaunchCallTimes calls;
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
    if (rank_block) cudaFree(rank_block);
    if (base) cudaFree(base);
    if (logits_host) cudaFreeHost(logits_host);
    for (cudaStream_t st : {stream, upload})
      if (st) cudaStreamDestroy(st);
  }

  // The device address of launch argument `arg` in a step of parity `parity`.
  void* resolve(const LaunchArg& arg, int parity) const {
    const int copy = arg.per_parity() ? parity : 0;
    switch (arg.kind) {
      case ArgKind::null:
        return nullptr;
      case ArgKind::host_sampled:
        return slots[copy].sampled_host_device;
      case ArgKind::weight:
        return weights.at(arg.name);
      case ArgKind::buffer:
        return arena.at(arg.name);
      case ArgKind::kv_layer:
        return kv + arg.layer * layer_bytes;
      case ArgKind::tensor_map:
      case ArgKind::image_map:
        return tmaps + tmap_index.at(arg.text);
      case ArgKind::weight_image:
        return images.at(arg.image.key()).dev;
      case ArgKind::descriptor:
        return desc_dev[copy] + desc_offset(arg.field);
      case ArgKind::peer_buffer:
        return peer_tables.at(arg.name);
      case ArgKind::rank:
        return rank_index;
    }
    fail("gpu engine: argument " + arg.text + ": unknown kind");
  }

  std::int64_t desc_offset(DescriptorField f) const {
    switch (f) {
      case DescriptorField::tokens:
        return desc.off_tokens;
      case DescriptorField::positions:
        return desc.off_positions;
      case DescriptorField::token_seq:
        return desc.off_token_seq;
      case DescriptorField::split_positions:
        return desc.off_split_positions;
      case DescriptorField::prompt_positions:
        return desc.off_prompt_positions;
      case DescriptorField::sample_rows:
        return desc.off_sample_rows;
      case DescriptorField::sample_params:
        return desc.off_params;
      case DescriptorField::page_tables:
        return desc.off_page_tables;
    }
    fail("gpu engine: unknown descriptor field");
  }

  // Every kernel after a step's first is launched with programmatic stream serialization (PTX
  // griddepcontrol; codegen/kernels/common.cuh, pdl_entry): its blocks are scheduled while its
  // predecessor finishes and wait there, so launch latency overlaps the previous kernel's tail.
  // The first kernel follows the previous step's graph and the wait for the step descriptor's copy
  // in plain stream order, as does a kernel after a collective (NCCL's kernel ends the chain).
  void launch_all(const Bucket& b, int parity) {
    cudaLaunchAttribute pdl{};
    pdl.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    pdl.val.programmaticStreamSerializationAllowed = 1;
    for (std::size_t i = 0; i < b.launches[parity].size(); ++i) {
      const auto& l = b.launches[parity][i];
      if (l.collective == Collective::all_gather) {
        opt.nccl->all_gather(opt.rank, static_cast<const float*>(l.send),
                             static_cast<float*>(l.recv), static_cast<std::size_t>(l.count),
                             stream);
        continue;
      }
      cudaLaunchConfig_t config{};
      config.gridDim = l.grid;
      config.blockDim = blocks[l.kernel];
      config.dynamicSmemBytes = dynamic_smem[l.kernel];
      config.stream = stream;
      const bool programmatic = i > 0 && opt.programmatic_launch &&
                                b.launches[parity][i - 1].collective == Collective::none;
      config.attrs = programmatic ? &pdl : nullptr;
      config.numAttrs = programmatic ? 1 : 0;
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
    // With step timing on (telos-run bench), the host's time in each group of device API calls
    // (LaunchCallTimes); off, no clock is read between the calls.
    CallTimer timer(timing);
    LaunchCallTimes calls;
    // No wait before overwriting desc_dev[p]: step N-2 read it last, and N-2's graph is done.
    // A step is launched only while at most one is in flight, so N-2 was collected, and collect()
    // waited for N-2's slot.done, which N-2's graph recorded last (or for the logits' copy after
    // it). The same holds for the slot's pinned buffers, which N-2 used: its upload was done
    // before its graph began, and collect() read its tokens before this launch.
    check(cudaMemcpyAsync(desc_dev[p], slot.desc_host, static_cast<std::size_t>(packed.upload),
                          cudaMemcpyHostToDevice, upload),
          "step descriptor upload");
    check(cudaEventRecord(desc_ready[p], upload), "step event");
    timer.lap(calls.upload_seconds);
    check(cudaStreamWaitEvent(stream, desc_ready[p], 0), "step event");
    timer.lap(calls.wait_seconds);
    // Once per bucket, so that keeping costs the measured steps nothing.
    if (keep_descriptors && !kept.count(&b)) kept[&b].assign(slot.desc_host, slot.desc_host + packed.upload);
    timer.lap(calls.other_seconds);
    // The bench's idle-gap events are not production calls: their time is kept apart.
    const int ev = static_cast<int>(launched % 3);
    if (timing) check(cudaEventRecord(graph_begin[ev], stream), "timing event");
    timer.lap(calls.timing_seconds);
    if (b.graph[p])
      check(cudaGraphLaunch(b.graph[p], stream), "graph launch");
    else
      launch_all(b, p);
    timer.lap(calls.graph_launch_seconds);
    if (timing) check(cudaEventRecord(graph_end[ev], stream), "timing event");
    timer.lap(calls.timing_seconds);
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
    timer.lap(calls.other_seconds);
    slot.calls = timing ? calls : LaunchCallTimes{};
    slot.calls.upload_bytes = timing ? packed.upload : -1;
    slot.api_seconds = timing ? calls.upload_seconds + calls.wait_seconds +
                                    calls.graph_launch_seconds + calls.other_seconds
                              : -1;
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

  // The device, its streams and events; returns the device memory free before anything was
  // taken. Refuses an artifact not compiled for this device's architecture.
  std::int64_t open_device() {
    check(cudaSetDevice(opt.device), "select device " + std::to_string(opt.device));
    cudaDeviceProp prop{};
    check(cudaGetDeviceProperties(&prop, opt.device), "device properties");
    programs = &art->kernel_set(prop.major, prop.minor);
    arch = programs->target;
    for (cudaStream_t* st : {&stream, &upload})
      check(cudaStreamCreateWithFlags(st, cudaStreamNonBlocking), "stream");
    for (cudaEvent_t& e : desc_ready)
      check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "step event");
    return device_free_bytes();
  }

  // kernels/<arch>.cubin and the kernel table's entries, with their launch shapes.
  void load_kernels() {
    const std::string cubin = read_file(art->dir() + "/kernels/" + arch + ".cubin");
    check(cudaLibraryLoadData(&library, cubin.data(), nullptr, nullptr, 0, nullptr, nullptr, 0),
          "load kernels/" + arch + ".cubin");
    for (const KernelEntry& e : programs->kernels) {
      cudaKernel_t k = nullptr;
      check(cudaLibraryGetKernel(&k, library, e.entry.c_str()), "kernel " + e.entry);
      kernels.push_back(k);
      kernel_instances.push_back(e.instance);
      blocks.push_back(dims(e.block));
      // Above 48 KiB a kernel must opt in to its dynamic shared memory.
      if (e.dynamic_smem > 48 * 1024)
        check(cudaFuncSetAttribute(reinterpret_cast<const void*>(k),
                                   cudaFuncAttributeMaxDynamicSharedMemorySize, e.dynamic_smem),
              "shared memory of " + e.entry);
      dynamic_smem.push_back(static_cast<unsigned>(e.dynamic_smem));
    }
  }

  // What the device holds besides the pool: the weights the launches read as they are, their slot
  // images (one per key, after the weights), the arena and the step descriptors; then the pool,
  // within the memory free now.
  void plan_memory() {
    const Artifact& a = *art;
    vocab = a.model().vocab_size;
    page_size = a.kv_cache().page_size;
    bytes_per_page = a.kv_cache().bytes_per_page;
    layer_bytes = bytes_per_page / a.kv_cache().num_layers;
    for (const ProgramBucket& bucket : programs->buckets)
      for (const ProgramLaunch& l : bucket.launches)
        for (const LaunchArg& arg : l.args) note_weight_use(arg);
    for (const auto& t : a.tensors(opt.rank))
      if (plain_weights.count(t.name))
        weight_bytes += align_up(static_cast<std::int64_t>(t.bytes), 256);
    arena_bytes = align_up(programs->arena_bytes, 256);
    const ServingConfig& serving = a.serving();
    const int max_pages = max_pages_per_sequence(serving);
    desc = StepDescriptorLayout::make(programs->max_tokens, programs->max_sample_rows,
                                      serving.max_batch, max_pages, page_size, vocab, 0);
    // The pool: --kv-pages, else the artifact's, within the memory free now (another process may
    // hold some; runtime_limits.hpp, device_kv_pool_pages).
    std::size_t free_b = 0, total_b = 0;
    check(cudaMemGetInfo(&free_b, &total_b), "memory info");
    std::string pool_note;
    // Every rank takes rank 0's pool: one scheduler hands out the same pages on each.
    const int asked = opt.ranks && opt.rank > 0 ? opt.ranks->pool_pages() : opt.kv_pages;
    kv_pages =
        device_kv_pool_pages({asked, serving.kv_pool_pages, serving.kv_pool_memory_fraction,
                              static_cast<std::int64_t>(free_b), static_cast<std::int64_t>(total_b),
                              fixed_bytes(), bytes_per_page, max_pages},
                             &pool_note);
    if (opt.log && !pool_note.empty()) *opt.log << "telos-run: " << pool_note << "\n";
    kv_bytes = static_cast<std::int64_t>(kv_pages) * bytes_per_page;
    desc.kv_pages = kv_pages;
  }

  // A weight a launch reads as it is (w:, tmap:w:) or from its slot image (wimg:, timg:).
  void note_weight_use(const LaunchArg& arg) {
    if (arg.kind == ArgKind::weight) plain_weights.insert(arg.name);
    if (arg.kind == ArgKind::tensor_map && arg.map_target == ArgKind::weight)
      plain_weights.insert(arg.name);
    if (arg.kind != ArgKind::weight_image && arg.kind != ArgKind::image_map) return;
    if (images.count(arg.image.key())) return;
    Image img;
    img.arg = arg.image;
    img.arg.box_rows = 0;
    img.bytes =
        align_up(static_cast<std::int64_t>(art->tensor(img.arg.weight, opt.rank).bytes), 256);
    image_bytes += img.bytes;
    images[img.arg.key()] = img;
  }

  // Everything but the pool: weights, slot images, arena, one step descriptor per parity.
  std::int64_t fixed_bytes() const {
    return weight_bytes + image_bytes + arena_bytes + 2 * desc.bytes;
  }

  // One allocation: weights, slot images, KV pool, arena, descriptors; where the device lacks it,
  // the message says what it was for (and check() which flag asks for less). Then the pinned
  // host side of each step slot.
  void allocate() {
    check(cudaMalloc(&base, static_cast<std::size_t>(fixed_bytes() + kv_bytes)),
          "device memory for the weights, slot images, arena and descriptors (" +
              mib(fixed_bytes()) + ") and a KV pool of " + std::to_string(kv_pages) + " pages (" +
              mib(kv_bytes) + ")");
    char* p = base + weight_bytes;
    for (auto& [key, img] : images) {
      img.dev = p;
      p += img.bytes;
    }
    kv = p;
    for (Slot& slot : slots) {
      check(cudaMallocHost(&slot.desc_host, static_cast<std::size_t>(desc.bytes)),
            "pinned descriptor");
      check(cudaHostAlloc(&slot.sampled_host, sizeof(std::int32_t) * desc.max_sample_rows,
                          cudaHostAllocMapped),
            "pinned tokens");
      check(cudaHostGetDevicePointer(&slot.sampled_host_device, slot.sampled_host, 0),
            "pinned tokens");
      check(cudaEventCreateWithFlags(&slot.done, cudaEventDisableTiming), "step event");
      check(cudaEventCreateWithFlags(&slot.logits_done, cudaEventDisableTiming), "step event");
      std::memset(slot.desc_host, 0, static_cast<std::size_t>(desc.bytes));
    }
    check(cudaMallocHost(&logits_host, sizeof(float) * desc.max_sample_rows * vocab),
          "pinned logits");
  }

  // The arena after the pool, each buffer at its planned offset (plan.arena), then the two step
  // descriptors. Both start zeroed (docs/artifact.md): kernels that keep state across launches
  // (the arrival counters) leave it zero after each launch and rely on the first.
  void place_arena_and_descriptors() {
    char* arena_base = kv + kv_bytes;
    check(cudaMemset(arena_base, 0, static_cast<std::size_t>(arena_bytes + 2 * desc.bytes)),
          "arena init");
    for (const ArenaSlot& b : programs->arena) arena[b.buffer] = arena_base + b.offset;
    desc_dev[0] = arena_base + arena_bytes;
    desc_dev[1] = desc_dev[0] + desc.bytes;
    logits_dev = arena.at("logits");
  }

  // A tensor-parallel rank's `peer:NAME` tables (every rank's buffer NAME, in rank order) and its
  // `rank` index, in device memory, from every rank's arena (RankExchange). Ranks on other devices
  // are reached through peer access, which GpuRankGroup enables before the ranks load.
  void link_ranks() {
    if (art->ranks() == 1) return;
    const std::vector<RankExchange::ArenaAddresses> all =
        opt.ranks->exchange_arenas(opt.rank, arena);
    std::set<std::string> names;
    for (const ProgramBucket& bucket : art->programs().buckets)
      for (const ProgramLaunch& l : bucket.launches)
        for (const LaunchArg& arg : l.args)
          if (arg.kind == ArgKind::peer_buffer) names.insert(arg.name);
    // The tables first (pointer-aligned), the rank's index last.
    std::vector<char*> tables;
    for (const std::string& name : names)
      for (const RankExchange::ArenaAddresses& rank_arena : all)
        tables.push_back(rank_arena.at(name));
    const std::size_t table_bytes = sizeof(char*) * tables.size();
    check(cudaMalloc(&rank_block, table_bytes + sizeof(int)), "tensor-parallel peer tables");
    char* block = static_cast<char*>(rank_block);
    check(cudaMemcpy(block, tables.data(), table_bytes, cudaMemcpyHostToDevice), "peer tables");
    check(cudaMemcpy(block + table_bytes, &opt.rank, sizeof(int), cudaMemcpyHostToDevice),
          "rank index");
    std::size_t i = 0;
    for (const std::string& name : names)
      peer_tables[name] = reinterpret_cast<char**>(block) + all.size() * i++;
    rank_index = reinterpret_cast<int*>(block + table_bytes);
  }

  // The TMA tensor maps of the `tmap:` and `timg:` arguments, one per distinct argument, in
  // device memory (the loader checked each against its weight, buffer or the KV cache).
  void encode_tensor_maps() {
    std::vector<hexel::TensorMap> maps;
    for (const ProgramBucket& bucket : programs->buckets)
      for (const ProgramLaunch& l : bucket.launches)
        for (const LaunchArg& arg : l.args) {
          if (arg.kind != ArgKind::tensor_map && arg.kind != ArgKind::image_map) continue;
          if (tmap_index.count(arg.text)) continue;
          try {
            maps.push_back(arg.kind == ArgKind::image_map ? image_map(arg) : tensor_map(arg));
          } catch (const std::runtime_error& e) {
            fail("gpu engine: argument " + arg.text + ": " + e.what());
          }
          tmap_index[arg.text] = maps.size() - 1;
        }
    if (maps.empty()) return;
    // cudaMalloc's alignment (256 bytes) covers the 64 a tensor map needs.
    check(cudaMalloc(&tmaps, sizeof(hexel::TensorMap) * maps.size()), "tensor maps");
    check(cudaMemcpy(tmaps, maps.data(), sizeof(hexel::TensorMap) * maps.size(),
                     cudaMemcpyHostToDevice),
          "tensor map upload");
  }

  hexel::TensorMap image_map(const LaunchArg& arg) const {
    const WeightTensor& w = art->tensor(arg.image.weight, opt.rank);
    return encode_slot_image_map(images.at(arg.image.key()).dev, w.shape[0], w.shape[1],
                                 arg.image.bn, arg.image.halves, arg.image.box_rows);
  }

  hexel::TensorMap tensor_map(const LaunchArg& arg) const {
    const TensorMapArg& t = arg.map;
    if (arg.map_target == ArgKind::kv_layer) {
      // The pool from layer L's base to its end, rows of one position of one head
      // (docs/artifact.md): kernels address a row as page · ROWS + offset in int32.
      const std::int64_t rows = static_cast<std::int64_t>(kv_pages) * t.rows -
                                arg.layer * (t.rows / art->kv_cache().num_layers);
      if (static_cast<std::int64_t>(kv_pages) * t.rows > std::numeric_limits<std::int32_t>::max())
        fail("the KV pool's " + std::to_string(kv_pages) +
             " pages hold more rows than 32-bit TMA coordinates reach");
      return hexel::encode_2d(hexel::TmaDtype::BF16, kv + arg.layer * layer_bytes,
                              static_cast<std::uint64_t>(rows), static_cast<std::uint64_t>(t.cols),
                              static_cast<std::uint64_t>(t.cols) * 2, t.box_rows, t.box_cols,
                              hexel::Swizzle::B128);
    }
    void* at = arg.map_target == ArgKind::weight ? weights.at(arg.name) : arena.at(arg.name);
    // One-byte elements: a W8A8 operand's 128-byte box rows with the swizzle, or an e4m3 weight's
    // 64-byte ones without (the loader cleared it; gemm_e4m3.cuh's converters read them as they
    // land).
    if (t.elem_bytes == 1)
      return hexel::encode_2d(hexel::TmaDtype::U8, at, static_cast<std::uint64_t>(t.rows),
                              static_cast<std::uint64_t>(t.cols),
                              static_cast<std::uint64_t>(t.cols), t.box_rows, t.box_cols,
                              t.swizzle ? hexel::Swizzle::B128 : hexel::Swizzle::None);
    // The element type follows from the box width (docs/artifact.md): 64 bf16 or 32 f32.
    return hexel::encode_2d(
        t.elem_bytes == 4 ? hexel::TmaDtype::F32 : hexel::TmaDtype::BF16, at,
        static_cast<std::uint64_t>(t.rows), static_cast<std::uint64_t>(t.cols),
        static_cast<std::uint64_t>(t.cols) * static_cast<std::uint64_t>(t.elem_bytes), t.box_rows,
        t.box_cols, hexel::Swizzle::B128);
  }

  // Whether this rank runs the launch programs' collectives: on the rank group's communicators,
  // captured in the graphs (NCCL's operations of several communicators from one thread need a
  // group call, which the plain launches of launch_all do not make).
  bool runs_collectives() const { return opt.nccl != nullptr && opt.use_graphs; }

  // A launch as this rank runs it: a kernel's, or a collective's on its communicator.
  LaunchRecord record(const ProgramLaunch& pl, int parity) const {
    LaunchRecord l;
    l.collective = pl.collective;
    if (pl.collective != Collective::none) {
      l.send = resolve(pl.send, parity);
      l.recv = resolve(pl.recv, parity);
      l.count = pl.count;
      return l;
    }
    l.kernel = pl.kernel;
    l.grid = dims(pl.grid);
    for (const LaunchArg& arg : pl.args) l.values.push_back(resolve(arg, parity));
    for (auto& v : l.values) l.params.push_back(&v);
    return l;
  }

  // Every bucket's launches with their arguments' device addresses, one set per step parity:
  // after a collective entry its `then` launches where this rank runs collectives, else its
  // fallback in its place. Under runtime limits, not the buckets no step can choose
  // (bucket_reachable). Returns how many were left out.
  int resolve_launches() {
    const std::vector<ProgramBucket>& planned = programs->buckets;
    std::vector<BucketShape> shapes;
    for (const ProgramBucket& p : planned)
      shapes.push_back({p.decode, p.size, p.tokens, p.sample_rows});
    int unreachable = 0;
    for (std::size_t i = 0; i < planned.size(); ++i) {
      if (!bucket_reachable(shapes, shapes[i], opt.max_batch, opt.prefill_chunk)) {
        ++unreachable;
        continue;
      }
      Bucket b;
      static_cast<BucketShape&>(b) = shapes[i];
      b.name = planned[i].name();
      const auto& first_args = planned[i].launches.front().args;
      feeds = feeds && std::any_of(first_args.begin(), first_args.end(), [](const LaunchArg& a) {
                return a.kind == ArgKind::buffer && a.name == "sampled";
              });
      const LaunchPath skipped =
          runs_collectives() ? LaunchPath::without_collective : LaunchPath::with_collective;
      for (int parity = 0; parity < 2; ++parity)
        for (const ProgramLaunch& pl : planned[i].launches) {
          if (pl.path == skipped) continue;
          if (pl.collective != Collective::none && !runs_collectives()) continue;
          b.launches[parity].push_back(record(pl, parity));
        }
      bucket_shapes.push_back(b);
      buckets.push_back(std::move(b));
    }
    return unreachable;
  }

  // Two graphs per bucket (one per step parity), largest bucket first, each uploaded so that the
  // first step does not pay for it; their memory and times go to the load log.
  void capture_graphs(int unreachable) {
    const std::int64_t free_before = device_free_bytes();
    const auto started = std::chrono::steady_clock::now();
    std::ostringstream times;
    for (Bucket& b : buckets) {
      const auto t0 = std::chrono::steady_clock::now();
      for (int parity = 0; parity < 2; ++parity) capture(b, parity);
      check(cudaStreamSynchronize(stream), "upload graph for " + b.name);
      times << " " << b.name << " " << std::fixed << std::setprecision(1) << seconds_since(t0) * 1e3
            << " ms";
    }
    graph_bytes = free_before - device_free_bytes();
    if (!opt.log) return;
    *opt.log << "telos-run: captured " << 2 * buckets.size()
             << " graphs (2 per bucket, one per step parity) in " << std::fixed
             << std::setprecision(1) << seconds_since(started) * 1e3 << " ms, " << mib(graph_bytes)
             << " of graph memory:" << times.str()
             << (unreachable > 0 ? " (" + std::to_string(unreachable) +
                                       " buckets past the runtime limits not loaded)"
                                 : std::string())
             << "\n"
             << std::defaultfloat;
  }

  void capture(Bucket& b, int parity) {
    cudaGraph_t graph = nullptr;
    check(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), "begin capture");
    launch_all(b, parity);
    // The step's done event as the graph's last node: each launch records it (CUDA runtime API,
    // cudaEventRecordWithFlags, cudaEventRecordExternal during capture).
    check(cudaEventRecordWithFlags(slots[parity].done, stream, cudaEventRecordExternal),
          "capture the step's done event");
    check(cudaStreamEndCapture(stream, &graph), "end capture");
    const cudaError_t e = cudaGraphInstantiate(&b.graph[parity], graph, 0);
    cudaGraphDestroy(graph);
    check(e, "instantiate graph for " + b.name);
    check(cudaGraphUpload(b.graph[parity], stream), "upload graph for " + b.name);
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
      for (const auto& t : a.tensors(opt.rank)) {
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
          a.release_weight_pages(t, 0, t.bytes, opt.rank);
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
          a.release_weight_pages(t, off, n, opt.rank);
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
  if (!s.art->has_kernels())
    fail(s.art->dir() +
         ": the artifact has no kernels (compile it with a telosc that runs codegen)");
  if (s.art->ranks() > 1 && !options.ranks)
    fail(s.art->dir() + "/manifest.json: serving.tensor_parallel is " +
         std::to_string(s.art->ranks()) +
         ": its ranks load together (GpuRankGroup), not one alone");
  LoadPhases phases;
  const std::int64_t free_at_start = s.open_device();
  phases.done("device");
  s.load_kernels();
  phases.done("kernels");
  s.plan_memory();
  s.allocate();
  if (s.opt.ranks && s.opt.rank == 0) s.opt.ranks->publish_pool_pages(s.kv_pages);
  phases.done("allocation");
  s.upload_weights(*s.art, options.log, options.progress);
  phases.done("weights");
  s.place_arena_and_descriptors();
  s.link_ranks();
  s.encode_tensor_maps();
  const int unreachable = s.resolve_launches();
  check(cudaStreamSynchronize(s.stream), "load");
  phases.done("tensor maps and launches");
  if (options.use_graphs) {
    s.capture_graphs(unreachable);
    phases.done("graphs");
  }
  s.total_bytes = free_at_start - device_free_bytes();
  if (options.log) {
    std::istringstream report(memory_report());
    for (std::string line; std::getline(report, line);)
      *options.log << "telos-run: memory: " << line << "\n";
    *options.log << "telos-run: gpu engine built in " << std::fixed << std::setprecision(2)
                 << phases.total_seconds() << " s: " << phases.text() << "\n"
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
  auto rank = [](const State::Bucket* b) { return std::pair{b->decode, b->tokens}; };
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
  // A collective meets the other ranks: one rank's replay alone would wait for them.
  for (const auto& l : launches)
    if (l.collective != Collective::none)
      fail("gpu engine: profile: bucket " + b.name + " runs a collective (a tensor-parallel rank)");
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
  p.bucket = b.name;
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
