// One EAGLE-3 draft step alone on CPU (issue 29's shapes): random target features and teacher logits
// of one row of T tokens, a head of hidden 1024, 16 heads, 8 KV heads, intermediate 2816, draft
// vocabulary 8192 (the target's vocabulary too), fp32; each step the trainer's train_step_forward,
// backward, clipping and AdamW (train/optimizer.h). Prints one JSON line: seconds per step (mean of
// the timed steps after one warm-up), the peak extra resident memory above what was resident once
// the inputs, head and optimizer existed (gradients included), and the peak of live LibTorch CPU
// allocations above the same point (a counting allocator). One configuration per process
// (scripts/bench/bench_head_step.sh).
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>

#include <c10/core/CPUAllocator.h>
#include <torch/torch.h>

#include "eagle/head/eagle/eagle3_head.h"
#include "eagle/train/memory_estimate.h"
#include "eagle/train/optimizer.h"

namespace {

long rss_kib() {
  std::ifstream f("/proc/self/statm");
  long pages = 0, resident = 0;
  f >> pages >> resident;
  return resident * (sysconf(_SC_PAGESIZE) / 1024);
}
long peak_rss_kib() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_maxrss;
}

// Live and peak bytes of CPU tensors; forwards to the default allocator.
class CountingAllocator final : public c10::Allocator {
 public:
  explicit CountingAllocator(c10::Allocator* inner) : inner_(inner) {}
  c10::DataPtr allocate(std::size_t n) override {
    auto* ctx = new Context{inner_->allocate(n), n, this};
    const auto now = live_.fetch_add(static_cast<std::int64_t>(n)) + static_cast<std::int64_t>(n);
    auto before = peak_.load();
    while (now > before && !peak_.compare_exchange_weak(before, now)) {
    }
    return {ctx->data.get(), ctx, &release, ctx->data.device()};
  }
  void copy_data(void* dest, const void* src, std::size_t count) const override { default_copy_data(dest, src, count); }
  std::int64_t live() const { return live_; }
  std::int64_t peak() const { return peak_; }
  void reset_peak() { peak_ = live_.load(); }

 private:
  struct Context {
    c10::DataPtr data;
    std::size_t bytes;
    CountingAllocator* owner;
  };
  static void release(void* p) {
    auto* ctx = static_cast<Context*>(p);
    ctx->owner->live_ -= static_cast<std::int64_t>(ctx->bytes);
    delete ctx;
  }
  c10::Allocator* inner_;
  std::atomic<std::int64_t> live_{0}, peak_{0};
};

}  // namespace

