// MFU's peak (device/peak_flops.h): --peak_tflops as given, a known GPU's dense peak from the table (by
// its name, bf16 or fp32), and on CPU the matmul rate measured on the run's GEMM shapes.
#include <torch/torch.h>
#include <catch2/catch.hpp>

#include "eagle/device/peak_flops.h"

using namespace eagle::device;

TEST_CASE("the peak TFLOP/s: given, from the GPU table by name, else measured", "[device]") {
  CHECK(table_peak_tflops("NVIDIA H200", true) == 989.0);
  CHECK(table_peak_tflops("NVIDIA H100 80GB HBM3", false) == 67.0);
  CHECK(table_peak_tflops("NVIDIA H100 PCIe", true) == 756.0);  // not the SXM part's row
  CHECK(table_peak_tflops("NVIDIA A100-SXM4-80GB", true) == 312.0);
  CHECK(table_peak_tflops("NVIDIA L40S", false) == Approx(91.6));
  CHECK_FALSE(table_peak_tflops("Some Future Accelerator", true));
  CHECK_FALSE(table_peak_tflops("", false));

  const auto given = peak_flops(123.0, torch::kCPU, false, {{8, 8, 8}});
  CHECK(given.tflops == 123.0);
  CHECK(given.source == "--peak_tflops");
  // CPU: measured on the shapes; any machine does a small fp32 GEMM at more than 1 MFLOP/s.
  const auto measured = peak_flops(0.0, torch::kCPU, false, {{64, 64, 64}, {64, 64, 128}});
  CHECK(measured.tflops > 1e-6);
  CHECK_THAT(measured.source, Catch::Contains("CPU fp32 matmul rate measured"));
  CHECK(measure_matmul_tflops({}, torch::kFloat32, torch::kCPU, 0.01) == 0.0);
}
