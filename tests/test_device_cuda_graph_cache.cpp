// The per-shape step cache: accounting on CPU, and on GPU that captured graphs replay the same
// forward+backward+update as eager execution.
#include <catch2/catch.hpp>
#include <torch/torch.h>

#include "eagle/device/cuda_graph_cache.h"
#include "eagle/train/optimizer.h"

using eagle::data::Shape;
using eagle::device::CudaGraphCache;

TEST_CASE("on CPU every shape runs eagerly and nothing is captured", "[device]") {
  CudaGraphCache cache(torch::kCPU, 8, {{4, 128}, {4, 256}, {2, 512}}, "test");
  CHECK(cache.graphed_count() == 0);
  CHECK(cache.eager_count() == 3);
  int calls = 0;
  for (int i = 0; i < 3; ++i) cache.run({4, 128}, [&] { ++calls; });
  CHECK(calls == 3);
  CHECK(cache.captured_count() == 0);
  CHECK(cache.replay_count() == 0);
}

TEST_CASE("the most frequent shapes of the epoch plan are the ones graphed", "[device]") {
  const std::map<Shape, std::int64_t> counts{{{4, 128}, 5}, {{4, 256}, 9}, {{2, 512}, 5}, {{8, 64}, 1}};
  // 9 batches of 4x256 first; 2x512 and 4x128 tie on count (5): the one with more tokens first.
  CHECK(eagle::device::most_frequent_shapes(counts, 3) == std::vector<Shape>{{4, 256}, {2, 512}, {4, 128}});
  CHECK(eagle::device::most_frequent_shapes(counts, 1) == std::vector<Shape>{{4, 256}});
  CHECK(eagle::device::most_frequent_shapes(counts, 0).empty());
  CHECK(eagle::device::most_frequent_shapes(counts, 9).size() == 4);
}

namespace {

// Trains a linear model for `steps` steps over alternating shapes, graphed or not; returns weights.
torch::Tensor train_linear(torch::Device device, std::int64_t max_graphs, int steps) {
  torch::manual_seed(0);
  auto w = torch::randn({16, 4}, device).requires_grad_(true);
  eagle::train::AdamW opt({{"w", w}}, eagle::train::AdamWConfig{0.9, 0.95, 1e-8, 0.0, 1.0});
  std::vector<Shape> shapes{{8, 16}, {4, 32}};
  CudaGraphCache cache(device, max_graphs, shapes, "test");
  std::map<Shape, torch::Tensor> inputs;
  for (auto s : shapes) inputs[s] = torch::zeros({s.rows * s.length, 16}, device);
  auto loss_acc = torch::zeros({}, device);
  for (int step = 0; step < steps; ++step) {
    Shape s = shapes[step % 2];
    inputs[s].copy_(torch::linspace(-1, 1, s.rows * s.length * 16).view({-1, 16}).to(device) * (step + 1));
    opt.zero_grad();
    opt.set_lr(1e-2);
    cache.run(s, [&] {
      auto loss = torch::matmul(inputs[s], w).pow(2).mean();
      loss.backward();
      loss_acc.add_(loss.detach());
    });
    cache.run({0, 0}, [&] { opt.step(loss_acc); });
  }
  cache.synchronize();
  return w.detach().cpu();
}

}  // namespace

TEST_CASE("CUDA graphs replay exactly what eager execution computes", "[device][gpu]") {
  auto eager = train_linear(torch::kCUDA, 0, 8);
  auto graphed = train_linear(torch::kCUDA, 8, 8);
  CHECK(torch::allclose(eager, graphed, 1e-5, 1e-6));
  auto cpu = train_linear(torch::kCPU, 0, 8);
  CHECK(torch::allclose(eager, cpu, 1e-4, 1e-5));
}
