// The Trainer of `eagle-train train` (trainer.cpp: set-up and the loop; trainer_end.cpp: the step
// line of each logging window and the one exit path that writes summary.json). Private to src/train.
#pragma once

#include <chrono>
#include <exception>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "eagle/data/sampler.h"
#include "eagle/device/cuda_graph_cache.h"
#include "eagle/device/distributed.h"
#include "eagle/device/peak_flops.h"
#include "eagle/features/inputs.h"
#include "eagle/io/run_logger.h"
#include "eagle/run/checkpoint_dir.h"
#include "eagle/run/dir_lock.h"
#include "eagle/run/lr_schedule.h"
#include "eagle/run/signals.h"
#include "eagle/train/evaluate.h"
#include "eagle/train/micro_batch.h"
#include "eagle/train/optimizer.h"
#include "eagle/train/setup.h"
#include "eagle/train/trainer.h"
#include "train_state.h"

namespace eagle::train::detail {

using Clock = std::chrono::steady_clock;
using run::ExitReason;

inline double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

class Trainer {
 public:
  Trainer(const config::Options& o, const std::vector<std::string>& command_line, const TrainHooks& hooks);
  run::RunSummary run();

 private:
  // Set-up, in order.
  void join_ranks();
  void claim_output_dir();
  void check_resume();
  void build();
  void restore();
  void open_sinks(const std::vector<std::string>& command_line);
  // The loop and its parts.
  ExitReason loop();
  void train_step();
  void evaluate(bool with_step_line);
  void save();
  void mark_best();  // rank 0 (the one holding evaluations): checkpoint-best from the latest one
  void log_window();
  bool step_line_due(std::int64_t step) const { return step % o_.logging_steps == 0 || step == total_steps_; }
  // Runs side work (evaluation, checkpoint) and books its time outside the training time.
  template <typename F>
  void side_work(F&& f);
  // The end.
  run::RunSummary finish(ExitReason reason, std::exception_ptr failure);
  void agree_on_exit_code(int exit_code);

  const config::Options o_;
  const nlohmann::json options_json_;  // o_ as every checkpoint records it
  const TrainHooks hooks_;
  const Clock::time_point started_ = Clock::now();
  torch::Device device_{torch::kCPU};
  std::unique_ptr<device::ProcessGroup> group_;  // one process: a group of one, every collective the identity
  std::optional<run::DirLock> lock_;             // rank 0: output_dir is this run's until the process ends
  std::optional<run::CheckpointRef> resume_;
  features::RunInputs inputs_;  // the data; the target, or the stored features standing in for it
  std::shared_ptr<head::DraftHead> head_;
  const head::DraftSpec* spec_ = nullptr;  // the head's row of the draft table
  std::int64_t K_ = 0;
  features::FeatureSources features_;  // the head inputs of each batch of each split
  std::optional<data::Sampler> sampler_;
  std::optional<device::CudaGraphCache> graphs_;
  std::optional<AdamW> optimizer_;
  std::int64_t total_steps_ = 0;
  run::LrSchedule schedule_;
  std::optional<RunEvaluations> evals_;  // rank 0: the latest evaluation, checkpoint-best, the summary's metrics
  TrainerState state_;  // step_, the sampler position, the config and the tokens seen
  std::optional<io::RunLogger> logger_;
  std::optional<run::CheckpointDir> checkpoints_;
  run::StopSignals signals_;
  run::RunSummary summary_;

  // Device state of the loop.
  std::optional<LogWindow> window_;
  device::FlatGradients comm_;  // the gradients (the parameters' .grad are views into it) and the
                                // step's loss (its one extra value), summed over ranks in one collective
  torch::Tensor step_loss_;     // comm_'s last element, 0-dim
  std::optional<MicroBatchRunner> micro_batches_;  // the step's micro-batches on buffers per batch shape
  double loop_seconds_ = 0, side_seconds_ = 0;  // training steps alone; evaluations and checkpoints
  std::optional<Clock::time_point> loop_started_;  // set when the loop begins (summary.json's rate on any exit)
  bool updating_ = false;                          // the step's optimizer update has begun (no longer the last step)
  std::int64_t saved_step_ = 0;                    // the newest step with a checkpoint (written or resumed)
  double process_real_tokens_ = 0;                 // real tokens of this process's steps
  double process_flops_ = 0;                       // model FLOPs of this process's steps (train/step_flops.h)
  const target::TargetConfig* step_target_ = nullptr;  // the target when it runs in the step (online)
  device::PeakFlops peak_;                             // what MFU is measured against
  std::int64_t nonfinite_reported_ = 0;
  double last_loss_ = std::numeric_limits<double>::quiet_NaN();
};

}  // namespace eagle::train::detail
