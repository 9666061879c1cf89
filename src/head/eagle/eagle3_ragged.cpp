// Drafting many sequences at once with per-row lengths (head.h: draft_ragged): draft()'s prefix
// pass and chained steps over a DraftCache whose rows hold sequences of different lengths, each
// row's slots addressed by column as the target's forward_ragged addresses its KV cache.
#include <fmt/format.h>

#include "eagle/head/eagle/eagle3_head.h"
#include "eagle/model/shape_check.h"
#include "eagle/util/error.h"

namespace eagle::head {
namespace {

Error malformed(const char* field) { return Error(ErrorKind::internal, "malformed ragged draft").place(field); }

// cached_attention (head_layer.cpp) with per-row slots: q/k/v [R, heads or kv_heads, n, d] of
// tokens at columns [R, n] of the cache rows `rows` [R, 1]; each token attends its row's slots <=
// its column among [0, key_len).
torch::Tensor ragged_cached_attention(DraftCache& cache, const HeadConfig& cfg, const torch::Tensor& rows,
                                      bool all_rows, const torch::Tensor& columns, std::int64_t key_len,
                                      const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                      std::int64_t layer) {
  using torch::indexing::Slice;
  auto layer_keys = cache.keys.select(0, layer), layer_values = cache.values.select(0, layer);
  // Advanced indices on dims 0 and 2 with a slice between them index as [R, n, kv_heads, d].
  layer_keys.index_put_({rows, Slice(), columns}, k.transpose(1, 2));
  layer_values.index_put_({rows, Slice(), columns}, v.transpose(1, 2));
  auto keys = layer_keys.narrow(2, 0, key_len), values = layer_values.narrow(2, 0, key_len);
  if (!all_rows) {
    keys = keys.index_select(0, rows.view({-1}));
    values = values.index_select(0, rows.view({-1}));
  }
  const auto R = q.size(0), n = q.size(2);
  auto key_pos = torch::arange(key_len, columns.options()).view({1, 1, 1, key_len});
  return draft_attention(cfg, q, keys, values, key_pos <= columns.view({R, 1, n, 1}));
}

}  // namespace

torch::Tensor Eagle3Head::ragged_layers(DraftCache& cache, const torch::Tensor& state, const torch::Tensor& ids,
                                        const torch::Tensor& columns, const torch::Tensor& rows, bool all_rows,
                                        std::int64_t key_len) {
  auto emb = embed(ids);
  auto h = state;
  for (std::int64_t l = 0; l < cfg_.num_layers; ++l) {
    auto raw = project_qkv(*layer(l).self_attn, cfg_, layer_input(l, emb, state, h), inv_freq_, columns);
    h = layer(l).finish(h,
                        ragged_cached_attention(cache, cfg_, rows, all_rows, columns, key_len, raw.q, raw.k, raw.v, l));
  }
  return h;
}

torch::Tensor Eagle3Head::draft_ragged(DraftCache& cache, const RaggedDraft& step, std::int64_t draft_len) {
  torch::NoGradGuard ng;
  EAGLE_CHECK(drafts_ragged(), Error(ErrorKind::internal, "a P-EAGLE head drafts one sequence at a time"));
  const auto dev = fc->weight.device();
  if (inv_freq_.device() != dev) inv_freq_ = inv_freq_.to(dev);
  EAGLE_CHECK(step.next_ids.defined() && step.next_ids.dim() == 2 && step.next_ids.size(1) > 0,
              malformed("next_ids").expected("int64 [R, N] with N > 0").found(model::tensor_text(step.next_ids)));
  const auto R = step.next_ids.size(0), N = step.next_ids.size(1);
  const auto B = cache.keys.size(1), capacity = cache.keys.size(3);
  model::check_tensor(step.next_ids, torch::kInt64, {R, N}, dev, malformed("next_ids"));
  model::check_tensor(step.columns, torch::kInt64, {R, N}, dev, malformed("columns"));
  model::check_tensor(step.last, torch::kInt64, {R}, dev, malformed("last"));
  EAGLE_CHECK(
      step.features.defined() && step.features.dim() == 3 && step.features.size(0) == R && step.features.size(1) == N,
      malformed("features").expected(fmt::format("[{}, {}, F]", R, N)).found(model::tensor_text(step.features)));
  const bool all_rows = !step.rows.defined();
  if (all_rows)
    EAGLE_CHECK(R == B, malformed("rows").found(fmt::format("undefined with {} of {} rows", R, B)));
  else
    model::check_tensor(step.rows, torch::kInt64, {R}, dev, malformed("rows"));
  EAGLE_CHECK(step.key_len > 0 && step.key_len <= capacity,
              Error(ErrorKind::internal, "ragged draft reads outside the draft cache")
                  .expected(fmt::format("key_len in 1..{}", capacity))
                  .found(std::to_string(step.key_len)));
  const auto rows = all_rows ? torch::arange(R, step.columns.options()).view({R, 1}) : step.rows.view({R, 1});
  auto h =
      ragged_layers(cache, combine(step.features.to(dev)), step.next_ids, step.columns, rows, all_rows, step.key_len);
  const auto spare = capacity - 1;
  auto last = h.index({torch::arange(R, step.last.options()), step.last}).unsqueeze(1);  // [R, 1, H]
  const auto last_column = step.columns.gather(1, step.last.view({R, 1}));               // [R, 1]
  const auto idle = last_column == spare;
  std::vector<torch::Tensor> drafted;
  for (std::int64_t j = 0; j < draft_len; ++j) {
    auto token = draft_ids.index({lm_head->forward(norm->forward(last)).argmax(-1)});  // [R, 1] target ids
    drafted.push_back(token);
    if (j + 1 == draft_len) break;
    // Chained step j + 1: the slot (= position) after the row's last real one, as in draft().
    const auto column = (last_column + 1 + j).masked_fill(idle, spare);
    last = ragged_layers(cache, next_state(last), token, column, rows, all_rows, step.key_len);
  }
  return torch::cat(drafted, 1);
}

}  // namespace eagle::head
