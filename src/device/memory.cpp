// Free device memory (see memory.h).
#include "eagle/device/memory.h"

#include <fstream>
#include <sstream>

#ifdef EAGLE_WITH_CUDA
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <cuda_runtime_api.h>
#endif

namespace eagle::device {

std::optional<AvailableMemory> available_memory(torch::Device device) {
  if (device.is_cuda()) {
#ifdef EAGLE_WITH_CUDA
    std::size_t free = 0, total = 0;
    c10::cuda::CUDAGuard guard(device.has_index() ? device.index() : c10::cuda::current_device());
    C10_CUDA_CHECK(cudaMemGetInfo(&free, &total));
    return AvailableMemory{free, "CUDA free memory"};
#else
    return std::nullopt;
#endif
  }
  std::ifstream f("/proc/meminfo");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("MemAvailable:", 0) != 0) continue;
    std::istringstream in(line.substr(13));
    std::uint64_t kib = 0;
    if (in >> kib) return AvailableMemory{kib * 1024, "MemAvailable (/proc/meminfo)"};
  }
  return std::nullopt;
}

}  // namespace eagle::device
