// summary.json and the CI gates.
#include "eagle/run/summary.h"

#include <cmath>

#include <fmt/format.h>

#include "eagle/util/fs_sync.h"

namespace eagle::run {
using json = nlohmann::json;

namespace {

json opt_number(const std::optional<double>& v) {
  return v && std::isfinite(*v) ? json(*v) : json(nullptr);
}

json numbers(const std::vector<double>& v) {
  json out = json::array();
  for (double a : v) out.push_back(std::isfinite(a) ? json(a) : json(nullptr));
  return out;
}

std::optional<double> gated_ar(const RunSummary& s) {
  if (!s.eval) return std::nullopt;
  const auto& a = s.eval->acceptance;
  if (s.gate_depth > 0) {
    const auto k = static_cast<std::size_t>(s.gate_depth);
    return k <= a.ar_by_depth.size() ? std::optional<double>(a.ar_by_depth[k - 1]) : std::nullopt;
  }
  if (s.gate_metric == "tree_ar") return a.tree_ar;
  if (s.gate_metric == "temp_ar") return a.temp_ar;
  if (s.gate_metric == "alpha_ar") return a.alpha_ar;
  return a.ar;
}

}  // namespace

std::string_view to_string(ExitReason r) {
  switch (r) {
    case ExitReason::completed: return "completed";
    case ExitReason::interrupted: return "interrupted";
    case ExitReason::gate_missed: return "gate_missed";
    case ExitReason::failed: return "failed";
  }
  return "?";
}

std::vector<GateCheck> check_gates(const RunSummary& s, double min_ar, double max_final_loss) {
  std::vector<GateCheck> out;
  if (min_ar > 0) {
    const auto v = gated_ar(s);
    bool ok = v && std::isfinite(*v) && *v >= min_ar;
    out.push_back(GateCheck{"min_ar", min_ar, v, ok});
  }
  if (max_final_loss > 0) {
    bool ok = s.final_loss && std::isfinite(*s.final_loss) && *s.final_loss <= max_final_loss;
    out.push_back(GateCheck{"max_final_loss", max_final_loss, s.final_loss, ok});
  }
  return out;
}

std::optional<Error> gate_error(const std::vector<GateCheck>& checks, std::string_view ar_name) {
  std::string missed, names;
  for (const auto& c : checks) {
    if (c.passed) continue;
    bool is_ar = c.name == "min_ar";
    std::string what = is_ar ? std::string(ar_name) : "final loss";
    std::string part;
    if (!c.value)
      part = fmt::format("{} was never measured ({} {:.4f})", what, c.name, c.threshold);
    else
      part = fmt::format("{} {:.4f} {} {} {:.4f}", what, *c.value, is_ar ? "<" : ">", c.name, c.threshold);
    missed += (missed.empty() ? "" : "; ") + part;
    names += (names.empty() ? "" : ", ") + c.name;
  }
  if (missed.empty()) return std::nullopt;
  return Error(ErrorKind::gate, "CI gate missed: " + missed).place(names);
}

std::optional<Error> apply_gates(RunSummary& s, double min_ar, double max_final_loss) {
  s.gates = check_gates(s, min_ar, max_final_loss);
  if (s.exit_reason != ExitReason::completed) return std::nullopt;
  auto error = gate_error(s.gates, s.gate_metric == "ar" ? "AR" : s.gate_metric);
  if (error) {
    s.exit_reason = ExitReason::gate_missed;
    s.exit_code = static_cast<int>(ExitCode::gate);
    s.detail = error->message();
  }
  return error;
}

json to_json(const RunSummary& s) {
  json gates = json::object();
  for (const auto& g : s.gates)
    gates[g.name] = {{"threshold", g.threshold}, {"value", opt_number(g.value)}, {"passed", g.passed}};
  const io::EvalStats none;
  const io::EvalStats& e = s.eval ? *s.eval : none;
  const io::AcceptanceStats& a = e.acceptance;
  return json{
      {"exit_reason", to_string(s.exit_reason)},
      {"detail", s.detail},
      {"exit_code", s.exit_code},
      {"steps", s.steps},
      {"total_steps", s.total_steps},
      {"resumed_from_step", s.resumed_from_step ? json(*s.resumed_from_step) : json(nullptr)},
      {"final_loss", opt_number(s.final_loss)},
      {"ar", opt_number(a.ar)},
      {"ar_ci95", opt_number(a.ar_ci95)},
      {"ar_by_depth", io::ar_by_depth_json(a)},
      {"ar_by_category", io::ar_by_category_json(a)},
      {"acc", numbers(e.acc)},
      {"tau", s.eval ? opt_number(e.tau) : json(nullptr)},
      {"eval_loss", s.eval ? opt_number(e.loss) : json(nullptr)},
      {"tree_ar", opt_number(a.tree_ar)},
      {"temp_ar", opt_number(a.temp_ar)},
      {"temp_ar_ci95", opt_number(a.temp_ar_ci95)},
      {"tree_temp_ar", opt_number(a.tree_temp_ar)},
      {"tree_temp_ar_ci95", opt_number(a.tree_temp_ar_ci95)},
      {"alpha", numbers(a.alpha)},
      {"alpha_ar", opt_number(a.alpha_ar)},
      {"best_metric", s.best_metric},
      {"real_tokens", opt_number(s.real_tokens)},
      {"tokens_per_s", opt_number(s.tokens_per_s)},
      {"wall_time_s", opt_number(s.wall_time_s)},
      {"model_flops", opt_number(s.model_flops)},
      {"tflops", opt_number(s.tflops)},
      {"mfu", opt_number(s.mfu)},
      {"peak_tflops", opt_number(s.peak_tflops)},
      {"peak_tflops_source", s.peak_tflops_source},
      {"best_step", s.best_step ? json(*s.best_step) : json(nullptr)},
      {"gates", gates},
  };
}

void write_summary(const std::filesystem::path& output_dir, const RunSummary& s) {
  util::write_file_atomic(output_dir / "summary.json", to_json(s).dump(2) + "\n");
}

}  // namespace eagle::run
