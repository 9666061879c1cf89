// The DSpark block draft's math against speculators 0.9.0's own DSparkDraftModel (scripts/
// make_dspark_reference.py, on the tiny Qwen3 target): one training step's Markov-corrected logits, confidence
// logits, acceptance rates, KL and confidence losses and every gradient, and the greedy round of vLLM 0.32's
// DSpark speculator (the block drafted left to right with the Markov bias of the token before it), in both
// layouts (anchor-as-first and DFlash's 1 + N fill-in); a sampled round's logits conditioned on the token
// drafted before; the trainer's step equal to speculators' objective where their masks agree.
#include <torch/torch.h>
#include <catch2/catch.hpp>

#include "eagle/head/dspark/head.h"
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

}  // namespace

TEST_CASE("DSpark's training step and greedy round equal speculators' DSparkDraftModel and vLLM's chain", "[head]") {
  const bool anchor_first = GENERATE(true, false);
  INFO((anchor_first ? "anchor-as-first" : "1 + N fill-in"));
  auto ref = model::load_safetensors(
      kRoot + (anchor_first ? "reference/dspark-head.safetensors" : "reference/dspark-fillin-head.safetensors"));
  head::DFlashSettings backbone;
  backbone.block_size = 4;
  backbone.num_layers = 2;
  backbone.target_layer_ids = {0, 1};  // aux ids 1, 2
  backbone.mask_token_id = 255;
  auto cfg = head::dflash_config_from_target(target::TargetConfig::from_model_dir(kQwen3), backbone);
  cfg.dspark_markov_rank = 8;
  cfg.dspark_confidence_head = true;
  cfg.dflash_decay_gamma = 4.0;
  cfg.dspark_sample_from_anchor = anchor_first;
  cfg.ttt_steps = cfg.steps();
  head::DSparkHead h(cfg);
  {
    torch::NoGradGuard ng;
    for (auto& p : h.named_parameters()) {
      INFO(p.key());
      REQUIRE(ref.count(p.key()));  // speculators' checkpoint names are the head's own
      p.value().copy_(ref.at(p.key()));
    }
  }
  auto ends = target::TargetModel::load_ends(kQwen3, torch::kFloat32, torch::kCPU);
  h.set_target_weights(ends.embed, ends.lm_head);
  head::HeadInputs in;
  in.input_ids = ref.at("input_ids").unsqueeze(0);
  in.position_ids = ref.at("position_ids").unsqueeze(0);
  in.document_ids = ref.at("document_ids").unsqueeze(0);
  in.loss_mask = ref.at("loss_mask").unsqueeze(0);
  in.aux_hidden = ref.at("aux_hidden").unsqueeze(0);
  in.teacher_logits = ref.at("target_logits").unsqueeze(0);
  const auto anchors = ref.at("anchors").unsqueeze(0);
  const auto n = anchors.size(1), s = cfg.dflash_block_size, v = cfg.vocab_size;
  auto step = h.speculators_step(in, anchors, torch::ones({1, n}, torch::kBool));
  step.loss.backward();
  // fp32 on both sides, the same operations in another order. Measured worst differences (this machine):
  // logits 1.3e-6, confidence logits 7e-7, losses 2.4e-7, acceptance rates 9e-8, gradients 3e-8 (at most
  // 1.2e-7 of the tensor's largest); each bound is more than ten times its measure, for other CPUs' kernels.
  CHECK(max_diff(step.mask.view({-1}), ref.at("ref.aligned_loss_mask")) == 0.0);
  CHECK(max_diff(step.logits.view({n * s, v}), ref.at("ref.logits")) < 3e-5);
  CHECK(max_diff(step.confidence_logits.view({-1}), ref.at("ref.confidence_logits")) < 1e-5);
  CHECK(max_diff(step.accept_rate.view({-1}), ref.at("ref.accept_rate")) < 1e-5);
  CHECK(max_diff(step.kl_loss, ref.at("ref.kl_loss")) < 1e-5);
  CHECK(max_diff(step.confidence_loss, ref.at("ref.confidence_loss")) < 1e-5);
  CHECK(max_diff(step.loss, ref.at("ref.loss")) < 1e-5);
  std::size_t grads = 0;
  for (auto& p : h.named_parameters()) {
    if (!ref.count("grad." + p.key())) continue;
    INFO(p.key());
    REQUIRE(p.value().grad().defined());
    const auto g = ref.at("grad." + p.key());
    CHECK(max_diff(p.value().grad(), g) < 1e-5 * std::max(1.0, g.abs().max().item<double>()));
    ++grads;
  }
  CHECK(grads == h.parameters().size());  // every trained parameter has speculators' gradient
  // The round: the same block hidden states drafted greedily with the Markov bias of the token before, every
  // slot (anchor first) or slots 1.. (fill-in), the first biased by the anchor.
  torch::NoGradGuard ng;
  const std::int64_t off = anchor_first ? 0 : 1, k = s - off;
  auto hidden = h.block_hidden(in, anchors).squeeze(0);
  auto drafting = hidden.narrow(1, off, k);
  const auto anchor_ids = ref.at("input_ids").index_select(0, anchors.squeeze(0));
  auto tokens = h.greedy_chain(drafting, anchor_ids);
  CHECK(torch::equal(tokens, ref.at("round.tokens")));
  // A sampled round: slot i's logits are biased by whatever token was drafted before it, not the argmax.
  // Forced tokens through the same chain; each slot's logits against speculators' base logits + W2 W1[prev].
  const auto base = ref.at("round.base_logits").narrow(1, off, k);  // [N, K, V]
  const auto w1 = ref.at("markov_head.markov_w1.weight"), w2 = ref.at("markov_head.markov_w2.weight");
  const auto forced = (tokens * 7 + 3).remainder(v);
  auto prev = anchor_ids;
  std::int64_t slots = 0;
  h.chain(drafting, anchor_ids, [&](std::int64_t i, const torch::Tensor& z) {
    CHECK(max_diff(z, base.select(1, i) + torch::mm(w1.index_select(0, prev), w2.t())) < 3e-5);
    prev = forced.select(1, i);
    ++slots;
    return prev;
  });
  CHECK(slots == k);
}

