// Host-side loss denominators and metric summaries (see loss_metrics.h).
#include "eagle/train/loss_metrics.h"

#include <fmt/format.h>

#include "eagle/util/error.h"

namespace eagle::train {

MetricSummary summarize_metrics(const torch::Tensor& sums) {
  EAGLE_CHECK(sums.dim() == 2 && sums.size(1) == head::kMetricColumns,
              Error(ErrorKind::internal, "metric sums have the wrong shape")
                  .expected(fmt::format("[K, {}]", static_cast<std::int64_t>(head::kMetricColumns)))
                  .found(fmt::format("{} dimensions, {} columns", sums.dim(), sums.dim() == 2 ? sums.size(1) : 0)));
  auto s = sums.detach().to(torch::kCPU, torch::kFloat64).contiguous();
  const auto* p = s.data_ptr<double>();
  auto at = [&](std::int64_t k, std::int64_t c) { return p[k * head::kMetricColumns + c]; };
  auto ratio = [](double a, double b) { return b > 0 ? a / b : 0.0; };
  MetricSummary m;
  double chain = 1.0;
  for (std::int64_t k = 0; k < s.size(0); ++k) {
    m.acc.push_back(ratio(at(k, head::kCorrect), at(k, head::kValid)));
    m.cacc.push_back(ratio(at(k, head::kCondCorrect), at(k, head::kCondValid)));
    m.loss.push_back(ratio(at(k, head::kLossSum), at(k, head::kValid)));
    chain *= m.cacc.back();
    m.tau += chain;
  }
  m.positions = s.size(0) > 0 ? static_cast<std::int64_t>(at(0, head::kValid)) : 0;
  return m;
}

LogWindow::LogWindow(std::int64_t steps, torch::Device device) {
  const auto f32 = torch::TensorOptions().dtype(torch::kFloat32).device(device);
  loss = torch::zeros({}, f32);
  metrics = torch::zeros({steps, head::kMetricColumns}, f32);
  grad_norm = torch::zeros({}, f32);
}

double LogWindow::seconds() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() - side_seconds;
}

void LogWindow::reset() {
  loss.zero_();
  metrics.zero_();
  grad_norm.zero_();
  counts = {};
  side_seconds = 0;
  start = std::chrono::steady_clock::now();
}

}  // namespace eagle::train
