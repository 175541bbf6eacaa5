// telos-add-kernels ARTIFACT: runs codegen for an artifact that has none and adds the kernels to
// it (kernels/, the manifest's "kernels", "programs" and "files"). Lets the GPU checks run on
// artifacts from any telosc, including one whose writer does not call codegen.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "codegen/codegen.hpp"
#include "executor/artifact.hpp"
#include "support/checksum.hpp"
#include "support/error.hpp"

namespace {

using namespace telos;

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(path + ": cannot open");
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

codegen::CodegenInput input_of(const exec::Artifact& a) {
  const exec::ModelConfig& m = a.model();
  const exec::ServingConfig& s = a.serving();
  codegen::CodegenInput in;
  in.vocab_size = m.vocab_size;
  in.hidden_size = m.hidden_size;
  in.intermediate_size = m.intermediate_size;
  in.num_layers = m.num_layers;
  in.num_heads = m.num_heads;
  in.num_kv_heads = m.num_kv_heads;
  in.head_dim = m.head_dim;
  in.rms_norm_eps = m.rms_norm_eps;
  in.rope = {m.rope.type, m.rope.theta, m.rope.factor, m.rope.low_freq_factor, m.rope.high_freq_factor,
             m.rope.original_max_position_embeddings};
  in.tie_word_embeddings = m.tie_word_embeddings;
  in.qkv_bias = m.qkv_bias;
  in.qk_norm = m.qk_norm;
  in.max_batch = s.max_batch;
  in.max_seq_len = s.max_seq_len;
  in.kv_page_size = s.kv_page_size;
  in.decode_buckets = s.decode_buckets;
  in.prefill_buckets = s.prefill_buckets;
  in.targets = s.targets;
  return in;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: telos-add-kernels ARTIFACT_DIR\n");
    return 2;
  }
  try {
    const std::string dir = argv[1];
    const auto art = exec::Artifact::load(dir);
    if (art->has_kernels()) {
      std::printf("%s: already has kernels\n", dir.c_str());
      return 0;
    }
    const codegen::GeneratedKernels k = codegen::generate_kernels(input_of(*art));
    nlohmann::ordered_json m = nlohmann::ordered_json::parse(read_file(dir + "/manifest.json"));
    for (const std::string& rel : codegen::write_kernel_files(k, dir)) {
      const std::string data = read_file(dir + "/" + rel);
      m["files"][rel] = checksum_string(xxh64(data.data(), data.size()));
    }
    m["kernels"] = k.kernels;
    m["programs"] = k.programs;
    const std::string tmp = dir + "/manifest.json.tmp";
    {
      std::ofstream out(tmp);
      out << m.dump(1) << "\n";
      if (!out) fail(tmp + ": cannot write");
    }
    std::filesystem::rename(tmp, dir + "/manifest.json");
    std::printf("%s: %zu kernels for", dir.c_str(), k.kernels.size());
    for (const auto& t : k.targets) std::printf(" %s%s", t.arch.c_str(), t.from_cache ? " (cached)" : "");
    std::printf("\n");
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "telos-add-kernels: %s\n", e.what());
    return 1;
  }
}
