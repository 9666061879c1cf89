// Host-side loss denominators and metric summaries of the draft heads (EAGLE.md "Which positions
// count", "Metrics"); the device-side pieces are in head/loss.h.
#pragma once

#include <chrono>
#include <cstdint>
#include <vector>

#include <torch/torch.h>

#include "eagle/data/batch.h"
#include "eagle/head/loss.h"
#include "eagle/io/step_stats.h"

namespace eagle::train {

struct MetricSummary {
  std::vector<double> acc, cacc, loss;  // per step: acc_k, cacc_k, mean loss over valid positions
  double tau = 1.0;                     // 1 + sum_k prod_{j<=k} cacc_j
  std::int64_t positions = 0;           // valid positions at step 0
};

// Reads summed metric tensors [K, head::kMetricColumns] (one host copy); ratios with empty
// denominators give 0.
MetricSummary summarize_metrics(const torch::Tensor& sums);

// The sums of a logging window: device-side over its steps (read only at log time), and its
// host-side counts.
struct LogWindow {
  torch::Tensor loss, metrics, grad_norm;  // [] fp32, [K, head::kMetricColumns] fp32, [] fp32
  io::ThroughputWindow counts;
  double side_seconds = 0;  // evaluations and checkpoints inside the window, not training time
  std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();

  LogWindow(std::int64_t steps, torch::Device device);
  double seconds() const;  // training time since start (side work excluded)
  void reset();
};

}  // namespace eagle::train
