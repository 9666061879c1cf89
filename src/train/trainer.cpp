// The training loop of `eagle-train train` (docs/training.md): set-up, then per optimizer step
// (a) forward+backward of each micro-batch, graphed per batch shape, and (b) clip + AdamW update,
// with logging, evaluation and checkpoints in plain `step % every == 0` blocks.
#include "eagle/train/trainer.h"

#include <chrono>
#include <cmath>
#include <limits>
#include <map>

#include "eagle/config/resolve.h"
#include "eagle/data/sampler.h"
#include "eagle/io/log.h"
#include "eagle/io/run_logger.h"
#include "eagle/train/batch_tensors.h"
#include "eagle/train/checkpoint_dir.h"
#include "eagle/train/evaluate.h"
#include "eagle/train/loss_metrics.h"
#include "eagle/train/lr_schedule.h"
#include "eagle/train/run_files.h"
#include "eagle/train/session.h"
#include "eagle/train/signals.h"
#include "eagle/train/step_cache.h"
#include "eagle/train/summary.h"
#include "eagle/train/train_state.h"
#include "eagle/util/error.h"

namespace eagle::train {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// Fixed device buffers of one batch shape: what the captured graph of that shape reads.
struct ShapeBuffers {
  BatchTensors batch;
  torch::Tensor denominators;  // [K] fp32
};

// Device-side sums over the steps since the last log line; read only at log time.
struct Window {
  torch::Tensor loss, metrics, grad_norm;
  std::int64_t steps = 0;
  double real_tokens = 0, computed_tokens = 0;
  double side_seconds = 0;  // evaluations and checkpoints inside the window, not training time
  Clock::time_point start = Clock::now();
  void reset() {
    loss.zero_();
    metrics.zero_();
    grad_norm.zero_();
    steps = 0;
    real_tokens = computed_tokens = side_seconds = 0;
    start = Clock::now();
  }
};

std::int64_t plan_total_steps(const config::Options& o, data::Sampler& sampler) {
  if (o.max_steps > 0) return o.max_steps;
  double batches = 0;
  const auto whole = static_cast<std::int64_t>(o.num_train_epochs);
  for (std::int64_t e = 0; e < whole; ++e) batches += static_cast<double>(sampler.batches_in_epoch(e));
  batches += (o.num_train_epochs - static_cast<double>(whole)) * static_cast<double>(sampler.batches_in_epoch(whole));
  auto steps = static_cast<std::int64_t>(batches / static_cast<double>(o.gradient_accumulation_steps));
  EAGLE_CHECK(steps > 0, Error(ErrorKind::config, "the run would take no optimizer step")
                             .found(fmt::format("{} batches per epoch, num_train_epochs {}", sampler.batches_in_epoch(0),
                                                o.num_train_epochs))
                             .hint("raise num_train_epochs or set max_steps"));
  return steps;
}

}  // namespace

