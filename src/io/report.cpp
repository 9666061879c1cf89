// The run report: a run folder's metrics, summary and options drawn as one HTML file.
#include "eagle/io/report.h"

#include <cmath>
#include <fstream>
#include <limits>

#include <fmt/format.h>

#include "eagle/io/metrics_log.h"
#include "eagle/io/svg_chart.h"
#include "eagle/util/error.h"
#include "eagle/util/fs_sync.h"
#include "eagle/util/json_file.h"
#include "eagle/util/log.h"

namespace eagle::io {
namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

double number_or_nan(const json& j) { return j.is_number() ? j.get<double>() : kNaN; }

// (step, record[key]) for every record holding `key`; null (a non-finite value) breaks the line.
Series series_of(const std::vector<json>& records, const std::string& key, std::string name) {
  Series s{std::move(name), {}};
  for (const auto& r : records)
    if (r.contains(key)) s.points.emplace_back(number_or_nan(r["step"]), number_or_nan(r[key]));
  return s;
}

// One series per element of the array record[key] (acc_0, acc_1, ...).
std::vector<Series> array_series(const std::vector<json>& records, const std::string& key, const std::string& prefix) {
  std::vector<Series> out;
  for (const auto& r : records) {
    if (!r.contains(key) || !r[key].is_array()) continue;
    const json& a = r[key];
    for (std::size_t k = 0; k < a.size(); ++k) {
      if (out.size() <= k) out.push_back(Series{fmt::format("{}{}", prefix, k), {}});
      out[k].points.emplace_back(number_or_nan(r["step"]), number_or_nan(a[k]));
    }
  }
  return out;
}

std::string cell(const json& v) {
  if (v.is_null()) return "<span class=\"na\">n/a</span>";
  if (v.is_number_float()) return format_number(v.get<double>());
  if (v.is_string()) return html_escape(v.get<std::string>());
  return html_escape(v.dump());
}

std::string table(const std::vector<std::pair<std::string, json>>& rows) {
  std::string out = "<table>";
  for (const auto& [k, v] : rows) out += fmt::format("<tr><th>{}</th><td>{}</td></tr>", html_escape(k), cell(v));
  return out + "</table>";
}

std::string note(std::string_view text) { return fmt::format("<p class=\"na\">{}</p>", html_escape(text)); }

// The newest place that records `key`: summary.json, else the last evaluation line.
json latest(const RunRecords& r, const std::string& key) {
  if (r.summary.is_object() && r.summary.contains(key) && !r.summary[key].is_null()) return r.summary[key];
  for (auto it = r.evals.rbegin(); it != r.evals.rend(); ++it)
    if (it->contains(key)) return (*it)[key];
  return nullptr;
}

std::string overview(const RunRecords& r) {
  std::vector<std::pair<std::string, json>> rows;
  if (r.summary.is_object()) {
    for (const char* k : {"exit_reason",  "detail",    "steps",       "total_steps", "resumed_from_step",
                          "final_loss",   "ar",        "tree_ar",     "temp_ar",     "alpha_ar",
                          "tau",          "eval_loss", "best_metric", "best_step",   "real_tokens",
                          "tokens_per_s", "tflops",    "mfu",         "peak_tflops", "peak_tflops_source",
                          "wall_time_s"})
      if (r.summary.contains(k) && !(r.summary[k].is_string() && r.summary[k].get<std::string>().empty()))
        rows.emplace_back(k, r.summary[k]);
  } else {
    rows.emplace_back("exit_reason", "no summary.json: the run is going, or was killed");
    if (!r.steps.empty()) rows.emplace_back("last logged step", r.steps.back()["step"]);
  }
  if (r.torn_last_line) rows.emplace_back("metrics.jsonl", "its last line is torn (the process was killed)");
  return "<h2>Overview</h2>" + table(rows);
}

std::string by_depth(const RunRecords& r) {
  json d = latest(r, "ar_by_depth");
  std::string out = "<h2>Acceptance by depth</h2>";
  if (!d.is_array() || d.empty())
    return out + note("Not measured: this run recorded no ar_by_depth (the greedy chain AR at each served depth).");
  std::vector<Bar> bars;
  for (std::size_t k = 0; k < d.size(); ++k) bars.push_back(Bar{fmt::format("k={}", k + 1), number_or_nan(d[k]), {}});
  return out + bar_chart("AR by depth (drafted tokens per round)", bars, 1.0);
}

std::string by_category(const RunRecords& r) {
  json c = latest(r, "ar_by_category");
  std::string out = "<h2>Acceptance per category</h2>";
  if (!c.is_object() || c.empty()) return out + note("Not measured: the evaluation prompts carry no category field.");
  std::vector<Bar> bars;
  std::string rows = "<table><tr><th>category</th><th>prompts</th><th>AR</th><th>95% interval</th></tr>";
  for (const auto& [name, v] : c.items()) {
    double ar = v.is_object() && v.contains("ar") ? number_or_nan(v["ar"]) : number_or_nan(v);
    std::optional<double> ci;
    if (v.is_object() && v.contains("ar_ci95") && v["ar_ci95"].is_number()) ci = v["ar_ci95"].get<double>();
    bars.push_back(Bar{name, ar, ci});
    rows += fmt::format("<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>", html_escape(name),
                        v.is_object() && v.contains("count") ? cell(v["count"]) : "n/a", format_number(ar),
                        ci ? "&plusmn; " + format_number(*ci) : "n/a");
  }
  return out + bar_chart("AR per category", bars, 1.0) + rows + "</table>";
}

std::string options_section(const RunRecords& r) {
  std::string out = "<h2>Options</h2>";
  if (!r.options.is_object()) return out + note("No config.json in the run folder.");
  std::vector<std::pair<std::string, json>> rows;
  for (const auto& [k, v] : r.options.items()) rows.emplace_back(k, v);
  return out + table(rows);
}

const char* kStyle =
    "body{font-family:sans-serif;max-width:1320px;margin:1em auto;padding:0 1em;color:#222}"
    "h1{font-size:1.4em}h2{font-size:1.15em;margin-top:1.6em;border-bottom:1px solid #ccc}"
    "table{border-collapse:collapse;font-size:13px;margin:.4em 0}"
    "th,td{border:1px solid #ddd;padding:2px 8px;text-align:left;vertical-align:top}"
    "th{background:#f5f5f5;font-weight:normal}.na{color:#888}.charts{display:flex;flex-wrap:wrap;gap:8px}";

// eagle-train follow's rounds (metrics lines with "policy_version"): the policy version, the new draft's AR and the
// serving one's on the held-out shard, and the publish decision; empty for a train run.
std::string follow_rounds(const RunRecords& r) {
  std::string rows;
  auto text = [](const nlohmann::json& v) {
    return v.is_number_float() ? fmt::format("{:.4f}", v.get<double>()) : v.is_null() ? std::string("-") : v.dump();
  };
  for (const auto& e : r.evals) {
    if (!e.contains("policy_version")) continue;
    rows += "<tr>";
    for (const char* k :
         {"round", "step", "policy_version", "ar", "serving_version", "serving_ar", "published", "version"})
      rows += "<td>" + html_escape(e.contains(k) ? text(e[k]) : "-") + "</td>";
    rows += "</tr>";
  }
  if (rows.empty()) return {};
  return "<h2>Follow: rounds and publish decisions</h2><table><tr><th>round</th><th>step</th><th>policy version</th>"
         "<th>AR (new draft)</th><th>serving version</th><th>AR (serving)</th><th>published</th><th>serving after"
         "</th></tr>" +
         rows + "</table>";
}

}  // namespace

