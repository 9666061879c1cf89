// The target's side of a round: which drafts it accepts and the token it adds. Greedy (the longest
// path of the target's argmax) and sampled at a temperature: a chain with its draft distributions q
// by the rejection rule (accepted with probability min(1, p(x) / q(x)), else a sample of the
// normalised max(0, p - q)), a tree by SGLang's tree speculative sampling (target only).
#pragma once

#include <cstdint>
#include <functional>
#include <random>
#include <vector>

#include <torch/torch.h>

#include "eagle/acceptance/tree.h"
#include "eagle/data/rng.h"

namespace eagle::acceptance {

struct SamplingSettings {
  double temperature = 0.0;     // > 0
  double top_p = 1.0;           // in (0, 1]
  bool sampled_drafts = false;  // false: the head's argmax (q one-hot, vLLM's default)
  std::uint64_t seed = 42;
};

// Uniform draws in [0, 1) from one std::mt19937_64 (53 bits a draw): a decoding's every draw, so the
// same seed gives the same numbers.
class Uniform {
 public:
  explicit Uniform(std::uint64_t seed) : rng_(seed) {}
  double operator()() { return data::uniform_from_bits(rng_()); }

 private:
  std::mt19937_64 rng_;
};

// A sample of probs [V] (fp64 on the host, any mass) with one uniform draw u: the first token whose
// running mass exceeds u times the total.
std::int64_t sample_from(const torch::Tensor& probs, double u);

// Greedy verification: target_choice[i] is the target's argmax after node i; from the root, the
// child whose token is the target's choice is accepted, until none is. Returns the accepted path
// as node indices, the root first.
std::vector<std::int64_t> verify_greedy(const DraftTree& tree, const std::vector<std::int64_t>& target_choice);

// The verification of one chain round (host side, fp64): p [K + 1, V] the target's distributions after
// the root and after each draft token, q [K, V] the draft's (one-hot rows for greedy drafts),
// drafted [K] target ids. Returns the accepted count and the token that follows them (the
// resampled one at the first rejection, else a sample of p's last row). u() draws uniform [0, 1).
struct RoundOutcome {
  std::int64_t accepted = 0, next = 0;
};
RoundOutcome verify_sampled(const torch::Tensor& p, const torch::Tensor& q, const std::vector<std::int64_t>& drafted,
                            const std::function<double()>& u);

// SGLang's tree_speculative_sampling_target_only (sgl-kernel speculative_sampling.cuh, thresholds 1):
// p [n, V] fp64 the target's distribution after each node. From the root, with the coin of the node
// (coins [n]), its children in node order add their tokens' mass under p to a running sum; the
// first child whose sum reaches the coin is accepted, and the walk goes on from it with its own
// coin. Where no child is accepted, the next token is sampled with final_coin from p at the last
// accepted node without the tokens of its rejected children (SGLang's relu(p - draft_probs); a leaf:
// p itself). The emitted tokens follow p exactly. Returns the accepted path (node indices, the root
// first) and the next token.
struct TreeOutcome {
  std::vector<std::int64_t> path;
  std::int64_t next = 0;
};
TreeOutcome verify_tree_sampled(const DraftTree& tree, const torch::Tensor& p, const std::vector<double>& coins,
                                double final_coin);

// A round's verdict: the accepted path (node indices, the root first) and the target's own token.
struct Verdict {
  std::vector<std::int64_t> path;
  std::int64_t next = 0;
};

class Verifier {
 public:
  virtual ~Verifier() = default;
  // The target's first token after the prompt, from its logits [V] (fp32).
  virtual std::int64_t first_token(const torch::Tensor& last_logits) = 0;
  // The verdict on a round's tree from the target's logits [n, V] (fp32) after each node; q [K, V]
  // (fp64, host) the draft distributions of a chain's drafts, undefined when the proposer kept none.
  virtual Verdict verify(const DraftTree& tree, const torch::Tensor& q, const torch::Tensor& logits) = 0;
};

// Temperature 0: the target's argmax (verify_greedy).
class GreedyVerifier : public Verifier {
 public:
  std::int64_t first_token(const torch::Tensor& last_logits) override;
  Verdict verify(const DraftTree& tree, const torch::Tensor& q, const torch::Tensor& logits) override;
};

// At a temperature: p = sampling_probs of the target's logits; a chain with q by verify_sampled, a
// tree (no q) by verify_tree_sampled (coins for every node and a final one, drawn in that order).
class SampledVerifier : public Verifier {
 public:
  SampledVerifier(const SamplingSettings& s, Uniform& u) : s_(s), u_(u) {}
  std::int64_t first_token(const torch::Tensor& last_logits) override;
  Verdict verify(const DraftTree& tree, const torch::Tensor& q, const torch::Tensor& logits) override;

 private:
  SamplingSettings s_;
  Uniform& u_;
};

}  // namespace eagle::acceptance
