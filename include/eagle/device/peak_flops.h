// The peak a run's MFU is measured against (docs/training.md, "TFLOP/s and MFU"): --peak_tflops when
// given; a known GPU's dense peak from a table (bf16 with --bf16, else fp32: LibTorch runs fp32 matmuls
// without TF32); on CPU, or a GPU the table lacks, the matmul rate measured once at start-up on the
// run's own GEMM shapes.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <torch/torch.h>

namespace eagle::device {

struct PeakFlops {
  double tflops = 0;   // TFLOP/s of one device
  std::string source;  // how it was found, for the log and summary.json
};

// A GEMM [m, k] x [k, n].
using GemmShape = std::array<std::int64_t, 3>;

// The dense peak TFLOP/s of a GPU by its name (e.g. "NVIDIA H200"), bf16 or fp32; none for a GPU the
// table does not know.
std::optional<double> table_peak_tflops(const std::string& device_name, bool bf16);
// The matmul rate of `device` on these shapes in `dtype`: each shape run once to warm up, then all in
// turn until `seconds` have passed (at least 3 rounds); total FLOPs over total time, in TFLOP/s.
double measure_matmul_tflops(const std::vector<GemmShape>& shapes, torch::ScalarType dtype, torch::Device device,
                             double seconds);
// The run's peak: `given` (> 0) itself, else the table's for the device's GPU, else measured on `shapes`.
PeakFlops peak_flops(double given, torch::Device device, bool bf16, const std::vector<GemmShape>& shapes);

}  // namespace eagle::device
