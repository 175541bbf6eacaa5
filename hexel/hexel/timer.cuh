// The global nanosecond timer, for timelines across the SMs of a launch (PTX ISA, "Special
// Registers: %globaltimer").
#pragma once
#include "hexel/config.cuh"

#if defined(__CUDACC__)
namespace hexel {

// Thread: the global timer in ns, one clock for every SM. Volatile: each call reads it anew.
// PTX: mov (%globaltimer).
HEXEL_DEVICE uint64_t globaltimer() {
  uint64_t ns;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(ns));
  return ns;
}

}  // namespace hexel
#endif
