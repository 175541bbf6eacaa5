#include "executor/tokenizer/nfc.hpp"

#include <unicode/unorm2.h>
#include <unicode/ustring.h>

#include <algorithm>

#include "support/error.hpp"

namespace telos {

std::string to_nfc(std::string_view text) {
  // ASCII is always in NFC; most prompts are mostly ASCII.
  if (std::all_of(text.begin(), text.end(),
                  [](char c) { return static_cast<unsigned char>(c) < 0x80; }))
    return std::string(text);
  UErrorCode status = U_ZERO_ERROR;
  const UNormalizer2* normalizer = unorm2_getNFCInstance(&status);
  if (U_FAILURE(status))
    fail(std::string("ICU NFC normalizer unavailable: ") + u_errorName(status));
  auto to_utf16 = [&](std::string_view s) {
    std::u16string out(s.size(), u'\0');
    int32_t length = 0;
    status = U_ZERO_ERROR;
    u_strFromUTF8(reinterpret_cast<UChar*>(out.data()), static_cast<int32_t>(out.size()), &length,
                  s.data(), static_cast<int32_t>(s.size()), &status);
    if (U_FAILURE(status)) fail(std::string("NFC: UTF-8 to UTF-16 failed: ") + u_errorName(status));
    out.resize(static_cast<std::size_t>(length));
    return out;
  };
  const std::u16string source = to_utf16(text);
  const auto* src = reinterpret_cast<const UChar*>(source.data());
  const auto src_length = static_cast<int32_t>(source.size());
  status = U_ZERO_ERROR;
  if (unorm2_isNormalized(normalizer, src, src_length, &status) && U_SUCCESS(status))
    return std::string(text);
  // Composition never grows text by more than a small factor; retry once if ICU asks for more.
  std::u16string normal(source.size() * 3 + 16, u'\0');
  status = U_ZERO_ERROR;
  int32_t length =
      unorm2_normalize(normalizer, src, src_length, reinterpret_cast<UChar*>(normal.data()),
                       static_cast<int32_t>(normal.size()), &status);
  if (status == U_BUFFER_OVERFLOW_ERROR) {
    normal.assign(static_cast<std::size_t>(length), u'\0');
    status = U_ZERO_ERROR;
    length = unorm2_normalize(normalizer, src, src_length, reinterpret_cast<UChar*>(normal.data()),
                              static_cast<int32_t>(normal.size()), &status);
  }
  if (U_FAILURE(status)) fail(std::string("NFC normalization failed: ") + u_errorName(status));
  std::string out(static_cast<std::size_t>(length) * 3, '\0');
  int32_t out_length = 0;
  status = U_ZERO_ERROR;
  u_strToUTF8(out.data(), static_cast<int32_t>(out.size()), &out_length,
              reinterpret_cast<const UChar*>(normal.data()), length, &status);
  if (U_FAILURE(status)) fail(std::string("NFC: UTF-16 to UTF-8 failed: ") + u_errorName(status));
  out.resize(static_cast<std::size_t>(out_length));
  return out;
}

}  // namespace telos