int main(int argc, char** argv) {
  using namespace eagle;
  if (argc < 5) {
    std::fprintf(stderr, "usage: %s T K loss_chunk_size kl|tv|lk_hybrid [off|mlp|layer] [timed steps]\n", argv[0]);
    return 2;
  }
  const std::int64_t t = std::stoll(argv[1]), steps = std::stoll(argv[2]), chunk = std::stoll(argv[3]);
  const std::string loss = argv[4];
  const std::string recompute = argc > 5 ? argv[5] : "layer";
  // 0: the first step alone, timed (for the longest rows); -1: the estimator's prediction only.
  const std::int64_t timed = argc > 6 ? std::stoll(argv[6]) : 1;
  auto* counter = new CountingAllocator(c10::GetCPUAllocator());
  c10::SetCPUAllocator(counter, 100);
  torch::manual_seed(0);
  const std::int64_t h = 1024, vd = 8192;
  head::HeadConfig cfg;
  cfg.hidden_size = h;
  cfg.intermediate_size = 2816;
  cfg.num_attention_heads = 16;
  cfg.num_key_value_heads = 8;
  cfg.head_dim = 64;
  cfg.rope.head_dim = 64;
  cfg.max_position_embeddings = t;
  cfg.vocab_size = vd;
  cfg.draft_vocab_size = vd;
  cfg.target_hidden_size = h;
  cfg.target_num_hidden_layers = 16;
  cfg.aux_layer_ids = {2, 8, 13};
  cfg.ttt_steps = steps;
  cfg.loss = head::parse_loss_kind(loss);
  cfg.loss_chunk_size = chunk;
  cfg.recompute = head::parse_recompute_mode(recompute);
  // The estimator's prediction of what is measured here (train/memory_estimate.h): the gradients
  // and AdamW moments, the activations kept for backward and backward's working memory.
  train::StepShape shape;
  shape.head = cfg;
  shape.tokens = t;
  shape.target_element_bytes = 4;
  const auto estimate = train::estimate_step_memory(shape);
  const double mib = 1024.0 * 1024.0;
  const double predicted = estimate.head_step / mib;
  const double predicted_kept = estimate.part("head activations kept for backward").bytes / mib;
  if (timed < 0) {
    std::printf(
        "{\"T\": %lld, \"K\": %lld, \"chunk\": %lld, \"recompute\": \"%s\", \"predicted_mib\": %.0f, "
        "\"predicted_kept_mib\": %.0f}\n",
        static_cast<long long>(t), static_cast<long long>(steps), static_cast<long long>(chunk), recompute.c_str(),
        predicted, predicted_kept);
    return 0;
  }
  head::DraftVocab vocab;
  vocab.target_vocab_size = vd;
  for (std::int64_t i = 0; i < vd; ++i) vocab.draft_ids.push_back(i);
  head::Eagle3Head head(cfg, vocab);
  auto embedding = torch::randn({vd, h}) * 0.02, lm = torch::randn({vd, h}) * 0.02;
  head.init_from_target(embedding, lm);
  head::HeadInputs in;
  in.input_ids = torch::randint(0, vd, {1, t}, torch::kInt64);
  in.document_ids = torch::zeros({1, t}, torch::kInt64);
  in.position_ids = torch::arange(t, torch::kInt64).view({1, t});
  in.loss_mask = torch::ones({1, t}, torch::kUInt8);
  in.aux_hidden = torch::randn({1, t, 3 * h});
  in.teacher_logits = torch::randn({1, t, vd}) * 2;
  in.target_argmax = in.teacher_logits.argmax(-1);
  in.attention.packed = false;
  auto den = torch::full({steps}, static_cast<float>(t));
  std::vector<std::pair<std::string, torch::Tensor>> params;
  for (const auto& p : head.named_parameters()) params.emplace_back(p.key(), p.value());
  train::AdamW opt(params, train::AdamWConfig{0.9, 0.95, 1e-8, 0.0, 0.5});
  opt.set_lr(1e-4);
  std::int64_t kept = 0;  // live bytes after the first forward: what autograd keeps for backward
  const auto live0 = counter->live();
  auto one_step = [&] {
    opt.zero_grad();
    auto out = head.train_step_forward(in, den);
    if (kept == 0) kept = counter->live() - live0;
    out.loss.backward();
    opt.step(out.loss);
    return out.loss.item<double>();
  };
  // The baseline: inputs, head and optimizer made; the peaks cover every step, the first (which
  // allocates the gradients) included; the time is the mean of the steps after it.
  const long base_rss = rss_kib();
  const auto base_live = counter->live();
  counter->reset_peak();
  auto start = std::chrono::steady_clock::now();
  double loss_value = one_step();
  if (timed > 0) start = std::chrono::steady_clock::now();
  for (std::int64_t i = 0; i < timed; ++i) loss_value = one_step();
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() /
                      static_cast<double>(std::max<std::int64_t>(timed, 1));
  std::printf(
      "{\"T\": %lld, \"K\": %lld, \"chunk\": %lld, \"loss\": \"%s\", \"recompute\": \"%s\", \"threads\": %d, "
      "\"seconds\": %.2f, \"peak_extra_rss_mib\": %.0f, \"peak_extra_alloc_mib\": %.0f, \"kept_mib\": %.0f, "
      "\"predicted_mib\": %.0f, \"predicted_kept_mib\": %.0f, \"loss_value\": %.4f}\n",
      static_cast<long long>(t), static_cast<long long>(steps), static_cast<long long>(chunk), loss.c_str(),
      recompute.c_str(), torch::get_num_threads(), secs, static_cast<double>(peak_rss_kib() - base_rss) / 1024.0,
      static_cast<double>(counter->peak() - base_live) / (1024.0 * 1024.0),
      static_cast<double>(kept) / (1024.0 * 1024.0), predicted, predicted_kept, loss_value);
  return 0;
}
