// flock-based exclusive locks on outputs (see dir_lock.h).
#include "eagle/run/dir_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include <fmt/format.h>

#include "eagle/util/error.h"

namespace eagle::run {

DirLock::DirLock(std::filesystem::path lock_file, const std::string& what, bool remove_on_release)
    : path_(std::move(lock_file)), remove_(remove_on_release) {
  fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
  // A lock file another user created (0644) or one on a read-only mount: flock needs no write
  // access, so a lock file this process cannot write must not keep it out.
  if (fd_ < 0 && (errno == EACCES || errno == EROFS)) fd_ = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd_ < 0)
    throw Error(ErrorKind::output, "cannot create the lock file").file(path_.string()).found(std::strerror(errno));
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
        // A lock beside its output (remove_on_release) names the output's own lock file.
        .file(remove_ ? path_.string() : path_.parent_path().string())
        .found(pid.empty() ? "a lock held by another process" : fmt::format("the lock of pid {}", pid))
        .hint("wait for that run to end (or stop it), or choose another output");
  }
  // The holder's pid, for the message of the next process that tries.
  const std::string pid = std::to_string(::getpid()) + "\n";
  if (::ftruncate(fd_, 0) != 0 || ::pwrite(fd_, pid.data(), pid.size(), 0) != static_cast<ssize_t>(pid.size())) {
    // The lock is held; only the courtesy note is missing.
  }
}

DirLock::~DirLock() {
  if (fd_ < 0) return;
  // Removed while still held, so no other process can have locked this inode in between.
  if (remove_) ::unlink(path_.c_str());
  ::close(fd_);
}

}  // namespace eagle::run
