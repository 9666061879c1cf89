// The training run of `eagle-train train` (docs/training.md) as one object: set-up in the
// constructor as named steps, then run(): per optimizer step (a) forward+backward of each
// micro-batch, graphed per batch shape, and (b) clip + AdamW update, with evaluation, logging and
// checkpoints in plain `step % every == 0` blocks (the step line and the exit path that always writes
// summary.json: trainer_end.cpp).
#include "eagle/train/trainer.h"

#include <chrono>
#include <cmath>
#include <exception>
#include <limits>
#include <optional>

#include "eagle/config/resolve.h"
#include "eagle/data/sampler.h"
#include "eagle/device/cuda_graph_cache.h"
#include "eagle/device/distributed.h"
#include "eagle/device/memory.h"
#include "eagle/device/runtime.h"
#include "eagle/device/torch_error.h"
#include "eagle/features/batch_tensors.h"
#include "eagle/features/inputs.h"
#include "eagle/head/draft_spec.h"
#include "eagle/io/report.h"
#include "eagle/io/run_logger.h"
#include "eagle/run/checkpoint_dir.h"
#include "eagle/run/dir_lock.h"
#include "eagle/run/lr_schedule.h"
#include "eagle/run/run_files.h"
#include "eagle/run/signals.h"
#include "eagle/train/evaluate.h"
#include "eagle/train/init_draft.h"
#include "eagle/train/loss_metrics.h"
#include "eagle/train/memory_estimate.h"
#include "eagle/train/micro_batch.h"
#include "eagle/train/optimizer.h"
#include "eagle/train/setup.h"
#include "eagle/train/step_flops.h"
#include "eagle/util/error.h"
#include "eagle/util/log.h"
#include "rank_check.h"
#include "trainer_impl.h"

