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

// Two f32 as one f16x2 word, `lo` in the low half, each rounded to nearest even and saturated: a
// magnitude beyond 65504 (infinity included) becomes ±65504, NaN a NaN. PTX: cvt
// (.rn.satfinite.f16x2.f32; PTX ISA 8.1).
HEXEL_DEVICE uint32_t pack_f16x2_satfinite(float lo, float hi) {
  uint32_t r;
  asm("cvt.rn.satfinite.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
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
