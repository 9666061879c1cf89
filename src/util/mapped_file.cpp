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

MappedFile::MappedFile(const std::filesystem::path& path, std::string_view what, Access access, ErrorKind kind)
    : path_(path.string()) {
  const std::string name(what);
  // Before opening: opening a FIFO would block forever.
  require_regular_file(path, kind, name);
  const int fd = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw Error(kind, "cannot open " + name).file(path_).found(std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    throw Error(kind, "cannot stat " + name).file(path_).found(std::strerror(err));
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
