// The DFlash2 block draft's math against speculators 0.9.0's own DFlash2DraftModel (scripts/
// make_dflash2_reference.py, on the tiny Qwen3 target): one training step's unary logits, the selector's training
// candidates and scores, both losses and every gradient (the convolutions' and the selector's included), and the
// greedy walk of vLLM 0.32's DFlash2 proposer; the trainer's step equal to speculators' objective where their masks
// agree; the convolution at speculators' init the identity (the layer then DFlash's).
#include <torch/torch.h>
#include <catch2/catch.hpp>

#include "eagle/head/dflash2/head.h"
#include "eagle/model/safetensors.h"
#include "eagle/target/target.h"
#include "helpers.h"

using namespace eagle;

namespace {

const std::string kRoot = std::string(EAGLE_SOURCE_DIR) + "/tests/fixtures/";
const std::string kQwen3 = kRoot + "models/tiny-qwen3";

double max_diff(const torch::Tensor& a, const torch::Tensor& b) {
  return (a.to(torch::kFloat64) - b.to(torch::kFloat64)).abs().max().item<double>();
}

// The fixture's draft: block 4, two layers, target layers 0, 1, mask 255; convolutions of 2 taps over groups of
// 16, the selector of rank 8 over the top 64; gamma 4, alpha 1; its weights copied from the fixture.
struct Rig {
  std::map<std::string, torch::Tensor> ref;
  head::HeadConfig cfg;
  std::unique_ptr<head::DFlash2Head> head;
  head::HeadInputs in;
  torch::Tensor anchors;
};

Rig rig() {
  Rig r;
  r.ref = model::load_safetensors(kRoot + "reference/dflash2-head.safetensors");
  head::DFlashSettings backbone;
  backbone.block_size = 4;
  backbone.num_layers = 2;
  backbone.target_layer_ids = {0, 1};
  backbone.mask_token_id = 255;
  r.cfg = head::dflash_config_from_target(target::TargetConfig::from_model_dir(kQwen3), backbone);
  r.cfg.dflash_decay_gamma = 4.0;
  r.cfg.dflash2_conv_kernel_size = 2;
  r.cfg.dflash2_conv_group_size = 16;
  r.cfg.dflash2_selector_rank = 8;
  r.cfg.dflash2_selector_top_k = 64;
  r.head = std::make_unique<head::DFlash2Head>(r.cfg);
  {
    torch::NoGradGuard ng;
    for (auto& p : r.head->named_parameters()) {
      INFO(p.key());
      REQUIRE(r.ref.count(p.key()));  // speculators' checkpoint names are the head's own
      p.value().copy_(r.ref.at(p.key()));
    }
  }
  auto ends = target::TargetModel::load_ends(kQwen3, torch::kFloat32, torch::kCPU);
  r.head->set_target_weights(ends.embed, ends.lm_head);
  r.in.input_ids = r.ref.at("input_ids").unsqueeze(0);
  r.in.position_ids = r.ref.at("position_ids").unsqueeze(0);
  r.in.document_ids = r.ref.at("document_ids").unsqueeze(0);
  r.in.loss_mask = r.ref.at("loss_mask").unsqueeze(0);
  r.in.aux_hidden = r.ref.at("aux_hidden").unsqueeze(0);
  r.in.teacher_logits = r.ref.at("target_logits").unsqueeze(0);
  r.in.target_argmax = r.in.teacher_logits.argmax(-1);
  r.anchors = r.ref.at("anchors").unsqueeze(0);
  return r;
}

}  // namespace

