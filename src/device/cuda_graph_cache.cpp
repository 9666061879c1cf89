// CUDA-graph cache of step functions per batch shape (see cuda_graph_cache.h).
#include "eagle/device/cuda_graph_cache.h"

#include <algorithm>

#include "eagle/util/error.h"
#include "eagle/util/log.h"

#ifdef EAGLE_WITH_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace eagle::device {

#ifdef EAGLE_WITH_CUDA
namespace {

// A shape is captured only while at least this share of the device's memory is free after the
// cached blocks are released; beyond it the shape runs eagerly (its warm-up memory is reused).
constexpr double kMinFreeFraction = 0.10;

// CUDA's sync debug mode at "error" while the step body runs: a host synchronisation in it (a
// value read back, a data-dependent shape) throws instead of silently breaking the capture.
class StrictSyncGuard {
 public:
  StrictSyncGuard() : previous_(c10::cuda::warning_state().get_sync_debug_mode()) {
    c10::cuda::warning_state().set_sync_debug_mode(c10::cuda::SyncDebugMode::L_ERROR);
  }
  ~StrictSyncGuard() { c10::cuda::warning_state().set_sync_debug_mode(previous_); }
  StrictSyncGuard(const StrictSyncGuard&) = delete;
  StrictSyncGuard& operator=(const StrictSyncGuard&) = delete;

 private:
  c10::cuda::SyncDebugMode previous_;
};

}  // namespace

// Allocations made on `stream` go to the graphs' private pool while it lives (what a capture does),
// so a shape's warm-up memory is the memory its capture reuses instead of a second copy.
class AllocateToPool {
 public:
  AllocateToPool(c10::DeviceIndex device, at::cuda::MempoolId_t pool, cudaStream_t stream)
      : device_(device), pool_(pool) {
    c10::cuda::CUDACachingAllocator::beginAllocateToPool(device, pool,
                                                         [stream](cudaStream_t s) { return s == stream; });
  }
  ~AllocateToPool() {
    c10::cuda::CUDACachingAllocator::endAllocateToPool(device_, pool_);
    c10::cuda::CUDACachingAllocator::releasePool(device_, pool_);  // the reference begin took
  }
  AllocateToPool(const AllocateToPool&) = delete;
  AllocateToPool& operator=(const AllocateToPool&) = delete;

 private:
  c10::DeviceIndex device_;
  at::cuda::MempoolId_t pool_;
};

struct CudaGraphCache::Graphs {
  explicit Graphs(torch::Device device)
      : index(device.index() < 0 ? 0 : device.index()),
        stream(c10::cuda::getStreamFromPool(/*isHighPriority=*/false, index)),
        pool(at::cuda::graph_pool_handle()) {
    c10::cuda::CUDACachingAllocator::createOrIncrefPool(index, pool);  // alive as long as the cache
  }
  ~Graphs() {
    graphs.clear();
    c10::cuda::CUDACachingAllocator::releasePool(index, pool);
  }
  c10::DeviceIndex index;
  c10::cuda::CUDAStream stream;
  at::cuda::MempoolId_t pool;  // one pool: graphs replay one at a time and keep no outputs in it
  std::map<data::Shape, std::unique_ptr<at::cuda::CUDAGraph>> graphs;
};
#else
struct CudaGraphCache::Graphs {};
#endif

std::vector<data::Shape> most_frequent_shapes(const std::map<data::Shape, std::int64_t>& shape_counts,
                                              std::int64_t count) {
  std::vector<std::pair<data::Shape, std::int64_t>> shapes(shape_counts.begin(), shape_counts.end());
  std::sort(shapes.begin(), shapes.end(), [](const auto& a, const auto& b) {
    const auto ta = a.first.rows * a.first.length, tb = b.first.rows * b.first.length;
    return a.second != b.second ? a.second > b.second : ta != tb ? ta > tb : a.first < b.first;
  });
  std::vector<data::Shape> out;
  for (const auto& [shape, n] : shapes)
    if (static_cast<std::int64_t>(out.size()) < count) out.push_back(shape);
  return out;
}

std::vector<data::Shape> length_ladder(std::int64_t rows, std::int64_t capacity, std::int64_t step) {
  std::vector<data::Shape> out;
  for (std::int64_t c = step; c < capacity + step; c += step) out.push_back({rows, std::min(c, capacity)});
  return out;
}

