// metrics.jsonl: fresh or resumed, one flushed JSON object per line.
#include "eagle/io/metrics_log.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <string>

#include "eagle/util/error.h"
#include "eagle/util/fs_sync.h"
#include "eagle/util/log.h"

namespace eagle::io {
namespace fs = std::filesystem;
using json = nlohmann::json;

MetricsLog::MetricsLog(const fs::path& output_dir, std::optional<std::int64_t> resumed_step)
    : path_(output_dir / kFileName) {
  std::error_code ec;
  fs::create_directories(output_dir, ec);
  if (ec)
    throw Error(ErrorKind::output, "cannot create the output folder").file(output_dir.string()).found(ec.message());
  // Anything but a regular file under the log's name is refused before it is opened: a FIFO planted as
  // metrics.jsonl blocked the open forever (and with it the first SIGTERM).
  if (fs::exists(path_, ec) || fs::is_symlink(path_, ec))
    util::require_regular_file(path_, ErrorKind::output, "the run's metrics log");
  if (resumed_step && fs::exists(path_)) {
    std::ifstream in(path_);
    std::string line, kept;
    std::size_t line_no = 0;
    while (std::getline(in, line)) {
      ++line_no;
      json doc = json::parse(line, nullptr, /*allow_exceptions=*/false);
      bool valid = doc.is_object() && doc.contains("step") && doc["step"].is_number_integer();
      if (valid && doc["step"].get<std::int64_t>() <= *resumed_step) {
        kept += line + "\n";
        ++kept_;
      } else {
        if (!valid) log::warn("train", "{}: line {}: dropping a malformed line", path_.string(), line_no);
        ++dropped_;
      }
    }
    in.close();
    util::write_file_atomic(path_, kept);
    if (dropped_ > 0)
      log::info("train", "{}: kept {} lines up to step {}, dropped {} logged after it", path_.string(), kept_,
                *resumed_step, dropped_);
  }
  file_ = std::fopen(path_.c_str(), resumed_step ? "ab" : "wb");
  if (!file_)
    throw Error(ErrorKind::output, "cannot open the metrics log").file(path_.string()).found(std::strerror(errno));
}

MetricsLog::~MetricsLog() {
  if (file_) std::fclose(file_);
}

void MetricsLog::write(const json& record) {
  if (!record.is_object() || !record.contains("step") || !record["step"].is_number_integer())
    throw Error(ErrorKind::internal, "a metrics record needs an integer \"step\"")
        .file(path_.string())
        .found(record.dump());
  std::string line = record.dump() + "\n";
  if (std::fwrite(line.data(), 1, line.size(), file_) != line.size() || std::fflush(file_) != 0)
    throw Error(ErrorKind::output, "cannot write the metrics log").file(path_.string()).found(std::strerror(errno));
}

}  // namespace eagle::io
