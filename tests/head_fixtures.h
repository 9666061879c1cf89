// Small random heads and inputs for the [head] tests: random tensors stand in for the target's
// features (legitimate inputs of the head), with hand-built token ids and document layouts.
#pragma once

#include <ATen/autocast_mode.h>
#include <torch/torch.h>
#include <catch2/catch.hpp>

#include <map>
#include <string>

#include "eagle/head/eagle/eagle1_head.h"
#include "eagle/head/eagle/eagle3_head.h"

namespace eagle::test {

inline head::HeadConfig tiny_head_config(std::int64_t version, std::int64_t steps = 3) {
  head::HeadConfig c;
  c.eagle_version = version;
  c.hidden_size = 16;
  c.intermediate_size = 32;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = 4;
  c.rope.head_dim = 4;
  c.vocab_size = 40;
  c.draft_vocab_size = version == 3 ? 12 : 40;
  c.target_hidden_size = 16;
  c.target_num_hidden_layers = 8;
  c.aux_layer_ids = version == 3 ? std::vector<std::int64_t>{2, 4, 5} : std::vector<std::int64_t>{};
  c.ttt_steps = steps;
  c.target_name_or_path = "tests/tiny";
  c.target_architecture = "LlamaForCausalLM";
  return c;
}

// Draft ids: every third target id (0, 3, ..., 33), so d2t is not zero and t2d not all true.
inline head::DraftVocab tiny_vocab() {
  head::DraftVocab v;
  v.target_vocab_size = 40;
  for (std::int64_t i = 0; i < 12; ++i) v.draft_ids.push_back(3 * i);
  return v;
}

struct TinyTarget {
  torch::Tensor embedding, lm_head;  // [V, H]
};

inline TinyTarget tiny_target(std::int64_t v = 40, std::int64_t h = 16) {
  return {torch::randn({v, h}), torch::randn({v, h}) * 0.3};
}

// Two rows of length 10: row 0 holds one sample of 8 tokens then padding; row 1 packs samples of
// 4 and 6 tokens. Features and teacher logits random; target_argmax mostly in the draft vocabulary.
inline head::HeadInputs tiny_inputs(const head::HeadConfig& cfg) {
  head::HeadInputs in;
  const std::int64_t b = 2, t = 10;
  in.input_ids = torch::randint(0, cfg.vocab_size, {b, t}, torch::kInt64);
  in.document_ids =
      torch::tensor({0, 0, 0, 0, 0, 0, 0, 0, -1, -1, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1}, torch::kInt64).view({b, t});
  in.position_ids =
      torch::tensor({0, 1, 2, 3, 4, 5, 6, 7, 0, 0, 0, 1, 2, 3, 0, 1, 2, 3, 4, 5}, torch::kInt64).view({b, t});
  in.loss_mask = (in.document_ids >= 0).to(torch::kUInt8);
  in.loss_mask.index_put_({0, 1}, 0);
  in.aux_hidden = torch::randn({b, t, 3 * cfg.target_hidden_size});
  in.final_hidden = torch::randn({b, t, cfg.hidden_size});
  in.teacher_logits = torch::randn({b, t, cfg.draft_vocab_size}) * 2;
  in.target_argmax = torch::randint(0, 12, {b, t}, torch::kInt64) * 3;
  in.target_argmax.index_put_({1, 3}, 4);  // not a draft id
  return in;
}

// Drafts 3 tokens after a random prefix of 6 and checks that the TTT unroll over the prefix followed
// by the drafted tokens predicts each of them at the prefix's last position (Catch2 checks). Returns
// the drafted tokens [1, 3] and leaves the prefix in cache.
inline torch::Tensor check_drafting_matches_unroll(head::Eagle3Head& head, head::DraftCache& cache,
                                                   const torch::Tensor& feats, const torch::Tensor& ids) {
  const auto n = feats.size(1);
  auto drafted = head.draft(cache, feats, ids.narrow(1, 1, n), 3);
  REQUIRE(drafted.sizes() == torch::IntArrayRef({1, 3}));
  head::HeadInputs in;
  const auto t = n + 3;
  in.input_ids = torch::cat({ids, drafted.narrow(1, 0, 2)}, 1);
  in.position_ids = torch::arange(t, torch::kInt64).unsqueeze(0);
  in.document_ids = torch::zeros({1, t}, torch::kInt64);
  in.aux_hidden = torch::cat({feats, torch::randn({1, 3, feats.size(2)})}, 1);
  auto logits = head.ttt_logits(in);
  for (std::int64_t k = 0; k < 3; ++k) {
    auto id = head.draft_ids.index({logits[static_cast<std::size_t>(k)].index({0, n - 1}).argmax()});
    CHECK(id.item<std::int64_t>() == drafted.index({0, k}).item<std::int64_t>());
  }
  return drafted;
}

// A loaded head re-made with 3 TTT steps (weights copied) against an independent PyTorch forward's
// logits (scripts/make_head_reference.py: inputs input_ids, position_ids, document_ids, aux_hidden,
// embedding; logits_k per step).
inline void check_head_against_reference(head::DraftHead& loaded, const head::HeadConfig& config,
                                         std::map<std::string, torch::Tensor> ref) {
  auto cfg = config;
  cfg.ttt_steps = 3;
  auto& src = dynamic_cast<head::Eagle3Head&>(loaded);
  head::Eagle3Head three(cfg, src.vocab());
  {
    torch::NoGradGuard ng;
    auto from = src.named_parameters();
    for (auto& p : three.named_parameters()) p.value().copy_(from[p.key()]);
  }
  three.set_target_weights(ref["embedding"], ref["embedding"]);
  head::HeadInputs in;
  in.input_ids = ref["input_ids"];
  in.position_ids = ref["position_ids"];
  in.document_ids = ref["document_ids"];
  in.aux_hidden = ref["aux_hidden"];
  auto logits = three.ttt_logits(in);
  for (std::size_t k = 0; k < 3; ++k) {
    INFO("step " << k);
    CHECK(torch::allclose(logits[k], ref["logits_" + std::to_string(k)], 1e-4, 1e-4));
  }
}

// The export name of a parameter (layers 1..n-1 are extra_layers.{l-1} inside the head).
inline std::string export_name(const std::string& key) {
  const std::string extra = "extra_layers.";
  if (key.rfind(extra, 0) != 0) return key;
  const auto dot = key.find('.', extra.size());
  return "layers." + std::to_string(std::stoll(key.substr(extra.size(), dot - extra.size())) + 1) + key.substr(dot);
}

// One training step of a loaded head re-made with 3 TTT steps and decay 0.8 against the reference's
// (make_head_reference.py with_loss: teacher_logits, loss_mask, target_argmax, denominators, loss,
// grad.<name> of every parameter): the loss and every gradient, with each recompute_activations mode.
inline void check_train_step_against_reference(head::DraftHead& loaded, const head::HeadConfig& config,
                                               std::map<std::string, torch::Tensor> ref) {
  for (auto mode : {head::RecomputeMode::off, head::RecomputeMode::mlp, head::RecomputeMode::layer}) {
    INFO("recompute_activations " << head::recompute_mode_name(mode));
    auto cfg = config;
    cfg.recompute = mode;
    cfg.ttt_steps = 3;
    cfg.ttt_loss_decay = 0.8;
    auto& src = dynamic_cast<head::Eagle3Head&>(loaded);
    head::Eagle3Head head(cfg, src.vocab());
    {
      torch::NoGradGuard ng;
      auto from = src.named_parameters();
      for (auto& p : head.named_parameters()) p.value().copy_(from[p.key()]);
    }
    head.set_target_weights(ref["embedding"], ref["embedding"]);
    head::HeadInputs in;
    for (auto [t, name] : {std::pair{&in.input_ids, "input_ids"},
                           {&in.position_ids, "position_ids"},
                           {&in.document_ids, "document_ids"},
                           {&in.aux_hidden, "aux_hidden"},
                           {&in.loss_mask, "loss_mask"},
                           {&in.teacher_logits, "teacher_logits"},
                           {&in.target_argmax, "target_argmax"}})
      *t = ref.at(name);
    auto out = head.train_step_forward(in, ref["denominators"]);
    CHECK(out.loss.item<double>() == Approx(ref["loss"].item<double>()).epsilon(1e-5));
    out.loss.backward();
    std::size_t grads = 0;
    for (const auto& [name, t] : ref) grads += name.rfind("grad.", 0) == 0;
    std::size_t compared = 0;
    for (auto& p : head.named_parameters()) {
      INFO(p.key());
      REQUIRE(ref.count("grad." + export_name(p.key())));
      CHECK(torch::allclose(p.value().grad(), ref["grad." + export_name(p.key())], 1e-4, 1e-5));
      ++compared;
    }
    CHECK(compared == grads);  // every reference gradient has its parameter
  }
}

// One head step's results, to compare two ways of computing it: the loss, the metric sums and
// every parameter's gradient.
struct HeadRun {
  double loss = 0;
  torch::Tensor metrics;
  std::vector<torch::Tensor> grads;
};

// train_step_forward of in (under bf16 autocast when asked; denominators 7, 6, 5 for three TTT
// steps) and backward; every parameter must get a gradient.
inline HeadRun step_and_backward(head::Eagle3Head& head, const head::HeadInputs& in, bool bf16) {
  at::autocast::set_autocast_enabled(torch::kCPU, bf16);
  at::autocast::set_autocast_dtype(torch::kCPU, torch::kBFloat16);
  auto out = head.train_step_forward(in, torch::tensor({7.0f, 6.0f, 5.0f}));
  at::autocast::set_autocast_enabled(torch::kCPU, false);
  at::autocast::clear_cache();
  out.loss.backward();
  HeadRun r{out.loss.item<double>(), out.metric_sums, {}};
  for (const auto& p : head.parameters()) {
    REQUIRE(p.grad().defined());
    r.grads.push_back(p.grad().clone());
  }
  return r;
}

inline void check_same(const HeadRun& a, const HeadRun& b, double rtol, double atol) {
  CHECK(a.loss == Approx(b.loss).epsilon(rtol));
  CHECK(torch::allclose(a.metrics, b.metrics, rtol, atol));
  REQUIRE(a.grads.size() == b.grads.size());
  for (std::size_t i = 0; i < a.grads.size(); ++i) {
    INFO("parameter " << i);
    CHECK(torch::allclose(a.grads[i], b.grads[i], rtol, atol));
  }
}

}  // namespace eagle::test
