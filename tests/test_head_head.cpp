// Draft heads: TTT attention, shapes, gradients, losses, metrics, valid masks, draft vocabulary,
// incremental drafting.
#include <catch2/catch.hpp>

#include <cmath>

#include <ATen/autocast_mode.h>

#include "eagle/data/dataset.h"
#include "eagle/head/draft_spec.h"
#include "eagle/head/loss.h"
#include "eagle/target/target.h"
#include "eagle/train/loss_metrics.h"
#include "eagle/util/error.h"
#include "head_fixtures.h"
#include "helpers.h"

using namespace eagle;
using namespace eagle::test;

namespace {

data::Batch batch_of(const head::HeadInputs& in) {
  data::Batch b;
  b.rows = in.input_ids.size(0);
  b.length = in.input_ids.size(1);
  auto doc = in.document_ids.contiguous(), mask = in.loss_mask.to(torch::kUInt8).contiguous();
  for (std::int64_t i = 0; i < b.rows * b.length; ++i) {
    b.document_ids.push_back(static_cast<std::int32_t>(doc.data_ptr<std::int64_t>()[i]));
    b.loss_mask.push_back(mask.data_ptr<std::uint8_t>()[i]);
  }
  return b;
}

torch::Tensor denominators(const head::HeadInputs& in, std::int64_t steps) {
  auto counts = head::count_loss_positions(batch_of(in), steps);
  return torch::tensor(counts, torch::kInt64).to(torch::kFloat32);
}

}  // namespace

TEST_CASE("efficient TTT attention equals the per-step reference in values and gradients", "[head]") {
  torch::manual_seed(1);
  // Grouped heads (4 query heads over 2 key/value heads); row 0 padded, row 1 packed.
  const std::int64_t b = 2, h = 4, kvh = 2, t = 9, d = 5;
  auto doc = torch::tensor({0, 0, 0, 0, 0, 0, 0, -1, -1, 0, 0, 0, 1, 1, 1, 1, 2, 2}, torch::kInt64).view({b, t});
  for (std::int64_t k : {0, 1, 3}) {
    auto q = torch::randn({b, h, t, d}, torch::requires_grad());
    auto k0 = torch::randn({b, kvh, t, d}, torch::requires_grad());
    auto v0 = torch::randn({b, kvh, t, d}, torch::requires_grad());
    std::vector<torch::Tensor> kd, vd;
    for (std::int64_t j = 0; j < k; ++j) {
      kd.push_back(torch::randn({b, kvh, t, d}, torch::requires_grad()));
      vd.push_back(torch::randn({b, kvh, t, d}, torch::requires_grad()));
    }
    const model::AttentionLayout packed(doc, {});
    auto ref = head::ttt_attention_reference(q, k0, v0, kd, vd, packed, 0.4);
    auto w = torch::randn_like(ref);
    std::vector<torch::Tensor> inputs = {q, k0, v0};
    inputs.insert(inputs.end(), kd.begin(), kd.end());
    inputs.insert(inputs.end(), vd.begin(), vd.end());
    auto g_ref = torch::autograd::grad({(ref * w).sum()}, inputs);
    // The CPU flash kernel per document (its log-sum-exp gradient through the extra columns), with
    // the tight segment bound and the default one.
    for (std::int64_t max_segments : {0, 3}) {
      const model::AttentionLayout layout(doc, {true, max_segments});
      auto eff = head::ttt_attention_efficient(q, k0, v0, kd, vd, layout, 0.4);
      CHECK(torch::allclose(eff, ref, 1e-5, 1e-5));
      auto g_eff = torch::autograd::grad({(eff * w).sum()}, inputs);
      for (std::size_t i = 0; i < inputs.size(); ++i) CHECK(torch::allclose(g_eff[i], g_ref[i], 1e-4, 1e-5));
    }
    // Padded rows only (row 0 alone): causal attention without a mask, equal at the real positions.
    auto first = [](const torch::Tensor& x) { return x.narrow(0, 0, 1); };
    std::vector<torch::Tensor> kd0, vd0;
    for (std::int64_t j = 0; j < k; ++j) {
      kd0.push_back(first(kd[j]));
      vd0.push_back(first(vd[j]));
    }
    auto ref0 = head::ttt_attention_reference(first(q), first(k0), first(v0), kd0, vd0,
                                              model::AttentionLayout(first(doc), {}), 0.4);
    auto pad0 = head::ttt_attention_efficient(first(q), first(k0), first(v0), kd0, vd0,
                                              model::AttentionLayout(first(doc), {false, 0}), 0.4);
    CHECK(torch::allclose(pad0.narrow(2, 0, 7), ref0.narrow(2, 0, 7), 1e-5, 1e-5));
    CHECK(torch::isfinite(pad0).all().item<bool>());
  }
}

