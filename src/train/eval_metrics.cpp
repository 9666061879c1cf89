// The acceptance metrics beyond the greedy chain AR (evaluate.h: extra_acceptance).
#include "eagle/train/evaluate.h"

#include <cmath>

#include "eagle/config/option_table.h"
#include "eagle/train/sampled_eval.h"
#include "eagle/train/tree_eval.h"
#include "eagle/util/log.h"

namespace eagle::train {

void extra_acceptance(const target::TargetModel& target, head::DraftHead& head, const data::Dataset& heldout,
                      const EvalSettings& settings, io::EvalStats& stats) {
  if (settings.tree_topk > 0) {
    const TreeShape shape{settings.tree_steps, settings.tree_topk, settings.tree_draft_tokens};
    auto tree = tree_acceptance_rate(target, head, heldout, settings.num_prompts, settings.max_new_tokens, shape);
    if (tree.rounds > 0) stats.tree_ar = tree.ar;
    log::debug("eval", "tree AR ({}, {}, {}) over {} rounds", shape.steps, shape.topk, shape.draft_tokens, tree.rounds);
  }
  if (settings.temperature > 0.0) {
    const SamplingSettings s{settings.temperature, settings.top_p, settings.sampled_drafts, settings.seed};
    auto sampled = sampled_acceptance_rate(target, head, heldout, settings.num_prompts, settings.max_new_tokens,
                                           settings.draft_len, s);
    if (sampled.rounds > 0) {
      stats.temp_ar = sampled.ar;
      stats.temp_ar_ci95 = sampled.ci95;
    }
    auto alpha = analytic_alpha(target, head, heldout, settings.num_prompts, s);
    if (alpha.positions > 0) {
      stats.alpha = alpha.alpha;
      stats.alpha_ar = alpha.chain;
    }
  }
}

SelectedMetric selected_metric(const io::EvalStats& stats, config::BestMetric metric) {
  switch (metric) {
    case config::BestMetric::ar:
      return stats.ar ? SelectedMetric{"ar", stats.ar} : SelectedMetric{"tau", stats.tau};
    case config::BestMetric::tree_ar:
      return {"tree_ar", stats.tree_ar};
    case config::BestMetric::temp_ar:
      return {"temp_ar", stats.temp_ar};
    case config::BestMetric::alpha_ar:
      return {"alpha_ar", stats.alpha_ar};
    case config::BestMetric::loss:
      return {"neg_eval_loss", std::isfinite(stats.loss) ? std::optional<double>(-stats.loss) : std::nullopt};
  }
  return {"ar", stats.ar};
}

std::string gate_metric(config::BestMetric metric) {
  return metric == config::BestMetric::loss ? "ar" : config::name_of(metric);
}

void record_metrics(const io::EvalStats& stats, config::BestMetric metric, run::RunSummary& s) {
  s.ar = stats.ar;
  s.acc = stats.acc;
  s.tau = stats.tau;
  s.eval_loss = std::isfinite(stats.loss) ? std::optional<double>(stats.loss) : std::nullopt;
  s.tree_ar = stats.tree_ar;
  s.temp_ar = stats.temp_ar;
  s.temp_ar_ci95 = stats.temp_ar_ci95;
  s.alpha = stats.alpha;
  s.alpha_ar = stats.alpha_ar;
  s.best_metric = config::name_of(metric);
  s.gate_metric = gate_metric(metric);
}

}  // namespace eagle::train
