// A run's inputs: data with no trainable position (every trained token at position 0 or 1, where
// the head predicts nothing) is refused by name before anything is built, for training and for a
// dump, instead of training at loss n/a and exiting 0; a multimodal target's media placeholders in
// the data are refused by every command that reads data against the target.
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

TEST_CASE("a multimodal target's media placeholders in the data are refused by name; text-only data trains",
          "[features]") {
  test::TempDir tmp;
  const std::string root = EAGLE_SOURCE_DIR;
  const std::string vl = root + "/tests/fixtures/models/tiny-qwen3-5-vl";
  const auto config = json::parse(test::read_file(fs::path(vl) / "config.json"));
  // The first 8 smoke samples (byte-level ids below 230: no placeholder), the third given one at position 5.
  std::vector<json> samples;
  for (const auto& j : test::read_jsonl(root + "/tests/fixtures/data/smoke.jsonl"))
    if (samples.size() < 8) samples.push_back(j);
  auto write = [&](const fs::path& path, std::int64_t media) {
    std::string text;
    for (std::size_t i = 0; i < samples.size(); ++i) {
      auto j = samples[i];
      if (i == 2 && media >= 0) j["input_ids"][5] = media;
      text += j.dump() + "\n";
    }
    test::write_file(path, text);
  };
  const std::string common = "--config " + root + "/configs/smoke.json --model_name_or_path " + vl;
  for (const char* key : {"image_token_id", "video_token_id", "vision_start_token_id", "vision_end_token_id"}) {
    INFO(key);
    const auto id = config[key].get<std::int64_t>();
    const auto data = tmp / (std::string(key) + ".jsonl");
    write(data, id);
    auto train = test::run_cli("train " + common + " --data_path " + data.string() + " --output_dir " +
                               (tmp / ("run-" + std::string(key))).string());
    INFO(train.output);
    CHECK(train.exit_code == 3);
    CHECK_THAT(train.output, Catch::Contains(data.filename().string() + ": line 3, field input_ids[5]") &&
                                 Catch::Contains("a media placeholder token") &&
                                 Catch::Contains("found " + std::to_string(id) + " (the target's " + key + ")") &&
                                 Catch::Contains("vision tower is not loaded"));
  }
  const auto bad = tmp / "image_token_id.jsonl";
  const auto image = std::to_string(config["image_token_id"].get<std::int64_t>());
  // generate and dump-features refuse it before writing anything.
  auto gen = test::run_cli("generate --model_name_or_path " + vl + " --data_path " + bad.string() + " --output " +
                           (tmp / "out.jsonl").string() + " --max_new_tokens 4 --device cpu --num_threads 1");
  INFO(gen.output);
  CHECK(gen.exit_code == 3);
  CHECK_THAT(gen.output, Catch::Contains("line 3, field input_ids[5]") && Catch::Contains("image_token_id"));
  CHECK_FALSE(fs::exists(tmp / "out.jsonl"));
  auto dump =
      test::run_cli("dump-features " + common + " --data_path " + bad.string() + " --output " + (tmp / "f").string());
  INFO(dump.output);
  CHECK(dump.exit_code == 3);
  CHECK_THAT(dump.output, Catch::Contains("line 3, field input_ids[5]") && Catch::Contains("image_token_id"));
  // Prepared data (prepare knows no target): train refuses it by file, sample and position (no split held
  // out in memory: the sample is train.bin's).
  auto prep =
      test::run_cli("prepare --input " + bad.string() + " --training_seq_len 256 --output " + (tmp / "P").string());
  INFO(prep.output);
  REQUIRE(prep.exit_code == 0);
  auto prepared = test::run_cli("train " + common + " --data_path " + (tmp / "P").string() +
                                " --validation_fraction 0 --output_dir " + (tmp / "run-prepared").string());
  INFO(prepared.output);
  CHECK(prepared.exit_code == 3);
  CHECK_THAT(prepared.output, Catch::Contains("train.bin: sample ") && Catch::Contains(", position 5") &&
                                  Catch::Contains("found " + image + " (the target's image_token_id)"));
  // The same samples without the placeholder train on the multimodal target (no AR: one step).
  write(tmp / "text.jsonl", -1);
  auto text = test::run_cli("train " + common + " --data_path " + (tmp / "text.jsonl").string() +
                            " --max_steps 1 --eval_num_prompts 0 --output_dir " + (tmp / "ok").string());
  INFO(text.output);
  CHECK(text.exit_code == 0);
  CHECK(fs::exists(tmp / "ok" / "checkpoint-1" / "COMPLETE"));
}
