// One run's logging sinks fed the same statistics.
#include "eagle/io/run_logger.h"

namespace eagle::io {

RunLogger::RunLogger(const std::filesystem::path& output_dir, std::int64_t total_steps,
                     std::optional<std::int64_t> resumed_step, ProgressMode mode)
    : metrics_(output_dir, resumed_step),
      tensorboard_(output_dir),
      progress_(total_steps, resumed_step.value_or(0), mode) {
  tensorboard_.session_start(resumed_step ? *resumed_step + 1 : 0);
}

void RunLogger::log_step(const StepStats& s, const EvalStats* eval) {
  progress_.log_step(s);
  nlohmann::json record = to_json(s);
  auto scalars = tensorboard_scalars(s);
  if (eval) {
    progress_.log_eval(*eval);
    record.update(to_json(*eval));
    auto more = tensorboard_scalars(*eval);
    scalars.insert(scalars.end(), more.begin(), more.end());
  }
  metrics_.write(record);
  tensorboard_.add_scalars(s.step, scalars);
}

void RunLogger::log_eval(const EvalStats& e) {
  progress_.log_eval(e);
  metrics_.write(to_json(e));
  tensorboard_.add_scalars(e.step, tensorboard_scalars(e));
}

}  // namespace eagle::io
