// The peak of MFU (peak_flops.h): given, looked up, or measured.
#include "eagle/device/peak_flops.h"

#include <chrono>

#include <fmt/format.h>

#ifdef EAGLE_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>
#endif

namespace eagle::device {

namespace {

struct GpuPeak {
  const char* name;   // a substring of the device's name; the first row that matches is taken
  double bf16, fp32;  // dense TFLOP/s (no sparsity), the vendor's data sheet
};

// Longer names first where one contains another (H100 PCIe before H100).
constexpr GpuPeak kGpuPeaks[] = {
    {"GB200", 2500, 80},     {"B200", 2250, 80},          {"H200", 989, 67},       {"GH200", 989, 67},
    {"H100 PCIe", 756, 51},  {"H100 NVL", 835, 60},       {"H100", 989, 67},       {"H800", 989, 67},
    {"H20", 148, 44},        {"A100", 312, 19.5},         {"A800", 312, 19.5},     {"L40S", 362, 91.6},
    {"L40", 181, 90.5},      {"L4", 121, 30.3},           {"A10G", 70, 31.2},      {"A10", 125, 31.2},
    {"RTX 4090", 165, 82.6}, {"RTX 6000 Ada", 364, 91.1}, {"MI300X", 1307, 163.4},
};

std::string gpu_name(torch::Device device) {
#ifdef EAGLE_WITH_CUDA
  if (device.is_cuda()) return at::cuda::getDeviceProperties(device.has_index() ? device.index() : 0)->name;
#endif
  (void)device;
  return "";
}

void synchronize(torch::Device device) {
#ifdef EAGLE_WITH_CUDA
  if (device.is_cuda()) at::cuda::getCurrentCUDAStream(device.index()).synchronize();
#endif
  (void)device;
}

}  // namespace

std::optional<double> table_peak_tflops(const std::string& device_name, bool bf16) {
  for (const auto& g : kGpuPeaks)
    if (device_name.find(g.name) != std::string::npos) return bf16 ? g.bf16 : g.fp32;
  return std::nullopt;
}

double measure_matmul_tflops(const std::vector<GemmShape>& shapes, torch::ScalarType dtype, torch::Device device,
                             double seconds) {
  torch::NoGradGuard no_grad;
  const auto options = torch::TensorOptions().dtype(dtype).device(device);
  std::vector<std::pair<torch::Tensor, torch::Tensor>> operands;
  double flops_per_round = 0;
  for (const auto& [m, k, n] : shapes) {
    if (m <= 0 || k <= 0 || n <= 0) continue;
    // Constant operands: the run's random generators are not drawn from (a resumed run draws the same).
    operands.emplace_back(torch::full({m, k}, 0.5, options), torch::full({k, n}, 0.25, options));
    flops_per_round += 2.0 * static_cast<double>(m) * static_cast<double>(k) * static_cast<double>(n);
  }
  if (operands.empty()) return 0;
  for (const auto& [a, b] : operands) (void)torch::mm(a, b);  // warm-up
  synchronize(device);
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  double elapsed = 0;
  std::int64_t rounds = 0;
  while (rounds < 3 || elapsed < seconds) {
    for (const auto& [a, b] : operands) (void)torch::mm(a, b);
    synchronize(device);
    ++rounds;
    elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  }
  return flops_per_round * static_cast<double>(rounds) / elapsed / 1e12;
}

PeakFlops peak_flops(double given, torch::Device device, bool bf16, const std::vector<GemmShape>& shapes) {
  if (given > 0) return {given, "--peak_tflops"};
  const auto name = gpu_name(device);
  if (auto t = table_peak_tflops(name, bf16))
    return {*t, fmt::format("{} dense {} peak (table)", name, bf16 ? "bf16" : "fp32")};
  const auto dtype = bf16 ? torch::kBFloat16 : torch::kFloat32;
  const double measured = measure_matmul_tflops(shapes, dtype, device, 0.1);
  return {measured, fmt::format("{} {} matmul rate measured on the run's GEMM shapes", name.empty() ? "CPU" : name,
                                bf16 ? "bf16" : "fp32")};
}

}  // namespace eagle::device
