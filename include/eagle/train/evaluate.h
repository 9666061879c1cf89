// Evaluation on held-out data: the head's losses, acc_k and tau (teacher-forced, as in training),
// and the acceptance metrics of speculative decoding with KV caches (acceptance::measure).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "eagle/acceptance/measure.h"
#include "eagle/config/options.h"
#include "eagle/data/dataset.h"
#include "eagle/data/plan.h"
#include "eagle/features/inputs.h"
#include "eagle/features/source.h"
#include "eagle/head/head.h"
#include "eagle/io/run_logger.h"
#include "eagle/io/step_stats.h"
#include "eagle/run/checkpoint_dir.h"
#include "eagle/run/summary.h"
#include "eagle/target/target.h"

namespace eagle::train {

// Held-out samples read for the losses (the first ones of the split, which is already a random
// draw): enough for stable numbers, bounded so a large held-out set does not make every
// evaluation long. A count of samples, not of batches, so the numbers do not depend on batching.
inline constexpr std::int64_t kMaxEvalSamples = 512;

struct EvalSettings {
  data::SamplerOptions batching;  // batches of the held-out split (one pass, fixed order)
  std::int64_t max_samples = kMaxEvalSamples;
  bool bf16 = false;
  acceptance::AcceptanceSettings acceptance;

  // The evaluation of a run: the run's batching without length grouping, eval_* options, and
  // eval_draft_len (0: ttt_steps, the head's own).
  static EvalSettings from(const config::Options& o, std::int64_t ttt_steps);
};

// What --best_metric selects of an evaluation: its name in best.json and a value where higher is
// better (loss: "neg_eval_loss", the negated held-out loss; ar without an AR measured: tau, as
// before best_metric existed; ar with --best_metric_depth k: "ar@k", ar_by_depth[k-1]); no value when
// that metric was not measured.
struct SelectedMetric {
  std::string name;
  std::optional<double> value;
};
SelectedMetric selected_metric(const io::EvalStats& stats, config::BestMetric metric, std::int64_t depth = 0);
// The AR metric min_ar gates for a best_metric: itself, and the chain AR for loss; "ar@k" for depth k > 0.
std::string gate_metric(config::BestMetric metric, std::int64_t depth = 0);
// The evaluation into a run summary (summary.eval, the best and gate metrics' names, the gate's depth).
void record_metrics(const io::EvalStats& stats, config::BestMetric metric, std::int64_t depth,
                    run::RunSummary& summary);

// Held-out losses/acc/tau plus the acceptance metrics, as logged (step is the optimizer step
// evaluated at), over the first max_samples held-out samples, whose head inputs come from
// `features` (a source over the held-out data). The loss is normalised like one optimizer step
// over all of them (the denominators are their summed counts), so it does not depend on how they
// are batched: `eagle-train eval` with the run's data options and bf16 reproduces the run's own
// evaluation. The acceptance metrics need the whole target: without one (offline training without
// --model_name_or_path) they are left out.
io::EvalStats evaluate(const features::FeatureSource& features, const target::TargetModel* target,
                       head::DraftHead& head, const data::Dataset& heldout, const EvalSettings& settings,
                       std::int64_t step);

// A training run's evaluations (rank 0 measures; every rank holds the same head): the latest
// result, logged on the step line that follows or on a line of its own, checkpoint-best chosen from
// it by best_metric, and its metrics in summary.json.
class RunEvaluations {
 public:
  RunEvaluations(const config::Options& o, std::int64_t ttt_steps)
      : settings_(EvalSettings::from(o, ttt_steps)), best_metric_(o.best_metric), best_depth_(o.best_metric_depth) {}
  // The held-out evaluation at step (nothing without held-out samples), their head inputs from sources.heldout.
  void run(const features::RunInputs& inputs, const features::FeatureSources& sources, head::DraftHead& head,
           std::int64_t step);
  // The latest evaluation to the logger: kept for the next step line, or on a line of its own.
  void log(io::RunLogger& logger, bool with_step_line);
  const io::EvalStats* take_pending();  // the evaluation waiting for the step line (then no longer), or none
  // checkpoint-best becomes step's checkpoint when the latest evaluation is of step and beats the best
  // (nothing on the ranks that do not evaluate).
  void mark_best(std::int64_t step, run::CheckpointDir& checkpoints) const;
  void record(run::RunSummary& s) const;  // the latest metrics (record_metrics), or only the gate metric's name

 private:
  EvalSettings settings_;
  config::BestMetric best_metric_;
  std::int64_t best_depth_ = 0;  // best_metric_depth
  std::optional<io::EvalStats> last_;
  bool pending_ = false;
};

}  // namespace eagle::train