TEST_CASE("TTT attention respects causality and document boundaries", "[head]") {
  torch::manual_seed(2);
  auto doc = torch::tensor({0, 0, 0, 1, 1, 1}, torch::kInt64).view({1, 6});
  const model::AttentionLayout layout(doc, {});
  auto q = torch::randn({1, 1, 6, 4}), k0 = torch::randn({1, 1, 6, 4}), v0 = torch::randn({1, 1, 6, 4});
  auto out = head::ttt_attention_efficient(q, k0, v0, {}, {}, layout, 0.5);
  auto v1 = v0.clone();
  v1.index_put_({0, 0, 4}, 100.0);  // a later key of document 1 changes nothing at positions 0..3
  auto out1 = head::ttt_attention_efficient(q, k0, v1, {}, {}, layout, 0.5);
  CHECK(torch::equal(out.narrow(2, 0, 4), out1.narrow(2, 0, 4)));
  CHECK_FALSE(torch::allclose(out.narrow(2, 4, 2), out1.narrow(2, 4, 2)));
  // Position 3 starts document 1: it sees only itself.
  CHECK(torch::allclose(out.index({0, 0, 3}), v0.index({0, 0, 3}), 1e-6, 1e-6));
}

TEST_CASE("valid masks and host counts follow the rule at sample ends and document boundaries", "[head]") {
  auto cfg = tiny_head_config(3);
  torch::manual_seed(3);
  auto in = tiny_inputs(cfg);
  auto counts = head::count_loss_positions(batch_of(in), 3);
  CHECK(counts == std::vector<std::int64_t>{12, 9, 6});
  for (std::int64_t k = 0; k < 3; ++k) {
    auto m = head::in_document_mask(in.loss_mask, in.document_ids, k);
    CHECK(m.sum().item<std::int64_t>() == counts[static_cast<std::size_t>(k)]);
  }
  // Row 1 packs documents [0, 4) and [4, 10): at step 0 positions 2, 3 would cross into document 1.
  auto m0 = head::in_document_mask(in.loss_mask, in.document_ids, 0);
  auto row1 = std::vector<bool>{};
  for (std::int64_t t = 0; t < 10; ++t) row1.push_back(m0.index({1, t}).item<bool>());
  CHECK(row1 == std::vector<bool>{true, true, false, false, true, true, true, true, false, false});
}

TEST_CASE("EAGLE-3 loss, metrics and tau on a hand-built case", "[head]") {
  auto cfg = tiny_head_config(3, 2);
  torch::manual_seed(4);
  head::Eagle3Head head(cfg, tiny_vocab());
  auto target = tiny_target();
  head.set_target_weights(target.embedding, target.lm_head);
  {
    torch::NoGradGuard ng;
    head.lm_head->weight.zero_();  // uniform draft: loss log(12) per valid position, argmax = draft id 0
  }
  head::HeadInputs in;
  in.input_ids = torch::randint(0, 40, {1, 10}, torch::kInt64);
  in.document_ids = torch::tensor({0, 0, 0, 0, 0, 0, 0, 0, -1, -1}, torch::kInt64).view({1, 10});
  in.position_ids = torch::tensor({0, 1, 2, 3, 4, 5, 6, 7, 0, 0}, torch::kInt64).view({1, 10});
  in.loss_mask = torch::tensor({1, 0, 1, 1, 1, 1, 1, 0, 0, 0}, torch::kUInt8).view({1, 10});
  in.target_argmax = torch::tensor({0, 0, 0, 3, 0, 5, 0, 3, 0, 0}, torch::kInt64).view({1, 10});
  in.aux_hidden = torch::randn({1, 10, 48});
  in.teacher_logits = torch::randn({1, 10, 12});
  auto den = denominators(in, 2);
  CHECK(torch::equal(den, torch::tensor({5.0f, 4.0f})));
  auto out = head.train_step_forward(in, den);
  // Step 0 valid {0,1,2,3} (4: argmax 5 not a draft id; 5: loss_mask[7] = 0), right at {0,1,3};
  // step 1 valid {0,1,2}, right at {0,2}; after a right step 0: {0,1} valid, {0} right.
  const double l12 = std::log(12.0);
  CHECK(out.loss.item<double>() == Approx(l12 * (4.0 / 5.0 + 0.8 * 3.0 / 4.0)).epsilon(1e-5));
  auto s = out.metric_sums;
  CHECK(
      torch::allclose(s.narrow(1, 0, 4), torch::tensor({4.0f, 3.0f, 4.0f, 3.0f, 3.0f, 2.0f, 2.0f, 1.0f}).view({2, 4})));
  CHECK(s.index({0, head::kLossSum}).item<double>() == Approx(4 * l12).epsilon(1e-5));
  auto m = train::summarize_metrics(s);
  CHECK(m.acc[0] == Approx(0.75));
  CHECK(m.acc[1] == Approx(2.0 / 3.0));
  CHECK(m.cacc[0] == Approx(0.75));
  CHECK(m.cacc[1] == Approx(0.5));
  CHECK(m.tau == Approx(1 + 0.75 + 0.375));
  CHECK(m.loss[1] == Approx(l12).epsilon(1e-5));
  // Sums add across batches.
  auto m2 = train::summarize_metrics(s + s);
  CHECK(m2.tau == Approx(m.tau));
  CHECK(m2.positions == 8);
}

