#pragma once
// The row order of a packed QKV projection (docs/artifact.md, layout `qkv_rope_pairs`): within each
// head of d rows, for g = 0 .. d / 8 - 1, the head's rows 4g .. 4g + 3, then d / 2 + 4g .. d / 2 +
// 4g + 3. RoPE rotates element j with element j + d / 2, so a tile of whole 8-row groups holds both
// elements of each pair (codegen/kernels/decode_persistent.cuh, qkv_rope_pairs).
// codegen/kernels/gemm_prefill.cuh has the device form of qkv_pair_pos (the kernels' headers are
// compiled by NVRTC on their own); the GPU tests pack with these and read with that.
namespace telos {

// The natural row (within the projection) stored at position p. d: the head dimension, a multiple
// of 8.
constexpr long long qkv_pair_row(long long p, int d) {
  const long long w = p % d;
  return p - w + (w / 4 % 2) * (d / 2) + w / 8 * 4 + w % 4;
}

// The position at which natural row n is stored (the inverse of qkv_pair_row).
constexpr long long qkv_pair_pos(long long n, int d) {
  const long long w = n % d, s = w / (d / 2), r = w % (d / 2);
  return n - w + r / 4 * 8 + s * 4 + r % 4;
}

}  // namespace telos
