// Hexel configuration shared by every header: fixed-width integer types that work under both
// nvcc and NVRTC (NVRTC has no <cstdint>), the function qualifiers, and the debug wait limit.
#pragma once

#if defined(__CUDACC_RTC__)
namespace hexel {
using uint8_t = unsigned char;
using uint16_t = unsigned short;
using uint32_t = unsigned int;
using uint64_t = unsigned long long;
using int32_t = int;
}  // namespace hexel
#else
#include <cstdint>
namespace hexel {
using std::int32_t;
using std::uint16_t;
using std::uint32_t;
using std::uint64_t;
using std::uint8_t;
}  // namespace hexel
#endif

#if defined(__CUDACC__)
#define HEXEL_DEVICE __device__ __forceinline__
#define HEXEL_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define HEXEL_HOST_DEVICE inline
#endif

#if defined(__CUDACC__)
namespace hexel {
// Shared-memory addresses travel as 32-bit shared-window values ("r" operands), never as
// 64-bit generic pointers: every PTX form below takes the .shared state space directly.
HEXEL_DEVICE uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// HEXEL_DEBUG_WAIT_LIMIT: when defined (e.g. -DHEXEL_DEBUG_WAIT_LIMIT=100000000), every Hexel
// wait loop traps after that many unsuccessful polls, so a deadlock becomes a failed launch
// (cudaErrorLaunchFailure) instead of a hung test. Undefined: waits spin forever, as in release.
struct WaitGuard {
#if defined(HEXEL_DEBUG_WAIT_LIMIT)
  unsigned long long spins = 0;
  HEXEL_DEVICE void spin() {
    if (++spins > static_cast<unsigned long long>(HEXEL_DEBUG_WAIT_LIMIT)) __trap();
  }
#else
  HEXEL_DEVICE void spin() {}
#endif
};
}  // namespace hexel
#endif
