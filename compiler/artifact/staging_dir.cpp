#include "compiler/artifact/staging_dir.hpp"

#include <fcntl.h>
#include <stdlib.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <set>
#include <string>

#include "compiler/artifact/output_file.hpp"
#include "support/artifact_format.hpp"
#include "support/error.hpp"

namespace telos::compiler {
namespace fs = std::filesystem;
namespace {

fs::path parent_of(const fs::path& p) {
  return p.parent_path().empty() ? fs::path(".") : p.parent_path();
}

// ".NAME.telos.tmp-": what every staging directory of `destination` is called, then 6 characters.
std::string staging_prefix(const fs::path& destination) {
  return "." + destination.filename().string() + ".tmp-";
}

[[noreturn]] void refuse_replacing(const fs::path& dest, const std::string& why) {
  fail(dest.string() + ": " + why + "; not replacing it (remove it yourself or choose another -o)");
}

// Refuses `dest` unless it is a Telos artifact holding only what its manifest lists.
void check_replaceable(const fs::path& dest) {
  const fs::file_status st = fs::symlink_status(dest);
  if (!fs::is_directory(st))
    refuse_replacing(dest, "exists and is not a Telos artifact (not a directory)");
  std::error_code ec;
  if (!fs::exists(fs::symlink_status(dest / "manifest.json", ec)))
    refuse_replacing(dest, "exists and is not a Telos artifact (no manifest.json)");
  nlohmann::json m;
  try {
    m = read_manifest_file(dest.string());
  } catch (const Error& e) {
    refuse_replacing(dest, std::string("exists and is not a Telos artifact (") + e.what() + ")");
  }
  const auto format = m.is_object() ? m.find("format") : m.end();
  if (!m.is_object() || format == m.end() || *format != kArtifactFormat)
    refuse_replacing(dest,
                     "exists and is not a Telos artifact (its manifest.json has no \"format\": \"" +
                         std::string(kArtifactFormat) + "\")");
  std::set<std::string> files = {"manifest.json"};
  std::set<std::string> dirs;
  if (const auto listed = m.find("files"); listed != m.end() && listed->is_object())
    for (const auto& [name, sum] : listed->items()) {
      files.insert(fs::path(name).lexically_normal().string());
      for (fs::path p = fs::path(name).parent_path(); !p.empty(); p = p.parent_path())
        dirs.insert(p.lexically_normal().string());
    }
  fs::recursive_directory_iterator it(dest, ec);
  for (; !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    const std::string rel = it->path().lexically_relative(dest).string();
    const fs::file_status s = it->symlink_status(ec);
    const bool ours =
        fs::is_directory(s) ? dirs.count(rel) > 0 : fs::is_regular_file(s) && files.count(rel) > 0;
    if (!ours)
      refuse_replacing(dest, "holds " + rel +
                                 ", which its manifest.json does not list (telosc deletes only "
                                 "what it wrote: move it out first)");
  }
  if (ec) refuse_replacing(dest, "cannot be read through: " + ec.message());
}

// Removes the staging directory that `lock` (a lock file's path) belongs to, and the lock file,
// when the lock file is this user's, carries the marker and its writer is gone.
void remove_if_stale(const fs::path& lock) {
  const int fd = ::open(lock.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return;
  struct stat st {};
  char head[64] = {};
  const bool mine = ::fstat(fd, &st) == 0 && st.st_uid == ::geteuid();
  const ssize_t n = ::pread(fd, head, sizeof head - 1, 0);
  const bool marked = n > 0 && std::strncmp(head, kStagingMarker, std::strlen(kStagingMarker)) == 0;
  if (mine && marked && ::flock(fd, LOCK_EX | LOCK_NB) == 0) {
    std::error_code ec;
    fs::path dir = lock;
    dir.replace_extension();  // drops ".lock"
    if (fs::is_directory(fs::symlink_status(dir, ec))) fs::remove_all(dir, ec);
    if (!ec) ::unlink(lock.c_str());
  }
  ::close(fd);
}

void remove_stale_staging(const fs::path& destination) {
  const std::string prefix = staging_prefix(destination);
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(parent_of(destination), ec)) {
    const std::string name = e.path().filename().string();
    if (name.size() == prefix.size() + 6 + 5 && name.starts_with(prefix) &&
        name.ends_with(".lock") && fs::is_regular_file(e.symlink_status(ec)))
      remove_if_stale(e.path());
  }
}

}  // namespace

void check_destination(const fs::path& dest) {
  if (dest.filename().empty() || dest.filename() == "." || dest.filename() == "..")
    fail(dest.string() + ": expected a directory name for the artifact (e.g. model.telos)");
  const fs::path parent = parent_of(dest);
  std::error_code ec;
  if (!fs::is_directory(parent, ec))
    fail(dest.string() + ": cannot write the artifact: directory " + parent.string() +
         " does not exist");
  // Root may write anywhere, but a directory with no write permission is still refused: writing
  // into a directory someone made read-only is a mistake, whoever runs telosc.
  struct stat parent_stat {};
  const bool no_write_bits =
      ::stat(parent.c_str(), &parent_stat) == 0 && (parent_stat.st_mode & 0222) == 0;
  if (::access(parent.c_str(), W_OK) != 0 || no_write_bits)
    fail(dest.string() + ": cannot write the artifact: directory " + parent.string() +
         " is not writable");
  if (fs::exists(fs::symlink_status(dest, ec))) check_replaceable(dest);
}

StagingDir::StagingDir(const fs::path& destination) {
  remove_stale_staging(destination);
  // The lock file first, locked before it carries the marker, so that no other compile ever takes
  // a live writer's staging for a stale one.
  std::string lock =
      (parent_of(destination) / (staging_prefix(destination) + "XXXXXX.lock")).string();
  lock_fd_ = ::mkostemps(lock.data(), 5, O_CLOEXEC);
  if (lock_fd_ < 0)
    fail(destination.string() + ": cannot create a staging lock file in " +
         parent_of(destination).string() + ": " + std::strerror(errno));
  lock_path_ = lock;
  // The destructor does not run for a constructor that throws: undo what was made.
  auto give_up = [&](const std::string& message) {
    const std::string reason = std::strerror(errno);
    ::unlink(lock_path_.c_str());
    ::close(lock_fd_);
    fail(message + ": " + reason);
  };
  if (::flock(lock_fd_, LOCK_EX) != 0) give_up(lock_path_.string() + ": cannot lock");
  const std::string marker = std::string(kStagingMarker) + " of " + destination.string() +
                             " by telosc, pid " + std::to_string(::getpid()) + "\n";
  if (::write(lock_fd_, marker.data(), marker.size()) != static_cast<ssize_t>(marker.size()))
    give_up(lock_path_.string() + ": write failed");
  fs::path dir = lock_path_;
  dir.replace_extension();
  // An artifact gets the permissions of any other directory the user creates.
  if (::mkdir(dir.c_str(), 0777) != 0)
    give_up(dir.string() + ": cannot create the staging directory");
  path_ = dir;
}

StagingDir::~StagingDir() {
  std::error_code ec;
  if (!path_.empty()) fs::remove_all(path_, ec);
  if (!lock_path_.empty()) ::unlink(lock_path_.c_str());
  if (lock_fd_ >= 0) ::close(lock_fd_);
}

void StagingDir::commit(const fs::path& destination) {
  if (!sync_directory(path_)) fail(path_.string() + ": fsync failed: " + std::strerror(errno));
  check_destination(destination);
  if (fs::exists(fs::symlink_status(destination))) {
    if (::renameat2(AT_FDCWD, path_.c_str(), AT_FDCWD, destination.c_str(), RENAME_EXCHANGE) != 0)
      fail(destination.string() + ": cannot replace: " + std::strerror(errno));
    // path_ now holds the earlier artifact, which the destructor removes. The artifact is in place
    // from here on; making the rename durable is best effort, never an error after success.
    sync_directory(parent_of(destination));
    return;
  }
  if (::rename(path_.c_str(), destination.c_str()) != 0)
    fail(destination.string() + ": cannot rename into place: " + std::strerror(errno));
  path_.clear();
  sync_directory(parent_of(destination));
}

}  // namespace telos::compiler
