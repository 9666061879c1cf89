// An exclusive lock on an output (a run's output_dir, a prepared dataset folder), held for the
// whole process: flock(2) on a lock file that names the holder's pid. The kernel releases it when
// the process dies, so a killed run never leaves a stale lock: a lock file that no process holds
// never blocks. The file is created 0666 within the umask (another user can take it next) and
// removed when the lock is released.
#pragma once

#include <filesystem>
#include <string>

namespace eagle::run {

class DirLock {
 public:
  // Takes the lock on lock_file (created if needed). Another process holding it: Error(usage)
  // naming `what` and the holder's pid, and the folder the lock is in or, beside_output (a lock file
  // beside an output rather than inside it), the lock file itself.
  DirLock(std::filesystem::path lock_file, const std::string& what, bool beside_output = false);
  ~DirLock();
  DirLock(const DirLock&) = delete;
  DirLock& operator=(const DirLock&) = delete;

  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
  int fd_ = -1;
};

// The lock of a run's output_dir: output_dir/.lock (output_dir is created when missing).
inline constexpr const char* kLockFile = ".lock";

}  // namespace eagle::run
