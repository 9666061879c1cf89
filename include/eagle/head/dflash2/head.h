// The DFlash2 block draft (issue 50) as speculators 0.9.0 trains it (models/dflash2/) and vLLM 0.32 serves it
// (qwen3_dflash2.py, v1/worker/gpu/spec_decode/dflash2/, under "method": "dflash"): DFlash's backbone
// (head/dflash/head.h) in its 1 + N fill-in layout (slot k >= 1 of the block anchored at p predicts x[p + k])
// with two changes:
//  - in every layer, two grouped causal convolutions over the block's slots (attention_conv, mlp_conv): the
//    sublayer's normed input u is convolved before the sublayer (its queries and the block's keys and values
//    read the result; the context's keys and values are not convolved) and the sublayer's output after it,
//    with kernels base_kernel[side] [taps, H] plus a delta per row and group of conv_group_size channels,
//    kernel_projection(u) [2 x taps x groups]; causal within each block (slot k mixes slots k, k - 1, ..);
//  - a candidate selector: the LM head's top selector_top_k tokens C of each slot are reranked by
//    score(c) = logit(c) + sum_r P[prev, r] (W_h h)[r] S[c, r] (predecessor_codebook P [V, r],
//    successor_codebook S [V, r], hidden_projection W_h [r, H]); a round walks the block left to right, each
//    slot's prev the token drafted before it (the anchor for slot 1).
// Trained on the unary KL (DFlash's, speculators' normalisation) plus alpha x the selector's cross-entropy
// over C (the target's argmax put in C's last place when absent), the predecessor the data token.
// Parameter names are the checkpoint names speculators writes and vLLM loads.
#pragma once

#include "eagle/head/dflash/head.h"

namespace eagle::head {

// One of a layer's two convolutions (attention_conv, mlp_conv): base_kernel [2, taps, H] (side 0 the input's,
// 1 the output's), kernel_projection [2 x taps x groups, H] (no bias). At speculators' init the identity (base
// tap 0 one, the rest and the projection zero): the layer is then DFlash's.
struct BlockConvImpl : torch::nn::Module {
  BlockConvImpl(std::int64_t hidden, std::int64_t taps, std::int64_t group_size);
  // The input side on u [B, R, H] (rows: whole blocks of `block` rows): the convolved u and the output side's
  // deltas [B, R, taps, groups] (both from u).
  std::pair<torch::Tensor, torch::Tensor> prepare(const torch::Tensor& u, std::int64_t block) const;
  // The output side on the sublayer's output y [B, R, H] with prepare's deltas.
  torch::Tensor finish(const torch::Tensor& y, const torch::Tensor& delta, std::int64_t block) const;
  torch::Tensor base_kernel;
  torch::nn::Linear kernel_projection{nullptr};
  std::int64_t taps, group_size;
};
TORCH_MODULE(BlockConv);

// y[n, c] = sum_{t < taps, t <= slot(n)} (base[t, c] + delta[n, t, c / group_size]) x[n - t, c], slot(n) = n mod
// block: x [B, R, H], delta [B, R, taps, groups], base [taps, H] (speculators' grouped_dynamic_conv).
torch::Tensor grouped_block_conv(const torch::Tensor& x, const torch::Tensor& delta, const torch::Tensor& base,
                                 std::int64_t block, std::int64_t group_size);

struct CandidateSelectorImpl : torch::nn::Module {
  CandidateSelectorImpl(std::int64_t vocab, std::int64_t hidden, std::int64_t rank);
  // The scores [.., K] of candidates [.., K] (target ids) after prev [..] at final-normed hidden states h
  // [.., H]: unary [.., K] (the candidates' LM head logits, fp32) + the transition term.
  torch::Tensor score(const torch::Tensor& unary, const torch::Tensor& h, const torch::Tensor& prev,
                      const torch::Tensor& candidates) const;
  torch::Tensor predecessor_codebook, successor_codebook;
  torch::nn::Linear hidden_projection{nullptr};
};
TORCH_MODULE(CandidateSelector);

// One training step's parts as speculators' DFlash2DraftModel computes them for a micro-batch's anchors
// (every slot of every block; slot 0 masked out).
struct DFlash2Step {
  torch::Tensor loss, unary_loss, selector_loss;  // scalars with autograd
  torch::Tensor unary_logits;                     // [B, N, S, V] fp32
  torch::Tensor candidates;                       // [B, N, S, K] the training candidates (target ids)
  torch::Tensor candidate_logits;                 // [B, N, S, K] fp32
  torch::Tensor target_positions;                 // [B, N, S] the label's place among the candidates
  torch::Tensor mask;                             // [B, N, S] fp32
};

class DFlash2Head : public DFlashHead {
 public:
  // cfg as DFlashHead takes it with cfg.dflash2(): conv_group_size divides H, taps <= the block, top_k <= V.
  explicit DFlash2Head(HeadConfig cfg);

