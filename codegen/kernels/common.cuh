#pragma once
// What every Telos kernel template shares: bf16 as raw bits (so the templates need no toolkit
// header under NVRTC), 16-byte vector loads, warp reductions with a fixed order.
//
// Conventions of every kernel in codegen/kernels/:
//  - every dimension is a template parameter; only the number of rows (tokens) comes from the grid;
//  - every kernel parameter is a pointer (the launch program names them; docs/artifact.md);
//  - a reduction's order depends on the shape and the absolute position only, never on the
//    number of rows in the batch, so a row's result is the same in every bucket.
#include "hexel/math.cuh"
#include "hexel/mma.cuh"
#include "hexel/sync.cuh"

namespace telos_kernels {

using bf16 = unsigned short;

// Programmatic dependent launch (hexel/sync.cuh, griddepcontrol). The executor launches every
// kernel of a step after the first with programmatic stream serialization, so a kernel's blocks may
// be scheduled while its predecessor still runs; every kernel calls pdl_entry first, before
// touching memory: it lets its own successor be scheduled (once all of this grid's blocks have
// called it), then waits until the predecessor has completed and its writes are visible. Launched
// without that attribute, both are no-ops. A kernel that reads weights first calls the two halves
// itself: hexel::launch_dependents(), its weight loads, then hexel::grid_dependency_wait() before
// anything a previous kernel wrote.
__device__ __forceinline__ void pdl_entry() {
  hexel::launch_dependents();
  hexel::grid_dependency_wait();
}

// Round to nearest even; NaN stays NaN.
__device__ __forceinline__ bf16 f32_to_bf16(float f) {
  unsigned u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fc0;
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<bf16>(u >> 16);
}

// Two f32 as one bf16x2 register (hexel/math.cuh), packed everywhere a kernel writes bf16 pairs.
using hexel::pack_bf16x2;

// The KV cache's element format, a template argument of the kernels that append to the pages and
// of those that read them (docs/fp8.md, "FP8 KV cache"). Enumerators, not static constexpr
// variables (NVRTC emits those as globals). KvBf16: bf16 elements. KvE4m3: one e4m3 byte an
// element with the layer's K and V scales; the append stores q = e4m3(x / scale) (the f32
// quotient, rounded to nearest even and saturated at ±448: support/dtype.hpp's f32_to_e4m3, the
// CPU reference engine's). kBytes: bytes an element.
// A reader's MMAs (attention.cuh) take the format's operand type: bf16 for a bf16 cache; f16 for
// an e4m3 cache, whose elements are f16 values as they are (one conversion a pair of bytes, where
// a bf16 operand took four), the scales applied outside the MMAs: K's to Q before its rounding
// (k_scale), V's to the output sums (v_scale). `pack` rounds Q and the softmax weights to the
// operand type (f16 saturated at ±65504, so that a Q beyond f16's range stays finite), `mma` is the
// m16n8k16 of that type.
struct KvBf16 {
  enum : unsigned { kBytes = 2 };
  using Elem = bf16;
  using Piece8 = uint4;  // eight elements
  __device__ __forceinline__ static Elem encode(float x, int) { return f32_to_bf16(x); }
  __device__ __forceinline__ static float k_scale() { return 1.f; }
  __device__ __forceinline__ static float v_scale() { return 1.f; }
  __device__ __forceinline__ static unsigned pack(float lo, float hi) {
    return pack_bf16x2(lo, hi);
  }
  __device__ __forceinline__ static void mma(float (&d)[4], const unsigned (&a)[4], unsigned b0,
                                             unsigned b1) {
    hexel::mma_m16n8k16_bf16(d, a, b0, b1);
  }
  __device__ __forceinline__ static uint4 k_operand(uint4 p) { return p; }
  // Element n of two V rows' words (a, b) as one operand word, a's in the low half: element n is
  // half n % 2 of word n / 2 (byte permute: CUDA __byte_perm).
  __device__ __forceinline__ static unsigned v_pair(const unsigned* a, const unsigned* b, int n) {
    return __byte_perm(a[n / 2], b[n / 2], n % 2 ? 0x7632u : 0x5410u);
  }
};
template <float K_SCALE, float V_SCALE>
struct KvE4m3 {
  enum : unsigned { kBytes = 1 };
  using Elem = unsigned char;
  using Piece8 = uint2;
  // kv: 0 for K, 1 for V.
  __device__ __forceinline__ static float scale(int kv) { return kv == 0 ? K_SCALE : V_SCALE; }
  __device__ __forceinline__ static Elem encode(float x, int kv) {
    return static_cast<Elem>(hexel::cvt_e4m3x2_f32(__fdiv_rn(x, scale(kv)), 0.f));
  }
  __device__ __forceinline__ static float k_scale() { return K_SCALE; }
  __device__ __forceinline__ static float v_scale() { return V_SCALE; }
  __device__ __forceinline__ static unsigned pack(float lo, float hi) {
    return hexel::pack_f16x2_satfinite(lo, hi);
  }
  __device__ __forceinline__ static void mma(float (&d)[4], const unsigned (&a)[4], unsigned b0,
                                             unsigned b1) {
    hexel::mma_m16n8k16_f16(d, a, b0, b1);
  }
  // Eight K elements as eight f16 operands, in the order a bf16 cache's 16-byte piece holds them.
  __device__ __forceinline__ static uint4 k_operand(uint2 p) {
    return make_uint4(hexel::cvt_f16x2_e4m3x2(p.x), hexel::cvt_f16x2_e4m3x2(p.x >> 16),
                      hexel::cvt_f16x2_e4m3x2(p.y), hexel::cvt_f16x2_e4m3x2(p.y >> 16));
  }
  // Element n of two V rows' words (a, b) as one f16x2 operand word, a's in the low half: element
  // n is byte n % 4 of word n / 4. The bytes of elements n and n ^ 1 of both rows are interleaved
  // first (a's, b's, a's, b's), so that each 16-bit half converts to an operand word as it is: one
  // byte permute for two elements' words.
  __device__ __forceinline__ static unsigned v_pair(const unsigned* a, const unsigned* b, int n) {
    const unsigned x = __byte_perm(a[n / 4], b[n / 4], n % 4 < 2 ? 0x5140u : 0x7362u);
    return hexel::cvt_f16x2_e4m3x2(x >> (16 * (n % 2)));
  }
};

// Eight bf16 in one 16-byte load. Weights are read through the non-coherent path: they never
// change while a kernel runs.
__device__ __forceinline__ uint4 load8_nc(const bf16* p) {
  return __ldg(reinterpret_cast<const uint4*>(p));
}
__device__ __forceinline__ uint4 load8(const bf16* p) { return *reinterpret_cast<const uint4*>(p); }

__device__ __forceinline__ void unpack8(uint4 v, float (&f)[8]) {
  const unsigned w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    f[2 * i] = __uint_as_float(w[i] << 16);
    f[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
  }
}

__device__ __forceinline__ float dot8(uint4 a, uint4 b) {
  float fa[8], fb[8];
  unpack8(a, fa);
  unpack8(b, fb);
  float s = 0.f;
#pragma unroll
  for (int i = 0; i < 8; ++i) s = fmaf(fa[i], fb[i], s);
  return s;
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Larger float, larger key (for non-NaN values; -0 below +0).
__device__ __forceinline__ unsigned order_key(float f) {
  const unsigned u = __float_as_uint(f);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

// Greedy sampling's candidate for logit `v` at vocabulary index `i` (gemm_small_f32cand reduces
// its tile's columns to one per token, sample its row's candidates): the value's key in the high
// word and ~i in the low word, so the largest candidate is the largest logit and, among equal
// logits, the lowest index. -0 counts as +0 (__fadd_rn(-0, +0) is +0), as a float comparison has
// it. 0, no candidate, for NaN and -inf, which a comparison with a running maximum that starts at
// -inf never picks.
__device__ __forceinline__ unsigned long long greedy_candidate(float v, int i) {
  return v > -__int_as_float(0x7f800000)
             ? (static_cast<unsigned long long>(order_key(__fadd_rn(v, 0.f))) << 32) |
                   static_cast<unsigned>(~i)
             : 0ull;
}
// The vocabulary index of a candidate that is not 0.
__device__ __forceinline__ int greedy_candidate_index(unsigned long long c) {
  return static_cast<int>(~static_cast<unsigned>(c));
}

__device__ __forceinline__ unsigned long long warp_max_u64(unsigned long long v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const unsigned long long w = __shfl_xor_sync(0xffffffffu, v, o);
    v = w > v ? w : v;
  }
  return v;
}

}  // namespace telos_kernels
