// Tree and temperature acceptance (tree_eval.h, sampled_eval.h): SGLang's tree and its greedy
// verification against the PyTorch reference (scripts/make_tree_reference.py), chains drafted and
// verified in steps equal to draft() and forward_cached bit for bit, the rejection rule's
// acceptance against alpha's chain estimate, alpha against scripts/make_alpha_reference.py.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <random>

#include <fmt/format.h>

#include "eagle/head/eagle3_head.h"
#include "eagle/train/sampled_eval.h"
#include "eagle/train/tree_eval.h"
#include "eagle_test_paths.h"

using namespace eagle;
using nlohmann::json;

namespace {

json read_fixture(const std::string& name) {
  std::ifstream in(std::string(EAGLE_SOURCE_DIR) + "/tests/fixtures/reference/" + name);
  REQUIRE(in.good());
  return json::parse(in);
}

torch::Tensor row_of(const json& j) { return torch::tensor(j.get<std::vector<float>>()); }

torch::Tensor table_of(const json& j) {
  std::vector<torch::Tensor> rows;
  for (const auto& r : j) rows.push_back(row_of(r));
  return torch::stack(rows);
}

const std::string kTinyLlama = std::string(EAGLE_SOURCE_DIR) + "/tests/fixtures/models/tiny-llama";

}  // namespace

TEST_CASE("draft tree, mask and greedy path equal the PyTorch reference, ties included", "[train]") {
  for (const auto& c : read_fixture("tree_eval.json")) {
    INFO(c["name"].get<std::string>());
    const auto shape = c["shape"].get<std::vector<std::int64_t>>();
    auto vocab = torch::tensor(c["vocab_ids"].get<std::vector<std::int64_t>>());
    std::int64_t calls = 0;
    auto expand = [&](const std::vector<std::int64_t>& frontier, const std::vector<train::TreeCandidate>& cands) {
      ++calls;
      if (frontier.empty()) return row_of(c["root_logits"]).view({1, -1});
      std::vector<torch::Tensor> rows;
      for (auto f : frontier) {
        const auto& cand = cands[static_cast<std::size_t>(f)];
        rows.push_back(row_of(c["logits"][fmt::format("{},{}", cand.depth, cand.draft_id)]));
      }
      return torch::stack(rows);
    };
    auto tree = train::build_tree({shape[0], shape[1], shape[2]}, c["root_token"].get<std::int64_t>(), vocab, expand);
    const auto& e = c["expected"];
    CHECK(calls == shape[0]);  // the root, then steps - 1 expansions
    REQUIRE(tree.candidates.size() == e["candidates"].size());
    for (std::size_t i = 0; i < tree.candidates.size(); ++i) {
      const auto& want = e["candidates"][i];
      const auto& got = tree.candidates[i];
      CHECK(got.draft_id == want[0].get<std::int64_t>());
      CHECK(got.token == want[1].get<std::int64_t>());
      CHECK(got.parent == want[2].get<std::int64_t>());
      CHECK(got.depth == want[3].get<std::int64_t>());
      CHECK(got.score == want[4].get<double>());  // the same fp32 probabilities, multiplied in fp64
    }
    CHECK(tree.selected == e["selected"].get<std::vector<std::int64_t>>());
    CHECK(tree.token == e["token"].get<std::vector<std::int64_t>>());
    CHECK(tree.parent == e["parent"].get<std::vector<std::int64_t>>());
    CHECK(tree.depth == e["depth"].get<std::vector<std::int64_t>>());
    auto mask = tree.mask();
    const auto want_mask = e["mask"].get<std::vector<std::vector<int>>>();
    for (std::size_t i = 0; i < want_mask.size(); ++i)
      for (std::size_t j = 0; j < want_mask.size(); ++j)
        CHECK(mask[static_cast<std::int64_t>(i)][static_cast<std::int64_t>(j)].item<bool>() == (want_mask[i][j] == 1));
    CHECK(train::verify_greedy(tree, e["choice"].get<std::vector<std::int64_t>>()) ==
          e["path"].get<std::vector<std::int64_t>>());
  }
}

