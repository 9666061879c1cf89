// A whole file memory-mapped for reading, unmapped when the object dies; every failure an Error
// naming the file.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

#include "eagle/util/error.h"

namespace eagle::util {

class MappedFile {
 public:
  // read_only: pages are read-only (a stray write crashes). copy_on_write: private and writable, so
  // an in-place op on memory handed out (a zero-copy tensor) copies the page instead of crashing or
  // writing to the file (the file is opened read-only either way).
  enum class Access { read_only, copy_on_write };
  // follow: a symbolic link is read through (model folders are links into a cache). refuse: `path`
  // itself must not be a link and is opened non-blocking (O_NOFOLLOW | O_NONBLOCK, then fstat): for
  // files a server names, where a planted link or FIFO must neither redirect nor block the read.
  enum class Links { follow, refuse };

  // Maps all of `path` (an empty file maps to no bytes); `what` names it in the errors ("the
  // dataset file"), which are Error(kind): not a regular file, cannot open, cannot stat, cannot map.
  explicit MappedFile(const std::filesystem::path& path, std::string_view what = "the file",
                      Access access = Access::read_only, ErrorKind kind = ErrorKind::input,
                      Links links = Links::follow);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const std::uint8_t* data() const { return data_; }
  // The bytes of a copy_on_write mapping, writable (private to this process).
  std::uint8_t* writable_data() const { return data_; }
  std::size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::uint8_t* data_ = nullptr;
  std::size_t size_ = 0;
};

}  // namespace eagle::util
