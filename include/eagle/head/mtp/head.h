// The target's shipped MTP layer as a draft head (--draft mtp; MTP.md 2.0-2.4), one class for
// every family, what differs read from its MtpLayout (head/mtp/layout.h): u = projection of the
// normed embedding e and the normed state h (MiMo: [h; e], e zeroed at position 0; Qwen3.5: [e; h];
// DeepSeek-V3, GLM-4.5: [e; h], e zeroed at position 0), one decoder layer on u (Qwen3.5: gated
// attention, q/k norm, partial RoPE, (1 + w) norms; DeepSeek-V3: MLA; GLM-4.5: qkv bias, partial RoPE;
// a dense MLP or the target's mixture of experts), o = output_norm(u + attn + mlp), logits = the
// target's lm_head(o), o fed back (GLM-4.5: the block's output before output_norm). Trained with the
// EAGLE-3 training-time test (the same TTT attention: step-1 keys causally plus the chain's own
// earlier steps, RoPE position t+k) over the full vocabulary; drafted k times with the one layer.
#pragma once

#include "eagle/head/draft_vocab.h"
#include "eagle/head/head.h"
#include "eagle/head/layer.h"
#include "eagle/head/mtp/layout.h"

namespace eagle::head {

class MtpHead : public torch::nn::Module, public DraftHead {
 public:
  // cfg.mtp() with eagle_version 3 and draft_vocab_size = vocab_size. Weights start at nn::Linear's
  // default (norms at identity); the shipped ones come from the target folder (mtp_io.h).
  explicit MtpHead(HeadConfig cfg);

  const HeadConfig& config() const override { return cfg_; }
  torch::nn::Module& module() override { return *this; }
  HeadStepOutput train_step_forward(const HeadInputs& in, const torch::Tensor& denominators) override;
  DraftCache new_cache(std::int64_t batch, std::int64_t capacity) const override;
  // features [B, n, H]: the target's last hidden states (aux id L), before its final norm for MiMo and
  // after it for the others (MtpLayout::step1_pre_norm).
  torch::Tensor draft(DraftCache& cache, const torch::Tensor& features, const torch::Tensor& next_ids,
                      std::int64_t draft_len) override;
  // draft()'s steps for trees and sampled chains: the prefix pass, and nodes under an explicit mask;
  // a chain drafted this way equals draft() bit for bit.
  Step draft_extend(DraftCache& cache, const torch::Tensor& features, const torch::Tensor& next_ids) override;
  Step draft_nodes(DraftCache& cache, const torch::Tensor& states, const torch::Tensor& ids,
                   const torch::Tensor& positions, std::int64_t slot, const torch::Tensor& mask) override;
  torch::Tensor draft_vocab_ids() const override { return draft_ids; }
  std::vector<torch::Tensor> ttt_logits(const HeadInputs& in) override;
  // Both frozen, kept by reference: the embedding and the LM head [V, H] are the target's, as vLLM
  // swaps them in after loading the MTP layer (MTP.md 0).
  void set_target_weights(const torch::Tensor& embedding, const torch::Tensor& lm_head) override;
  void init_from_target(const torch::Tensor& embedding, const torch::Tensor& lm_head) override {
    set_target_weights(embedding, lm_head);
  }
  target::TeacherSpec teacher_spec() const override { return target::TeacherSpec{draft_ids}; }

  // Registered under the family's native names (layout().embedding_norm, hidden_norm, projection,
  // output_norm; MiMo: token_layernorm, hidden_layernorm, input_proj, final_layernorm; DeepSeek: enorm,
  // hnorm, eh_proj, shared_head.norm) and the decoder layer as mtp_block.* (input_layernorm, self_attn.*,
  // post_attention_layernorm, mlp.*); mtp_io.h maps them to the checkpoint's names.
  RmsNorm embedding_norm{nullptr}, hidden_norm{nullptr}, output_norm{nullptr};
  torch::nn::Linear projection{nullptr};
  HeadLayer mtp_block{nullptr};
  torch::Tensor d2t, t2d, draft_ids;  // buffers of the identity draft vocabulary (the full one)

 private:
  // One step over tokens ids [B, T] and states [B, T, H] at RoPE positions [B, T]: the embedding
  // (MiMo: zeroed where the position is 0, vLLM's mask), the input projection, q/k/v (and the output
  // gate) of the block.
  struct StepInput {
    torch::Tensor u;  // the block's input and residual [B, T, H]
    Qkv qkv;
  };
  StepInput step_input(const torch::Tensor& ids, const torch::Tensor& state, const torch::Tensor& positions);
  // The block after its attention (gated where the layer is): o = output_norm(z), the logits' input, and
  // the next step's state (o, or z where the family feeds back the pre-norm output).
  struct StepOutput {
    torch::Tensor o, state;
  };
  StepOutput step_output(const torch::Tensor& u, const torch::Tensor& attention, const torch::Tensor& gate);
  torch::Tensor logits(const torch::Tensor& o) const;  // the target's LM head in its dtype, as fp32 [.., V]
  template <typename Visit>
  void unroll(const HeadInputs& in, Visit&& visit);  // visit(k, o) after each TTT step
  const MtpLayout& layout() const { return layout_; }
  // Tokens ids [B, n] and states [B, n, H] written at cache slots [start, start + n) at RoPE
  // positions pos0..; returns their outputs.
  StepOutput cached_step(DraftCache& cache, const torch::Tensor& state, const torch::Tensor& ids, std::int64_t start,
                         std::int64_t pos0);

  HeadConfig cfg_;
  MtpLayout layout_;
  torch::Tensor embedding_, lm_head_;  // the target's, frozen, not registered
  torch::Tensor inv_freq_;
};

}  // namespace eagle::head
