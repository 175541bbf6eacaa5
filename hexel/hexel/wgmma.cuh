// wgmma: Hopper warpgroup matrix multiply-accumulate (PTX ISA, "Asynchronous Warpgroup Level
// Matrix Multiply-Accumulate Instructions: wgmma.mma_async", "wgmma.fence", "wgmma.commit_group",
// "wgmma.wait_group"). sm_90a only. Every function here is executed by all 128 threads of a
// warpgroup (4 consecutive warps starting at a warp index divisible by 4).
//
// Accumulator layout (m64nN, f32): thread t = 32*w + l holds N/2 floats; for n-block j (8
// columns), d[4j+0], d[4j+1] are row 16w + l/4, columns 8j + 2(l%4) + {0,1}; d[4j+2], d[4j+3]
// the same columns of row 16w + l/4 + 8.
#pragma once
#include "hexel/config.cuh"
#include "hexel/wgmma_desc.cuh"

namespace hexel::wgmma {

// Operand element types. 16-bit types use K = 16 per instruction, fp8 types K = 32.
enum class AbType { BF16, F16, E4M3, E5M2 };
// Operand majorness in shared memory; fp8 operands must be K-major.
enum class Major { K = 0, MN = 1 };

template <AbType T>
inline constexpr int k_per_mma = (T == AbType::BF16 || T == AbType::F16) ? 16 : 32;

#if defined(__CUDACC__)

// Orders prior register writes (accumulators, A fragments) before the next wgmma.
// PTX: wgmma.fence.
HEXEL_DEVICE void fence() {
  asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
}

// Closes the group of wgmma issued since the last commit. PTX: wgmma.commit_group.
HEXEL_DEVICE void commit_group() {
  asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
}

// Waits until at most N committed groups are pending; only then may their accumulators be read.
// PTX: wgmma.wait_group.
template <int N>
HEXEL_DEVICE void wait_group() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}

// wait_group<N> issued only once x and y are computed. ptxas schedules a wait as early as its
// block allows (the instruction reads no register), so arithmetic written between two waits to
// overlap a group in flight can end up after the second one: FlashAttention's softmax of block b
// between the wait for its S = Q·Kᵀ and the wait for block b - 1's P·V. Here the wait is the
// body of a loop whose trip count depends on x and y (1, or 2 when either holds the bit pattern
// 0x7f800001, a signalling NaN that no arithmetic instruction returns: waiting twice would be
// harmless), so it cannot move above their computation.
// PTX: wgmma.wait_group.
template <int N>
HEXEL_DEVICE void wait_group_after(float x, float y) {
  const int n = 1 + ((__float_as_uint(x) == 0x7f800001u) | (__float_as_uint(y) == 0x7f800001u));
#pragma unroll 1
  for (int i = 0; i < n; ++i) wait_group<N>();
}

