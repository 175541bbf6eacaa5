// Hopper wgmma shared-memory matrix descriptor (PTX ISA, "Asynchronous Warpgroup Level Matrix
// Multiply-Accumulate: Matrix Descriptor Format"). A constexpr value type so the host unit
// tests can check each field against values worked out from the manual.
//
//   bits  0-13  start address >> 4 (shared window, 18-bit address)
//   bits 16-29  leading-dimension byte offset >> 4
//   bits 32-45  stride-dimension byte offset >> 4
//   bits 49-51  base offset (only for swizzled tiles not aligned to the swizzle repeat)
//   bits 62-63  swizzle: 0 none, 1 = 128B, 2 = 64B, 3 = 32B
#pragma once
#include "hexel/config.cuh"
#include "hexel/swizzle.cuh"

namespace hexel::wgmma {

HEXEL_HOST_DEVICE constexpr uint64_t swizzle_code(Swizzle s) {
  return s == Swizzle::B128 ? 1u : s == Swizzle::B64 ? 2u : s == Swizzle::B32 ? 3u : 0u;
}

struct SmemDesc {
  uint64_t bits = 0;

  // `addr` is the tile's 32-bit shared address. For K-major swizzled tiles, `sbo` is the byte
  // distance between 8-row groups (8 x swizzle span for dense tiles) and `lbo` is unused by
  // the hardware (the manual has it "assumed 1"); pass 16.
  static HEXEL_HOST_DEVICE constexpr SmemDesc make(uint32_t addr, Swizzle swizzle, uint32_t lbo,
                                                   uint32_t sbo, uint32_t base_offset = 0) {
    SmemDesc d;
    d.bits = (uint64_t{(addr & 0x3FFFFu) >> 4}) | (uint64_t{(lbo & 0x3FFFFu) >> 4} << 16) |
             (uint64_t{(sbo & 0x3FFFFu) >> 4} << 32) | (uint64_t{base_offset & 7u} << 49) |
             (swizzle_code(swizzle) << 62);
    return d;
  }

  // The same matrix `bytes` further on (e.g. the next K=16 slice inside a 128B swizzle row:
  // +32 bytes). Adds to the start-address field only.
  HEXEL_HOST_DEVICE constexpr SmemDesc advanced(uint32_t bytes) const {
    SmemDesc d;
    d.bits = bits + (bytes >> 4);
    return d;
  }

  HEXEL_HOST_DEVICE constexpr uint32_t start_address() const {
    return static_cast<uint32_t>(bits & 0x3FFFu) << 4;
  }
  HEXEL_HOST_DEVICE constexpr uint32_t leading_byte_offset() const {
    return static_cast<uint32_t>((bits >> 16) & 0x3FFFu) << 4;
  }
  HEXEL_HOST_DEVICE constexpr uint32_t stride_byte_offset() const {
    return static_cast<uint32_t>((bits >> 32) & 0x3FFFu) << 4;
  }
  HEXEL_HOST_DEVICE constexpr uint32_t base_offset() const {
    return static_cast<uint32_t>((bits >> 49) & 7u);
  }
  HEXEL_HOST_DEVICE constexpr uint32_t swizzle_field() const {
    return static_cast<uint32_t>(bits >> 62);
  }
};

// The usual K-major tile written by TMA with the same swizzle: rows of `swizzle` bytes, 8-row
// groups packed densely, so SBO = 8 x span.
HEXEL_HOST_DEVICE constexpr SmemDesc kmajor_desc(uint32_t addr, Swizzle swizzle) {
  return SmemDesc::make(addr, swizzle, 16, 8u * static_cast<uint32_t>(swizzle));
}

}  // namespace hexel::wgmma
