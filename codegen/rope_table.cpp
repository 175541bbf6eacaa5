#include "codegen/rope_table.hpp"

#include <cmath>
#include <numbers>

#include "support/error.hpp"

namespace telos::codegen {

std::vector<float> rope_inv_freq(const RopeInput& rope, int head_dim) {
  std::vector<float> out(static_cast<std::size_t>(head_dim / 2));
  for (int i = 0; i < head_dim / 2; ++i) {
    // transformers: 1 / theta ** (arange(0, D, 2).float() / D), in f32.
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(head_dim);
    double f = 1.0 / std::pow(rope.theta, static_cast<double>(exponent));
    if (rope.type == "llama3") {
      const double old_len = rope.original_max_position_embeddings;
      const double low_wavelen = old_len / rope.low_freq_factor;
      const double high_wavelen = old_len / rope.high_freq_factor;
      const double wavelen = 2.0 * std::numbers::pi / f;
      if (wavelen > low_wavelen) {
        f = f / rope.factor;
      } else if (wavelen >= high_wavelen) {
        const double smooth = (old_len / wavelen - rope.low_freq_factor) /
                              (rope.high_freq_factor - rope.low_freq_factor);
        f = (1.0 - smooth) * f / rope.factor + smooth * f;
      }
    } else if (rope.type != "default") {
      fail("codegen: rope.type '" + rope.type + "' is not supported (expected default or llama3)");
    }
    out[static_cast<std::size_t>(i)] = static_cast<float>(f);
  }
  return out;
}

}  // namespace telos::codegen
