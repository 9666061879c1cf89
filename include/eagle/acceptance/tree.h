// SGLang's EAGLE draft tree (python/sglang/srt/speculative/: select_top_k_tokens,
// organize_draft_results, build_tree_kernel_efficient), built from the draft logits of each
// expanded node; docs/heads.md ("Acceptance metrics") says where it differs.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include <torch/torch.h>

namespace eagle::acceptance {

// SGLang's --speculative-num-steps, --speculative-eagle-topk, --speculative-num-draft-tokens.
struct TreeShape {
  std::int64_t steps = 0, topk = 0, draft_tokens = 0;
  bool on() const { return topk > 0; }
  std::int64_t candidates() const { return topk + (steps - 1) * topk * topk; }
};

// One expanded draft token: a child of `parent` (a candidate index, -1 the root).
struct TreeCandidate {
  std::int64_t draft_id = 0, token = 0;  // index in the draft vocabulary, target id
  std::int64_t parent = -1, depth = 1;
  double score = 1.0;  // product of the draft probabilities along its path (SGLang's score)
};

// The verified tree: node 0 the root (the target's newest token), nodes 1.. the draft_tokens - 1
// best candidates in candidate order (a parent always before its children). A chain of drafts is
// the tree whose node i + 1 is the only child of node i.
struct DraftTree {
  std::vector<TreeCandidate> candidates;           // every expanded candidate, in SGLang's order
  std::vector<std::int64_t> selected;              // candidate of node i + 1 (SGLang's top_scores_index)
  std::vector<std::int64_t> token, parent, depth;  // per node; the root's parent -1, depth 0
  torch::Tensor mask() const;                      // [n, n] bool: node i sees node j (an ancestor or itself)
};

// The chain root, drafts[0], drafts[1], ...
DraftTree chain_tree(std::int64_t root_token, const std::vector<std::int64_t>& drafts);

// The draft logits [f, V_d] (fp32) of the frontier candidates (indices into `candidates`); the
// first call gets the root alone as the empty list.
using ExpandFn = std::function<torch::Tensor(const std::vector<std::int64_t>& frontier,
                                             const std::vector<TreeCandidate>& candidates)>;

// SGLang's tree: step 0 takes the root's top-k; each of steps 1..steps-1 expands every frontier node
// by its top-k and keeps the top-k of those k*k by score as the next frontier; the tree is the
// draft_tokens - 1 best candidates by score. Ties: the lower draft id within a node's children
// (a stable sort of its logits), the lower candidate index across candidates.
DraftTree build_tree(const TreeShape& shape, std::int64_t root_token, const torch::Tensor& draft_vocab_ids,
                     const ExpandFn& expand);

}  // namespace eagle::acceptance