// Pins accumulator registers: keeps the compiler from moving their reads or writes across an
// in-flight wgmma (an empty asm that claims to read and write them).
template <int R>
HEXEL_DEVICE void fence_operand(float (&d)[R]) {
#pragma unroll
  for (int i = 0; i < R; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// clang-format off
// Accumulator operand lists: block k (k = N/8) covers 4k f32 registers. SS forms number the
// accumulators from %3 (after a-desc, b-desc, scale-d), RS forms from %6 (after 4 A registers,
// b-desc, scale-d).
#define HEXEL_WGMMA_ACC_SS_1 "%3, %4, %5, %6"
#define HEXEL_WGMMA_ACC_SS_2 HEXEL_WGMMA_ACC_SS_1 ", %7, %8, %9, %10"
#define HEXEL_WGMMA_ACC_SS_3 HEXEL_WGMMA_ACC_SS_2 ", %11, %12, %13, %14"
#define HEXEL_WGMMA_ACC_SS_4 HEXEL_WGMMA_ACC_SS_3 ", %15, %16, %17, %18"
#define HEXEL_WGMMA_ACC_SS_5 HEXEL_WGMMA_ACC_SS_4 ", %19, %20, %21, %22"
#define HEXEL_WGMMA_ACC_SS_6 HEXEL_WGMMA_ACC_SS_5 ", %23, %24, %25, %26"
#define HEXEL_WGMMA_ACC_SS_7 HEXEL_WGMMA_ACC_SS_6 ", %27, %28, %29, %30"
#define HEXEL_WGMMA_ACC_SS_8 HEXEL_WGMMA_ACC_SS_7 ", %31, %32, %33, %34"
#define HEXEL_WGMMA_ACC_SS_9 HEXEL_WGMMA_ACC_SS_8 ", %35, %36, %37, %38"
#define HEXEL_WGMMA_ACC_SS_10 HEXEL_WGMMA_ACC_SS_9 ", %39, %40, %41, %42"
#define HEXEL_WGMMA_ACC_SS_11 HEXEL_WGMMA_ACC_SS_10 ", %43, %44, %45, %46"
#define HEXEL_WGMMA_ACC_SS_12 HEXEL_WGMMA_ACC_SS_11 ", %47, %48, %49, %50"
#define HEXEL_WGMMA_ACC_SS_13 HEXEL_WGMMA_ACC_SS_12 ", %51, %52, %53, %54"
#define HEXEL_WGMMA_ACC_SS_14 HEXEL_WGMMA_ACC_SS_13 ", %55, %56, %57, %58"
#define HEXEL_WGMMA_ACC_SS_15 HEXEL_WGMMA_ACC_SS_14 ", %59, %60, %61, %62"
#define HEXEL_WGMMA_ACC_SS_16 HEXEL_WGMMA_ACC_SS_15 ", %63, %64, %65, %66"
#define HEXEL_WGMMA_ACC_SS_17 HEXEL_WGMMA_ACC_SS_16 ", %67, %68, %69, %70"
#define HEXEL_WGMMA_ACC_SS_18 HEXEL_WGMMA_ACC_SS_17 ", %71, %72, %73, %74"
#define HEXEL_WGMMA_ACC_SS_19 HEXEL_WGMMA_ACC_SS_18 ", %75, %76, %77, %78"
#define HEXEL_WGMMA_ACC_SS_20 HEXEL_WGMMA_ACC_SS_19 ", %79, %80, %81, %82"
#define HEXEL_WGMMA_ACC_SS_21 HEXEL_WGMMA_ACC_SS_20 ", %83, %84, %85, %86"
#define HEXEL_WGMMA_ACC_SS_22 HEXEL_WGMMA_ACC_SS_21 ", %87, %88, %89, %90"
#define HEXEL_WGMMA_ACC_SS_23 HEXEL_WGMMA_ACC_SS_22 ", %91, %92, %93, %94"
#define HEXEL_WGMMA_ACC_SS_24 HEXEL_WGMMA_ACC_SS_23 ", %95, %96, %97, %98"
#define HEXEL_WGMMA_ACC_SS_25 HEXEL_WGMMA_ACC_SS_24 ", %99, %100, %101, %102"
#define HEXEL_WGMMA_ACC_SS_26 HEXEL_WGMMA_ACC_SS_25 ", %103, %104, %105, %106"
#define HEXEL_WGMMA_ACC_SS_27 HEXEL_WGMMA_ACC_SS_26 ", %107, %108, %109, %110"
#define HEXEL_WGMMA_ACC_SS_28 HEXEL_WGMMA_ACC_SS_27 ", %111, %112, %113, %114"
#define HEXEL_WGMMA_ACC_SS_29 HEXEL_WGMMA_ACC_SS_28 ", %115, %116, %117, %118"
#define HEXEL_WGMMA_ACC_SS_30 HEXEL_WGMMA_ACC_SS_29 ", %119, %120, %121, %122"
#define HEXEL_WGMMA_ACC_SS_31 HEXEL_WGMMA_ACC_SS_30 ", %123, %124, %125, %126"
#define HEXEL_WGMMA_ACC_SS_32 HEXEL_WGMMA_ACC_SS_31 ", %127, %128, %129, %130"
#define HEXEL_WGMMA_ACC_RS_1 "%6, %7, %8, %9"
#define HEXEL_WGMMA_ACC_RS_2 HEXEL_WGMMA_ACC_RS_1 ", %10, %11, %12, %13"
#define HEXEL_WGMMA_ACC_RS_3 HEXEL_WGMMA_ACC_RS_2 ", %14, %15, %16, %17"
#define HEXEL_WGMMA_ACC_RS_4 HEXEL_WGMMA_ACC_RS_3 ", %18, %19, %20, %21"
#define HEXEL_WGMMA_ACC_RS_5 HEXEL_WGMMA_ACC_RS_4 ", %22, %23, %24, %25"
#define HEXEL_WGMMA_ACC_RS_6 HEXEL_WGMMA_ACC_RS_5 ", %26, %27, %28, %29"
#define HEXEL_WGMMA_ACC_RS_7 HEXEL_WGMMA_ACC_RS_6 ", %30, %31, %32, %33"
#define HEXEL_WGMMA_ACC_RS_8 HEXEL_WGMMA_ACC_RS_7 ", %34, %35, %36, %37"
#define HEXEL_WGMMA_ACC_RS_9 HEXEL_WGMMA_ACC_RS_8 ", %38, %39, %40, %41"
#define HEXEL_WGMMA_ACC_RS_10 HEXEL_WGMMA_ACC_RS_9 ", %42, %43, %44, %45"
#define HEXEL_WGMMA_ACC_RS_11 HEXEL_WGMMA_ACC_RS_10 ", %46, %47, %48, %49"
#define HEXEL_WGMMA_ACC_RS_12 HEXEL_WGMMA_ACC_RS_11 ", %50, %51, %52, %53"
#define HEXEL_WGMMA_ACC_RS_13 HEXEL_WGMMA_ACC_RS_12 ", %54, %55, %56, %57"
#define HEXEL_WGMMA_ACC_RS_14 HEXEL_WGMMA_ACC_RS_13 ", %58, %59, %60, %61"
#define HEXEL_WGMMA_ACC_RS_15 HEXEL_WGMMA_ACC_RS_14 ", %62, %63, %64, %65"
#define HEXEL_WGMMA_ACC_RS_16 HEXEL_WGMMA_ACC_RS_15 ", %66, %67, %68, %69"
#define HEXEL_WGMMA_ACC_RS_17 HEXEL_WGMMA_ACC_RS_16 ", %70, %71, %72, %73"
#define HEXEL_WGMMA_ACC_RS_18 HEXEL_WGMMA_ACC_RS_17 ", %74, %75, %76, %77"
#define HEXEL_WGMMA_ACC_RS_19 HEXEL_WGMMA_ACC_RS_18 ", %78, %79, %80, %81"
#define HEXEL_WGMMA_ACC_RS_20 HEXEL_WGMMA_ACC_RS_19 ", %82, %83, %84, %85"
#define HEXEL_WGMMA_ACC_RS_21 HEXEL_WGMMA_ACC_RS_20 ", %86, %87, %88, %89"
#define HEXEL_WGMMA_ACC_RS_22 HEXEL_WGMMA_ACC_RS_21 ", %90, %91, %92, %93"
#define HEXEL_WGMMA_ACC_RS_23 HEXEL_WGMMA_ACC_RS_22 ", %94, %95, %96, %97"
#define HEXEL_WGMMA_ACC_RS_24 HEXEL_WGMMA_ACC_RS_23 ", %98, %99, %100, %101"
#define HEXEL_WGMMA_ACC_RS_25 HEXEL_WGMMA_ACC_RS_24 ", %102, %103, %104, %105"
#define HEXEL_WGMMA_ACC_RS_26 HEXEL_WGMMA_ACC_RS_25 ", %106, %107, %108, %109"
#define HEXEL_WGMMA_ACC_RS_27 HEXEL_WGMMA_ACC_RS_26 ", %110, %111, %112, %113"
#define HEXEL_WGMMA_ACC_RS_28 HEXEL_WGMMA_ACC_RS_27 ", %114, %115, %116, %117"
#define HEXEL_WGMMA_ACC_RS_29 HEXEL_WGMMA_ACC_RS_28 ", %118, %119, %120, %121"
#define HEXEL_WGMMA_ACC_RS_30 HEXEL_WGMMA_ACC_RS_29 ", %122, %123, %124, %125"
#define HEXEL_WGMMA_ACC_RS_31 HEXEL_WGMMA_ACC_RS_30 ", %126, %127, %128, %129"
#define HEXEL_WGMMA_ACC_RS_32 HEXEL_WGMMA_ACC_RS_31 ", %130, %131, %132, %133"
#define HEXEL_WGMMA_F4(i) "+f"(d[4 * i]), "+f"(d[4 * i + 1]), "+f"(d[4 * i + 2]), "+f"(d[4 * i + 3])
#define HEXEL_WGMMA_CONS_1 HEXEL_WGMMA_F4(0)
#define HEXEL_WGMMA_CONS_2 HEXEL_WGMMA_CONS_1, HEXEL_WGMMA_F4(1)
#define HEXEL_WGMMA_CONS_3 HEXEL_WGMMA_CONS_2, HEXEL_WGMMA_F4(2)
#define HEXEL_WGMMA_CONS_4 HEXEL_WGMMA_CONS_3, HEXEL_WGMMA_F4(3)
#define HEXEL_WGMMA_CONS_5 HEXEL_WGMMA_CONS_4, HEXEL_WGMMA_F4(4)
#define HEXEL_WGMMA_CONS_6 HEXEL_WGMMA_CONS_5, HEXEL_WGMMA_F4(5)
#define HEXEL_WGMMA_CONS_7 HEXEL_WGMMA_CONS_6, HEXEL_WGMMA_F4(6)
#define HEXEL_WGMMA_CONS_8 HEXEL_WGMMA_CONS_7, HEXEL_WGMMA_F4(7)
#define HEXEL_WGMMA_CONS_9 HEXEL_WGMMA_CONS_8, HEXEL_WGMMA_F4(8)
#define HEXEL_WGMMA_CONS_10 HEXEL_WGMMA_CONS_9, HEXEL_WGMMA_F4(9)
#define HEXEL_WGMMA_CONS_11 HEXEL_WGMMA_CONS_10, HEXEL_WGMMA_F4(10)
#define HEXEL_WGMMA_CONS_12 HEXEL_WGMMA_CONS_11, HEXEL_WGMMA_F4(11)
#define HEXEL_WGMMA_CONS_13 HEXEL_WGMMA_CONS_12, HEXEL_WGMMA_F4(12)
#define HEXEL_WGMMA_CONS_14 HEXEL_WGMMA_CONS_13, HEXEL_WGMMA_F4(13)
#define HEXEL_WGMMA_CONS_15 HEXEL_WGMMA_CONS_14, HEXEL_WGMMA_F4(14)
#define HEXEL_WGMMA_CONS_16 HEXEL_WGMMA_CONS_15, HEXEL_WGMMA_F4(15)
#define HEXEL_WGMMA_CONS_17 HEXEL_WGMMA_CONS_16, HEXEL_WGMMA_F4(16)
#define HEXEL_WGMMA_CONS_18 HEXEL_WGMMA_CONS_17, HEXEL_WGMMA_F4(17)
#define HEXEL_WGMMA_CONS_19 HEXEL_WGMMA_CONS_18, HEXEL_WGMMA_F4(18)
#define HEXEL_WGMMA_CONS_20 HEXEL_WGMMA_CONS_19, HEXEL_WGMMA_F4(19)
#define HEXEL_WGMMA_CONS_21 HEXEL_WGMMA_CONS_20, HEXEL_WGMMA_F4(20)
#define HEXEL_WGMMA_CONS_22 HEXEL_WGMMA_CONS_21, HEXEL_WGMMA_F4(21)
#define HEXEL_WGMMA_CONS_23 HEXEL_WGMMA_CONS_22, HEXEL_WGMMA_F4(22)
#define HEXEL_WGMMA_CONS_24 HEXEL_WGMMA_CONS_23, HEXEL_WGMMA_F4(23)
#define HEXEL_WGMMA_CONS_25 HEXEL_WGMMA_CONS_24, HEXEL_WGMMA_F4(24)
#define HEXEL_WGMMA_CONS_26 HEXEL_WGMMA_CONS_25, HEXEL_WGMMA_F4(25)
#define HEXEL_WGMMA_CONS_27 HEXEL_WGMMA_CONS_26, HEXEL_WGMMA_F4(26)
#define HEXEL_WGMMA_CONS_28 HEXEL_WGMMA_CONS_27, HEXEL_WGMMA_F4(27)
#define HEXEL_WGMMA_CONS_29 HEXEL_WGMMA_CONS_28, HEXEL_WGMMA_F4(28)
#define HEXEL_WGMMA_CONS_30 HEXEL_WGMMA_CONS_29, HEXEL_WGMMA_F4(29)
#define HEXEL_WGMMA_CONS_31 HEXEL_WGMMA_CONS_30, HEXEL_WGMMA_F4(30)
#define HEXEL_WGMMA_CONS_32 HEXEL_WGMMA_CONS_31, HEXEL_WGMMA_F4(31)
#define HEXEL_WGMMA_FOR_EACH_N(X) \
  X(8, 1) X(16, 2) X(24, 3) X(32, 4) X(40, 5) X(48, 6) X(56, 7) X(64, 8) \
  X(72, 9) X(80, 10) X(88, 11) X(96, 12) X(104, 13) X(112, 14) X(120, 15) X(128, 16) \
  X(136, 17) X(144, 18) X(152, 19) X(160, 20) X(168, 21) X(176, 22) X(184, 23) X(192, 24) \
  X(200, 25) X(208, 26) X(216, 27) X(224, 28) X(232, 29) X(240, 30) X(248, 31) X(256, 32)
#define HEXEL_WGMMA_TYPES_BF16 ".f32.bf16.bf16"
#define HEXEL_WGMMA_TYPES_F16 ".f32.f16.f16"
#define HEXEL_WGMMA_TYPES_E4M3 ".f32.e4m3.e4m3"
#define HEXEL_WGMMA_TYPES_E5M2 ".f32.e5m2.e5m2"

// One SS instruction: A and B from shared-memory descriptors. TAIL holds the immediates after
// scale-d (scale-a, scale-b, and for 16-bit types trans-a, trans-b).
#define HEXEL_WGMMA_SS_ASM(n, k, KDIM, TY, TAIL)                                              \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %2, 0;\n"                                   \
               "wgmma.mma_async.sync.aligned.m64n" #n KDIM HEXEL_WGMMA_TYPES_##TY              \
               " {" HEXEL_WGMMA_ACC_SS_##k "}, %0, %1, p" TAIL ";\n}"                           \
               : "+l"(a), "+l"(b), "+r"(scale_d), HEXEL_WGMMA_CONS_##k                          \
               :                                                                                \
               : "memory")

// One RS instruction: A from four registers per thread, B from a descriptor.
#define HEXEL_WGMMA_RS_ASM(n, k, KDIM, TY, TAIL)                                              \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %5, 0;\n"                                   \
               "wgmma.mma_async.sync.aligned.m64n" #n KDIM HEXEL_WGMMA_TYPES_##TY              \
               " {" HEXEL_WGMMA_ACC_RS_##k "}, {%0, %1, %2, %3}, %4, p" TAIL ";\n}"             \
               : "+r"(a0), "+r"(a1), "+r"(a2), "+r"(a3), "+l"(b), "+r"(scale_d),                \
                 HEXEL_WGMMA_CONS_##k                                                           \
               :                                                                                \
               : "memory")

