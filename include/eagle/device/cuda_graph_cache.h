// Runs a fixed-shape step function either eagerly or as a CUDA graph, one graph per shape (a batch's
// rows x padded length) plus one for a shape-independent part (the trainer's optimizer update). The
// caller ranks the shapes (the trainer: the most frequent in its epoch plan; dump-features: the
// largest; generate: the shortest decode steps); the first max_cuda_graphs are graphed while the
// device has memory to spare. On CPU, and for the other shapes, everything runs eagerly.
#pragma once

#include <algorithm>
#include <compare>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <vector>

#include <torch/torch.h>

#include "eagle/data/plan.h"

namespace eagle::device {

// The key of the shape-independent part, e.g. the optimizer update (no batch has zero rows).
inline constexpr data::Shape kOptimizerUpdate{0, 0};

// The shapes worth a graph: the at most `count` most frequent (ties: more tokens first, then the
// smaller shape), most frequent first.
std::vector<data::Shape> most_frequent_shapes(const std::map<data::Shape, std::int64_t>& shape_counts,
                                              std::int64_t count);

// The decoding steps of `rows` rows over a cache of `capacity` columns, as graphed steps read them:
// key lengths step, 2 step, .. rounded up, the last capped at capacity; the shortest first (every
// sequence passes them, so they get the graphs when there are too few).
std::vector<data::Shape> length_ladder(std::int64_t rows, std::int64_t capacity, std::int64_t step);
// The ladder's step of the graphed decoding steps (generate, batched acceptance): a graphed step reads a
// multiple of this many cache columns.
inline constexpr std::int64_t kGraphColumns = 256;
// key_len rounded up to the ladder's next rung, capped at capacity (the columns a graphed step reads).
inline std::int64_t graph_key_len(std::int64_t key_len, std::int64_t capacity) {
  return std::min((key_len + kGraphColumns - 1) / kGraphColumns * kGraphColumns, capacity);
}

class CudaGraphCache {
 public:
  // priority: every shape the caller will run, the most worth a graph first; the first
  // max_cuda_graphs of them are graphed on a GPU (and kOptimizerUpdate when max_cuda_graphs > 0).
  // area: the caller's log area.
  CudaGraphCache(torch::Device device, std::int64_t max_cuda_graphs, std::vector<data::Shape> priority,
                 const char* area);
  ~CudaGraphCache();

  // Whether this shape is (or will be) replayed from a CUDA graph.
  bool graphed(const data::Shape& key) const;
  std::int64_t graphed_count() const;   // batch shapes chosen for graphs
  std::int64_t eager_count() const;     // batch shapes that run eagerly
  std::int64_t captured_count() const;  // graphs captured so far, the optimizer update's included
  std::int64_t replay_count() const;    // graph replays so far

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
  const char* area_;
  std::unique_ptr<Graphs> graphs_;
};

}  // namespace eagle::device
