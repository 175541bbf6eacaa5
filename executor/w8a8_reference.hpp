#pragma once
// W8A8: the arithmetic of a linear layer whose activations and weights are both e4m3 (DeepGEMM's
// fine-grained recipe, docs/fp8.md), in plain f32 C++: the exact reference of the W8A8 kernels
// (codegen/kernels/gemm_w8a8.cuh) and of the CPU reference engine once it runs W8A8 artifacts.
//
// Activations are quantized per token and per 128 columns (a K block): the block's scale is
// amax / 448 in f32 (amax the largest magnitude of its columns), 1 where that quotient is zero (a
// block of zeros); each element becomes e4m3(x / scale), the f32 quotient rounded to nearest even
// and saturated at ±448 (support/dtype.hpp, f32_to_e4m3). The last block of a K that is not a
// multiple of 128 is narrower and takes its scale from its own columns. Weights are e4m3 in
// 128 x 128 blocks with one f32 scale each (the artifact's `w:NAME.scale`).
//
// An output is then, over the K blocks kb in order from acc = +0:
//     partial = Σ float(qa[k]) · float(qw[k])         (the block's columns, in order, in f32)
//     acc     = fma(partial, sa[kb] · sw[kb], acc)     (the scale product rounded to f32 first)
// The e4m3 products are exact in f32; the kernels sum a block's 128 products on the tensor cores
// (four k32 wgmma), whose order inside an instruction is not this one, so they agree with this
// reference to within the bound gemm_w8a8.cuh states, and bit for bit in everything else: the
// scale product and the fused promotion are the kernels' instructions. Nothing is computed in f64.
//
// NaN and infinity propagate, as a kernel cannot refuse them: a block's amax is the largest
// magnitude by bit pattern, so a NaN is larger than every number and makes the block's scale NaN,
// an infinity makes it infinite; either way every output of that row is NaN.
#include <cstdint>

#include "executor/artifact.hpp"

namespace telos::exec {

// The columns of a K block: of the activation scales and of the weight's scale blocks.
inline constexpr int kW8a8BlockK = 128;
// The rows of a weight scale block.
inline constexpr int kW8a8BlockN = 128;

// The K blocks of a row of k columns: ceil(k / 128).
inline int w8a8_k_blocks(int k) {
  return (k + kW8a8BlockK - 1) / kW8a8BlockK;
}

// One block's scale from its largest magnitude: amax / 448, or 1 where that is zero.
float e4m3_block_scale(float amax);

// Row x[0 .. k) as q[0 .. k) e4m3 and scale[0 .. w8a8_k_blocks(k)).
void quantize_row_e4m3(const float* x, int k, std::uint8_t* q, float* scale);

// One output over k columns: the quantized activation row (qa, sa) against one weight row qw
// whose K blocks have the scales sw[0 .. w8a8_k_blocks(k)).
float w8a8_dot(const std::uint8_t* qa, const float* sa, const std::uint8_t* qw, const float* sw,
               int k);

// Refuses, naming it, a weight W8A8 cannot take: not a 2-D e4m3 matrix in 128 x 128 scale blocks.
void check_w8a8_weight(const WeightTensor& w);

// y[t · N + r] = the W8A8 product of activation row t of x [rows, K] and row r of w [N, K]: each
// row of x quantized as above, w an e4m3 weight with 128 x 128 scale blocks. Refuses any other
// weight, naming it (check_w8a8_weight).
void w8a8_matmul(float* y, const float* x, int rows, const WeightTensor& w);

}  // namespace telos::exec
