// The EAGLE-3 draft head (EAGLE.md "EAGLE-3"): FC over three target features, one decoder layer on
// [norm(embedding); norm(hidden)], final norm and an LM head over the draft vocabulary, trained
// with training-time test. Parameter names are the SGLang export names.
#pragma once

#include "eagle/head/draft_vocab.h"
#include "eagle/head/head.h"
#include "eagle/head/layer.h"

namespace eagle::head {

class Eagle3Head : public torch::nn::Module, public DraftHead {
 public:
  // vocab gives d2t/t2d. Weights start random (nn::Linear's default, norms at 1); call
  // init_from_target (or set_target_weights for loaded weights) before any forward.
  Eagle3Head(HeadConfig cfg, const DraftVocab& vocab);

  const HeadConfig& config() const override { return cfg_; }
  torch::nn::Module& module() override { return *this; }
  HeadStepOutput train_step_forward(const HeadInputs& in, const torch::Tensor& denominators) override;
  DraftCache new_cache(std::int64_t batch, std::int64_t capacity) const override;
  torch::Tensor draft(DraftCache& cache, const torch::Tensor& features, const torch::Tensor& next_ids,
                      std::int64_t draft_len) override;
  Step draft_extend(DraftCache& cache, const torch::Tensor& features, const torch::Tensor& next_ids) override;
  Step draft_nodes(DraftCache& cache, const torch::Tensor& states, const torch::Tensor& ids,
                   const torch::Tensor& positions, std::int64_t slot, const torch::Tensor& mask) override;
  torch::Tensor draft_vocab_ids() const override { return draft_ids; }
  torch::Tensor parallel_logits(DraftCache& cache, const torch::Tensor& features, const torch::Tensor& next_ids,
                                std::int64_t draft_len) override;
  bool drafts_ragged() const override { return !cfg_.parallel_drafting; }
  torch::Tensor draft_ragged(DraftCache& cache, const RaggedDraft& step, std::int64_t draft_len) override;
  void set_target_weights(const torch::Tensor& embedding, const torch::Tensor& lm_head) override;
  // set_target_weights, then the target LM-head rows of the draft ids into lm_head (EAGLE.md).
  void init_from_target(const torch::Tensor& embedding, const torch::Tensor& lm_head) override;
  target::TeacherSpec teacher_spec() const override { return target::TeacherSpec{draft_ids}; }
  // Copies the target LM-head rows of the draft ids into lm_head (a good start, EAGLE.md).
  void init_lm_head_from_target(const torch::Tensor& target_lm_head);

  std::vector<torch::Tensor> ttt_logits(const HeadInputs& in) override;

  DraftVocab vocab() const;

  torch::nn::Linear fc{nullptr};
  RmsNorm input_norm{nullptr};                  // norm_before_fc: over all aux features [A * H_t]
  torch::nn::ModuleList fc_norm{nullptr};       // fc_norm: one RmsNorm per aux feature [H_t]
  HeadLayer midlayer{nullptr};                  // layer 0 (exported as midlayer.* or layers.0.*)
  torch::nn::ModuleList extra_layers{nullptr};  // layers 1..n-1 (num_layers > 1), exported as layers.{l}.*
  RmsNorm norm{nullptr};
  torch::nn::Linear lm_head{nullptr};
  torch::Tensor mask_hidden;          // P-EAGLE: [1, 1, A * H_t] in aux space (speculators' shape), else undefined
  torch::Tensor d2t, t2d, draft_ids;  // buffers (d2t, t2d exported; draft_ids = arange + d2t)

 private:
  struct StepResult {
    torch::Tensor hidden, normed;  // the layer's output (pre-norm) [B, T, H] and its final norm
  };
  // Runs the TTT unroll, calling visit(k, result) after each step.
  template <typename Visit>
  void unroll(const HeadInputs& in, Visit&& visit);
  torch::Tensor embed(const torch::Tensor& ids) const;
  // F1 of EAGLE-variants.md: the aux features [.., A * H_t] through the optional norms and the FC.
  torch::Tensor combine(const torch::Tensor& aux);
  // The next step's state from a step's layer output h: norm(h) with norm_output, else h.
  torch::Tensor next_state(const torch::Tensor& h);
  HeadLayerImpl& layer(std::int64_t l);
  // One TTT step's q, k, v of layer l (layer 0 reads the embedding of ids and the state, layers >= 1
  // h), recomputed in backward with RecomputeMode::layer.
  Qkv step_qkv(std::int64_t l, const torch::Tensor& ids, const torch::Tensor& state, const torch::Tensor& h,
               const torch::Tensor& positions);
  // Layer l after its attention (HeadLayerImpl::finish) and, for the last layer, the final norm of
  // its output (undefined otherwise); recomputed in backward unless RecomputeMode::off.
  std::pair<torch::Tensor, torch::Tensor> step_finish(std::int64_t l, const torch::Tensor& h,
                                                      const torch::Tensor& attention);
  // Layer l's attention/MLP input: layer 0 [N(emb); N(state)] (F2), layer l >= 1 N(h_{l-1}) (F3).
  torch::Tensor layer_input(std::int64_t l, const torch::Tensor& emb, const torch::Tensor& state,
                            const torch::Tensor& h);
  // The layers over [B, T] tokens and states [B, T, H] writing slots [start, start + T) of every
  // layer's cache at RoPE positions pos0.. (drafting); returns the last layer's output.
  torch::Tensor cached_layers(DraftCache& cache, const torch::Tensor& state, const torch::Tensor& ids,
                              std::int64_t start, std::int64_t pos0);
  // cached_layers with per-row slots (head/eagle/eagle3_ragged.cpp): ids [R, n] and states [R, n, H]
  // written at columns [R, n] of the cache rows `rows` ([R, 1] int64; all_rows: every row in order).
  torch::Tensor ragged_layers(DraftCache& cache, const torch::Tensor& state, const torch::Tensor& ids,
                              const torch::Tensor& columns, const torch::Tensor& rows, bool all_rows,
                              std::int64_t key_len);
  // P-EAGLE drafting: the new prefix slots and draft_len - 1 mask slots in one forward (§6); the
  // LM head's output [B, draft_len, V_d] at the drafted positions (the head's dtype).
  torch::Tensor parallel_forward(DraftCache& cache, const torch::Tensor& features, const torch::Tensor& next_ids,
                                 std::int64_t draft_len);

  HeadConfig cfg_;
  torch::Tensor embedding_;  // the target's, frozen, not registered
  torch::Tensor inv_freq_;
};

}  // namespace eagle::head
