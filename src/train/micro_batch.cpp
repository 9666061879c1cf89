// The forward of one micro-batch (see micro_batch.h).
#include "eagle/train/micro_batch.h"

#include "eagle/device/runtime.h"
#include "eagle/train/loss_metrics.h"

namespace eagle::train {

std::vector<std::int64_t> loss_denominators(const std::vector<data::Batch>& batches, std::int64_t steps) {
  std::vector<std::int64_t> out(static_cast<std::size_t>(steps), 0);
  for (const auto& b : batches) {
    auto counts = count_loss_positions(b, steps);
    for (std::size_t k = 0; k < out.size(); ++k) out[k] += counts[k];
  }
  return out;
}

torch::Tensor denominator_tensor(const std::vector<std::int64_t>& denominators) {
  return torch::tensor(std::vector<float>(denominators.begin(), denominators.end()), torch::kFloat32);
}

model::HeadStepOutput forward_micro_batch(const features::FeatureSource& features, model::DraftHead& head,
                                          const features::BatchTensors& batch, const torch::Tensor& denominators, bool bf16) {
  device::AutocastGuard autocast(batch.input_ids.device(), bf16);
  return head.train_step_forward(features.head_inputs(batch), denominators);
}

void train_micro_batch(const features::FeatureSource& features, model::DraftHead& head, const features::BatchTensors& batch,
                       const torch::Tensor& denominators, bool bf16, torch::Tensor& loss_sum,
                       torch::Tensor& metric_sums) {
  auto out = forward_micro_batch(features, head, batch, denominators, bf16);
  out.loss.backward();
  loss_sum.add_(out.loss.detach());
  metric_sums.add_(out.metric_sums);
}

}  // namespace eagle::train
