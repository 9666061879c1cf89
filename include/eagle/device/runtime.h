// The process's compute settings, shared by every subcommand that runs tensors: the device, the
// CPU threads and seeds, and bf16 autocast around the head's forward.
#pragma once

#include <string>

#include <torch/torch.h>

#include "eagle/config/options.h"

namespace eagle::device {

// "auto" -> cuda when available, else cpu; "cuda" without a device -> Error(usage).
torch::Device resolve_device(const std::string& device);
// Fixes intra-op threads (0: the machine's cores) and seeds LibTorch's generators.
void configure_runtime(const config::Options& opts);

// Enables autocast to bf16 on the device for its lifetime when `enabled`.
class AutocastGuard {
 public:
  AutocastGuard(torch::Device device, bool enabled);
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  c10::DeviceType type_;
  bool enabled_, previous_;
  at::ScalarType previous_dtype_;
};

}  // namespace eagle::device
