#pragma once
// XXH64 (the published xxHash 64-bit algorithm, seed 0): the checksum of every file and weight in
// an artifact. Streaming, so weights are hashed as they are packed; about 10 GB/s on one core.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

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

class MappedFile;

// XXH64 of `length` bytes of `file` from `offset`, in 16 MiB windows, each dropped from the
// process's memory once hashed (MappedFile::release): a weights file's largest tensors pass 1 GB
// (the 8B shape's embedding), and keeping what was hashed resident would make checking a 16 GB
// model peak at 16 GB of host memory (telos-run stays under 1 GB).
std::uint64_t xxh64_range(const MappedFile& file, std::size_t offset, std::size_t length);

// One checksum to compute: XXH64 of a range of a mapped file.
struct ChecksumRange {
  const MappedFile* file = nullptr;
  std::size_t offset = 0, length = 0;
  std::uint64_t digest = 0;  // set by xxh64_ranges
};

// Computes every range's digest (xxh64_range) on up to 8 threads, the longest first so that the
// last to start is short; at most 8 windows are then resident. One XXH64 runs at a few GB/s on one
// core: a 1B model's 2.5 GB of tensors on one thread were most of its load time
// (docs/performance.md). Where no more threads can be had, the ones running take the rest.
void xxh64_ranges(std::vector<ChecksumRange>& ranges);
// "xxh64:" followed by 16 lowercase hex digits: the form used in manifest.json.
std::string checksum_string(std::uint64_t digest);

}  // namespace telos
