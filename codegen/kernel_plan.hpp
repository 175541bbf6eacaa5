#pragma once
// Which kernel instances a model needs and how each bucket launches them: the choosing half of
// codegen (tile sizes, split sizes, thread counts). The kernel bodies live in codegen/kernels/;
// emit_source() only prints what this plan decided.
//
// A bucket's launch program names every argument symbolically (docs/artifact.md, "Kernels"):
//   w:NAME      a weight tensor of the artifact
//   buf:NAME    an activation buffer of the arena (programs.arena)
//   desc:FIELD  a field of the step descriptor (tokens, positions, token_seq, page_tables,
//               sample_rows, sample_params)
//   kv:L        layer L of KV page 0 (the pool base plus L * 2 * Hkv * page_size * D elements)
//   null        a null pointer (an operand this model does not have)
//   tmap:TARGET:ROWS:COLS:BOX_ROWS:BOX_COLS
//               a TMA tensor map (in device memory) over the bf16 [ROWS, COLS] matrix at TARGET
//               (w:NAME or buf:NAME), boxes of BOX_ROWS x BOX_COLS, 128-byte swizzle
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "codegen/codegen_input.hpp"

namespace telos::codegen {

struct KernelInstance {
  std::string instance;  // the template instance, e.g. "telos_kernels::rmsnorm<128, 32, 1e-05f, false>"
  std::vector<std::string> params;  // parameter names, in order (each a pointer)
  int block = 0;                    // threads per block
  int dynamic_smem = 0;             // bytes of dynamic shared memory per block
};

struct Launch {
  int kernel = 0;  // index into KernelPlan::kernels
  std::array<int, 3> grid{1, 1, 1};
  std::vector<std::string> args;
};

struct BucketProgram {
  std::string kind;     // "decode" (one token per sequence) or "prefill"
  int size = 0;         // the bucket: sequences (decode) or tokens (prefill)
  int tokens = 0;       // rows of the step
  int sample_rows = 0;  // rows the LM head and the sampler see
  std::vector<Launch> launches;
};

struct ArenaBuffer {
  std::string name;
  std::int64_t bytes = 0;
};

struct KernelPlan {
  std::vector<KernelInstance> kernels;
  std::vector<BucketProgram> buckets;  // decode buckets largest first, then prefill largest first
  std::vector<ArenaBuffer> arena;
  // Step descriptor dimensions.
  int max_tokens = 0, max_sample_rows = 0, max_batch = 0, max_pages_per_seq = 0;
  // Attention's fixed split of the context.
  int attn_split = 0, attn_num_splits = 0;
  std::vector<float> rope_inv_freq;
};

// Throws telos::Error naming the field when the model is outside what the kernels support.
KernelPlan plan_kernels(const CodegenInput& in);

// Prefill buckets of at least this many tokens run their o, gate/up and down projections on the
// wgmma + TMA GEMM (kernels/gemm_prefill.cuh); smaller ones, and decode, on the small-M GEMM.
inline constexpr int kPrefillGemmMinRows = 128;

// Activation rows per GEMM block: the largest of 8, 4, 2, 1 that divides `rows`, so no bucket
// needs padding rows beyond its own.
int gemm_m_tile(int rows);

// `v` rounded to f32 and printed as a CUDA C++ float literal that reads back to the same value.
std::string float_literal(double v);

}  // namespace telos::codegen
