// The forward of one micro-batch (see micro_batch.h).
#include "eagle/train/micro_batch.h"

#include "eagle/device/runtime.h"
#include "eagle/train/loss_metrics.h"
#include "eagle/util/error.h"

namespace eagle::train {

torch::Tensor denominator_tensor(const std::vector<std::int64_t>& denominators) {
  return torch::tensor(std::vector<float>(denominators.begin(), denominators.end()), torch::kFloat32);
}

head::HeadStepOutput forward_micro_batch(const features::FeatureSource& features, head::DraftHead& head,
                                         const features::BatchTensors& batch, const torch::Tensor& denominators,
                                         bool bf16) {
  device::AutocastGuard autocast(batch.input_ids.device(), bf16);
  return head.train_step_forward(features.head_inputs(batch), denominators);
}

void train_micro_batch(const features::FeatureSource& features, head::DraftHead& head,
                       const features::BatchTensors& batch, const torch::Tensor& denominators, bool bf16,
                       torch::Tensor& loss_sum, torch::Tensor& metric_sums) {
  auto out = forward_micro_batch(features, head, batch, denominators, bf16);
  out.loss.backward();
  loss_sum.add_(out.loss.detach());
  metric_sums.add_(out.metric_sums);
}

void MicroBatchRunner::run(device::CudaGraphCache& graphs, const data::Batch& batch, const torch::Tensor& denominators,
                           torch::Tensor& loss_sum, torch::Tensor& metric_sums, const torch::Tensor& extra) {
  const data::Shape shape{batch.rows, batch.length};
  auto it = buffers_.find(shape);
  if (it == buffers_.end())
    it = buffers_
             .emplace(shape, ShapeBuffers{source_.allocate(batch, max_segments_),
                                          torch::zeros({denominators.numel()}, loss_sum.options())})
             .first;
  ShapeBuffers& buf = it->second;
  source_.fill(batch, buf.batch);
  buf.denominators.copy_(denominators, /*non_blocking=*/loss_sum.is_cuda());
  if (extra.defined()) {
    // One buffer per shape (its size is the shape's), made before the shape's graph is captured.
    if (!buf.batch.extra.defined())
      buf.batch.extra = torch::zeros(extra.sizes(), buf.batch.input_ids.options().dtype(extra.scalar_type()));
    EAGLE_CHECK(buf.batch.extra.sizes() == extra.sizes(),
                Error(ErrorKind::internal, "a batch's extra head input does not fit its shape's buffer")
                    .expected(c10::str(buf.batch.extra.sizes()))
                    .found(c10::str(extra.sizes())));
    const bool cuda = buf.batch.extra.is_cuda();
    buf.batch.extra.copy_(cuda ? extra.pin_memory() : extra, /*non_blocking=*/cuda);
  }
  graphs.run(shape,
             [&] { train_micro_batch(source_, head_, buf.batch, buf.denominators, bf16_, loss_sum, metric_sums); });
}

StepCounts StepCounts::of(const std::vector<data::Batch>& micro_batches, std::vector<std::int64_t> denominators) {
  StepCounts c{std::move(denominators)};
  for (const auto& batch : micro_batches) {
    c.real_tokens += batch.real_tokens;
    c.computed_tokens += batch.computed_tokens();
  }
  return c;
}

std::vector<std::int64_t> StepCounts::to_vector() const {
  auto v = denominators;
  v.push_back(real_tokens);
  v.push_back(computed_tokens);
  return v;
}

StepCounts StepCounts::from_vector(const std::vector<std::int64_t>& values) {
  const auto steps = values.size() - 2;
  return StepCounts{
      {values.begin(), values.begin() + static_cast<std::ptrdiff_t>(steps)}, values[steps], values[steps + 1]};
}

}  // namespace eagle::train
