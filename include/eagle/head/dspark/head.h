// The DSpark block draft (issue 49) as speculators 0.9.0 trains it (models/dspark/) and vLLM 0.32 serves it
// (qwen3_dspark.py, v1/worker/gpu/spec_decode/dspark/): DFlash's backbone (head/dflash/head.h: the
// target's features as context keys and values, the block [x_p, M x (S - 1)] over its context, the final
// norm and the target's LM head) in one of two layouts: anchor-as-first (sample_from_anchor, vLLM's default:
// slot k of the block anchored at p predicts x[p + k + 1], all S slots drafted) or DFlash's 1 + N fill-in
// (slot k >= 1 predicts x[p + k], S - 1 drafted; its slot 0 is not trained and drafts nothing), plus
//  - a Markov head: a low-rank logit bias from the previous token, W2 W1[prev] (markov_w1 [V, r] indexed by
//    the target id, markov_w2 [V_d, r]); in training prev is the data token before the slot's label (teacher
//    forcing), in a round the token drafted before it (the anchor for the first drafted slot), drafted left to
//    right after one forward;
//  - a confidence head: a scalar logit proj([h_k; W1[prev_k]]) per slot, trained (binary cross-entropy)
//    towards the slot's acceptance rate 1 - TV(draft, target) = sum_v min(q_v, p_v); vLLM uses it only for
//    adaptive verification (how many drafts to verify), never to change a draft.
// Parameter names are the checkpoint names speculators writes and vLLM loads (markov_head.markov_w1.weight,
// markov_head.markov_w2.weight, confidence_head.proj.weight, confidence_head.proj.bias, and DFlash's).
#pragma once

#include "eagle/head/dflash/head.h"

namespace eagle::head {

// What --draft dspark chooses besides DFlash's backbone settings (defaults: speculators 0.9.0's recipe), as
// HeadConfig holds them (dspark_markov_rank, dspark_confidence_head, dspark_confidence_alpha, and DFlash's
// dflash_decay_gamma as the slot decay).
struct DSparkSettings {
  std::int64_t markov_rank = 256;  // r
  bool confidence_head = true;     // enable_confidence_head (its input [h; W1[prev]]: with markov, always)
  double confidence_alpha = 1.0;   // confidence_head_alpha: the confidence loss's weight
  double decay_gamma = 4.0;        // the j-th drafted slot's weight exp(-j / gamma), j from 0
  bool sample_from_anchor = true;  // anchor-as-first, else 1 + N fill-in
  static DSparkSettings of(const HeadConfig& cfg);
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
  // cfg as DFlashHead takes it (its block, layers, mask token, aux ids, the full vocabulary) with cfg.dspark().
  explicit DSparkHead(HeadConfig cfg);
  DSparkSettings settings() const { return DSparkSettings::of(config()); }

  // The first slot that drafts: 0 anchor-as-first, 1 fill-in. Slot k's label is x[p + k + 1 - offset()].
  std::int64_t offset() const { return config().dspark_sample_from_anchor ? 0 : 1; }

  // The training forward (the trainer's; loss plan dspark/spec.cpp): in.extra [B, N] anchors drawn as DFlash's
  // for a span of S + 1 - offset() (every drafting slot's label inside the anchor's sample); denominators
  // [steps]: the valid drafting slots per j of the optimizer step (label trained). loss = sum_j w_j sum_valid
  // KL_j / sum_j n_j + alpha sum_j w_j sum_valid BCE_j / sum_j n_j (speculators' normalisation, over the
  // step). metric_sums row j is drafting slot j (acc against the target's argmax before the label). No host
  // synchronisation.
  HeadStepOutput train_step_forward(const HeadInputs& in, const torch::Tensor& denominators) override;

