// libFuzzer target: any bytes as a safetensors file. The parser must either return views that lie
// inside the input or throw telos::Error; AddressSanitizer catches any read outside the buffer
// (libFuzzer hands us exactly `size` bytes), UBSan any overflow in the offset arithmetic.
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "compiler/import/checkpoint.hpp"
#include "support/error.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    const auto tensors = telos::compiler::parse_safetensors({data, size}, "fuzz.safetensors");
    for (const auto& t : tensors) {
      // Touch the first and last byte of every view: out of bounds would be an ASan report.
      if (t.bytes > 0) {
        volatile std::uint8_t edge = t.data[0] ^ t.data[t.bytes - 1];
        (void)edge;
      }
      if (t.data < data || t.data + t.bytes > data + size) std::abort();
    }
  } catch (const telos::Error&) {
    // A refusal with a message is the correct answer to a bad file.
  }
  return 0;
}
