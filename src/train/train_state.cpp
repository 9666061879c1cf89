// Checkpoint contents besides the folder mechanics (see train_state.h).
#include "train_state.h"

#include <algorithm>

#include <ATen/CPUGeneratorImpl.h>
#include <fmt/format.h>

#include <fstream>

#include "eagle/config/option_table.h"
#include "eagle/config/resolve.h"
#include "eagle/head/draft_spec.h"
#include "eagle/head/export/io.h"
#include "eagle/model/safetensors.h"
#include "eagle/run/checkpoint_dir.h"
#include "eagle/run/run_files.h"
#include "eagle/target/target.h"
#include "eagle/util/error.h"
#include "eagle/util/json_file.h"
#include "eagle/util/log.h"

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

// The steps output_dir/summary.json records of a completed run, and of how many planned; none when
// it records no completed run.
std::optional<std::pair<std::int64_t, std::int64_t>> completed_steps(const std::string& output_dir) {
  const auto file = std::filesystem::path(output_dir) / "summary.json";
  std::error_code ec;
  if (!std::filesystem::exists(file, ec)) return std::nullopt;
  try {  // an unreadable or malformed summary records no completed run
    const auto j = util::read_json_object(file, "run summary");
    if (j.value("exit_reason", std::string()) != "completed") return std::nullopt;
    return std::pair{j.value("steps", std::int64_t{-1}), j.value("total_steps", std::int64_t{-1})};
  } catch (const Error&) {
    return std::nullopt;
  } catch (const nlohmann::json::exception&) {
    return std::nullopt;
  }
}

}  // namespace

void write_checkpoint_files(const std::filesystem::path& dir, head::DraftHead& head, const AdamW& optimizer,
                            const TrainerState& state) {
  head::write_head_files(head, head::checkpoint_format(head.config()), dir.string());
  model::save_safetensors((dir / kOptimizerFile).string(), optimizer.state());
  model::save_safetensors((dir / kRngFile).string(), rng_states());
  nlohmann::json j;
  j["step"] = state.step;
  j["sampler"] = state.sampler;
  j["config"] = state.config;
  j["real_tokens"] = state.real_tokens;
  j["world_size"] = state.world_size;
  j["format_version"] = kTrainerStateVersion;
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
  // The layout this reader knows; another version's fields may mean something else.
  const auto version = util::json_field<std::int64_t>(j, "format_version", file);
  EAGLE_CHECK(version == kTrainerStateVersion,
              Error(ErrorKind::input, "unsupported trainer state version")
                  .file(file)
                  .place("format_version")
                  .expected(std::to_string(kTrainerStateVersion))
                  .found(std::to_string(version))
                  .hint("only checkpoints written by this eagle-train can be resumed"));
  return s;
}

TrainerState restore_checkpoint(const std::filesystem::path& dir, head::DraftHead& head, AdamW& optimizer,
                                data::Sampler& sampler) {
  TrainerState s = read_trainer_state(dir);
  head::load_head_weights(head, dir.string());
  optimizer.load_state(model::load_safetensors((dir / kOptimizerFile).string()), (dir / kOptimizerFile).string());
  set_rng_states(model::load_safetensors((dir / kRngFile).string()));
  sampler.restore(s.sampler);
  return s;
}

