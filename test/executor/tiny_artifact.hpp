#pragma once
// Writes small artifacts by hand, following docs/artifact.md and nothing else, so that the
// executor's tests do not depend on telosc: random weights from a seed, a manifest with every
// checksum, and knobs for the serving limits and for each model family's extra tensors.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

namespace telos::exec::testing {

struct TinyArtifactSpec {
  std::string family = "llama";
  int vocab_size = 64, hidden_size = 32, intermediate_size = 48;
  int num_layers = 2, num_heads = 4, num_kv_heads = 2, head_dim = 8;
  bool tie_word_embeddings = true;
  bool qkv_bias = false;
  bool qk_norm = false;
  std::string rope_type = "default";  // or "llama3"
  int max_batch = 4, max_seq_len = 64, page_size = 4, kv_pages = 64, prefill_chunk = 16;
  std::uint64_t seed = 1;
};

// Writes the artifact directory `dir` (created or replaced) and returns its manifest.
nlohmann::json write_tiny_artifact(const std::string& dir, const TinyArtifactSpec& spec);

// Rewrites dir/manifest.json with `manifest` (for tests that break one field). kResign recomputes
// its manifest_checksum, so that the field's own check is what refuses it; kAsIs keeps the one
// it has (the tests of the manifest checksum).
enum class Signing { kResign, kAsIs };
void rewrite_manifest(const std::string& dir, nlohmann::json manifest,
                      Signing signing = Signing::kResign);

// A fresh empty directory under the test temp dir, unique per call.
std::string temp_dir(const std::string& name);

}  // namespace telos::exec::testing
