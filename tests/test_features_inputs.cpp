// A run's inputs: data with no trainable position (every trained token at position 0 or 1, where
// the head predicts nothing) is refused by name before anything is built, for training and for a
// dump, instead of training at loss n/a and exiting 0.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "eagle/data/dataset.h"
#include "helpers.h"

using namespace eagle;
using nlohmann::json;
namespace fs = std::filesystem;

TEST_CASE("a trainable position is a trained token at position 2 or later", "[features]") {
  using data::Dataset;
  CHECK_FALSE(data::has_trainable_position(Dataset::from_samples({{{1, 2, 3}, {1, 1, 0}}, {{4, 5}, {1, 1}}})));
  CHECK(data::has_trainable_position(Dataset::from_samples({{{1, 2}, {1, 1}}, {{4, 5, 6}, {0, 0, 1}}})));
  CHECK_FALSE(data::has_trainable_position(Dataset::from_samples({})));
}

TEST_CASE("data with no trainable position is refused before training, named by file", "[features]") {
  test::TempDir tmp;
  // The smoke samples with only their first two tokens trained: each sample alone passes (it has a
  // trained token), and not one position trains.
  std::string early;
  for (const auto& j : test::read_jsonl(std::string(EAGLE_SOURCE_DIR) + "/tests/fixtures/data/smoke.jsonl")) {
    std::vector<int> mask(j["input_ids"].size(), 0);
    mask[0] = mask[1] = 1;
    early += json{{"input_ids", j["input_ids"]}, {"loss_mask", mask}}.dump() + "\n";
  }
  test::write_file(tmp / "early.jsonl", early);
  const std::string model = std::string(EAGLE_SOURCE_DIR) + "/tests/fixtures/models/tiny-llama";
  const std::string common = "--config " + std::string(EAGLE_SOURCE_DIR) + "/configs/smoke.json --model_name_or_path " +
                             model + " --data_path " + (tmp / "early.jsonl").string() + " --training_seq_len 64 ";
  auto train = test::run_cli("train " + common + "--max_steps 2 --output_dir " + (tmp / "run").string());
  INFO(train.output);
  CHECK(train.exit_code == 3);
  CHECK_THAT(train.output, Catch::Contains("early.jsonl") && Catch::Contains("no trainable position") &&
                               Catch::Contains("position 2 or later"));
  CHECK_FALSE(fs::exists(tmp / "run" / "checkpoint-2"));
  auto dump = test::run_cli("dump-features " + common + "--output " + (tmp / "f").string());
  INFO(dump.output);
  CHECK(dump.exit_code == 3);
  CHECK_THAT(dump.output, Catch::Contains("no trainable position"));
}