namespace eagle::train::detail {

Trainer::Trainer(const config::Options& o, const std::vector<std::string>& command_line, const TrainHooks& hooks)
    : o_(o), options_json_(config::to_json(o_, config::Command::train)), hooks_(hooks) {
  join_ranks();
  claim_output_dir();
  check_resume();
  build();
  restore();
  open_sinks(command_line);
}

void Trainer::join_ranks() {
  device::configure_runtime(o_);
  const auto launch = device::launch_from_env();
  device_ = device::device_for(launch, device::resolve_device(o_.device), o_.device);
  group_ =
      std::make_unique<device::ProcessGroup>(launch, device_, o_.ddp_backend, std::chrono::seconds(o_.ddp_timeout_s));
  if (!group_->is_main()) {
    // Rank 0 logs for the run; the others only report their own errors.
    log::set_line_prefix(fmt::format("[rank {}] ", group_->rank()));
    if (log::log_level() < log::LogLevel::error) log::set_log_level(log::LogLevel::error);
  }
  check_ranks_agree(*group_, option_digests(options_json_));  // before any collective of other sizes
}

void Trainer::claim_output_dir() {
  if (group_->is_main()) {
    std::error_code ec;
    std::filesystem::create_directories(o_.output_dir, ec);
    EAGLE_CHECK(!ec, Error(ErrorKind::output, "cannot create the run folder").file(o_.output_dir).found(ec.message()));
    lock_.emplace(std::filesystem::path(o_.output_dir) / run::kLockFile, "output_dir");
    resume_ = run::prepare_output_dir(o_.output_dir, o_.resume_from_checkpoint, o_.overwrite_output_dir);
  }
  group_->barrier();  // rank 0 has decided on output_dir (and cleaned it); the others read the same answer
  if (!group_->is_main()) resume_ = run::find_resume(o_.resume_from_checkpoint, o_.output_dir);
}

void Trainer::check_resume() {
  if (resume_) check_resumable(read_trainer_state(resume_->path), options_json_, group_->size(), resume_->path);
}

// The data, the target or the stored features, the head, sampler, graphs, gradients, optimizer and
// schedule.
void Trainer::build() {
  inputs_ = features::load_train_inputs(o_, device_);
  head_ = make_head(o_, inputs_, device_);
  spec_ = &head::draft_spec(head_->config());
  K_ = head_->config().steps();
  features_ = inputs_.sources(head_->teacher_spec(), device_);
  const auto lengths = inputs_.train->lengths();
  check_ranks_agree(*group_, input_digests(lengths, head_->config()));
  sampler_.emplace(lengths, data::SamplerOptions::from(o_, group_->size(), group_->rank()));
  // Packed rows: the most documents a row can hold, the static size of the attention offsets.
  micro_batches_.emplace(*features_.train, *head_,
                         o_.padding_free ? data::max_segments_per_row(lengths, o_.training_seq_len) : 0, o_.bf16);
  const auto shape_counts = sampler_->shape_counts(0);
  // MFU's numerator counts the target's forward where it runs in the step (online: no feature store); its
  // peak is measured on the GEMMs of the most frequent batch shape where no table knows the device.
  if (!inputs_.store) step_target_ = &inputs_.ends.config;
  const auto common = device::most_frequent_shapes(shape_counts, 1);
  const auto tokens = common.empty() ? o_.training_seq_len : common.front().rows * common.front().length;
  peak_ = device::peak_flops(o_.peak_tflops, device_, o_.bf16, step_gemm_shapes(head_->config(), step_target_, tokens));
  // Before any step allocates, where the estimate models the row's step.
  if (spec_->memory_model) check_step_memory(o_, inputs_.ends.config, head_->config(), device_, shape_counts);
  // A target that reads the host in its forward runs eagerly (TargetModel::graphed_steps).
  const auto graphed = inputs_.target
                           ? inputs_.target->graphed_steps(o_.max_cuda_graphs, target::TargetModel::Step::training)
                           : o_.max_cuda_graphs;
  graphs_.emplace(device_, graphed,
                  device::most_frequent_shapes(shape_counts, static_cast<std::int64_t>(shape_counts.size())), "train");
  const auto params = head::named_parameters(*head_);
  comm_ = device::bind_flat_gradients(params, /*extra=*/1, device_);
  step_loss_ = comm_.extra.select(0, 0);
  optimizer_.emplace(params,
                     AdamWConfig{o_.adam_beta1, o_.adam_beta2, o_.adam_epsilon, o_.weight_decay, o_.max_grad_norm});
  total_steps_ = data::planned_steps(o_, *sampler_);
  schedule_ = run::make_lr_schedule(o_, total_steps_);
  evals_.emplace(o_, K_);
  // What the acceptance evaluation cannot do with this head is refused now, not after the training.
  acceptance::check_head_settings(head_->config(), EvalSettings::from(o_, K_).acceptance);
}

void Trainer::restore() {
  if (resume_) {
    state_ = restore_checkpoint(resume_->path, *head_, *optimizer_, *sampler_);
    log::info("ckpt", "resumed from {} at step {}", resume_->path.string(), state_.step);
    summary_.resumed_from_step = state_.step;
    saved_step_ = state_.step;
  }
  // Every rank resumes rank 0's checkpoint: an output_dir that is not one shared folder would not.
  if (group_->size() > 1 && group_->any(group_->broadcast_from_main(state_.step) != state_.step))
    throw Error(ErrorKind::usage, "the ranks did not resume from the same checkpoint")
        .file(o_.output_dir)
        .place(fmt::format("rank {}", group_->rank()))
        .found(resume_ ? resume_->path.string() : "no checkpoint")
        .hint("output_dir must be one folder that every node sees (a shared file system)");
  // The checkpoints of this run hold this run's options, also after a resume.
  state_.config = options_json_;
  state_.world_size = group_->size();
  // A source that fetches ahead (a target server) is given the batches of the remaining steps.
  features_.train->prefetch(*sampler_, (total_steps_ - state_.step) * o_.gradient_accumulation_steps);
}

void Trainer::open_sinks(const std::vector<std::string>& command_line) {
  if (group_->is_main()) {
    run::write_run_files(o_.output_dir, o_, command_line);
    logger_.emplace(o_.output_dir, total_steps_, resume_ ? std::optional<std::int64_t>(state_.step) : std::nullopt);
  }
  checkpoints_.emplace(o_.output_dir);
  summary_.total_steps = total_steps_;
  log::info("train", "{} optimizer steps of {} micro-batch(es){}; {} head with {} {}, {} parameters",
            total_steps_, o_.gradient_accumulation_steps,
            group_->size() > 1 ? fmt::format(" on each of {} ranks", group_->size()) : "",
            spec_->noun, K_, spec_->step_noun, head::count_parameters(*head_));
  log::info("train", "MFU against {:.4g} TFLOP/s per device: {}", peak_.tflops, peak_.source);
  window_.emplace(K_, device_);
}

run::RunSummary Trainer::run() {
  ExitReason reason = ExitReason::failed;
  std::exception_ptr failure;
  try {
    reason = loop();
  } catch (...) {
    failure = std::current_exception();
    if (loop_started_) loop_seconds_ = seconds_since(*loop_started_) - side_seconds_;  // summary.json's rate
  }
  return finish(reason, failure);
}

ExitReason Trainer::loop() {
  loop_started_ = Clock::now();
  const auto loop_started = *loop_started_;
  // A signal during set-up (handlers are installed first): stop before any step, nothing to save.
  if (group_->any(signals_.requested())) return ExitReason::interrupted;
  // A shipped draft (--draft mtp): its AR before any update, logged at step 0 (MTP.md 7.14: it must
  // equal what vLLM measures with the original checkpoint).
  if (spec_->evaluate_at_start && state_.step == 0 && o_.eval_steps > 0) evaluate(/*with_step_line=*/false);
  while (state_.step < total_steps_) {
    const auto sampler_at = sampler_->state();
    try {
      train_step();
    } catch (const Error& e) {
      // An orderly end before the step's update: a feature source that stays down (exit 4), refuses an answer
      // (exit 3) or a stop signal while waiting for it (130). The last completed step is saved first (one
      // process: ranks would wait in the step's collectives).
      const bool source_end =
          e.kind() == ErrorKind::source_down || e.kind() == ErrorKind::input || e.kind() == ErrorKind::interrupted;
      if (!source_end || group_->size() > 1 || updating_) throw;
      --state_.step;
      sampler_->restore(sampler_at);
      if (state_.step > saved_step_) save();
      if (e.kind() != ErrorKind::interrupted) throw;
      loop_seconds_ = seconds_since(loop_started) - side_seconds_;
      return ExitReason::interrupted;
    }
    const std::int64_t step = state_.step;
    const bool last = step == total_steps_;
    if (o_.eval_steps > 0 && step % o_.eval_steps == 0 && !last) evaluate(step_line_due(step));
    if (step_line_due(step)) log_window();
    if (o_.save_steps > 0 && step % o_.save_steps == 0 && !last) save();
    if (hooks_.after_step) hooks_.after_step(step);
    // Every rank takes the same decision: a signal on any of them stops them all after this step.
    if (group_->any(signals_.requested()) && !last) {
      loop_seconds_ = seconds_since(loop_started) - side_seconds_;
      if (window_->counts.steps > 0) log_window();
      save();
      return ExitReason::interrupted;
    }
  }
  // ---- the end: save, then evaluate (which can still fail: the steps are kept, a resume evaluates) ----
  graphs_->synchronize();
  loop_seconds_ = seconds_since(loop_started) - side_seconds_;
  save();
  evaluate(/*with_step_line=*/false);
  mark_best();
  // A signal during the final evaluation or save: the checkpoint is there; the run reports it.
  if (group_->any(signals_.requested())) return ExitReason::interrupted;
  log::info("train", "done: {} steps in {:.1f} s; head saved in {}", state_.step, seconds_since(started_),
            checkpoints_->checkpoint_path(state_.step).string());
  if (device_.is_cuda())
    log::info("train", "CUDA graphs: {} captured, {} replays; {} shapes ran eagerly", graphs_->captured_count(),
              graphs_->replay_count(), graphs_->eager_count());
  return ExitReason::completed;
}

void Trainer::train_step() {
  const std::int64_t step = ++state_.step;
  updating_ = false;
  // (a) forward + backward of each micro-batch; the loss denominators of the whole step first.
  std::vector<data::Batch> micro;
  for (std::int64_t m = 0; m < o_.gradient_accumulation_steps; ++m)
    micro.push_back(data::make_batch(*inputs_.train, sampler_->next()));
  // The row's loss plan: the step's denominators, and each micro-batch's extra input (a DFlash head's
  // anchors), drawn on the host from (seed, step, micro-batch, rank): a resumed run draws what the
  // interrupted one would have.
  auto plan = spec_->loss_plan(micro, head_->config(),
                               head::PlanSeed{static_cast<std::uint64_t>(o_.seed), step, group_->rank()});
  auto local = StepCounts::of(micro, std::move(plan.denominators));
  // Host counts of all ranks at once: the loss denominators (normalised by the global count, so the
  // summed gradients are exact), then the real and the computed tokens of the step.
  const auto counts = StepCounts::from_vector(group_->sum(local.to_vector()));
  const auto denominators = denominator_tensor(counts.denominators);
  const double flops = step_flops(*spec_, head_->config(), step_target_, micro, plan.extras);
  optimizer_->zero_grad();
  optimizer_->set_lr(schedule_.lr(step - 1));
  step_loss_.zero_();
  for (std::size_t m = 0; m < micro.size(); ++m)
    micro_batches_->run(*graphs_, micro[m], denominators, step_loss_, window_->metrics, plan.extras[m]);
  // The gradients and the loss of every rank, summed (between the graphs on GPU; nothing on one rank).
  group_->sum(comm_.buffer);
  // (b) clip + update, independent of the batch shape.
  updating_ = true;
  graphs_->run(device::kOptimizerUpdate, [&] {
    optimizer_->step(step_loss_);
    window_->loss.add_(step_loss_);
    window_->grad_norm.add_(optimizer_->last_grad_norm());
  });
  window_->counts.add(counts.real_tokens, counts.computed_tokens, flops);
  process_flops_ += flops;
  process_real_tokens_ += static_cast<double>(counts.real_tokens);
  state_.real_tokens += static_cast<double>(counts.real_tokens);
  if (logger_) logger_->on_step(step);
}

template <typename F>
void Trainer::side_work(F&& f) {
  const auto t0 = Clock::now();
  f();
  const double s = seconds_since(t0);
  side_seconds_ += s;
  window_->side_seconds += s;
}

// Rank 0 evaluates (every rank holds the same head), the others wait; then the result is logged.
void Trainer::evaluate(bool with_step_line) {
  graphs_->synchronize();
  side_work([&] {
    if (group_->is_main()) evals_->run(inputs_, features_, *head_, state_.step);
    group_->barrier();
  });
  if (logger_) evals_->log(*logger_, with_step_line);
}

void Trainer::save() {
  // Rank 0 writes (the optimizer state is the same on every rank); the others wait for it.
  side_work([&] {
    const std::int64_t step = state_.step;
    graphs_->synchronize();
    saved_step_ = step;
    if (group_->is_main()) {
      state_.sampler = sampler_->state();
      checkpoints_->save(
          step, [&](const std::filesystem::path& dir) { write_checkpoint_files(dir, *head_, *optimizer_, state_); });
      checkpoints_->rotate(o_.save_total_limit);
    }
    mark_best();
    group_->barrier();
  });
}

void Trainer::mark_best() { evals_->mark_best(state_.step, *checkpoints_); }

}  // namespace eagle::train::detail

namespace eagle::train {

run::RunSummary train(const config::Options& opts, const std::vector<std::string>& command_line,
                      const TrainHooks& hooks) {
  const auto o = with_init_draft(opts);  // the draft --init_draft names decides what the inputs are loaded for
  if (auto done = already_completed(o, device::launch_from_env().world_size)) return *done;
  return detail::Trainer(o, command_line, hooks).run();
}

}  // namespace eagle::train
