// Cached forwards of TargetModel with per-row lengths (batched generation): where a layer's new keys
// and values go (CacheWrite, also for the shared-length forward_cached) and forward_ragged (a hybrid's
// Gated DeltaNet rows: target_linear.cpp).
#include <cmath>

#include <fmt/format.h>

#include "eagle/model/shape_check.h"
#include "eagle/util/error.h"
#include "target_impl.h"

namespace eagle::target {

std::pair<torch::Tensor, torch::Tensor> CacheWrite::apply(std::size_t l, const torch::Tensor& k,
                                                          const torch::Tensor& v) const {
  auto& keys = cache->keys[l];
  auto& values = cache->values[l];
  if (!columns.defined()) {
    const auto start = cache->length, T = k.size(2), end = start + T;
    keys.narrow(2, start, T).copy_(k);
    values.narrow(2, start, T).copy_(v);
    return {keys.narrow(2, 0, end), values.narrow(2, 0, end)};
  }
  // Advanced indices on dims 0 and 2 with a slice between them index as [R, T, kv_heads, head_dim].
  using torch::indexing::Slice;
  keys.index_put_({row_index, Slice(), columns}, k.transpose(1, 2));
  values.index_put_({row_index, Slice(), columns}, v.transpose(1, 2));
  if (all_rows) return {keys.narrow(2, 0, key_len), values.narrow(2, 0, key_len)};
  const auto rows = row_index.view({-1});
  return {keys.narrow(2, 0, key_len).index_select(0, rows), values.narrow(2, 0, key_len).index_select(0, rows)};
}

TargetModel::Impl::Attend TargetModel::Impl::cached_attend(const CacheWrite& write, const torch::Tensor& mask,
                                                           const torch::Tensor& query_pos,
                                                           const torch::Tensor& key_pos) const {
  const double scale = target_attention_scale(cfg);
  return [write, mask, query_pos, key_pos, scale](std::size_t l, const torch::Tensor& q, const torch::Tensor& k,
                                                  const torch::Tensor& v, const model::AttentionExtras& extras) {
    const auto [keys, values] = write.apply(l, k, v);
    return model::masked_attention(q, keys, values, model::window_mask(mask, query_pos, key_pos, extras.window), scale,
                                   extras);
  };
}

namespace {

Error malformed_step(const char* field) { return Error(ErrorKind::internal, "malformed ragged step").place(field); }

// The decoder layers over a ragged step: the last layer's output [R, N, H] and, when aux is given,
// the aux ids' inputs of layer (hidden_states[id], id < L) in aux_ids order.
torch::Tensor ragged_layers(const TargetModel::Impl& m, KvCache& cache, const RaggedStep& step,
                            std::vector<torch::Tensor>* aux) {
  torch::NoGradGuard no_grad;
  const auto L = m.cfg.num_hidden_layers;
  EAGLE_CHECK(static_cast<std::int64_t>(cache.keys.size()) == L && (!m.cfg.hybrid() || cache.ragged.start.defined()),
              Error(ErrorKind::internal, "KV cache was not made by this model's new_cache"));
  const auto B = cache.keys[0].size(0), capacity = cache.keys[0].size(2);
  EAGLE_CHECK(step.ids.defined() && step.ids.dim() == 2 && step.ids.size(1) > 0,
              malformed_step("ids").expected("int64 [R, N] with N > 0").found(model::tensor_text(step.ids)));
  const auto R = step.ids.size(0), N = step.ids.size(1);
  model::check_tensor(step.ids, torch::kInt64, {R, N}, m.device, malformed_step("ids"));
  model::check_tensor(step.columns, torch::kInt64, {R, N}, m.device, malformed_step("columns"));
  model::check_tensor(step.last, torch::kInt64, {R}, m.device, malformed_step("last"));
  if (step.rows.defined())
    model::check_tensor(step.rows, torch::kInt64, {R}, m.device, malformed_step("rows"));
  else
    EAGLE_CHECK(R == B, malformed_step("rows")
                            .expected(model::tensor_text(torch::kInt64, {R}, m.device) + ", or undefined with all rows")
                            .found(fmt::format("undefined with {} of {} rows", R, B)));
  EAGLE_CHECK(step.key_len > 0 && step.key_len <= capacity,
              Error(ErrorKind::internal, "ragged step reads outside the KV cache")
                  .expected(fmt::format("key_len in 1..{}", capacity))
                  .found(std::to_string(step.key_len)));

  const auto iopts = torch::TensorOptions().dtype(torch::kInt64).device(m.device);
  CacheWrite write{&cache, step.rows.defined() ? step.rows.view({R, 1}) : torch::arange(R, iopts).view({R, 1}),
                   step.columns, !step.rows.defined(), step.key_len};
  // Idle and padding rows write to the spare last column; clamped, they do not raise the longest
  // position that dynamic-NTK RoPE scales with (their outputs are discarded).
  // longrope: per row, from the position of its last real token (padding sits at the spare column).
  const auto lengths = m.cfg.rope.type == "longrope"
                           ? (step.columns.gather(1, step.last.view({R, 1})) + 1).expand({R, N})
                           : torch::Tensor();
  const auto rope = m.rope(step.columns.clamp_max(step.key_len - 1), lengths);
  // Token (r, i) attends the columns j <= columns[r, i] of its row: its own earlier tokens (cached or
  // written by this step) and nothing a previous occupant of the row left beyond them.
  // A sliding-window layer also drops the columns <= columns[r, i] - W.
  const auto key_pos = torch::arange(step.key_len, iopts).view({1, 1, 1, -1});
  const auto query_pos = step.columns.view({R, 1, N, 1});
  const auto mask = key_pos <= query_pos;
  auto keep = [&](std::int64_t id, const torch::Tensor& h) {
    if (aux == nullptr) return;
    for (std::size_t a = 0; a < m.aux_ids.size(); ++a)
      if (m.aux_ids[a] == id) (*aux)[a] = h;
  };
  if (aux != nullptr) aux->assign(m.aux_ids.size(), torch::Tensor());
  // Gated DeltaNet layers: each row's states advance over its real tokens from its own column (target_linear.cpp).
  const auto linear = m.cfg.hybrid() ? begin_ragged_linear(cache, step) : LinearRows{};
  const TargetModel::Impl::Mix mix = [&](std::size_t l, const torch::Tensor& h) {
    return linear_attention_ragged(m.cfg, m.layers[l], l, h, cache, linear);
  };
  auto x = m.run_layers(step.ids, rope, m.cached_attend(write, mask, query_pos, key_pos), keep, mix);
  if (m.cfg.hybrid()) end_ragged_linear(cache, linear);
  return x;
}

}  // namespace

torch::Tensor TargetModel::forward_ragged(KvCache& cache, const RaggedStep& step) const {
  const auto& m = *impl_;
  auto x = ragged_layers(m, cache, step, nullptr);
  const auto R = x.size(0);
  auto h = x.index({torch::arange(R, step.last.options()), step.last});  // [R, H]
  return m.logits(m.norm(h, m.final_norm)).to(torch::kFloat32);
}

TargetStepOutput TargetModel::forward_ragged_all(KvCache& cache, const RaggedStep& step) const {
  const auto& m = *impl_;
  std::vector<torch::Tensor> aux;
  auto x = ragged_layers(m, cache, step, &aux);
  TargetStepOutput out;
  out.final_hidden = m.norm(x, m.final_norm);
  // hidden_states[L] is the normed output (or, for the MTP layer, the one before), as forward_cached keeps it.
  for (std::size_t a = 0; a < m.aux_ids.size(); ++a)
    if (m.aux_ids[a] == m.cfg.num_hidden_layers) aux[a] = m.last_aux_pre_norm ? x : out.final_hidden;
  out.aux_hidden = aux.size() == 1 ? aux[0] : torch::cat(aux, -1);
  out.logits = m.logits(out.final_hidden).to(torch::kFloat32);
  return out;
}

}  // namespace eagle::target
