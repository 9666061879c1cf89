// Runs the parts of a training step either eagerly or as CUDA graphs, one graph per batch shape
// (rows x padded length) plus one for the shape-independent optimizer update. On CPU, or for
// shapes beyond max_cuda_graphs, everything runs eagerly.
#pragma once

#include <compare>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <vector>

#include <torch/torch.h>

#include "eagle/data/plan.h"

namespace eagle::train {

// The key of the shape-independent optimizer update (no batch has zero rows).
inline constexpr data::Shape kOptimizerUpdate{0, 0};

class CudaGraphCache {
 public:
  // shapes: every batch shape the sampler can produce; the first max_cuda_graphs of them by
  // computed tokens (largest first, so the memory pool is sized by the largest) are graphed.
  CudaGraphCache(torch::Device device, std::int64_t max_cuda_graphs, std::vector<data::Shape> shapes);
  ~CudaGraphCache();

  // Whether this shape is (or will be) replayed from a CUDA graph.
  bool graphed(const data::Shape& key) const;
  std::int64_t graphed_count() const;
  std::int64_t eager_count() const;
  std::int64_t captured_count() const;

  // Runs fn for this shape. fn must read its inputs only from tensors whose storage stays fixed
  // for the shape (the caller copies each batch into them before calling run) and must not
  // synchronise with the host. For a graphed shape the first call runs eagerly (warm-up), the
  // second captures and replays, later ones replay.
  void run(const data::Shape& key, const std::function<void()>& fn);

  // The stream training work runs on (the current stream on CPU).
  void synchronize() const;

 private:
  struct Graphs;
  torch::Device device_;
  std::map<data::Shape, int> calls_;
  std::vector<data::Shape> graphed_shapes_;
  std::int64_t eager_shapes_ = 0;
  std::unique_ptr<Graphs> graphs_;
};

}  // namespace eagle::train
