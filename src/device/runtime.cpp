// Device, threads, seeds, dtypes and autocast (see runtime.h).
#include "eagle/device/runtime.h"

#include <ATen/autocast_mode.h>
#include <fmt/format.h>

#include <thread>

#include "eagle/util/error.h"
#include "eagle/util/log.h"

namespace eagle::device {

torch::Device resolve_device(const std::string& device) {
  if (device == "auto")
    return torch::cuda::is_available() ? torch::Device(torch::kCUDA, 0) : torch::Device(torch::kCPU);
  if (device == "cpu") return torch::kCPU;
  EAGLE_CHECK(torch::cuda::is_available(),
              Error(ErrorKind::usage, "no CUDA device is available").place("--device").found(device)
                  .hint("use --device cpu or auto"));
  if (device == "cuda") return torch::Device(torch::kCUDA, 0);
  auto index = std::stoi(device.substr(5));
  EAGLE_CHECK(index < static_cast<int>(torch::cuda::device_count()),
              Error(ErrorKind::usage, "no such CUDA device").place("--device").found(device)
                  .expected(fmt::format("cuda:0 .. cuda:{}", torch::cuda::device_count() - 1)));
  return torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(index));
}

void configure_runtime(const config::Options& opts) {
  auto threads =
      opts.num_threads > 0 ? opts.num_threads : static_cast<std::int64_t>(std::thread::hardware_concurrency());
  torch::set_num_threads(static_cast<int>(std::max<std::int64_t>(1, threads)));
  torch::manual_seed(static_cast<std::uint64_t>(opts.seed));
  log::debug("train", "intra-op threads: {}, seed: {}", torch::get_num_threads(), opts.seed);
}

AutocastGuard::AutocastGuard(torch::Device device, bool enabled) : type_(device.type()), enabled_(enabled) {
  previous_ = at::autocast::is_autocast_enabled(type_);
  previous_dtype_ = at::autocast::get_autocast_dtype(type_);
  if (!enabled_) return;
  at::autocast::set_autocast_enabled(type_, true);
  at::autocast::set_autocast_dtype(type_, at::kBFloat16);
}

AutocastGuard::~AutocastGuard() {
  if (!enabled_) return;
  at::autocast::set_autocast_enabled(type_, previous_);
  at::autocast::set_autocast_dtype(type_, previous_dtype_);
  at::autocast::clear_cache();
}

}  // namespace eagle::device