TEST_CASE("DFlash2's training step and greedy walk equal speculators' DFlash2DraftModel and vLLM's proposer",
          "[head]") {
  auto r = rig();
  const auto n = r.anchors.size(1), s = r.cfg.dflash_block_size, v = r.cfg.vocab_size, k = r.cfg.dflash2_selector_top_k;
  auto step = r.head->speculators_step(r.in, r.anchors, torch::ones({1, n}, torch::kBool));
  step.loss.backward();
  // fp32 on both sides, the same operations in another order. Measured worst differences on this machine are in
  // the comments; each bound is more than ten times its measure, for other CPUs' kernels.
  CHECK(max_diff(step.mask.view({-1}), r.ref.at("ref.aligned_loss_mask")) == 0.0);
  CHECK(max_diff(step.unary_logits.view({n * s, v}), r.ref.at("ref.unary_logits")) < 3e-5);
  CHECK(torch::equal(step.candidates.view({n * s, k}), r.ref.at("ref.candidate_ids")));
  CHECK(torch::equal(step.target_positions.view({-1}), r.ref.at("ref.target_positions")));
  CHECK(max_diff(step.candidate_logits.view({n * s, k}), r.ref.at("ref.candidate_logits")) < 3e-5);
  CHECK(max_diff(step.unary_loss, r.ref.at("ref.unary_loss")) < 1e-5);
  CHECK(max_diff(step.selector_loss, r.ref.at("ref.selector_loss")) < 1e-5);
  CHECK(max_diff(step.loss, r.ref.at("ref.loss")) < 1e-5);
  std::size_t grads = 0;
  for (auto& p : r.head->named_parameters()) {
    if (!r.ref.count("grad." + p.key())) continue;
    INFO(p.key());
    REQUIRE(p.value().grad().defined());
    const auto g = r.ref.at("grad." + p.key());
    CHECK(max_diff(p.value().grad(), g) < 1e-5 * std::max(1.0, g.abs().max().item<double>()));
    ++grads;
  }
  CHECK(grads == r.head->parameters().size());  // every trained parameter has speculators' gradient
  // The round: slots 1..3 of the same block hidden states, walked from the anchor as vLLM's proposer does.
  torch::NoGradGuard ng;
  auto hidden = r.head->block_hidden(r.in, r.anchors).squeeze(0);
  const auto anchor_ids = r.ref.at("input_ids").index_select(0, r.anchors.squeeze(0));
  CHECK(torch::equal(r.head->greedy_walk(hidden.narrow(1, 1, s - 1), anchor_ids), r.ref.at("round.tokens")));
}

TEST_CASE("DFlash2's trainer step equals speculators' objective where their masks agree", "[head]") {
  // In the fill-in layout slot k's input position is its label's: with every token trained and the anchors'
  // blocks inside their samples both masks are every slot 1..3, and the step's denominators (valid slots) are
  // speculators' sum of the mask.
  auto r = rig();
  r.in.loss_mask = torch::ones_like(r.in.input_ids);
  r.in.extra = r.anchors;
  const auto n = r.anchors.size(1);
  auto expected = r.head->speculators_step(r.in, r.anchors, torch::ones({1, n}, torch::kBool));
  const double slots = expected.mask.sum().item<double>();
  auto per_k = expected.mask.sum(std::vector<std::int64_t>{0, 1}).narrow(0, 1, r.cfg.dflash_block_size - 1);
  auto got = r.head->train_step_forward(r.in, per_k);
  // speculators divides by sum m + 1e-5 (7e-7 of this sum of 15), the trainer by the sum: the same terms
  // otherwise, summed in another order.
  CHECK(slots == 15.0);
  CHECK(max_diff(got.loss, expected.loss) < 1e-5);
  CHECK(got.metric_sums.size(0) == r.cfg.dflash_block_size - 1);
}

TEST_CASE("a DFlash2 layer at speculators' init is DFlash's; the convolution resets at every block", "[head]") {
  torch::manual_seed(5);
  // The identity: base tap 0 one, the rest and the projection zero.
  head::BlockConv conv(32, 3, 8);
  auto u = torch::randn({2, 12, 32});
  auto [y, delta] = conv->prepare(u, 4);
  CHECK(torch::equal(y, u));
  CHECK(torch::equal(conv->finish(u, delta, 4), u));
  // Any kernel: slot 0 of every block reads only itself, slot k the slots k - 1 .. of its own block.
  auto x = torch::randn({1, 8, 16});
  auto d = torch::randn({1, 8, 2, 4});
  auto base = torch::randn({2, 16});
  auto out = head::grouped_block_conv(x, d, base, 4, 4);
  for (std::int64_t row = 0; row < 8; ++row) {
    INFO("row " << row);
    auto coef0 = base[0] + d[0][row][0].repeat_interleave(4);
    auto expected = coef0 * x[0][row];
    if (row % 4 > 0) expected = expected + (base[1] + d[0][row][1].repeat_interleave(4)) * x[0][row - 1];
    CHECK(max_diff(out[0][row], expected) < 1e-6);
  }
}
