// The device-side AdamW: equals torch::optim::AdamW, clips like clip_grad_norm_, skips
// non-finite steps without touching the weights, and round-trips its state.
#include <catch2/catch.hpp>
#include <torch/torch.h>

#include "eagle/train/optimizer.h"

using eagle::train::AdamW;
using eagle::train::AdamWConfig;

namespace {

torch::Tensor quadratic_loss(const torch::Tensor& w, const torch::Tensor& b) {
  auto x = torch::linspace(-1, 1, 12).view({3, 4});
  return (torch::matmul(x, w) + b).pow(2).sum();
}

}  // namespace

TEST_CASE("fused AdamW with clipping equals torch::optim::AdamW after clip_grad_norm_", "[train]") {
  torch::manual_seed(1);
  auto w0 = torch::randn({4, 2}), b0 = torch::randn({2});
  auto w = w0.clone().requires_grad_(true), b = b0.clone().requires_grad_(true);
  auto rw = w0.clone().requires_grad_(true), rb = b0.clone().requires_grad_(true);
  AdamWConfig cfg{0.9, 0.95, 1e-8, 0.01, 0.5};
  AdamW opt({{"w", w}, {"b", b}}, cfg);
  torch::optim::AdamW ref({rw, rb}, torch::optim::AdamWOptions(3e-2).betas({0.9, 0.95}).eps(1e-8).weight_decay(0.01));
  for (int step = 0; step < 5; ++step) {
    double lr = 3e-2 * (step + 1) / 5.0;
    opt.zero_grad();
    auto loss = quadratic_loss(w, b);
    loss.backward();
    opt.set_lr(lr);
    opt.step(loss.detach());

    ref.zero_grad();
    quadratic_loss(rw, rb).backward();
    double norm = torch::nn::utils::clip_grad_norm_(std::vector<torch::Tensor>{rw, rb}, 0.5);
    CHECK(opt.last_grad_norm().item<double>() == Approx(norm).epsilon(1e-5));
    for (auto& g : ref.param_groups()) static_cast<torch::optim::AdamWOptions&>(g.options()).lr(lr);
    ref.step();
    CHECK(torch::allclose(w, rw, 1e-5, 1e-6));
    CHECK(torch::allclose(b, rb, 1e-5, 1e-6));
  }
  CHECK(opt.nonfinite_steps().item<float>() == 0);
  CHECK(opt.first_nonfinite_step().item<float>() == -1);
}

TEST_CASE("a non-finite loss or gradient skips the update on the device", "[train]") {
  auto w = torch::ones({3}).requires_grad_(true);
  AdamW opt({{"w", w}}, AdamWConfig{});
  opt.set_lr(0.1);
  (w * 2).sum().backward();
  opt.step(torch::tensor(1.0));
  auto after_good = w.detach().clone();
  CHECK_FALSE(torch::equal(after_good, torch::ones({3})));

  opt.zero_grad();
  auto loss = (w * std::numeric_limits<float>::quiet_NaN()).sum();
  loss.backward();
  opt.step(loss.detach());
  CHECK(torch::equal(w.detach(), after_good));
  CHECK(opt.nonfinite_steps().item<float>() == 1);
  CHECK(opt.first_nonfinite_step().item<float>() == 2);
  CHECK(opt.state().at("w.step").item<float>() == 1);  // the skipped step is not counted

  opt.zero_grad();
  (w * 2).sum().backward();
  opt.step(torch::tensor(std::numeric_limits<float>::infinity()));  // finite grads, infinite loss
  CHECK(torch::equal(w.detach(), after_good));
  CHECK(opt.nonfinite_steps().item<float>() == 2);
  CHECK(opt.first_nonfinite_step().item<float>() == 2);
}

TEST_CASE("optimizer state round trips and continues identically", "[train]") {
  auto run = [](int steps, AdamW* resume_from, torch::Tensor w_init) {
    auto w = w_init.clone().requires_grad_(true);
    AdamW opt({{"w", w}}, AdamWConfig{0.9, 0.99, 1e-8, 0.0, 1.0});
    if (resume_from) opt.load_state(resume_from->state(), "test");
    for (int i = 0; i < steps; ++i) {
      opt.zero_grad();
      auto loss = (w - 3).pow(2).sum();
      loss.backward();
      opt.set_lr(0.05);
      opt.step(loss.detach());
    }
    return std::make_pair(w.detach().clone(), std::make_unique<AdamW>(opt));
  };
  auto init = torch::zeros({4});
  auto [straight, o1] = run(6, nullptr, init);
  auto [half, o2] = run(3, nullptr, init);
  auto [resumed, o3] = run(3, o2.get(), half);
  CHECK(torch::equal(straight, resumed));
  auto bad = o2->state();
  bad["w.exp_avg"] = torch::zeros({5});
  auto w = torch::zeros({4}).requires_grad_(true);
  AdamW fresh({{"w", w}}, AdamWConfig{});
  CHECK_THROWS_WITH(fresh.load_state(bad, "ckpt/optimizer.safetensors"),
                    Catch::Contains("ckpt/optimizer.safetensors") && Catch::Contains("w.exp_avg") &&
                        Catch::Contains("expected [4]"));
}
