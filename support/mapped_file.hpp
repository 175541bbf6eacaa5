#pragma once
// A read-only memory mapping of a whole file. Checkpoints and artifacts are read through this so
// that a 16 GB checkpoint costs page cache, not resident heap.
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

namespace telos {

class MappedFile {
 public:
  MappedFile() = default;
  explicit MappedFile(const std::string& path);  // throws Error naming the path
  ~MappedFile();
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const std::uint8_t* data() const { return data_; }
  std::size_t size() const { return size_; }
  std::span<const std::uint8_t> bytes() const { return {data_, size_}; }
  const std::string& path() const { return path_; }
  // Tell the kernel a range is no longer needed (streaming readers call this behind them).
  void release(std::size_t offset, std::size_t length) const;

 private:
  std::string path_;
  const std::uint8_t* data_ = nullptr;
  std::size_t size_ = 0;
};

}  // namespace telos
