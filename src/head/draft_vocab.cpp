// Draft vocabulary selection from token statistics (see draft_vocab.h and docs/heads.md).
#include "eagle/head/draft_vocab.h"

#include <algorithm>
#include <numeric>

#include <fmt/format.h>

#include "eagle/util/error.h"

namespace eagle::head {

torch::Tensor DraftVocab::ids() const { return torch::tensor(draft_ids, torch::TensorOptions().dtype(torch::kInt64)); }

torch::Tensor DraftVocab::d2t() const {
  return ids() - torch::arange(size(), torch::TensorOptions().dtype(torch::kInt64));
}

torch::Tensor DraftVocab::t2d() const {
  auto mask = torch::zeros({target_vocab_size}, torch::TensorOptions().dtype(torch::kBool));
  if (size() > 0) mask.index_fill_(0, ids(), true);
  return mask;
}

DraftVocab DraftVocab::identity(std::int64_t target_vocab_size) {
  DraftVocab v;
  v.target_vocab_size = target_vocab_size;
  v.draft_ids.resize(static_cast<std::size_t>(target_vocab_size));
  std::iota(v.draft_ids.begin(), v.draft_ids.end(), 0);
  return v;
}

DraftVocab DraftVocab::from_d2t(const torch::Tensor& d2t, std::int64_t target_vocab_size) {
  EAGLE_CHECK(d2t.dim() == 1, Error(ErrorKind::input, "d2t must be one-dimensional")
                                  .place("tensor d2t")
                                  .expected("[draft_vocab_size]")
                                  .found(fmt::format("{} dimensions", d2t.dim())));
  auto offsets = d2t.to(torch::kCPU, torch::kInt64).contiguous();
  DraftVocab v;
  v.target_vocab_size = target_vocab_size;
  const auto* p = offsets.data_ptr<std::int64_t>();
  for (std::int64_t i = 0; i < offsets.numel(); ++i) {
    std::int64_t id = i + p[i];
    EAGLE_CHECK(id >= 0 && id < target_vocab_size && (v.draft_ids.empty() || id > v.draft_ids.back()),
                Error(ErrorKind::input, "d2t does not map to increasing target ids")
                    .place(fmt::format("tensor d2t, index {}", i))
                    .expected(fmt::format("i + d2t[i] increasing and in [0, {})", target_vocab_size))
                    .found(fmt::format("{}", id)));
    v.draft_ids.push_back(id);
  }
  return v;
}

DraftVocab build_draft_vocab(const std::vector<std::pair<std::uint32_t, std::uint64_t>>& counts,
                             std::int64_t target_vocab_size, std::int64_t draft_size) {
  EAGLE_CHECK(target_vocab_size > 0 && draft_size > 0,
              Error(ErrorKind::usage, "draft vocabulary sizes must be positive")
                  .expected("vocab_size > 0 and draft_vocab_size > 0")
                  .found(fmt::format("{} and {}", target_vocab_size, draft_size)));
  for (const auto& [id, n] : counts) {
    EAGLE_CHECK(n == 0 || static_cast<std::int64_t>(id) < target_vocab_size,
                Error(ErrorKind::input, "the dataset holds a token id outside the target vocabulary")
                    .place("token statistics")
                    .expected(fmt::format("ids < {}", target_vocab_size))
                    .found(fmt::format("id {}", id))
                    .hint("check that the data was tokenized with the target's tokenizer"));
  }
  if (draft_size >= target_vocab_size) return DraftVocab::identity(target_vocab_size);
  // The ids seen, most frequent first (ties by lower id); then never-seen ids by increasing id.
  std::vector<std::pair<std::uint32_t, std::uint64_t>> seen;
  for (const auto& c : counts)
    if (c.second > 0) seen.push_back(c);
  std::sort(seen.begin(), seen.end(), [](const auto& a, const auto& b) {
    return a.second != b.second ? a.second > b.second : a.first < b.first;
  });
  DraftVocab v;
  v.target_vocab_size = target_vocab_size;
  std::vector<bool> taken(static_cast<std::size_t>(target_vocab_size), false);
  for (std::size_t i = 0; i < seen.size() && v.size() < draft_size; ++i) {
    v.draft_ids.push_back(seen[i].first);
    taken[seen[i].first] = true;
  }
  for (std::int64_t id = 0; id < target_vocab_size && v.size() < draft_size; ++id)
    if (!taken[static_cast<std::size_t>(id)]) v.draft_ids.push_back(id);
  std::sort(v.draft_ids.begin(), v.draft_ids.end());
  return v;
}

}  // namespace eagle::head
