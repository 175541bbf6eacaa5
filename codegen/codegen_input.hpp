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
  // kv_dtype: the KV pages' element type; the attention kernels read BF16 pages only.
  DType kv_dtype = DType::BF16;
};

}  // namespace telos::codegen
