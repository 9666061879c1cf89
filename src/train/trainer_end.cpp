// The Trainer's step line of each logging window (the window's sums read once, the non-finite steps
// reported or refused) and its one exit path: summary.json, the gates, the report, every rank's exit
// code agreed.
#include <cmath>

#include "eagle/device/memory.h"
#include "eagle/device/torch_error.h"
#include "eagle/io/report.h"
#include "eagle/run/run_files.h"
#include "eagle/train/loss_metrics.h"
#include "eagle/util/error.h"
#include "eagle/util/log.h"
#include "trainer_impl.h"

namespace eagle::train::detail {

void Trainer::log_window() {
  graphs_->synchronize();
  LogWindow& w = *window_;
  const double elapsed = std::max(1e-9, w.seconds());
  group_->sum(w.metrics);  // every rank's positions (the loss and gradient norm are global already)
  auto metrics = summarize_metrics(w.metrics.cpu());
  io::StepStats s;
  s.step = state_.step;
  s.total_steps = total_steps_;
  const auto steps = static_cast<double>(w.counts.steps);
  // A window without one trained position has no loss (0 would read as a perfect head).
  s.loss = metrics.positions > 0 ? w.loss.item<double>() / steps : std::numeric_limits<double>::quiet_NaN();
  if (metrics.positions == 0)
    log::warn("train",
              "steps {}-{} had no position to train: loss n/a (a trained token needs two tokens before it "
              "in its sample; check the loss masks)",
              state_.step - w.counts.steps + 1, state_.step);
  s.acc = metrics.acc;
  s.tau = metrics.tau;
  s.lr = schedule_.lr(state_.step - 1);
  s.grad_norm = w.grad_norm.item<double>() / steps;
  w.counts.fill(s, elapsed, peak_.tflops);
  s.nonfinite_steps = static_cast<std::int64_t>(optimizer_->nonfinite_steps().item<double>());
  if (auto peak = device::peak_memory_bytes(device_)) s.peak_memory_mib = static_cast<double>(*peak) / (1 << 20);
  if (logger_) logger_->log_step(s, evals_->take_pending());
  last_loss_ = s.loss;
  w.reset();
  if (s.nonfinite_steps > nonfinite_reported_) {
    auto first = static_cast<std::int64_t>(optimizer_->first_nonfinite_step().item<double>());
    nonfinite_reported_ = s.nonfinite_steps;
    if (o_.nan_policy == config::NanPolicy::error)
      throw Error(ErrorKind::training, "non-finite loss or gradient; the update was skipped")
          .place(fmt::format("step {}", first))
          .hint("lower learning_rate, check the data, or pass --nan_policy skip to go on");
    log::warn("train", "{} step(s) skipped for non-finite values so far (first at step {})", s.nonfinite_steps, first);
  }
}

run::RunSummary Trainer::finish(ExitReason reason, std::exception_ptr failure) {
  run::RunSummary& s = summary_;
  s.exit_reason = reason;
  s.steps = state_.step;
  s.final_loss = std::isfinite(last_loss_) ? std::optional<double>(last_loss_) : std::nullopt;
  evals_->record(s);
  s.real_tokens = state_.real_tokens;
  s.tokens_per_s = process_real_tokens_ / std::max(1e-9, loop_seconds_);
  s.wall_time_s = seconds_since(started_);
  s.model_flops = process_flops_;
  if (peak_.tflops > 0) s.peak_tflops = peak_.tflops;
  s.peak_tflops_source = peak_.source;
  if (process_flops_ > 0 && loop_seconds_ > 0) {
    s.tflops = process_flops_ / loop_seconds_ / 1e12;
    if (peak_.tflops > 0) s.mfu = *s.tflops / peak_.tflops;
  }
  if (auto best = checkpoints_->best()) s.best_step = best->step;
  // Gates are recorded for every run; only a completed run can miss one (rank 0 evaluates).
  std::optional<Error> error;
  if (group_->is_main()) error = run::apply_gates(s, o_.min_ar, o_.max_final_loss);
  if (failure) {
    error = device::to_error(failure);
    s.detail = error->format();
    s.exit_code = static_cast<int>(error->exit_code());
  } else if (reason == ExitReason::interrupted) {
    s.detail = *signals_.signal_name() ? signals_.signal_name() : "a signal on another rank";
    s.exit_code = static_cast<int>(ExitCode::interrupted);
    error = Error(ErrorKind::interrupted, fmt::format("stopped by {} after step {}", s.detail, state_.step))
                .hint(fmt::format("resume with --resume_from_checkpoint auto --output_dir {}", o_.output_dir));
  }
  if (group_->is_main()) {
    run::write_summary(o_.output_dir, s);
    logger_->finish();
    io::write_report_after_run(o_.output_dir);
  }
  if (failure) std::rethrow_exception(failure);
  agree_on_exit_code(s.exit_code);
  if (error) throw *error;
  return s;
}

// Every rank ends with rank 0's exit code (a missed gate is known there only).
void Trainer::agree_on_exit_code(int exit_code) {
  if (group_->size() == 1) return;
  const auto code = group_->broadcast_from_main(exit_code);
  if (group_->is_main() || code == exit_code) return;
  const auto kind = code == static_cast<int>(ExitCode::gate)          ? ErrorKind::gate
                    : code == static_cast<int>(ExitCode::interrupted) ? ErrorKind::interrupted
                                                                      : ErrorKind::training;
  throw Error(kind, fmt::format("rank 0 ended the run with exit code {}", code));
}

}  // namespace eagle::train::detail