// 16-bit types take the two transpose immediates; fp8 takes none.
#define HEXEL_WGMMA_SS16(n, k, TY)                                             \
  if constexpr (!ta && !tb) HEXEL_WGMMA_SS_ASM(n, k, "k16", TY, ", 1, 1, 0, 0"); \
  if constexpr (!ta && tb) HEXEL_WGMMA_SS_ASM(n, k, "k16", TY, ", 1, 1, 0, 1");  \
  if constexpr (ta && !tb) HEXEL_WGMMA_SS_ASM(n, k, "k16", TY, ", 1, 1, 1, 0");  \
  if constexpr (ta && tb) HEXEL_WGMMA_SS_ASM(n, k, "k16", TY, ", 1, 1, 1, 1");

#define HEXEL_WGMMA_SS_CASE(n, k)                                                      \
  if constexpr (N == n) {                                                              \
    if constexpr (T == AbType::E4M3) HEXEL_WGMMA_SS_ASM(n, k, "k32", E4M3, ", 1, 1"); \
    if constexpr (T == AbType::E5M2) HEXEL_WGMMA_SS_ASM(n, k, "k32", E5M2, ", 1, 1"); \
    if constexpr (T == AbType::BF16) { HEXEL_WGMMA_SS16(n, k, BF16) }                 \
    if constexpr (T == AbType::F16) { HEXEL_WGMMA_SS16(n, k, F16) }                   \
  }

