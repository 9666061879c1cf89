// Tree acceptance (see tree_eval.h).
#include "eagle/train/tree_eval.h"

#include <algorithm>
#include <numeric>

#include <fmt/format.h>

#include "eagle/util/error.h"

namespace eagle::train {
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

std::vector<std::int64_t> verify_greedy(const DraftTree& tree, const std::vector<std::int64_t>& target_choice) {
  std::vector<std::int64_t> path{0};
  const auto n = tree.token.size();
  for (bool found = true; found;) {
    found = false;
    const auto at = path.back();
    for (std::size_t c = static_cast<std::size_t>(at) + 1; c < n && !found; ++c) {
      if (tree.parent[c] != at || tree.token[c] != target_choice[static_cast<std::size_t>(at)]) continue;
      path.push_back(static_cast<std::int64_t>(c));
      found = true;
    }
  }
  return path;
}

AcceptanceResult tree_acceptance_rate(const target::TargetModel& target, head::DraftHead& head,
                                      const data::Dataset& heldout, std::int64_t num_prompts,
                                      std::int64_t max_new_tokens, const TreeShape& shape) {
  torch::NoGradGuard no_grad;
  AcceptanceResult r;
  const auto device = target.device();
  const auto vocab_ids = head.draft_vocab_ids().to(torch::kCPU);
  for (const auto& prompt : eval_prompts(heldout, num_prompts)) {
    PromptAcceptance pa;
    const auto n = static_cast<std::int64_t>(prompt.size());
    const std::int64_t capacity = n + max_new_tokens + shape.draft_tokens + shape.steps * shape.topk + 2;
    auto tcache = target.new_cache(1, capacity);
    auto hcache = head.new_cache(1, capacity);
    const auto start = prefill_prompt(target, tcache, prompt);
    std::int64_t x = start.last_logits.argmax(-1).item<std::int64_t>();
    auto features = start.aux_hidden;
    auto next_ids = start.next_ids(x);
    pa.generated = 1;
    while (pa.generated < max_new_tokens && !is_eos(target.config(), x)) {
      auto root = head.draft_extend(hcache, features, next_ids);
      const auto prefix = hcache.length;
      // The head's state and cache slot of every expanded candidate (the frontier of each step).
      std::vector<torch::Tensor> state_of;
      std::vector<std::int64_t> slot_of;
      std::int64_t next_slot = prefix;
      auto expand = [&](const std::vector<std::int64_t>& frontier, const std::vector<TreeCandidate>& cands) {
        if (frontier.empty()) return root.logits.view({1, -1});
        state_of.resize(cands.size());
        slot_of.resize(cands.size(), -1);
        const auto f = static_cast<std::int64_t>(frontier.size());
        std::vector<torch::Tensor> states;
        std::vector<std::int64_t> tokens, positions;
        auto mask = torch::zeros({f, next_slot + f}, torch::kBool);
        mask.narrow(1, 0, prefix).fill_(true);
        auto m = mask.accessor<bool, 2>();
        for (std::int64_t j = 0; j < f; ++j) {
          const auto& c = cands[static_cast<std::size_t>(frontier[j])];
          states.push_back(c.parent < 0 ? root.state : state_of[static_cast<std::size_t>(c.parent)]);
          tokens.push_back(c.token);
          positions.push_back(prefix - 1 + c.depth);
          m[j][next_slot + j] = true;
          for (auto a = c.parent; a >= 0; a = cands[static_cast<std::size_t>(a)].parent)
            m[j][slot_of[static_cast<std::size_t>(a)]] = true;
        }
        auto step = head.draft_nodes(hcache, torch::cat(states, 1), torch::tensor(tokens).view({1, f}),
                                     torch::tensor(positions).view({1, f}), next_slot, mask);
        for (std::int64_t j = 0; j < f; ++j) {
          slot_of[static_cast<std::size_t>(frontier[j])] = next_slot + j;
          state_of[static_cast<std::size_t>(frontier[j])] = step.state.narrow(1, j, 1);
        }
        next_slot += f;
        return step.logits.view({f, -1});
      };
      auto tree = build_tree(shape, x, vocab_ids, expand);
      const auto before = tcache.length;
      auto vout =
          target.forward_tree(tcache, torch::tensor(tree.token).view({1, -1}), torch::tensor(tree.depth), tree.mask());
      auto greedy = vout.logits.argmax(-1).view({-1}).cpu();
      std::vector<std::int64_t> choice(greedy.data_ptr<std::int64_t>(),
                                       greedy.data_ptr<std::int64_t>() + greedy.numel());
      auto path = verify_greedy(tree, choice);
      const auto acc = static_cast<std::int64_t>(path.size()) - 1;
      const std::int64_t bonus = choice[static_cast<std::size_t>(path.back())];
      ++pa.rounds;
      pa.accepted += 1 + acc;
      // The accepted nodes' keys and values move to the slots after the root, as a chain's sit.
      auto nodes = torch::tensor(path).to(device);
      for (std::size_t l = 0; l < tcache.keys.size(); ++l) {
        tcache.keys[l].narrow(2, before, 1 + acc).copy_(tcache.keys[l].index_select(2, before + nodes));
        tcache.values[l].narrow(2, before, 1 + acc).copy_(tcache.values[l].index_select(2, before + nodes));
      }
      target.truncate(tcache, before + 1 + acc);
      features = vout.aux_hidden.index_select(1, nodes);
      std::vector<std::int64_t> accepted;
      for (std::size_t j = 1; j < path.size(); ++j) accepted.push_back(tree.token[static_cast<std::size_t>(path[j])]);
      accepted.push_back(bonus);
      next_ids = torch::tensor(accepted).view({1, -1}).to(device);
      x = bonus;
      if (count_new_tokens(target.config(), accepted, max_new_tokens, pa.generated)) break;
    }
    r.add(pa);
  }
  r.finish();
  return r;
}

}  // namespace eagle::train
