// tcgen05: Blackwell (sm_100a) Tensor Memory and the 5th-generation tensor core (PTX ISA,
// "TensorCore 5th Generation Family Instructions": tcgen05.alloc/dealloc/relinquish_alloc_permit,
// tcgen05.mma, tcgen05.commit, tcgen05.ld/st/wait, tcgen05.fence). Tensor Memory is 128 lanes x
// 512 columns of 32-bit cells per SM; an address is (lane << 16) | column. CtaGroup is 1 (one
// CTA) or 2 (the CTA pair of a cluster issuing together).
#pragma once
#include "hexel/config.cuh"
#include "hexel/tcgen05_desc.cuh"

#if defined(__CUDACC__)
namespace hexel::tcgen05 {

// Warp: allocates `ncols` columns (a power of two, 32..512) and writes the TMEM base address to
// the shared word at `dst`. Pass it on with fence_before_thread_sync -> barrier ->
// fence_after_thread_sync. PTX: tcgen05.alloc.
template <int CtaGroup = 1>
HEXEL_DEVICE void alloc(uint32_t dst, uint32_t ncols) {
  static_assert(CtaGroup == 1 || CtaGroup == 2, "cta_group is 1 or 2");
  if constexpr (CtaGroup == 1)
    asm volatile("tcgen05.alloc.cta_group::1.sync.aligned.shared::cta.b32 [%0], %1;" ::"r"(dst),
                 "r"(ncols)
                 : "memory");
  else
    asm volatile("tcgen05.alloc.cta_group::2.sync.aligned.shared::cta.b32 [%0], %1;" ::"r"(dst),
                 "r"(ncols)
                 : "memory");
}

// Warp: gives up the right to allocate again, so other CTAs on the SM may.
// PTX: tcgen05.relinquish_alloc_permit.
template <int CtaGroup = 1>
HEXEL_DEVICE void relinquish_alloc_permit() {
  if constexpr (CtaGroup == 1)
    asm volatile("tcgen05.relinquish_alloc_permit.cta_group::1.sync.aligned;" ::: "memory");
  else
    asm volatile("tcgen05.relinquish_alloc_permit.cta_group::2.sync.aligned;" ::: "memory");
}

// Warp: frees what alloc returned; required before the CTA exits. PTX: tcgen05.dealloc.
template <int CtaGroup = 1>
HEXEL_DEVICE void dealloc(uint32_t taddr, uint32_t ncols) {
  if constexpr (CtaGroup == 1)
    asm volatile("tcgen05.dealloc.cta_group::1.sync.aligned.b32 %0, %1;" ::"r"(taddr), "r"(ncols)
                 : "memory");
  else
    asm volatile("tcgen05.dealloc.cta_group::2.sync.aligned.b32 %0, %1;" ::"r"(taddr), "r"(ncols)
                 : "memory");
}

// Thread: D[tmem] (+)= A[smem] * B[smem], shape and types from `idesc`; the kind (f16 or
// f8f6f4) comes from the A type. Issued by one thread. PTX: tcgen05.mma.
template <Kind K, int CtaGroup = 1>
HEXEL_DEVICE void mma(uint32_t d_tmem, SmemDesc a, SmemDesc b, InstrDesc idesc, bool accumulate) {
  uint32_t acc = accumulate ? 1u : 0u;
#define HEXEL_TCGEN05_MMA(GROUP, KIND)                                                         \
  asm volatile(                                                                                \
      "{\n.reg .pred p;\nsetp.ne.b32 p, %4, 0;\n"                                              \
      "tcgen05.mma.cta_group::" GROUP ".kind::" KIND " [%0], %1, %2, %3, p;\n}" ::"r"(d_tmem), \
      "l"(a.bits), "l"(b.bits), "r"(idesc.bits), "r"(acc)                                      \
      : "memory")
  if constexpr (K == Kind::F16 && CtaGroup == 1) HEXEL_TCGEN05_MMA("1", "f16");
  if constexpr (K == Kind::F16 && CtaGroup == 2) HEXEL_TCGEN05_MMA("2", "f16");
  if constexpr (K == Kind::F8F6F4 && CtaGroup == 1) HEXEL_TCGEN05_MMA("1", "f8f6f4");
  if constexpr (K == Kind::F8F6F4 && CtaGroup == 2) HEXEL_TCGEN05_MMA("2", "f8f6f4");
#undef HEXEL_TCGEN05_MMA
}

// Same with A from Tensor Memory at `a_tmem`. PTX: tcgen05.mma with [a-tmem].
template <Kind K>
HEXEL_DEVICE void mma_ts(uint32_t d_tmem, uint32_t a_tmem, SmemDesc b, InstrDesc idesc,
                         bool accumulate) {
  uint32_t acc = accumulate ? 1u : 0u;
  if constexpr (K == Kind::F16)
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %4, 0;\n"
        "tcgen05.mma.cta_group::1.kind::f16 [%0], [%1], %2, %3, p;\n}" ::"r"(d_tmem),
        "r"(a_tmem), "l"(b.bits), "r"(idesc.bits), "r"(acc)
        : "memory");
  else
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %4, 0;\n"
        "tcgen05.mma.cta_group::1.kind::f8f6f4 [%0], [%1], %2, %3, p;\n}" ::"r"(d_tmem),
        "r"(a_tmem), "l"(b.bits), "r"(idesc.bits), "r"(acc)
        : "memory");
}

