// Runs the parts of a training step either eagerly or as CUDA graphs, one graph per batch shape
// (rows x padded length) plus one for the shape-independent optimizer update. The shapes that occur
// most often in the epoch plan are graphed, up to max_cuda_graphs and while the device has memory to
// spare; on CPU, and for the other shapes, everything runs eagerly.
#pragma once

#include <compare>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <vector>

#include <torch/torch.h>

#include "eagle/data/plan.h"

namespace eagle::device {

// The key of the shape-independent optimizer update (no batch has zero rows).
inline constexpr data::Shape kOptimizerUpdate{0, 0};

// The shapes worth a graph: the at most `count` most frequent (ties: more tokens first, then the
// smaller shape), most frequent first.
std::vector<data::Shape> most_frequent_shapes(const std::map<data::Shape, std::int64_t>& shape_counts,
                                              std::int64_t count);

class CudaGraphCache {
 public:
  // shape_counts: how many batches of each shape an epoch has (data::Sampler::shape_counts); the
  // max_cuda_graphs most frequent shapes are graphed (ties: more tokens first).
  CudaGraphCache(torch::Device device, std::int64_t max_cuda_graphs,
                 const std::map<data::Shape, std::int64_t>& shape_counts);
  ~CudaGraphCache();

  // Whether this shape is (or will be) replayed from a CUDA graph.
  bool graphed(const data::Shape& key) const;
  std::int64_t graphed_count() const;   // batch shapes chosen for graphs
  std::int64_t eager_count() const;     // batch shapes that run eagerly
  std::int64_t captured_count() const;  // graphs captured so far, the optimizer update's included
  std::int64_t replay_count() const;    // graph replays so far
  // Share of the epoch's batches whose shape is graphed, in [0, 1].
  double graphed_batch_fraction() const { return graphed_fraction_; }

  // Runs fn for this shape. fn must read its inputs only from tensors whose storage stays fixed
  // for the shape (the caller copies each batch into them before calling run) and must not
  // synchronise with the host. For a graphed shape the first call runs eagerly (warm-up: lazy
  // initialisation, the allocator's first blocks), the second releases the cached memory and
  // captures, and every call from the second on replays. On a GPU, warm-up and capture run with
  // CUDA's sync debug mode set to error and capture in global mode, so a host synchronisation in fn
  // fails loudly instead of breaking the graph.
  void run(const data::Shape& key, const std::function<void()>& fn);

  // Waits for the training work (no-op on CPU).
  void synchronize() const;

 private:
  struct Graphs;
  torch::Device device_;
  std::map<data::Shape, int> calls_;
  std::vector<data::Shape> graphed_shapes_;
  std::int64_t eager_shapes_ = 0;
  std::int64_t replays_ = 0;
  double graphed_fraction_ = 0;
  std::unique_ptr<Graphs> graphs_;
};

}  // namespace eagle::device
