// Host-side printers for Hexel's descriptors: every field decoded from the bits, for error
// messages, logs and the codegen's debug dumps. Host-only (snprintf, std::string).
#pragma once
#if defined(__CUDACC_RTC__)
#error "hexel/desc_print.h is host code"
#endif

#include <cstdio>
#include <string>

#include "hexel/tcgen05_desc.cuh"
#include "hexel/wgmma_desc.cuh"

namespace hexel {

namespace detail {
inline const char* wgmma_swizzle_name(uint32_t code) {
  switch (code) {
    case 1:
      return "128B";
    case 2:
      return "64B";
    case 3:
      return "32B";
    default:
      return "none";
  }
}
inline const char* tcgen05_layout_name(uint32_t code) {
  switch (code) {
    case 0:
      return "none";
    case 1:
      return "128B-base32B";
    case 2:
      return "128B";
    case 4:
      return "64B";
    case 6:
      return "32B";
    default:
      return "invalid";
  }
}
}  // namespace detail

inline std::string to_string(const wgmma::SmemDesc& d) {
  char buf[160];
  std::snprintf(buf, sizeof buf,
                "wgmma::SmemDesc{start=0x%x, lbo=%u, sbo=%u, base_offset=%u, swizzle=%s}",
                d.start_address(), d.leading_byte_offset(), d.stride_byte_offset(), d.base_offset(),
                detail::wgmma_swizzle_name(d.swizzle_field()));
  return buf;
}

inline std::string to_string(const tcgen05::SmemDesc& d) {
  const auto field = [&](int lo, int width) {
    return static_cast<uint32_t>((d.bits >> lo) & ((uint64_t{1} << width) - 1));
  };
  char buf[192];
  std::snprintf(buf, sizeof buf,
                "tcgen05::SmemDesc{start=0x%x, lbo=%u, sbo=%u, version=%u, base_offset=%u, "
                "lbo_mode=%u, layout=%s}",
                field(0, 14) << 4, field(16, 14) << 4, field(32, 14) << 4, field(46, 2),
                field(49, 3), field(52, 1), detail::tcgen05_layout_name(field(61, 3)));
  return buf;
}

inline std::string to_string(const tcgen05::InstrDesc& d) {
  const auto field = [&](int lo, int width) { return (d.bits >> lo) & ((1u << width) - 1u); };
  char buf[192];
  std::snprintf(buf, sizeof buf,
                "tcgen05::InstrDesc{M=%u, N=%u, d_type=%u, a_type=%u, b_type=%u, negate_a=%u, "
                "negate_b=%u, a_mn_major=%u, b_mn_major=%u}",
                d.m(), d.n(), field(4, 2), field(7, 3), field(10, 3), field(13, 1), field(14, 1),
                field(15, 1), field(16, 1));
  return buf;
}

}  // namespace hexel
