// flock-based exclusive locks on outputs (see dir_lock.h).
#include "eagle/run/dir_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include <fmt/format.h>

#include "eagle/util/error.h"

namespace eagle::run {
namespace {

// Opens (creating) the lock file: read-write, 0666 within the umask, so another user of the same
// group or machine can take the lock after this process; read-only when it cannot be written
// (another user's file, a read-only mount): flock needs no write access.
int open_lock_file(const std::filesystem::path& path) {
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0666);
  if (fd < 0 && (errno == EACCES || errno == EROFS)) fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0)
    throw Error(ErrorKind::output, "cannot create the lock file").file(path.string()).found(std::strerror(errno));
  return fd;
}

// Whether fd is still the file at path: a holder removes the file when it releases the lock, so a
// lock taken on the inode it removed (opened just before) guards nothing.
bool still_at_path(int fd, const std::filesystem::path& path) {
  struct stat held {
  }, now{};
  return ::fstat(fd, &held) == 0 && ::lstat(path.c_str(), &now) == 0 && held.st_dev == now.st_dev &&
         held.st_ino == now.st_ino;
}

}  // namespace

DirLock::DirLock(std::filesystem::path lock_file, const std::string& what, bool beside_output)
    : path_(std::move(lock_file)) {
  for (int attempt = 0;; ++attempt) {
    fd_ = open_lock_file(path_);
    if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
      const int err = errno;
      char buf[32] = {};
      const ssize_t n = ::pread(fd_, buf, sizeof buf - 1, 0);
      std::string pid = n > 0 ? std::string(buf, static_cast<std::size_t>(n)) : std::string();
      while (!pid.empty() && (pid.back() == '\n' || pid.back() == ' ')) pid.pop_back();
      ::close(fd_);
      fd_ = -1;
      if (err != EWOULDBLOCK)
        throw Error(ErrorKind::output, "cannot lock").file(path_.string()).found(std::strerror(err));
      throw Error(ErrorKind::usage, fmt::format("{} is in use by another eagle-train process", what))
          // A lock beside its output names the output's own lock file.
          .file(beside_output ? path_.string() : path_.parent_path().string())
          .found(pid.empty() ? "a lock held by another process" : fmt::format("the lock of pid {}", pid))
          .hint("wait for that run to end (or stop it), or choose another output");
    }
    if (still_at_path(fd_, path_)) break;
    // The previous holder removed the file between our open and our flock: take the new one.
    ::close(fd_);
    fd_ = -1;
    EAGLE_CHECK(attempt < 100, Error(ErrorKind::output, "the lock file keeps being replaced")
                                   .file(path_.string())
                                   .hint("another program is removing it; stop it or choose another output"));
  }
  // The holder's pid, for the message of the next process that tries.
  const std::string pid = std::to_string(::getpid()) + "\n";
  if (::ftruncate(fd_, 0) != 0 || ::pwrite(fd_, pid.data(), pid.size(), 0) != static_cast<ssize_t>(pid.size())) {
    // The lock is held; only the courtesy note is missing (a read-only lock file).
  }
}

DirLock::~DirLock() {
  if (fd_ < 0) return;
  // Removed while still held, so no other process can have locked this inode in between (one that
  // opened it just before finds it gone from the path after its flock, and takes a new file). A
  // file this process may not remove (a read-only folder) stays: a lock no process holds never blocks.
  ::unlink(path_.c_str());
  ::close(fd_);
}

}  // namespace eagle::run
