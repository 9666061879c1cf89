// Activation recomputation (head/recompute.h): the function's gradients through a second run in
// backward equal autograd's through the kept graph; the EAGLE-3 TTT unroll with each
// recompute_activations mode equals the unrecomputed one (loss, metrics, every gradient) for padded
// and packed rows, several layers, P-EAGLE, EAGLE 3.1's switches, the chunked and unchunked loss, and
// close under bf16 autocast. The fixtures' PyTorch references are checked in every mode by
// check_train_step_against_reference (head_fixtures.h); the peak allocation in
// test_head_loss.cpp.
#include <catch2/catch.hpp>

#include "eagle/head/recompute.h"
#include "eagle/util/error.h"
#include "head_fixtures.h"

using namespace eagle;
using namespace eagle::test;

TEST_CASE("recompute: gradients of inputs and parameters equal the kept graph's", "[head]") {
  torch::manual_seed(4);
  auto w = torch::randn({6, 5}).requires_grad_(true);
  auto unused = torch::randn({3}).requires_grad_(true);
  auto x0 = torch::randn({4, 5});
  auto fn = [&](const std::vector<torch::Tensor>& in) {
    auto y = torch::silu(torch::linear(in[0], w)) * in[0].sum(-1, true);
    return std::vector<torch::Tensor>{y, torch::rms_norm(y, {6}) + in[1].to(torch::kFloat32).unsqueeze(-1)};
  };
  auto ids = torch::arange(4, torch::kInt64);  // not floating point: passes through without a gradient
  auto direct_x = x0.clone().requires_grad_(true);
  auto d = fn({direct_x, ids});
  ((d[0] * 3).sum() + d[1].pow(2).sum()).backward();
  const auto gx = direct_x.grad().clone(), gw = w.grad().clone();
  w.mutable_grad().reset();
  auto x = x0.clone().requires_grad_(true);
  auto r = head::recompute(fn, {x, ids}, {w, unused});
  CHECK_FALSE(r[0].grad_fn()->name().empty());
  CHECK(torch::equal(r[0], d[0]));  // the same values, not kept
  ((r[0] * 3).sum() + r[1].pow(2).sum()).backward();
  CHECK(torch::allclose(x.grad(), gx, 1e-6, 1e-7));
  CHECK(torch::allclose(w.grad(), gw, 1e-6, 1e-7));
  CHECK_FALSE(unused.grad().defined());
  // Only one output used: the other's gradient is undefined and stays out of the backward.
  w.mutable_grad().reset();
  auto only = head::recompute(fn, {x0, ids}, {w});
  only[1].sum().backward();
  CHECK(w.grad().defined());
  CHECK(head::parse_recompute_mode("mlp") == head::RecomputeMode::mlp);
  CHECK(head::recompute_mode_name(head::RecomputeMode::layer) == "layer");
  CHECK_THROWS_AS(head::parse_recompute_mode("all"), Error);
}

namespace {

HeadRun run(head::HeadConfig cfg, head::RecomputeMode mode, const head::HeadInputs& in, bool bf16 = false) {
  cfg.recompute = mode;
  torch::manual_seed(11);
  auto target = tiny_target();
  head::Eagle3Head head(cfg, tiny_vocab());
  head.init_from_target(target.embedding, target.lm_head);
  if (cfg.parallel_drafting) {
    torch::NoGradGuard ng;
    head.mask_hidden.normal_();
  }
  return step_and_backward(head, in, bf16);
}

}  // namespace

TEST_CASE("the recomputed TTT unroll equals the kept one: rows, layers, P-EAGLE, EAGLE 3.1, chunks", "[head]") {
  struct Variant {
    const char* name;
    std::int64_t layers;
    bool parallel, v31;
  };
  for (auto v : {Variant{"one layer", 1, false, false}, Variant{"three layers", 3, false, false},
                 Variant{"P-EAGLE, two layers", 2, true, false}, Variant{"EAGLE 3.1 + Qwen3 layer", 2, false, true}}) {
    auto cfg = tiny_head_config(3, 3);
    cfg.num_layers = v.layers;
    cfg.parallel_drafting = v.parallel;
    cfg.mask_token_id = 7;
    cfg.fc_norm = cfg.norm_output = cfg.qk_norm = v.v31;
    torch::manual_seed(3);
    auto in = tiny_inputs(cfg);  // row 0 one sample then padding, row 1 two samples
    for (bool packed : {true, false}) {
      in.attention.packed = packed;
      for (std::int64_t chunk : {0, 7}) {
        cfg.loss_chunk_size = chunk;
        auto kept = run(cfg, head::RecomputeMode::off, in);
        CHECK(std::isfinite(kept.loss));
        for (auto mode : {head::RecomputeMode::mlp, head::RecomputeMode::layer}) {
          INFO(v.name << ", packed " << packed << ", chunk " << chunk << ", " << head::recompute_mode_name(mode));
          check_same(run(cfg, mode, in), kept, 1e-5, 1e-6);
        }
      }
    }
  }
}

TEST_CASE("the recomputed TTT unroll under bf16 autocast: the same loss, gradients within bf16 rounding", "[head]") {
  auto cfg = tiny_head_config(3, 3);
  cfg.num_layers = 2;
  torch::manual_seed(3);
  auto in = tiny_inputs(cfg);
  auto kept = run(cfg, head::RecomputeMode::off, in, true);
  for (auto mode : {head::RecomputeMode::mlp, head::RecomputeMode::layer}) {
    INFO(head::recompute_mode_name(mode));
    auto r = run(cfg, mode, in, true);
    for (const auto& g : r.grads) CHECK(g.scalar_type() == torch::kFloat32);
    // The forward casts as the kept one does: the same loss and metrics. The gradients differ by bf16
    // rounding: the kept path sums the K steps' gradients of each cached bf16 weight cast in bf16, the
    // recomputed one casts per step and sums in fp32.
    CHECK(r.loss == Approx(kept.loss).epsilon(1e-5));
    CHECK(torch::allclose(r.metrics, kept.metrics));
    REQUIRE(r.grads.size() == kept.grads.size());
    for (std::size_t i = 0; i < r.grads.size(); ++i) CHECK(torch::allclose(r.grads[i], kept.grads[i], 0.05, 0.02));
  }
}
