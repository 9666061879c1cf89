// Checkpoint contents besides the folder mechanics (see train_state.h).
#include "train_state.h"

#include <ATen/CPUGeneratorImpl.h>
#include <fmt/format.h>

#include <fstream>

#include "eagle/model/head_io.h"
#include "eagle/model/safetensors.h"
#include "eagle/util/error.h"
#include "eagle/util/json_file.h"

#ifdef EAGLE_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/CUDAGeneratorImpl.h>
#endif

namespace eagle::train {
namespace {

std::map<std::string, torch::Tensor> rng_states() {
  std::map<std::string, torch::Tensor> out;
  out["cpu"] = at::detail::getDefaultCPUGenerator().get_state();
#ifdef EAGLE_WITH_CUDA
  for (int d = 0; d < static_cast<int>(torch::cuda::device_count()); ++d)
    out[fmt::format("cuda:{}", d)] = at::cuda::detail::getDefaultCUDAGenerator(d).get_state();
#endif
  return out;
}

void set_rng_states(const std::map<std::string, torch::Tensor>& states) {
  if (auto it = states.find("cpu"); it != states.end()) {
    at::Generator gen = at::detail::getDefaultCPUGenerator();
    gen.set_state(it->second);
  }
#ifdef EAGLE_WITH_CUDA
  for (int d = 0; d < static_cast<int>(torch::cuda::device_count()); ++d)
    if (auto it = states.find(fmt::format("cuda:{}", d)); it != states.end()) {
      at::Generator gen = at::cuda::detail::getDefaultCUDAGenerator(d);
      gen.set_state(it->second);
    }
#endif
}

}  // namespace

void write_checkpoint_files(const std::filesystem::path& dir, model::DraftHead& head, const AdamW& optimizer,
                            const TrainerState& state) {
  model::write_head_files(head, model::checkpoint_format(head.config()), dir.string());
  model::save_safetensors((dir / kOptimizerFile).string(), optimizer.state());
  model::save_safetensors((dir / kRngFile).string(), rng_states());
  nlohmann::json j;
  j["step"] = state.step;
  j["sampler"] = state.sampler;
  j["config"] = state.config;
  j["real_tokens"] = state.real_tokens;
  j["world_size"] = state.world_size;
  j["format_version"] = 1;
  std::ofstream out(dir / kTrainerStateFile);
  out << j.dump(2) << "\n";
  EAGLE_CHECK(out.good(),
              Error(ErrorKind::output, "cannot write the trainer state").file((dir / kTrainerStateFile).string()));
}

TrainerState read_trainer_state(const std::filesystem::path& dir) {
  const auto state_path = dir / kTrainerStateFile;
  const auto file = state_path.string();
  const nlohmann::json j = util::read_json_object(state_path, "checkpoint's trainer state",
                                                  "only checkpoints written by eagle-train train can be resumed");
  TrainerState s;
  s.step = util::json_field<std::int64_t>(j, "step", file);
  s.sampler = util::json_field<nlohmann::json>(j, "sampler", file);
  s.config = util::json_field<nlohmann::json>(j, "config", file);
  s.real_tokens = util::json_field_or(j, "real_tokens", 0.0, file);
  s.world_size = util::json_field_or(j, "world_size", std::int64_t{1}, file);
  return s;
}

TrainerState restore_checkpoint(const std::filesystem::path& dir, model::DraftHead& head, AdamW& optimizer,
                                data::Sampler& sampler) {
  TrainerState s = read_trainer_state(dir);
  model::load_head_weights(head, dir.string());
  optimizer.load_state(model::load_safetensors((dir / kOptimizerFile).string()), (dir / kOptimizerFile).string());
  set_rng_states(model::load_safetensors((dir / kRngFile).string()));
  sampler.restore(s.sampler);
  return s;
}

}  // namespace eagle::train
