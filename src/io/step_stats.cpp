// Step and evaluation statistics as metrics.jsonl objects and TensorBoard scalars.
#include "eagle/io/step_stats.h"

#include <cmath>

namespace eagle::io {
using json = nlohmann::json;

namespace {

json number(double v) { return std::isfinite(v) ? json(v) : json(nullptr); }

json numbers(const std::vector<double>& v) {
  json out = json::array();
  for (double x : v) out.push_back(number(x));
  return out;
}

void add_acc(std::vector<std::pair<std::string, float>>& out, const std::string& prefix,
             const std::vector<double>& acc) {
  for (std::size_t k = 0; k < acc.size(); ++k)
    out.emplace_back(prefix + "acc_" + std::to_string(k), static_cast<float>(acc[k]));
}

}  // namespace

json ar_by_depth_json(const AcceptanceStats& a) { return numbers(a.ar_by_depth); }

json ar_by_category_json(const AcceptanceStats& a) {
  json out = json::object();
  for (const auto& [name, c] : a.ar_by_category)
    out[name] = {{"count", c.count}, {"ar", number(c.ar)}, {"ar_ci95", number(c.ar_ci95)},
                 {"ar_by_depth", numbers(c.ar_by_depth)}};
  return out;
}

void ThroughputWindow::fill(StepStats& s, double seconds, double peak_tflops) const {
  s.tokens_per_s = seconds > 0 ? static_cast<double>(real_tokens) / seconds : 0.0;
  s.padding_efficiency =
      padded_tokens > 0 ? static_cast<double>(real_tokens) / static_cast<double>(padded_tokens) : 0.0;
  s.ms_per_step = steps > 0 ? 1000.0 * seconds / static_cast<double>(steps) : 0.0;
  if (flops > 0 && seconds > 0) {
    s.tflops = flops / seconds / 1e12;
    if (peak_tflops > 0) s.mfu = *s.tflops / peak_tflops;
  }
}

json to_json(const StepStats& s) {
  json out = json::object();
  out["step"] = s.step;
  out["loss"] = number(s.loss);
  out["acc"] = numbers(s.acc);
  out["tau"] = number(s.tau);
  out["lr"] = number(s.lr);
  out["grad_norm"] = number(s.grad_norm);
  out["tokens_per_s"] = number(s.tokens_per_s);
  out["padding_efficiency"] = number(s.padding_efficiency);
  out["ms_per_step"] = number(s.ms_per_step);
  out["nonfinite_steps"] = s.nonfinite_steps;
  if (s.peak_memory_mib) out["peak_memory_mib"] = number(*s.peak_memory_mib);
  if (s.tflops) out["tflops"] = number(*s.tflops);
  if (s.mfu) out["mfu"] = number(*s.mfu);
  return out;
}

json to_json(const EvalStats& e) {
  json out = json::object();
  out["step"] = e.step;
  out["eval_loss"] = number(e.loss);
  out["eval_acc"] = numbers(e.acc);
  out["eval_tau"] = number(e.tau);
  const auto& a = e.acceptance;
  for (const auto& [name, v] : {std::pair{"ar", &a.ar},
                                {"ar_ci95", &a.ar_ci95},
                                {"tree_ar", &a.tree_ar},
                                {"temp_ar", &a.temp_ar},
                                {"temp_ar_ci95", &a.temp_ar_ci95},
                                {"tree_temp_ar", &a.tree_temp_ar},
                                {"tree_temp_ar_ci95", &a.tree_temp_ar_ci95}})
    if (*v) out[name] = number(**v);
  if (!a.ar_by_depth.empty()) out["ar_by_depth"] = ar_by_depth_json(a);
  if (!a.ar_by_category.empty()) out["ar_by_category"] = ar_by_category_json(a);
  if (!a.alpha.empty()) out["alpha"] = numbers(a.alpha);
  if (a.alpha_ar) out["alpha_ar"] = number(*a.alpha_ar);
  return out;
}

std::vector<std::pair<std::string, float>> tensorboard_scalars(const StepStats& s) {
  std::vector<std::pair<std::string, float>> out;
  out.emplace_back("train/loss", static_cast<float>(s.loss));
  add_acc(out, "train/", s.acc);
  out.emplace_back("train/tau", static_cast<float>(s.tau));
  out.emplace_back("train/lr", static_cast<float>(s.lr));
  out.emplace_back("train/grad_norm", static_cast<float>(s.grad_norm));
  out.emplace_back("train/tokens_per_s", static_cast<float>(s.tokens_per_s));
  out.emplace_back("train/padding_efficiency", static_cast<float>(s.padding_efficiency));
  out.emplace_back("train/ms_per_step", static_cast<float>(s.ms_per_step));
  if (s.peak_memory_mib) out.emplace_back("train/peak_memory_mib", static_cast<float>(*s.peak_memory_mib));
  if (s.tflops) out.emplace_back("train/tflops", static_cast<float>(*s.tflops));
  if (s.mfu) out.emplace_back("train/mfu", static_cast<float>(*s.mfu));
  return out;
}

std::vector<std::pair<std::string, float>> tensorboard_scalars(const EvalStats& e) {
  std::vector<std::pair<std::string, float>> out;
  out.emplace_back("eval/loss", static_cast<float>(e.loss));
  add_acc(out, "eval/", e.acc);
  out.emplace_back("eval/tau", static_cast<float>(e.tau));
  const auto& a = e.acceptance;
  for (const auto& [tag, v] : {std::pair{"eval/ar", &a.ar},
                               {"eval/tree_ar", &a.tree_ar},
                               {"eval/temp_ar", &a.temp_ar},
                               {"eval/tree_temp_ar", &a.tree_temp_ar},
                               {"eval/alpha_ar", &a.alpha_ar}})
    if (*v) out.emplace_back(tag, static_cast<float>(**v));
  for (std::size_t k = 0; k < a.ar_by_depth.size(); ++k)
    out.emplace_back("eval/ar_depth_" + std::to_string(k + 1), static_cast<float>(a.ar_by_depth[k]));
  return out;
}

}  // namespace eagle::io
