// Greedy chain speculative decoding of many prompts at once (see batched.h).
//
// Each of batch_size rows holds one prompt in a row of the target's KV cache and of the head's
// draft cache, at its own length. A round verifies every busy row's drafts in one target forward
// ([B, K + 1]: the row's last token and its K drafts at its own columns), counts on the host what
// each row accepted, then drafts the next K tokens of every busy row in one head call, whose
// pending inputs are the verify step's own features (the accepted positions at the same columns;
// the rejected ones, and idle rows, at the spare last column). A row whose prompt ends takes the
// next one: the new prompts are prefilled together (target and head, only their rows) before the
// next round. Per prompt this is decode_prompt's chain-greedy loop; only the batching differs. A round's two
// steps read and write fixed storage of [B, K + 1], so on a GPU each replays a CUDA graph per key
// length (rounded up to kGraphColumns columns, shortest first); prefills run eagerly.
#include <algorithm>
#include <functional>
#include <optional>

#include <fmt/format.h>

#include "eagle/acceptance/batched.h"
#include "eagle/device/cuda_graph_cache.h"
#include "eagle/util/error.h"

namespace eagle::acceptance {
namespace {

using device::kGraphColumns;  // graphed rounds read a multiple of this many cache columns

struct Row {
  std::size_t prompt = 0;
  std::int64_t length = 0;  // positions in both caches (the target's and the head's)
  std::int64_t x = 0;       // the target's newest token, not yet in its cache
  std::vector<std::int64_t> drafts;
  PromptAcceptance result;
};

class BatchedDecoder {
 public:
  BatchedDecoder(const target::TargetModel& target, head::DraftHead& head,
                 std::vector<std::vector<std::int64_t>> prompts, std::int64_t max_new_tokens, std::int64_t draft_len,
                 std::int64_t batch_size, std::int64_t max_cuda_graphs, PrefillReuse* reuse)
      : target_(target),
        reuse_(target.config().hybrid() ? nullptr : reuse),
        head_(head),
        prompts_(std::move(prompts)),
        max_new_(max_new_tokens),
        K_(draft_len),
        B_(std::clamp<std::int64_t>(static_cast<std::int64_t>(prompts_.size()), 1, batch_size)),
        rows_(static_cast<std::size_t>(B_)),
        results_(prompts_.size()),
        iopts_(torch::TensorOptions().dtype(torch::kInt64).device(target.device())) {
    std::int64_t longest = 1;
    for (const auto& p : prompts_) longest = std::max<std::int64_t>(longest, static_cast<std::int64_t>(p.size()));
    // A row's length stays below longest + max_new_tokens + K (a round ends at most K tokens past
    // max_new_tokens); K more for the chained drafts, and the spare last column.
    capacity_ = longest + max_new_tokens + 2 * K_ + 2;
    spare_ = capacity_ - 1;
    // A hybrid target logs a round's K + 1 columns, so that each row continues at its accepted prefix.
    tcache_ = target.new_cache(B_, capacity_, K_ + 1);
    hcache_ = head.new_cache(B_, capacity_);
    // The rounds' inputs and outputs in fixed storage, so a round's two steps can replay graphs.
    const auto N = K_ + 1;
    const auto F = target.config().hidden_size * static_cast<std::int64_t>(target.aux_layer_ids().size());
    for (auto* t : {&verify_ids_, &verify_columns_, &draft_next_, &draft_columns_, &greedy_})
      *t = torch::zeros({B_, N}, iopts_);
    verify_last_ = torch::full({B_}, K_, iopts_);
    draft_last_ = torch::zeros({B_}, iopts_);
    drafts_ = torch::zeros({B_, K_}, iopts_);
    features_ = torch::zeros({B_, N, F}, torch::TensorOptions().dtype(target.dtype()).device(target.device()));
    if (const auto graphs = target.graphed_steps(max_cuda_graphs, target::TargetModel::Step::decoding); graphs > 0) {
      const auto by_length = device::length_ladder(B_, capacity_, kGraphColumns);
      verify_graphs_.emplace(target.device(), graphs, by_length, "eval");
      draft_graphs_.emplace(target.device(), graphs, by_length, "eval");
    }
  }

  AcceptanceResult run() {
    while (true) {
      refill();
      if (std::none_of(rows_.begin(), rows_.end(), [](const auto& r) { return r.has_value(); })) break;
      round();
    }
    AcceptanceResult r;
    for (const auto& p : results_) r.add(p);
    r.finish();
    return r;
  }

 private:
  bool done(const Row& r) const { return r.result.generated >= max_new_ || is_eos(target_.config(), r.x); }

  void finish(std::size_t b) {
    results_[rows_[b]->prompt] = rows_[b]->result;
    rows_[b].reset();
  }

