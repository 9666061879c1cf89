// Acceptance at a temperature (acceptance/verify.h, alpha.h, propose.h): alpha's overlap against
// scripts/make_alpha_reference.py, the rejection rule's acceptance against alpha's chain estimate,
// SGLang's tree speculative sampling against scripts/make_tree_sampling_reference.py, and P-EAGLE
// chains at a temperature (ParallelProposer) against the greedy chain.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <cmath>
#include <random>

#include "acceptance_helpers.h"
#include "eagle/acceptance/alpha.h"
#include "eagle/acceptance/decode.h"
#include "eagle/acceptance/verify.h"
#include "eagle/model/sampling.h"
#include "eagle/util/error.h"

using namespace eagle;
using nlohmann::json;

using test::read_reference;
using test::table_of;

TEST_CASE("alpha's overlap equals the PyTorch reference at each temperature and top_p", "[acceptance]") {
  auto fx = read_reference("alpha.json");
  auto vocab = torch::tensor(fx["vocab_ids"].get<std::vector<std::int64_t>>());
  auto target = table_of(fx["target_logits"]), draft = table_of(fx["draft_logits"]);
  for (const auto& c : fx["cases"]) {
    for (bool sampled : {true, false}) {
      acceptance::SamplingSettings s{c["temperature"].get<double>(), c["top_p"].get<double>(), sampled, 1};
      auto p = model::sampling_probs(target, s.temperature, s.top_p);
      auto got = acceptance::acceptance_overlap(p, draft, vocab, s);
      auto want = torch::tensor(c[sampled ? "sampled" : "greedy"].get<std::vector<double>>(), torch::kFloat64);
      INFO("temperature " << s.temperature << " sampled " << sampled);
      CHECK(torch::allclose(got, want, 1e-12, 1e-12));
    }
  }
}

TEST_CASE("the rejection rule: mean acceptance within its CI of alpha's chain estimate; tokens follow p",
          "[acceptance]") {
  // Context-free distributions per position (where the chain estimate is exact): p_k, q_k over 6 ids.
  torch::manual_seed(5);
  const std::int64_t k = 3, v = 6;
  auto p = torch::softmax(torch::randn({k + 1, v}, torch::kFloat64) * 1.5, -1);
  auto q_sampled = torch::softmax(torch::randn({k, v}, torch::kFloat64) * 1.5 + torch::log(p.narrow(0, 0, k)), -1);
  for (bool sampled : {true, false}) {
    auto q = sampled ? q_sampled : torch::zeros({k, v}, torch::kFloat64).index_fill_(1, torch::tensor({2}), 1.0);
    std::vector<double> alpha;
    for (std::int64_t j = 0; j < k; ++j) alpha.push_back(torch::minimum(p[j], q[j]).sum().item<double>());
    const double expected = acceptance::alpha_chain(alpha);
    std::mt19937_64 rng(9);
    const std::function<double()> u = [&rng] { return static_cast<double>(rng() >> 11) * 0x1.0p-53; };
    const int rounds = 20000;
    double sum = 0.0, sq = 0.0;
    std::vector<double> first_counts(static_cast<std::size_t>(v), 0.0);
    for (int r = 0; r < rounds; ++r) {
      std::vector<std::int64_t> drafted;
      for (std::int64_t j = 0; j < k; ++j) {
        auto row = q[j];
        double x = u(), run = 0.0;
        std::int64_t d = 0;
        for (; d < v - 1; ++d)
          if ((run += row[d].item<double>()) > x) break;
        drafted.push_back(d);
      }
      auto out = acceptance::verify_sampled(p, q, drafted, u);
      const double len = 1.0 + static_cast<double>(out.accepted);
      sum += len;
      sq += len * len;
      first_counts[static_cast<std::size_t>(out.accepted > 0 ? drafted[0] : out.next)] += 1.0;
    }
    const double mean = sum / rounds, sd = std::sqrt(sq / rounds - mean * mean);
    INFO("sampled " << sampled << " mean " << mean << " expected " << expected);
    CHECK(std::abs(mean - expected) < 1.96 * sd / std::sqrt(static_cast<double>(rounds)) * 1.5);
    // The first token emitted is distributed as the target's p_0 (the rule's guarantee).
    for (std::int64_t x = 0; x < v; ++x)
      CHECK(first_counts[static_cast<std::size_t>(x)] / rounds == Approx(p[0][x].item<double>()).margin(0.015));
  }
}

