// The resumable JSONL writer of generate (see sample_writer.h).
#include "eagle/data/sample_writer.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "eagle/util/error.h"
#include "eagle/util/exclusive_file.h"
#include "eagle/util/fs_sync.h"
#include "eagle/util/json_file.h"
#include "eagle/util/log.h"

namespace eagle::data {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr const char* kProgressFormat = "eagle-train generate progress";
constexpr int kProgressVersion = 1;

Error os_error(const std::string& path, const std::string& what) {
  return Error(ErrorKind::output, what).file(path).found(std::strerror(errno));
}

json read_progress(const std::string& path) {
  constexpr const char* kStartOver = "remove it and the .partial file beside it to start over";
  const json j = util::read_json_object(path, "progress file", kStartOver, kStartOver);
  const bool ok = j.value("format", "") == kProgressFormat && j.value("version", 0) == kProgressVersion &&
                  j.contains("settings") && j["samples_done"].is_number_unsigned() && j["bytes"].is_number_unsigned();
  EAGLE_CHECK(ok, Error(ErrorKind::input, "not a progress file of this version")
                      .file(path)
                      .expected(fmt::format("\"format\": \"{}\", \"version\": {}", kProgressFormat, kProgressVersion))
                      .hint(kStartOver));
  return j;
}

// Whether two recorded values are the same; a path is the same file however it is spelled
// (./model, model, an absolute path, a symlink to it).
bool same_setting(const std::string& key, const json& a, const json& b) {
  if (a == b) return true;
  const bool is_path = key == "model_name_or_path" || key.ends_with("_path");
  if (!is_path || !a.is_string() || !b.is_string()) return false;
  std::error_code e1, e2;
  const auto pa = fs::weakly_canonical(a.get<std::string>(), e1);
  const auto pb = fs::weakly_canonical(b.get<std::string>(), e2);
  return !e1 && !e2 && pa == pb;
}

// The first setting whose value differs, for the error message.
std::string first_difference(const json& recorded, const json& now) {
  for (const auto& [key, value] : now.items())
    if (!recorded.contains(key) || !same_setting(key, recorded[key], value)) return key;
  for (const auto& [key, value] : recorded.items())
    if (!now.contains(key)) return key;
  return "";
}

}  // namespace

std::string sample_jsonl(const Sample& s) {
  return fmt::format("{{\"input_ids\":[{}],\"loss_mask\":[{}]}}\n", fmt::join(s.input_ids, ","),
                     fmt::join(s.loss_mask, ","));
}

namespace {

Error exists_error(const std::string& output) {
  return Error(ErrorKind::output, "the output already exists")
      .file(output)
      .hint("choose another --output or remove the old one");
}

// The progress file of a finished run of output (complete, and output of its recorded size), or null.
json completion_record(const std::string& output) {
  const auto progress = output + kProgressSuffix;
  std::error_code ec;
  if (!fs::is_regular_file(progress, ec)) return json();
  const json p = read_progress(progress);
  if (!p.value("complete", false)) return json();
  const auto size = fs::file_size(output, ec);
  return !ec && size == p["bytes"].get<std::uint64_t>() ? p : json();
}

}  // namespace

void SampleWriter::check_output(const std::string& output) {
  EAGLE_CHECK(output.size() > 6 && output.compare(output.size() - 6, 6, ".jsonl") == 0,
              Error(ErrorKind::usage, "the output must be a .jsonl file")
                  .place("--output")
                  .found(output)
                  .hint("prepare and train read .jsonl files"));
  std::error_code ec;
  EAGLE_CHECK(!fs::exists(output, ec) || !completion_record(output).is_null(), exists_error(output));
}

json SampleWriter::finished(const std::string& output, const json& settings) {
  const json p = completion_record(output);
  EAGLE_CHECK(!p.is_null(), exists_error(output));
  const auto key = first_difference(p["settings"], settings);
  EAGLE_CHECK(key.empty(), Error(ErrorKind::usage, "the output was generated with other settings")
                               .file(output + kProgressSuffix)
                               .place(fmt::format("setting \"{}\"", key))
                               .expected(settings.value(key, json()).dump())
                               .found(p["settings"].value(key, json()).dump())
                               .hint(fmt::format("choose another --output, or remove {} and {} to generate it again",
                                                 output, output + kProgressSuffix)));
  return p.value("counts", json());
}

