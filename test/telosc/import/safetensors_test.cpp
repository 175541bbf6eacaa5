// parse_safetensors over files built byte by byte: a valid file, and each way a header can lie
// about the file it sits in.
#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "compiler/import/checkpoint.hpp"
#include "support/error.hpp"
#include "test_checkpoint.hpp"

namespace telos::compiler {
namespace {

using nlohmann::json;
using testing::safetensors_bytes;
using testing::tensor_entry;

std::span<const std::uint8_t> as_bytes(const std::string& s) {
  return {reinterpret_cast<const std::uint8_t*>(s.data()), s.size()};
}

std::string error_of(const std::string& file) {
  try {
    parse_safetensors(as_bytes(file), "w.safetensors");
  } catch (const Error& e) {
    return e.what();
  }
  return "(accepted)";
}

TEST(Safetensors, ReadsDtypesShapesAndData) {
  std::string data(4 * 2 + 3 * 2 + 2 * 4, '\0');
  const float f = 1.5f;
  std::memcpy(&data[14], &f, 4);
  json header = {{"__metadata__", {{"format", "pt"}}},
                 {"a", tensor_entry("BF16", {2, 2}, 0, 8)},
                 {"b", tensor_entry("F16", {3}, 8, 14)},
                 {"c", tensor_entry("F32", {2}, 14, 22)},
                 {"empty", tensor_entry("F32", {0, 4}, 22, 22)}};
  // Writers pad the header with spaces to align the data; that is still valid JSON.
  const std::string file = safetensors_bytes(header.dump() + "   ", data);
  const auto tensors = parse_safetensors(as_bytes(file), "w.safetensors");
  ASSERT_EQ(tensors.size(), 4u);
  EXPECT_EQ(tensors[0].name, "a");
  EXPECT_EQ(tensors[0].dtype, DType::BF16);
  EXPECT_EQ(tensors[0].shape, (std::vector<std::int64_t>{2, 2}));
  EXPECT_EQ(tensors[0].bytes, 8u);
  EXPECT_EQ(tensors[1].dtype, DType::F16);
  EXPECT_EQ(tensors[2].dtype, DType::F32);
  const std::size_t data_start = 8 + header.dump().size() + 3;
  EXPECT_EQ(tensors[2].data, reinterpret_cast<const std::uint8_t*>(file.data()) + data_start + 14);
  float read;
  std::memcpy(&read, tensors[2].data, 4);
  EXPECT_EQ(read, 1.5f);
  EXPECT_EQ(tensors[3].bytes, 0u);
  EXPECT_EQ(tensors[0].file, nullptr);
}

TEST(Safetensors, ShorterThanTheLengthField) {
  EXPECT_EQ(error_of(std::string(5, '\0')),
            "w.safetensors: truncated safetensors file: 5 bytes, too short for the 8-byte header "
            "length");
}

TEST(Safetensors, HeaderLengthPastTheEnd) {
  const std::string file = safetensors_bytes("{}", "");
  std::string lying = file;
  lying[0] = 100;
  EXPECT_EQ(error_of(lying),
            "w.safetensors: truncated safetensors file: the header length says 100 bytes but only "
            "2 follow it");
  lying[0] = 0;
  lying[7] = '\x80';  // 2^63: must not wrap around any addition
  EXPECT_NE(error_of(lying).find("the header length says 9223372036854775808 bytes"),
            std::string::npos);
}

TEST(Safetensors, HeaderIsNotJson) {
  EXPECT_NE(error_of(safetensors_bytes("{\"a\": ", ""))
                .find("w.safetensors (safetensors header): malformed JSON: parse error"),
            std::string::npos)
      << error_of(safetensors_bytes("{\"a\": ", ""));
  EXPECT_EQ(error_of(safetensors_bytes("[1]", "")),
            "w.safetensors: safetensors header: expected a JSON object, found array");
}

TEST(Safetensors, OffsetsPastTheEnd) {
  const json header = {{"w", tensor_entry("F32", {4}, 0, 16)}};
  EXPECT_EQ(error_of(safetensors_bytes(header.dump(), std::string(8, '\0'))),
            "w.safetensors: tensor \"w\": field \"data_offsets[1]\" (begin 0, data section of 8 "
            "bytes): expected an integer in [0, 8], found 16");
}

TEST(Safetensors, OffsetsBackwards) {
  const json header = {{"w", tensor_entry("F32", {1}, 8, 4)}};
  EXPECT_NE(error_of(safetensors_bytes(header.dump(), std::string(8, '\0')))
                .find("field \"data_offsets[1]\" (begin 8, data section of 8 bytes): expected an "
                      "integer in [8, 8], found 4"),
            std::string::npos);
}

TEST(Safetensors, SizeDisagreesWithShape) {
  const json header = {{"w", tensor_entry("BF16", {3}, 0, 8)}};
  EXPECT_EQ(error_of(safetensors_bytes(header.dump(), std::string(8, '\0'))),
            "w.safetensors: tensor \"w\": data_offsets span 8 bytes but shape [3] of BF16 needs 6");
}

TEST(Safetensors, ShapeLargerThanTheFileWithoutOverflow) {
  // 2^40 * 2^40 * 4 bytes wraps a 64-bit product: refused, not compared modulo 2^64.
  const json header = {{"w", tensor_entry("F32", {1ll << 40, 1ll << 40}, 0, 8)}};
  EXPECT_EQ(error_of(safetensors_bytes(header.dump(), std::string(8, '\0'))),
            "w.safetensors: tensor \"w\": data_offsets span 8 bytes but shape [1099511627776, "
            "1099511627776] of F32 needs more than 2^64");
}

TEST(Safetensors, Overlap) {
  const json header = {{"a", tensor_entry("F32", {2}, 0, 8)},
                       {"b", tensor_entry("F32", {2}, 4, 12)}};
  EXPECT_EQ(error_of(safetensors_bytes(header.dump(), std::string(12, '\0'))),
            "w.safetensors: tensor \"b\" overlaps tensor \"a\" in the data section");
}

TEST(Safetensors, UnsupportedDtypeNamesTheTensor) {
  const json header = {{"model.norm.weight", tensor_entry("F64", {1}, 0, 8)}};
  EXPECT_EQ(
      error_of(safetensors_bytes(header.dump(), std::string(8, '\0'))),
      "w.safetensors: tensor \"model.norm.weight\": unsupported dtype \"F64\" (expected BF16, "
      "F16, F32 or F8_E4M3)");
}

TEST(Safetensors, MalformedEntries) {
  auto with = [](json entry) {
    return error_of(safetensors_bytes(json{{"t", entry}}.dump(), std::string(8, '\0')));
  };
  EXPECT_EQ(with(7), "w.safetensors: tensor \"t\": expected an object, found integer");
  EXPECT_EQ(with({{"shape", {2}}, {"data_offsets", {0, 8}}}),
            "w.safetensors: required field \"t.dtype\" is missing");
  EXPECT_EQ(
      with({{"dtype", "F32"}, {"shape", 2}, {"data_offsets", {0, 8}}}),
      "w.safetensors: tensor \"t\": field \"shape\": expected an array of sizes, found integer");
  EXPECT_EQ(with({{"dtype", "F32"}, {"shape", {-2}}, {"data_offsets", {0, 8}}}),
            "w.safetensors: tensor \"t\": field \"shape[0]\": expected an integer in [0, "
            "9223372036854775807], found -2");
  EXPECT_EQ(
      with({{"dtype", "F32"}, {"shape", {2}}, {"data_offsets", {0}}}),
      "w.safetensors: tensor \"t\": field \"data_offsets\": expected [begin, end], found [0]");
  EXPECT_EQ(
      error_of(safetensors_bytes(R"({"__metadata__": 3})", "")),
      "w.safetensors: safetensors header: \"__metadata__\": expected an object, found integer");
}

TEST(Safetensors, MappedFileViewsPointIntoTheFile) {
  const auto path = std::filesystem::temp_directory_path() /
                    ("telos-safetensors-" + std::to_string(::getpid()) + ".safetensors");
  testing::write_file(path, safetensors_bytes(json{{"t", tensor_entry("F32", {1}, 0, 4)}}.dump(),
                                              std::string(4, '\0')));
  {
    const MappedFile file(path.string());
    const auto tensors = parse_safetensors(file);
    ASSERT_EQ(tensors.size(), 1u);
    EXPECT_EQ(tensors[0].file, &file);
    EXPECT_EQ(tensors[0].data + 4, file.data() + file.size());
  }
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace telos::compiler
