// Attention at the cost of the real work: the device-built offsets of packed rows, the per-document
// CPU path and causal padded rows against a dense document-masked reference, flash attention with a
// differentiable log-sum-exp against the chunked implementation, nothing read back on the host, and
// on a GPU the flash kernels (dense and variable-length) against the CPU.
#include <catch2/catch.hpp>

#include <limits>

#include <torch/torch.h>

#include "eagle/model/attention.h"
#include "eagle/model/layers.h"
#include "host_sync_probe.h"

using namespace eagle;
using model::AttentionLayout;

namespace {

// Dense reference: softmax over the document-causal mask, grouped heads repeated; [B, h, T, d] and
// the log-sum-exp [B, h, T, 1].
std::pair<torch::Tensor, torch::Tensor> reference(const torch::Tensor& q, const torch::Tensor& k,
                                                  const torch::Tensor& v, const torch::Tensor& doc, double scale) {
  const auto t = q.size(2), rep = q.size(1) / k.size(1);
  auto s = torch::matmul(q, model::repeat_kv(k, rep).transpose(-1, -2)) * scale;
  s = s.masked_fill(model::document_causal_mask(doc, 0, t, t).logical_not(), -std::numeric_limits<double>::infinity());
  return {torch::matmul(torch::softmax(s, -1), model::repeat_kv(v, rep)), torch::logsumexp(s, -1, true)};
}

// Two rows of 10: row 0 one sample of 7 then padding; row 1 samples of 3, 4 and 2, then padding.
torch::Tensor two_rows() {
  return torch::tensor({0, 0, 0, 0, 0, 0, 0, -1, -1, -1, 0, 0, 0, 1, 1, 1, 1, 2, 2, -1}, torch::kInt64).view({2, 10});
}
// The same rows padded instead: samples of 7 and 9 tokens, one per row.
torch::Tensor two_padded_rows() {
  return torch::tensor({0, 0, 0, 0, 0, 0, 0, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0, 0, -1}, torch::kInt64).view({2, 10});
}

double max_diff(const torch::Tensor& a, const torch::Tensor& b) {
  REQUIRE(a.sizes() == b.sizes());
  return (a.to(torch::kFloat64) - b.to(torch::kFloat64)).abs().max().item<double>();
}

struct Qkv {
  torch::Tensor q, k, v;
};
Qkv random_qkv(std::int64_t b, std::int64_t h, std::int64_t kvh, std::int64_t t, std::int64_t d,
               torch::Dtype dtype = torch::kFloat64) {
  auto o = torch::TensorOptions().dtype(dtype).requires_grad(true);
  return {torch::randn({b, h, t, d}, o), torch::randn({b, kvh, t, d}, o), torch::randn({b, kvh, t, d}, o)};
}

}  // namespace

TEST_CASE("packed rows: offsets of the document runs are built on the device, one block per row", "[model]") {
  auto doc = two_rows();
  // Row 0: runs [0, 7) and padding [7, 10); row 1: [10, 13), [13, 17), [17, 19), padding [19, 20);
  // 4 slots a row, unused slots repeat the offset (zero-length runs).
  auto cu = model::document_cu_seqlens(doc, 4);
  CHECK(cu.scalar_type() == torch::kInt32);
  CHECK(torch::equal(cu, torch::tensor({0, 7, 10, 10, 10, 13, 17, 19, 20}, torch::kInt32)));
  AttentionLayout layout(doc, {true, 4});
  CHECK(torch::equal(layout.cu_seqlens(), cu));
  std::vector<std::int64_t> segments;  // (row, start, length) each
  for (const auto& s : layout.segments()) segments.insert(segments.end(), {s.row, s.start, s.length});
  CHECK(segments == std::vector<std::int64_t>{0, 0, 7, 0, 7, 3, 1, 0, 3, 1, 3, 4, 1, 7, 2, 1, 9, 1});
  // The default bound is the row length; a padded layout builds no offsets.
  CHECK(AttentionLayout(doc, {}).cu_seqlens().numel() == 2 * 10 + 1);
  CHECK_FALSE(AttentionLayout(doc, {false, 0}).cu_seqlens().defined());
  // More runs than slots is refused, not silently merged (on CPU; the trainer bounds it first).
  CHECK_THROWS(AttentionLayout(doc, {true, 3}));
}

