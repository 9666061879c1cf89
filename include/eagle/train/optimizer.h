// AdamW over the head's fp32 master weights, built for CUDA graphs: global-norm clipping, the
// non-finite check and the update all stay on the device (LibTorch's fused AdamW with a tensor
// learning rate and a found_inf flag), so a step never waits for the host.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include <torch/torch.h>

namespace eagle::train {

struct AdamWConfig {
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8, weight_decay = 0.0;
  double max_grad_norm = 0.0;  // 0: no clipping
};

class AdamW {
 public:
  AdamW(std::vector<std::pair<std::string, torch::Tensor>> named_params, AdamWConfig cfg);

  // Sets every gradient to zero in place (the tensors stay allocated, as CUDA graphs need).
  void zero_grad();
  // Writes the learning rate of the next step into the device tensor (no synchronisation).
  void set_lr(double lr);
  // Clips, checks loss and gradients for non-finite values, and updates unless one was found, all
  // on the device. `loss` is the step's loss (any shape; its sum is checked).
  void step(const torch::Tensor& loss);

  // Device tensors read at log time.
  const torch::Tensor& last_grad_norm() const { return grad_norm_; }  // before clipping
  const torch::Tensor& nonfinite_steps() const { return nonfinite_steps_; }
  const torch::Tensor& first_nonfinite_step() const { return first_nonfinite_step_; }  // -1: none

  // Optimizer state for checkpoints: "<param>.exp_avg", "<param>.exp_avg_sq", "<param>.step" and
  // the counters; load_state checks names and shapes.
  std::map<std::string, torch::Tensor> state() const;
  void load_state(const std::map<std::string, torch::Tensor>& state, const std::string& source);

 private:
  std::vector<std::pair<std::string, torch::Tensor>> params_;
  std::vector<torch::Tensor> tensors_, exp_avg_, exp_avg_sq_, steps_;
  AdamWConfig cfg_;
  torch::Tensor lr_, grad_norm_, found_inf_, nonfinite_steps_, first_nonfinite_step_, step_count_;
};

}  // namespace eagle::train
