// Tree verification on the hybrid linear-attention targets (Qwen3.5 dense and MoE, Qwen3-Next): forward_tree gives
// every node of a branched tree the logits forward_cached gives it over its own root-to-node path,
// accept_tree_path leaves the cache as if the accepted path had been decoded as a chain, a chain-shaped tree is
// forward_cached bit for bit, and what is refused by name; accept_tree_path on an attention-only target too.
#include <torch/torch.h>
#include <catch2/catch.hpp>

#include <algorithm>
#include <string>
#include <vector>

#include "eagle/target/target.h"
#include "helpers.h"
#include "target_fixtures.h"

using namespace eagle;
using eagle::target::TargetModel;

namespace {

const char* kHybridTrees[] = {"tiny-qwen3-5", "tiny-qwen3-5-moe", "tiny-qwen3-next"};

// 9 nodes under the root (node 0), depth 4, branching at the root and at depths 1 and 2, in an order that puts
// every parent before its children (all DraftTree promises) but does not sort the nodes by depth.
const std::vector<std::int64_t> kParent = {-1, 0, 1, 0, 2, 3, 1, 4, 5};
constexpr std::int64_t kPrompt = 20;  // prompt tokens cached before the tree (a chunked-form prefill)

std::vector<std::int64_t> path_to(std::int64_t node) {
  std::vector<std::int64_t> path;
  for (auto i = node; i >= 0; i = kParent[static_cast<std::size_t>(i)]) path.push_back(i);
  std::reverse(path.begin(), path.end());
  return path;
}

torch::Tensor depths() {
  std::vector<std::int64_t> d;
  for (std::size_t i = 0; i < kParent.size(); ++i)
    d.push_back(static_cast<std::int64_t>(path_to(static_cast<std::int64_t>(i)).size()) - 1);
  return torch::tensor(d, torch::kInt64);
}

// [n, n] bool: node i sees node j iff j is i or one of its ancestors.
torch::Tensor tree_mask() {
  const auto n = static_cast<std::int64_t>(kParent.size());
  auto mask = torch::zeros({n, n}, torch::kBool);
  for (std::int64_t i = 0; i < n; ++i)
    for (auto j : path_to(i)) mask[i][j] = true;
  return mask;
}

// The error against the reference's scale: the same fp32 math in other shapes (matmuls over other row counts,
// a softmax over a wider, partly masked key set) rounds differently; a wrong state errs by far more.
double rel_err(const torch::Tensor& got, const torch::Tensor& want) {
  return test::max_err(got, want) / std::max(1.0, want.abs().max().item<double>());
}

struct Case {
  TargetModel m;
  torch::Tensor prompt, tokens, next;  // [1, 20] cached first, [1, 9] the tree's nodes, [1, 3] a step after
};

Case load_case(const std::string& name) {
  auto m = TargetModel::load(test::model_fixture(name).string(), torch::kFloat32, torch::kCPU);
  const auto ids = (torch::arange(43, torch::kInt64) * 37 + 11).remainder(240).add(7).unsqueeze(0);  // ids 7..246
  const auto n = static_cast<std::int64_t>(kParent.size());
  return {std::move(m), ids.narrow(1, 0, kPrompt), ids.narrow(1, kPrompt, n), ids.narrow(1, 40, 3)};
}

target::KvCache prompted(const Case& c) {
  auto cache = c.m.new_cache(1, 64);
  c.m.forward_cached(cache, c.prompt);
  return cache;
}

torch::Tensor tokens_of(const Case& c, const std::vector<std::int64_t>& path) {
  return c.tokens.index_select(1, torch::tensor(path, torch::kInt64));
}

// The logits of `next` after the prompt and `path` decoded as a chain.
torch::Tensor chain_then_next(const Case& c, const std::vector<std::int64_t>& path) {
  auto cache = prompted(c);
  c.m.forward_cached(cache, tokens_of(c, path));
  return c.m.forward_cached(cache, c.next).logits;
}

void check_close(const torch::Tensor& got, const torch::Tensor& want) {
  const auto err = rel_err(got, want);
  INFO("relative error " << err);
  CHECK(err <= 1e-5);
  CHECK(torch::equal(got.argmax(-1), want.argmax(-1)));
}

}  // namespace

TEST_CASE("hybrid targets: each tree node's logits are those of its own path decoded as a chain", "[target]") {
  for (const char* name : kHybridTrees) {
    INFO(name);
    auto c = load_case(name);
    auto cache = prompted(c);
    const auto out = c.m.forward_tree(cache, c.tokens, depths(), tree_mask());
    CHECK(cache.length == kPrompt + static_cast<std::int64_t>(kParent.size()));
    for (std::size_t i = 0; i < kParent.size(); ++i) {
      INFO("node " << i);
      const auto path = path_to(static_cast<std::int64_t>(i));
      auto chain = prompted(c);
      const auto want = c.m.forward_cached(chain, tokens_of(c, path)).logits;
      check_close(out.logits.select(1, static_cast<std::int64_t>(i)), want.select(1, want.size(1) - 1));
    }
  }
}