TEST_CASE("layout attention: per document when packed, causal when padded, grouped heads unexpanded", "[model]") {
  torch::manual_seed(3);
  auto doc = two_rows();
  auto x = random_qkv(2, 4, 2, 10, 8);
  torch::NoGradGuard ng;
  auto [want, lse] = reference(x.q, x.k, x.v, doc, 0.35);
  auto packed = model::layout_attention(x.q, x.k, x.v, AttentionLayout(doc, {true, 4}), 0.35);
  CHECK(torch::allclose(packed, want, 1e-10, 1e-10));
  // Padded rows (each row one sample, then padding): exact at the real positions, finite elsewhere.
  auto padded_doc = two_padded_rows();
  auto [want_p, lse_p] = reference(x.q, x.k, x.v, padded_doc, 0.35);
  auto padded = model::layout_attention(x.q, x.k, x.v, AttentionLayout(padded_doc, {false, 0}), 0.35);
  CHECK(torch::allclose(padded[0].narrow(1, 0, 7), want_p[0].narrow(1, 0, 7), 1e-10, 1e-10));
  CHECK(torch::allclose(padded[1].narrow(1, 0, 9), want_p[1].narrow(1, 0, 9), 1e-10, 1e-10));
  CHECK(torch::isfinite(padded).all().item<bool>());
}

TEST_CASE("attention with log-sum-exp: values and gradients of both outputs equal the reference", "[model]") {
  torch::manual_seed(4);
  const auto doc = two_rows();
  for (bool packed : {true, false}) {
    INFO("packed " << packed);
    auto d = packed ? doc : two_padded_rows();
    auto x = random_qkv(2, 4, 2, 10, 8);
    auto [want, want_lse] = reference(x.q, x.k, x.v, d, 0.3);
    const AttentionLayout layout(d, {packed, 0});
    auto flash = model::attention_with_lse(x.q, x.k, x.v, layout, 0.3);
    auto chunked = model::chunked_attention_with_lse(x.q, x.k, x.v, d, 0.3, 3);
    // Weights on both outputs, so the log-sum-exp's gradient path is exercised too; padded rows are
    // compared at their real positions only.
    auto real = (d >= 0).unsqueeze(1).unsqueeze(-1).to(torch::kFloat64);
    auto w = torch::randn_like(want) * real, wl = torch::randn_like(want_lse) * real;
    std::vector<torch::Tensor> inputs{x.q, x.k, x.v};
    auto g_want = torch::autograd::grad({(want * w).sum() + (want_lse * wl).sum()}, inputs);
    // The flash kernels compute in the inputs' precision (double here); the chunked implementation
    // keeps its softmax statistics in fp32.
    for (auto* r : {&flash, &chunked}) {
      const bool exact = r == &flash;
      INFO((exact ? "flash" : "chunked"));
      CHECK(max_diff(r->out * real, want * real) < (exact ? 1e-12 : 1e-6));
      CHECK(max_diff(r->lse * real, want_lse * real) < (exact ? 1e-12 : 1e-6));
      auto g = torch::autograd::grad({(r->out * w).sum() + (r->lse * wl).sum()}, inputs);
      for (std::size_t i = 0; i < 3; ++i) CHECK(max_diff(g[i], g_want[i]) < (exact ? 1e-11 : 1e-5));
    }
  }
}

