#pragma once
// Builders for the import tests: safetensors files made byte by byte, so each test controls
// exactly what a (possibly broken) file says, and scratch directories that clean up after
// themselves.
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <unistd.h>
#include <nlohmann/json.hpp>

namespace telos::compiler::testing {

// The 8-byte little-endian header length, the header text, then the data section.
inline std::string safetensors_bytes(const std::string& header_text, const std::string& data) {
  std::string out;
  std::uint64_t n = header_text.size();
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((n >> (8 * i)) & 0xff));
  return out + header_text + data;
}

inline nlohmann::json tensor_entry(const std::string& dtype, std::vector<std::int64_t> shape,
                                   std::uint64_t begin, std::uint64_t end) {
  return {{"dtype", dtype}, {"shape", shape}, {"data_offsets", {begin, end}}};
}

inline void write_file(const std::filesystem::path& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << path;
}

// A safetensors file holding `tensors` (name -> shape) as F32 zeros, packed back to back.
inline std::string zero_f32_checkpoint(
    const std::vector<std::pair<std::string, std::vector<std::int64_t>>>& tensors) {
  nlohmann::json header = nlohmann::json::object();
  std::uint64_t offset = 0;
  for (const auto& [name, shape] : tensors) {
    std::uint64_t bytes = 4;
    for (std::int64_t d : shape) bytes *= static_cast<std::uint64_t>(d);
    header[name] = tensor_entry("F32", shape, offset, offset + bytes);
    offset += bytes;
  }
  return safetensors_bytes(header.dump(), std::string(offset, '\0'));
}

// A fresh directory per test, removed afterwards.
class ScratchDir : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    std::string name = std::string(info->test_suite_name()) + "-" + info->name();
    for (char& c : name) {
      if (c == '/') c = '_';  // parameterized tests are named "Suite/Name/N"
    }
    dir_ = std::filesystem::temp_directory_path() /
           ("telos-import-" + std::to_string(::getpid()) + "-" + name);
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  const std::filesystem::path& dir() const { return dir_; }

 private:
  std::filesystem::path dir_;
};

}  // namespace telos::compiler::testing
