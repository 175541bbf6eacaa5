// libFuzzer target: any bytes as config.json. Parsing and spec building must either produce a
// ModelSpec whose sizes are all positive and consistent, or throw telos::Error: never a nlohmann
// exception, a crash or undefined behaviour.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "compiler/import/checkpoint.hpp"
#include "compiler/import/json_fields.hpp"
#include "support/error.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace telos::compiler;
  try {
    const auto config =
        parse_json_text(std::string_view(reinterpret_cast<const char*>(data), size), "fuzz.json");
    const ModelSpec spec = spec_from_config(config, "fuzz.json");
    // What the rest of the compiler relies on once a spec exists.
    if (spec.num_heads % spec.num_kv_heads != 0 || spec.head_dim % 2 != 0 || spec.head_dim <= 0 ||
        spec.vocab_size <= 0 || spec.hidden_size <= 0 || spec.num_layers <= 0 ||
        !(spec.rms_norm_eps > 0)) {
      std::abort();
    }
    for (std::int64_t id : spec.eos_token_ids) {
      if (id < 0 || id >= spec.vocab_size) std::abort();
    }
    // Shapes are products of two validated sizes; UBSan would flag an overflow here. Only small
    // layer counts are expanded, so a valid config with 2^31 layers does not exhaust memory.
    if (spec.num_layers <= 64) {
      for (const RequiredTensor& t : required_tensors(spec)) {
        for (std::int64_t d : t.shape) {
          if (d <= 0) std::abort();
        }
      }
    }
  } catch (const telos::Error&) {
    // A refusal naming the field is the correct answer to a bad config.
  }
  return 0;
}
