// Shared-memory swizzle modes, shared by tensor maps (TMA writes swizzled tiles) and matrix
// descriptors (wgmma / tcgen05 read them). The value is the swizzle span in bytes.
#pragma once
#include "hexel/config.cuh"

namespace hexel {

enum class Swizzle : uint16_t { None = 0, B32 = 32, B64 = 64, B128 = 128 };

// Where the byte at logical offset `off` of a swizzled tile lands. The swizzle XORs the 16-byte
// chunk index inside a span (bits 4..) with the row index of 128-byte rows (bits 7..), over
// log2(span/16) bits (PTX ISA, "Tensor Memory Accelerator: Tensor swizzling modes"). A swizzled
// tile's base must be aligned to the repeat (span x 8 rows) for the pattern to start at row 0.
HEXEL_HOST_DEVICE constexpr uint32_t swizzled_offset(uint32_t off, Swizzle s) {
  uint32_t bits = s == Swizzle::B128 ? 3u : s == Swizzle::B64 ? 2u : s == Swizzle::B32 ? 1u : 0u;
  uint32_t mask = ((1u << bits) - 1u) << 4;
  return off ^ ((off >> 3) & mask);
}

// The same map for a tile of 128-byte rows under the 128B swizzle, by row and 16-byte chunk: the
// shared address of chunk `chunk` % 8 of row `row` in the tile at `tile` (1024-byte aligned),
// tile + row · 128 + ((chunk mod 8) XOR (row mod 8)) · 16, which is tile + swizzled_offset(row ·
// 128 + chunk % 8 · 16, Swizzle::B128). A caller walking wider rows in 128-byte column blocks
// passes the block's tile and its piece index as it is. Int: the caller's index type.
template <class Int>
HEXEL_HOST_DEVICE constexpr uint32_t swizzled_chunk_b128(uint32_t tile, Int row, Int chunk) {
  return tile + row * 128 + (((chunk % 8) ^ (row % 8)) * 16);
}

}  // namespace hexel
