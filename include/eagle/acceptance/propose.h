// The head's side of a round: the drafts after the target's newest token. A chain of draft_len
// tokens (greedy through head.draft(); with their distributions q in explicit steps for a sampled
// verification), a P-EAGLE chain from its one parallel forward, or SGLang's draft tree.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>

#include <torch/torch.h>

#include "eagle/acceptance/tree.h"
#include "eagle/acceptance/verify.h"
#include "eagle/head/head.h"

namespace eagle::acceptance {

// One round's drafts: the tree under the root (the target's newest token). A chain is verified by
// the target's forward_cached, any other tree by forward_tree with the tree's mask.
struct Round {
  DraftTree tree;
  bool chain = true;
  torch::Tensor q;  // [K, V] fp64 on the host: a chain's draft distributions (sampled verification), else undefined
};

class Proposer {
 public:
  virtual ~Proposer() = default;
  // Cache slots a round may write past the accepted tokens (the caches hold the prompt,
  // max_new_tokens, these and 2).
  virtual std::int64_t spare_slots() const = 0;
  // The drafts after root: features [1, n, F] and next_ids [1, n] are the head's pending inputs
  // (head.h: draft), appended to the head's cache.
  virtual Round propose(head::DraftHead& head, head::DraftCache& cache, const torch::Tensor& features,
                        const torch::Tensor& next_ids, std::int64_t root) = 0;
};

// draft_len tokens chained on the head's own recurrent state. Greedy: head.draft() (any head). With
// sampling settings: draft_extend + draft_nodes, each token the argmax or a sample of its q
// (sampled_drafts), drawn from u; q kept for the rejection rule (EAGLE-3 heads).
class ChainProposer : public Proposer {
 public:
  explicit ChainProposer(std::int64_t draft_len) : k_(draft_len) {}
  ChainProposer(std::int64_t draft_len, const SamplingSettings& s, Uniform& u) : k_(draft_len), s_(s), u_(&u) {}
  std::int64_t spare_slots() const override { return k_; }
  Round propose(head::DraftHead& head, head::DraftCache& cache, const torch::Tensor& features,
                const torch::Tensor& next_ids, std::int64_t root) override;

 private:
  std::int64_t k_;
  std::optional<SamplingSettings> s_;
  Uniform* u_ = nullptr;
};

// A chain drafted in one forward with its q (P-EAGLE, DFlash, DSpark): the draft_len slots' logits in turn
// (DraftHead::parallel_chain: DSpark's depend on the token drafted before), each token the argmax or a
// sample of its q, drawn from u. (Its greedy chain is ChainProposer's: head.draft() drafts in parallel.)
class ParallelProposer : public Proposer {
 public:
  ParallelProposer(std::int64_t draft_len, const SamplingSettings& s, Uniform& u) : k_(draft_len), s_(s), u_(u) {}
  std::int64_t spare_slots() const override { return k_; }
  Round propose(head::DraftHead& head, head::DraftCache& cache, const torch::Tensor& features,
                const torch::Tensor& next_ids, std::int64_t root) override;

 private:
  std::int64_t k_;
  SamplingSettings s_;
  Uniform& u_;
};

// The chain proposer of a sampled verification for this head: ParallelProposer for P-EAGLE heads,
// else ChainProposer with sampling.
std::unique_ptr<Proposer> sampled_chain_proposer(const head::DraftHead& head, std::int64_t draft_len,
                                                 const SamplingSettings& s, Uniform& u);

// SGLang's draft tree (build_tree) each round, from draft_extend and draft_nodes: each frontier node
// at RoPE position prefix - 1 + depth in a cache slot of its own, attending the prefix and its
// ancestors' slots (a sequentially drafting EAGLE-3 head; others throw Error(usage) by name).
class TreeProposer : public Proposer {
 public:
  explicit TreeProposer(const TreeShape& shape) : shape_(shape) {}
  std::int64_t spare_slots() const override { return shape_.draft_tokens + shape_.steps * shape_.topk; }
  Round propose(head::DraftHead& head, head::DraftCache& cache, const torch::Tensor& features,
                const torch::Tensor& next_ids, std::int64_t root) override;

 private:
  TreeShape shape_;
};

}  // namespace eagle::acceptance
