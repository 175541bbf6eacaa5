// A host model of the tcgen05 data paths Hexel's kernels use, so that CPU tests can stand in for
// a Blackwell GPU: the fields of the instruction and shared-memory descriptors decoded from their
// bits and encoded back, where element (row, k) of a K-major operand lives in shared memory under
// a descriptor, where an accumulator element of a cta_group::1, M = 128 MMA lives in Tensor
// Memory (and of a cta_group::2, M = 256 one, in which CTA's), and which Tensor Memory cell each
// register of a tcgen05.ld .32x32b receives. Each rule cites its section of the PTX ISA,
// "TensorCore 5th Generation Family Instructions". The model is written from the manual's tables,
// independently of the builders in tcgen05_desc.cuh, which the tests compare it with. Anything
// outside what it models is an std::invalid_argument naming the field and what was expected.
// Host-only.
#pragma once
#if defined(__CUDACC_RTC__)
#error "hexel/tcgen05_model.h is host code"
#endif

#include <stdexcept>
#include <string>

#include "hexel/tcgen05_desc.cuh"

namespace hexel::tcgen05::model {

namespace detail {

inline uint64_t field(uint64_t bits, int lo, int width) {
  return (bits >> lo) & ((uint64_t{1} << width) - 1);
}

// `value` into bits lo .. lo + width - 1, refusing a value that does not fit.
inline uint64_t put(uint64_t value, int lo, int width, const char* name) {
  if (value >> width)
    throw std::invalid_argument(std::string(name) + " = " + std::to_string(value) +
                                " does not fit its " + std::to_string(width) + "-bit field");
  return value << lo;
}

inline void require(bool ok, const std::string& what) {
  if (!ok) throw std::invalid_argument(what);
}

}  // namespace detail

// "Instruction descriptor", the table for .kind::tf32, .kind::f16, .kind::f8f6f4 and .kind::i8:
// bits 0-1 sparsity selector, 2 sparsity, 3 saturate, 4-5 D type, 6 reserved, 7-9 A type, 10-12
// B type, 13/14 negate A/B, 15/16 transpose (MN-major) A/B, 17-22 N >> 3, 23 reserved,
// 24-28 M >> 4, 29 reserved, 30-31 maximum shift (.ws only). m and n hold the dimensions.
struct InstrFields {
  uint32_t sparsity_selector = 0;
  bool sparse = false;
  bool saturate = false;
  uint32_t d_type = 0;
  uint32_t a_type = 0;
  uint32_t b_type = 0;
  bool negate_a = false;
  bool negate_b = false;
  bool a_mn_major = false;
  bool b_mn_major = false;
  uint32_t n = 0;
  uint32_t m = 0;
  uint32_t max_shift = 0;
  friend bool operator==(const InstrFields&, const InstrFields&) = default;
};

inline InstrFields decode(InstrDesc d) {
  using detail::field;
  for (int reserved : {6, 23, 29})
    detail::require(
        field(d.bits, reserved, 1) == 0,
        "instruction descriptor bit " + std::to_string(reserved) + " is reserved and must be 0");
  InstrFields f;
  f.sparsity_selector = static_cast<uint32_t>(field(d.bits, 0, 2));
  f.sparse = field(d.bits, 2, 1);
  f.saturate = field(d.bits, 3, 1);
  f.d_type = static_cast<uint32_t>(field(d.bits, 4, 2));
  f.a_type = static_cast<uint32_t>(field(d.bits, 7, 3));
  f.b_type = static_cast<uint32_t>(field(d.bits, 10, 3));
  f.negate_a = field(d.bits, 13, 1);
  f.negate_b = field(d.bits, 14, 1);
  f.a_mn_major = field(d.bits, 15, 1);
  f.b_mn_major = field(d.bits, 16, 1);
  f.n = static_cast<uint32_t>(field(d.bits, 17, 6)) << 3;
  f.m = static_cast<uint32_t>(field(d.bits, 24, 5)) << 4;
  f.max_shift = static_cast<uint32_t>(field(d.bits, 30, 2));
  return f;
}

inline InstrDesc encode(const InstrFields& f) {
  using detail::put;
  detail::require(f.n % 8 == 0, "N = " + std::to_string(f.n) + " is not a multiple of 8");
  detail::require(f.m % 16 == 0, "M = " + std::to_string(f.m) + " is not a multiple of 16");
  const uint64_t bits = put(f.sparsity_selector, 0, 2, "sparsity_selector") |
                        put(f.sparse, 2, 1, "sparse") | put(f.saturate, 3, 1, "saturate") |
                        put(f.d_type, 4, 2, "d_type") | put(f.a_type, 7, 3, "a_type") |
                        put(f.b_type, 10, 3, "b_type") | put(f.negate_a, 13, 1, "negate_a") |
                        put(f.negate_b, 14, 1, "negate_b") |
                        put(f.a_mn_major, 15, 1, "a_mn_major") |
                        put(f.b_mn_major, 16, 1, "b_mn_major") | put(f.n >> 3, 17, 6, "N >> 3") |
                        put(f.m >> 4, 24, 5, "M >> 4") | put(f.max_shift, 30, 2, "max_shift");
  return InstrDesc{static_cast<uint32_t>(bits)};
}

// "Matrix Shape", the table of .kind and shapes: a dense, non-.ws, cta_group::1 .kind::f16 MMA
// has M = 64 or 128, N = 8 .. 256 in steps of 8 and K = 16; D is f16 (0) or f32 (1), A and B
// f16 (0) or bf16 (1), and an f16 D takes f16 operands only.
inline void check_dense_kind_f16_cta1(const InstrFields& f) {
  using detail::require;
  require(f.m == 64 || f.m == 128,
          "M = " + std::to_string(f.m) + ": a cta_group::1 kind::f16 MMA has M = 64 or 128");
  require(f.n >= 8 && f.n <= 256 && f.n % 8 == 0,
          "N = " + std::to_string(f.n) + ": kind::f16 takes N = 8 .. 256 in steps of 8");
  require(f.d_type <= 1,
          "d_type = " + std::to_string(f.d_type) + ": kind::f16 has D f16 (0) or f32 (1)");
  require(f.a_type <= 1 && f.b_type <= 1, "a_type/b_type: kind::f16 takes f16 (0) or bf16 (1)");
  require(f.d_type == 1 || (f.a_type == 0 && f.b_type == 0),
          "an f16 D takes f16 operands only, not bf16");
  require(!f.sparse && f.sparsity_selector == 0, "sparse: the model covers dense MMAs only");
  require(!f.saturate && f.max_shift == 0, "saturate and max_shift are 0 for dense kind::f16");
}

// "Matrix Shape", the same table for a CTA pair: a dense, non-.ws, cta_group::2 .kind::f16 MMA
// has M = 128 or 256 (the pair's rows, half in each CTA at M = 256) and N = 16 .. 256 in steps of
// 16; the types as for one CTA.
inline void check_dense_kind_f16_cta2(const InstrFields& f) {
  using detail::require;
  require(f.m == 128 || f.m == 256,
          "M = " + std::to_string(f.m) + ": a cta_group::2 kind::f16 MMA has M = 128 or 256");
  require(f.n >= 16 && f.n <= 256 && f.n % 16 == 0,
          "N = " + std::to_string(f.n) + ": a cta_group::2 MMA takes N = 16 .. 256 in steps of 16");
  InstrFields one = f;
  one.m = 128;
  check_dense_kind_f16_cta1(one);
}

// "Shared Memory Descriptor", the layout table: bits 0-13 start address >> 4, 14-15 reserved,
// 16-29 leading-dimension byte offset >> 4, 30-31 reserved, 32-45 stride-dimension byte offset
// >> 4, 46-48 the fixed value 0b001, 49-51 base offset, 52 leading-dimension stride mode, 53-60
// fixed 0, 61-63 swizzling mode (0 none, 1 128B with 32B atoms, 2 128B, 4 64B, 6 32B; 3, 5 and 7
// are invalid). Addresses and offsets are in bytes (16-byte aligned).
struct SmemFields {
  uint32_t start = 0;
  uint32_t lbo = 0;
  uint32_t sbo = 0;
  uint32_t base_offset = 0;
  uint32_t lbo_mode = 0;
  uint32_t layout = 0;
  friend bool operator==(const SmemFields&, const SmemFields&) = default;
};

inline SmemFields decode(SmemDesc d) {
  using detail::field;
  using detail::require;
  require(field(d.bits, 14, 2) == 0 && field(d.bits, 30, 2) == 0,
          "shared memory descriptor bits 14-15 and 30-31 are reserved and must be 0");
  require(field(d.bits, 46, 3) == 1, "shared memory descriptor bits 46-48 must hold 0b001");
  require(field(d.bits, 53, 8) == 0, "shared memory descriptor bits 53-60 must be 0");
  SmemFields f;
  f.start = static_cast<uint32_t>(field(d.bits, 0, 14)) << 4;
  f.lbo = static_cast<uint32_t>(field(d.bits, 16, 14)) << 4;
  f.sbo = static_cast<uint32_t>(field(d.bits, 32, 14)) << 4;
  f.base_offset = static_cast<uint32_t>(field(d.bits, 49, 3));
  f.lbo_mode = static_cast<uint32_t>(field(d.bits, 52, 1));
  f.layout = static_cast<uint32_t>(field(d.bits, 61, 3));
  require(f.layout % 2 == 0 || f.layout == 1,
          "swizzling mode " + std::to_string(f.layout) + " is invalid (3, 5 and 7 are)");
  return f;
}

inline SmemDesc encode(const SmemFields& f) {
  using detail::put;
  const auto aligned = [](uint32_t value, const char* name) {
    detail::require(value % 16 == 0,
                    std::string(name) + " = " + std::to_string(value) + " is not 16-byte aligned");
  };
  aligned(f.start, "start");
  aligned(f.lbo, "lbo");
  aligned(f.sbo, "sbo");
  return SmemDesc{put(f.start >> 4, 0, 14, "start >> 4") | put(f.lbo >> 4, 16, 14, "lbo >> 4") |
                  put(f.sbo >> 4, 32, 14, "sbo >> 4") | put(1, 46, 3, "version") |
                  put(f.base_offset, 49, 3, "base_offset") | put(f.lbo_mode, 52, 1, "lbo_mode") |
                  put(f.layout, 61, 3, "layout")};
}

// Swizzle span in bytes of a descriptor swizzling mode: 128, 64, 32, or 16 for none (the width
// of one core-matrix row).
inline uint32_t swizzle_span(uint32_t layout) {
  switch (layout) {
    case 2:
      return 128;
    case 4:
      return 64;
    case 6:
      return 32;
    case 0:
      return 16;
    default:
      throw std::invalid_argument("swizzling mode " + std::to_string(layout) +
                                  " is not modelled (128B with 32B atoms, or invalid)");
  }
}

// Shared-memory byte address of element (row, k) of a K-major operand described by `d`, with
// elements of `elem_bytes` bytes; row indexes M (A) or N (B), k the K extent of one MMA.
// "Shared Memory Descriptor" and "Major-ness supported by Strides": rows come in groups of 8,
// the stride-dimension byte offset (SBO) apart. A swizzled layout stores each row's K bytes
// contiguously, rows `span` bytes apart inside a group (the swizzle atom is 8 rows x span), the
// leading-dimension offset unused; the swizzle then permutes 16-byte chunks by XORing address
// bits 4 .. 4 + log2(span / 16) - 1 with bits 7 and up, on the address itself, which is why
// stepping K inside a swizzle row is a plain add to the start address. Without swizzle, 8 x 16-byte
// core matrices of 8 rows, 16 bytes apart; the leading-dimension byte offset (LBO) between
// K-adjacent core matrices. The base offset is modelled only as 0 (the repeat starts on a
// boundary of 8 x span bytes), and the LBO only in relative mode.
inline uint32_t kmajor_element_address(SmemDesc desc, uint32_t row, uint32_t k,
                                       uint32_t elem_bytes) {
  const SmemFields f = decode(desc);
  detail::require(f.base_offset == 0, "base_offset = " + std::to_string(f.base_offset) +
                                          ": only 0 (pattern-aligned tiles) is modelled");
  detail::require(f.lbo_mode == 0, "lbo_mode = 1 (absolute LBO) is not modelled");
  const uint32_t span = swizzle_span(f.layout);
  const uint32_t kbytes = k * elem_bytes;
  const uint32_t group = (row / 8) * f.sbo;
  if (f.layout == 0) return f.start + group + (row % 8) * 16 + (kbytes / 16) * f.lbo + kbytes % 16;
  detail::require(kbytes < span, "k = " + std::to_string(k) + " runs past the " +
                                     std::to_string(span) + "-byte swizzle row (LBO is unused)");
  const uint32_t addr = f.start + group + (row % 8) * span + kbytes;
  const uint32_t chunk_mask = span / 16 - 1;
  return addr ^ (((addr >> 7) & chunk_mask) << 4);
}

// Shared-memory byte address of element (mn, k) of an MN-major operand described by `d` (A's M or
// B's N contiguous: the transpose bit of the instruction descriptor set), elements of `elem_bytes`
// bytes, swizzled layouts only. "Major-ness supported by Strides" and "Shared Memory Descriptor":
// a swizzle atom is 8 K rows of `span` bytes along MN, stored contiguously; the leading-dimension
// byte offset (LBO) is the stride from one atom's span of MN to the next ("from the first
// swizzle-byte-size / 16 rows to the next", rows of 16 bytes), the stride-dimension byte offset
// (SBO) the stride between groups of 8 along K. The swizzle then XORs address bits 4 ..
// 4 + log2(span / 16) - 1 with bits 7 and up, as for K-major. Base offset 0 and relative LBO
// only, as kmajor_element_address.
inline uint32_t mnmajor_element_address(SmemDesc desc, uint32_t mn, uint32_t k,
                                        uint32_t elem_bytes) {
  const SmemFields f = decode(desc);
  detail::require(f.base_offset == 0, "base_offset = " + std::to_string(f.base_offset) +
                                          ": only 0 (pattern-aligned tiles) is modelled");
  detail::require(f.lbo_mode == 0, "lbo_mode = 1 (absolute LBO) is not modelled");
  detail::require(f.layout != 0, "an MN-major operand is modelled in swizzled layouts only");
  const uint32_t span = swizzle_span(f.layout);
  const uint32_t mn_bytes = mn * elem_bytes;
  const uint32_t addr =
      f.start + (mn_bytes / span) * f.lbo + (k / 8) * f.sbo + (k % 8) * span + mn_bytes % span;
  const uint32_t chunk_mask = span / 16 - 1;
  return addr ^ (((addr >> 7) & chunk_mask) << 4);
}

// A Tensor Memory cell: lane (row of TMEM, 0..127) and 32-bit column (0..511).
struct TmemCell {
  uint32_t lane = 0;
  uint32_t column = 0;
  friend bool operator==(const TmemCell&, const TmemCell&) = default;
};

inline TmemCell cell_of(uint32_t taddr) {
  return {taddr >> 16, taddr & 0xFFFFu};
}

// "Data Path Layout Organization", Layout D (cta_group::1, M = 128): row i of D is lane i of
// Tensor Memory, and with a 32-bit (f32) D column n is column n after the address's column.
// Occupies all 128 lanes, so `d_tmem` names lane 0.
inline TmemCell accumulator_cell(uint32_t d_tmem, uint32_t m, uint32_t n_dim, uint32_t row,
                                 uint32_t n) {
  const TmemCell base = cell_of(d_tmem);
  detail::require(m == 128, "M = " + std::to_string(m) + ": only Layout D (M = 128) is modelled");
  detail::require(base.lane == 0,
                  "an M = 128 accumulator starts at lane 0, not lane " + std::to_string(base.lane));
  detail::require(base.column + n_dim <= 512, "the accumulator runs past column 511");
  detail::require(row < m && n < n_dim, "element (" + std::to_string(row) + ", " +
                                            std::to_string(n) + ") is outside " +
                                            std::to_string(m) + " x " + std::to_string(n_dim));
  return {row, base.column + n};
}

// A row of a CTA pair's operand or accumulator: which CTA of the pair (its rank in the cluster)
// holds it, and its row there.
struct PairRow {
  uint32_t cta = 0;
  uint32_t row = 0;
  friend bool operator==(const PairRow&, const PairRow&) = default;
};

// "Matrix Shape" and the cta_group::2 operand split: an M = 256 MMA reads A rows 0 .. 127 from
// CTA 0's shared memory and 128 .. 255 from CTA 1's, B rows (N) 0 .. N / 2 - 1 from CTA 0's and
// the rest from CTA 1's, each through the same descriptor (the same shared offsets in both CTAs).
inline PairRow pair_a_row(uint32_t m, uint32_t row) {
  detail::require(m == 256, "M = " + std::to_string(m) + ": only the M = 256 pair is modelled");
  detail::require(row < m, "A row " + std::to_string(row) + " is outside M = 256");
  return {row / 128, row % 128};
}
inline PairRow pair_b_row(uint32_t n_dim, uint32_t n) {
  detail::require(n_dim % 32 == 0 && n_dim >= 32 && n_dim <= 256,
                  "N = " + std::to_string(n_dim) + ": the pair splits N = 32 .. 256 in halves");
  detail::require(n < n_dim,
                  "B row " + std::to_string(n) + " is outside N = " + std::to_string(n_dim));
  return {n / (n_dim / 2), n % (n_dim / 2)};
}

// "Data Path Layout Organization", Layout A (cta_group::2, M = 256): each CTA of the pair holds
// its 128 rows of D in its own Tensor Memory, row i of the pair in CTA i / 128, lane i % 128,
// column n after the address's column (the same address in both CTAs, from the pair's
// tcgen05.alloc.cta_group::2). A CTA reads its rows as Layout D's (accumulator_cell).
struct PairCell {
  uint32_t cta = 0;
  TmemCell cell;
  friend bool operator==(const PairCell&, const PairCell&) = default;
};
inline PairCell pair_accumulator_cell(uint32_t d_tmem, uint32_t m, uint32_t n_dim, uint32_t row,
                                      uint32_t n) {
  const PairRow r = pair_a_row(m, row);
  return {r.cta, accumulator_cell(d_tmem, 128, n_dim, r.row, n)};
}

// "Tensor Memory: Access restrictions": warp w of a warpgroup reaches lanes 32 (w % 4) ..
// 32 (w % 4) + 31 only. "Matrix fragments for shape .32x32b": a warp's tcgen05.ld .32x32b.xN at
// `taddr` reads 32 lanes from taddr's lane and N consecutive 32-bit columns from its column;
// thread l receives lane taddr.lane + l, register r holding column taddr.column + r.
inline TmemCell ld_32x32b_cell(uint32_t warp, uint32_t taddr, uint32_t num, uint32_t thread_lane,
                               uint32_t reg) {
  const TmemCell base = cell_of(taddr);
  detail::require(num >= 1 && num <= 128 && (num & (num - 1)) == 0,
                  ".x" + std::to_string(num) + ": .32x32b takes .x1 .. .x128 (powers of two)");
  detail::require(base.lane == 32 * (warp % 4),
                  "warp " + std::to_string(warp) + " reaches lanes " +
                      std::to_string(32 * (warp % 4)) + "-" + std::to_string(32 * (warp % 4) + 31) +
                      ", the load names lane " + std::to_string(base.lane));
  detail::require(base.column + num <= 512, "the load runs past column 511");
  detail::require(thread_lane < 32 && reg < num, "thread lane " + std::to_string(thread_lane) +
                                                     ", register " + std::to_string(reg) +
                                                     " is outside the fragment");
  return {base.lane + thread_lane, base.column + reg};
}

// "Matrix fragments for shape .32x32b" holds for tcgen05.st as for tcgen05.ld (and the same
// access restriction): thread l's register r goes to lane taddr.lane + l, column
// taddr.column + r.
inline TmemCell st_32x32b_cell(uint32_t warp, uint32_t taddr, uint32_t num, uint32_t thread_lane,
                               uint32_t reg) {
  return ld_32x32b_cell(warp, taddr, num, thread_lane, reg);
}

}  // namespace hexel::tcgen05::model