// Thread: the mbarrier at `bar` gets one arrival once every tcgen05 async op this thread issued
// before has completed. PTX: tcgen05.commit (.mbarrier::arrive::one).
template <int CtaGroup = 1>
HEXEL_DEVICE void commit(uint32_t bar) {
  if constexpr (CtaGroup == 1)
    asm volatile(
        "tcgen05.commit.cta_group::1.mbarrier::arrive::one.shared::cluster.b64 [%0];" ::"r"(bar)
        : "memory");
  else
    asm volatile(
        "tcgen05.commit.cta_group::2.mbarrier::arrive::one.shared::cluster.b64 [%0];" ::"r"(bar)
        : "memory");
}

// CTA pair: signals the barrier at the same offset in every CTA of `cta_mask`.
// PTX: tcgen05.commit with .multicast::cluster.
HEXEL_DEVICE void commit_multicast(uint32_t bar, uint16_t cta_mask) {
  asm volatile(
      "tcgen05.commit.cta_group::2.mbarrier::arrive::one.shared::cluster.multicast::cluster.b64"
      " [%0], %1;" ::"r"(bar),
      "h"(cta_mask)
      : "memory");
}

// Thread: order tcgen05 ops around a thread synchronisation (barrier, mbarrier wait).
// PTX: tcgen05.fence::before_thread_sync / ::after_thread_sync.
HEXEL_DEVICE void fence_before_thread_sync() {
  asm volatile("tcgen05.fence::before_thread_sync;" ::: "memory");
}
HEXEL_DEVICE void fence_after_thread_sync() {
  asm volatile("tcgen05.fence::after_thread_sync;" ::: "memory");
}

// clang-format off
// Register operand lists for tcgen05.ld/st .32x32b.xN: the TMEM address is %0, registers follow.
#define HEXEL_TMEM_REGS_1 "%1"
#define HEXEL_TMEM_REGS_2 "%1, %2"
#define HEXEL_TMEM_REGS_4 "%1, %2, %3, %4"
#define HEXEL_TMEM_REGS_8 "%1, %2, %3, %4, %5, %6, %7, %8"
#define HEXEL_TMEM_REGS_16 "%1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, " \
  "%13, %14, %15, %16"
#define HEXEL_TMEM_REGS_32 "%1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, " \
  "%13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, " \
  "%25, %26, %27, %28, %29, %30, %31, %32"
#define HEXEL_TMEM_REGS_64 "%1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, " \
  "%13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, " \
  "%25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, " \
  "%37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, " \
  "%49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, " "%61, %62, %63, %64"
#define HEXEL_TMEM_REGS_128 "%1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, " \
  "%13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, " \
  "%25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, " \
  "%37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, " \
  "%49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, " \
  "%61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, " \
  "%73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, " \
  "%85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, " \
  "%97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, " \
  "%109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, " \
  "%121, %122, %123, %124, %125, %126, %127, %128"