CudaGraphCache::CudaGraphCache(torch::Device device, std::int64_t max_cuda_graphs, std::vector<data::Shape> priority,
                               const char* area)
    : device_(device), area_(area) {
  const bool cuda = device.is_cuda();
#ifndef EAGLE_WITH_CUDA
  EAGLE_CHECK(!cuda, Error(ErrorKind::usage, "this build has no CUDA support")
                         .place("--device")
                         .hint("rebuild with -DEAGLE_WITH_CUDA=ON or use --device cpu"));
#endif
  const auto shapes = static_cast<std::int64_t>(priority.size());
  if (cuda) {
    graphed_shapes_ = std::move(priority);
    graphed_shapes_.resize(static_cast<std::size_t>(std::clamp<std::int64_t>(max_cuda_graphs, 0, shapes)));
  }
  const auto n = static_cast<std::int64_t>(graphed_shapes_.size());
  eager_shapes_ = shapes - n;
  if (cuda && max_cuda_graphs > 0) graphed_shapes_.push_back(kOptimizerUpdate);
#ifdef EAGLE_WITH_CUDA
  if (cuda) graphs_ = std::make_unique<Graphs>(device);
#endif
  log::info(area_, "batch shapes: {}; CUDA graphs: {} shapes, {} eager{}", shapes, n, eager_shapes_,
            cuda ? "" : " (CPU: everything runs eagerly)");
}

CudaGraphCache::~CudaGraphCache() = default;

bool CudaGraphCache::graphed(const data::Shape& key) const {
  return std::find(graphed_shapes_.begin(), graphed_shapes_.end(), key) != graphed_shapes_.end();
}
std::int64_t CudaGraphCache::graphed_count() const {
  return static_cast<std::int64_t>(
      std::count_if(graphed_shapes_.begin(), graphed_shapes_.end(), [](const data::Shape& k) { return k.rows > 0; }));
}
std::int64_t CudaGraphCache::eager_count() const { return eager_shapes_; }
std::int64_t CudaGraphCache::replay_count() const { return replays_; }

std::int64_t CudaGraphCache::captured_count() const {
#ifdef EAGLE_WITH_CUDA
  return graphs_ ? static_cast<std::int64_t>(graphs_->graphs.size()) : 0;
#else
  return 0;
#endif
}

void CudaGraphCache::run(const data::Shape& key, const std::function<void()>& fn) {
  if (!device_.is_cuda() || !graphed(key)) {
    fn();
    return;
  }
#ifdef EAGLE_WITH_CUDA
  int call = calls_[key]++;
  auto& g = *graphs_;
  // Training work runs on a side stream (required for capture; warm-up runs there too).
  auto current = c10::cuda::getCurrentCUDAStream(device_.index());
  at::cuda::CUDAEvent inputs_ready;
  inputs_ready.record(current);
  inputs_ready.block(g.stream);
  {
    c10::cuda::CUDAStreamGuard guard(g.stream);
    auto it = g.graphs.find(key);
    if (call == 0) {
      // Warm-up: lazy initialisation (cuBLAS handles and workspaces) happens outside capture, in
      // the graphs' pool.
      AllocateToPool to_pool(g.index, g.pool, g.stream.stream());
      StrictSyncGuard strict;
      fn();
    } else if (it == g.graphs.end()) {
      // As torch.cuda.graph does: wait for the device, then hand the cached blocks of eager work
      // back to the driver, so the graph's pool does not come on top of them.
      c10::cuda::device_synchronize();
      c10::cuda::CUDACachingAllocator::emptyCache();
      std::size_t free = 0, total = 0;
      C10_CUDA_CHECK(cudaMemGetInfo(&free, &total));
      if (static_cast<double>(free) < kMinFreeFraction * static_cast<double>(total)) {
        graphed_shapes_.erase(std::find(graphed_shapes_.begin(), graphed_shapes_.end(), key));
        ++eager_shapes_;
        log::info(area_, "shape {}x{} runs eagerly: {:.1f} of {:.1f} GiB free, under the {:.0f}% kept free", key.rows,
                  key.length, static_cast<double>(free) / (1 << 30), static_cast<double>(total) / (1 << 30),
                  100 * kMinFreeFraction);
        StrictSyncGuard strict;
        fn();
      } else {
        auto graph = std::make_unique<at::cuda::CUDAGraph>();
        graph->capture_begin(g.pool, cudaStreamCaptureModeGlobal);
        {
          StrictSyncGuard strict;
          fn();
        }
        graph->capture_end();
        it = g.graphs.emplace(key, std::move(graph)).first;
        log::info(area_, "captured a CUDA graph for shape {}x{}", key.rows, key.length);
      }
    }
    if (call > 0 && it != g.graphs.end()) {
      it->second->replay();
      ++replays_;
    }
  }
  at::cuda::CUDAEvent done;
  done.record(g.stream);
  done.block(current);
#endif
}

void CudaGraphCache::synchronize() const {
#ifdef EAGLE_WITH_CUDA
  if (device_.is_cuda()) c10::cuda::getCurrentCUDAStream(device_.index()).synchronize();
#endif
}

}  // namespace eagle::device
