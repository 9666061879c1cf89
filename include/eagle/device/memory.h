// The memory a step may still use on a device: CUDA's free memory (cudaMemGetInfo), or on CPU the
// kernel's estimate of the memory available without swapping (MemAvailable in /proc/meminfo).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include <torch/torch.h>

namespace eagle::device {

struct AvailableMemory {
  std::uint64_t bytes = 0;
  std::string source;  // "CUDA free memory" or "MemAvailable (/proc/meminfo)"
};

// Nothing where it cannot be known (no /proc/meminfo, a CUDA device in a build without CUDA).
std::optional<AvailableMemory> available_memory(torch::Device device);

}  // namespace eagle::device
