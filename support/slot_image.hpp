#pragma once
// A weight's slot image (docs/artifact.md, `wimg:` arguments): a bf16 [rows, cols] row-major matrix
// laid out as the persistent decode layer's ring receives it, so that its producer streams each
// ring slot with one plain bulk copy (cp.async.bulk) instead of tensor copies, which stream ~7%
// slower with every SM at it (docs/performance.md; tools/stream_form_bench.cu).
// Tiles of `bn` rows, or with halves = 2 (SwiGLU's gate/up) bn / 2 rows of the first half and the
// same rows of the second; K in slots of 64 / bn 64-column blocks; each block its bn rows of 128
// bytes in the 128-byte swizzle (16-byte chunk c of row r at chunk c ^ (r % 8): what a 2D box with
// that swizzle writes to a 1024-byte-aligned slot); slot s of tile t at (t · slots + s) · slot
// bytes, slot bytes = 64 / bn · bn · 128. The ring's consumers then read exactly the bytes the
// tensor copies gave them (codegen/kernels/decode_persistent.cuh, StreamPhase::image).
#include <cstddef>
#include <cstdint>
#include <string>

namespace telos {

// Why (rows, cols, bn, halves) has no slot image, or "" if it has one: bn a multiple of 8 (of 16
// with two halves) from 8 to 64, whole tiles, and cols whole slots of 64 / bn K blocks.
std::string slot_image_refusal(std::int64_t rows, std::int64_t cols, int bn, int halves);

// Why a tensor map over such an image (docs/artifact.md, `timg:`: {64 columns, bn / halves rows,
// half, K block, tile}, no swizzle) cannot have boxes of `box` rows of one half, or "": whole 8-row
// swizzle repeats that lie in one tile (box divides bn / halves) or are whole tiles (a multiple of
// it, at most 256 tiles).
std::string slot_image_box_refusal(int bn, int halves, int box);

// That tensor map's view of the image of a [rows, cols] weight, as cuTensorMapEncodeTiled takes it
// (innermost dimension first): dims in elements, the byte strides of dimensions 1 to 4, the box.
// A GEMM reads rows n .. n + box_rows - 1 of half h, K block kb, at coordinates (0, n % (bn /
// halves), h, kb, n / (bn / halves)) (codegen/kernels/gemm_prefill.cuh, load_weight_rows).
struct SlotImageMapView {
  std::uint64_t dims[5] = {};
  std::uint64_t strides_bytes[4] = {};
  std::uint32_t box[5] = {};
};
SlotImageMapView slot_image_map_view(std::int64_t rows, std::int64_t cols, int bn, int halves,
                                     int box_rows);

// Writes rows tile_begin .. tile_end - 1 (tiles of the image, in order) of the image of `w` to
// `out` ((tile_end - tile_begin) · bn · cols elements). The caller has checked slot_image_refusal.
void pack_slot_image(const std::uint16_t* w, std::int64_t rows, std::int64_t cols, int bn,
                     int halves, std::int64_t tile_begin, std::int64_t tile_end,
                     std::uint16_t* out);

}  // namespace telos