TEST_CASE("attention layouts and kernels read nothing back on the host", "[model]") {
  torch::manual_seed(5);
  auto doc = two_rows();
  auto x = random_qkv(2, 4, 2, 10, 8, torch::kFloat32);
  eagle::test::HostSyncProbe probe;
  for (bool packed : {true, false}) {
    const AttentionLayout layout(doc, {packed, 4});
    auto r = model::attention_with_lse(x.q, x.k, x.v, layout, 0.3);
    (r.out.sum() + r.lse.sum()).backward();
    model::layout_attention(x.q.detach(), x.k.detach(), x.v.detach(), layout, 0.3);
  }
  INFO(probe.names());
  CHECK(probe.count() == 0);
  // The probe does see a value read back.
  (void)x.q.sum().item<float>();
  CHECK(probe.count() == 1);
}

TEST_CASE("flash attention on CUDA (dense and variable-length) equals the CPU", "[model][gpu]") {
  torch::manual_seed(6);
  // Rows of 256: row 0 one sample of 200 then padding, row 1 documents of 100, 60, 90 and padding.
  auto doc = torch::full({2, 256}, -1, torch::kInt64);
  doc.index_put_({0, torch::indexing::Slice(0, 200)}, 0);
  doc.index_put_({1, torch::indexing::Slice(0, 100)}, 0);
  doc.index_put_({1, torch::indexing::Slice(100, 160)}, 1);
  doc.index_put_({1, torch::indexing::Slice(160, 250)}, 2);
  for (bool packed : {true, false}) {
    INFO("packed " << packed);
    auto d = packed ? doc
                    : torch::where(torch::arange(256).unsqueeze(0).expand({2, 256}) < 200,
                                   torch::zeros({2, 256}, torch::kInt64), torch::full({2, 256}, -1, torch::kInt64));
    auto x = random_qkv(2, 8, 2, 256, 64, torch::kFloat32);
    auto real = (d >= 0).unsqueeze(1).unsqueeze(-1).to(torch::kFloat32);
    auto w = torch::randn({2, 8, 256, 64}) * real, wl = torch::randn({2, 8, 256, 1}) * real;
    const AttentionLayout cpu_layout(d, {packed, 8});
    auto cpu = model::attention_with_lse(x.q, x.k, x.v, cpu_layout, 0.125);
    std::vector<torch::Tensor> inputs{x.q, x.k, x.v};
    auto g_cpu = torch::autograd::grad({(cpu.out * w).sum() + (cpu.lse * wl).sum()}, inputs);

    auto to_gpu = [](const torch::Tensor& t) {
      return t.detach().to(torch::kCUDA, torch::kBFloat16).requires_grad_(true);
    };
    auto q = to_gpu(x.q), k = to_gpu(x.k), v = to_gpu(x.v);
    const AttentionLayout gpu_layout(d.cuda(), {packed, 8});
    eagle::test::HostSyncProbe probe;
    auto gpu = model::attention_with_lse(q, k, v, gpu_layout, 0.125);
    CHECK(gpu.out.scalar_type() == torch::kBFloat16);
    auto g_gpu = torch::autograd::grad({(gpu.out.to(torch::kFloat32) * w.cuda()).sum() + (gpu.lse * wl.cuda()).sum()},
                                       {q, k, v});
    auto fwd = model::layout_attention(q.detach(), k.detach(), v.detach(), gpu_layout, 0.125);
    INFO(probe.names());
    CHECK(probe.count() == 0);
    auto near = [&](const torch::Tensor& a, const torch::Tensor& b, double tol) {
      auto diff = ((a.to(torch::kCPU, torch::kFloat32) - b) * real).abs().max().item<double>();
      INFO("max |diff| " << diff);
      CHECK(diff < tol);
    };
    near(gpu.out, cpu.out, 3e-2);
    near(gpu.lse, cpu.lse, 3e-2);
    near(fwd, cpu.out, 3e-2);
    for (std::size_t i = 0; i < 3; ++i) {
      auto scale = g_cpu[i].abs().max().item<double>();
      auto diff = (g_gpu[i].to(torch::kCPU, torch::kFloat32) - g_cpu[i]).abs().max().item<double>();
      INFO("gradient " << i << ": max |diff| " << diff << " of max " << scale);
      CHECK(diff < 3e-2 * scale + 1e-3);
    }
  }
}
