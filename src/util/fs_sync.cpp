// Durable file writes (temporary name, fsync, rename, fsync of the folder) and the one temporary-name rule.
#include "eagle/util/fs_sync.h"

#include <ext/stdio_filebuf.h>
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <string>

#include <fmt/format.h>

#include "eagle/util/error.h"
#include "eagle/util/exclusive_file.h"

namespace eagle::util {
namespace fs = std::filesystem;

namespace {

Error os_error(const fs::path& path, const std::string& what, int err) {
  Error e(ErrorKind::output, what);
  e.file(path.string());
  if (err != 0) e.found(std::strerror(err));
  return e;
}

fs::path folder_of(const fs::path& path) { return path.parent_path().empty() ? fs::path(".") : path.parent_path(); }

bool all_digits(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
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

fs::path temporary_name(const fs::path& path) {
  return folder_of(path) / (".tmp-" + path.filename().string() + "." + std::to_string(::getpid()));
}

std::vector<fs::path> remove_dead_temporaries(const fs::path& path) {
  const std::string prefix = ".tmp-" + path.filename().string() + ".";  // temporary_name's, less the pid
  std::vector<fs::path> removed;
  std::error_code ec;
  for (fs::directory_iterator it(folder_of(path), ec), end; !ec && it != end; it.increment(ec)) {
    const auto name = it->path().filename().string();
    if (!name.starts_with(prefix) || !all_digits(std::string_view(name).substr(prefix.size()))) continue;
    const auto pid = std::strtoll(name.c_str() + prefix.size(), nullptr, 10);
    if (pid <= 0 || pid > std::numeric_limits<pid_t>::max() || ::kill(static_cast<pid_t>(pid), 0) == 0 ||
        errno != ESRCH)
      continue;
    std::error_code rm;
    fs::remove_all(it->path(), rm);
    if (!rm) removed.push_back(it->path());
  }
  return removed;
}

fs::path temporary_folder_name(const fs::path& path) { return folder_of(path) / (".tmp-" + path.filename().string()); }

bool is_temporary(std::string_view name, std::string_view of) {
  constexpr std::string_view kPrefix = ".tmp-";
  if (of.empty()) {
    if (name.starts_with(kPrefix)) return true;
    for (std::string_view infix : {".tmp.", ".tmp-"}) {
      const auto at = name.rfind(infix);
      if (at != std::string_view::npos && at > 0 && all_digits(name.substr(at + infix.size()))) return true;
    }
    return false;
  }
  const std::string target(of);
  if (name == std::string(kPrefix) + target) return true;
  for (const std::string& head : {std::string(kPrefix) + target + ".", target + ".tmp.", target + ".tmp-"})
    if (name.starts_with(head) && all_digits(name.substr(head.size()))) return true;
  return false;
}

void write_atomic(const fs::path& path, const std::function<void(std::ostream&)>& write) {
  const fs::path tmp = temporary_name(path);
  const int fd = create_exclusive(tmp, ErrorKind::output);
  try {
    // The stream writes to the descriptor opened with O_EXCL | O_NOFOLLOW: never through a link.
    __gnu_cxx::stdio_filebuf<char> buf(fd, std::ios::out | std::ios::binary);
    std::ostream out(&buf);
    errno = 0;
    write(out);
    out.flush();
    if (!out) throw os_error(tmp, "write failed", errno).hint("is the disk full?");
    if (::fsync(fd) != 0) throw os_error(tmp, "fsync failed", errno);
  } catch (...) {
    ::unlink(tmp.c_str());
    throw;
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    int err = errno;
    ::unlink(tmp.c_str());
    throw os_error(path, "cannot rename the temporary file into place", err);
  }
  fsync_path(folder_of(path));
}

void write_file_atomic(const fs::path& path, std::string_view content) {
  write_atomic(path,
               [&](std::ostream& out) { out.write(content.data(), static_cast<std::streamsize>(content.size())); });
}

void require_regular_file(const fs::path& path, ErrorKind kind, std::string_view what) {
  std::error_code ec;
  const auto st = fs::status(path, ec);
  if (fs::is_regular_file(st)) return;
  std::error_code lec;
  if (!fs::exists(st) && fs::is_symlink(fs::symlink_status(path, lec))) {
    const auto target = fs::read_symlink(path, lec);
    throw Error(kind, std::string(what) + " is a dangling symbolic link")
        .file(path.string())
        .expected("a regular file")
        .found(fmt::format("a link to {}, which does not exist", lec ? std::string("?") : target.string()));
  }
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