  // Free rows take the next prompts; those are prefilled together: the target's forward over each
  // prompt, then the head's prefix pass and drafts, both over the new rows alone.
  void refill() {
    std::vector<std::size_t> fresh;
    for (std::size_t b = 0; b < rows_.size(); ++b) {
      if (rows_[b] || next_ >= prompts_.size()) continue;
      rows_[b].emplace().prompt = next_++;
      fresh.push_back(b);
    }
    if (fresh.empty()) return;
    const auto R = static_cast<std::int64_t>(fresh.size());
    std::int64_t N = 0;
    for (auto b : fresh) N = std::max<std::int64_t>(N, static_cast<std::int64_t>(prompts_[rows_[b]->prompt].size()));
    std::vector<std::int64_t> ids(static_cast<std::size_t>(R * N), 0), columns(ids.size(), spare_), last(fresh.size()),
        row_ids(fresh.begin(), fresh.end());
    for (std::int64_t i = 0; i < R; ++i) {
      const auto& p = prompts_[rows_[fresh[i]]->prompt];
      for (std::size_t k = 0; k < p.size(); ++k) {
        ids[i * N + k] = p[k];
        columns[i * N + k] = static_cast<std::int64_t>(k);
      }
      last[i] = static_cast<std::int64_t>(p.size()) - 1;
    }
    const auto ids_t = on_device(ids, {R, N}), columns_t = on_device(columns, {R, N}), rows_t = on_device(row_ids, {R}),
               last_t = on_device(last, {R});
    torch::Tensor first, aux_hidden;
    if (first_refill_ && reuse_ && reuse_->rows == R && reuse_->length == N) {
      // The first prompts, prefilled as before: their keys and values copied in, their outputs taken.
      reuse_->kv.write_into(tcache_);
      first = reuse_->first;
      aux_hidden = reuse_->aux_hidden;
      ++reuse_->reused;
    } else {
      auto out = target_.forward_ragged_all(tcache_, {ids_t, columns_t, rows_t, last_t, N});
      first = out.logits.index({torch::arange(R, iopts_), last_t}).argmax(-1).cpu();
      aux_hidden = out.aux_hidden;
      // The first prefill fills rows 0..R-1 in order: kept for the next evaluation of these prompts.
      if (first_refill_ && reuse_ && reuse_->rows == 0) {
        reuse_->rows = R;
        reuse_->length = N;
        reuse_->kv = target::KvPrefix::of(tcache_, R, N);
        reuse_->first = first;
        reuse_->aux_hidden = aux_hidden;
      }
    }
    first_refill_ = false;
    // The head's pending inputs: every prompt position, each with the token after it (the last
    // one's is the target's first choice).
    std::vector<std::int64_t> next(ids.size(), 0);
    for (std::int64_t i = 0; i < R; ++i) {
      auto& row = *rows_[fresh[i]];
      row.x = first[i].item<std::int64_t>();
      row.length = last[i] + 1;
      row.result.generated = 1;
      for (std::int64_t k = 0; k < last[i]; ++k) next[i * N + k] = ids[i * N + k + 1];
      next[i * N + last[i]] = row.x;
    }
    auto drafts = head_.draft_ragged(
        hcache_, {aux_hidden, on_device(next, {R, N}), columns_t, rows_t, last_t, N + K_ - 1}, K_);
    keep_drafts(fresh, drafts);
    for (auto b : fresh)
      if (done(*rows_[b])) finish(b);
  }

  void keep_drafts(const std::vector<std::size_t>& rows, const torch::Tensor& drafts) {
    const auto d = drafts.to(torch::kCPU).contiguous();
    const auto* p = d.data_ptr<std::int64_t>();
    for (std::size_t i = 0; i < rows.size(); ++i)
      if (rows_[rows[i]]) rows_[rows[i]]->drafts.assign(p + i * K_, p + (i + 1) * K_);
  }