  // The training forward (loss plan dflash2/spec.cpp: DFlash's anchors and valid slots): per slot k >= 1, the
  // unary KL(p || q) and the selector's CE over its candidates, weights exp(-(k - 1) / gamma), each summed over
  // the valid slots and divided by the step's valid slots (speculators' normalisation); loss = unary + alpha x
  // selector. metric_sums row k - 1 is slot k (acc: the selector's teacher-forced pick is the target's argmax).
  HeadStepOutput train_step_forward(const HeadInputs& in, const torch::Tensor& denominators) override;
  // speculators' objective exactly for anchors [B, N] with validity [B, N]: its mask loss_mask[p + k] x valid,
  // slot 0 out, normalised per row (sum m + 1e-5) and averaged over rows. The reference test's path.
  DFlash2Step speculators_step(const HeadInputs& in, const torch::Tensor& anchors, const torch::Tensor& valid);

  // vLLM's walk (dflash2/speculator.py) over the drafting slots' final-normed hidden states [R, K, H] after
  // the anchors [R]: candidates the top selector_top_k of each slot's logits, scores against the token picked
  // before; pick(i, logits_i) gets [R, V] fp32 logits that are -inf outside the candidates and returns the
  // target ids [R] drafted (greedy_walk: the best score).
  void walk(const torch::Tensor& hidden, const torch::Tensor& anchor_ids, const PickToken& pick) const;
  torch::Tensor greedy_walk(const torch::Tensor& hidden, const torch::Tensor& anchor_ids) const;

  void parallel_chain(DraftCache& cache, const torch::Tensor& features, const torch::Tensor& next_ids,
                      std::int64_t draft_len, const PickToken& pick) override;
  torch::Tensor parallel_logits(DraftCache& cache, const torch::Tensor& features, const torch::Tensor& next_ids,
                                std::int64_t draft_len) override;
  // Teacher-forced: step j at t is slot j + 1 of the block anchored at t + 1, its predecessor x[t + 1 + j];
  // [B, T, V] per step, -inf outside the slot's candidates.
  std::vector<torch::Tensor> ttt_logits(const HeadInputs& in) override;

  CandidateSelector candidate_selector{nullptr};
  std::vector<BlockConv> attention_convs, mlp_convs;  // registered under layers.{l}.attention_conv / mlp_conv

 protected:
  torch::Tensor layer_forward(std::int64_t l, const torch::Tensor& h, std::int64_t block,
                              const Attend& attend) override;
  torch::Tensor round_tokens(const torch::Tensor& hidden, const torch::Tensor& anchor_ids) override {
    return greedy_walk(hidden.narrow(1, 1, hidden.size(1) - 1), anchor_ids);
  }

 private:
  // The candidates [.., K] of logits [.., V] (the top K) and their selector scores after prev [..].
  std::pair<torch::Tensor, torch::Tensor> candidates_and_scores(const torch::Tensor& logits, const torch::Tensor& h,
                                                                const torch::Tensor& prev) const;
};

}  // namespace eagle::head