TEST_CASE("EAGLE-3 head: shapes, gradients only on head parameters, efficient equals reference", "[head]") {
  auto cfg = tiny_head_config(3, 3);
  torch::manual_seed(5);
  auto target = tiny_target();
  auto emb_before = target.embedding.clone(), lm_before = target.lm_head.clone();
  head::Eagle3Head head(cfg, tiny_vocab());
  head.set_target_weights(target.embedding, target.lm_head);
  head.init_lm_head_from_target(target.lm_head);
  CHECK(torch::equal(head.lm_head->weight, target.lm_head.index_select(0, tiny_vocab().ids())));
  auto in = tiny_inputs(cfg);
  auto logits = head.ttt_logits(in);
  REQUIRE(logits.size() == 3);
  CHECK(logits[2].sizes() == torch::IntArrayRef({2, 10, 12}));
  auto out = head.train_step_forward(in, denominators(in, 3));
  CHECK(out.loss.dim() == 0);
  CHECK(out.metric_sums.sizes() == torch::IntArrayRef({3, head::kMetricColumns}));
  CHECK_FALSE(out.metric_sums.requires_grad());
  out.loss.backward();
  std::vector<torch::Tensor> grads_eff;
  for (const auto& p : head.named_parameters()) {
    INFO(p.key());
    REQUIRE(p.value().grad().defined());
    CHECK(p.value().grad().abs().sum().item<double>() > 0);
    grads_eff.push_back(p.value().grad().clone());
  }
  CHECK_FALSE(target.embedding.grad().defined());
  CHECK_FALSE(in.aux_hidden.grad().defined());
  CHECK(torch::equal(target.embedding, emb_before));
  CHECK(torch::equal(target.lm_head, lm_before));
  // The reference attention gives the same loss and gradients.
  auto ref_cfg = cfg;
  ref_cfg.attention = head::TttAttentionImpl::reference;
  head::Eagle3Head ref(ref_cfg, tiny_vocab());
  ref.set_target_weights(target.embedding, target.lm_head);
  {
    torch::NoGradGuard ng;
    auto src = head.named_parameters();
    for (auto& p : ref.named_parameters()) p.value().copy_(src[p.key()]);
  }
  auto out_ref = ref.train_step_forward(in, denominators(in, 3));
  CHECK(out_ref.loss.item<double>() == Approx(out.loss.item<double>()).epsilon(1e-5));
  CHECK(torch::allclose(out_ref.metric_sums, out.metric_sums, 1e-4, 1e-4));
  out_ref.loss.backward();
  std::size_t i = 0;
  for (const auto& p : ref.named_parameters()) CHECK(torch::allclose(p.value().grad(), grads_eff[i++], 1e-4, 1e-6));
}

TEST_CASE("EAGLE-3 drafting matches the training-time-test unroll and rolls back", "[head]") {
  auto cfg = tiny_head_config(3, 3);
  torch::manual_seed(6);
  auto target = tiny_target();
  head::Eagle3Head head(cfg, tiny_vocab());
  head.set_target_weights(target.embedding, target.lm_head);
  head.init_lm_head_from_target(target.lm_head);
  const std::int64_t n = 6;
  auto feats = torch::randn({1, n, 48});
  auto ids = torch::randint(0, 40, {1, n + 1}, torch::kInt64);
  auto cache = head.new_cache(1, 32);
  auto drafted = check_drafting_matches_unroll(head, cache, feats, ids);
  CHECK(cache.length == n);
  // Two calls over the prefix split in halves, after a rollback, draft the same tokens.
  head.truncate(cache, 0);
  head.draft(cache, feats.narrow(1, 0, 3), ids.narrow(1, 1, 3), 2);
  auto again = head.draft(cache, feats.narrow(1, 3, 3), ids.narrow(1, 4, 3), 3);
  CHECK(torch::equal(again, drafted));
}

