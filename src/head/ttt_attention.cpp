// TTT-step attention: a reference that autograd differentiates, and the efficient form that merges
// the diagonal keys into the step-0 attention's softmax through its log-sum-exp (see
// ttt_attention.h).
#include "eagle/head/ttt_attention.h"

#include <limits>

#include "eagle/model/layers.h"

namespace eagle::head {

namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

// x [B, kv_heads, T, d] seen per query head as [B, kv_heads, 1, T, d] against [B, kv_heads, rep, T, .].
torch::Tensor grouped(const torch::Tensor& x) { return x.unsqueeze(2); }
torch::Tensor by_group(const torch::Tensor& x, std::int64_t kv_heads) {
  return x.view({x.size(0), kv_heads, x.size(1) / kv_heads, x.size(2), x.size(3)});
}

// Scores of q against each step's diagonal key at the same position: [B, h, T, k] in fp32.
torch::Tensor diag_scores(const torch::Tensor& q, const std::vector<torch::Tensor>& kd, double scale) {
  const auto kv_heads = kd.front().size(1);
  auto qf = by_group(q.to(torch::kFloat32), kv_heads);  // [B, kvh, rep, T, d]
  std::vector<torch::Tensor> s;
  for (const auto& k : kd) s.push_back((qf * grouped(k.to(torch::kFloat32))).sum(-1).flatten(1, 2).unsqueeze(-1));
  return torch::cat(s, -1) * scale;
}

// sum_j w[..., j] * vd[j]: weights [B, h, T, k] fp32, values [B, kv_heads, T, d] -> [B, h, T, d] fp32.
torch::Tensor diag_values(const torch::Tensor& w, const std::vector<torch::Tensor>& vd) {
  const auto kv_heads = vd.front().size(1);
  torch::Tensor out;
  for (std::size_t j = 0; j < vd.size(); ++j) {
    auto term = by_group(w.narrow(-1, static_cast<std::int64_t>(j), 1), kv_heads) * grouped(vd[j].to(torch::kFloat32));
    out = out.defined() ? out + term : term;
  }
  return out.flatten(1, 2);
}

}  // namespace

torch::Tensor ttt_attention_reference(const torch::Tensor& q, const torch::Tensor& k0, const torch::Tensor& v0,
                                      const std::vector<torch::Tensor>& kd, const std::vector<torch::Tensor>& vd,
                                      const model::AttentionLayout& layout, double scale) {
  const auto t = q.size(2), rep = q.size(1) / k0.size(1);
  auto s0 = torch::matmul(q, model::repeat_kv(k0, rep).transpose(-1, -2)).to(torch::kFloat32) * scale;  // [B, h, T, T]
  s0 = s0.masked_fill(model::document_causal_mask(layout.document_ids(), 0, t, t).logical_not(), kNegInf);
  const auto v = model::repeat_kv(v0, rep);
  if (kd.empty()) return torch::matmul(torch::softmax(s0, -1).to(v.scalar_type()), v).to(q.scalar_type());
  auto p = torch::softmax(torch::cat({s0, diag_scores(q, kd, scale)}, -1), -1);
  auto out = torch::matmul(p.narrow(-1, 0, t).to(v.scalar_type()), v).to(torch::kFloat32);
  return (out + diag_values(p.narrow(-1, t, static_cast<std::int64_t>(kd.size())), vd)).to(q.scalar_type());
}

torch::Tensor ttt_attention_efficient(const torch::Tensor& q, const torch::Tensor& k0, const torch::Tensor& v0,
                                      const std::vector<torch::Tensor>& kd, const std::vector<torch::Tensor>& vd,
                                      const model::AttentionLayout& layout, double scale) {
  if (kd.empty()) return model::attention_with_lse(q, k0, v0, layout, scale).out;
  // One softmax over the step-0 keys and the diagonal ones: the step-0 block's output is
  // renormalised by exp(lse0 - lse), each diagonal value weighted by exp(sd_j - lse).
  auto block0 = model::attention_with_lse(q, k0, v0, layout, scale);
  auto sd = diag_scores(q, kd, scale);
  auto lse = torch::logsumexp(torch::cat({block0.lse, sd}, -1), -1, /*keepdim=*/true);
  auto out = torch::exp(block0.lse - lse) * block0.out.to(torch::kFloat32) + diag_values(torch::exp(sd - lse), vd);
  return out.to(q.scalar_type());
}

torch::Tensor ttt_attention(TttAttentionImpl impl, const torch::Tensor& q, const torch::Tensor& k0,
                            const torch::Tensor& v0, const std::vector<torch::Tensor>& kd,
                            const std::vector<torch::Tensor>& vd, const model::AttentionLayout& layout, double scale) {
  if (impl == TttAttentionImpl::reference) return ttt_attention_reference(q, k0, v0, kd, vd, layout, scale);
  return ttt_attention_efficient(q, k0, v0, kd, vd, layout, scale);
}

}  // namespace eagle::head
