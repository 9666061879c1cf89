// What a checkpoint holds besides the head's weights: optimizer state, the step, the sampler's
// position, RNG state and the resolved config, and how a run is restored from it (used by the
// trainer only, so it lives beside it).
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>

#include <nlohmann/json.hpp>

#include "eagle/config/options.h"
#include "eagle/data/sampler.h"
#include "eagle/head/head.h"
#include "eagle/run/summary.h"
#include "eagle/train/optimizer.h"

namespace eagle::train {

inline constexpr const char* kTrainerStateFile = "trainer_state.json";
inline constexpr const char* kOptimizerFile = "optimizer.safetensors";
inline constexpr const char* kRngFile = "rng_state.safetensors";
inline constexpr std::int64_t kTrainerStateVersion = 1;  // trainer_state.json's format_version (required)

struct TrainerState {
  std::int64_t step = 0;        // optimizer steps completed
  nlohmann::json sampler;       // Sampler::state()
  nlohmann::json config;        // the resolved options of the run
  double real_tokens = 0;       // real tokens trained on so far (all ranks)
  std::int64_t world_size = 1;  // data-parallel ranks of the run (a resume needs as many)
};

// Writes the head (SGLang layout), optimizer state, RNG state and trainer_state.json into dir.
void write_checkpoint_files(const std::filesystem::path& dir, head::DraftHead& head, const AdamW& optimizer,
                            const TrainerState& state);
// dir/trainer_state.json alone (Error(input) naming the file when missing or malformed).
TrainerState read_trainer_state(const std::filesystem::path& dir);
// Restores head weights, optimizer state, RNG state and the sampler position; returns the state.
TrainerState restore_checkpoint(const std::filesystem::path& dir, head::DraftHead& head, AdamW& optimizer,
                                data::Sampler& sampler);

// A checkpoint resumes only this run: a step in [0, max_steps' ceiling] (Error(input)), as many ranks (world_size), and
// the options that shape the head, its loss or the data order unchanged, aux ids compared as resolved (Error(usage)
// naming each that differs).
void check_resumable(const TrainerState& saved, const nlohmann::json& options, int world_size,
                     const std::filesystem::path& checkpoint);
// A resumed run whose checkpoint is the last step of a completed run with these options: nothing to
// do, and nothing of it is touched (no lock, no data, no target). Decided from the files alone, the
// same on every rank (output_dir is one shared folder). An epoch-planned run counts as complete only
// with its num_train_epochs unchanged (its planned steps are then summary.json's). Checks the
// checkpoint as check_resumable does.
std::optional<run::RunSummary> already_completed(const config::Options& o, int world_size);

}  // namespace eagle::train
