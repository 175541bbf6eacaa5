#pragma once
// Where the artifact writer puts an artifact: a staging directory beside the destination, renamed
// into place only when complete; an earlier artifact swapped out in one rename (renameat2
// RENAME_EXCHANGE) and then removed.
//
// telosc deletes only what it wrote. It replaces a destination only when that is positively a
// Telos artifact: a directory whose manifest.json has "format": "telos-artifact" and which holds
// nothing its manifest does not list. A staging directory `.NAME.telos.tmp-XXXXXX` comes with its
// lock file `.NAME.telos.tmp-XXXXXX.lock`, which starts with kStagingMarker and on which the writer
// holds an exclusive flock(2) for as long as it lives; the kernel drops the lock when the process
// ends, however it ends (SIGKILL included). A later compile to the same destination removes the
// staging directories whose lock files carry the marker and whose lock it can take: their writer
// is gone. A live writer's lock is never taken, so a concurrent compile never loses its staging.
#include <filesystem>

namespace telos::compiler {

// The first line of a staging lock file.
inline constexpr const char* kStagingMarker = "telosc staging lock";

// Refuses (telos::Error naming the destination and what to do) a destination that cannot be
// written or that exists and is not a replaceable Telos artifact.
void check_destination(const std::filesystem::path& destination);

class StagingDir {
 public:
  // Removes the stale staging directories of `destination`, then creates and locks a new one.
  explicit StagingDir(const std::filesystem::path& destination);
  // Removes the staging directory (or, after a commit that swapped out an earlier artifact, that
  // artifact), then its lock file.
  ~StagingDir();
  StagingDir(const StagingDir&) = delete;
  StagingDir& operator=(const StagingDir&) = delete;

  const std::filesystem::path& path() const { return path_; }
  // Moves the staged artifact to `destination` (checked again: it may have changed while the
  // artifact was written), swapping out an earlier artifact in one rename.
  void commit(const std::filesystem::path& destination);

 private:
  std::filesystem::path path_;
  std::filesystem::path lock_path_;
  int lock_fd_ = -1;
};

}  // namespace telos::compiler
