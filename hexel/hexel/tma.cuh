// TMA: bulk tensor copies between global and shared memory through a tensor map, plain bulk
// copies, and their prefetches (PTX ISA, "Data Movement and Conversion Instructions:
// cp.async.bulk.tensor", "cp.async.bulk", "cp.async.bulk.prefetch.tensor", "prefetch").
// Loads complete on an mbarrier (the caller arms it with mbarrier::arrive_expect_tx and
// tile_bytes); stores complete through bulk groups. Coordinates are element indices, innermost
// first, and may run past the tensor: out-of-bounds elements load as zeros and are not stored.
#pragma once
#include "hexel/config.cuh"
#include "hexel/tensor_map.cuh"

namespace hexel::tma {

// Bytes one box moves: the single statement of a tile's size that expect_tx and the copy share.
template <class Elem>
HEXEL_HOST_DEVICE constexpr uint32_t tile_bytes(uint32_t box0, uint32_t box1 = 1, uint32_t box2 = 1,
                                                uint32_t box3 = 1, uint32_t box4 = 1) {
  return static_cast<uint32_t>(sizeof(Elem)) * box0 * box1 * box2 * box3 * box4;
}

#if defined(__CUDACC__)

HEXEL_DEVICE uint64_t map_addr(const TensorMap* map) {
  return reinterpret_cast<uint64_t>(map);
}

// Pulls the tensor map into the descriptor cache ahead of the first copy. PTX: prefetch.tensormap.
HEXEL_DEVICE void prefetch_map(const TensorMap* map) {
  asm volatile("prefetch.tensormap [%0];" ::"l"(map_addr(map)) : "memory");
}

// Orders a map written to global memory through the generic proxy (the host's cudaMemcpy) before
// this thread's first copy through it (the tensormap proxy). PTX ISA: membar/fence
// (fence.proxy.tensormap::generic.acquire, .sys: the writer was the host).
HEXEL_DEVICE void acquire_map(const TensorMap* map) {
  asm volatile("fence.proxy.tensormap::generic.acquire.sys [%0], 128;" ::"l"(map_addr(map))
               : "memory");
}

// Tiled load of one box into this CTA's shared memory at `dst`, completing `bytes` on `bar`.
// Rank = number of coordinates (1..5). PTX: cp.async.bulk.tensor (.tile, .mbarrier::complete_tx).
template <class... Coord>
HEXEL_DEVICE void load(uint32_t dst, const TensorMap* map, uint32_t bar, Coord... c) {
  static_assert(sizeof...(Coord) >= 1 && sizeof...(Coord) <= 5, "TMA tensors have rank 1..5");
  const int32_t x[5] = {static_cast<int32_t>(c)...};
  const uint64_t m = map_addr(map);
  if constexpr (sizeof...(Coord) == 1)
    asm volatile(
        "cp.async.bulk.tensor.1d.shared::cluster.global.mbarrier::complete_tx::bytes"
        " [%0], [%1, {%3}], [%2];" ::"r"(dst),
        "l"(m), "r"(bar), "r"(x[0])
        : "memory");
  else if constexpr (sizeof...(Coord) == 2)
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
        " [%0], [%1, {%3, %4}], [%2];" ::"r"(dst),
        "l"(m), "r"(bar), "r"(x[0]), "r"(x[1])
        : "memory");
  else if constexpr (sizeof...(Coord) == 3)
    asm volatile(
        "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes"
        " [%0], [%1, {%3, %4, %5}], [%2];" ::"r"(dst),
        "l"(m), "r"(bar), "r"(x[0]), "r"(x[1]), "r"(x[2])
        : "memory");
  else if constexpr (sizeof...(Coord) == 4)
    asm volatile(
        "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes"
        " [%0], [%1, {%3, %4, %5, %6}], [%2];" ::"r"(dst),
        "l"(m), "r"(bar), "r"(x[0]), "r"(x[1]), "r"(x[2]), "r"(x[3])
        : "memory");
  else
    asm volatile(
        "cp.async.bulk.tensor.5d.shared::cluster.global.mbarrier::complete_tx::bytes"
        " [%0], [%1, {%3, %4, %5, %6, %7}], [%2];" ::"r"(dst),
        "l"(m), "r"(bar), "r"(x[0]), "r"(x[1]), "r"(x[2]), "r"(x[3]), "r"(x[4])
        : "memory");
}

