// The files of a vLLM hidden-states server (see server_files.h).
#include "eagle/features/server_files.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <filesystem>
#include <random>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "eagle/util/error.h"
#include "eagle/util/hash.h"

namespace eagle::features {

std::string server_request_prefix(const std::string& output_dir, std::int64_t rank) {
  std::uint64_t tag = 0;
  if (output_dir.empty()) {
    std::random_device rd;
    tag = (static_cast<std::uint64_t>(rd()) << 32) ^ rd();
  } else {
    std::error_code ec;
    auto dir = std::filesystem::weakly_canonical(std::filesystem::absolute(output_dir, ec), ec);
    tag = util::fnv1a(dir.string());
  }
  return fmt::format("eagle-{:016x}-r{}-", tag, rank);
}

std::int64_t remove_own_files(const std::string& storage, const std::string& prefix) {
  std::error_code ec;
  std::vector<std::filesystem::path> own;
  for (const auto& e : std::filesystem::directory_iterator(storage, ec)) {
    const auto name = e.path().filename().string();
    const bool ours = name.find(prefix) != std::string::npos &&
                      (name.ends_with(".safetensors") || name.ends_with(".safetensors.lock"));
    std::error_code lec;
    if (ours && std::filesystem::is_regular_file(e.symlink_status(lec))) own.push_back(e.path());
  }
  std::int64_t removed = 0;
  for (const auto& p : own) removed += std::filesystem::remove(p, ec) ? 1 : 0;  // unlink: never follows a link
  return removed;
}

std::string own_file(const server::HttpUrl& url, const std::string& storage, const std::string& path,
                     const std::string& id) {
  auto refuse = [&](const std::string& what) {
    return Error(ErrorKind::input, "the server named a hidden-states file " + what)
        .file(path)
        .place(url.text + " /v1/completions: kv_transfer_params.hidden_states_path")
        .expected(
            fmt::format("a file directly in target_server_storage {}, named after the request id {}", storage, id))
        .hint("set --target_server_storage to the server's shared_storage_path (docs/offline.md)");
  };
  const std::filesystem::path p(path);
  EAGLE_CHECK(p.is_absolute(), refuse("by a relative path"));
  for (const auto& part : p)
    EAGLE_CHECK(part != "." && part != "..", refuse("by a path with a \"" + part.string() + "\" component"));
  const auto name = p.filename().string();
  auto dir = std::filesystem::path(storage).lexically_normal();
  if (!dir.has_filename()) dir = dir.parent_path();  // a trailing slash
  EAGLE_CHECK(p.lexically_normal().parent_path() == dir, refuse("outside the storage folder"));
  EAGLE_CHECK(name.find(id + "-") != std::string::npos && name.ends_with(".safetensors"),
              refuse("that is not the file of this request"));
  return p.lexically_normal().string();
}

void wait_for_lock(const server::HttpUrl& url, const std::string& path, double timeout_s,
                   std::chrono::steady_clock::time_point t0, const std::function<void()>& poll) {
  const std::string lock_path = path + ".lock";
  for (;;) {
    // Never through a link, never blocking (a FIFO opens at once non-blocking, then is refused).
    const int fd = ::open(lock_path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (fd >= 0) {
      struct stat st {};
      const bool regular = ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
      const bool locked = regular && ::flock(fd, LOCK_SH | LOCK_NB) == 0;
      ::close(fd);
      EAGLE_CHECK(regular, Error(ErrorKind::input, "the server's lock file is not a regular file")
                               .file(lock_path)
                               .place(url.text)
                               .expected("a regular file")
                               .found(S_ISFIFO(st.st_mode) ? "a FIFO (named pipe)" : "another kind of file"));
      if (locked) return;
    } else if (errno == ELOOP) {
      throw Error(ErrorKind::input, "the server's lock file is a symbolic link")
          .file(lock_path)
          .place(url.text)
          .expected("a regular file, never opened through a link");
    } else {
      std::error_code ec;
      if (std::filesystem::exists(std::filesystem::symlink_status(path, ec))) return;  // written without a lock
    }
    poll();
    if (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() > timeout_s)
      throw Error(ErrorKind::input, "the server's hidden-states file is not readable here")
          .file(path)
          .place(url.text)
          .expected(fmt::format("the file and its .lock within {:.0f} s", timeout_s))
          .hint(
              "the trainer reads the files the server writes: run it on the server's machine or share "
              "shared_storage_path between them (the same path on both, e.g. an NFS mount; docs/offline.md)");
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

}  // namespace eagle::features