#define HEXEL_TMEM_LD1(i) "=r"(r[i])
#define HEXEL_TMEM_ST1(i) "r"(r[i])
#define HEXEL_TMEM_LD_1 HEXEL_TMEM_LD1(0)
#define HEXEL_TMEM_LD_2 HEXEL_TMEM_LD_1, HEXEL_TMEM_LD1(1)
#define HEXEL_TMEM_LD_4 HEXEL_TMEM_LD_2, HEXEL_TMEM_LD1(2), HEXEL_TMEM_LD1(3)
#define HEXEL_TMEM_LD_8 HEXEL_TMEM_LD_4, HEXEL_TMEM_LD1(4), HEXEL_TMEM_LD1(5), HEXEL_TMEM_LD1(6), \
  HEXEL_TMEM_LD1(7)
#define HEXEL_TMEM_LD_16 HEXEL_TMEM_LD_8, HEXEL_TMEM_LD1(8), HEXEL_TMEM_LD1(9), \
  HEXEL_TMEM_LD1(10), HEXEL_TMEM_LD1(11), HEXEL_TMEM_LD1(12), HEXEL_TMEM_LD1(13), \
  HEXEL_TMEM_LD1(14), HEXEL_TMEM_LD1(15)
#define HEXEL_TMEM_LD_32 HEXEL_TMEM_LD_16, HEXEL_TMEM_LD1(16), HEXEL_TMEM_LD1(17), \
  HEXEL_TMEM_LD1(18), HEXEL_TMEM_LD1(19), HEXEL_TMEM_LD1(20), HEXEL_TMEM_LD1(21), \
  HEXEL_TMEM_LD1(22), HEXEL_TMEM_LD1(23), HEXEL_TMEM_LD1(24), HEXEL_TMEM_LD1(25), \
  HEXEL_TMEM_LD1(26), HEXEL_TMEM_LD1(27), HEXEL_TMEM_LD1(28), HEXEL_TMEM_LD1(29), \
  HEXEL_TMEM_LD1(30), HEXEL_TMEM_LD1(31)
#define HEXEL_TMEM_LD_64 HEXEL_TMEM_LD_32, HEXEL_TMEM_LD1(32), HEXEL_TMEM_LD1(33), \
  HEXEL_TMEM_LD1(34), HEXEL_TMEM_LD1(35), HEXEL_TMEM_LD1(36), HEXEL_TMEM_LD1(37), \
  HEXEL_TMEM_LD1(38), HEXEL_TMEM_LD1(39), HEXEL_TMEM_LD1(40), HEXEL_TMEM_LD1(41), \
  HEXEL_TMEM_LD1(42), HEXEL_TMEM_LD1(43), HEXEL_TMEM_LD1(44), HEXEL_TMEM_LD1(45), \
  HEXEL_TMEM_LD1(46), HEXEL_TMEM_LD1(47), HEXEL_TMEM_LD1(48), HEXEL_TMEM_LD1(49), \
  HEXEL_TMEM_LD1(50), HEXEL_TMEM_LD1(51), HEXEL_TMEM_LD1(52), HEXEL_TMEM_LD1(53), \
  HEXEL_TMEM_LD1(54), HEXEL_TMEM_LD1(55), HEXEL_TMEM_LD1(56), HEXEL_TMEM_LD1(57), \
  HEXEL_TMEM_LD1(58), HEXEL_TMEM_LD1(59), HEXEL_TMEM_LD1(60), HEXEL_TMEM_LD1(61), \
  HEXEL_TMEM_LD1(62), HEXEL_TMEM_LD1(63)
