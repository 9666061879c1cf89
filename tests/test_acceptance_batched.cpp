// Speculative decoding of many prompts at once (batched_acceptance) equals the one-by-one decoding
// (decode_prompts with ChainProposer and GreedyVerifier) prompt by prompt: the same rounds, accepted
// tokens, round lengths and generated tokens, for a trained head, two draft lengths and batch sizes
// 1, 3 (rows refilled as prompts end) and 16 (more rows than prompts); the same for a DFlash draft,
// whose rows draft one block each (and, on CUDA, graphed rounds), and for a hybrid target, whose
// rows' Gated DeltaNet states return to each row's accepted prefix every round; a first prefill kept
// for the next depths (PrefillReuse) decodes them as a new prefill would.
#include <torch/torch.h>
#include <catch2/catch.hpp>

#include <set>

#include "acceptance_helpers.h"
#include "eagle/acceptance/batched.h"
#include "eagle/head/dflash/head.h"

using namespace eagle;
using acceptance::AcceptanceResult;

namespace {

AcceptanceResult one_by_one(const target::TargetModel& target, head::DraftHead& head, const data::Dataset& data,
                            std::int64_t prompts, std::int64_t max_new_tokens, std::int64_t draft_len) {
  acceptance::ChainProposer proposer(draft_len);
  acceptance::GreedyVerifier verifier;
  return acceptance::decode_prompts(target, head, acceptance::eval_prompts(data, prompts), proposer, verifier,
                                    max_new_tokens);
}

AcceptanceResult batched(const target::TargetModel& target, head::DraftHead& head, const data::Dataset& data,
                         std::int64_t prompts, std::int64_t max_new_tokens, std::int64_t draft_len, std::int64_t rows,
                         std::int64_t max_cuda_graphs = 0) {
  return acceptance::batched_acceptance(target, head, acceptance::eval_prompts(data, prompts), max_new_tokens,
                                        draft_len, rows, max_cuda_graphs);
}

// A DFlash draft (block 4, two layers, weights from a fixed seed) on the tiny Qwen3 target, whose
// aux layers are the draft's.
struct DFlashOnQwen3 {
  target::TargetModel target;
  std::shared_ptr<head::DFlashHead> head;
};

DFlashOnQwen3 dflash_on_qwen3(torch::Device device) {
  auto target = target::TargetModel::load(std::string(EAGLE_SOURCE_DIR) + "/tests/fixtures/models/tiny-qwen3",
                                          torch::kFloat32, device);
  head::DFlashSettings s;
  s.block_size = 4;
  s.num_layers = 2;
  s.mask_token_id = 5;
  auto cfg = head::dflash_config_from_target(target.config(), s);
  target.set_aux_layer_ids(cfg.aux_layer_ids);
  torch::manual_seed(3);
  auto head = std::make_shared<head::DFlashHead>(cfg);
  head->to(device);
  head->set_target_weights(target.embedding_weight(), target.lm_head_weight());
  return {std::move(target), head};
}

}  // namespace

TEST_CASE("batched DFlash rounds equal one by one, prompt by prompt", "[acceptance]") {
  auto d = dflash_on_qwen3(torch::kCPU);
  REQUIRE(d.head->drafts_ragged());
  const auto prompts = test::smoke_data();
  for (std::int64_t K : {1, 3}) {  // a shallower depth (a shorter block) and the trained one
    auto one = one_by_one(d.target, *d.head, prompts, 10, 20, K);
    REQUIRE(one.per_prompt.size() == 10);
    for (std::int64_t rows : {1, 3, 16}) {
      INFO("draft_len " << K << ", rows " << rows);
      auto many = batched(d.target, *d.head, prompts, 10, 20, K, rows);
      REQUIRE(many.per_prompt.size() == one.per_prompt.size());
      for (std::size_t i = 0; i < one.per_prompt.size(); ++i) {
        INFO("prompt " << i);
        CHECK(many.per_prompt[i] == one.per_prompt[i]);
      }
      CHECK(many.ar == one.ar);
    }
  }
}

TEST_CASE("batched DFlash rounds on CUDA: graphed rounds equal eager ones and the one-by-one loop",
          "[acceptance][gpu]") {
  auto d = dflash_on_qwen3(torch::Device(torch::kCUDA, 0));
  const auto data = test::smoke_data();
  auto one = one_by_one(d.target, *d.head, data, 8, 16, 3);
  auto eager = batched(d.target, *d.head, data, 8, 16, 3, 4, 0);
  auto graphed = batched(d.target, *d.head, data, 8, 16, 3, 4, 8);
  REQUIRE(eager.per_prompt.size() == one.per_prompt.size());
  REQUIRE(graphed.per_prompt.size() == one.per_prompt.size());
  for (std::size_t i = 0; i < one.per_prompt.size(); ++i) {
    INFO("prompt " << i);
    CHECK(eager.per_prompt[i] == one.per_prompt[i]);
    CHECK(graphed.per_prompt[i] == one.per_prompt[i]);
  }
}

