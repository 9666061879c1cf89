// Checks that run only where a CUDA device is present (the [gpu] CTest entry skips elsewhere).
#include <catch2/catch.hpp>
#include <torch/torch.h>

TEST_CASE("a CUDA matmul equals the CPU result", "[gpu]") {
  torch::manual_seed(0);
  auto a = torch::randn({64, 32}), b = torch::randn({32, 16});
  auto gpu = torch::matmul(a.cuda(), b.cuda()).cpu();
  CHECK(torch::allclose(gpu, torch::matmul(a, b), 1e-4, 1e-4));
}
