#pragma once
// XXH64 (the published xxHash 64-bit algorithm, seed 0): the checksum of every file and weight in
// an artifact. Streaming, so weights are hashed as they are packed; about 10 GB/s on one core.
#include <cstddef>
#include <cstdint>
#include <string>

namespace telos {

class Xxh64 {
 public:
  explicit Xxh64(std::uint64_t seed = 0);
  void update(const void* data, std::size_t length);
  std::uint64_t digest() const;

 private:
  std::uint64_t v_[4];
  std::uint64_t total_ = 0;
  std::uint8_t buf_[32];
  std::size_t buf_len_ = 0;
  std::uint64_t seed_;
};

std::uint64_t xxh64(const void* data, std::size_t length, std::uint64_t seed = 0);
// "xxh64:" followed by 16 lowercase hex digits: the form used in manifest.json.
std::string checksum_string(std::uint64_t digest);

}  // namespace telos
