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

// One communicator a rank for ranks on `devices` of this process (ncclCommInitAll), each on its
// own device.
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
  void group_begin() const;
  void group_end() const;

 private:
  std::vector<void*> comms_;  // ncclComm_t a rank
};

}  // namespace telos::exec