  // speculators' DSpark objective exactly (models/dspark/core.py forward, metrics.py compute_metrics), per row:
  // slot k of anchor p (anchors [B, N], valid [B, N] bool) has teacher the target's logits at p + k - offset()
  // (in.teacher_logits [B, T, V]), Markov bias from prev = x[p + k - offset()] (fill-in slot 0: x[p]), mask
  // loss_mask[p + k] * valid (its input position; train_step_forward masks by the label's), fill-in slot 0
  // masked out, weight exp(-k / gamma) anchor-as-first, exp(-(k - 1) / gamma) fill-in;
  // kl = sum m w KL(p || q) / (sum m + 1e-5); the confidence loss sum m w BCE(c, 1 - TV) / (sum m + 1e-8), per
  // row, averaged over rows. [B, N, S] for every slot. The reference test's path.
  DSparkStep speculators_step(const HeadInputs& in, const torch::Tensor& anchors, const torch::Tensor& valid);

  // vLLM's round (dspark/speculator.py) from the drafting slots' final-normed hidden states [R, K, H] and the
  // anchor tokens [R]: z_i = lm_head(h_i) + W2 W1[prev_i], x_i = pick(i, z_i) (target ids [R]), prev_0 = the
  // anchor, prev_{i+1} = x_i. greedy_chain picks the argmax: [R, K].
  void chain(const torch::Tensor& hidden, const torch::Tensor& anchor_ids, const PickToken& pick) const;
  torch::Tensor greedy_chain(const torch::Tensor& hidden, const torch::Tensor& anchor_ids) const;

  // A sampled round: one backbone forward, then chain() with the caller's pick (acceptance/propose.cpp).
  void parallel_chain(DraftCache& cache, const torch::Tensor& features, const torch::Tensor& next_ids,
                      std::int64_t draft_len, const PickToken& pick) override;
  // Its logits depend on the tokens drafted before: parallel_chain instead (Error(internal)).
  torch::Tensor parallel_logits(DraftCache& cache, const torch::Tensor& features, const torch::Tensor& next_ids,
                                std::int64_t draft_len) override;
  // Teacher-forced, as in training: step j at t is drafting slot j of the block anchored at t + 1 (x[t + 1]),
  // its Markov bias from the data token before its label, x[t + 1 + j]; [B, T, V] per step.
  std::vector<torch::Tensor> ttt_logits(const HeadInputs& in) override;

  MarkovHead markov_head{nullptr};
  ConfidenceHead confidence_head{nullptr};  // null without the head

 protected:
  // A round of draft_len tokens is the block [anchor, M x (draft_len - 1 + offset())]: anchor-as-first, every
  // slot drafts; fill-in, slots 1.. do.
  std::int64_t round_block(std::int64_t draft_len) const override { return draft_len + offset(); }
  torch::Tensor round_tokens(const torch::Tensor& hidden, const torch::Tensor& anchor_ids) override {
    return greedy_chain(hidden.narrow(1, offset(), hidden.size(1) - offset()), anchor_ids);
  }

 private:
  // What both objectives compute per slot, for final-normed hidden states h [.., H], the previous tokens
  // prev [..] and the teacher's logits [.., V] (fp32): the Markov embedding e = W1[prev], the Markov-corrected
  // logits z = lm_head(h) + W2 e (fp32), KL(p || q) [..] (speculators' eager kl_div_loss), the acceptance rate
  // sum_v min(q_v, p_v) [..] (no gradient), and the confidence logit on [h; e] [..] (undefined without the head).
  struct SlotTerms {
    torch::Tensor e, z, kl, accept, confidence;
  };
  SlotTerms slot_terms(const torch::Tensor& h, const torch::Tensor& prev, const torch::Tensor& teacher);
  // z for one slot: lm_head(h) + W2 W1[prev] in fp32.
  torch::Tensor markov_logits(const torch::Tensor& h, const torch::Tensor& e) const {
    return logits(h) + markov_head->bias(e).to(torch::kFloat32);
  }
};

}  // namespace eagle::head