#define HEXEL_TMEM_LD_128 HEXEL_TMEM_LD_64, HEXEL_TMEM_LD1(64), HEXEL_TMEM_LD1(65), \
  HEXEL_TMEM_LD1(66), HEXEL_TMEM_LD1(67), HEXEL_TMEM_LD1(68), HEXEL_TMEM_LD1(69), \
  HEXEL_TMEM_LD1(70), HEXEL_TMEM_LD1(71), HEXEL_TMEM_LD1(72), HEXEL_TMEM_LD1(73), \
  HEXEL_TMEM_LD1(74), HEXEL_TMEM_LD1(75), HEXEL_TMEM_LD1(76), HEXEL_TMEM_LD1(77), \
  HEXEL_TMEM_LD1(78), HEXEL_TMEM_LD1(79), HEXEL_TMEM_LD1(80), HEXEL_TMEM_LD1(81), \
  HEXEL_TMEM_LD1(82), HEXEL_TMEM_LD1(83), HEXEL_TMEM_LD1(84), HEXEL_TMEM_LD1(85), \
  HEXEL_TMEM_LD1(86), HEXEL_TMEM_LD1(87), HEXEL_TMEM_LD1(88), HEXEL_TMEM_LD1(89), \
  HEXEL_TMEM_LD1(90), HEXEL_TMEM_LD1(91), HEXEL_TMEM_LD1(92), HEXEL_TMEM_LD1(93), \
  HEXEL_TMEM_LD1(94), HEXEL_TMEM_LD1(95), HEXEL_TMEM_LD1(96), HEXEL_TMEM_LD1(97), \
  HEXEL_TMEM_LD1(98), HEXEL_TMEM_LD1(99), HEXEL_TMEM_LD1(100), HEXEL_TMEM_LD1(101), \
  HEXEL_TMEM_LD1(102), HEXEL_TMEM_LD1(103), HEXEL_TMEM_LD1(104), HEXEL_TMEM_LD1(105), \
  HEXEL_TMEM_LD1(106), HEXEL_TMEM_LD1(107), HEXEL_TMEM_LD1(108), HEXEL_TMEM_LD1(109), \
  HEXEL_TMEM_LD1(110), HEXEL_TMEM_LD1(111), HEXEL_TMEM_LD1(112), HEXEL_TMEM_LD1(113), \
  HEXEL_TMEM_LD1(114), HEXEL_TMEM_LD1(115), HEXEL_TMEM_LD1(116), HEXEL_TMEM_LD1(117), \
  HEXEL_TMEM_LD1(118), HEXEL_TMEM_LD1(119), HEXEL_TMEM_LD1(120), HEXEL_TMEM_LD1(121), \
  HEXEL_TMEM_LD1(122), HEXEL_TMEM_LD1(123), HEXEL_TMEM_LD1(124), HEXEL_TMEM_LD1(125), \
  HEXEL_TMEM_LD1(126), HEXEL_TMEM_LD1(127)
#define HEXEL_TMEM_ST_1 HEXEL_TMEM_ST1(0)
#define HEXEL_TMEM_ST_2 HEXEL_TMEM_ST_1, HEXEL_TMEM_ST1(1)
#define HEXEL_TMEM_ST_4 HEXEL_TMEM_ST_2, HEXEL_TMEM_ST1(2), HEXEL_TMEM_ST1(3)
#define HEXEL_TMEM_ST_8 HEXEL_TMEM_ST_4, HEXEL_TMEM_ST1(4), HEXEL_TMEM_ST1(5), HEXEL_TMEM_ST1(6), \
  HEXEL_TMEM_ST1(7)
#define HEXEL_TMEM_ST_16 HEXEL_TMEM_ST_8, HEXEL_TMEM_ST1(8), HEXEL_TMEM_ST1(9), \
  HEXEL_TMEM_ST1(10), HEXEL_TMEM_ST1(11), HEXEL_TMEM_ST1(12), HEXEL_TMEM_ST1(13), \
  HEXEL_TMEM_ST1(14), HEXEL_TMEM_ST1(15)
