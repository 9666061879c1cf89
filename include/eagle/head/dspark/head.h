// The DSpark block draft (issue 49) as speculators 0.9.0 trains it (models/dspark/) and vLLM 0.32 serves it
// (qwen3_dspark.py, v1/worker/gpu/spec_decode/dspark/): DFlash's backbone (head/dflash/head.h: the
// target's features as context keys and values, the block [x_p, M x (S - 1)] over its context, the final
// norm and the target's LM head) in the anchor-as-first layout (sample_from_anchor: slot k of the block
// anchored at p predicts x[p + k + 1], all S slots drafted), plus
//  - a Markov head: a low-rank logit bias from the previous token, W2 W1[prev] (markov_w1 [V, r] indexed by
//    the target id, markov_w2 [V_d, r]); in training prev is the data token x[p + k] (teacher forcing), in a
//    round the token drafted before it (the anchor for slot 0), drafted left to right after one forward;
//  - a confidence head: a scalar logit proj([h_k; W1[prev_k]]) per slot, trained (binary cross-entropy)
//    towards the slot's acceptance rate 1 - TV(draft, target) = sum_v min(q_v, p_v); vLLM uses it only for
//    adaptive verification (how many drafts to verify), never to change a draft.
// Parameter names are the checkpoint names speculators writes and vLLM loads (markov_head.markov_w1.weight,
// markov_head.markov_w2.weight, confidence_head.proj.weight, confidence_head.proj.bias, and DFlash's).
#pragma once

#include "eagle/head/dflash/head.h"

namespace eagle::head {

// What --draft dspark chooses besides DFlash's backbone settings (defaults: speculators' recipe).
struct DSparkSettings {
  std::int64_t markov_rank = 256;      // r
  bool confidence_head = true;         // enable_confidence_head
  bool confidence_with_markov = true;  // confidence_head_with_markov: its input is [h; W1[prev]]
  double confidence_alpha = 1.0;       // confidence_head_alpha: the confidence loss's weight
  double decay_gamma = 4.0;            // slot k's weight exp(-k / gamma) (dflash_decay_gamma)
};

struct MarkovHeadImpl : torch::nn::Module {
  MarkovHeadImpl(std::int64_t vocab_size, std::int64_t draft_vocab_size, std::int64_t rank);
  // W1 rows of the previous tokens [..] -> [.., r].
  torch::Tensor embed(const torch::Tensor& prev) const;
  torch::Tensor bias(const torch::Tensor& prev_embedding) const {
    return torch::linear(prev_embedding, markov_w2->weight);
  }
  torch::nn::Embedding markov_w1{nullptr};
  torch::nn::Linear markov_w2{nullptr};
};
TORCH_MODULE(MarkovHead);

struct ConfidenceHeadImpl : torch::nn::Module {
  explicit ConfidenceHeadImpl(std::int64_t input_dim);
  torch::Tensor forward(const torch::Tensor& features) { return proj->forward(features).squeeze(-1); }
  torch::nn::Linear proj{nullptr};
};
TORCH_MODULE(ConfidenceHead);

// One training step's parts as speculators' DSparkDraftModel computes them, for a micro-batch's anchors.
struct DSparkStep {
  torch::Tensor loss;  // kl + alpha * confidence, scalar with autograd
  torch::Tensor kl_loss, confidence_loss;
  torch::Tensor logits;             // [B, N, S, V] fp32, Markov-corrected (with autograd)
  torch::Tensor confidence_logits;  // [B, N, S] (undefined without the head)
  torch::Tensor accept_rate;        // [B, N, S] fp32, sum_v min(q_v, p_v), detached
  torch::Tensor mask;               // [B, N, S] fp32: loss_mask[p + k] times the anchor's validity
};

class DSparkHead : public DFlashHead {
 public:
  // cfg as DFlashHead takes it (its block, layers, mask token, aux ids, the full vocabulary).
  DSparkHead(HeadConfig cfg, DSparkSettings settings);
  const DSparkSettings& settings() const { return settings_; }

  // speculators' DSpark objective (models/dspark/core.py forward, metrics.py compute_metrics), per row:
  // slot k of anchor p (anchors [B, N], valid [B, N] bool) has teacher the target's logits at p + k
  // (in.teacher_logits [B, T, V]), Markov bias from prev = x[p + k], mask loss_mask[p + k] * valid, weight
  // w_k = exp(-k / gamma); kl = sum m w KL(p || q) / (sum m + 1e-5); the confidence loss
  // sum m w BCE(c, 1 - TV) / (sum m + 1e-8), per row, averaged over rows.
  DSparkStep speculators_step(const HeadInputs& in, const torch::Tensor& anchors, const torch::Tensor& valid);

  // vLLM's greedy round from a block's final-normed hidden states [R, S, H] and its anchor tokens [R]:
  // z_i = lm_head(h_i) + W2 W1[prev_i], x_i = argmax z_i, prev_0 = the anchor, prev_{i+1} = x_i. [R, S].
  torch::Tensor greedy_chain(const torch::Tensor& hidden, const torch::Tensor& anchor_ids) const;

  MarkovHead markov_head{nullptr};
  ConfidenceHead confidence_head{nullptr};  // null without the head

 private:
  DSparkSettings settings_;
};

}  // namespace eagle::head
