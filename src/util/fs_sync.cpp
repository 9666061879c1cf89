// Durable file writes: temporary name, fsync, rename, fsync of the folder.
#include "eagle/util/fs_sync.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "eagle/util/error.h"

namespace eagle::util {
namespace fs = std::filesystem;

namespace {

Error os_error(const fs::path& path, const std::string& what, int err) {
  return Error(ErrorKind::output, what).file(path.string()).found(std::strerror(err));
}

}  // namespace

void fsync_path(const fs::path& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw os_error(path, "cannot open for fsync", errno);
  if (::fsync(fd) != 0) {
    int err = errno;
    ::close(fd);
    throw os_error(path, "fsync failed", err);
  }
  ::close(fd);
}

void fsync_tree(const fs::path& folder) {
  for (const auto& entry : fs::recursive_directory_iterator(folder))
    if (entry.is_regular_file() || entry.is_directory()) fsync_path(entry.path());
  fsync_path(folder);
}

void write_file_atomic(const fs::path& path, std::string_view content) {
  fs::path dir = path.parent_path().empty() ? fs::path(".") : path.parent_path();
  fs::path tmp = dir / (".tmp-" + path.filename().string() + "." + std::to_string(::getpid()));
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw os_error(tmp, "cannot create the temporary file", errno);
  const char* p = content.data();
  std::size_t left = content.size();
  while (left > 0) {
    ssize_t n = ::write(fd, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int err = errno;
      ::close(fd);
      ::unlink(tmp.c_str());
      throw os_error(tmp, "write failed", err);
    }
    p += n;
    left -= static_cast<std::size_t>(n);
  }
  int sync_rc = ::fsync(fd);
  int sync_err = errno;
  int close_rc = ::close(fd);
  if (sync_rc != 0 || close_rc != 0) {
    int err = sync_rc != 0 ? sync_err : errno;
    ::unlink(tmp.c_str());
    throw os_error(tmp, "fsync/close failed", err);
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    int err = errno;
    ::unlink(tmp.c_str());
    throw os_error(path, "cannot rename the temporary file into place", err);
  }
  fsync_path(dir);
}

void require_regular_file(const fs::path& path, ErrorKind kind, std::string_view what) {
  std::error_code ec;
  const auto st = fs::status(path, ec);
  if (fs::is_regular_file(st)) return;
  if (!fs::exists(st) && (!ec || ec == std::errc::no_such_file_or_directory))
    throw Error(kind, std::string(what) + " not found").file(path.string());
  std::string found = "not a regular file";
  if (ec) found = ec.message();
  else if (fs::is_directory(st)) found = "a folder";
  else if (fs::is_fifo(st)) found = "a FIFO (named pipe)";
  else if (fs::is_character_file(st) || fs::is_block_file(st)) found = "a device";
  else if (fs::is_socket(st)) found = "a socket";
  throw Error(kind, std::string(what) + " is not a regular file").file(path.string()).expected("a regular file").found(found);
}

}  // namespace eagle::util
