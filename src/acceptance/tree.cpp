// SGLang's draft tree (see tree.h).
#include "eagle/acceptance/tree.h"

#include <algorithm>
#include <numeric>

#include "eagle/util/error.h"

namespace eagle::acceptance {
namespace {

// Indices of the k best of `score` (higher first; ties: the lower index first).
std::vector<std::int64_t> best_k(const std::vector<double>& score, std::int64_t k) {
  std::vector<std::int64_t> order(score.size());
  std::iota(order.begin(), order.end(), std::int64_t{0});
  std::stable_sort(order.begin(), order.end(), [&](std::int64_t a, std::int64_t b) { return score[a] > score[b]; });
  order.resize(std::min<std::size_t>(order.size(), static_cast<std::size_t>(k)));
  return order;
}

// The k children of one node from its draft logits [V_d]: the top k by logit (a stable sort: ties
// to the lower draft id), each scored parent_score * softmax probability.
void add_children(const torch::Tensor& logits, std::int64_t parent, std::int64_t depth, double parent_score,
                  std::int64_t k, const torch::Tensor& vocab_ids, std::vector<TreeCandidate>& out) {
  auto row = logits.to(torch::kCPU, torch::kFloat32).contiguous();
  auto probs = torch::softmax(row, -1);
  auto order = std::get<1>(torch::sort(row, /*stable=*/true, /*dim=*/-1, /*descending=*/true));
  for (std::int64_t r = 0; r < k; ++r) {
    const auto id = order[r].item<std::int64_t>();
    out.push_back(TreeCandidate{id, vocab_ids[id].item<std::int64_t>(), parent, depth,
                                parent_score * static_cast<double>(probs[id].item<float>())});
  }
}

}  // namespace

torch::Tensor DraftTree::mask() const {
  const auto n = static_cast<std::int64_t>(token.size());
  auto m = torch::zeros({n, n}, torch::kBool);
  auto a = m.accessor<bool, 2>();
  for (std::int64_t i = 0; i < n; ++i)
    for (std::int64_t j = i; j >= 0; j = parent[static_cast<std::size_t>(j)]) a[i][j] = true;
  return m;
}

DraftTree chain_tree(std::int64_t root_token, const std::vector<std::int64_t>& drafts) {
  DraftTree tree;
  tree.token = {root_token};
  tree.parent = {-1};
  tree.depth = {0};
  for (std::size_t i = 0; i < drafts.size(); ++i) {
    tree.token.push_back(drafts[i]);
    tree.parent.push_back(static_cast<std::int64_t>(i));
    tree.depth.push_back(static_cast<std::int64_t>(i) + 1);
  }
  return tree;
}

DraftTree build_tree(const TreeShape& shape, std::int64_t root_token, const torch::Tensor& draft_vocab_ids,
                     const ExpandFn& expand) {
  const auto vocab_ids = draft_vocab_ids.to(torch::kCPU, torch::kInt64).contiguous();
  const auto k = std::min<std::int64_t>(shape.topk, vocab_ids.size(0));
  DraftTree tree;
  auto& cands = tree.candidates;
  add_children(expand({}, cands).view({-1}), -1, 1, 1.0, k, vocab_ids, cands);
  std::vector<std::int64_t> frontier(static_cast<std::size_t>(k));
  std::iota(frontier.begin(), frontier.end(), std::int64_t{0});
  for (std::int64_t step = 1; step < shape.steps; ++step) {
    auto logits = expand(frontier, cands);  // [f, V_d]
    const auto first = static_cast<std::int64_t>(cands.size());
    for (std::size_t f = 0; f < frontier.size(); ++f) {
      const auto& c = cands[static_cast<std::size_t>(frontier[f])];
      add_children(logits[static_cast<std::int64_t>(f)], frontier[f], step + 1, c.score, k, vocab_ids, cands);
    }
    std::vector<double> scores;
    for (auto i = first; i < static_cast<std::int64_t>(cands.size()); ++i) scores.push_back(cands[i].score);
    frontier = best_k(scores, k);
    for (auto& f : frontier) f += first;
  }
  std::vector<double> scores;
  for (const auto& c : cands) scores.push_back(c.score);
  tree.selected = best_k(scores, shape.draft_tokens - 1);
  std::sort(tree.selected.begin(), tree.selected.end());
  tree.token = {root_token};
  tree.parent = {-1};
  tree.depth = {0};
  std::vector<std::int64_t> node_of(cands.size(), -1);
  for (std::size_t i = 0; i < tree.selected.size(); ++i) {
    const auto& c = cands[static_cast<std::size_t>(tree.selected[i])];
    node_of[static_cast<std::size_t>(tree.selected[i])] = static_cast<std::int64_t>(i) + 1;
    const auto parent = c.parent < 0 ? 0 : node_of[static_cast<std::size_t>(c.parent)];
    // A parent scores at least its child and comes first, so the stable order selects it first.
    EAGLE_CHECK(parent >= 0, Error(ErrorKind::internal, "draft tree node selected without its parent"));
    tree.token.push_back(c.token);
    tree.parent.push_back(parent);
    tree.depth.push_back(c.depth);
  }
  return tree;
}

}  // namespace eagle::acceptance
