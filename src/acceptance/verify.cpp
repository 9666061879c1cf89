// The target's side of a round (see verify.h).
#include "eagle/acceptance/verify.h"

#include <algorithm>

#include "eagle/model/sampling.h"

namespace eagle::acceptance {

std::int64_t sample_from(const torch::Tensor& probs, double u) {
  auto p = probs.contiguous();
  const auto* v = p.data_ptr<double>();
  const auto n = p.numel();
  double total = 0.0;
  for (std::int64_t i = 0; i < n; ++i) total += v[i];
  double target = u * total, run = 0.0;
  std::int64_t last = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    if (v[i] <= 0.0) continue;
    last = i;
    run += v[i];
    if (run > target) return i;
  }
  return last;  // rounding at the top end
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

RoundOutcome verify_sampled(const torch::Tensor& p, const torch::Tensor& q, const std::vector<std::int64_t>& drafted,
                            const std::function<double()>& u) {
  RoundOutcome out;
  const auto k = static_cast<std::int64_t>(drafted.size());
  for (; out.accepted < k; ++out.accepted) {
    const auto j = out.accepted;
    const auto x = drafted[static_cast<std::size_t>(j)];
    const double px = p[j][x].item<double>(), qx = q[j][x].item<double>();
    if (u() < std::min(1.0, qx > 0.0 ? px / qx : 1.0)) continue;
    auto residual = (p[j] - q[j]).clamp_min(0.0);
    // Rejection needs p(x) < q(x), so the residual has mass; rounding aside (then p itself).
    out.next = sample_from(residual.sum().item<double>() > 0.0 ? residual : p[j], u());
    return out;
  }
  out.next = sample_from(p[k], u());
  return out;
}

TreeOutcome verify_tree_sampled(const DraftTree& tree, const torch::Tensor& p, const std::vector<double>& coins,
                                double final_coin) {
  TreeOutcome out{{0}, 0};
  const auto n = tree.token.size();
  const auto probs = p.contiguous();
  std::vector<std::int64_t> rejected;  // tokens of the current node's children rejected so far
  for (bool accepted = true; accepted;) {
    accepted = false;
    rejected.clear();
    const auto at = static_cast<std::size_t>(out.path.back());
    const double coin = coins[at];
    double mass = 0.0;
    for (std::size_t c = at + 1; c < n; ++c) {
      if (tree.parent[c] != static_cast<std::int64_t>(at)) continue;
      mass += probs[static_cast<std::int64_t>(at)][tree.token[c]].item<double>();
      if (coin <= mass) {
        out.path.push_back(static_cast<std::int64_t>(c));
        accepted = true;
        break;
      }
      rejected.push_back(tree.token[c]);
    }
  }
  auto row = probs[out.path.back()].clone();
  for (auto t : rejected) row[t] = 0.0;
  // The rejected children cannot hold all of p's mass (the coin is below 1); rounding aside (then p).
  out.next = sample_from(row.sum().item<double>() > 0.0 ? row : probs[out.path.back()], final_coin);
  return out;
}

std::int64_t GreedyVerifier::first_token(const torch::Tensor& last_logits) {
  return last_logits.argmax(-1).item<std::int64_t>();
}

Verdict GreedyVerifier::verify(const DraftTree& tree, const torch::Tensor&, const torch::Tensor& logits) {
  auto greedy = logits.argmax(-1).view({-1}).cpu();  // the target's choice after each node
  std::vector<std::int64_t> choice(greedy.data_ptr<std::int64_t>(), greedy.data_ptr<std::int64_t>() + greedy.numel());
  Verdict v{verify_greedy(tree, choice), 0};
  v.next = choice[static_cast<std::size_t>(v.path.back())];
  return v;
}

std::int64_t SampledVerifier::first_token(const torch::Tensor& last_logits) {
  return sample_from(model::sampling_probs(last_logits, s_.temperature, s_.top_p).cpu(), u_());
}

Verdict SampledVerifier::verify(const DraftTree& tree, const torch::Tensor& q, const torch::Tensor& logits) {
  auto p = model::sampling_probs(logits, s_.temperature, s_.top_p).cpu();
  Verdict v;
  if (q.defined()) {
    const std::vector<std::int64_t> drafted(tree.token.begin() + 1, tree.token.end());
    const std::function<double()> u = [this] { return u_(); };
    const auto outcome = verify_sampled(p, q, drafted, u);
    for (std::int64_t j = 0; j <= outcome.accepted; ++j) v.path.push_back(j);
    v.next = outcome.next;
    return v;
  }
  std::vector<double> coins(tree.token.size());
  for (auto& c : coins) c = u_();
  auto outcome = verify_tree_sampled(tree, p, coins, u_());
  return {std::move(outcome.path), outcome.next};
}

}  // namespace eagle::acceptance
