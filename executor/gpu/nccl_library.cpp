#include "executor/gpu/nccl_library.hpp"

#include <dlfcn.h>
#include <nccl.h>

#include <cstdlib>

#include "support/error.hpp"

namespace telos::exec {

// The entry points, typed by nccl.h's declarations (nothing links them).
struct NcclApi {
  decltype(&ncclGetVersion) get_version = nullptr;
  decltype(&ncclGetErrorString) error_string = nullptr;
  decltype(&ncclCommInitAll) comm_init_all = nullptr;
  decltype(&ncclCommDestroy) comm_destroy = nullptr;
  decltype(&ncclAllReduce) all_reduce = nullptr;
  decltype(&ncclAllGather) all_gather = nullptr;
  decltype(&ncclGroupStart) group_start = nullptr;
  decltype(&ncclGroupEnd) group_end = nullptr;
};

namespace {

constexpr const char* kLibrary = "libnccl.so.2";

template <class F>
void resolve(void* lib, const char* name, F& into) {
  into = reinterpret_cast<F>(dlsym(lib, name));
  if (!into)
    fail(std::string(kLibrary) + ": no entry point " + name + " (an NCCL older than 2.x?)");
}

void check(const NcclApi& api, ncclResult_t r, const std::string& what) {
  if (r != ncclSuccess) fail("nccl: " + what + ": " + api.error_string(r));
}

}  // namespace

NcclLibrary::NcclLibrary() : api_(std::make_unique<NcclApi>()) {
  // Kept open for the process's life: communicators may outlive any one user.
  void* lib = dlopen(kLibrary, RTLD_NOW | RTLD_LOCAL);
  if (!lib)
    fail(std::string("cannot load ") + kLibrary + " (" + dlerror() +
         "): put NCCL's library on LD_LIBRARY_PATH (tools/gpu_env.sh finds PyTorch's)");
  resolve(lib, "ncclGetVersion", api_->get_version);
  resolve(lib, "ncclGetErrorString", api_->error_string);
  resolve(lib, "ncclCommInitAll", api_->comm_init_all);
  resolve(lib, "ncclCommDestroy", api_->comm_destroy);
  resolve(lib, "ncclAllReduce", api_->all_reduce);
  resolve(lib, "ncclAllGather", api_->all_gather);
  resolve(lib, "ncclGroupStart", api_->group_start);
  resolve(lib, "ncclGroupEnd", api_->group_end);
}

const NcclLibrary& NcclLibrary::get() {
  static const NcclLibrary library;
  return library;
}

int NcclLibrary::version() const {
  int v = 0;
  check(*api_, api_->get_version(&v), "ncclGetVersion");
  return v;
}

std::string disable_nvlink_multicast() {
  setenv("NCCL_NVLS_ENABLE", "0", /*overwrite=*/0);
  return std::getenv("NCCL_NVLS_ENABLE");
}

void disable_graph_mixing() {
  setenv("NCCL_GRAPH_MIXING_SUPPORT", "0", /*overwrite=*/0);
}

void connect_at_init() {
  setenv("NCCL_RUNTIME_CONNECT", "0", /*overwrite=*/0);
}

NcclGroup::NcclGroup(const std::vector<int>& devices) {
  const NcclApi& api = NcclLibrary::get().api();
  disable_nvlink_multicast();
  disable_graph_mixing();
  connect_at_init();
  std::vector<ncclComm_t> comms(devices.size());
  check(api, api.comm_init_all(comms.data(), static_cast<int>(devices.size()), devices.data()),
        "ncclCommInitAll over " + std::to_string(devices.size()) + " GPUs");
  comms_.assign(comms.begin(), comms.end());
}

NcclGroup::~NcclGroup() {
  const NcclApi& api = NcclLibrary::get().api();
  for (void* c : comms_) api.comm_destroy(static_cast<ncclComm_t>(c));
}

void NcclGroup::all_reduce_sum(int rank, float* buf, std::size_t count, CUstream_st* stream) const {
  const NcclApi& api = NcclLibrary::get().api();
  check(api,
        api.all_reduce(buf, buf, count, ncclFloat32, ncclSum,
                       static_cast<ncclComm_t>(comms_.at(static_cast<std::size_t>(rank))), stream),
        "ncclAllReduce of " + std::to_string(count) + " floats on rank " + std::to_string(rank));
}

void NcclGroup::all_gather(int rank, const float* send, float* recv, std::size_t count,
                           CUstream_st* stream) const {
  const NcclApi& api = NcclLibrary::get().api();
  check(api,
        api.all_gather(send, recv, count, ncclFloat32,
                       static_cast<ncclComm_t>(comms_.at(static_cast<std::size_t>(rank))), stream),
        "ncclAllGather of " + std::to_string(count) + " floats on rank " + std::to_string(rank));
}

void NcclGroup::group_begin() const {
  const NcclApi& api = NcclLibrary::get().api();
  check(api, api.group_start(), "ncclGroupStart");
}

void NcclGroup::group_end() const {
  const NcclApi& api = NcclLibrary::get().api();
  check(api, api.group_end(), "ncclGroupEnd");
}

}  // namespace telos::exec
