// The DFlash block draft (--draft dflash; DFlash.md sections 1, 2, 4) as vLLM 0.32 serves it
// (DFlashQwen3ForCausalLM): the target's features at its DFlash layers t (hidden_states[t + 1],
// un-normed, ascending t) made u = hidden_norm(fc(c)) and injected into every layer as keys
// k_norm(k_proj(u)) + RoPE and values v_proj(u); the block [x_n, M x K] at positions n..n+K runs
// num_layers pre-norm Qwen3-style layers whose attention sees the whole context and the whole block
// (non-causal); the final norm and the target's LM head on slots 1..K (slot i predicts x_{n+i}). One
// forward drafts K = block - 1 tokens (greedy argmax). Trained on anchors (head/dflash/attention.h):
// each block sees its own block and the context before its anchor. Embedding and LM head are the
// target's, frozen. Parameter names are the checkpoint names vLLM loads (fc.weight, hidden_norm.weight,
// layers.{i}.*, norm.weight).
#pragma once

#include "eagle/head/head.h"
#include "eagle/head/layer.h"

namespace eagle::head {

// What --draft dflash chooses besides the target (defaults: SpecForge's published block-16 recipe).
struct DFlashSettings {
  std::int64_t block_size = 16;                 // B = K + 1
  std::int64_t num_layers = 5;                  // the published z-lab drafts
  std::vector<std::int64_t> target_layer_ids;   // DFlash ids t; empty: dflash_default_target_layer_ids
  std::int64_t mask_token_id = -1;              // a target token id (required)
  std::int64_t num_anchors = 512;
  double decay_gamma = 7.0;                     // <= 0: no position decay
  bool hard_labels = false;
};

// SpecForge's build_target_layer_ids: round(1 + i (L - 4) / (n - 1)) for i < n draft layers (Python's
// round, half to even), L / 2 for one layer; clamped to [0, L), sorted, unique.
std::vector<std::int64_t> dflash_default_target_layer_ids(std::int64_t target_layers, std::int64_t draft_layers);

// The head shaped after its target (HeadConfig::from_target: H, heads, head_dim, intermediate size,
// eps, RoPE), the full vocabulary, qk_norm, aux_layer_ids = t + 1. Throws Error(usage) naming the
// option for a mask token outside the vocabulary, a block below 2, a layer id outside the target.
HeadConfig dflash_config_from_target(const target::TargetConfig& target, const DFlashSettings& settings);

// Target layer ids as vLLM reads dflash_config.target_layer_ids (and the head its options): ascending, duplicates
// collapsed.
std::vector<std::int64_t> dflash_sorted_layer_ids(std::vector<std::int64_t> ids);

// The DFlash target layer ids t of a config (aux_layer_ids - 1), as dflash_config.target_layer_ids.
std::vector<std::int64_t> dflash_target_layer_ids(const HeadConfig& cfg);

class DFlashHead : public torch::nn::Module, public DraftHead {
 public:
  // cfg.dflash(), qk_norm, draft_vocab_size = vocab_size, mask_token_id in the vocabulary. Weights
  // start at nn::Linear's default (norms at 1).
  explicit DFlashHead(HeadConfig cfg);

  const HeadConfig& config() const override { return cfg_; }
  torch::nn::Module& module() override { return *this; }
  // One micro-batch: in.extra [B, N] (dflash_sample_anchors), in.aux_hidden [B, T, A * H_t],
  // in.teacher_logits [B, T, V] (unless hard labels), in.target_argmax, loss_mask, document_ids,
  // position_ids. denominators [K]: the valid slots per k of the whole optimizer step
  // (dflash_count_slots); loss = sum_k w_k sum_valid loss_k / sum_k w_k denominators_k (the peers'
  // sum w * CE / sum w). metric_sums row k-1 is slot k (acc: argmax == the target's argmax at a+k-1;
  // cacc: slots 1..k-1 of the same anchor right). No host synchronisation.
  HeadStepOutput train_step_forward(const HeadInputs& in, const torch::Tensor& denominators) override;
  // Keys/values of the context per layer [layers, B, kv_heads, capacity, head_dim]; the block's own
  // keys are never written (each round's block is new).
  DraftCache new_cache(std::int64_t batch, std::int64_t capacity) const override;
  // One round (DFlash.md section 2): features [B, n, A * H_t] of positions cache.length .. +n-1 join
  // the context, next_ids [B, n] the tokens after them, the last the anchor x at position
  // cache.length + n; drafts draft_len tokens (K = block - 1 as vLLM serves it; fewer: the block
  // of draft_len + 1, vLLM with num_speculative_tokens = draft_len) from one forward. [B, draft_len].
  torch::Tensor draft(DraftCache& cache, const torch::Tensor& features, const torch::Tensor& next_ids,
                      std::int64_t draft_len) override;
  // draft()'s forward, the logits [B, draft_len, V] fp32 instead of their argmax (sampled chains).
  torch::Tensor parallel_logits(DraftCache& cache, const torch::Tensor& features, const torch::Tensor& next_ids,
                                std::int64_t draft_len) override;
  // draft() over ragged rows (head.h: RaggedDraft; the batched evaluation): each row's new positions
  // join its context at their columns, its anchor is the token after its last real position, at the
  // column after it; its block [anchor, M x draft_len] sees the row's context slots before the anchor
  // among [0, key_len) and the whole block. The same round as draft() on that row alone, one forward.
  bool drafts_ragged() const override { return true; }
  torch::Tensor draft_ragged(DraftCache& cache, const RaggedDraft& step, std::int64_t draft_len) override;
  torch::Tensor draft_vocab_ids() const override { return draft_ids; }
  // alpha_k teacher-forced: step k (0-based) at t is slot k + 1 of the block anchored at t + 1 (it
  // predicts x_{t+k+2} from the context <= t, as EAGLE's step k); block - 1 tensors [B, T, V] fp32.
  std::vector<torch::Tensor> ttt_logits(const HeadInputs& in) override;
  void set_target_weights(const torch::Tensor& embedding, const torch::Tensor& lm_head) override;
  void init_from_target(const torch::Tensor& embedding, const torch::Tensor& lm_head) override {
    set_target_weights(embedding, lm_head);
  }
  target::TeacherSpec teacher_spec() const override { return target::TeacherSpec{draft_ids}; }