#define HEXEL_TMEM_ST_32 HEXEL_TMEM_ST_16, HEXEL_TMEM_ST1(16), HEXEL_TMEM_ST1(17), \
  HEXEL_TMEM_ST1(18), HEXEL_TMEM_ST1(19), HEXEL_TMEM_ST1(20), HEXEL_TMEM_ST1(21), \
  HEXEL_TMEM_ST1(22), HEXEL_TMEM_ST1(23), HEXEL_TMEM_ST1(24), HEXEL_TMEM_ST1(25), \
  HEXEL_TMEM_ST1(26), HEXEL_TMEM_ST1(27), HEXEL_TMEM_ST1(28), HEXEL_TMEM_ST1(29), \
  HEXEL_TMEM_ST1(30), HEXEL_TMEM_ST1(31)
#define HEXEL_TMEM_ST_64 HEXEL_TMEM_ST_32, HEXEL_TMEM_ST1(32), HEXEL_TMEM_ST1(33), \
  HEXEL_TMEM_ST1(34), HEXEL_TMEM_ST1(35), HEXEL_TMEM_ST1(36), HEXEL_TMEM_ST1(37), \
  HEXEL_TMEM_ST1(38), HEXEL_TMEM_ST1(39), HEXEL_TMEM_ST1(40), HEXEL_TMEM_ST1(41), \
  HEXEL_TMEM_ST1(42), HEXEL_TMEM_ST1(43), HEXEL_TMEM_ST1(44), HEXEL_TMEM_ST1(45), \
  HEXEL_TMEM_ST1(46), HEXEL_TMEM_ST1(47), HEXEL_TMEM_ST1(48), HEXEL_TMEM_ST1(49), \
  HEXEL_TMEM_ST1(50), HEXEL_TMEM_ST1(51), HEXEL_TMEM_ST1(52), HEXEL_TMEM_ST1(53), \
  HEXEL_TMEM_ST1(54), HEXEL_TMEM_ST1(55), HEXEL_TMEM_ST1(56), HEXEL_TMEM_ST1(57), \
  HEXEL_TMEM_ST1(58), HEXEL_TMEM_ST1(59), HEXEL_TMEM_ST1(60), HEXEL_TMEM_ST1(61), \
  HEXEL_TMEM_ST1(62), HEXEL_TMEM_ST1(63)
#define HEXEL_TMEM_ST_128 HEXEL_TMEM_ST_64, HEXEL_TMEM_ST1(64), HEXEL_TMEM_ST1(65), \
  HEXEL_TMEM_ST1(66), HEXEL_TMEM_ST1(67), HEXEL_TMEM_ST1(68), HEXEL_TMEM_ST1(69), \
  HEXEL_TMEM_ST1(70), HEXEL_TMEM_ST1(71), HEXEL_TMEM_ST1(72), HEXEL_TMEM_ST1(73), \
  HEXEL_TMEM_ST1(74), HEXEL_TMEM_ST1(75), HEXEL_TMEM_ST1(76), HEXEL_TMEM_ST1(77), \
  HEXEL_TMEM_ST1(78), HEXEL_TMEM_ST1(79), HEXEL_TMEM_ST1(80), HEXEL_TMEM_ST1(81), \
  HEXEL_TMEM_ST1(82), HEXEL_TMEM_ST1(83), HEXEL_TMEM_ST1(84), HEXEL_TMEM_ST1(85), \
  HEXEL_TMEM_ST1(86), HEXEL_TMEM_ST1(87), HEXEL_TMEM_ST1(88), HEXEL_TMEM_ST1(89), \
  HEXEL_TMEM_ST1(90), HEXEL_TMEM_ST1(91), HEXEL_TMEM_ST1(92), HEXEL_TMEM_ST1(93), \
  HEXEL_TMEM_ST1(94), HEXEL_TMEM_ST1(95), HEXEL_TMEM_ST1(96), HEXEL_TMEM_ST1(97), \
  HEXEL_TMEM_ST1(98), HEXEL_TMEM_ST1(99), HEXEL_TMEM_ST1(100), HEXEL_TMEM_ST1(101), \
  HEXEL_TMEM_ST1(102), HEXEL_TMEM_ST1(103), HEXEL_TMEM_ST1(104), HEXEL_TMEM_ST1(105), \
  HEXEL_TMEM_ST1(106), HEXEL_TMEM_ST1(107), HEXEL_TMEM_ST1(108), HEXEL_TMEM_ST1(109), \
  HEXEL_TMEM_ST1(110), HEXEL_TMEM_ST1(111), HEXEL_TMEM_ST1(112), HEXEL_TMEM_ST1(113), \
  HEXEL_TMEM_ST1(114), HEXEL_TMEM_ST1(115), HEXEL_TMEM_ST1(116), HEXEL_TMEM_ST1(117), \
  HEXEL_TMEM_ST1(118), HEXEL_TMEM_ST1(119), HEXEL_TMEM_ST1(120), HEXEL_TMEM_ST1(121), \
  HEXEL_TMEM_ST1(122), HEXEL_TMEM_ST1(123), HEXEL_TMEM_ST1(124), HEXEL_TMEM_ST1(125), \
  HEXEL_TMEM_ST1(126), HEXEL_TMEM_ST1(127)
