// Shared pieces of the [acceptance] tests: the reference fixtures, the tiny target, the smoke data
// and a head the CLI trained on it.
#pragma once

#include <torch/torch.h>
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <string>

#include "data_helpers.h"
#include "eagle/head/export/io.h"
#include "eagle/target/target.h"
#include "helpers.h"

namespace eagle::test {

inline nlohmann::json read_reference(const std::string& name) {
  std::ifstream in(std::string(EAGLE_SOURCE_DIR) + "/tests/fixtures/reference/" + name);
  REQUIRE(in.good());
  return nlohmann::json::parse(in);
}

inline torch::Tensor row_of(const nlohmann::json& j) { return torch::tensor(j.get<std::vector<float>>()); }

inline torch::Tensor table_of(const nlohmann::json& j) {
  std::vector<torch::Tensor> rows;
  for (const auto& r : j) rows.push_back(row_of(r));
  return torch::stack(rows);
}

inline target::TargetModel tiny_llama(torch::Device device = torch::kCPU) {
  return target::TargetModel::load(std::string(EAGLE_SOURCE_DIR) + "/tests/fixtures/models/tiny-llama", torch::kFloat32,
                                   device);
}

// The smoke data (tests/fixtures/data/smoke.jsonl), all of it in the training split.
inline data::Dataset smoke_data() {
  return data::load_dataset(std::string(EAGLE_SOURCE_DIR) + "/tests/fixtures/data/smoke.jsonl", load_options(256))
      .train;
}

// A head trained 60 steps by `eagle-train train` on the smoke config (extra: more flags) in dir,
// loaded with the target's embedding and LM head. Having seen the smoke data, it drafts well there,
// so rounds accept 0..K tokens.
inline std::shared_ptr<head::DraftHead> trained_head(const std::filesystem::path& dir, const target::TargetModel& t,
                                                     const std::string& extra = "") {
  auto trained = run_cli("train " + smoke_args() + " " + extra +
                         " --max_steps 60 --eval_steps 0 --save_steps 60 --output_dir " + dir.string());
  INFO(trained.output);
  REQUIRE(trained.exit_code == 0);
  auto head = head::load_head((dir / "checkpoint-60").string()).head;
  head->set_target_weights(t.embedding_weight(), t.lm_head_weight());
  return head;
}

// The tiny target's own greedy replies to the smoke prompts (`eagle-train generate`, 48 tokens each)
// in dir/replies.jsonl, and a head trained 60 steps on them: it learns what this target says, so its
// chains accept more tokens the deeper they draft (the smoke data's own replies are not the target's,
// and a head trained on them accepts about one token in a hundred rounds). fixture: the target t was
// loaded from (tests/fixtures/models/<fixture>).
inline std::shared_ptr<head::DraftHead> trained_on_replies(const std::filesystem::path& dir,
                                                           const target::TargetModel& t,
                                                           const std::string& fixture = "tiny-llama") {
  const std::string root = EAGLE_SOURCE_DIR;
  const std::string model = root + "/tests/fixtures/models/" + fixture;
  const auto replies = dir / "replies.jsonl";
  auto generated = run_cli("generate --model_name_or_path " + model + " --data_path " + root +
                           "/tests/fixtures/data/smoke.jsonl --output " + replies.string() +
                           " --max_new_tokens 48 --num_threads 1");
  INFO(generated.output);
  REQUIRE(generated.exit_code == 0);
  auto trained = run_cli("train --config " + root + "/configs/smoke.json --model_name_or_path " + model +
                         " --data_path " + replies.string() + " --max_steps 60 --eval_steps 0 --save_steps 60 --output_dir " +
                         (dir / "run").string());
  INFO(trained.output);
  REQUIRE(trained.exit_code == 0);
  auto head = head::load_head((dir / "run" / "checkpoint-60").string()).head;
  head->set_target_weights(t.embedding_weight(), t.lm_head_weight());
  return head;
}

// The tiny target and a head trained on the smoke data (extra: more train flags) in a folder that
// lives as long as the fixture: the common start of the decoding tests.
struct TrainedSmoke {
  explicit TrainedSmoke(const std::string& extra = "")
      : target(tiny_llama()), trained(trained_head(dir / "run", target, extra)), head(*trained) {}
  TempDir dir;
  target::TargetModel target;
  std::shared_ptr<head::DraftHead> trained;
  head::DraftHead& head;
};

}  // namespace eagle::test
