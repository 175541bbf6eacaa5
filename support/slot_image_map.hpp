#pragma once
// The `timg:` tensor map over a slot image (docs/artifact.md), encoded by Hexel from
// slot_image_map_view: for the GPU engine, the kernel bench and the GPU kernel tests, which all
// build it the way the engine does. Header-only: it needs the CUDA headers Hexel's encoder takes,
// which the host-only support library does not.
#include "hexel/tensor_map_encode.h"
#include "support/slot_image.hpp"

namespace telos {

// The map over the image at `image` of a [rows, cols] bf16 weight in tiles of bn rows (halves
// halves), read in boxes of box_rows rows of a half; no swizzle: the image holds its rows swizzled
// already. Throws std::runtime_error (Hexel's) on what the driver refuses.
inline hexel::TensorMap encode_slot_image_map(const void* image, std::int64_t rows,
                                              std::int64_t cols, int bn, int halves, int box_rows) {
  const SlotImageMapView v = slot_image_map_view(rows, cols, bn, halves, box_rows);
  hexel::TensorMapSpec spec;
  spec.dtype = hexel::TmaDtype::BF16;
  spec.base = image;
  spec.swizzle = hexel::Swizzle::None;
  spec.rank = 5;
  for (int d = 0; d < 5; ++d) {
    spec.dims[d] = v.dims[d];
    spec.box[d] = v.box[d];
  }
  for (int d = 0; d < 4; ++d) spec.strides_bytes[d] = v.strides_bytes[d];
  return hexel::encode_tiled(spec);
}

}  // namespace telos