TEST_CASE("EAGLE-1 head: shapes, loss terms, gradients, drafting", "[head]") {
  auto cfg = tiny_head_config(1);
  torch::manual_seed(7);
  auto target = tiny_target();
  head::Eagle1Head head(cfg);
  head.set_target_weights(target.embedding, target.lm_head);
  auto in = tiny_inputs(cfg);
  auto pred = head.predict_features(in);
  CHECK(pred.sizes() == torch::IntArrayRef({2, 10, 16}));
  auto den = denominators(in, 1);
  auto out = head.train_step_forward(in, den);
  CHECK(out.metric_sums.sizes() == torch::IntArrayRef({1, head::kMetricColumns}));
  CHECK(out.metric_sums.index({0, head::kValid}).item<double>() == 12);
  // Independent recomputation of the loss from the predicted features.
  auto next = head::shift_left(in.final_hidden, 1, 0.0);
  auto valid = head::in_document_mask(in.loss_mask, in.document_ids, 0);
  auto fl = torch::smooth_l1_loss(pred, next, at::Reduction::None).mean(-1);
  auto ce = head::soft_cross_entropy(torch::linear(pred, target.lm_head),
                                     torch::softmax(torch::linear(next, target.lm_head), -1));
  auto expect = ((fl + 0.1 * ce) * valid).sum() / 12.0;
  CHECK(out.loss.item<double>() == Approx(expect.item<double>()).epsilon(1e-5));
  out.loss.backward();
  for (const auto& p : head.named_parameters()) {
    INFO(p.key());
    REQUIRE(p.value().grad().defined());
  }
  CHECK_FALSE(target.lm_head.grad().defined());
  auto names = head.named_parameters().keys();
  CHECK(std::find(names.begin(), names.end(), "layers.0.self_attn.q_proj.weight") != names.end());
  CHECK(std::find(names.begin(), names.end(), "layers.0.input_layernorm.weight") == names.end());
  // Drafting: the first token is the LM-head argmax of the last predicted feature.
  auto cache = head.new_cache(1, 16);
  auto one = in;
  for (auto* t : {&one.input_ids, &one.position_ids, &one.document_ids, &one.final_hidden})
    *t = t->narrow(0, 0, 1).narrow(1, 0, 6);
  auto p1 = head.predict_features(one);
  auto drafted = head.draft(cache, one.final_hidden.narrow(1, 0, 5), one.input_ids.narrow(1, 1, 5), 3);
  CHECK(drafted.index({0, 0}).item<std::int64_t>() ==
        torch::linear(p1.index({0, 4}), target.lm_head).argmax().item<std::int64_t>());
}

TEST_CASE("draft vocabulary: most frequent trained ids, ties by lower id, unseen ids fill up", "[head]") {
  data::TokenStats stats;
  stats.trained_token_counts = data::TokenCounts({{1, 5}, {2, 9}, {3, 5}, {5, 7}, {6, 1}});  // 0, 4, 7..9 unseen
  const auto counts = stats.trained_token_counts.entries();
  auto v = head::build_draft_vocab(counts, 10, 4);
  CHECK(v.draft_ids == std::vector<std::int64_t>{1, 2, 3, 5});
  CHECK(torch::equal(v.d2t(), torch::tensor({1, 1, 1, 2}, torch::kInt64)));
  auto t2d = v.t2d();
  CHECK(t2d.sum().item<std::int64_t>() == 4);
  CHECK(t2d[5].item<bool>());
  CHECK_FALSE(t2d[4].item<bool>());
  auto padded = head::build_draft_vocab(counts, 10, 7);  // 5 seen, then unseen 0 and 4 by id
  CHECK(padded.draft_ids == std::vector<std::int64_t>{0, 1, 2, 3, 4, 5, 6});
  CHECK(head::build_draft_vocab(counts, 10, 32000).is_identity());
  CHECK(head::DraftVocab::from_d2t(v.d2t(), 10).draft_ids == v.draft_ids);
  stats.trained_token_counts.add(11);
  CHECK_THROWS_AS(head::build_draft_vocab(stats.trained_token_counts.entries(), 10, 4), eagle::Error);
}