TEST_CASE("hybrid targets: after accept_tree_path the next step equals decoding the path as a chain", "[target]") {
  const std::vector<std::vector<std::int64_t>> accepted = {{0}, {0, 3, 5, 8}, {0, 1, 2, 4, 7}, {0, 1, 6}};
  for (const char* name : kHybridTrees) {
    INFO(name);
    auto c = load_case(name);
    for (const auto& path : accepted) {
      const auto P = static_cast<std::int64_t>(path.size());
      INFO("path of " << P << " ending at node " << path.back());
      auto cache = prompted(c);
      c.m.forward_tree(cache, c.tokens, depths(), tree_mask());
      c.m.accept_tree_path(cache, kPrompt, path);
      CHECK(cache.length == kPrompt + P);
      check_close(c.m.forward_cached(cache, c.next).logits, chain_then_next(c, path));
      if (P == 1) continue;
      // The accepted path is then the last call's chain: truncate inside it keeps its first nodes.
      auto cut = prompted(c);
      c.m.forward_tree(cut, c.tokens, depths(), tree_mask());
      c.m.accept_tree_path(cut, kPrompt, path);
      c.m.truncate(cut, kPrompt + P - 1);
      const std::vector<std::int64_t> shorter(path.begin(), path.end() - 1);
      check_close(c.m.forward_cached(cut, c.next).logits, chain_then_next(c, shorter));
    }
  }
}

TEST_CASE("hybrid targets: a chain-shaped tree is forward_cached; truncate and refusals after a tree", "[target]") {
  for (const char* name : kHybridTrees) {
    INFO(name);
    auto c = load_case(name);
    // A chain through forward_tree: bit for bit forward_cached's, and accept_tree_path of its first nodes is
    // truncate.
    const auto chain_ids = c.tokens.narrow(1, 0, 4);
    auto a = prompted(c), b = prompted(c);
    const auto tree = c.m.forward_tree(a, chain_ids, torch::arange(4), torch::ones({4, 4}, torch::kBool).tril());
    CHECK(torch::equal(tree.logits, c.m.forward_cached(b, chain_ids).logits));
    c.m.accept_tree_path(a, kPrompt, {0, 1});
    c.m.truncate(b, kPrompt + 2);
    CHECK(torch::equal(c.m.forward_cached(a, c.next).logits, c.m.forward_cached(b, c.next).logits));

    // After a branched tree the states are the root's until the path is chosen: the next forward is refused,
    // and so are a truncate past the tree's first chain (nodes 0, 1, 2) and a path that is not one.
    auto t = prompted(c);
    c.m.forward_tree(t, c.tokens, depths(), tree_mask());
    CHECK_THROWS_WITH(c.m.forward_cached(t, c.next), Catch::Contains("after forward_tree holds the tree's root"));
    CHECK_THROWS_WITH(c.m.truncate(t, kPrompt + 4), Catch::Contains("only to a chain of the tree's first nodes"));
    CHECK_THROWS_WITH(c.m.accept_tree_path(t, kPrompt, {0, 2}), Catch::Contains("a root-to-node path"));
    // Truncating into that chain keeps it, to the call's start nothing of the tree.
    c.m.truncate(t, kPrompt + 3);
    check_close(c.m.forward_cached(t, c.next).logits, chain_then_next(c, {0, 1, 2}));
    auto none = prompted(c);
    c.m.forward_tree(none, c.tokens, depths(), tree_mask());
    c.m.truncate(none, kPrompt);
    auto fresh = prompted(c);
    check_close(c.m.forward_cached(none, c.next).logits, c.m.forward_cached(fresh, c.next).logits);

    // A mask that is not a tree's (node 4 blind to its grandparent, node 1) is refused before anything runs.
    auto bad = tree_mask();
    bad[4][1] = false;
    auto u = prompted(c);
    CHECK_THROWS_WITH(c.m.forward_tree(u, c.tokens, depths(), bad), Catch::Contains("is not a draft tree's"));
    CHECK(u.length == kPrompt);
  }
}

TEST_CASE("accept_tree_path on an attention-only target: the next step equals the path decoded as a chain",
          "[target]") {
  auto c = load_case("tiny-llama");
  const std::vector<std::int64_t> path = {0, 3, 5, 8};
  auto cache = prompted(c);
  c.m.forward_tree(cache, c.tokens, depths(), tree_mask());
  c.m.accept_tree_path(cache, kPrompt, path);
  CHECK(cache.length == kPrompt + 4);
  check_close(c.m.forward_cached(cache, c.next).logits, chain_then_next(c, path));
  CHECK_THROWS_WITH(c.m.accept_tree_path(cache, kPrompt, {0, 9}), Catch::Contains("a node outside the tree"));
}
