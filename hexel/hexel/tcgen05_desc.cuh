// Blackwell (sm_100a) tcgen05 descriptors as constexpr value types, checked by host unit tests
// (PTX ISA, "TensorCore 5th Generation Family Instructions: Instruction descriptor" and
// "Shared memory descriptor").
//
// Instruction descriptor (32-bit) for .kind::f16 and .kind::f8f6f4:
//   bits  4-5  D type (f16 = 0, f32 = 1)      bits 7-9 / 10-12  A / B type
//   bit  13/14 negate A / B                   bit 15/16 A / B MN-major ("transpose")
//   bits 17-22 N >> 3                         bits 24-28 M >> 4
// Shared-memory descriptor (64-bit): the Hopper fields (start >> 4 at 0-13, LBO >> 4 at 16-29,
// SBO >> 4 at 32-45, base offset at 49-51) plus the fixed version 0b001 at bits 46-48, the
// LBO mode at bit 52 and a 3-bit layout at 61-63 (0 none, 2 = 128B, 4 = 64B, 6 = 32B,
// 1 = 128B with 32-byte atoms).
#pragma once
#include "hexel/config.cuh"
#include "hexel/swizzle.cuh"

namespace hexel::tcgen05 {

enum class Kind { F16, F8F6F4 };

// Operand element types with their descriptor codes per kind.
enum class AbType { F16, BF16, E4M3, E5M2, E2M3, E3M2, E2M1 };
enum class DType { F16 = 0, F32 = 1 };

HEXEL_HOST_DEVICE constexpr uint32_t ab_code(AbType t) {
  switch (t) {
    case AbType::F16:
      return 0;  // kind::f16
    case AbType::BF16:
      return 1;  // kind::f16
    case AbType::E4M3:
      return 0;  // kind::f8f6f4
    case AbType::E5M2:
      return 1;
    case AbType::E2M3:
      return 3;
    case AbType::E3M2:
      return 4;
    case AbType::E2M1:
      return 5;
  }
  return 0;
}

HEXEL_HOST_DEVICE constexpr Kind kind_of(AbType t) {
  return (t == AbType::F16 || t == AbType::BF16) ? Kind::F16 : Kind::F8F6F4;
}

struct InstrDesc {
  uint32_t bits = 0;

  // M = 64 or 128 for one CTA, N 8 .. 256 in steps of 8; M = 128 or 256 for a CTA pair, N in
  // steps of 16 (PTX ISA, "Matrix Shape"; hexel/tcgen05_model.h checks it). `a_mn_major` /
  // `b_mn_major` select MN-major operands.
  static HEXEL_HOST_DEVICE constexpr InstrDesc make(AbType a, AbType b, DType d, uint32_t m,
                                                    uint32_t n, bool a_mn_major = false,
                                                    bool b_mn_major = false, bool negate_a = false,
                                                    bool negate_b = false) {
    InstrDesc r;
    r.bits = (static_cast<uint32_t>(d) << 4) | (ab_code(a) << 7) | (ab_code(b) << 10) |
             (uint32_t{negate_a} << 13) | (uint32_t{negate_b} << 14) |
             (uint32_t{a_mn_major} << 15) | (uint32_t{b_mn_major} << 16) |
             (((n >> 3) & 0x3Fu) << 17) | (((m >> 4) & 0x1Fu) << 24);
    return r;
  }

  HEXEL_HOST_DEVICE constexpr uint32_t m() const { return ((bits >> 24) & 0x1Fu) << 4; }
  HEXEL_HOST_DEVICE constexpr uint32_t n() const { return ((bits >> 17) & 0x3Fu) << 3; }
};

// A Tensor Memory address: lane in bits 16-31, column in bits 0-15.
HEXEL_HOST_DEVICE constexpr uint32_t tmem_addr(uint32_t lane, uint32_t column) {
  return (lane << 16) | column;
}

HEXEL_HOST_DEVICE constexpr uint64_t layout_code(Swizzle s) {
  return s == Swizzle::B128 ? 2u : s == Swizzle::B64 ? 4u : s == Swizzle::B32 ? 6u : 0u;
}

struct SmemDesc {
  uint64_t bits = 0;

  static HEXEL_HOST_DEVICE constexpr SmemDesc make(uint32_t addr, Swizzle swizzle, uint32_t lbo,
                                                   uint32_t sbo, uint32_t base_offset = 0) {
    SmemDesc d;
    d.bits = (uint64_t{(addr & 0x3FFFFu) >> 4}) | (uint64_t{(lbo & 0x3FFFFu) >> 4} << 16) |
             (uint64_t{(sbo & 0x3FFFFu) >> 4} << 32) | (uint64_t{1} << 46) |
             (uint64_t{base_offset & 7u} << 49) | (layout_code(swizzle) << 61);
    return d;
  }

  HEXEL_HOST_DEVICE constexpr SmemDesc advanced(uint32_t bytes) const {
    SmemDesc d;
    d.bits = bits + (bytes >> 4);
    return d;
  }
};

// K-major tile written by TMA with the same swizzle: SBO = 8 rows x span.
HEXEL_HOST_DEVICE constexpr SmemDesc kmajor_desc(uint32_t addr, Swizzle swizzle) {
  return SmemDesc::make(addr, swizzle, 16, 8u * static_cast<uint32_t>(swizzle));
}

}  // namespace hexel::tcgen05