void train(const config::Options& o, const std::vector<std::string>& command_line) {
  const auto started = Clock::now();
  configure_runtime(o);
  const torch::Device device = resolve_device(o.device);
  auto resume = prepare_output_dir(o.output_dir, o.resume_from_checkpoint, o.overwrite_output_dir);
  write_run_files(o.output_dir, o, command_line);

  // ---- set-up: data, target, head, sampler, optimizer, schedule ----
  SessionData data = load_session_data(o);
  model::TargetModel target = load_target(o, device);
  check_vocabulary(data.train, target);
  if (data.heldout) check_vocabulary(*data.heldout, target);
  auto head = make_head(o, target, data.train.stats(), device);
  const std::int64_t K = head->config().steps();
  model::TeacherSpec teacher = teacher_spec(*head, device);

  data::Sampler sampler(data.train.lengths(), data::SamplerOptions::from(o));
  std::vector<ShapeKey> shapes;
  for (const auto& s : sampler.shapes()) shapes.push_back({s.rows, s.length});
  StepCache graphs(device, o.max_cuda_graphs, shapes);
  AdamW optimizer(named_parameters(*head),
                  AdamWConfig{o.adam_beta1, o.adam_beta2, o.adam_epsilon, o.weight_decay, o.max_grad_norm});
  const std::int64_t total_steps = plan_total_steps(o, sampler);
  const LrSchedule schedule = make_lr_schedule(o, total_steps);

  TrainerState state;
  state.config = config::to_json(o, config::Command::train);
  if (resume) {
    state = restore_checkpoint(resume->path, *head, optimizer, sampler);
    log::info("ckpt", "resumed from {} at step {}", resume->path.string(), state.step);
  }
  EvalSettings eval_settings{data::SamplerOptions::from(o), 64, o.eval_num_prompts, o.eval_max_new_tokens,
                             o.eval_draft_len > 0 ? o.eval_draft_len : o.ttt_steps, o.bf16};
  eval_settings.batching.group_by_length = false;

  io::RunLogger logger(o.output_dir, total_steps, resume ? std::optional<std::int64_t>(state.step) : std::nullopt);
  CheckpointDir checkpoints(o.output_dir);
  StopSignals signals;
  RunSummary summary;
  summary.total_steps = total_steps;
  if (resume) summary.resumed_from_step = state.step;
  log::info("train", "{} optimizer steps of {} micro-batch(es); EAGLE-{} head with {} TTT step(s), {} parameters",
            total_steps, o.gradient_accumulation_steps, head->config().eagle_version, K, count_parameters(*head));

  // ---- device state of the loop ----
  const auto f32 = torch::TensorOptions().dtype(torch::kFloat32).device(device);
  Window window{torch::zeros({}, f32), torch::zeros({K, kMetricColumns}, f32), torch::zeros({}, f32)};
  torch::Tensor step_loss = torch::zeros({}, f32);
  std::map<ShapeKey, ShapeBuffers> buffers;
  double run_real_tokens = 0;
  const auto loop_started = Clock::now();
  // Wall time of the training steps alone: evaluations and checkpoints are not counted.
  double loop_seconds = 0, side_seconds = 0;
  std::int64_t nonfinite_reported = 0;
  std::optional<io::EvalStats> last_eval;
  double last_loss = std::numeric_limits<double>::quiet_NaN();

  auto save = [&](std::int64_t step) {
    const auto t0 = Clock::now();
    state.step = step;
    state.sampler = sampler.state();
    graphs.synchronize();
    checkpoints.save(step, [&](const std::filesystem::path& dir) {
      write_checkpoint_files(dir, *head, optimizer, state);
    });
    checkpoints.rotate(o.save_total_limit);
    if (last_eval && last_eval->step == step)
      checkpoints.update_best(step, last_eval->ar ? "ar" : "tau", last_eval->ar ? *last_eval->ar : last_eval->tau);
    side_seconds += seconds_since(t0);
    window.side_seconds += seconds_since(t0);
  };
  auto run_eval = [&](std::int64_t step) -> const io::EvalStats* {
    if (!data.heldout || data.heldout->size() == 0) return nullptr;
    graphs.synchronize();
    const auto t0 = Clock::now();
    last_eval = evaluate(target, *head, teacher, *data.heldout, eval_settings, step);
    side_seconds += seconds_since(t0);
    window.side_seconds += seconds_since(t0);
    return &*last_eval;
  };
  auto log_window = [&](std::int64_t step, const io::EvalStats* eval) {
    graphs.synchronize();
    const double elapsed = std::max(1e-9, seconds_since(window.start) - window.side_seconds);
    auto metrics = summarize_metrics(window.metrics.cpu());
    io::StepStats s;
    s.step = step;
    s.total_steps = total_steps;
    s.loss = window.loss.item<double>() / static_cast<double>(window.steps);
    s.acc = metrics.acc;
    s.tau = metrics.tau;
    s.lr = schedule.lr(step - 1);
    s.grad_norm = window.grad_norm.item<double>() / static_cast<double>(window.steps);
    s.tokens_per_s = window.real_tokens / elapsed;
    s.padding_efficiency = window.computed_tokens > 0 ? window.real_tokens / window.computed_tokens : 0.0;
    s.ms_per_step = 1000.0 * elapsed / static_cast<double>(window.steps);
    s.nonfinite_steps = static_cast<std::int64_t>(optimizer.nonfinite_steps().item<double>());
    logger.log_step(s, eval);
    last_loss = s.loss;
    if (s.nonfinite_steps > nonfinite_reported) {
      auto first = static_cast<std::int64_t>(optimizer.first_nonfinite_step().item<double>());
      nonfinite_reported = s.nonfinite_steps;
      if (o.nan_policy == config::NanPolicy::error)
        throw Error(ErrorKind::training, "non-finite loss or gradient; the update was skipped")
            .place(fmt::format("step {}", first))
            .hint("lower learning_rate, check the data, or pass --nan_policy skip to go on");
      log::warn("train", "{} step(s) skipped for non-finite values so far (first at step {})", s.nonfinite_steps, first);
    }
    window.reset();
  };
  auto finish = [&](std::int64_t step, const std::string& reason) {
    summary.exit_reason = reason;
    summary.steps = step;
    summary.final_loss = std::isfinite(last_loss) ? std::optional<double>(last_loss) : std::nullopt;
    if (last_eval) {
      summary.ar = last_eval->ar;
      summary.acc = last_eval->acc;
      summary.tau = last_eval->tau;
    }
    summary.tokens_per_s = run_real_tokens / std::max(1e-9, loop_seconds);
    summary.wall_time_s = seconds_since(started);
    if (auto best = checkpoints.best()) summary.best_step = best->step;
    summary.gates = check_gates(summary, o.min_ar, o.max_final_loss);
    auto gate = gate_error(summary.gates);
    if (reason == "completed" && gate) {
      summary.exit_reason = "gate_missed";
      summary.exit_code = static_cast<int>(ExitCode::gate);
    }
    write_summary(o.output_dir, summary);
    logger.finish();
    if (reason == "completed" && gate) throw *gate;
  };

  // ---- the loop ----
  std::int64_t step = state.step;
  while (step < total_steps) {
    ++step;
    // (a) forward + backward of each micro-batch; the loss denominators of the whole step first.
    std::vector<data::Batch> micro;
    std::vector<std::int64_t> denominators(static_cast<std::size_t>(K), 0);
    for (std::int64_t m = 0; m < o.gradient_accumulation_steps; ++m) {
      micro.push_back(data::make_batch(data.train, sampler.next()));
      auto counts = count_loss_positions(micro.back(), K);
      for (std::int64_t k = 0; k < K; ++k) denominators[k] += counts[k];
    }
    auto host_denominators = torch::tensor(std::vector<float>(denominators.begin(), denominators.end()));
    optimizer.zero_grad();
    optimizer.set_lr(schedule.lr(step - 1));
    step_loss.zero_();
    for (const auto& batch : micro) {
      const ShapeKey key{batch.rows, batch.length};
      auto it = buffers.find(key);
      if (it == buffers.end())
        it = buffers.emplace(key, ShapeBuffers{allocate_like(batch, device), torch::zeros({K}, f32)}).first;
      ShapeBuffers& buf = it->second;
      copy_into(batch, buf.batch);
      buf.denominators.copy_(host_denominators, /*non_blocking=*/device.is_cuda());
      graphs.run(key, [&] {
        AutocastGuard autocast(device, o.bf16);
        auto out = head->train_step_forward(head_inputs(target, buf.batch, teacher), buf.denominators);
        out.loss.backward();
        step_loss.add_(out.loss.detach());
        window.metrics.add_(out.metric_sums);
      });
      window.real_tokens += static_cast<double>(batch.real_tokens);
      window.computed_tokens += static_cast<double>(batch.computed_tokens());
      run_real_tokens += static_cast<double>(batch.real_tokens);
    }
    // (b) clip + update, independent of the batch shape.
    graphs.run(ShapeKey{0, 0}, [&] {
      optimizer.step(step_loss);
      window.loss.add_(step_loss);
      window.grad_norm.add_(optimizer.last_grad_norm());
    });
    ++window.steps;
    logger.on_step(step);

    const bool last = step == total_steps;
    const io::EvalStats* eval = nullptr;
    if (o.eval_steps > 0 && step % o.eval_steps == 0 && !last) eval = run_eval(step);
    if (step % o.logging_steps == 0 || last) log_window(step, eval);
    else if (eval) logger.log_eval(*eval);
    if (o.save_steps > 0 && step % o.save_steps == 0 && !last) save(step);
    if (signals.requested() && !last) {
      loop_seconds = seconds_since(loop_started) - side_seconds;
      if (window.steps > 0) log_window(step, nullptr);
      save(step);
      summary.detail = signals.signal_name();
      summary.exit_code = static_cast<int>(ExitCode::interrupted);
      finish(step, "interrupted");
      throw Error(ErrorKind::interrupted, fmt::format("stopped by {} after step {}", signals.signal_name(), step))
          .hint(fmt::format("resume with --resume_from_checkpoint auto --output_dir {}", o.output_dir));
    }
  }
  // ---- the end: evaluate, save, summarise, gates ----
  graphs.synchronize();
  loop_seconds = seconds_since(loop_started) - side_seconds;
  if (const io::EvalStats* eval = run_eval(step)) logger.log_eval(*eval);
  save(step);
  log::info("train", "done: {} steps in {:.1f} s; head saved in {}", step, seconds_since(started),
            checkpoints.checkpoint_path(step).string());
  finish(step, "completed");
}

}  // namespace eagle::train