TEST_CASE("batched speculative decoding equals one by one, prompt by prompt", "[acceptance]") {
  test::TrainedSmoke smoke;
  auto& target = smoke.target;
  auto& head = smoke.head;
  REQUIRE(head.drafts_ragged());
  const auto prompts = test::smoke_data();
  std::int64_t drafts_accepted = 0;
  for (std::int64_t K : {1, 4}) {
    auto one = one_by_one(target, head, prompts, 10, 20, K);
    REQUIRE(one.per_prompt.size() == 10);
    for (const auto& p : one.per_prompt) drafts_accepted += p.accepted - p.rounds;
    for (std::int64_t rows : {1, 3, 16}) {
      INFO("draft_len " << K << ", rows " << rows);
      auto many = batched(target, head, prompts, 10, 20, K, rows);
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

TEST_CASE("a batched evaluation's first prefill, kept at one depth, decodes the next depths as a new prefill would",
          "[acceptance]") {
  test::TrainedSmoke smoke;
  const auto prompts = acceptance::eval_prompts(test::smoke_data(), 10);
  for (std::int64_t rows : {16, 3}) {  // every prompt in the first prefill; the first 3 of them (refills after)
    INFO("rows " << rows);
    acceptance::PrefillReuse reuse;
    for (std::int64_t K : {1, 2, 4}) {
      INFO("draft_len " << K);
      const auto fresh = acceptance::batched_acceptance(smoke.target, smoke.head, prompts, 20, K, rows);
      const auto reused = acceptance::batched_acceptance(smoke.target, smoke.head, prompts, 20, K, rows, 0, &reuse);
      REQUIRE(reused.per_prompt.size() == fresh.per_prompt.size());
      for (std::size_t i = 0; i < fresh.per_prompt.size(); ++i) {
        INFO("prompt " << i);
        CHECK(reused.per_prompt[i] == fresh.per_prompt[i]);
      }
    }
    CHECK(reuse.rows == std::min<std::int64_t>(rows, 10));
    CHECK(reuse.reused == 2);  // kept at the first depth, taken at the two after it
  }
}

TEST_CASE("batched speculative decoding of a hybrid target equals one by one, prompt by prompt", "[acceptance]") {
  // tiny-qwen3-5 and a head trained on its own replies: rounds accept 0..K tokens, so the rows of one
  // verification roll back to different lengths (generate's batched rows made those replies).
  test::TempDir dir;
  const auto target = target::TargetModel::load(std::string(EAGLE_SOURCE_DIR) + "/tests/fixtures/models/tiny-qwen3-5",
                                                torch::kFloat32, torch::kCPU);
  auto head = test::trained_on_replies(dir.path(), target, "tiny-qwen3-5");
  REQUIRE(head->drafts_ragged());
  const auto prompts = test::smoke_data();
  std::set<std::int64_t> round_lengths;  // 1 + the drafts a round accepted, at draft_len 4
  for (std::int64_t K : {2, 4}) {
    auto one = one_by_one(target, *head, prompts, 10, 20, K);
    REQUIRE(one.per_prompt.size() == 10);
    if (K == 4)
      for (const auto& p : one.per_prompt) round_lengths.insert(p.lengths.begin(), p.lengths.end());
    for (std::int64_t rows : {3, 16}) {
      INFO("draft_len " << K << ", rows " << rows);
      auto many = batched(target, *head, prompts, 10, 20, K, rows);
      REQUIRE(many.per_prompt.size() == one.per_prompt.size());
      for (std::size_t i = 0; i < one.per_prompt.size(); ++i) {
        INFO("prompt " << i);
        CHECK(many.per_prompt[i] == one.per_prompt[i]);
      }
      CHECK(many.ar == one.ar);
    }
  }
  // Rounds accept different numbers of drafts: the rows continue at different points of their verification.
  INFO("round lengths at draft_len 4: " << round_lengths.size() << " different");
  CHECK(round_lengths.size() >= 2);
  CHECK(round_lengths.count(1) == 1);
}

TEST_CASE("batched speculative decoding on CUDA: graphed rounds equal eager ones and the one-by-one loop",
          "[acceptance][gpu]") {
  const auto cuda = torch::Device(torch::kCUDA, 0);
  // tiny-qwen3-5: the Gated DeltaNet rows' states and logs are written in place, which graph replays need.
  for (const char* fixture : {"tiny-llama", "tiny-qwen3-5"}) {
    INFO(fixture);
    auto target = target::TargetModel::load(std::string(EAGLE_SOURCE_DIR) + "/tests/fixtures/models/" + fixture,
                                            torch::kFloat32, cuda);
    torch::manual_seed(3);
    auto cfg = head::HeadConfig::from_target(target.config(), 3, target.aux_layer_ids(), 256);
    head::DraftVocab vocab;
    vocab.target_vocab_size = target.config().vocab_size;
    for (std::int64_t i = 0; i < 256; ++i) vocab.draft_ids.push_back(i);
    auto head = head::make_head(cfg, vocab);
    head->module().to(cuda);
    head->init_from_target(target.embedding_weight(), target.lm_head_weight());
    const auto data = test::smoke_data();
    auto one = one_by_one(target, *head, data, 8, 16, 3);
    auto eager = batched(target, *head, data, 8, 16, 3, 4, 0);
    auto graphed = batched(target, *head, data, 8, 16, 3, 4, 8);
    REQUIRE(eager.per_prompt.size() == one.per_prompt.size());
    REQUIRE(graphed.per_prompt.size() == one.per_prompt.size());
    for (std::size_t i = 0; i < one.per_prompt.size(); ++i) {
      INFO("prompt " << i);
      CHECK(eager.per_prompt[i] == one.per_prompt[i]);
      CHECK(graphed.per_prompt[i] == one.per_prompt[i]);
    }
  }
}
