// output_dir/metrics.jsonl: one JSON object per logged step, appended and flushed line by line so
// that a killed run keeps every line it logged; a resumed run continues the same file.
#pragma once

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <optional>

#include <nlohmann/json.hpp>

namespace eagle::io {

class MetricsLog {
 public:
  static constexpr const char* kFileName = "metrics.jsonl";

  // resumed_step empty: a fresh run; an existing metrics.jsonl is replaced (the output_dir guard of
  // checkpoint_dir.h decides beforehand whether it may be). resumed_step given: the earlier lines
  // with step <= resumed_step are kept and the rest dropped, so the steps the resumed run repeats
  // are not logged twice; a torn last line (the process was killed mid-write) is dropped too.
  explicit MetricsLog(const std::filesystem::path& output_dir,
                      std::optional<std::int64_t> resumed_step = std::nullopt);
  ~MetricsLog();
  MetricsLog(const MetricsLog&) = delete;
  MetricsLog& operator=(const MetricsLog&) = delete;

  // Appends `record` (an object with an integer "step") as one line and flushes it.
  void write(const nlohmann::json& record);

  const std::filesystem::path& path() const { return path_; }
  // Lines kept from the earlier attempt when resuming; dropped ones (later steps or torn).
  std::size_t kept_lines() const { return kept_; }
  std::size_t dropped_lines() const { return dropped_; }

 private:
  std::filesystem::path path_;
  std::FILE* file_ = nullptr;
  std::size_t kept_ = 0, dropped_ = 0;
};

}  // namespace eagle::io
