#pragma once
// NCCL, loaded at run time: the bootstrap of tensor-parallel ranks and the engine for messages
// beyond the in-node all-reduce kernel's (docs/multi-gpu.md). telos-run links no NCCL: it opens
// libnccl.so.2 with dlopen where it is asked for (the toolkit carries only NCCL's headers; on the
// GPU machine PyTorch's wheel carries the library, which tools/gpu_env.sh puts on
// LD_LIBRARY_PATH), so a machine without it still runs everything else.
//
// NVLink multicast (NVLS) stays off on the machines Telos is lent: NcclGroup sets
// NCCL_NVLS_ENABLE=0 before creating communicators unless the environment already says otherwise,
// and nothing in Telos calls cuMulticastCreate.
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

struct CUstream_st;  // cudaStream_t's target: this header needs no CUDA include path

namespace telos::exec {

struct NcclApi;  // the resolved entry points (nccl_library.cpp)

// libnccl.so.2 with the entry points Telos calls, loaded once a process.
class NcclLibrary {
 public:
  // The library, loaded on first use. Throws telos::Error naming libnccl.so.2 and the loader's
  // reason when it cannot be opened or lacks an entry point.
  static const NcclLibrary& get();
  // NCCL's version code (ncclGetVersion), e.g. 22703 for 2.27.3.
  int version() const;
  const NcclApi& api() const { return *api_; }

 private:
  NcclLibrary();
  std::unique_ptr<NcclApi> api_;
};

// Sets NCCL_NVLS_ENABLE=0 unless it is set already; returns its value after.
std::string disable_nvlink_multicast();

// Sets NCCL_GRAPH_MIXING_SUPPORT=0 unless it is set already. NCCL's support for captured and
// uncaptured operations outstanding together on one communicator can deadlock CUDA when the graphs
// of several communicators are launched from one thread (NCCL's user guide, "Using NCCL with CUDA
// Graphs"), which is how GpuRankGroup launches its ranks' graphs; Telos only ever calls NCCL inside
// a capture, so it needs no mixing.
void disable_graph_mixing();

// Sets NCCL_RUNTIME_CONNECT=0 unless it is set already: the ranks' connections and their buffers
// are made when the communicators are created, before the KV pool takes what memory is free,
// rather than at the first collective (a graph capture, after the pool).
void connect_at_init();

// One communicator a rank for ranks on `devices` of this process (ncclCommInitAll), each on its
// own device; NVLink multicast and graph mixing off, connections made at once (above). Destroy
// the graphs that captured its operations first: from NCCL 2.26 a communicator's destruction
// waits until they are gone.
class NcclGroup {
 public:
  explicit NcclGroup(const std::vector<int>& devices);
  ~NcclGroup();
  NcclGroup(const NcclGroup&) = delete;
  NcclGroup& operator=(const NcclGroup&) = delete;

  int ranks() const { return static_cast<int>(comms_.size()); }
  // Queues rank `rank`'s part of a sum over every rank of `count` floats at `buf`, in place, on
  // `stream` (captured into a graph when the stream is capturing). Every rank must queue its
  // part: call it for each rank between group_begin() and group_end() from one thread.
  void all_reduce_sum(int rank, float* buf, std::size_t count, CUstream_st* stream) const;
  // Queues rank `rank`'s part of an all-gather of `count` floats from each rank's `send` into
  // every rank's `recv` (rank r's at recv + r * count) on `stream`. Every rank must queue its part,
  // each from its own thread or all between group_begin() and group_end() from one.
  void all_gather(int rank, const float* send, float* recv, std::size_t count,
                  CUstream_st* stream) const;
  void group_begin() const;
  void group_end() const;

 private:
  std::vector<void*> comms_;  // ncclComm_t a rank
};

}  // namespace telos::exec
