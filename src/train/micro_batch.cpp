// The forward of one micro-batch (see micro_batch.h).
#include "eagle/train/micro_batch.h"

#include "eagle/device/runtime.h"
#include "eagle/head/dflash_attention.h"
#include "eagle/train/loss_metrics.h"
#include "eagle/util/error.h"

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

DFlashAnchors dflash_batch_anchors(const data::Batch& b, const head::HeadConfig& cfg, at::Generator generator) {
  const auto mask = torch::from_blob(const_cast<std::uint8_t*>(b.loss_mask.data()), {b.rows, b.length},
                                     torch::TensorOptions().dtype(torch::kUInt8))
                        .to(torch::kBool);
  const auto docs = torch::from_blob(const_cast<std::int32_t*>(b.document_ids.data()), {b.rows, b.length},
                                     torch::TensorOptions().dtype(torch::kInt32))
                        .to(torch::kInt64);
  auto anchors = head::dflash_sample_anchors(mask, docs, cfg.dflash_block_size, cfg.dflash_num_anchors, generator);
  auto slots = head::dflash_count_slots(mask, docs, anchors, cfg.dflash_block_size);
  return {std::move(anchors), std::move(slots)};
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
                           torch::Tensor& loss_sum, torch::Tensor& metric_sums, const torch::Tensor& anchors) {
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
  if (anchors.defined()) {
    // One buffer per shape (its N is the shape's), made before the shape's graph is captured.
    if (!buf.batch.anchors.defined())
      buf.batch.anchors = torch::zeros(anchors.sizes(), buf.batch.input_ids.options().dtype(torch::kInt64));
    EAGLE_CHECK(buf.batch.anchors.sizes() == anchors.sizes(),
                Error(ErrorKind::internal, "a batch's DFlash anchors do not fit its shape's buffer")
                    .expected(c10::str(buf.batch.anchors.sizes()))
                    .found(c10::str(anchors.sizes())));
    const bool cuda = buf.batch.anchors.is_cuda();
    buf.batch.anchors.copy_(cuda ? anchors.pin_memory() : anchors, /*non_blocking=*/cuda);
  }
  graphs.run(shape,
             [&] { train_micro_batch(source_, head_, buf.batch, buf.denominators, bf16_, loss_sum, metric_sums); });
}

StepCounts StepCounts::of(const std::vector<data::Batch>& micro_batches, std::int64_t steps) {
  StepCounts c{loss_denominators(micro_batches, steps)};
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
