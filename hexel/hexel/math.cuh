// Conversions and special-function-unit approximations (PTX ISA, "Data Movement and Conversion
// Instructions: cvt"; "Floating-Point Instructions: ex2, rcp"). Thread scope, pure: no "memory"
// clobber and no volatile, so the compiler schedules them like arithmetic.
#pragma once
#include "hexel/config.cuh"

#if defined(__CUDACC__)
namespace hexel {

// Two f32 as one bf16x2 word, `lo` in the low half, each rounded to nearest even (NaN stays NaN).
// PTX: cvt (.rn.bf16x2.f32).
HEXEL_DEVICE uint32_t pack_bf16x2(float lo, float hi) {
  uint32_t r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}

// Two e4m3 (OCP E4M3: bias 7, no infinities) in the low 16 bits of `pair` as one f16x2 word, the
// low byte's value in the low half. Exact: every e4m3 value, subnormals included, is an f16.
// PTX: cvt (.rn.f16x2.e4m3x2; sm_89 and later).
HEXEL_DEVICE uint32_t cvt_f16x2_e4m3x2(uint32_t pair) {
  uint32_t r;
  asm("{\n.reg .b16 p;\ncvt.u16.u32 p, %1;\ncvt.rn.f16x2.e4m3x2 %0, p;\n}" : "=r"(r) : "r"(pair));
  return r;
}

// Bytes of `a` and `b` chosen by `sel` (PTX: prmt.b32, the default mode): result byte i is source
// byte sel[4i + 2 .. 4i] (bytes 0-3 of a, 4-7 of b), or, where bit 4i + 3 of sel is set, that
// byte's sign bit replicated over all eight bits. CUDA's __byte_perm documents the three low bits
// of a nibble only; the sign form is this wrapper's reason to exist.
HEXEL_DEVICE uint32_t prmt(uint32_t a, uint32_t b, uint32_t sel) {
  uint32_t r;
  asm("prmt.b32 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(sel));
  return r;
}

// Two bf16 each a · b + c, rounded once to nearest even, subnormals kept. PTX: fma (.rn.bf16x2).
HEXEL_DEVICE uint32_t fma_bf16x2(uint32_t a, uint32_t b, uint32_t c) {
  uint32_t r;
  asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(c));
  return r;
}

// Two e4m3 of `w` (HALF 0: bytes 0 and 1, HALF 1: bytes 2 and 3) as one bf16x2 word of their
// values times 2^-120, the lower byte's in the low half, by integer operations alone (no
// conversion unit): a byte's sign and its seven exponent and mantissa bits are placed where a
// bf16's go, so its exponent field reads with bias 127 instead of e4m3's 7 (a subnormal e4m3 as a
// subnormal bf16; exact either way), and the NaN codes (0x7f, 0xff) become NaN. fma_bf16x2 by
// 2^120 (times a scale) gives the values; cvt_f16x2_e4m3x2 is the conversion-unit form.
template <int HALF>
HEXEL_DEVICE uint32_t e4m3x2_as_bf16x2_scaled(uint32_t w) {
  static_assert(HALF == 0 || HALF == 1, "two bytes of four");
  const uint32_t v = prmt(w, 0, HALF ? 0x3424u : 0x1404u);  // each byte b as b << 8 of its half
  // A half whose seven bits are all ones carries into its sign bit: 0xffff there, a NaN.
  const uint32_t nan = prmt((v & 0x7f007f00u) + 0x01000100u, 0, 0xbb99u);
  return ((v >> 4) & 0x07f007f0u) | (v & 0x80008000u) | nan;
}

// Two f32 as two e4m3 in the low 16 bits, `lo` in the low byte, each rounded to nearest even and
// saturated: a magnitude beyond 448 (infinity included) becomes ±448, NaN a NaN.
// PTX: cvt (.rn.satfinite.e4m3x2.f32; sm_89 and later).
HEXEL_DEVICE uint32_t cvt_e4m3x2_f32(float lo, float hi) {
  uint32_t r;
  asm("{\n.reg .b16 p;\ncvt.rn.satfinite.e4m3x2.f32 p, %1, %2;\ncvt.u32.u16 %0, p;\n}"
      : "=r"(r)
      : "f"(hi), "f"(lo));
  return r;
}

// The f16 in the low 16 bits of `h` as an f32 (exact). PTX: cvt (.f32.f16).
HEXEL_DEVICE float cvt_f32_f16(uint32_t h) {
  float f;
  asm("{\n.reg .b16 p;\ncvt.u16.u32 p, %1;\ncvt.f32.f16 %0, p;\n}" : "=f"(f) : "r"(h));
  return f;
}

// 2^x on the special function unit, subnormals flushed: ex2(-inf) = +0, ex2(0) = 1, ex2(+inf) =
// +inf; relative error about 2^-22. PTX: ex2 (.approx.ftz.f32).
HEXEL_DEVICE float ex2_approx(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// 1 / x on the special function unit, subnormals flushed: rcp(inf) = 0; within 1 ulp.
// PTX: rcp (.approx.ftz.f32).
HEXEL_DEVICE float rcp_approx(float x) {
  float y;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// One f32 as bf16 bits, rounded to nearest even (NaN stays NaN): pack_bf16x2's rounding, for a
// thread that holds one value of a row. PTX: cvt (.rn.bf16.f32).
HEXEL_DEVICE uint16_t to_bf16(float f) {
  uint16_t r;
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(r) : "f"(f));
  return r;
}

}  // namespace hexel
#endif
