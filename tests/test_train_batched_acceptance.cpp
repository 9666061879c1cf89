// Speculative decoding of many prompts at once (batched_acceptance_rate) equals the one-by-one
// decoding (acceptance_rate) prompt by prompt: the same rounds, accepted tokens and generated
// tokens, for a trained head, two draft lengths and batch sizes 1, 3 (rows refilled as prompts end)
// and 16 (more rows than prompts).
#include <torch/torch.h>
#include <catch2/catch.hpp>

#include "data_helpers.h"
#include "eagle/head/head_io.h"
#include "eagle/train/evaluate.h"
#include "helpers.h"

using namespace eagle;

TEST_CASE("batched speculative decoding equals one by one, prompt by prompt", "[train]") {
  test::TempDir dir;
  auto run = dir / "run";
  auto trained = test::run_cli("train " + test::smoke_args() +
                               " --max_steps 60 --eval_steps 0 --save_steps 60 --output_dir " + run.string());
  INFO(trained.output);
  REQUIRE(trained.exit_code == 0);
  auto target = target::TargetModel::load(std::string(EAGLE_SOURCE_DIR) + "/tests/fixtures/models/tiny-llama",
                                          torch::kFloat32, torch::kCPU);
  auto loaded = head::load_head((run / "checkpoint-60").string());
  auto& head = *loaded.head;
  head.set_target_weights(target.embedding_weight(), target.lm_head_weight());
  REQUIRE(head.drafts_ragged());
  // Training data as prompts: the head has seen them, so it drafts well and rounds accept 0..K.
  auto data = data::load_dataset(std::string(EAGLE_SOURCE_DIR) + "/tests/fixtures/data/smoke.jsonl",
                                 test::load_options(256));
  const auto& prompts = data.train;
  std::int64_t drafts_accepted = 0;
  for (std::int64_t K : {1, 4}) {
    auto one = train::acceptance_rate(target, head, prompts, 10, 20, K);
    REQUIRE(one.per_prompt.size() == 10);
    for (const auto& p : one.per_prompt) drafts_accepted += p.accepted - p.rounds;
    for (std::int64_t rows : {1, 3, 16}) {
      INFO("draft_len " << K << ", rows " << rows);
      auto many = train::batched_acceptance_rate(target, head, prompts, 10, 20, K, rows);
      REQUIRE(many.per_prompt.size() == one.per_prompt.size());
      for (std::size_t i = 0; i < one.per_prompt.size(); ++i) {
        INFO("prompt " << i);
        CHECK(many.per_prompt[i] == one.per_prompt[i]);
      }
      CHECK(many.ar == one.ar);
      CHECK(many.rounds == one.rounds);
      CHECK(many.generated == one.generated);
    }
  }
  // Some drafts are accepted, so the batched rows see pending inputs of several lengths.
  CHECK(drafts_accepted > 0);
}

TEST_CASE("batched speculative decoding on CUDA: graphed rounds equal eager ones and the one-by-one loop",
          "[train][gpu]") {
  const auto cuda = torch::Device(torch::kCUDA, 0);
  auto target = target::TargetModel::load(std::string(EAGLE_SOURCE_DIR) + "/tests/fixtures/models/tiny-llama",
                                          torch::kFloat32, cuda);
  torch::manual_seed(3);
  auto cfg = head::HeadConfig::from_target(target.config(), 3, target.aux_layer_ids(), 256);
  head::DraftVocab vocab;
  vocab.target_vocab_size = target.config().vocab_size;
  for (std::int64_t i = 0; i < 256; ++i) vocab.draft_ids.push_back(i);
  auto head = head::make_head(cfg, vocab);
  head->module().to(cuda);
  head->init_from_target(target.embedding_weight(), target.lm_head_weight());
  auto data = data::load_dataset(std::string(EAGLE_SOURCE_DIR) + "/tests/fixtures/data/smoke.jsonl",
                                 test::load_options(256));
  auto one = train::acceptance_rate(target, *head, data.train, 8, 16, 3);
  auto eager = train::batched_acceptance_rate(target, *head, data.train, 8, 16, 3, 4, 0);
  auto graphed = train::batched_acceptance_rate(target, *head, data.train, 8, 16, 3, 4, 8);
  REQUIRE(eager.per_prompt.size() == one.per_prompt.size());
  REQUIRE(graphed.per_prompt.size() == one.per_prompt.size());
  for (std::size_t i = 0; i < one.per_prompt.size(); ++i) {
    INFO("prompt " << i);
    CHECK(eager.per_prompt[i] == one.per_prompt[i]);
    CHECK(graphed.per_prompt[i] == one.per_prompt[i]);
  }
}
