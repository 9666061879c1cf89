// The draft vocabulary of an EAGLE-3 head: the most frequent trained target ids, with the d2t
// offsets and the t2d membership mask that the serving engines read.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include <torch/torch.h>

namespace eagle::head {

struct DraftVocab {
  std::vector<std::int64_t> draft_ids;  // [Vd] target ids, strictly increasing
  std::int64_t target_vocab_size = 0;   // V

  std::int64_t size() const { return static_cast<std::int64_t>(draft_ids.size()); }
  bool is_identity() const { return size() == target_vocab_size; }
  torch::Tensor ids() const;  // [Vd] int64 target ids
  torch::Tensor d2t() const;  // [Vd] int64 offsets: target id = i + d2t[i]
  torch::Tensor t2d() const;  // [V] bool: target id is in the draft vocabulary

  // Every target id (draft_vocab_size >= V).
  static DraftVocab identity(std::int64_t target_vocab_size);
  // Back from d2t [Vd] int64 and the target vocabulary size (checked: increasing, in range).
  static DraftVocab from_d2t(const torch::Tensor& d2t, std::int64_t target_vocab_size);
};

// The draft_size most frequent ids under the loss mask (counts: (id, trained occurrences) of the ids
// seen, any order; ties: lower id first); ids never seen fill the rest by increasing id. Ordered by
// increasing target id. draft_size >= V gives the identity. An id >= V is an Error(input).
DraftVocab build_draft_vocab(const std::vector<std::pair<std::uint32_t, std::uint64_t>>& counts,
                             std::int64_t target_vocab_size, std::int64_t draft_size);

}  // namespace eagle::head
