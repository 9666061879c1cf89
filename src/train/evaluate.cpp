// Held-out evaluation and the choice of the best checkpoint's metric (see evaluate.h).
#include "eagle/train/evaluate.h"

#include <cmath>
#include <limits>
#include <numeric>

#include "eagle/config/option_table.h"
#include "eagle/data/sampler.h"
#include "eagle/features/batch_tensors.h"
#include "eagle/head/draft_spec.h"
#include "eagle/train/loss_metrics.h"
#include "eagle/train/micro_batch.h"
#include "eagle/util/log.h"

namespace eagle::train {

EvalSettings EvalSettings::from(const config::Options& o, std::int64_t ttt_steps) {
  EvalSettings s{data::SamplerOptions::from(o), kMaxEvalSamples, o.bf16,
                 acceptance::AcceptanceSettings::from(o, ttt_steps)};
  s.batching.group_by_length = false;
  return s;
}

io::EvalStats evaluate(const features::FeatureSource& features, const target::TargetModel* target,
                       head::DraftHead& head, const data::Dataset& heldout, const EvalSettings& settings,
                       std::int64_t step) {
  torch::NoGradGuard no_grad;
  io::EvalStats stats;
  stats.step = step;
  const auto steps = head.config().steps();
  std::vector<std::size_t> first(std::min<std::size_t>(heldout.size(), static_cast<std::size_t>(settings.max_samples)));
  std::iota(first.begin(), first.end(), std::size_t{0});
  const data::Dataset evaluated = first.size() < heldout.size() ? heldout.subset(first) : heldout;
  data::Sampler sampler(evaluated.lengths(), settings.batching);
  std::vector<data::Batch> batches;
  for (std::int64_t b = 0, n = sampler.batches_in_epoch(0); b < n; ++b)
    batches.push_back(data::make_batch(evaluated, sampler.next()));
  const auto device = features.device();
  // The row's loss plan over all batches at once; its extra inputs (a DFlash head's anchors) are the
  // same for every evaluation of a run (seed, "step" -1, the batch's index), so the held-out losses of
  // its steps compare.
  const auto plan = head::draft_spec(head.config())
                        .loss_plan(batches, head.config(), head::PlanSeed{settings.acceptance.sampling.seed, -1, 0});
  const auto denominators = denominator_tensor(plan.denominators).to(device);
  auto sums = torch::zeros({steps, head::kMetricColumns}, torch::TensorOptions().device(device));
  auto loss = torch::zeros({}, sums.options());
  for (std::size_t i = 0; i < batches.size(); ++i) {
    const auto& batch = batches[i];
    auto tensors = features.allocate(batch, /*max_segments=*/0);  // eager: the row length bounds it
    features.fill(batch, tensors);
    if (plan.extras[i].defined()) tensors.extra = plan.extras[i].to(device);
    auto out = forward_micro_batch(features, head, tensors, denominators, settings.bf16);
    sums += out.metric_sums;
    loss += out.loss;
  }
  auto summary = summarize_metrics(sums.cpu());
  // Nothing scored (no held-out position trains): no loss, as on the step line, never 0.
  stats.loss = summary.positions > 0 ? loss.item<double>() : std::numeric_limits<double>::quiet_NaN();
  if (summary.positions == 0)
    log::warn("eval",
              "no held-out position was scored: eval loss n/a (a trained token needs two tokens before it "
              "in its sample; check the held-out data's loss masks)");
  stats.acc = summary.acc;
  stats.tau = summary.tau;
  if (settings.acceptance.num_prompts > 0 && target != nullptr)
    stats.acceptance = acceptance::measure(*target, head, heldout, settings.acceptance);
  return stats;
}

namespace {
std::string depth_name(std::int64_t depth) { return "ar@" + std::to_string(depth); }
}  // namespace

SelectedMetric selected_metric(const io::EvalStats& stats, config::BestMetric metric, std::int64_t depth) {
  const auto& a = stats.acceptance;
  if (depth > 0 && metric == config::BestMetric::ar) {
    const auto k = static_cast<std::size_t>(depth);
    return {depth_name(depth), k <= a.ar_by_depth.size() && std::isfinite(a.ar_by_depth[k - 1])
                                   ? std::optional<double>(a.ar_by_depth[k - 1])
                                   : std::nullopt};
  }
  switch (metric) {
    case config::BestMetric::ar:
      return a.ar ? SelectedMetric{"ar", a.ar} : SelectedMetric{"tau", stats.tau};
    case config::BestMetric::tree_ar:
      return {"tree_ar", a.tree_ar};
    case config::BestMetric::temp_ar:
      return {"temp_ar", a.temp_ar};
    case config::BestMetric::alpha_ar:
      return {"alpha_ar", a.alpha_ar};
    case config::BestMetric::loss:
      return {"neg_eval_loss", std::isfinite(stats.loss) ? std::optional<double>(-stats.loss) : std::nullopt};
  }
  return {"ar", a.ar};
}

std::string gate_metric(config::BestMetric metric, std::int64_t depth) {
  if (depth > 0) return depth_name(depth);
  return metric == config::BestMetric::loss ? "ar" : config::name_of(metric);
}

namespace {
void record_gate_metric(config::BestMetric metric, std::int64_t depth, run::RunSummary& s) {
  s.gate_metric = gate_metric(metric, depth);
  s.gate_depth = depth;
}
}  // namespace

void record_metrics(const io::EvalStats& stats, config::BestMetric metric, std::int64_t depth, run::RunSummary& s) {
  s.eval = stats;
  s.best_metric = metric == config::BestMetric::ar && depth > 0 ? depth_name(depth) : config::name_of(metric);
  record_gate_metric(metric, depth, s);
}

void RunEvaluations::run(const features::RunInputs& inputs, const features::FeatureSources& sources,
                         head::DraftHead& head, std::int64_t step) {
  if (!inputs.heldout || inputs.heldout->size() == 0 || !sources.heldout) return;
  last_ = evaluate(*sources.heldout, inputs.target ? &*inputs.target : nullptr, head, *inputs.heldout, settings_, step);
}

void RunEvaluations::log(io::RunLogger& logger, bool with_step_line) {
  if (!last_) return;
  if (with_step_line)
    pending_ = true;
  else
    logger.log_eval(*last_);
}

const io::EvalStats* RunEvaluations::take_pending() {
  const bool pending = pending_;
  pending_ = false;
  return pending ? &*last_ : nullptr;
}

void RunEvaluations::mark_best(std::int64_t step, run::CheckpointDir& checkpoints) const {
  if (!last_ || last_->step != step) return;
  const auto sel = selected_metric(*last_, best_metric_, best_depth_);
  if (sel.value)
    checkpoints.update_best(step, sel.name, *sel.value);
  else
    log::warn("eval", "best_metric {} not measured at step {}: checkpoint-best unchanged", sel.name, step);
}

void RunEvaluations::record(run::RunSummary& s) const {
  if (last_)
    record_metrics(*last_, best_metric_, best_depth_, s);
  else
    record_gate_metric(best_metric_, best_depth_, s);
}

}  // namespace eagle::train