#define HEXEL_WGMMA_RS_CASE(n, k)                                                           \
  if constexpr (N == n) {                                                                   \
    if constexpr (T == AbType::E4M3) HEXEL_WGMMA_RS_ASM(n, k, "k32", E4M3, ", 1, 1");      \
    if constexpr (T == AbType::E5M2) HEXEL_WGMMA_RS_ASM(n, k, "k32", E5M2, ", 1, 1");      \
    if constexpr (T == AbType::BF16 && !tb) HEXEL_WGMMA_RS_ASM(n, k, "k16", BF16, ", 1, 1, 0"); \
    if constexpr (T == AbType::BF16 && tb) HEXEL_WGMMA_RS_ASM(n, k, "k16", BF16, ", 1, 1, 1");  \
    if constexpr (T == AbType::F16 && !tb) HEXEL_WGMMA_RS_ASM(n, k, "k16", F16, ", 1, 1, 0");   \
    if constexpr (T == AbType::F16 && tb) HEXEL_WGMMA_RS_ASM(n, k, "k16", F16, ", 1, 1, 1");    \
  }
// clang-format on

// D(64 x N, f32) (+)= A(64 x K) * B(K x N) with both operands in shared memory.
// `accumulate` false overwrites D (scale-d = 0). Issue between fence() and commit_group().
template <int N, AbType T = AbType::BF16, Major MajorA = Major::K, Major MajorB = Major::K>
HEXEL_DEVICE void mma_ss(float (&d)[N / 2], SmemDesc a_desc, SmemDesc b_desc, bool accumulate) {
  static_assert(N >= 8 && N <= 256 && N % 8 == 0, "wgmma N is 8..256 in steps of 8");
  static_assert(k_per_mma<T> == 16 || (MajorA == Major::K && MajorB == Major::K),
                "fp8 wgmma operands must be K-major");
  constexpr bool ta = MajorA == Major::MN;
  constexpr bool tb = MajorB == Major::MN;
  uint64_t a = a_desc.bits;
  uint64_t b = b_desc.bits;
  uint32_t scale_d = accumulate ? 1u : 0u;
  HEXEL_WGMMA_FOR_EACH_N(HEXEL_WGMMA_SS_CASE)
}

// Same with A from registers: a[0..3] hold the thread's A fragment (K-major; for 16-bit types
// a[0] = rows l/4, k 2(l%4)+{0,1}; a[1] = row +8; a[2] = k +8; a[3] = both; for fp8 4 elements
// per register, k 4(l%4)+{0..3} and +16). Rows are offset by 16 x (warp % 4).
template <int N, AbType T = AbType::BF16, Major MajorB = Major::K>
HEXEL_DEVICE void mma_rs(float (&d)[N / 2], const uint32_t (&a)[4], SmemDesc b_desc,
                         bool accumulate) {
  static_assert(N >= 8 && N <= 256 && N % 8 == 0, "wgmma N is 8..256 in steps of 8");
  static_assert(k_per_mma<T> == 16 || MajorB == Major::K, "fp8 wgmma operands must be K-major");
  constexpr bool tb = MajorB == Major::MN;
  uint32_t a0 = a[0], a1 = a[1], a2 = a[2], a3 = a[3];
  uint64_t b = b_desc.bits;
  uint32_t scale_d = accumulate ? 1u : 0u;
  HEXEL_WGMMA_FOR_EACH_N(HEXEL_WGMMA_RS_CASE)
}

#endif  // __CUDACC__

}  // namespace hexel::wgmma
