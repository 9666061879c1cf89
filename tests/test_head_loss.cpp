// The losses of the draft head (kl, tv, lk_hybrid) against a PyTorch reference, the fused chunked
// output layer and loss against the unchunked path (values, metrics and gradients), under bf16
// autocast, and the peak allocation of a head step at long-T cases (the chunked loss; recomputed
// activations).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <mutex>
#include <unordered_map>

#include <c10/core/CPUAllocator.h>

#include "eagle/head/fused_loss.h"
#include "eagle/head/loss.h"
#include "eagle/model/safetensors.h"
#include "eagle/util/error.h"
#include "head_fixtures.h"
#include "helpers.h"

using namespace eagle;
using namespace eagle::test;

namespace {

const head::LossKind kKinds[] = {head::LossKind::kl, head::LossKind::tv, head::LossKind::lk_hybrid};

// One train_step_forward and backward of a fresh tiny head (same seed, so the same weights).
HeadRun run_head(head::LossKind kind, std::int64_t chunk, const head::HeadInputs& in, bool packed = true,
                 bool bf16 = false) {
  auto cfg = tiny_head_config(3, 3);
  cfg.loss = kind;
  cfg.loss_chunk_size = chunk;
  torch::manual_seed(11);
  auto target = tiny_target();
  head::Eagle3Head head(cfg, tiny_vocab());
  head.init_from_target(target.embedding, target.lm_head);
  auto inputs = in;
  inputs.attention.packed = packed;
  return step_and_backward(head, inputs, bf16);
}

// Counts the bytes of live CPU tensors (every CPU allocation goes through GetCPUAllocator) and the
// peak since reset, forwarding to the default allocator. The data pointers stay simple (context ==
// data, as raw_allocate requires); the sizes are kept beside them.
class CountingAllocator final : public c10::Allocator {
 public:
  c10::DataPtr allocate(std::size_t n) override {
    void* p = inner()->raw_allocate(n);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      sizes_[p] = n;
      live_ += static_cast<std::int64_t>(n);
      peak_ = std::max(peak_, live_);
    }
    return {p, p, &release, c10::Device(c10::DeviceType::CPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &release; }
  void copy_data(void* dest, const void* src, std::size_t count) const override { default_copy_data(dest, src, count); }
  void reset_peak() {
    std::lock_guard<std::mutex> lock(mutex_);
    peak_ = live_;
  }
  std::int64_t live() {
    std::lock_guard<std::mutex> lock(mutex_);
    return live_;
  }
  std::int64_t peak() {
    std::lock_guard<std::mutex> lock(mutex_);
    return peak_;
  }
  // Installs the counter for the guard's scope (tensors made meanwhile are released through it later).
  struct Installed {
    Installed() {
      inner();  // the default allocator, taken before the counter replaces it
      c10::SetCPUAllocator(&instance(), 100);
    }
    ~Installed() { c10::SetCPUAllocator(inner(), 100); }
  };
  static CountingAllocator& instance() {
    static CountingAllocator a;
    return a;
  }

 private:
  static c10::Allocator* inner() {
    static c10::Allocator* a = c10::GetCPUAllocator();  // the default, before any install
    return a;
  }
  static void release(void* p) {
    auto& self = instance();
    {
      std::lock_guard<std::mutex> lock(self.mutex_);
      auto it = self.sizes_.find(p);
      if (it != self.sizes_.end()) {
        self.live_ -= static_cast<std::int64_t>(it->second);
        self.sizes_.erase(it);
      }
    }
    inner()->raw_deleter()(p);
  }
  std::mutex mutex_;
  std::unordered_map<void*, std::size_t> sizes_;
  std::int64_t live_ = 0, peak_ = 0;
};

// The draft vocabulary that is the whole target vocabulary [0, vd).
head::DraftVocab identity_vocab(std::int64_t vd) {
  head::DraftVocab vocab;
  vocab.target_vocab_size = vd;
  for (std::int64_t i = 0; i < vd; ++i) vocab.draft_ids.push_back(i);
  return vocab;
}

// One row of t random tokens, every position trained, aux features of width aux and teacher
// logits over vd (the long-T peak tests), drawn in this order from the current seed.
head::HeadInputs long_row_inputs(std::int64_t t, std::int64_t vd, std::int64_t aux) {
  head::HeadInputs in;
  in.input_ids = torch::randint(0, vd, {1, t}, torch::kInt64);
  in.document_ids = torch::zeros({1, t}, torch::kInt64);
  in.position_ids = torch::arange(t, torch::kInt64).view({1, t});
  in.loss_mask = torch::ones({1, t}, torch::kUInt8);
  in.aux_hidden = torch::randn({1, t, aux});
  in.teacher_logits = torch::randn({1, t, vd});
  in.target_argmax = torch::randint(0, vd, {1, t}, torch::kInt64);
  return in;
}

}  // namespace

TEST_CASE("each loss and its gradients equal the PyTorch reference, chunked or not", "[head]") {
  // Fixture from scripts/make_loss_reference.py: B 2, T 9, H 8, V_d 11, teacher shifted by 2.
  const auto ref =
      model::load_safetensors(std::string(EAGLE_SOURCE_DIR) + "/tests/fixtures/reference/losses.safetensors");
  const auto valid = ref.at("valid").to(torch::kBool);
  const auto scale = torch::tensor(0.7f);
  for (auto kind : kKinds) {
    const auto name = head::loss_name(kind);
    CHECK(head::parse_loss_kind(name) == kind);
    for (std::int64_t chunk : {0, 1, 4, 7, 18, 1000}) {
      INFO(name << " chunk " << chunk);
      auto o = ref.at("o").clone().requires_grad_();
      auto w = ref.at("lm_head").clone().requires_grad_();
      auto out = head::step_loss(kind, o, w, ref.at("teacher_logits"), 2, valid, scale, chunk);
      CHECK(out.weighted.item<double>() == Approx(ref.at(name + ".loss").item<double>()).epsilon(1e-5));
      auto pos_ref = ref.at(name + ".position_loss");
      CHECK(torch::allclose(out.position_loss.masked_select(valid), pos_ref.masked_select(valid), 1e-5, 1e-6));
      CHECK(torch::equal(out.argmax, ref.at("argmax")));
      CHECK_FALSE(out.position_loss.requires_grad());
      out.weighted.backward();
      CHECK(torch::allclose(o.grad(), ref.at(name + ".grad_o"), 1e-4, 1e-6));
      CHECK(torch::allclose(w.grad(), ref.at(name + ".grad_lm_head"), 1e-4, 1e-6));
      // A frozen LM head (the MTP head's: the target's own): the same loss and gradient of o, none for it
      // (the same up to float rounding: the sums run in another order on some CPUs, 4e-7 relative seen).
      auto o2 = ref.at("o").clone().requires_grad_();
      auto frozen = head::step_loss(kind, o2, ref.at("lm_head"), ref.at("teacher_logits"), 2, valid, scale, chunk);
      CHECK(frozen.weighted.item<double>() == Approx(out.weighted.item<double>()).epsilon(2e-6));
      frozen.weighted.backward();
      CHECK(torch::allclose(o2.grad(), o.grad(), 1e-6, 1e-7));
    }
  }
  CHECK_THROWS_AS(head::parse_loss_kind("js"), Error);
}

TEST_CASE("TV of equal distributions is 0 and LK-hybrid is KL where they do not overlap", "[head]") {
  auto logits = torch::tensor({{1.0f, 2.0f, 3.0f}, {30.0f, 0.0f, 0.0f}});
  auto p = torch::softmax(torch::tensor({{1.0f, 2.0f, 3.0f}, {0.0f, 0.0f, 30.0f}}), -1);
  auto tv = head::position_loss(head::LossKind::tv, logits, p);
  CHECK(tv[0].item<double>() == Approx(0).margin(1e-6));
  CHECK(tv[1].item<double>() == Approx(1).margin(1e-6));
  auto lk = head::position_loss(head::LossKind::lk_hybrid, logits, p);
  auto ce = head::position_loss(head::LossKind::kl, logits, p);
  CHECK(lk[0].item<double>() == Approx(0).margin(1e-5));  // KL 0, TV 0
  // alpha ~ 0: lambda ~ 1, the loss is KL = CE - H(p).
  auto entropy = -(p[1] * p[1].log()).sum().item<double>();
  CHECK(lk[1].item<double>() == Approx(ce[1].item<double>() - entropy).epsilon(1e-4));
}

TEST_CASE("the chunked head step equals the unchunked one for every loss, padded and packed rows", "[head]") {
  torch::manual_seed(3);
  auto in = tiny_inputs(tiny_head_config(3, 3));  // row 0 one sample then padding, row 1 two samples
  for (auto kind : kKinds) {
    for (bool packed : {true, false}) {
      auto full = run_head(kind, 0, in, packed);
      CHECK(std::isfinite(full.loss));
      for (std::int64_t chunk : {1, 3, 7, 20, 64}) {
        INFO(head::loss_name(kind) << " packed " << packed << " chunk " << chunk);
        check_same(run_head(kind, chunk, in, packed), full, 1e-5, 1e-6);
      }
    }
  }
  // The losses differ from one another (the option does something).
  CHECK(run_head(head::LossKind::tv, 7, in).loss != Approx(run_head(head::LossKind::kl, 7, in).loss));
}

TEST_CASE("the chunked head step under bf16 autocast stays close to the unchunked one", "[head]") {
  torch::manual_seed(3);
  auto in = tiny_inputs(tiny_head_config(3, 3));
  for (auto kind : kKinds) {
    INFO(head::loss_name(kind));
    auto full = run_head(kind, 0, in, true, true);
    auto chunked = run_head(kind, 7, in, true, true);
    CHECK(std::isfinite(chunked.loss));
    CHECK(chunked.loss == Approx(full.loss).epsilon(0.02));
    CHECK(torch::allclose(chunked.metrics.narrow(1, 0, 4), full.metrics.narrow(1, 0, 4)));
    for (std::size_t i = 0; i < full.grads.size(); ++i) {
      CHECK(chunked.grads[i].scalar_type() == torch::kFloat32);
      CHECK(torch::allclose(chunked.grads[i], full.grads[i], 0.05, 0.02));
    }
  }
}

TEST_CASE("a long-T head step never holds a [T, V_d] fp32 tensor with the chunked loss", "[head]") {
  // T 1024, V_d 4096, H 16, K 3: one [T, V_d] fp32 tensor is 16 MiB; the unchunked path keeps
  // several per step for backward. The bound is one such tensor above what was live before.
  const std::int64_t t = 1024, vd = 4096;
  auto cfg = tiny_head_config(3, 3);
  cfg.vocab_size = vd;
  cfg.draft_vocab_size = vd;
  const auto vocab = identity_vocab(vd);
  torch::manual_seed(2);
  auto target = tiny_target(vd, 16);
  const auto in = long_row_inputs(t, vd, 48);
  const auto den = torch::full({3}, 1000.0f);
  const std::int64_t full_bytes = t * vd * 4;
  auto& counter = CountingAllocator::instance();
  CountingAllocator::Installed installed;
  auto peak_of = [&](head::LossKind kind, std::int64_t chunk) {
    cfg.loss = kind;
    cfg.loss_chunk_size = chunk;
    head::Eagle3Head head(cfg, vocab);
    head.init_from_target(target.embedding, target.lm_head);
    counter.reset_peak();
    const auto before = counter.live();
    auto out = head.train_step_forward(in, den);
    out.loss.backward();
    return counter.peak() - before;
  };
  for (auto kind : kKinds) {
    INFO(head::loss_name(kind));
    const auto chunked = peak_of(kind, 64);
    const auto unchunked = peak_of(kind, 0);
    INFO("peak extra bytes: chunked " << chunked << ", unchunked " << unchunked << ", bound " << full_bytes);
    CHECK(chunked < full_bytes);
    CHECK(unchunked > 3 * full_bytes);  // the bound catches a [T, V_d] tensor per step
  }
}

TEST_CASE("a long-T head step with recomputed activations keeps no K copies of the MLP's", "[head]") {
  // T 512, H 64, I 512, K 6, a small V_d: the layer's activations dominate. One [T, I] fp32 tensor is
  // 1 MiB; keeping every step's MLP activations (four [T, I] per step, recompute_activations off)
  // takes 4 K of them. Recomputed, a step keeps a few [T, H] tensors and backward remakes one step at
  // a time: the bound is 3 K [T, I] above what was live before (off must exceed 4 K).
  const std::int64_t t = 512, vd = 64, k = 6;
  auto cfg = tiny_head_config(3, k);
  cfg.hidden_size = cfg.target_hidden_size = 64;
  cfg.intermediate_size = 512;
  cfg.num_attention_heads = 4;
  cfg.num_key_value_heads = 2;
  cfg.head_dim = cfg.rope.head_dim = 16;
  cfg.vocab_size = cfg.draft_vocab_size = vd;
  const auto vocab = identity_vocab(vd);
  torch::manual_seed(2);
  auto target = tiny_target(vd, 64);
  const auto in = long_row_inputs(t, vd, 3 * 64);
  const auto den = torch::full({k}, 500.0f);
  const std::int64_t mlp_bytes = t * cfg.intermediate_size * 4;
  auto& counter = CountingAllocator::instance();
  CountingAllocator::Installed installed;
  auto peak_of = [&](head::RecomputeMode mode) {
    cfg.recompute = mode;
    head::Eagle3Head head(cfg, vocab);
    head.init_from_target(target.embedding, target.lm_head);
    counter.reset_peak();
    const auto before = counter.live();
    auto out = head.train_step_forward(in, den);
    out.loss.backward();
    return counter.peak() - before;
  };
  const auto off = peak_of(head::RecomputeMode::off);
  const auto mlp = peak_of(head::RecomputeMode::mlp);
  const auto layer = peak_of(head::RecomputeMode::layer);
  INFO("peak extra bytes: off " << off << ", mlp " << mlp << ", layer " << layer << ", [T, I] " << mlp_bytes);
  CHECK(off > 4 * k * mlp_bytes);  // the bound below catches the K copies coming back
  CHECK(layer < 3 * k * mlp_bytes);
  CHECK(mlp < 3 * k * mlp_bytes);
  CHECK(layer < mlp);  // the pre-attention half recomputed too
}
