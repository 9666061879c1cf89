// create_exclusive (see exclusive_file.h).
#include "eagle/util/exclusive_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace eagle::util {

int create_exclusive(const std::filesystem::path& path, ErrorKind kind) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0 && errno == EEXIST) {
    struct stat st {};
    // A regular file of this name is a leftover of a dead writer (the name holds a live pid only
    // while that writer runs); anything else, a symlink above all, was put there by someone else.
    if (::lstat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::unlink(path.c_str()) == 0)
      fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    else
      throw Error(kind, "a file the tool creates already exists and is not a regular file")
          .file(path.string())
          .expected("no file of this name, or a regular file left by a stopped run")
          .found(S_ISLNK(st.st_mode) ? "a symbolic link" : "not a regular file")
          .hint("the tool never writes through a link it did not create: remove it");
  }
  if (fd < 0) throw Error(kind, "cannot create the file").file(path.string()).found(std::strerror(errno));
  return fd;
}

}  // namespace eagle::util