  // The training forward's final-normed hidden states [B, N, S, H] of every anchor's block (S =
  // block size); dense: the attention through one dense mask (dflash_attention_dense, tests only).
  torch::Tensor block_hidden(const HeadInputs& in, const torch::Tensor& anchors, bool dense = false);
  torch::Tensor logits(const torch::Tensor& o) const;  // the target's LM head in its dtype, as fp32 [.., V]

  torch::nn::Linear fc{nullptr};
  RmsNorm hidden_norm{nullptr}, norm{nullptr};
  torch::nn::ModuleList layers{nullptr};  // HeadLayer (decoder kind) each
  torch::Tensor draft_ids;                // buffer: the identity draft vocabulary (the full one)

 protected:
  // The round's shape, for a kind built on this backbone (DSpark, head/dspark/head.h): the block of a round
  // of draft_len tokens (DFlash: the anchor and draft_len mask slots), and its drafted tokens [R, draft_len]
  // from the block's final-normed hidden states [R, round_block(draft_len), H] and anchor tokens [R] (DFlash:
  // the argmax of slots 1..draft_len; the full vocabulary: target ids).
  virtual std::int64_t round_block(std::int64_t draft_len) const { return draft_len + 1; }
  virtual torch::Tensor round_tokens(const torch::Tensor& hidden, const torch::Tensor& anchor_ids);
  // The round's block hidden states after appending the new context positions (draft() and
  // parallel_logits()): [B, round_block(draft_len), H].
  torch::Tensor round_hidden(DraftCache& cache, const torch::Tensor& features, const torch::Tensor& next_ids,
                             std::int64_t draft_len);
  // Layer l on the block stream h [B, R, H] (R rows: whole blocks of `block` rows each, in order), for a kind
  // that changes the layer (DFlash2's convolutions, head/dflash2/head.h): attend(x) is the attention
  // [B, heads, R, d] of the queries, keys and values projected from x [B, R, H] (the block's, over its
  // context). DFlash: lay.finish(h, attend(input_layernorm(h))).
  using Attend = std::function<torch::Tensor(const torch::Tensor&)>;
  virtual torch::Tensor layer_forward(std::int64_t l, const torch::Tensor& h, std::int64_t block, const Attend& attend);
  HeadLayerImpl& layer(std::int64_t l);
  // A training step's inputs checked by shape (Error(internal) naming the field; no host synchronisation): the
  // rows, aux_hidden [B, T, fc's width], teacher_logits [B, T, V] where `teacher`, the anchors in.extra [B, N]
  // ("a <noun> step needs its anchors") and `slots` denominators. Returns the anchors on the head's device.
  torch::Tensor step_anchors(const HeadInputs& in, const torch::Tensor& denominators, std::int64_t slots, bool teacher,
                             const char* noun) const;

 private:
  torch::Tensor embed(const torch::Tensor& ids) const;
  // u = hidden_norm(fc(aux)) [B, n, H].
  torch::Tensor context(const torch::Tensor& aux);
  // Layer l's context keys k_norm(k_proj(u)) + RoPE(positions) and values v_proj(u), [B, kv_heads, n, d].
  std::pair<torch::Tensor, torch::Tensor> context_kv(std::int64_t l, const torch::Tensor& u,
                                                     const torch::Tensor& positions);
  // The block's final-normed hidden states [R, S, H] for block ids and positions [R, S]: each layer's
  // queries over its cached context keys [0, key_len) (of the cache rows `rows`; undefined: all, in
  // order) and the block's own keys, where seen (bool, broadcast to [R, 1, S, key_len + S]) allows.
  torch::Tensor block_hidden_cached(DraftCache& cache, std::int64_t key_len, const torch::Tensor& rows,
                                    const torch::Tensor& ids, const torch::Tensor& positions,
                                    const torch::Tensor& seen);
  void to_device_of_weights();

  HeadConfig cfg_;
  torch::Tensor embedding_, lm_head_;  // the target's, frozen, not registered
  torch::Tensor inv_freq_;
};

}  // namespace eagle::head
