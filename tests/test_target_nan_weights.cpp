// NaN or Inf in a target's weights is refused by every command that runs the target, naming the tensor, with
// exit 3 (issue 53 item 4): a NaN correction bias of a DeepSeek-V3 target trained, evaluated, dumped and
// generated to exit 0, and `--draft mtp` carried a NaN in the MTP layer's frozen bias into its checkpoint.
#include <torch/torch.h>
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <limits>
#include <string>

#include "eagle/model/safetensors.h"
#include "helpers.h"

using eagle::test::run_cli;
using eagle::test::TempDir;
namespace fs = std::filesystem;

namespace {

const fs::path kModels = fs::path(EAGLE_SOURCE_DIR) / "tests/fixtures/models";
const std::string kData = EAGLE_SOURCE_DIR "/tests/fixtures/data/smoke.jsonl";

// A copy of a fixture folder with one value of one tensor replaced.
fs::path planted(const TempDir& dir, const std::string& fixture, const std::string& tensor, float value) {
  const auto out = dir / fixture;
  fs::create_directories(out);
  fs::copy_file(kModels / fixture / "config.json", out / "config.json");
  auto tensors = eagle::model::load_safetensors((kModels / fixture / "model.safetensors").string());
  REQUIRE(tensors.count(tensor));
  auto t = tensors.at(tensor).clone();
  t.view(-1)[t.numel() / 2] = value;
  tensors[tensor] = t;
  eagle::model::save_safetensors((out / "model.safetensors").string(), tensors);
  return out;
}

}  // namespace

TEST_CASE("every command that runs the target refuses NaN or Inf weights naming the tensor", "[target]") {
  TempDir dir;
  const std::string tensor = "model.layers.1.mlp.gate.e_score_correction_bias";
  const auto nan_target = planted(dir, "tiny-deepseek-v3-mtp", tensor, std::numeric_limits<float>::quiet_NaN());
  const std::string common = " --model_name_or_path " + nan_target.string() + " --data_path " + kData +
                             " --training_seq_len 256 --device cpu --num_threads 1";
  const std::string commands[] = {
      "train" + common + " --max_steps 1 --output_dir " + (dir / "run").string(),
      "train" + common + " --draft mtp --max_steps 1 --output_dir " + (dir / "mtp").string(),
      "dump-features" + common + " --output " + (dir / "features").string(),
      "generate" + common + " --max_new_tokens 4 --output " + (dir / "out.jsonl").string(),
      "inspect --model_name_or_path " + nan_target.string(),
      // The shipped MTP layer as a checkpoint: eval reads the target before the head.
      "eval --checkpoint " + nan_target.string() + common,
  };
  for (const auto& command : commands) {
    auto r = run_cli(command);
    INFO(command << "\n" << r.output);
    CHECK(r.exit_code == 3);
    CHECK_THAT(r.output, Catch::Contains("NaN or Inf") && Catch::Contains(tensor));
  }
  CHECK_FALSE(fs::exists(dir / "run" / "checkpoint-1"));
  CHECK_FALSE(fs::exists(dir / "out.jsonl"));
}

TEST_CASE("--draft mtp refuses an MTP layer holding NaN or Inf, frozen tensors included, before training", "[target]") {
  TempDir dir;
  // Layer 2 is the shipped MTP layer (the target has 2): the target load does not read it, the head does.
  for (const std::string tensor :
       {"model.layers.2.mlp.gate.e_score_correction_bias", "model.layers.2.eh_proj.weight"}) {
    INFO(tensor);
    TempDir sub;
    const auto target = planted(sub, "tiny-deepseek-v3-mtp", tensor, std::numeric_limits<float>::infinity());
    const std::string common = " --model_name_or_path " + target.string() + " --data_path " + kData +
                               " --training_seq_len 256 --device cpu --num_threads 1";
    auto r = run_cli("train" + common + " --draft mtp --max_steps 1 --output_dir " + (sub / "run").string());
    INFO(r.output);
    CHECK(r.exit_code == 3);
    CHECK_THAT(r.output, Catch::Contains("NaN or Inf") && Catch::Contains(target.string()));
    CHECK_FALSE(fs::exists(sub / "run" / "checkpoint-1"));
    // An EAGLE head on the same target trains: its MTP layer is not read.
    auto eagle = run_cli("train" + common + " --max_steps 1 --eval_steps 0 --output_dir " + (sub / "eagle").string());
    INFO(eagle.output);
    CHECK(eagle.exit_code == 0);
  }
}