SampleWriter::SampleWriter(const std::string& output, const json& settings)
    : output_(output), part_(output + kPartSuffix), progress_(output + kProgressSuffix), settings_(settings) {
  check_output(output_);
  std::error_code ec;
  EAGLE_CHECK(!fs::exists(output_, ec), exists_error(output_));
  // A finished run's record whose output was removed since: this run starts over.
  const bool resuming = fs::exists(progress_, ec) && !read_progress(progress_).value("complete", false);
  if (resuming) {
    const json p = read_progress(progress_);
    const auto key = first_difference(p["settings"], settings_);
    EAGLE_CHECK(key.empty(), Error(ErrorKind::usage, "an interrupted run with other settings left its progress here")
                                 .file(progress_)
                                 .place(fmt::format("setting \"{}\"", key))
                                 .expected(settings_.value(key, json()).dump())
                                 .found(p["settings"].value(key, json()).dump())
                                 .hint(fmt::format("rerun with the same options to continue it, or remove {} and "
                                                   "{} to start over",
                                                   progress_, part_)));
    samples_done_ = p["samples_done"].get<std::uint64_t>();
    bytes_ = p["bytes"].get<std::uint64_t>();
    resumed_counts_ = p.value("counts", json());
    EAGLE_CHECK(fs::exists(part_, ec) && fs::file_size(part_, ec) >= bytes_,
                Error(ErrorKind::input, "the part file is shorter than its progress file records")
                    .file(part_)
                    .expected(fmt::format("at least {} bytes", bytes_))
                    .hint(fmt::format("remove {} and {} to start over", progress_, part_)));
    log::info("data", "resuming {}: {} samples done, {} bytes kept", output_, samples_done_, bytes_);
  }
  // Never through a link planted at the part file's name: resumed, O_NOFOLLOW; fresh, created with
  // O_EXCL (a part file without progress holds nothing committed and is replaced).
  fd_ = resuming ? ::open(part_.c_str(), O_WRONLY | O_CLOEXEC | O_NOFOLLOW)
                 : util::create_exclusive(part_, ErrorKind::output);
  if (fd_ < 0)
    throw os_error(part_, "cannot open the part file")
        .hint("a symbolic link there is never written through: remove it and the progress file to start over");
  // Bytes past the committed ones belong to samples that were never recorded as done.
  if (::ftruncate(fd_, static_cast<off_t>(bytes_)) != 0 || ::lseek(fd_, 0, SEEK_END) < 0)
    throw os_error(part_, "cannot cut the part file back to its committed bytes");
  if (samples_done_ == 0) commit(json());  // the progress file exists from the start
}

SampleWriter::~SampleWriter() {
  if (fd_ >= 0) ::close(fd_);
}

void SampleWriter::write(const Sample& s) {
  const auto line = sample_jsonl(s);
  buffer_ += line;
  bytes_ += line.size();
  ++samples_done_;
}

void SampleWriter::skip() { ++samples_done_; }

void SampleWriter::commit(const json& counts) {
  const char* p = buffer_.data();
  std::size_t left = buffer_.size();
  while (left > 0) {
    ssize_t n = ::write(fd_, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw os_error(part_, "cannot write the part file");
    p += n;
    left -= static_cast<std::size_t>(n);
  }
  buffer_.clear();
  if (::fdatasync(fd_) != 0) throw os_error(part_, "fdatasync of the part file failed");
  write_progress(counts, /*complete=*/false);
}

void SampleWriter::write_progress(const json& counts, bool complete) const {
  json j{
      {"format", kProgressFormat}, {"version", kProgressVersion}, {"output", output_}, {"samples_done", samples_done_},
      {"bytes", bytes_},           {"settings", settings_},       {"counts", counts}};
  if (complete) j["complete"] = true;
  util::write_file_atomic(progress_, j.dump(1) + "\n");
}

void SampleWriter::finish(const json& counts) {
  commit(counts);
  ::close(fd_);
  fd_ = -1;
  std::error_code ec;
  fs::rename(part_, output_, ec);
  EAGLE_CHECK(!ec, Error(ErrorKind::output, "cannot rename the part file").file(part_).found(ec.message()));
  const auto dir = fs::path(output_).parent_path();
  util::fsync_path(dir.empty() ? fs::path(".") : dir);
  // The record a rerun reads to find nothing to do, written after the rename: it never claims an
  // output that is not there.
  write_progress(counts, /*complete=*/true);
}

}  // namespace eagle::data
