#pragma once
// Element types that cross the artifact boundary, and scalar conversions (round to nearest even).
// E4M3 is the OCP FP8 format with no infinities (PyTorch's float8_e4m3fn, safetensors' F8_E4M3):
// bias 7, largest finite 448, 0x7f and 0xff the only NaNs.
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace telos {

enum class DType { BF16, F16, F32, I32, E4M3 };

std::string_view dtype_name(DType t);              // "bf16", "f16", "f32", "i32", "e4m3"
bool parse_dtype(std::string_view s, DType* out);  // accepts the names above
std::size_t dtype_size(DType t);

inline float bf16_to_f32(std::uint16_t h) {
  std::uint32_t u = static_cast<std::uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline std::uint16_t f32_to_bf16(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((u >> 16) | 0x40);  // NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<std::uint16_t>(u >> 16);
}

float f16_to_f32(std::uint16_t h);
std::uint16_t f32_to_f16(float f);

// The largest finite E4M3 magnitude.
inline constexpr float kE4M3Max = 448.0f;
float e4m3_to_f32(std::uint8_t q);
// Round to nearest even, saturating: a magnitude beyond 448 becomes ±448; NaN becomes 0x7f.
std::uint8_t f32_to_e4m3(float f);

}  // namespace telos
