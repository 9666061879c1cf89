// Draft vocabulary selection from token statistics (see draft_vocab.h and docs/heads.md).
#include "eagle/model/draft_vocab.h"

#include <algorithm>
#include <numeric>

#include <fmt/format.h>

#include "eagle/util/error.h"

namespace eagle::model {

torch::Tensor DraftVocab::ids() const {
  return torch::tensor(draft_ids, torch::TensorOptions().dtype(torch::kInt64));
}

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
                                  .place("tensor d2t").expected("[draft_vocab_size]")
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

DraftVocab build_draft_vocab(const std::vector<std::uint64_t>& counts, std::int64_t target_vocab_size,
                             std::int64_t draft_size) {
  EAGLE_CHECK(target_vocab_size > 0 && draft_size > 0,
              Error(ErrorKind::usage, "draft vocabulary sizes must be positive")
                  .expected("vocab_size > 0 and draft_vocab_size > 0")
                  .found(fmt::format("{} and {}", target_vocab_size, draft_size)));
  for (std::size_t id = static_cast<std::size_t>(target_vocab_size); id < counts.size(); ++id) {
    EAGLE_CHECK(counts[id] == 0, Error(ErrorKind::input, "the dataset holds a token id outside the target vocabulary")
                                     .place("token statistics")
                                     .expected(fmt::format("ids < {}", target_vocab_size))
                                     .found(fmt::format("id {}", id))
                                     .hint("check that the data was tokenized with the target's tokenizer"));
  }
  if (draft_size >= target_vocab_size) return DraftVocab::identity(target_vocab_size);
  auto count_of = [&](std::int64_t id) -> std::uint64_t {
    return static_cast<std::size_t>(id) < counts.size() ? counts[static_cast<std::size_t>(id)] : 0;
  };
  std::vector<std::int64_t> order(static_cast<std::size_t>(target_vocab_size));
  std::iota(order.begin(), order.end(), 0);
  // Most frequent first, ties (including the never-seen ids, count 0) by lower id.
  std::partial_sort(order.begin(), order.begin() + draft_size, order.end(), [&](std::int64_t a, std::int64_t b) {
    auto ca = count_of(a), cb = count_of(b);
    return ca != cb ? ca > cb : a < b;
  });
  DraftVocab v;
  v.target_vocab_size = target_vocab_size;
  v.draft_ids.assign(order.begin(), order.begin() + draft_size);
  std::sort(v.draft_ids.begin(), v.draft_ids.end());
  return v;
}

}  // namespace eagle::model