void check_resumable(const TrainerState& saved, const nlohmann::json& options, int world_size,
                     const std::filesystem::path& checkpoint) {
  EAGLE_CHECK(saved.world_size == world_size,
              Error(ErrorKind::usage, "the checkpoint was trained with another number of ranks")
                  .file(checkpoint.string())
                  .place("world_size")
                  .expected(fmt::format("{} (the checkpoint's)", saved.world_size))
                  .found(std::to_string(world_size))
                  .hint("resume with as many processes (torchrun --nproc-per-node and --nnodes); the data "
                        "order is planned per rank"));
  // A negative step is a damaged file: the schedule would run before step 0 (a negative learning
  // rate), and so is one past the most steps a run can plan (max_steps' range). A step past this
  // run's plan is resumed on purpose: it evaluates and saves once more.
  const auto most = static_cast<std::int64_t>(config::find_option("max_steps")->range_hi);
  EAGLE_CHECK(saved.step >= 0 && saved.step <= most,
              Error(ErrorKind::input, "the checkpoint's step is out of range")
                  .file((checkpoint / kTrainerStateFile).string())
                  .place("step")
                  .expected(fmt::format("a step in [0, {}] (the optimizer steps the checkpoint has taken; at most "
                                        "max_steps' ceiling)",
                                        most))
                  .found(std::to_string(saved.step))
                  .hint("the file is damaged: resume another checkpoint of the run"));
  // Options whose default stands for a value resolved at start-up (empty aux ids: the target's
  // default layers; mask_token_id -1: the target's first end id) are compared resolved: the
  // checkpoint's head records what its run resolved, so the value written out is no conflict and
  // another one is. A default now resolves as the checkpoint's did for the same target (the head
  // built from it is compared with the checkpoint's config.json field by field when restored).
  nlohmann::json before = saved.config, now = options;
  const std::string aux = "aux_hidden_state_layer_ids", mask = "mask_token_id", layers = "draft_num_layers";
  // draft_num_layers 0 is the draft's default (a run before 0 existed recorded 1 for EAGLE).
  for (auto* j : {&before, &now})
    if (j->contains(layers) && (*j)[layers].is_number_integer())
      (*j)[layers] = config::resolved_draft_num_layers(j->value("draft", std::string("eagle")),
                                                       (*j)[layers].get<std::int64_t>());
  // The rest is the checkpoint head's row's (head::DraftSpec::resolve_resume).
  if (before.contains(aux) || before.contains(mask)) {
    const head::HeadConfig head = head::read_head_folder_config(checkpoint.string());
    head::draft_spec(head).resolve_resume(head, before, now);
  }
  const auto conflicts = run::resume_conflicts(before, now);
  if (!conflicts.empty()) {
    std::string list;
    for (const auto& c : conflicts) list += "\n  " + c;
    throw Error(ErrorKind::usage,
                fmt::format("the checkpoint was trained with other options ({} differ):{}", conflicts.size(), list))
        .file(checkpoint.string())
        .hint(
            "resume with the checkpoint's values (its trainer_state.json), or start a new run; docs/training.md "
            "lists what may change on resume");
  }
  // A server's features and the target's own forward agree to rounding only (other kernels, often
  // another dtype): the resume is allowed, its losses are not those of an uninterrupted run.
  const auto server = [](const nlohmann::json& j) { return j.value("target_server", std::string()); };
  if (server(before).empty() != server(now).empty())
    log::warn("ckpt",
              "the checkpoint's steps took the target's features {}, this resume takes them {}: the run continues, "
              "but not bit-exact (the server's kernels round differently from this process's target forward)",
              server(before).empty() ? "from the target here" : "from --target_server " + server(before),
              server(now).empty() ? "from the target here" : "from --target_server " + server(now));
}

std::optional<run::RunSummary> already_completed(const config::Options& o, int world_size) {
  const auto resume = run::find_resume(o.resume_from_checkpoint, o.output_dir);
  if (!resume) return std::nullopt;
  const auto done = completed_steps(o.output_dir);
  if (!done) return std::nullopt;
  const TrainerState saved = read_trainer_state(resume->path);
  check_resumable(saved, config::to_json(o, config::Command::train), world_size, resume->path);
  const bool same_epochs = saved.config.value("num_train_epochs", -1.0) == o.num_train_epochs;
  const std::int64_t total = o.max_steps > 0 ? o.max_steps : same_epochs ? done->second : saved.step + 1;
  if (done->first != saved.step || saved.step < total) return std::nullopt;
  log::info("train", "the run in {} is complete ({} of {} steps, summary.json says completed): nothing to do",
            o.output_dir, saved.step, total);
  run::RunSummary s;
  s.steps = s.total_steps = saved.step;
  s.real_tokens = saved.real_tokens;
  return s;
}

}  // namespace eagle::train
