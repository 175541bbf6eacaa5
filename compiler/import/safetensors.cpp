// The safetensors format: an 8-byte little-endian header length N, N bytes of JSON mapping each
// tensor name to {"dtype", "shape", "data_offsets": [begin, end]} (offsets relative to the byte
// after the header), then the data. An optional "__metadata__" entry holds string pairs. Every
// number in the header is checked against the file's real size before any pointer is formed, so a
// truncated or lying file is an error, never an out-of-bounds read.
#include <algorithm>
#include <limits>
#include <string>

#include "compiler/import/checkpoint.hpp"
#include "compiler/import/json_fields.hpp"
#include "support/error.hpp"

namespace telos::compiler {
namespace {

using nlohmann::json;

bool safetensors_dtype(const std::string& name, DType* out) {
  if (name == "BF16")
    *out = DType::BF16;
  else if (name == "F16")
    *out = DType::F16;
  else if (name == "F32")
    *out = DType::F32;
  else if (name == "F8_E4M3")
    *out = DType::E4M3;
  else
    return false;
  return true;
}

}  // namespace

std::vector<TensorView> parse_safetensors(std::span<const std::uint8_t> bytes,
                                          const std::string& where) {
  constexpr std::size_t kLengthBytes = 8;
  if (bytes.size() < kLengthBytes) {
    fail(where + ": truncated safetensors file: " + std::to_string(bytes.size()) +
         " bytes, too short for the 8-byte header length");
  }
  std::uint64_t header_length = 0;
  for (std::size_t i = 0; i < kLengthBytes; ++i) {
    header_length |= static_cast<std::uint64_t>(bytes[i]) << (8 * i);
  }
  const std::size_t after_length = bytes.size() - kLengthBytes;
  if (header_length > after_length) {
    fail(where + ": truncated safetensors file: the header length says " +
         std::to_string(header_length) + " bytes but only " + std::to_string(after_length) +
         " follow it");
  }
  const auto* header_begin = reinterpret_cast<const char*>(bytes.data() + kLengthBytes);
  const json header = parse_json_text(std::string_view(header_begin, header_length),
                                      where + " (safetensors header)");
  if (!header.is_object()) {
    fail(where + ": safetensors header: expected a JSON object, found " + json_kind(header));
  }
  const std::span<const std::uint8_t> data = bytes.subspan(kLengthBytes + header_length);

  std::vector<TensorView> tensors;
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") {
      if (!entry.is_object()) {
        fail(where + ": safetensors header: \"__metadata__\": expected an object, found " +
             json_kind(entry));
      }
      continue;
    }
    const std::string tensor = where + ": tensor " + json_quote(name);
    if (!entry.is_object()) fail(tensor + ": expected an object, found " + json_kind(entry));
    const JsonObject fields(entry, where, name);

    TensorView view;
    view.name = name;
    const std::string dtype = fields.string("dtype");
    if (!safetensors_dtype(dtype, &view.dtype)) {
      fail(tensor + ": unsupported dtype " + json_quote(dtype) +
           " (expected BF16, F16, F32 or F8_E4M3)");
    }

    const json* offsets = fields.get("data_offsets");
    if (!offsets || !offsets->is_array() || offsets->size() != 2) {
      fail(tensor + ": field \"data_offsets\": expected [begin, end], found " +
           (offsets ? offsets->dump(-1, ' ', false, json::error_handler_t::replace)
                    : std::string("nothing")));
    }
    const auto limit = static_cast<std::int64_t>(data.size());
    const std::int64_t begin =
        json_integer((*offsets)[0], 0, limit,
                     tensor + ": field \"data_offsets[0]\" (data section of " +
                         std::to_string(data.size()) + " bytes)");
    const std::int64_t end =
        json_integer((*offsets)[1], begin, limit,
                     tensor + ": field \"data_offsets[1]\" (begin " + std::to_string(begin) +
                         ", data section of " + std::to_string(data.size()) + " bytes)");
    view.bytes = static_cast<std::size_t>(end - begin);

    const json* shape = fields.get("shape");
    if (!shape || !shape->is_array()) {
      fail(tensor + ": field \"shape\": expected an array of sizes, found " +
           (shape ? json_kind(*shape) : std::string("nothing")));
    }
    for (std::size_t i = 0; i < shape->size(); ++i) {
      view.shape.push_back(
          json_integer((*shape)[i], 0, std::numeric_limits<std::int64_t>::max(),
                       tensor + ": field " + json_quote("shape[" + std::to_string(i) + "]")));
    }
    // A header may claim sizes whose product wraps 64 bits; that is a lie like any other.
    std::uint64_t expected_bytes = dtype_size(view.dtype);
    bool overflow = false;
    if (std::find(view.shape.begin(), view.shape.end(), 0) != view.shape.end()) {
      expected_bytes = 0;
    } else {
      for (std::int64_t dim : view.shape) {
        overflow |= __builtin_mul_overflow(expected_bytes, static_cast<std::uint64_t>(dim),
                                           &expected_bytes);
      }
    }
    if (overflow || view.bytes != expected_bytes) {
      fail(tensor + ": data_offsets span " + std::to_string(view.bytes) + " bytes but shape " +
           format_shape(view.shape) + " of " + dtype + " needs " +
           (overflow ? std::string("more than 2^64") : std::to_string(expected_bytes)));
    }
    view.data = data.data() + begin;
    tensors.push_back(std::move(view));
  }

  // Overlapping tensors would alias each other's data: a corrupt or hand-edited header.
  std::vector<const TensorView*> by_offset;
  for (const TensorView& t : tensors) {
    if (t.bytes > 0) by_offset.push_back(&t);
  }
  std::sort(by_offset.begin(), by_offset.end(),
            [](const TensorView* a, const TensorView* b) { return a->data < b->data; });
  for (std::size_t i = 1; i < by_offset.size(); ++i) {
    const TensorView& prev = *by_offset[i - 1];
    if (by_offset[i]->data < prev.data + prev.bytes) {
      fail(where + ": tensor " + json_quote(by_offset[i]->name) + " overlaps tensor " +
           json_quote(prev.name) + " in the data section");
    }
  }
  return tensors;
}

std::vector<TensorView> parse_safetensors(const MappedFile& file) {
  std::vector<TensorView> tensors = parse_safetensors(file.bytes(), file.path());
  for (TensorView& t : tensors) t.file = &file;
  return tensors;
}

}  // namespace telos::compiler
