#include "executor/w8a8_reference.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "support/dtype.hpp"
#include "support/error.hpp"

namespace telos::exec {

float e4m3_block_scale(float amax) {
  const float scale = amax / kE4M3Max;
  return scale == 0.0f ? 1.0f : scale;
}

void quantize_row_e4m3(const float* x, int k, std::uint8_t* q, float* scale) {
  for (int kb = 0; kb < w8a8_k_blocks(k); ++kb) {
    const int first = kb * kW8a8BlockK, last = std::min(k, first + kW8a8BlockK);
    // The largest magnitude by bit pattern: for non-negative floats the integer order is the
    // numeric one, and a NaN's pattern lies above infinity's (the kernel takes the same maximum).
    std::uint32_t amax_bits = 0;
    for (int c = first; c < last; ++c) {
      std::uint32_t u;
      std::memcpy(&u, x + c, 4);
      amax_bits = std::max(amax_bits, u & 0x7fffffffu);
    }
    float amax;
    std::memcpy(&amax, &amax_bits, 4);
    const float s = e4m3_block_scale(amax);
    scale[kb] = s;
    for (int c = first; c < last; ++c) q[c] = f32_to_e4m3(x[c] / s);
  }
}

float w8a8_dot(const std::uint8_t* qa, const float* sa, const std::uint8_t* qw, const float* sw,
               int k) {
  float acc = 0.0f;
  for (int kb = 0; kb < w8a8_k_blocks(k); ++kb) {
    const int first = kb * kW8a8BlockK, last = std::min(k, first + kW8a8BlockK);
    float partial = 0.0f;
    for (int c = first; c < last; ++c) partial += e4m3_to_f32(qa[c]) * e4m3_to_f32(qw[c]);
    const float s = sa[kb] * sw[kb];
    acc = std::fma(partial, s, acc);
  }
  return acc;
}

void check_w8a8_weight(const WeightTensor& w) {
  if (w.dtype != DType::E4M3 || w.shape.size() != 2)
    fail(w.name + ": a W8A8 linear needs a 2-D e4m3 weight, got " +
         std::string(dtype_name(w.dtype)) + " of " + std::to_string(w.shape.size()) +
         " dimensions");
  if (w.block_rows != kW8a8BlockN || w.block_cols != kW8a8BlockK)
    fail(w.name +
         ": a W8A8 linear needs 128 x 128 scale blocks (the K block of its activations' "
         "scales), got " +
         std::to_string(w.block_rows) + " x " + std::to_string(w.block_cols));
  const int k = static_cast<int>(w.shape[1]), blocks = w8a8_k_blocks(k);
  if (w.scale_cols != blocks)
    fail(w.name + ": its scales have " + std::to_string(w.scale_cols) + " columns, expected " +
         std::to_string(blocks) + " (ceil(" + std::to_string(k) + " / 128))");
}

void w8a8_matmul(float* y, const float* x, int rows, const WeightTensor& w) {
  check_w8a8_weight(w);
  const int n = static_cast<int>(w.shape[0]), k = static_cast<int>(w.shape[1]);
  const int blocks = w8a8_k_blocks(k);
  std::vector<std::uint8_t> qa(static_cast<std::size_t>(k));
  std::vector<float> sa(static_cast<std::size_t>(blocks));
  for (int t = 0; t < rows; ++t) {
    quantize_row_e4m3(x + static_cast<std::size_t>(t) * k, k, qa.data(), sa.data());
    for (int r = 0; r < n; ++r)
      y[static_cast<std::size_t>(t) * n + r] =
          w8a8_dot(qa.data(), sa.data(), w.data + static_cast<std::size_t>(r) * k,
                   w.scale + static_cast<std::size_t>(r / kW8a8BlockN) * blocks, k);
  }
}

}  // namespace telos::exec
