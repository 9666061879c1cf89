// The head's side of a round (see propose.h).
#include "eagle/acceptance/propose.h"

#include <vector>

#include "eagle/head/draft_spec.h"
#include "eagle/model/sampling.h"

namespace eagle::acceptance {
namespace {

// The head's distribution over the target vocabulary [V] from its draft logits [V_d].
torch::Tensor on_target_vocab(const torch::Tensor& draft_probs, const torch::Tensor& vocab_ids, std::int64_t vocab) {
  return torch::zeros({vocab}, draft_probs.options()).index_copy_(0, vocab_ids, draft_probs);
}

// One draft token from its draft logits [V_d]: the argmax (q one-hot) or a sample of q; its
// distribution over the target vocabulary goes to qs. Returns the target id.
std::int64_t draft_token(const torch::Tensor& logits, const SamplingSettings& s, Uniform& u,
                         const torch::Tensor& vocab_ids, std::int64_t vocab, std::vector<torch::Tensor>& qs) {
  auto q = model::sampling_probs(logits, s.temperature, s.top_p).cpu();
  const auto d = s.sampled_drafts ? sample_from(q, u()) : logits.argmax().item<std::int64_t>();
  if (!s.sampled_drafts) q = torch::zeros_like(q).index_fill_(0, torch::tensor({d}), 1.0);
  qs.push_back(on_target_vocab(q, vocab_ids, vocab));
  return vocab_ids[d].item<std::int64_t>();
}

}  // namespace

Round ChainProposer::propose(head::DraftHead& head, head::DraftCache& cache, const torch::Tensor& features,
                             const torch::Tensor& next_ids, std::int64_t root) {
  if (!s_) {
    auto d = head.draft(cache, features, next_ids, k_).view({-1}).cpu();  // [K]
    const std::vector<std::int64_t> drafted(d.data_ptr<std::int64_t>(), d.data_ptr<std::int64_t>() + k_);
    return {chain_tree(root, drafted), true, {}};
  }
  const auto vocab_ids = head.draft_vocab_ids().to(torch::kCPU, torch::kInt64);
  const auto vocab = head.config().vocab_size;
  auto step = head.draft_extend(cache, features, next_ids);
  const auto prefix = cache.length;
  std::vector<std::int64_t> drafted;
  std::vector<torch::Tensor> qs;
  for (std::int64_t j = 0; j < k_; ++j) {
    const auto token = draft_token(step.logits.view({-1}), *s_, *u_, vocab_ids, vocab, qs);
    drafted.push_back(token);
    if (j + 1 == k_) break;
    // The chain's next node: slot and RoPE position prefix + j, attending all before it.
    step = head.draft_nodes(cache, step.state, torch::full({1, 1}, token, torch::kInt64),
                            torch::full({1, 1}, prefix + j, torch::kInt64), prefix + j,
                            torch::ones({1, prefix + j + 1}, torch::kBool));
  }
  return {chain_tree(root, drafted), true, torch::stack(qs)};
}

Round ParallelProposer::propose(head::DraftHead& head, head::DraftCache& cache, const torch::Tensor& features,
                                const torch::Tensor& next_ids, std::int64_t root) {
  const auto vocab_ids = head.draft_vocab_ids().to(torch::kCPU, torch::kInt64);
  const auto vocab = head.config().vocab_size;
  std::vector<std::int64_t> drafted;
  std::vector<torch::Tensor> qs;
  // One forward; slot j's logits [1, V_d] may depend on the token drafted before it (DSpark's Markov bias).
  head.parallel_chain(cache, features, next_ids, k_, [&](std::int64_t, const torch::Tensor& logits) {
    drafted.push_back(draft_token(logits[0], s_, u_, vocab_ids, vocab, qs));
    return torch::full({1}, drafted.back(), torch::kInt64);
  });
  return {chain_tree(root, drafted), true, torch::stack(qs)};
}

std::unique_ptr<Proposer> sampled_chain_proposer(const head::DraftHead& head, std::int64_t draft_len,
                                                 const SamplingSettings& s, Uniform& u) {
  // A round drafted in one forward (P-EAGLE, DFlash, DSpark): each slot's token from its own logits.
  if (head::draft_spec(head.config()).limits(head.config()).parallel_chain)
    return std::make_unique<ParallelProposer>(draft_len, s, u);
  return std::make_unique<ChainProposer>(draft_len, s, u);
}

Round TreeProposer::propose(head::DraftHead& head, head::DraftCache& cache, const torch::Tensor& features,
                            const torch::Tensor& next_ids, std::int64_t root_token) {
  const auto vocab_ids = head.draft_vocab_ids().to(torch::kCPU);
  auto root = head.draft_extend(cache, features, next_ids);
  const auto prefix = cache.length;
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
    auto step = head.draft_nodes(cache, torch::cat(states, 1), torch::tensor(tokens).view({1, f}),
                                 torch::tensor(positions).view({1, f}), next_slot, mask);
    for (std::int64_t j = 0; j < f; ++j) {
      slot_of[static_cast<std::size_t>(frontier[j])] = next_slot + j;
      state_of[static_cast<std::size_t>(frontier[j])] = step.state.narrow(1, j, 1);
    }
    next_slot += f;
    return step.logits.view({f, -1});
  };
  return {build_tree(shape_, root_token, vocab_ids, expand), false, {}};
}

}  // namespace eagle::acceptance