RunRecords read_run_folder(const fs::path& dir) {
  RunRecords r;
  r.dir = dir;
  const fs::path metrics = dir / MetricsLog::kFileName;
  util::require_regular_file(metrics, ErrorKind::input, "the run's metrics log");
  std::ifstream in(metrics);
  if (!in) throw Error(ErrorKind::input, "cannot read the run's metrics log").file(metrics.string());
  std::string line;
  std::size_t line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    json doc = json::parse(line, nullptr, /*allow_exceptions=*/false);
    bool valid = doc.is_object() && doc.contains("step") && doc["step"].is_number_integer();
    if (!valid) {
      if (in.peek() == std::char_traits<char>::eof()) {  // the last line: torn by a kill mid-write
        r.torn_last_line = true;
        break;
      }
      throw Error(ErrorKind::input, "malformed metrics line")
          .file(metrics.string())
          .place(fmt::format("line {}", line_no))
          .expected("one JSON object with an integer \"step\"")
          .found(line.substr(0, 80));
    }
    if (doc.contains("loss")) r.steps.push_back(doc);
    if (doc.contains("eval_loss")) r.evals.push_back(doc);
  }
  if (fs::exists(dir / "summary.json")) r.summary = util::read_json_object(dir / "summary.json", "the run summary");
  if (fs::exists(dir / "config.json")) r.options = util::read_json_object(dir / "config.json", "the run's options");
  return r;
}

