#include "support/dtype.hpp"

#include <cmath>

namespace telos {

std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::BF16:
      return "bf16";
    case DType::F16:
      return "f16";
    case DType::F32:
      return "f32";
    case DType::I32:
      return "i32";
    case DType::E4M3:
      return "e4m3";
  }
  return "?";
}

bool parse_dtype(std::string_view s, DType* out) {
  for (DType t : {DType::BF16, DType::F16, DType::F32, DType::I32, DType::E4M3}) {
    if (s == dtype_name(t)) {
      *out = t;
      return true;
    }
  }
  return false;
}

std::size_t dtype_size(DType t) {
  switch (t) {
    case DType::E4M3:
      return 1;
    case DType::BF16:
    case DType::F16:
      return 2;
    case DType::F32:
    case DType::I32:
      return 4;
  }
  return 0;
}

float f16_to_f32(std::uint16_t h) {
  const std::uint32_t sign = (h >> 15) & 1u, exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
  float v;
  if (exp == 0) {
    v = std::ldexp(static_cast<float>(man), -24);  // zero and subnormals
  } else if (exp == 31) {
    v = man ? NAN : INFINITY;
  } else {
    v = std::ldexp(static_cast<float>(man | 0x400u), static_cast<int>(exp) - 25);
  }
  return sign ? -v : v;
}

std::uint16_t f32_to_f16(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  const std::uint32_t sign = (u >> 16) & 0x8000u;
  const std::uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return static_cast<std::uint16_t>(sign | 0x7e00u);   // NaN
  if (abs >= 0x477ff000u) return static_cast<std::uint16_t>(sign | 0x7c00u);  // overflow to inf
  float a;
  std::memcpy(&a, &abs, 4);
  if (abs < 0x38800000u) {  // below the smallest normal: round to a multiple of 2^-24
    const float q = std::nearbyint(a * 16777216.0f);
    return static_cast<std::uint16_t>(sign | static_cast<std::uint32_t>(q));
  }
  std::uint32_t r = abs + 0xfffu + ((abs >> 13) & 1u);  // round to nearest even on 13 dropped bits
  return static_cast<std::uint16_t>(sign | ((r - 0x38000000u) >> 13));
}

float e4m3_to_f32(std::uint8_t q) {
  const std::uint32_t exp = (q >> 3) & 0xfu, man = q & 0x7u;
  float v;
  if (exp == 0xfu && man == 0x7u) {
    v = NAN;
  } else if (exp == 0) {
    v = std::ldexp(static_cast<float>(man), -9);  // zero and subnormals: man * 2^-9
  } else {
    v = std::ldexp(static_cast<float>(man | 0x8u), static_cast<int>(exp) - 10);
  }
  return (q & 0x80u) ? -v : v;
}

std::uint8_t f32_to_e4m3(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  const auto sign = static_cast<std::uint8_t>((u >> 24) & 0x80u);
  const std::uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return 0x7f;  // NaN
  // 448 and above (infinity included) saturate; below 464 that is also what rounding gives.
  if (abs >= 0x43e00000u) return static_cast<std::uint8_t>(sign | 0x7eu);
  float a;
  std::memcpy(&a, &abs, 4);
  if (abs < 0x3c800000u) {  // below 2^-6, the smallest normal: a multiple of 2^-9 (8 is 2^-6)
    const float q = std::nearbyint(a * 512.0f);
    return static_cast<std::uint8_t>(sign | static_cast<std::uint32_t>(q));
  }
  // Round to nearest even on the 20 dropped mantissa bits, then rebias the exponent (127 -> 7).
  const std::uint32_t r = abs + 0x7ffffu + ((abs >> 20) & 1u);
  return static_cast<std::uint8_t>(sign | ((r - (120u << 23)) >> 20));
}

}  // namespace telos
