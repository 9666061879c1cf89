// eagle-train eval: the acceptance evaluation of the trainer, standalone, on a checkpoint or a head
// exported here or elsewhere (SGLang/SpecForge, speculators, vLLM EAGLE-1 layouts).
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iostream>

#include "eagle/cli/commands.h"
#include "eagle/config/option_table.h"
#include "eagle/device/runtime.h"
#include "eagle/features/inputs.h"
#include "eagle/head/export/io.h"
#include "eagle/io/progress.h"
#include "eagle/io/step_stats.h"
#include "eagle/run/summary.h"
#include "eagle/train/evaluate.h"
#include "eagle/train/init_draft.h"
#include "eagle/util/error.h"
#include "eagle/util/fs_sync.h"
#include "eagle/util/log.h"
#include "eagle/util/progress.h"

namespace eagle::cli {
namespace {

// The head decides the layers it reads: other aux ids given for an EAGLE-3 head are refused, not
// ignored (ttt_steps and eagle_version are not eval options: the head's are used).
void check_aux_ids(const head::HeadConfig& h, const config::Options& o, const std::string& head_dir) {
  if (!head::draft_spec(h).reads(h).aux_hidden || o.aux_hidden_state_layer_ids.empty() ||
      o.aux_hidden_state_layer_ids == h.aux_layer_ids)
    return;
  throw Error(ErrorKind::usage, "--aux_hidden_state_layer_ids differs from the head's")
      .file(head_dir + "/config.json")
      .place("aux_hidden_state_layer_ids")
      .expected(fmt::format("[{}] (the head's)", fmt::join(h.aux_layer_ids, ", ")))
      .found(fmt::format("[{}]", fmt::join(o.aux_hidden_state_layer_ids, ", ")))
      .hint("leave it out: eval reads the layers the head was trained on");
}

// The head names the target it was trained on; another folder of the same shape may be a fine-tune
// (the sizes above cannot tell), so the user is told which one is used.
void warn_other_target(const head::HeadConfig& h, const std::string& target_dir) {
  namespace fs = std::filesystem;
  if (h.target_name_or_path.empty() || target_dir.empty()) return;
  std::error_code ec;
  if (fs::equivalent(h.target_name_or_path, target_dir, ec) && !ec) return;
  if (fs::path(h.target_name_or_path).filename() == fs::path(target_dir).filename()) return;  // moved, same name
  log::warn("eval", "the head was trained on the target {}; evaluating it with {} (same sizes)",
            h.target_name_or_path, target_dir);
}

// --output must be writable before minutes of evaluation are spent: a probe file in its folder.
void check_output_writable(const std::string& output) {
  if (output.empty()) return;
  namespace fs = std::filesystem;
  const fs::path out(output);
  std::error_code ec;
  EAGLE_CHECK(!fs::is_directory(out, ec), Error(ErrorKind::output, "--output names a folder").file(output)
                                              .expected("a JSON file path"));
  const fs::path probe = (out.parent_path().empty() ? fs::path(".") : out.parent_path()) /
                         fmt::format(".{}.probe-{}", out.filename().string(), ::getpid());
  {
    std::ofstream f(probe);
    EAGLE_CHECK(f.good(), Error(ErrorKind::output, "cannot write the output").file(output)
                              .hint("check that its folder exists and is writable"));
  }
  fs::remove(probe, ec);
}

// The AR by depth and per category, the tree and temperature metrics, when measured, after the greedy line.
std::string extra_line(const io::AcceptanceStats& s, const acceptance::AcceptanceSettings& e) {
  std::string out;
  if (!s.ar_by_depth.empty())
    out += fmt::format("\nAR by depth k = 1..{}: {:.3f}", s.ar_by_depth.size(), fmt::join(s.ar_by_depth, " "));
  for (const auto& [name, c] : s.ar_by_category)
    out += fmt::format("\ncategory {} ({} prompts): AR {:.3f} +- {:.3f} (95%) | by depth {:.3f}", name, c.count, c.ar,
                       c.ar_ci95, fmt::join(c.ar_by_depth, " "));
  const auto& t = e.tree;
  if (s.tree_ar)
    out += fmt::format("\ntree AR {:.3f} (steps {}, topk {}, draft tokens {})", *s.tree_ar, t.steps, t.topk,
                       t.draft_tokens);
  if (s.temp_ar)
    out += fmt::format("\nAR at temperature {} {:.3f} +- {:.3f} (95%)", e.sampling.temperature, *s.temp_ar,
                       s.temp_ar_ci95.value_or(0.0));
  if (s.tree_temp_ar)
    out += fmt::format("\ntree AR at temperature {} {:.3f} +- {:.3f} (95%)", e.sampling.temperature, *s.tree_temp_ar,
                       s.tree_temp_ar_ci95.value_or(0.0));
  if (s.alpha_ar) out += fmt::format("\nalpha {:.3f} | chain estimate {:.3f}", fmt::join(s.alpha, " "), *s.alpha_ar);
  return out;
}

}  // namespace

void run_eval(const config::Options& opts, const Invocation& argv) {
  check_output_writable(opts.output);
  device::configure_runtime(opts);
  const torch::Device device = device::resolve_device(opts.device);
  auto loaded = head::load_head(opts.checkpoint, device, train::aux_layers_for_unnamed(opts));
  auto& head = *loaded.head;
  head::check_finite_parameters(head, opts.checkpoint,
                                "evaluate an earlier checkpoint (training with nan_policy skip keeps going)");
  // Checked against the target's config.json before anything heavy is read.
  check_aux_ids(loaded.config, opts, opts.checkpoint);
  if (const auto target_dir = features::target_config_dir(opts); !target_dir.empty()) {
    head::check_head_fits_target(loaded.config, target::TargetConfig::from_model_dir(target_dir), opts.checkpoint);
    warn_other_target(loaded.config, opts.model_name_or_path);
  }
  // The head decides what it reads: the target layers it was trained on.
  auto settings = train::EvalSettings::from(opts, loaded.config.ttt_steps);
  util::ProgressDisplay progress("eval");  // a long evaluation shows where it is (issue 53 item 7)
  settings.acceptance.progress = &progress;
  acceptance::check_head_settings(loaded.config, settings.acceptance);  // before the target loads
  const auto inputs = features::load_inputs(opts, head::draft_spec(loaded.config).reads(loaded.config), device,
                                            features::Split::eval);
  head.set_target_weights(inputs.ends.embed, inputs.ends.lm_head);
  const data::Dataset& heldout = *inputs.heldout;

  const auto features = inputs.sources(head.teacher_spec(), device).heldout;
  auto stats =
      train::evaluate(*features, inputs.target ? &*inputs.target : nullptr, head, heldout, settings, /*step=*/0);

  nlohmann::json j = io::to_json(stats);
  j.erase("step");
  j["checkpoint"] = opts.checkpoint;
  j["format"] = head::format_name(loaded.format);
  j["heldout_samples"] = heldout.size();
  const auto& acc = settings.acceptance;
  j["draft_len"] = acc.draft_len;
  j["head"] = head::head_variant_json(loaded.config);
  j["head"]["parameters"] = head::count_parameters(head);
  if (acc.tree.on()) j["tree"] = {acc.tree.steps, acc.tree.topk, acc.tree.draft_tokens};
  if (acc.sampling.temperature > 0.0) {
    j["temperature"] = acc.sampling.temperature;
    j["top_p"] = acc.sampling.top_p;
    j["draft_sampling"] = config::name_of(opts.eval_draft_sampling);
  }
  if (opts.json)
    std::cout << j.dump(2) << "\n";
  else
    std::cout << fmt::format(
        "AR {} | eval loss {} | acc {:.3f} | tau {:.3f} ({} held-out samples, {} drafted per round){}\n",
        stats.acceptance.ar ? fmt::format("{:.3f}", *stats.acceptance.ar) : std::string("n/a"),
        io::loss_text(stats.loss), fmt::join(stats.acc, " "), stats.tau, heldout.size(), acc.draft_len,
        extra_line(stats.acceptance, acc));
  if (!opts.output.empty()) util::write_file_atomic(opts.output, j.dump(2) + "\n");
  run::RunSummary measured;
  train::record_metrics(stats, opts.best_metric, opts.best_metric_depth, measured);
  if (auto gate = run::gate_error(run::check_gates(measured, opts.min_ar, 0.0),
                                  measured.gate_metric == "ar" ? "AR" : measured.gate_metric))
    throw *gate;
}

}  // namespace eagle::cli
