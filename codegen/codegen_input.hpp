#pragma once
// What codegen takes from the serving config (docs/artifact.md, "serving"); the model itself comes
// as the optimized Telos IR (compiler/ir), whose ops and parameters carry every dimension.
#include <string>
#include <vector>

#include "support/dtype.hpp"

namespace telos::codegen {

struct CodegenInput {
  int max_batch = 0, max_seq_len = 0, kv_page_size = 0;
  std::vector<int> decode_buckets, prefill_buckets;  // ascending
  std::vector<std::string> targets;                  // "sm_90a"
  // decode_weight_images: the one-token layer may stream slot images.
  bool decode_weight_images = true;
  // attention_split: positions per split of decode attention (256 or 512).
  int attention_split = 256;
  // kv_dtype: the KV pages' element type, BF16 or E4M3; an E4M3 cache's scales, one a layer (the
  // manifest's kv_cache.k_scales and v_scales), are template arguments of the kernels that append
  // to the pages and read them.
  DType kv_dtype = DType::BF16;
  std::vector<float> kv_k_scales, kv_v_scales;
};

}  // namespace telos::codegen
