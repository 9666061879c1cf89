// The memory a step may still use on a device: CUDA's free memory (cudaMemGetInfo), or on CPU the
// kernel's estimate of the memory available without swapping (MemAvailable in /proc/meminfo); and
// the peak a run has used.
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

// The most memory the run has held so far, in bytes: on CUDA the caching allocator's peak of
// allocated bytes on `device` (host-side counters: no device sync); on CPU the process's peak
// resident set (getrusage ru_maxrss). Nothing where it cannot be known.
std::optional<std::uint64_t> peak_memory_bytes(torch::Device device);

}  // namespace eagle::device
