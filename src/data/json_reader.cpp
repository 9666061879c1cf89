// Sample files: listing (folders, extensions), reading JSONL in chunks and JSON arrays whole, plain
// or gzip-compressed, handing each sample to the SampleParser.
#include "eagle/data/json_reader.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <set>

#include "eagle/util/error.h"
#include "eagle/util/fs_sync.h"
#include "sample_parser.h"

namespace eagle::data {
namespace {

namespace fs = std::filesystem;
constexpr std::size_t kPadding = 64;      // simdjson's SIMDJSON_PADDING
constexpr std::size_t kChunk = 8u << 20;  // JSONL read size
constexpr std::size_t kGzChunk = 1u << 20;

bool ends_with(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

bool is_gz(const std::string& p) { return ends_with(p, ".gz"); }

// Editors on Windows write a UTF-8 byte-order mark; it becomes three spaces (JSON whitespace).
void blank_bom(char* p, std::size_t n) {
  if (n >= 3 && std::memcmp(p, "\xEF\xBB\xBF", 3) == 0) std::memset(p, ' ', 3);
}
bool is_array_ext(const std::string& p) { return ends_with(p, ".json") || ends_with(p, ".json.gz"); }

// Bytes of a file, plain or gzip; raw_offset() is the position in the file itself (for progress).
class ByteSource {
 public:
  explicit ByteSource(const std::string& path) : path_(path) {
    util::require_regular_file(path, ErrorKind::input, "the data file");
    if (is_gz(path)) {
      gz_ = gzopen(path.c_str(), "rb");
      if (!gz_) throw open_error();
      gzbuffer(gz_, kGzChunk);
    } else {
      fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
      if (fd_ < 0) throw open_error();
      posix_fadvise(fd_, 0, 0, POSIX_FADV_SEQUENTIAL);
    }
  }
  ~ByteSource() {
    if (gz_) gzclose(gz_);
    if (fd_ >= 0) ::close(fd_);
  }
  ByteSource(const ByteSource&) = delete;
  ByteSource& operator=(const ByteSource&) = delete;

  std::size_t read(char* dst, std::size_t n) {
    if (gz_) {
      int got = gzread(gz_, dst, static_cast<unsigned>(std::min<std::size_t>(n, 1u << 30)));
      int errnum = Z_OK;
      const char* msg = got <= 0 ? gzerror(gz_, &errnum) : nullptr;
      // A cut-off stream reads as a short file; zlib reports it only through gzerror.
      if (got < 0 || errnum == Z_BUF_ERROR)
        throw Error(ErrorKind::input,
                    errnum == Z_BUF_ERROR ? "the gzip file is truncated" : "cannot decompress the file")
            .file(path_)
            .found(msg ? msg : "zlib error");
      return static_cast<std::size_t>(got);
    }
    ssize_t got = ::read(fd_, dst, n);
    if (got < 0) throw Error(ErrorKind::input, "cannot read the file").file(path_).found(std::strerror(errno));
    raw_ += static_cast<std::uint64_t>(got);
    return static_cast<std::size_t>(got);
  }
  std::uint64_t raw_offset() const { return gz_ ? static_cast<std::uint64_t>(gzoffset(gz_)) : raw_; }

 private:
  Error open_error() const {
    return Error(ErrorKind::input, "cannot open the file").file(path_).found(std::strerror(errno));
  }
  std::string path_;
  gzFile gz_ = nullptr;
  int fd_ = -1;
  std::uint64_t raw_ = 0;
};

void read_jsonl(const std::string& path, SampleParser& parser, const std::function<void(std::uint64_t)>& progress) {
  ByteSource src(path);
  // Small files get a small buffer (folders of many small files); the buffer doubles whenever an
  // unfinished line fills half of it.
  std::error_code ec;
  std::uint64_t size = is_gz(path) ? kChunk : fs::file_size(path, ec);
  std::size_t cap = ec ? kChunk : static_cast<std::size_t>(std::clamp<std::uint64_t>(size + 2, 4096, kChunk));
  std::vector<char> buf(cap + kPadding);
  std::size_t have = 0;  // bytes in buf not yet parsed
  std::uint64_t line = 0;
  bool eof = false, first = true;
  while (!eof) {
    std::size_t room = buf.size() - kPadding;
    if (room - have < room / 2) buf.resize(2 * room + kPadding);
    std::size_t got = src.read(buf.data() + have, buf.size() - kPadding - have);
    eof = got == 0;
    have += got;
    if (first) blank_bom(buf.data(), have);
    first = false;
    if (eof && have > 0 && buf[have - 1] != '\n') buf[have++] = '\n';  // last line without a newline
    char* p = buf.data();
    char* end = buf.data() + have;
    std::memset(end, ' ', kPadding);
    while (p < end) {
      char* nl = static_cast<char*>(std::memchr(p, '\n', static_cast<std::size_t>(end - p)));
      if (!nl) break;
      ++line;
      std::size_t len = static_cast<std::size_t>(nl - p);
      if (len && p[len - 1] == '\r') --len;
      // Blank lines are allowed (files often end with one).
      std::size_t first = 0;
      while (first < len && (p[first] == ' ' || p[first] == '\t')) ++first;
      if (first < len) parser.parse_line(path, line, p, len);
      p = nl + 1;
    }
    have = static_cast<std::size_t>(end - p);
    std::memmove(buf.data(), p, have);
    if (progress) progress(src.raw_offset());
  }
}

void read_array(const std::string& path, SampleParser& parser, const std::function<void(std::uint64_t)>& progress) {
  ByteSource src(path);
  std::vector<char> buf;
  std::size_t have = 0;
  for (;;) {
    buf.resize(have + kChunk + kPadding);
    std::size_t got = src.read(buf.data() + have, kChunk);
    if (got == 0) break;
    have += got;
  }
  std::memset(buf.data() + have, ' ', kPadding);
  blank_bom(buf.data(), have);
  std::uint64_t raw = src.raw_offset();
  // For .gz the parsed offset is scaled to the compressed size.
  double scale = have ? static_cast<double>(raw) / static_cast<double>(have) : 1.0;
  parser.parse_array(path, buf.data(), have, [&](std::uint64_t at) {
    if (progress) progress(static_cast<std::uint64_t>(static_cast<double>(at) * scale));
  });
  if (progress) progress(raw);
}

}  // namespace

bool is_sample_file(const std::string& path) {
  return ends_with(path, ".jsonl") || ends_with(path, ".json") || ends_with(path, ".jsonl.gz") ||
         ends_with(path, ".json.gz");
}

namespace {

// The sample files below a folder, recursively. Symlinked folders are followed once each (a link
// back up the tree would otherwise loop); an entry with a sample file's name that is not a regular
// file (a dangling link, a FIFO, a device, a socket) is refused by name, never opened (opening a
// FIFO blocks) nor skipped (its samples would be missing silently).
void walk_folder(const fs::path& root, std::vector<std::string>& found) {
  std::set<std::pair<dev_t, ino_t>> seen;
  std::vector<fs::path> pending{root};
  while (!pending.empty()) {
    fs::path dir = pending.back();
    pending.pop_back();
    struct stat st {};
    if (::stat(dir.c_str(), &st) != 0 || !seen.insert({st.st_dev, st.st_ino}).second) continue;
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator(dir, ec)) {
      std::error_code e2;
      if (is_sample_file(entry.path().string())) {  // a folder named c.jsonl too: refused, not walked as a folder
        util::require_regular_file(entry.path(), ErrorKind::input, "a data file of the folder");
        found.push_back(entry.path().string());
      } else if (entry.is_directory(e2)) {
        pending.push_back(entry.path());
      }
    }
    if (ec) throw Error(ErrorKind::input, "cannot read the folder").file(dir.string()).found(ec.message());
  }
}

}  // namespace

std::vector<std::string> list_sample_files(const std::vector<std::string>& inputs) {
  std::vector<std::string> files;
  for (const auto& in : inputs) {
    std::error_code ec;
    auto st = fs::status(in, ec);
    if (ec || !fs::exists(st))
      throw Error(ErrorKind::input, "input not found")
          .file(in)
          .expected("a .jsonl/.json(.gz) file or a folder of them");
    if (fs::is_directory(st)) {
      EAGLE_CHECK(!fs::exists(fs::path(in) / "train.bin"),
                  Error(ErrorKind::input, "the folder is a prepared dataset, not sample files")
                      .file(in)
                      .hint("give it to train as --data_path, or give prepare the files it was made from"));
      std::vector<std::string> found;
      walk_folder(in, found);
      if (found.empty())
        throw Error(ErrorKind::input, "the folder holds no sample files")
            .file(in)
            .expected("files named *.jsonl, *.json, *.jsonl.gz or *.json.gz");
      std::sort(found.begin(), found.end());
      files.insert(files.end(), found.begin(), found.end());
    } else {
      if (!is_sample_file(in))
        throw Error(ErrorKind::input, "unknown input file type")
            .file(in)
            .expected("a name ending in .jsonl, .json, .jsonl.gz or .json.gz");
      util::require_regular_file(in, ErrorKind::input, "the data file");
      files.push_back(in);
    }
  }
  return files;
}

ReadCounts read_sample_files(const std::vector<std::string>& files, const ReadOptions& opts, FlatBuilder& out,
                             const ProgressFn& progress) {
  ReadCounts counts;
  SampleParser parser(opts, out, counts);
  std::uint64_t done = 0;  // bytes of the files finished
  for (const auto& f : files) {
    std::error_code ec;
    std::uint64_t size = fs::file_size(f, ec);
    auto report = [&](std::uint64_t at) {
      if (progress) progress(done + at, counts.kept);
    };
    // A .json file holds an array of samples unless it starts like JSONL (with an object).
    bool array = false;
    if (is_array_ext(f)) {
      ByteSource probe(f);
      char c = ' ';
      auto skipped = [](char ch) { return ch == ' ' || ch == '\n' || ch == '\r' || ch == '\t' || (ch & 0x80); };  // BOM
      while (probe.read(&c, 1) == 1 && skipped(c)) {
      }
      array = c == '[';
    }
    if (array)
      read_array(f, parser, report);
    else
      read_jsonl(f, parser, report);
    done += ec ? 0 : size;
  }
  counts.input_bytes = done;
  return counts;
}

}  // namespace eagle::data
