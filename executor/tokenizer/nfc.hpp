#pragma once
// Unicode NFC normalization (ICU), the normalizer Qwen's tokenizer.json asks for.
#include <string>
#include <string_view>

namespace telos {

// `text` must be valid UTF-8.
std::string to_nfc(std::string_view text);

}  // namespace telos
