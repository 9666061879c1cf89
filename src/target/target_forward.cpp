// TargetModel forward passes: the training forward over padded or packed batches (aux hidden
// states, final hidden, chunked teacher) and the incremental forward over a KV cache.
#include <cmath>

#include <fmt/format.h>

#include "eagle/model/shape_check.h"
#include "eagle/util/error.h"
#include "target_impl.h"

namespace eagle::target {

namespace {

void check_batch_tensor(const torch::Tensor& t, const char* name, const torch::Tensor& ids, torch::Device device) {
  model::check_tensor(t, torch::kInt64, ids.sizes(), device,
                      Error(ErrorKind::internal, "malformed target batch").place(name));
}

}  // namespace

TargetOutput TargetModel::forward(const TargetBatch& batch, const TeacherSpec& teacher) const {
  torch::NoGradGuard no_grad;  // not InferenceMode: the head's backward saves these tensors
  const auto& m = *impl_;
  EAGLE_CHECK(batch.input_ids.defined() && batch.input_ids.dim() == 2,
              Error(ErrorKind::internal, "target batch input_ids must be [B, T]"));
  check_batch_tensor(batch.input_ids, "input_ids", batch.input_ids, m.device);
  check_batch_tensor(batch.position_ids, "position_ids", batch.input_ids, m.device);
  check_batch_tensor(batch.document_ids, "document_ids", batch.input_ids, m.device);
  const auto L = m.cfg.num_hidden_layers;

  // longrope decides per sample (its document's length), as if each ran alone through transformers.
  const auto lengths =
      m.cfg.rope.type == "longrope" ? document_lengths(batch.position_ids, batch.document_ids) : torch::Tensor();
  const auto rope = m.rope(batch.position_ids, lengths);
  // Causal attention alone for padded rows; within each document for packed ones (attention.h).
  const model::AttentionLayout layout(batch.document_ids, batch.attention);
  const double scale = target_attention_scale(m.cfg);
  const Impl::Attend attend = [&](std::size_t, const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                  const model::AttentionExtras& extras) {
    const auto dv = v.size(-1), d = q.size(-1);
    if (dv == d) return model::layout_attention(q, k, v, layout, scale, extras);
    // MLA's values may be narrower (DeepSeek-V3: 128 of 192) or wider than its queries and keys: zero
    // columns pad the narrower to the kernels' one head width (as transformers pads values for flash
    // attention; zeros in q and k change no score, in v no output) and are dropped after; exact.
    if (dv < d) {
      const auto padded = torch::constant_pad_nd(v, {0, d - dv});
      return model::layout_attention(q, k, padded, layout, scale, extras).narrow(-1, 0, dv);
    }
    return model::layout_attention(torch::constant_pad_nd(q, {0, dv - d}), torch::constant_pad_nd(k, {0, dv - d}), v,
                                   layout, scale, extras);
  };

  // Each aux hidden state is copied into its slot of the output as it is made (joining them at the
  // end would hold them twice); a single aux layer is the hidden state itself.
  TargetOutput out;
  const auto n_aux = static_cast<std::int64_t>(m.aux_ids.size());
  auto keep = [&](std::int64_t id, const torch::Tensor& h) {
    for (std::int64_t i = 0; i < n_aux; ++i) {
      if (m.aux_ids[static_cast<std::size_t>(i)] != id) continue;
      if (n_aux == 1) {
        out.aux_hidden = h;
        continue;
      }
      const auto H = h.size(-1);
      if (!out.aux_hidden.defined()) out.aux_hidden = torch::empty({h.size(0), h.size(1), n_aux * H}, h.options());
      out.aux_hidden.narrow(-1, i * H, H).copy_(h);
    }
  };
  // Gated DeltaNet layers: every document of a row its own sequence (padding a run of its own).
  const auto runs = m.cfg.hybrid() ? linear_runs(batch.document_ids) : torch::Tensor();
  const Impl::Mix mix = [&](std::size_t l, const torch::Tensor& h) {
    return linear_attention(m.cfg, m.layers[l], h, runs);
  };
  const auto x = m.run_layers(batch.input_ids, rope, attend, keep, mix);
  out.final_hidden = m.norm(x, m.final_norm);
  keep(L, m.last_aux_pre_norm ? x : out.final_hidden);

  auto t = lm_head_teacher(out.final_hidden, m.lm_head, teacher, m.cfg.final_softcap);
  out.target_argmax = t.argmax;
  out.teacher_logits = t.logits;
  return out;
}

TeacherOutput lm_head_teacher(const torch::Tensor& final_hidden, const torch::Tensor& lm_head,
                              const TeacherSpec& teacher, double final_softcap) {
  torch::NoGradGuard no_grad;
  EAGLE_CHECK(teacher.chunk_tokens > 0, Error(ErrorKind::usage, "chunk_tokens must be positive"));
  // The LM head in chunks of rows: [chunk, V] at a time instead of [.., V].
  const bool with_draft = teacher.draft_ids.defined();
  const auto draft_ids = with_draft ? teacher.draft_ids.to(lm_head.device(), torch::kInt64) : torch::Tensor();
  const auto flat = final_hidden.reshape({-1, final_hidden.size(-1)});
  const auto rows = flat.size(0);
  // Each chunk is written into the outputs in place: a list of chunks joined at the end would hold
  // the [rows, V_d] teacher twice at its peak.
  auto argmax = torch::empty({rows}, flat.options().dtype(torch::kInt64));
  auto draft_logits =
      with_draft ? torch::empty({rows, draft_ids.size(0)}, flat.options().dtype(torch::kFloat32)) : torch::Tensor();
  for (std::int64_t s = 0; s < rows; s += teacher.chunk_tokens) {
    const auto n = std::min(teacher.chunk_tokens, rows - s);
    auto logits = model::soft_cap(torch::linear(flat.narrow(0, s, n), lm_head), final_softcap);
    argmax.narrow(0, s, n).copy_(logits.argmax(-1));
    if (with_draft) draft_logits.narrow(0, s, n).copy_(logits.index_select(1, draft_ids));
  }
  auto lead = final_hidden.sizes().vec();
  lead.pop_back();
  TeacherOutput out;
  out.argmax = argmax.view(lead);
  if (with_draft) {
    lead.push_back(draft_ids.size(0));
    out.logits = draft_logits.view(lead);
  }
  return out;
}

torch::Tensor TargetModel::embed(const torch::Tensor& ids) const {
  torch::NoGradGuard no_grad;
  return torch::embedding(impl_->embed, ids.to(impl_->device));
}

KvCache TargetModel::new_cache(std::int64_t batch, std::int64_t capacity, std::int64_t rollback_tokens) const {
  const auto& c = impl_->cfg;
  EAGLE_CHECK(batch > 0 && capacity > 0 && rollback_tokens >= 0,
              Error(ErrorKind::internal, "KV cache batch and capacity must be positive, rollback_tokens >= 0"));
  KvCache cache;
  const auto opts = torch::TensorOptions().dtype(impl_->dtype).device(impl_->device);
  for (std::int64_t l = 0; l < c.num_hidden_layers; ++l) {
    // A Gated DeltaNet layer keeps no keys: [B, kv_heads, capacity, 0] holds nothing and keeps the cache's sizes.
    // Gemma 4: each layer's own head width and key/value heads; a KV-shared layer keeps a copy of its source
    // layer's keys and values (written again by its step), so every layer's cache stands alone.
    const auto gd = c.layer_head_dim(l), kvh = c.layer_kv_heads_of(l);
    const auto d = c.linear(l) ? 0 : gd, dv = c.linear(l) ? 0 : (c.mla() ? c.value_head_dim() : gd);
    cache.keys.push_back(torch::zeros({batch, kvh, capacity, d}, opts));
    cache.values.push_back(torch::zeros({batch, kvh, capacity, dv}, opts));
  }
  if (c.hybrid()) init_linear_states(c, cache, batch, opts, std::min(rollback_tokens, capacity));
  return cache;
}

TargetStepOutput TargetModel::forward_cached(KvCache& cache, const torch::Tensor& ids_in) const {
  return forward_tree(cache, ids_in, torch::Tensor(), torch::Tensor());
}

TargetStepOutput TargetModel::forward_tree(KvCache& cache, const torch::Tensor& ids_in, const torch::Tensor& depth,
                                           const torch::Tensor& tree_mask) const {
  torch::NoGradGuard no_grad;
  const auto& m = *impl_;
  const auto L = m.cfg.num_hidden_layers;
  EAGLE_CHECK(static_cast<std::int64_t>(cache.keys.size()) == L,
              Error(ErrorKind::internal, "KV cache was not made by this model's new_cache"));
  const auto ids = ids_in.to(m.device, torch::kInt64);
  const auto capacity = cache.keys[0].size(2);
  EAGLE_CHECK(ids.dim() == 2 && ids.size(0) == cache.keys[0].size(0) && ids.size(1) > 0,
              Error(ErrorKind::internal, "forward_cached ids must be [B, n] with the cache's batch size")
                  .found(c10::str(ids.sizes())));
  const auto B = ids.size(0), n = ids.size(1), start = cache.length;
  EAGLE_CHECK(start + n <= capacity, Error(ErrorKind::internal, "KV cache capacity exceeded")
                                         .expected(fmt::format("at most {} tokens", capacity))
                                         .found(fmt::format("{} + {}", start, n)));
  const auto iopts = torch::TensorOptions().dtype(torch::kInt64).device(m.device);
  const bool tree = depth.defined();
  EAGLE_CHECK(!m.cfg.hybrid() || cache.rollback.tree_parent.empty(),
              Error(ErrorKind::internal, "a hybrid target's cache after forward_tree holds the tree's root states")
                  .hint("call accept_tree_path (or truncate) before the next forward"));
  EAGLE_CHECK(!tree || (B == 1 && depth.numel() == n && tree_mask.dim() == 2 && tree_mask.size(0) == n &&
                        tree_mask.size(1) == n),
              Error(ErrorKind::internal, "forward_tree needs ids [1, n], depth [n] and tree_mask [n, n]"));
  // Gated DeltaNet layers: a branched tree runs each node along its own path (target_linear_tree.cpp); a
  // chain-shaped one is a chain, forward_cached's call.
  const auto paths = tree && m.cfg.hybrid() ? linear_tree(depth, tree_mask, m.device) : LinearTree();
  const bool branched = tree && m.cfg.hybrid() && !paths.chain();
  const auto offsets = tree ? depth.to(m.device, torch::kInt64) : torch::arange(n, iopts);
  const auto positions = (start + offsets).unsqueeze(0).expand({B, n});
  // longrope: transformers decides per call from its longest position (here start + n; a tree's
  // deepest node + 1).
  const auto longest = tree ? start + depth.max().item<std::int64_t>() + 1 : start + n;
  const auto rope = m.rope(positions, torch::full({B, n}, longest, iopts));
  // New token i (absolute position start + i) attends cached and new keys j <= start + i (and
  // j > start + i - W in a sliding-window layer); a tree's token its cached keys and the tree
  // mask's, by position within the window.
  const auto key_pos =
      (tree ? torch::cat({torch::arange(start, iopts), positions[0]}) : torch::arange(start + n, iopts))
          .view({1, 1, 1, start + n});
  const auto query_pos = positions[0].view({1, 1, n, 1});
  const auto mask =
      tree ? torch::cat({torch::ones({n, start}, iopts.dtype(torch::kBool)), tree_mask.to(m.device, torch::kBool)}, 1)
                 .view({1, 1, n, start + n})
           : key_pos <= query_pos;
  std::vector<torch::Tensor> aux;
  auto keep = [&](std::int64_t id, const torch::Tensor& h) {
    for (auto a : m.aux_ids)
      if (a == id) aux.push_back(h);
  };
  CacheWrite write;
  write.cache = &cache;
  if (branched)
    begin_linear_tree(m.cfg, cache, paths);
  else if (m.cfg.hybrid())
    begin_linear_step(m.cfg, cache, n);
  const Impl::Mix mix = [&](std::size_t l, const torch::Tensor& h) {
    return branched ? linear_attention_tree(m.cfg, m.layers[l], l, h, cache, paths)
                    : linear_attention_cached(m.cfg, m.layers[l], l, h, cache);
  };
  const auto x = m.run_layers(ids, rope, m.cached_attend(write, mask, query_pos, key_pos), keep, mix);
  cache.length = start + n;
  TargetStepOutput out;
  out.final_hidden = m.norm(x, m.final_norm);
  keep(L, m.last_aux_pre_norm ? x : out.final_hidden);
  out.aux_hidden = aux.size() == 1 ? aux[0] : torch::cat(aux, -1);
  out.logits = m.logits(out.final_hidden).to(torch::kFloat32);
  return out;
}

void TargetModel::accept_tree_path(KvCache& cache, std::int64_t before, const std::vector<std::int64_t>& path) const {
  const auto& m = *impl_;
  const auto n = cache.length - before, P = static_cast<std::int64_t>(path.size());
  EAGLE_CHECK(before >= 0 && P > 0 && P <= n,
              Error(ErrorKind::internal, "accept_tree_path keeps a path of the last forward_tree's nodes")
                  .expected(fmt::format("1..{} nodes after cache length {}", n, before))
                  .found(fmt::format("{} nodes", P)));
  for (auto node : path)
    EAGLE_CHECK(node >= 0 && node < n, Error(ErrorKind::internal, "accept_tree_path: a node outside the tree")
                                           .expected(fmt::format("0..{}", n - 1))
                                           .found(std::to_string(node)));
  // The Gated DeltaNet states first: it checks the path against the tree before anything changes.
  if (m.cfg.hybrid()) accept_linear_path(m.cfg, m.layers, cache, before, path);
  // The accepted nodes' keys and values move to the slots after the root, as a chain's sit; entries past the
  // path are overwritten by the next forward and never attended.
  const auto nodes = torch::tensor(path, torch::kInt64).to(m.device);
  for (std::size_t l = 0; l < cache.keys.size(); ++l) {
    cache.keys[l].narrow(2, before, P).copy_(cache.keys[l].index_select(2, before + nodes));
    cache.values[l].narrow(2, before, P).copy_(cache.values[l].index_select(2, before + nodes));
  }
  cache.length = before + P;
}

void TargetModel::truncate(KvCache& cache, std::int64_t length) const {
  EAGLE_CHECK(length >= 0 && length <= cache.length, Error(ErrorKind::internal, "KV cache can only be rolled back")
                                                         .expected(fmt::format("0..{}", cache.length))
                                                         .found(std::to_string(length)));
  // Entries past the new length are overwritten by the next forward_cached and never attended. The Gated
  // DeltaNet layers' states are recomputed at the new length (inside the last call only; after a tree call,
  // whose states are the root's, inside a chain of its first nodes).
  const auto& c = impl_->cfg;
  if (c.hybrid() && !cache.rollback.tree_parent.empty())
    truncate_linear_tree(c, impl_->layers, cache, length);
  else if (c.hybrid() && length != cache.length)
    rollback_linear_states(c, impl_->layers, cache, length);
  cache.length = length;
}

}  // namespace eagle::target
