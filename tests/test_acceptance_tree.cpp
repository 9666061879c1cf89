// The draft tree (acceptance/tree.h, verify.h: verify_greedy): SGLang's tree and its greedy
// verification against the PyTorch reference (scripts/make_tree_reference.py), and chains drafted
// and verified in steps equal to draft() and forward_cached bit for bit.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>

#include <fmt/format.h>

#include "acceptance_helpers.h"
#include "eagle/acceptance/tree.h"
#include "eagle/acceptance/verify.h"
#include "eagle/head/eagle/eagle3_head.h"

using namespace eagle;
using nlohmann::json;

using test::read_reference;
using test::row_of;

TEST_CASE("draft tree, mask and greedy path equal the PyTorch reference, ties included", "[acceptance]") {
  for (const auto& c : read_reference("tree_eval.json")) {
    INFO(c["name"].get<std::string>());
    const auto shape = c["shape"].get<std::vector<std::int64_t>>();
    auto vocab = torch::tensor(c["vocab_ids"].get<std::vector<std::int64_t>>());
    std::int64_t calls = 0;
    auto expand = [&](const std::vector<std::int64_t>& frontier, const std::vector<acceptance::TreeCandidate>& cands) {
      ++calls;
      if (frontier.empty()) return row_of(c["root_logits"]).view({1, -1});
      std::vector<torch::Tensor> rows;
      for (auto f : frontier) {
        const auto& cand = cands[static_cast<std::size_t>(f)];
        rows.push_back(row_of(c["logits"][fmt::format("{},{}", cand.depth, cand.draft_id)]));
      }
      return torch::stack(rows);
    };
    auto tree =
        acceptance::build_tree({shape[0], shape[1], shape[2]}, c["root_token"].get<std::int64_t>(), vocab, expand);
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
    CHECK(acceptance::verify_greedy(tree, e["choice"].get<std::vector<std::int64_t>>()) ==
          e["path"].get<std::vector<std::int64_t>>());
  }
}

TEST_CASE("a chain drafted and verified as a tree equals draft() and forward_cached bit for bit", "[acceptance]") {
  const auto layers = GENERATE(1, 2);  // one draft layer, and two (each its own cache)
  INFO("draft_num_layers " << layers);
  torch::manual_seed(3);
  auto target = test::tiny_llama();
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
  auto expand = [&](const std::vector<std::int64_t>& frontier, const std::vector<acceptance::TreeCandidate>& cands) {
    if (frontier.empty()) return root.logits.view({1, -1});
    const auto& c = cands[static_cast<std::size_t>(frontier[0])];
    auto step = head.draft_nodes(steps_cache, state, torch::full({1, 1}, c.token, torch::kInt64),
                                 torch::full({1, 1}, prefix - 1 + c.depth, torch::kInt64), prefix + c.depth - 1,
                                 torch::ones({1, prefix + c.depth}, torch::kBool));
    state = step.state;
    return step.logits.view({1, -1});
  };
  auto tree = acceptance::build_tree({3, 1, 4}, 5, head.draft_vocab_ids(), expand);
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
