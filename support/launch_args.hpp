#pragma once
// The launch arguments of an artifact's programs that name memory by shape (docs/artifact.md,
// "Kernels"): tensor maps (`tmap:`) and slot images of weights (`wimg:`, `timg:`). Parsed here, so
// that the shared manifest validation (artifact_format.hpp) and the GPU engine read them alike.
#include <cstdint>
#include <string>

namespace telos {

// A `tmap:TARGET:ROWS:COLS:BOX_ROWS:BOX_COLS` launch argument: a TMA tensor map over a row-major
// [ROWS, COLS] matrix at TARGET (`w:NAME`, `buf:NAME` or `kv:L`), read and written in BOX_ROWS x
// BOX_COLS boxes with the 128-byte swizzle. A box row is one swizzle span, so BOX_COLS names the
// element type: 64 bf16, 32 f32 or 128 bytes (e4m3: W8A8 operands), `elem_bytes` 2, 4 or 1. The
// loader makes one exception (artifact_programs.cpp): an e4m3 weight's map with BOX_COLS 64 has
// one-byte elements, boxes of 64 bytes and no swizzle (the weight-only e4m3 GEMMs' converters).
struct TensorMapArg {
  std::string target;
  std::int64_t rows = 0, cols = 0;
  int box_rows = 0, box_cols = 0;
  int elem_bytes = 0;
  bool swizzle = true;  // the 128-byte swizzle, else none
};

// Parses `arg` (which starts with "tmap:"); throws telos::Error naming `where` and what is wrong
// when it is malformed: a target that is not w:, buf: or kv:, a size that is not a positive integer
// below 2^31, COLS not a multiple of 8 (TMA rows are multiples of 16 bytes), BOX_ROWS outside
// 1..256, BOX_COLS other than 64 (bf16), 32 (f32) or 128 (bytes), the 128-byte swizzle spans.
TensorMapArg parse_tensor_map_arg(const std::string& arg, const std::string& where);

// A `wimg:NAME:BN:HALVES` launch argument: the slot image of weight NAME in tiles of BN rows, of
// one or two halves (support/slot_image.hpp); or a `timg:NAME:BN:HALVES:BOX` one: the tensor map
// over that image read in boxes of BOX rows.
struct WeightImageArg {
  std::string weight;
  int bn = 0, halves = 1;
  int box_rows = 0;  // timg: only
  // The image's own argument (`wimg:NAME:BN:HALVES`): the engine keeps one image per key.
  std::string key() const;
};

// Parses `arg` (which starts with "wimg:" or "timg:"); throws telos::Error naming `where` when it
// is not a name and two (timg: three) positive integers. What the weight allows is checked by the
// manifest validation.
WeightImageArg parse_weight_image_arg(const std::string& arg, const std::string& where);

}  // namespace telos