// Tiled 2D load of a CTA pair (tcgen05 cta_group::2): the box lands in this CTA's shared memory
// at `dst` and its bytes complete on the mbarrier at the shared::cluster address `bar`, which may
// be in either CTA of the pair (the leader's, where one MMA thread waits for both CTAs' stages:
// cluster::map_shared(bar, 0)). PTX: cp.async.bulk.tensor (.shared::cluster.global,
// .mbarrier::complete_tx::bytes, .cta_group::2).
HEXEL_DEVICE void load_pair(uint32_t dst, const TensorMap* map, uint32_t bar, int32_t c0,
                            int32_t c1) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.cta_group::2"
      " [%0], [%1, {%3, %4}], [%2];" ::"r"(dst),
      "l"(map_addr(map)), "r"(bar), "r"(c0), "r"(c1)
      : "memory");
}

// Tiled 2D load multicast to every CTA of the cluster whose bit is set in `cta_mask`: the box
// lands at the same shared offset `dst` in each, and each CTA's barrier at offset `bar` gets
// the bytes. PTX: cp.async.bulk.tensor with .multicast::cluster.
HEXEL_DEVICE void load_multicast(uint32_t dst, const TensorMap* map, uint32_t bar,
                                 uint16_t cta_mask, int32_t c0, int32_t c1) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::"
      "cluster"
      " [%0], [%1, {%4, %5}], [%2], %3;" ::"r"(dst),
      "l"(map_addr(map)), "r"(bar), "h"(cta_mask), "r"(c0), "r"(c1)
      : "memory");
}

// The same for a 5D box (a weight's slot image, codegen/kernels/gemm_prefill.cuh's
// load_weight_rows). PTX: cp.async.bulk.tensor (.5d, .multicast::cluster).
HEXEL_DEVICE void load_multicast(uint32_t dst, const TensorMap* map, uint32_t bar,
                                 uint16_t cta_mask, int32_t c0, int32_t c1, int32_t c2, int32_t c3,
                                 int32_t c4) {
  asm volatile(
      "cp.async.bulk.tensor.5d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::"
      "cluster"
      " [%0], [%1, {%4, %5, %6, %7, %8}], [%2], %3;" ::"r"(dst),
      "l"(map_addr(map)), "r"(bar), "h"(cta_mask), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(c4)
      : "memory");
}

// Tiled store of one box from shared memory at `src`; joins the current bulk group.
// PTX: cp.async.bulk.tensor (global.shared::cta, .bulk_group).
template <class... Coord>
HEXEL_DEVICE void store(const TensorMap* map, uint32_t src, Coord... c) {
  static_assert(sizeof...(Coord) >= 1 && sizeof...(Coord) <= 5, "TMA tensors have rank 1..5");
  const int32_t x[5] = {static_cast<int32_t>(c)...};
  const uint64_t m = map_addr(map);
  if constexpr (sizeof...(Coord) == 1)
    asm volatile("cp.async.bulk.tensor.1d.global.shared::cta.bulk_group [%0, {%2}], [%1];" ::"l"(m),
                 "r"(src), "r"(x[0])
                 : "memory");
  else if constexpr (sizeof...(Coord) == 2)
    asm volatile(
        "cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%2, %3}], [%1];" ::"l"(m),
        "r"(src), "r"(x[0]), "r"(x[1])
        : "memory");
  else if constexpr (sizeof...(Coord) == 3)
    asm volatile(
        "cp.async.bulk.tensor.3d.global.shared::cta.bulk_group [%0, {%2, %3, %4}], [%1];" ::"l"(m),
        "r"(src), "r"(x[0]), "r"(x[1]), "r"(x[2])
        : "memory");
  else if constexpr (sizeof...(Coord) == 4)
    asm volatile(
        "cp.async.bulk.tensor.4d.global.shared::cta.bulk_group [%0, {%2, %3, %4, %5}], [%1];" ::"l"(
            m),
        "r"(src), "r"(x[0]), "r"(x[1]), "r"(x[2]), "r"(x[3])
        : "memory");
  else
    asm volatile(
        "cp.async.bulk.tensor.5d.global.shared::cta.bulk_group [%0, {%2, %3, %4, %5, %6}], [%1];" ::
            "l"(m),
        "r"(src), "r"(x[0]), "r"(x[1]), "r"(x[2]), "r"(x[3]), "r"(x[4])
        : "memory");
}

