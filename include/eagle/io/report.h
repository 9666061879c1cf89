// The run report: one self-contained HTML file (inline SVG, no script, no network) drawn from what a
// run folder holds: metrics.jsonl (loss, acc per TTT step, AR over steps, throughput, memory),
// summary.json (how the run ended, AR by depth, AR per category) and config.json (the options).
// `eagle-train report RUN_DIR` writes it, and so does every training run at its end.
#pragma once

#include <cstddef>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace eagle::io {

// What one run folder holds, read without interpreting more than the report needs.
struct RunRecords {
  std::filesystem::path dir;
  std::vector<nlohmann::json> steps;  // metrics.jsonl objects with "loss" (training windows)
  std::vector<nlohmann::json> evals;  // metrics.jsonl objects with "eval_loss" (evaluations)
  nlohmann::json summary;             // summary.json; null while the run is going (or was killed)
  nlohmann::json options;             // config.json (the resolved options); null if absent
  bool torn_last_line = false;        // metrics.jsonl ended in a partial line (a killed run)
};

inline constexpr const char* kReportFileName = "report.html";

// Reads dir/metrics.jsonl (required), dir/summary.json and dir/config.json (each optional).
// A malformed line other than a torn last one is an error naming the file and line; so is a
// summary.json or config.json that is not a JSON object.
RunRecords read_run_folder(const std::filesystem::path& dir);

// The report's HTML. Sections whose numbers the run did not record say so instead of drawing.
std::string render_report(const RunRecords& records);

// Reads `dir`, writes dir/report.html atomically and returns its path.
std::filesystem::path write_report(const std::filesystem::path& dir);

// The training run's last act: write_report, logging its path; a failure to draw it is a warning
// (the run's own results are already saved).
void write_report_after_run(const std::filesystem::path& dir);

}  // namespace eagle::io
