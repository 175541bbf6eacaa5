#include "compiler/artifact/output_file.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "support/artifact_limits.hpp"
#include "support/error.hpp"

namespace telos::compiler {

OutputFile::OutputFile(const std::filesystem::path& path) : path_(path) {
  fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd_ < 0) fail(path_.string() + ": cannot create: " + std::strerror(errno));
}

OutputFile::~OutputFile() {
  if (fd_ >= 0) ::close(fd_);
}

void OutputFile::write(const void* data, std::size_t n) {
  hash_.update(data, n);
  written_ += static_cast<std::int64_t>(n);
  const auto* p = static_cast<const std::uint8_t*>(data);
  while (n > 0) {
    const ssize_t w = ::write(fd_, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) fail(path_.string() + ": write failed: " + std::strerror(errno));
    p += w;
    n -= static_cast<std::size_t>(w);
  }
}

void OutputFile::pad_to(std::int64_t offset) {
  static const std::uint8_t zeros[limits::kWeightAlignment] = {};
  while (written_ < offset)
    write(zeros, static_cast<std::size_t>(
                     std::min<std::int64_t>(offset - written_, limits::kWeightAlignment)));
}

void OutputFile::close() {
  if (::fsync(fd_) != 0) fail(path_.string() + ": fsync failed: " + std::strerror(errno));
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) fail(path_.string() + ": close failed: " + std::strerror(errno));
}

std::uint64_t write_file(const std::filesystem::path& path, const std::string& bytes) {
  OutputFile f(path);
  f.write(bytes.data(), bytes.size());
  f.close();
  return f.digest();
}

bool sync_directory(const std::filesystem::path& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return false;
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  errno = err;
  return rc == 0;
}

}  // namespace telos::compiler
