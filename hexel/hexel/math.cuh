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
