// CUDA-graph cache of step functions per batch shape (see cuda_graph_cache.h).
#include "eagle/train/cuda_graph_cache.h"

#include <algorithm>

#include "eagle/util/log.h"
#include "eagle/util/error.h"

#ifdef EAGLE_WITH_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace eagle::train {

#ifdef EAGLE_WITH_CUDA
struct CudaGraphCache::Graphs {
  explicit Graphs(torch::Device device)
      : stream(c10::cuda::getStreamFromPool(/*isHighPriority=*/false, device.index() < 0 ? 0 : device.index())),
        pool(at::cuda::graph_pool_handle()) {}
  c10::cuda::CUDAStream stream;
  at::cuda::MempoolId_t pool;
  std::map<data::Shape, std::unique_ptr<at::cuda::CUDAGraph>> graphs;
};
#else
struct CudaGraphCache::Graphs {};
#endif

CudaGraphCache::CudaGraphCache(torch::Device device, std::int64_t max_cuda_graphs, std::vector<data::Shape> shapes)
    : device_(device) {
  std::sort(shapes.begin(), shapes.end(), [](const data::Shape& a, const data::Shape& b) {
    return a.rows * a.length > b.rows * b.length || (a.rows * a.length == b.rows * b.length && a < b);
  });
  shapes.erase(std::unique(shapes.begin(), shapes.end()), shapes.end());
  const bool cuda = device.is_cuda();
#ifndef EAGLE_WITH_CUDA
  EAGLE_CHECK(!cuda, Error(ErrorKind::usage, "this build has no CUDA support").place("--device")
                         .hint("rebuild with -DEAGLE_WITH_CUDA=ON or use --device cpu"));
#endif
  std::int64_t n = cuda ? std::min<std::int64_t>(max_cuda_graphs, static_cast<std::int64_t>(shapes.size())) : 0;
  graphed_shapes_.assign(shapes.begin(), shapes.begin() + n);
  eager_shapes_ = static_cast<std::int64_t>(shapes.size()) - n;
  if (cuda && max_cuda_graphs > 0) graphed_shapes_.push_back(kOptimizerUpdate);  // the optimizer update
#ifdef EAGLE_WITH_CUDA
  if (cuda) graphs_ = std::make_unique<Graphs>(device);
#endif
  log::info("train", "batch shapes: {} possible; CUDA graphs: {} shapes captured, {} eager{}", shapes.size(), n,
            eager_shapes_, cuda ? "" : " (CPU: everything runs eagerly)");
}

CudaGraphCache::~CudaGraphCache() = default;

bool CudaGraphCache::graphed(const data::Shape& key) const {
  return std::find(graphed_shapes_.begin(), graphed_shapes_.end(), key) != graphed_shapes_.end();
}
std::int64_t CudaGraphCache::graphed_count() const {
  return static_cast<std::int64_t>(std::count_if(graphed_shapes_.begin(), graphed_shapes_.end(),
                                                 [](const data::Shape& k) { return k.rows > 0; }));
}
std::int64_t CudaGraphCache::eager_count() const { return eager_shapes_; }

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
    if (call == 0) {
      fn();  // warm-up: lazy initialisation (cuBLAS handles, allocator) happens outside capture
    } else {
      auto it = g.graphs.find(key);
      if (it == g.graphs.end()) {
        auto graph = std::make_unique<at::cuda::CUDAGraph>();
        graph->capture_begin(g.pool);
        fn();
        graph->capture_end();
        it = g.graphs.emplace(key, std::move(graph)).first;
        log::debug("train", "captured a CUDA graph for shape {}x{}", key.rows, key.length);
      }
      it->second->replay();
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

}  // namespace eagle::train