std::string render_report(const RunRecords& r) {
  std::string title = "eagle-train run " + r.dir.filename().string();
  std::string out = fmt::format(
      "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{}</title><style>{}</style></head>"
      "<body><h1>{}</h1><p>{}</p>",
      html_escape(title), kStyle, html_escape(title), html_escape(fs::absolute(r.dir).string()));
  out += overview(r);
  out += "<h2>Loss</h2><div class=\"charts\">";
  out += line_chart("Loss", "step",
                    {series_of(r.steps, "loss", "train loss"), series_of(r.evals, "eval_loss", "held-out loss")});
  out += "</div><h2>Accuracy per TTT step</h2><div class=\"charts\">";
  out += line_chart("Training acc per TTT step", "step", array_series(r.steps, "acc", "acc_"));
  out += line_chart("Held-out acc per TTT step", "step", array_series(r.evals, "eval_acc", "acc_"));
  out += "</div><h2>Acceptance over steps</h2><div class=\"charts\">";
  out += line_chart("Acceptance length", "step",
                    {series_of(r.evals, "ar", "AR (chain)"), series_of(r.evals, "tree_ar", "tree AR"),
                     series_of(r.evals, "temp_ar", "temperature AR"), series_of(r.evals, "alpha_ar", "alpha AR"),
                     series_of(r.evals, "eval_tau", "held-out tau"), series_of(r.steps, "tau", "train tau")});
  out += "</div>" + by_depth(r) + by_category(r) + follow_rounds(r);
  out += "<h2>Throughput and memory</h2><div class=\"charts\">";
  out += line_chart("Real tokens per second", "step", {series_of(r.steps, "tokens_per_s", "tokens/s")});
  out += line_chart("Milliseconds per step", "step", {series_of(r.steps, "ms_per_step", "ms/step")});
  out += line_chart("Model TFLOP/s per device", "step", {series_of(r.steps, "tflops", "TFLOP/s")});
  out += line_chart("MFU (model FLOPs / peak)", "step", {series_of(r.steps, "mfu", "MFU")});
  out += line_chart("Padding efficiency", "step", {series_of(r.steps, "padding_efficiency", "real / padded")});
  out += line_chart("Peak memory (MiB)", "step", {series_of(r.steps, "peak_memory_mib", "peak memory")});
  out += "</div><h2>Learning rate and gradient norm</h2><div class=\"charts\">";
  out += line_chart("Learning rate", "step", {series_of(r.steps, "lr", "lr")});
  out += line_chart("Gradient norm (before clipping)", "step", {series_of(r.steps, "grad_norm", "grad norm")});
  out += "</div>" + options_section(r) + "</body></html>\n";
  return out;
}

fs::path write_report(const fs::path& dir) {
  RunRecords records = read_run_folder(dir);
  fs::path path = dir / kReportFileName;
  util::write_file_atomic(path, render_report(records));
  return path;
}

void write_report_after_run(const fs::path& dir) {
  try {
    log::info("train", "report: {}", write_report(dir).string());
  } catch (const Error& e) {
    log::warn("train", "no run report: {}", e.format());
  } catch (const std::exception& e) {
    log::warn("train", "no run report: {}", e.what());
  }
}

}  // namespace eagle::io