// Tiled 2D reduction of one box from shared memory at `src` into global memory: each element
// of the box is added to its element of the tensor (element type from the map); joins the current
// bulk group. f32: rounds to nearest even, subnormal inputs and results flushed to sign-preserving
// zero (PTX ISA, cp.reduce.async.bulk, the floating-point .add). Out-of-bounds elements are
// skipped, as for store. PTX: cp.reduce.async.bulk.tensor (.add, .tile, .bulk_group).
HEXEL_DEVICE void reduce_add(const TensorMap* map, uint32_t src, int32_t c0, int32_t c1) {
  asm volatile(
      "cp.reduce.async.bulk.tensor.2d.global.shared::cta.add.tile.bulk_group"
      " [%0, {%2, %3}], [%1];" ::"l"(map_addr(map)),
      "r"(src), "r"(c0), "r"(c1)
      : "memory");
}

// Warms L2 with a 2D box without touching shared memory. PTX: cp.async.bulk.prefetch.tensor.
HEXEL_DEVICE void prefetch_tile(const TensorMap* map, int32_t c0, int32_t c1) {
  asm volatile("cp.async.bulk.prefetch.tensor.2d.L2.global [%0, {%1, %2}];" ::"l"(map_addr(map)),
               "r"(c0), "r"(c1)
               : "memory");
}

// Warms L2 with `bytes` contiguous bytes at `src` (16-byte aligned, a multiple of 16), without
// touching shared memory or waiting. PTX: cp.async.bulk.prefetch (.L2.global).
HEXEL_DEVICE void prefetch_bytes(const void* src, uint32_t bytes) {
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(src), "r"(bytes) : "memory");
}

// Contiguous global -> shared copy of `bytes` (multiple of 16, both addresses 16-aligned),
// completing on `bar`. PTX: cp.async.bulk (shared::cluster.global, .mbarrier::complete_tx).
HEXEL_DEVICE void copy_g2s(uint32_t dst, const void* src, uint32_t bytes, uint32_t bar) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::
          "r"(dst),
      "l"(src), "r"(bytes), "r"(bar)
      : "memory");
}

// Contiguous shared -> global copy; joins the current bulk group. PTX: cp.async.bulk
// (global.shared::cta, .bulk_group).
HEXEL_DEVICE void copy_s2g(void* dst, uint32_t src, uint32_t bytes) {
  asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" ::"l"(dst), "r"(src),
               "r"(bytes)
               : "memory");
}

// Closes the bulk group of this thread's preceding stores. PTX: cp.async.bulk.commit_group.
HEXEL_DEVICE void commit_group() {
  asm volatile("cp.async.bulk.commit_group;" ::: "memory");
}

// Waits until at most N bulk groups still read their shared source, so that shared memory can be
// reused (the global writes may still be in flight). PTX: cp.async.bulk.wait_group.read.
template <int N>
HEXEL_DEVICE void wait_group_read() {
  asm volatile("cp.async.bulk.wait_group.read %0;" ::"n"(N) : "memory");
}

// Waits until at most N bulk groups are incomplete, global writes included.
// PTX: cp.async.bulk.wait_group.
template <int N>
HEXEL_DEVICE void wait_group() {
  asm volatile("cp.async.bulk.wait_group %0;" ::"n"(N) : "memory");
}

#endif  // __CUDACC__

}  // namespace hexel::tma