  // One verification of every busy row, then the next drafts of those that go on.
  void round() {
    const auto N = K_ + 1;
    std::vector<std::int64_t> ids(static_cast<std::size_t>(B_ * N), 0), columns(ids.size(), spare_);
    std::int64_t key_len = 1;
    for (std::int64_t b = 0; b < B_; ++b) {
      if (!rows_[b]) continue;
      const auto& row = *rows_[b];
      EAGLE_CHECK(row.length + N <= spare_, Error(ErrorKind::internal, "batched evaluation outgrew its caches"));
      ids[b * N] = row.x;
      for (std::int64_t k = 0; k < K_; ++k) ids[b * N + 1 + k] = row.drafts[k];
      for (std::int64_t k = 0; k < N; ++k) columns[b * N + k] = row.length + k;
      key_len = std::max(key_len, row.length + N);
    }
    verify_ids_.copy_(host(ids, {B_, N}));
    verify_columns_.copy_(host(columns, {B_, N}));
    key_len = graph_columns(key_len, verify_graphs_.has_value());
    run(verify_graphs_, key_len, [&] {
      auto out = target_.forward_ragged_all(tcache_, {verify_ids_, verify_columns_, {}, verify_last_, key_len});
      greedy_.copy_(out.logits.argmax(-1));  // the target's choice after each token
      features_.copy_(out.aux_hidden);
    });
    const auto greedy_t = greedy_.to(torch::kCPU).contiguous();
    const auto* greedy = greedy_t.data_ptr<std::int64_t>();
    // The head's pending inputs: each going-on row's accepted positions (their features, each with
    // the token after it) at the verify step's columns; the rest, and finished rows, at the spare one.
    std::vector<std::int64_t> next(ids.size(), 0), head_columns(ids.size(), spare_), head_last(B_, 0);
    std::int64_t head_keys = 0;
    for (std::int64_t b = 0; b < B_; ++b) {
      if (!rows_[b]) continue;
      auto& row = *rows_[b];
      std::int64_t acc = 0;
      while (acc < K_ && row.drafts[acc] == greedy[b * N + acc]) ++acc;
      const auto bonus = greedy[b * N + acc];
      row.result.add_round(acc);
      std::vector<std::int64_t> tokens(row.drafts.begin(), row.drafts.begin() + acc);
      tokens.push_back(bonus);
      const bool stop = count_new_tokens(target_.config(), tokens, max_new_, row.result.generated);
      for (std::int64_t k = 0; k <= acc && !stop; ++k) {
        next[b * N + k] = tokens[k];
        head_columns[b * N + k] = row.length + k;
      }
      head_last[b] = acc;
      row.length += 1 + acc;
      row.x = bonus;
      if (stop) {
        finish(static_cast<std::size_t>(b));
        continue;
      }
      head_keys = std::max(head_keys, row.length + K_ - 1);
    }
    if (head_keys == 0) return;  // every row finished
    draft_next_.copy_(host(next, {B_, N}));
    draft_columns_.copy_(host(head_columns, {B_, N}));
    draft_last_.copy_(host(head_last, {B_}));
    head_keys = graph_columns(head_keys, draft_graphs_.has_value());
    run(draft_graphs_, head_keys, [&] {
      drafts_.copy_(
          head_.draft_ragged(hcache_, {features_, draft_next_, draft_columns_, {}, draft_last_, head_keys}, K_));
    });
    std::vector<std::size_t> all(rows_.size());
    for (std::size_t b = 0; b < all.size(); ++b) all[b] = b;
    keep_drafts(all, drafts_);
  }

  // A graphed step reads a multiple of kGraphColumns columns (at most the caches').
  std::int64_t graph_columns(std::int64_t key_len, bool graphed) const {
    return graphed ? device::graph_key_len(key_len, capacity_) : key_len;
  }

  void run(std::optional<device::CudaGraphCache>& graphs, std::int64_t key_len, const std::function<void()>& step) {
    if (graphs)
      graphs->run({B_, key_len}, step);
    else
      step();
  }

  static torch::Tensor host(std::vector<std::int64_t>& v, torch::IntArrayRef sizes) {
    return torch::from_blob(v.data(), sizes, torch::kInt64);
  }

  torch::Tensor on_device(std::vector<std::int64_t>& v, torch::IntArrayRef sizes) const {
    return torch::from_blob(v.data(), sizes, torch::kInt64).to(target_.device());
  }

  const target::TargetModel& target_;
  PrefillReuse* reuse_;
  bool first_refill_ = true;
  head::DraftHead& head_;
  std::vector<std::vector<std::int64_t>> prompts_;
  std::int64_t max_new_, K_, B_;
  std::vector<std::optional<Row>> rows_;
  std::vector<PromptAcceptance> results_;
  torch::TensorOptions iopts_;
  std::size_t next_ = 0;
  std::int64_t capacity_ = 0, spare_ = 0;
  target::KvCache tcache_;
  head::DraftCache hcache_;
  torch::Tensor verify_ids_, verify_columns_, verify_last_, greedy_, features_;  // fixed storage of a round
  torch::Tensor draft_next_, draft_columns_, draft_last_, drafts_;
  std::optional<device::CudaGraphCache> verify_graphs_, draft_graphs_;
};

}  // namespace

AcceptanceResult batched_acceptance(const target::TargetModel& target, head::DraftHead& head,
                                    const std::vector<std::vector<std::int64_t>>& prompts, std::int64_t max_new_tokens,
                                    std::int64_t draft_len, std::int64_t batch_size, std::int64_t max_cuda_graphs,
                                    PrefillReuse* reuse) {
  torch::NoGradGuard no_grad;
  EAGLE_CHECK(head.drafts_ragged() && draft_len > 0 && batch_size > 0,
              Error(ErrorKind::internal, "batched evaluation needs a head that drafts many sequences at once"));
  if (prompts.empty()) return {};
  return BatchedDecoder(target, head, prompts, max_new_tokens, draft_len, batch_size, max_cuda_graphs, reuse).run();
}

}  // namespace eagle::acceptance
