// Valid masks, soft cross-entropy and metric sums of the draft heads (see loss_metrics.h).
#include "eagle/train/loss_metrics.h"

#include <fmt/format.h>

#include "eagle/util/error.h"

namespace eagle::train {

std::vector<std::int64_t> count_loss_positions(const data::Batch& batch, std::int64_t steps) {
  std::vector<std::int64_t> counts(static_cast<std::size_t>(steps), 0);
  for (std::int64_t r = 0; r < batch.rows; ++r) {
    for (std::int64_t k = 0; k < steps; ++k) {
      for (std::int64_t t = 0; t + k + 2 < batch.length; ++t) {
        auto doc = batch.document_ids[batch.at(r, t)];
        auto u = batch.at(r, t + k + 2);
        if (doc >= 0 && batch.document_ids[u] == doc && batch.loss_mask[u]) ++counts[static_cast<std::size_t>(k)];
      }
    }
  }
  return counts;
}

torch::Tensor shift_left(const torch::Tensor& x, std::int64_t n, double fill) {
  const auto len = x.size(1);
  auto sizes = x.sizes().vec();
  sizes[1] = std::min(n, len);
  auto pad = torch::full(sizes, fill, x.options());
  if (n >= len) return pad;
  return torch::cat({x.narrow(1, n, len - n), pad}, 1);
}

torch::Tensor in_document_mask(const torch::Tensor& loss_mask, const torch::Tensor& document_ids, std::int64_t step) {
  auto doc_ahead = shift_left(document_ids, step + 2, -2.0);
  auto mask_ahead = shift_left(loss_mask.to(torch::kBool), step + 2, 0.0);
  return (doc_ahead == document_ids) & (document_ids >= 0) & mask_ahead;
}

torch::Tensor soft_cross_entropy(const torch::Tensor& logits, const torch::Tensor& teacher_probs) {
  auto logp = torch::log_softmax(logits.to(torch::kFloat32), -1);
  return -(teacher_probs.to(torch::kFloat32) * logp).sum(-1);
}

torch::Tensor metric_row(const torch::Tensor& valid, const torch::Tensor& correct, const torch::Tensor& prefix_ok,
                         const torch::Tensor& position_loss) {
  auto v = valid.to(torch::kFloat32);
  auto c = (valid & correct).to(torch::kFloat32);
  auto cv = (valid & prefix_ok).to(torch::kFloat32);
  auto cc = (valid & prefix_ok & correct).to(torch::kFloat32);
  auto loss = torch::where(valid, position_loss.detach().to(torch::kFloat32), torch::zeros_like(v));
  return torch::stack({v.sum(), c.sum(), cv.sum(), cc.sum(), loss.sum()});
}

MetricSummary summarize_metrics(const torch::Tensor& sums) {
  EAGLE_CHECK(sums.dim() == 2 && sums.size(1) == kMetricColumns,
              Error(ErrorKind::internal, "metric sums have the wrong shape")
                  .expected(fmt::format("[K, {}]", static_cast<std::int64_t>(kMetricColumns)))
                  .found(fmt::format("{} dimensions, {} columns", sums.dim(), sums.dim() == 2 ? sums.size(1) : 0)));
  auto s = sums.detach().to(torch::kCPU, torch::kFloat64).contiguous();
  const auto* p = s.data_ptr<double>();
  auto at = [&](std::int64_t k, std::int64_t c) { return p[k * kMetricColumns + c]; };
  auto ratio = [](double a, double b) { return b > 0 ? a / b : 0.0; };
  MetricSummary m;
  double chain = 1.0;
  for (std::int64_t k = 0; k < s.size(0); ++k) {
    m.acc.push_back(ratio(at(k, kCorrect), at(k, kValid)));
    m.cacc.push_back(ratio(at(k, kCondCorrect), at(k, kCondValid)));
    m.loss.push_back(ratio(at(k, kLossSum), at(k, kValid)));
    chain *= m.cacc.back();
    m.tau += chain;
  }
  m.positions = s.size(0) > 0 ? static_cast<std::int64_t>(at(0, kValid)) : 0;
  return m;
}

}  // namespace eagle::train