TEST_CASE("tree speculative sampling equals SGLang's kernel in the PyTorch reference", "[acceptance]") {
  const auto cases = read_reference("tree_sampling.json");
  REQUIRE(cases.size() >= 40);
  std::int64_t rejected = 0, deep = 0;
  for (const auto& c : cases) {
    INFO(c["name"].get<std::string>() << " temperature " << c["temperature"].get<double>() << " coins "
                                      << c["coins"].dump());
    acceptance::DraftTree tree;
    tree.token = c["token"].get<std::vector<std::int64_t>>();
    tree.parent = c["parent"].get<std::vector<std::int64_t>>();
    tree.depth = c["depth"].get<std::vector<std::int64_t>>();
    auto p = model::sampling_probs(table_of(c["logits"]), c["temperature"].get<double>(), c["top_p"].get<double>());
    auto got =
        acceptance::verify_tree_sampled(tree, p, c["coins"].get<std::vector<double>>(), c["final_coin"].get<double>());
    CHECK(got.path == c["expected"]["path"].get<std::vector<std::int64_t>>());
    CHECK(got.next == c["expected"]["next"].get<std::int64_t>());
    rejected += got.path.size() == 1;
    deep += got.path.size() >= 3;
  }
  CHECK(rejected > 0);
  CHECK(deep > 0);
}

TEST_CASE("tree speculative sampling emits the target's distribution", "[acceptance]") {
  // A root with three children (one of them deeper): the first token emitted follows p_0 exactly,
  // whichever children the tree holds.
  torch::manual_seed(4);
  const std::int64_t v = 6;
  acceptance::DraftTree tree;
  tree.token = {0, 2, 4, 1, 3};
  tree.parent = {-1, 0, 0, 0, 1};
  tree.depth = {0, 1, 1, 1, 2};
  auto p = torch::softmax(torch::randn({5, v}, torch::kFloat64) * 1.5, -1);
  std::mt19937_64 rng(3);
  auto u = [&rng] { return static_cast<double>(rng() >> 11) * 0x1.0p-53; };
  const int rounds = 20000;
  std::vector<double> first(static_cast<std::size_t>(v), 0.0);
  for (int r = 0; r < rounds; ++r) {
    std::vector<double> coins(5);
    for (auto& x : coins) x = u();
    auto out = acceptance::verify_tree_sampled(tree, p, coins, u());
    const auto emitted = out.path.size() > 1 ? tree.token[static_cast<std::size_t>(out.path[1])] : out.next;
    first[static_cast<std::size_t>(emitted)] += 1.0;
  }
  for (std::int64_t x = 0; x < v; ++x)
    CHECK(first[static_cast<std::size_t>(x)] / rounds == Approx(p[0][x].item<double>()).margin(0.015));
}

TEST_CASE("a P-EAGLE head's chains at a temperature: ParallelProposer; temperature -> 0 is the greedy chain; no trees",
          "[acceptance]") {
  test::TrainedSmoke smoke("--parallel_drafting --mask_token_id 3");
  auto& target = smoke.target;
  auto& head = smoke.head;
  REQUIRE(head.config().parallel_drafting);
  const auto prompts = acceptance::eval_prompts(test::smoke_data(), 8);
  acceptance::ChainProposer chain(3);  // head.draft(): P-EAGLE's one parallel forward
  acceptance::GreedyVerifier greedy;
  const auto want = acceptance::decode_prompts(target, head, prompts, chain, greedy, 20);
  const acceptance::SamplingSettings cold{1e-6, 1.0, false, 5};
  acceptance::Uniform u(cold.seed);
  auto proposer = acceptance::sampled_chain_proposer(head, 3, cold, u);
  REQUIRE(dynamic_cast<acceptance::ParallelProposer*>(proposer.get()) != nullptr);
  acceptance::SampledVerifier verifier(cold, u);
  const auto got = acceptance::decode_prompts(target, head, prompts, *proposer, verifier, 20);
  REQUIRE(got.per_prompt.size() == want.per_prompt.size());
  std::int64_t drafts_accepted = 0;
  for (std::size_t i = 0; i < want.per_prompt.size(); ++i) {
    INFO("prompt " << i);
    CHECK(got.per_prompt[i] == want.per_prompt[i]);
    drafts_accepted += want.per_prompt[i].accepted - want.per_prompt[i].rounds;
  }
  CHECK(drafts_accepted > 0);
  // At temperature 1 with sampled drafts: rounds of several lengths, the same again with the same seed.
  const acceptance::SamplingSettings warm{1.0, 1.0, true, 5};
  auto sampled = [&] {
    acceptance::Uniform draws(warm.seed);
    auto p = acceptance::sampled_chain_proposer(head, 3, warm, draws);
    acceptance::SampledVerifier v(warm, draws);
    return acceptance::decode_prompts(target, head, prompts, *p, v, 20);
  };
  const auto a = sampled(), b = sampled();
  CHECK(a.rounds > 0);
  CHECK(a.ci95 > 0.0);
  CHECK((a.per_prompt == b.per_prompt));
  // A tree needs drafts that depend on their parent's token: refused by name.
  acceptance::TreeProposer tree({3, 2, 5});
  try {
    acceptance::decode_prompts(target, head, prompts, tree, greedy, 20);
    FAIL("a P-EAGLE tree was not refused");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::usage);
    CHECK_THAT(e.format(), Catch::Contains("P-EAGLE") && Catch::Contains("eval_tree_topk"));
  }
}
