// C entry point of the proof GEMM for the Python benchmark (gemm_bench.py loads it with ctypes
// and passes torch tensors' device pointers and the current stream). cluster_m picks the
// variant (1, the default: no cluster; 2: B shared across a CTA pair by multicast).
#include "gemm_bf16_launch.h"

extern "C" int hexel_gemm_bf16(const void* a, const void* b, void* c, unsigned m, unsigned n,
                               unsigned k, void* stream, unsigned cluster_m) {
  try {
    return static_cast<int>(hexel::examples::gemm_bf16(
        static_cast<const uint16_t*>(a), static_cast<const uint16_t*>(b), static_cast<uint16_t*>(c),
        m, n, k, static_cast<cudaStream_t>(stream), cluster_m));
  } catch (const std::exception&) {
    return static_cast<int>(cudaErrorInvalidValue);
  }
}
