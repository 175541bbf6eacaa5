#include "support/slot_image.hpp"

#include <cstring>

namespace telos {

std::string slot_image_refusal(std::int64_t rows, std::int64_t cols, int bn, int halves) {
  if (halves != 1 && halves != 2) return "halves must be 1 or 2";
  if (bn < 8 || bn > 64 || bn % (8 * halves) != 0)
    return "tile rows must be a multiple of " + std::to_string(8 * halves) + " from " +
           std::to_string(8 * halves) + " to 64";
  if (rows <= 0 || rows % bn != 0) return "rows must be whole tiles of " + std::to_string(bn);
  if (cols <= 0 || cols % (64 * (64 / bn)) != 0)
    return "cols must be whole slots of " + std::to_string(64 / bn) + " 64-column blocks";
  return "";
}

std::string slot_image_box_refusal(int bn, int halves, int box) {
  const int h = bn / halves;
  if (box <= 0 || box % 8 != 0) return "box rows must be a positive multiple of 8";
  if (box <= h ? h % box != 0 : box % h != 0 || box / h > 256)
    return "box rows must divide a tile's " + std::to_string(h) +
           " rows of a half or be at most 256 whole tiles of them";
  return "";
}

SlotImageMapView slot_image_map_view(std::int64_t rows, std::int64_t cols, int bn, int halves,
                                     int box_rows) {
  const auto h = static_cast<std::uint64_t>(bn / halves), b = static_cast<std::uint64_t>(bn);
  const auto k_blocks = static_cast<std::uint64_t>(cols / 64);
  const auto box = static_cast<std::uint64_t>(box_rows);
  SlotImageMapView v;
  // A row's 64 columns, a half's rows of a tile's block, the halves, a tile's K blocks, the tiles.
  const std::uint64_t dims[5] = {64, h, static_cast<std::uint64_t>(halves), k_blocks,
                                 static_cast<std::uint64_t>(rows) / b};
  const std::uint64_t strides[4] = {128, h * 128, b * 128, k_blocks * b * 128};
  const std::uint64_t boxes[5] = {64, box <= h ? box : h, 1, 1, box <= h ? 1 : box / h};
  for (int i = 0; i < 5; ++i) {
    v.dims[i] = dims[i];
    v.box[i] = static_cast<std::uint32_t>(boxes[i]);
  }
  for (int i = 0; i < 4; ++i) v.strides_bytes[i] = strides[i];
  return v;
}

void pack_slot_image(const std::uint16_t* w, std::int64_t rows, std::int64_t cols, int bn,
                     int halves, std::int64_t tile_begin, std::int64_t tile_end,
                     std::uint16_t* out) {
  const std::int64_t half_rows = rows / halves, tile_half = bn / halves;
  for (std::int64_t t = tile_begin; t < tile_end; ++t)
    for (std::int64_t kb = 0; kb < cols / 64; ++kb)  // a slot's blocks are consecutive K blocks
      for (std::int64_t r = 0; r < bn; ++r) {
        const std::int64_t h = r / tile_half, row = h * half_rows + t * tile_half + r % tile_half;
        const std::uint16_t* src = w + row * cols + kb * 64;
        for (std::int64_t c = 0; c < 8; ++c) std::memcpy(out + 8 * (c ^ (r % 8)), src + 8 * c, 16);
        out += 64;
      }
}

}  // namespace telos
