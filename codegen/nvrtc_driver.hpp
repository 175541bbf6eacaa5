#pragma once
// NVRTC: CUDA C++ source to PTX and cubin for one target, with the resources ptxas reports for
// every kernel. Kernel headers come from codegen/kernels/, embedded in the library at build time,
// so telosc needs no source tree at run time.
#include <map>
#include <string>
#include <vector>

namespace telos::codegen {

struct KernelResources {
  int registers = 0;
  int stack_frame = 0;  // bytes of local memory per thread
  int spill_stores = 0, spill_loads = 0;
  int shared_static = 0;  // bytes
};

struct CompiledModule {
  std::string ptx, cubin, log;
  std::map<std::string, std::string> lowered;          // name expression -> entry (mangled) name
  std::map<std::string, KernelResources> resources;    // entry -> what ptxas reported
  bool from_cache = false;
};

// The kernel headers as NVRTC sees them: include name ("norm.cuh") -> contents.
const std::map<std::string, std::string>& kernel_headers();

// "13.0"
std::string nvrtc_version();

// Compiles `source` for `arch` ("sm_90a"); `name_expressions` are the kernels to instantiate and
// report ("&telos_kernels::rmsnorm<...>" without the "&"). When `cache_dir` is not empty the
// result is looked up there first, keyed by the content of everything that affects it, and
// stored there by atomic rename. Throws telos::Error with NVRTC's log when compilation fails.
CompiledModule compile_module(const std::string& source, const std::string& arch,
                              const std::vector<std::string>& name_expressions,
                              const std::string& cache_dir);

// compile_module on `parts` groups of the names at once, one thread each (names i, i + parts, ...
// in group i; at most one group a name): NVRTC compiles a program on one thread, so a caller that
// loads many instances (the GPU tests, the kernel benches) waits for its largest group instead of
// the whole set. Each group is its own module (load each). Throws the first failure in group
// order, after every group has finished.
std::vector<CompiledModule> compile_modules(const std::string& source, const std::string& arch,
                                            const std::vector<std::string>& name_expressions,
                                            const std::string& cache_dir, int parts);

// Parses ptxas' verbose output (NVRTC's log with --ptxas-options=-v) into per-entry resources.
std::map<std::string, KernelResources> parse_ptxas_log(const std::string& log);

// Shared memory one block may have on sm_90a and sm_100a: 227 KB, static and dynamic together.
constexpr int kMaxSmemPerBlock = 227 * 1024;
// What a compiled kernel may use: no local memory (no spills, no stack frame), and its
// static shared memory plus the plan's dynamic shared memory within kMaxSmemPerBlock, so that a
// plan the device cannot launch fails the compile with the kernel's name instead of the load.
// Throws telos::Error naming `instance` (its `entry`) and `arch`.
void check_kernel_resources(const std::string& instance, const std::string& entry,
                            const std::string& arch, const KernelResources& r, int dynamic_smem);

}  // namespace telos::codegen
