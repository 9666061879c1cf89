// Read-only and copy-on-write mappings of whole files (see mapped_file.h).
#include "eagle/util/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "eagle/util/fs_sync.h"

namespace eagle::util {

MappedFile::MappedFile(const std::filesystem::path& path, std::string_view what, Access access, ErrorKind kind,
                       Links links)
    : path_(path.string()) {
  const std::string name(what);
  // Before opening: opening a FIFO would block forever (refuse: the non-blocking open and fstat check it).
  if (links == Links::follow) require_regular_file(path, kind, name);
  const int flags = O_RDONLY | O_CLOEXEC | (links == Links::refuse ? O_NOFOLLOW | O_NONBLOCK : 0);
  const int fd = ::open(path_.c_str(), flags);
  if (fd < 0 && errno == ELOOP && links == Links::refuse)
    throw Error(kind, name + " is a symbolic link").file(path_).expected("a regular file, never read through a link");
  if (fd < 0) throw Error(kind, "cannot open " + name).file(path_).found(std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    throw Error(kind, "cannot stat " + name).file(path_).found(std::strerror(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    throw Error(kind, name + " is not a regular file")
        .file(path_)
        .expected("a regular file")
        .found(S_ISFIFO(st.st_mode)  ? "a FIFO (named pipe)"
               : S_ISDIR(st.st_mode) ? "a folder"
                                     : "not a regular file");
  }
  size_ = static_cast<std::size_t>(st.st_size);
  if (size_ > 0) {
    const int prot = access == Access::copy_on_write ? PROT_READ | PROT_WRITE : PROT_READ;
    void* p = ::mmap(nullptr, size_, prot, MAP_PRIVATE, fd, 0);
    const int err = errno;
    ::close(fd);
    if (p == MAP_FAILED) throw Error(kind, "cannot map " + name).file(path_).found(std::strerror(err));
    data_ = static_cast<std::uint8_t*>(p);
  } else {
    ::close(fd);
  }
}

MappedFile::~MappedFile() {
  if (data_ != nullptr) ::munmap(data_, size_);
}

}  // namespace eagle::util
