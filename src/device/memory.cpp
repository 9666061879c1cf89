// Free and peak device memory.
#include "eagle/device/memory.h"

#include <sys/resource.h>

#include <fstream>
#include <sstream>

#ifdef EAGLE_WITH_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
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

std::optional<std::uint64_t> peak_memory_bytes(torch::Device device) {
  if (device.is_cuda()) {
#ifdef EAGLE_WITH_CUDA
    auto index = device.has_index() ? device.index() : c10::cuda::current_device();
    auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(index);
    return static_cast<std::uint64_t>(
        stats.allocated_bytes[static_cast<std::size_t>(c10::CachingAllocator::StatType::AGGREGATE)].peak);
#else
    return std::nullopt;
#endif
  }
  rusage usage{};
  if (getrusage(RUSAGE_SELF, &usage) != 0) return std::nullopt;
  return static_cast<std::uint64_t>(usage.ru_maxrss) * 1024;  // Linux reports KiB
}

}  // namespace eagle::device