namespace {
// The EAGLE-3 loss and the parameter gradients of one step, on a device and under an autocast dtype.
std::pair<double, std::vector<torch::Tensor>> eagle3_step(torch::Device device, bool bf16_autocast) {
  auto cfg = tiny_head_config(3, 3);
  torch::manual_seed(8);
  auto target = tiny_target();
  head::Eagle3Head head(cfg, tiny_vocab());
  head.set_target_weights(target.embedding.to(device), target.lm_head.to(device));
  head.to(device);
  auto in = tiny_inputs(cfg);
  for (auto* t : {&in.input_ids, &in.loss_mask, &in.position_ids, &in.document_ids, &in.aux_hidden, &in.teacher_logits,
                  &in.target_argmax})
    *t = t->to(device);
  auto den = denominators(in, 3).to(device);
  torch::Tensor loss;
  {
    at::autocast::set_autocast_enabled(device.type(), bf16_autocast);
    at::autocast::set_autocast_dtype(device.type(), torch::kBFloat16);
    loss = head.train_step_forward(in, den).loss;
    at::autocast::set_autocast_enabled(device.type(), false);
    at::autocast::clear_cache();
  }
  loss.backward();
  std::vector<torch::Tensor> grads;
  for (const auto& p : head.parameters()) grads.push_back(p.grad().to(torch::kCPU));
  return {loss.item<double>(), grads};
}
}  // namespace

TEST_CASE("EAGLE-3 step under bf16 autocast stays close to fp32 with fp32 gradients", "[head]") {
  auto [loss32, g32] = eagle3_step(torch::kCPU, false);
  auto [loss16, g16] = eagle3_step(torch::kCPU, true);
  CHECK(std::isfinite(loss16));
  CHECK(loss16 == Approx(loss32).epsilon(0.05));
  for (std::size_t i = 0; i < g16.size(); ++i) {
    CHECK(g16[i].scalar_type() == torch::kFloat32);  // fp32 master weights
    CHECK(g16[i].isfinite().all().item<bool>());
  }
}

TEST_CASE("EAGLE-3 step on CUDA equals CPU; efficient attention on CUDA equals reference", "[head][gpu]") {
  auto [loss_cpu, g_cpu] = eagle3_step(torch::kCPU, false);
  auto [loss_gpu, g_gpu] = eagle3_step(torch::kCUDA, false);
  CHECK(loss_gpu == Approx(loss_cpu).epsilon(1e-4));
  for (std::size_t i = 0; i < g_cpu.size(); ++i) CHECK(torch::allclose(g_gpu[i], g_cpu[i], 1e-3, 1e-5));
  auto [loss_bf16, g_bf16] = eagle3_step(torch::kCUDA, true);
  CHECK(loss_bf16 == Approx(loss_cpu).epsilon(0.05));
}

TEST_CASE("EAGLE-3 step refuses inputs of the wrong shape by name", "[head]") {
  auto cfg = tiny_head_config(3, 2);
  head::Eagle3Head head(cfg, tiny_vocab());
  auto target = tiny_target();
  head.set_target_weights(target.embedding, target.lm_head);
  auto in = tiny_inputs(cfg);
  auto bad = in;
  bad.teacher_logits = torch::randn({2, 10, 40});  // full vocabulary instead of the draft ids
  try {
    head.train_step_forward(bad, torch::ones({2}));
    FAIL("accepted teacher logits over the full vocabulary");
  } catch (const eagle::Error& e) {
    CHECK_THAT(e.format(), Catch::Contains("teacher_logits"));
  }
  CHECK_THROWS_AS(head.train_step_forward(in, torch::ones({3})), eagle::Error);
}

TEST_CASE("a head takes its target's MLP width; every layer MoE without one: 8/3 H rounded up to 256", "[head]") {
  // Qwen3_5MoeTextConfig names no intermediate_size (a zero-wide MLP failed to initialise).
  auto t =
      target::TargetConfig::from_model_dir(std::string(EAGLE_SOURCE_DIR) + "/tests/fixtures/models/tiny-qwen3-5-moe");
  REQUIRE(t.intermediate_size == 0);
  CHECK(head::HeadConfig::from_target(t, 3, {}, 256).intermediate_size == 256);  // 8/3 of 64 is 170
  t.hidden_size = 3072;  // SpecForge's Qwen3.5-122B-A10B draft: 8192
  CHECK(head::HeadConfig::from_target(t, 3, {}, 256).intermediate_size == 8192);
  t.hidden_size = 4096;  // Llama 2 7B's rule: 11008
  CHECK(head::HeadConfig::from_target(t, 1, {}, 256).intermediate_size == 11008);
  t.intermediate_size = 96;
  CHECK(head::HeadConfig::from_target(t, 3, {}, 256).intermediate_size == 96);
}