// clang-format on

// Warp: loads N consecutive 32-bit columns of one TMEM lane per thread (.32x32b: lane = the
// warp's 32-lane quarter + laneid). Read `r` only after wait_ld(). PTX: tcgen05.ld.
template <int N>
HEXEL_DEVICE void ld_32x32b(uint32_t (&r)[N], uint32_t taddr) {
  static_assert(N == 1 || N == 2 || N == 4 || N == 8 || N == 16 || N == 32 || N == 64 || N == 128,
                "tcgen05.ld .32x32b takes .x1 .. .x128");
#define HEXEL_TMEM_LD_CASE(n)                                                                  \
  if constexpr (N == n)                                                                        \
    asm volatile("tcgen05.ld.sync.aligned.32x32b.x" #n ".b32 {" HEXEL_TMEM_REGS_##n "}, [%0];" \
                 : "+r"(taddr), HEXEL_TMEM_LD_##n                                              \
                 :                                                                             \
                 : "memory");
  HEXEL_TMEM_LD_CASE(1)
  HEXEL_TMEM_LD_CASE(2) HEXEL_TMEM_LD_CASE(4) HEXEL_TMEM_LD_CASE(8) HEXEL_TMEM_LD_CASE(16)
      HEXEL_TMEM_LD_CASE(32) HEXEL_TMEM_LD_CASE(64) HEXEL_TMEM_LD_CASE(128)
#undef HEXEL_TMEM_LD_CASE
}

// Warp: the inverse of ld_32x32b. Wait with wait_st() before the cells are read by an mma.
// PTX: tcgen05.st.
template <int N>
HEXEL_DEVICE void st_32x32b(uint32_t taddr, const uint32_t (&r)[N]) {
  static_assert(N == 1 || N == 2 || N == 4 || N == 8 || N == 16 || N == 32 || N == 64 || N == 128,
                "tcgen05.st .32x32b takes .x1 .. .x128");
#define HEXEL_TMEM_ST_CASE(n)                                                             \
  if constexpr (N == n)                                                                   \
    asm volatile("tcgen05.st.sync.aligned.32x32b.x" #n ".b32 [%0], {" HEXEL_TMEM_REGS_##n \
                 "};" ::"r"(taddr),                                                       \
                 HEXEL_TMEM_ST_##n                                                        \
                 : "memory");
  HEXEL_TMEM_ST_CASE(1)
  HEXEL_TMEM_ST_CASE(2) HEXEL_TMEM_ST_CASE(4) HEXEL_TMEM_ST_CASE(8) HEXEL_TMEM_ST_CASE(16)
      HEXEL_TMEM_ST_CASE(32) HEXEL_TMEM_ST_CASE(64) HEXEL_TMEM_ST_CASE(128)
#undef HEXEL_TMEM_ST_CASE
}

// Warp: waits for this thread's outstanding tcgen05.ld / tcgen05.st. PTX: tcgen05.wait.
HEXEL_DEVICE void wait_ld() {
  asm volatile("tcgen05.wait::ld.sync.aligned;" ::: "memory");
}
HEXEL_DEVICE void wait_st() {
  asm volatile("tcgen05.wait::st.sync.aligned;" ::: "memory");
}

}  // namespace hexel::tcgen05
#endif