TEST_CASE("a chain drafted and verified as a tree equals draft() and forward_cached bit for bit", "[train]") {
  const auto layers = GENERATE(1, 2);  // one draft layer, and two (each its own cache)
  INFO("draft_num_layers " << layers);
  torch::manual_seed(3);
  auto target = target::TargetModel::load(kTinyLlama, torch::kFloat32, torch::kCPU);
  auto cfg = head::HeadConfig::from_target(target.config(), 3, target.aux_layer_ids(), 64);
  cfg.ttt_steps = 3;
  cfg.num_layers = layers;
  std::vector<std::int64_t> ids(64);
  for (std::int64_t i = 0; i < 64; ++i) ids[static_cast<std::size_t>(i)] = (i * 7) % target.config().vocab_size;
  head::DraftVocab vocab;
  vocab.target_vocab_size = target.config().vocab_size;
  vocab.draft_ids.assign(ids.begin(), ids.end());
  std::sort(vocab.draft_ids.begin(), vocab.draft_ids.end());
  head::Eagle3Head head(cfg, vocab);
  head.init_from_target(target.embedding_weight(), target.lm_head_weight());
  const std::int64_t n = 9;
  auto prompt = torch::randint(0, target.config().vocab_size, {1, n}, torch::kInt64);
  auto tcache = target.new_cache(1, 32), tree_cache = target.new_cache(1, 32);
  auto out = target.forward_cached(tcache, prompt);
  target.forward_cached(tree_cache, prompt);
  auto next = torch::cat({prompt.narrow(1, 1, n - 1), torch::full({1, 1}, 5, torch::kInt64)}, 1);
  auto hcache = head.new_cache(1, 32), steps_cache = head.new_cache(1, 32);
  auto drafted = head.draft(hcache, out.aux_hidden, next, 3);
  // The same chain through draft_extend / draft_nodes (build_tree with topk 1).
  auto root = head.draft_extend(steps_cache, out.aux_hidden, next);
  const auto prefix = steps_cache.length;
  torch::Tensor state = root.state;
  auto expand = [&](const std::vector<std::int64_t>& frontier, const std::vector<train::TreeCandidate>& cands) {
    if (frontier.empty()) return root.logits.view({1, -1});
    const auto& c = cands[static_cast<std::size_t>(frontier[0])];
    auto step = head.draft_nodes(steps_cache, state, torch::full({1, 1}, c.token, torch::kInt64),
                                 torch::full({1, 1}, prefix - 1 + c.depth, torch::kInt64), prefix + c.depth - 1,
                                 torch::ones({1, prefix + c.depth}, torch::kBool));
    state = step.state;
    return step.logits.view({1, -1});
  };
  auto tree = train::build_tree({3, 1, 4}, 5, head.draft_vocab_ids(), expand);
  REQUIRE(tree.token.size() == 4);
  for (std::int64_t j = 0; j < 3; ++j)
    CHECK(tree.token[static_cast<std::size_t>(j) + 1] == drafted[0][j].item<std::int64_t>());
  // The draft cache is [layers, B, kv_heads, capacity, head_dim]: slots along dim 3.
  CHECK(torch::equal(hcache.keys.narrow(3, 0, prefix + 2), steps_cache.keys.narrow(3, 0, prefix + 2)));
  auto verify = torch::tensor(tree.token).view({1, -1});
  auto a = target.forward_cached(tcache, verify);
  auto b = target.forward_tree(tree_cache, verify, torch::tensor(tree.depth), tree.mask());
  CHECK(torch::equal(a.logits, b.logits));
  CHECK(torch::equal(a.aux_hidden, b.aux_hidden));
  CHECK(torch::equal(tcache.keys[1], tree_cache.keys[1]));
  // A branching tree: each node sees only its ancestors, so a node's logits equal its own path's
  // chain (the second child of the root is verified as if alone after the root).
  auto tree_mask = torch::tensor({1, 0, 0, 1, 1, 0, 1, 0, 1}, torch::kBool).view({3, 3});
  auto branch_cache = target.new_cache(1, 32), alone_cache = target.new_cache(1, 32);
  target.forward_cached(branch_cache, prompt);
  target.forward_cached(alone_cache, prompt);
  auto tokens = torch::tensor({5, 11, 17}, torch::kInt64).view({1, 3});
  auto branched = target.forward_tree(branch_cache, tokens, torch::tensor({0, 1, 1}), tree_mask);
  auto alone = target.forward_cached(alone_cache, torch::tensor({5, 17}, torch::kInt64).view({1, 2}));
  CHECK(torch::allclose(branched.logits[0][2], alone.logits[0][1], 1e-5, 1e-5));
  CHECK(!torch::allclose(branched.logits[0][1], branched.logits[0][2], 1e-3, 1e-3));
}

TEST_CASE("alpha's overlap equals the PyTorch reference at each temperature and top_p", "[train]") {
  auto fx = read_fixture("alpha.json");
  auto vocab = torch::tensor(fx["vocab_ids"].get<std::vector<std::int64_t>>());
  auto target = table_of(fx["target_logits"]), draft = table_of(fx["draft_logits"]);
  for (const auto& c : fx["cases"]) {
    for (bool sampled : {true, false}) {
      train::SamplingSettings s{c["temperature"].get<double>(), c["top_p"].get<double>(), sampled, 1};
      auto p = train::sampling_probs(target, s.temperature, s.top_p);
      auto got = train::acceptance_overlap(p, draft, vocab, s);
      auto want = torch::tensor(c[sampled ? "sampled" : "greedy"].get<std::vector<double>>(), torch::kFloat64);
      INFO("temperature " << s.temperature << " sampled " << sampled);
      CHECK(torch::allclose(got, want, 1e-12, 1e-12));
    }
  }
}

TEST_CASE("the rejection rule: mean acceptance within its CI of alpha's chain estimate; tokens follow p", "[train]") {
  // Context-free distributions per position (where the chain estimate is exact): p_k, q_k over 6 ids.
  torch::manual_seed(5);
  const std::int64_t k = 3, v = 6;
  auto p = torch::softmax(torch::randn({k + 1, v}, torch::kFloat64) * 1.5, -1);
  auto q_sampled = torch::softmax(torch::randn({k, v}, torch::kFloat64) * 1.5 + torch::log(p.narrow(0, 0, k)), -1);
  for (bool sampled : {true, false}) {
    auto q = sampled ? q_sampled : torch::zeros({k, v}, torch::kFloat64).index_fill_(1, torch::tensor({2}), 1.0);
    std::vector<double> alpha;
    for (std::int64_t j = 0; j < k; ++j) alpha.push_back(torch::minimum(p[j], q[j]).sum().item<double>());
    const double expected = train::alpha_chain(alpha);
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
      auto out = train::verify_sampled(p, q, drafted, u);
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
