// The end of a run: output_dir/summary.json for CI smoke jobs and people, and the optional CI
// gates (min_ar, max_final_loss) that turn a finished run into a failure with a clear line.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "eagle/io/step_stats.h"
#include "eagle/util/error.h"

namespace eagle::run {

struct GateCheck {
  std::string name;              // "min_ar" or "max_final_loss"
  double threshold = 0.0;
  std::optional<double> value;   // what the run reached; empty: never measured
  bool passed = false;
};

// How a run ended: each reason has its exit code (completed 0, interrupted 130, gate_missed 6,
// failed: the error's code, 5 for a training failure).
enum class ExitReason { completed, interrupted, gate_missed, failed };
std::string_view to_string(ExitReason r);

struct RunSummary {
  ExitReason exit_reason = ExitReason::completed;
  std::string detail;                     // e.g. "SIGTERM", or the error line of a failure
  int exit_code = 0;                      // the process exit code (eagle::ExitCode)
  std::int64_t steps = 0;                 // optimizer steps done (including resumed ones)
  std::int64_t total_steps = 0;           // optimizer steps planned
  std::optional<std::int64_t> resumed_from_step;
  std::optional<double> final_loss;       // training loss of the last logging window
  std::optional<io::EvalStats> eval;      // the last evaluation (its metrics null in summary.json when none)
  std::string best_metric = "ar";         // what checkpoint-best uses (--best_metric)
  std::string gate_metric = "ar";         // the AR min_ar gates: ar, tree_ar, temp_ar, alpha_ar or ar@k
  std::int64_t gate_depth = 0;            // > 0: min_ar gates the chain AR at this depth (ar_by_depth[k-1])
  double real_tokens = 0.0;               // real (non-pad) tokens trained on, resumed steps included
  double tokens_per_s = 0.0;              // real tokens per second over this process's steps
  double wall_time_s = 0.0;               // seconds this process ran
  double model_flops = 0.0;               // model FLOPs of this process's steps (docs/training.md, MFU)
  std::optional<double> tflops;           // model_flops per second of its training time, in TFLOP/s
  std::optional<double> mfu;              // tflops / peak_tflops
  std::optional<double> peak_tflops;      // the peak of one device MFU is measured against
  std::string peak_tflops_source;         // how that peak was found (device/peak_flops.h)
  std::optional<std::int64_t> best_step;  // step of checkpoint-best, if any
  std::vector<GateCheck> gates;           // the gates checked (empty: none configured)
};

// The gates that are set (threshold > 0): min_ar passes when the gate_metric's AR (of eval; with gate_depth k,
// ar_by_depth[k-1], never measured when the evaluation drafted fewer) >= min_ar, max_final_loss
// when final_loss <= max_final_loss; a value never measured or not finite misses its gate.
std::vector<GateCheck> check_gates(const RunSummary& s, double min_ar, double max_final_loss);
// Error(gate) naming every missed gate on one line, e.g. "CI gate missed: AR 1.850 < min_ar
// 2.000"; empty when all passed.
std::optional<Error> gate_error(const std::vector<GateCheck>& checks, std::string_view ar_name = "AR");
// The gates of a completed run: fills s.gates; when one is missed, the run becomes gate_missed
// (exit code 6) and the error is returned. Runs that did not complete are only recorded.
std::optional<Error> apply_gates(RunSummary& s, double min_ar, double max_final_loss);

nlohmann::json to_json(const RunSummary& s);
// output_dir/summary.json, written atomically (temporary file, fsync, rename).
void write_summary(const std::filesystem::path& output_dir, const RunSummary& s);

}  // namespace eagle::run