TEST_CASE("DSpark's trainer step equals speculators' objective where their masks agree", "[head]") {
  // speculators masks slot k by its input position p + k, the trainer by its label's; with every token trained
  // and each block's labels inside its sample, both masks are the anchors' drafting slots: the same loss.
  const bool anchor_first = GENERATE(true, false);
  INFO((anchor_first ? "anchor-as-first" : "1 + N fill-in"));
  auto ref = model::load_safetensors(kRoot + "reference/dspark-head.safetensors");
  head::DFlashSettings backbone;
  backbone.block_size = 4;
  backbone.num_layers = 2;
  backbone.target_layer_ids = {0, 1};
  backbone.mask_token_id = 255;
  auto cfg = head::dflash_config_from_target(target::TargetConfig::from_model_dir(kQwen3), backbone);
  cfg.dspark_markov_rank = 8;
  cfg.dspark_confidence_head = true;
  cfg.dflash_decay_gamma = 4.0;
  cfg.dspark_sample_from_anchor = anchor_first;
  cfg.ttt_steps = cfg.steps();
  head::DSparkHead h(cfg);
  {
    torch::NoGradGuard ng;
    for (auto& p : h.named_parameters()) p.value().copy_(ref.at(p.key()));
  }
  auto ends = target::TargetModel::load_ends(kQwen3, torch::kFloat32, torch::kCPU);
  h.set_target_weights(ends.embed, ends.lm_head);
  head::HeadInputs in;
  in.input_ids = ref.at("input_ids").unsqueeze(0);
  in.position_ids = ref.at("position_ids").unsqueeze(0);
  in.document_ids = ref.at("document_ids").unsqueeze(0);
  in.loss_mask = torch::ones_like(in.input_ids);
  in.aux_hidden = ref.at("aux_hidden").unsqueeze(0);
  in.teacher_logits = ref.at("target_logits").unsqueeze(0);
  in.target_argmax = in.teacher_logits.argmax(-1);
  const auto anchors = ref.at("anchors").unsqueeze(0);
  in.extra = anchors;
  const auto n = anchors.size(1), steps = cfg.steps();
  auto expected = h.speculators_step(in, anchors, torch::ones({1, n}, torch::kBool)).loss;
  auto got = h.train_step_forward(in, torch::full({steps}, static_cast<double>(n), torch::kFloat32));
  // The same terms summed in another order; speculators' 1e-5 and 1e-8 in its denominators are 2e-6 of these.
  CHECK(max_diff(got.loss, expected) < 1e-5);
  CHECK(got.metric_sums.size(0) == steps);
}
