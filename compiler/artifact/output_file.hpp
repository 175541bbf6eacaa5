#pragma once
// The artifact writer's files: written with write(2) rather than mmap, so written data is page
// cache, not this process's resident memory; every byte through a running XXH64; and every failed
// create, write, fsync or close an error naming the file and the system's reason (a full disk, a
// file-size limit).
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>

#include "support/checksum.hpp"

namespace telos::compiler {

class OutputFile {
 public:
  explicit OutputFile(const std::filesystem::path& path);  // creates it; it must not exist
  ~OutputFile();
  OutputFile(const OutputFile&) = delete;
  OutputFile& operator=(const OutputFile&) = delete;

  void write(const void* data, std::size_t n);
  // Zeros up to `offset` bytes written.
  void pad_to(std::int64_t offset);
  // Data reaches the disk before the artifact is renamed into place, so a crash never leaves a
  // complete-looking artifact with missing contents.
  void close();
  std::int64_t written() const { return written_; }
  std::uint64_t digest() const { return hash_.digest(); }

 private:
  std::filesystem::path path_;
  int fd_ = -1;
  Xxh64 hash_;
  std::int64_t written_ = 0;
};

// Writes `bytes` to a new file at `path` (OutputFile: durable, errors named); returns its XXH64.
std::uint64_t write_file(const std::filesystem::path& path, const std::string& bytes);

// Makes a directory's entries durable (the files in it, or a rename into it). Returns false with
// errno set when that failed.
bool sync_directory(const std::filesystem::path& dir);

}  // namespace telos::compiler
