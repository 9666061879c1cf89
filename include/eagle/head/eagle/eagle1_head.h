// The EAGLE-1 draft head (EAGLE.md "EAGLE-1"): FC over [embedding; final feature] (2H -> H), one
// decoder layer without input norm, no final norm; it predicts the next feature and is read out
// through the target's frozen LM head. Parameter names are the vLLM EAGLE-1 names (fc, layers.0.*).
#pragma once

#include "eagle/head/head.h"
#include "eagle/head/layer.h"

namespace eagle::head {

class Eagle1Head : public torch::nn::Module, public DraftHead {
 public:
  explicit Eagle1Head(HeadConfig cfg);

  const HeadConfig& config() const override { return cfg_; }
  torch::nn::Module& module() override { return *this; }
  // One step (K = 1): SmoothL1(f_hat_t, f_{t+1}) averaged over features, times eagle1_feature_weight,
  // plus eagle1_token_weight x soft cross-entropy of lm_head(f_hat_t) against lm_head(f_{t+1}), each
  // summed over valid positions and divided by denominators[0].
  HeadStepOutput train_step_forward(const HeadInputs& in, const torch::Tensor& denominators) override;
  DraftCache new_cache(std::int64_t batch, std::int64_t capacity) const override;
  torch::Tensor draft(DraftCache& cache, const torch::Tensor& features, const torch::Tensor& next_ids,
                      std::int64_t draft_len) override;
  void set_target_weights(const torch::Tensor& embedding, const torch::Tensor& lm_head) override;
  void init_from_target(const torch::Tensor& embedding, const torch::Tensor& lm_head) override {
    set_target_weights(embedding, lm_head);
  }
  target::TeacherSpec teacher_spec() const override { return {}; }

  // The predicted next features f_hat [B, T, H] for the target features f [B, T, H].
  torch::Tensor predict_features(const HeadInputs& in);

  torch::nn::Linear fc{nullptr};
  torch::nn::ModuleList layers{nullptr};
  HeadLayer layer{nullptr};  // layers[0]

 private:
  torch::Tensor embed(const torch::Tensor& ids) const;
  torch::Tensor logits(const torch::Tensor& features) const;  // target LM head, [.., V] fp32

  HeadConfig cfg_;
  torch::Tensor embedding_, lm_head_;  // the target's, frozen, not registered
  torch::Tensor inv_freq_;
};

}  // namespace eagle::head
