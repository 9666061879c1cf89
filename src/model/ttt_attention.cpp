// TTT-step attention: a reference that autograd differentiates, and a recomputing custom autograd
// function that stores no probabilities (see ttt_attention.h).
#include "eagle/model/ttt_attention.h"

#include <algorithm>
#include <limits>

namespace eagle::model {

namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

// Scores of q against each step's diagonal key at the same position: [B, h, T, k] in fp32.
torch::Tensor diag_scores(const torch::Tensor& q, const std::vector<torch::Tensor>& kd, double scale) {
  std::vector<torch::Tensor> s;
  auto qf = q.to(torch::kFloat32);
  for (const auto& k : kd) s.push_back((qf * k.to(torch::kFloat32)).sum(-1, /*keepdim=*/true) * scale);
  return torch::cat(s, -1);
}

}  // namespace

torch::Tensor document_causal_mask(const torch::Tensor& document_ids, std::int64_t t0, std::int64_t tq,
                                   std::int64_t tk) {
  auto opts = torch::TensorOptions().dtype(torch::kInt64).device(document_ids.device());
  auto qpos = torch::arange(t0, t0 + tq, opts).view({1, tq, 1});
  auto kpos = torch::arange(0, tk, opts).view({1, 1, tk});
  auto qdoc = document_ids.narrow(1, t0, tq).unsqueeze(2);
  auto kdoc = document_ids.narrow(1, 0, tk).unsqueeze(1);
  return ((kpos <= qpos) & (qdoc == kdoc)).unsqueeze(1);
}

torch::Tensor ttt_attention_reference(const torch::Tensor& q, const torch::Tensor& k0, const torch::Tensor& v0,
                                      const std::vector<torch::Tensor>& kd, const std::vector<torch::Tensor>& vd,
                                      const torch::Tensor& document_ids, double scale) {
  const auto t = q.size(2);
  auto s0 = torch::matmul(q, k0.transpose(-1, -2)).to(torch::kFloat32) * scale;  // [B, h, T, T]
  s0 = s0.masked_fill(document_causal_mask(document_ids, 0, t, t).logical_not(), kNegInf);
  if (kd.empty()) {
    auto p = torch::softmax(s0, -1);
    return torch::matmul(p.to(v0.scalar_type()), v0).to(q.scalar_type());
  }
  auto p = torch::softmax(torch::cat({s0, diag_scores(q, kd, scale)}, -1), -1);
  auto out = torch::matmul(p.narrow(-1, 0, t).to(v0.scalar_type()), v0).to(torch::kFloat32);
  for (std::size_t j = 0; j < kd.size(); ++j)
    out = out + p.narrow(-1, t + static_cast<std::int64_t>(j), 1) * vd[j].to(torch::kFloat32);
  return out.to(q.scalar_type());
}

namespace {

// The step-0 block of the union softmax, flash-style in tensor ops. Inputs q, k0, v0 and the
// diagonal scores sd [B, h, T, k] (fp32, may have k = 0); outputs o0 = sum_s exp(s_s - lse) v_s
// (fp32, normalised by the union's denominator) and lse = logsumexp over the step-0 scores and sd,
// [B, h, T, 1]. Both outputs are differentiable: the caller adds the diagonal terms
// exp(sd_j - lse) v_j with ordinary autograd ops. The backward recomputes the probabilities one
// query block at a time; causality lets block [t0, t1) read keys [0, t1) only.
struct Block0Attention : public torch::autograd::Function<Block0Attention> {
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx, torch::Tensor q,
                                                torch::Tensor k0, torch::Tensor v0, torch::Tensor sd,
                                                torch::Tensor doc, double scale, std::int64_t chunk) {
    const auto t = q.size(2);
    const bool diag = sd.size(-1) > 0;
    std::vector<torch::Tensor> outs, lses;
    for (std::int64_t t0 = 0; t0 < t; t0 += chunk) {
      const auto c = std::min(chunk, t - t0), t1 = t0 + c;
      auto s0 = torch::matmul(q.narrow(2, t0, c), k0.narrow(2, 0, t1).transpose(-1, -2)).to(torch::kFloat32) * scale;
      s0 = s0.masked_fill(document_causal_mask(doc, t0, c, t1).logical_not(), kNegInf);
      auto lse = diag ? torch::logsumexp(torch::cat({s0, sd.narrow(2, t0, c)}, -1), -1, /*keepdim=*/true)
                      : torch::logsumexp(s0, -1, /*keepdim=*/true);
      outs.push_back(
          torch::matmul(torch::exp(s0 - lse).to(v0.scalar_type()), v0.narrow(2, 0, t1)).to(torch::kFloat32));
      lses.push_back(lse);
    }
    auto o0 = torch::cat(outs, 2);
    auto lse = torch::cat(lses, 2);
    ctx->save_for_backward({q, k0, v0, sd, doc, o0, lse});
    ctx->saved_data["scale"] = scale;
    ctx->saved_data["chunk"] = chunk;
    return {o0, lse};
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto saved = ctx->get_saved_variables();
    auto q = saved[0], k0 = saved[1], v0 = saved[2], sd = saved[3], doc = saved[4], o0 = saved[5], lse = saved[6];
    const double scale = ctx->saved_data["scale"].toDouble();
    const auto chunk = ctx->saved_data["chunk"].toInt();
    const auto t = q.size(2);
    const auto f32 = torch::kFloat32;
    auto g_out = grads[0].defined() ? grads[0].to(f32) : torch::zeros_like(o0);
    auto g_lse = grads[1].defined() ? grads[1].to(f32) : torch::zeros_like(lse);
    // d/ds of the loss for a score s with probability p: p * (dL/dp-part - delta), where
    // delta = G . o0 - g_lse (the softmax normaliser's share, and lse's own gradient).
    auto delta = (g_out * o0).sum(-1, /*keepdim=*/true) - g_lse;  // [B, h, T, 1]
    auto k0f = k0.to(f32), v0f = v0.to(f32);
    auto dq = torch::zeros_like(q, q.options().dtype(f32));
    auto dk0 = torch::zeros_like(k0f), dv0 = torch::zeros_like(v0f);
    for (std::int64_t t0 = 0; t0 < t; t0 += chunk) {
      const auto c = std::min(chunk, t - t0), t1 = t0 + c;
      auto qc = q.narrow(2, t0, c).to(f32);
      auto gc = g_out.narrow(2, t0, c);
      auto kk = k0f.narrow(2, 0, t1), vv = v0f.narrow(2, 0, t1);
      auto s0 = torch::matmul(qc, kk.transpose(-1, -2)) * scale;
      s0 = s0.masked_fill(document_causal_mask(doc, t0, c, t1).logical_not(), kNegInf);
      auto p0 = torch::exp(s0 - lse.narrow(2, t0, c));  // [B, h, c, t1]
      dv0.narrow(2, 0, t1).add_(torch::matmul(p0.transpose(-1, -2), gc));
      auto ds0 = p0 * (torch::matmul(gc, vv.transpose(-1, -2)) - delta.narrow(2, t0, c));
      dq.narrow(2, t0, c).copy_(torch::matmul(ds0, kk) * scale);
      dk0.narrow(2, 0, t1).add_(torch::matmul(ds0.transpose(-1, -2), qc) * scale);
    }
    torch::Tensor dsd;
    if (sd.size(-1) > 0) dsd = -torch::exp(sd - lse) * delta;
    return {dq.to(q.scalar_type()), dk0.to(k0.scalar_type()), dv0.to(v0.scalar_type()), dsd,
            torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor ttt_attention_efficient(const torch::Tensor& q, const torch::Tensor& k0, const torch::Tensor& v0,
                                      const std::vector<torch::Tensor>& kd, const std::vector<torch::Tensor>& vd,
                                      const torch::Tensor& document_ids, double scale,
                                      std::int64_t query_chunk) {
  auto sd = kd.empty() ? torch::zeros({q.size(0), q.size(1), q.size(2), 0}, q.options().dtype(torch::kFloat32))
                       : diag_scores(q, kd, scale);
  auto r = Block0Attention::apply(q, k0, v0, sd, document_ids, scale, std::max<std::int64_t>(1, query_chunk));
  auto out = r[0];
  const auto& lse = r[1];
  for (std::size_t j = 0; j < kd.size(); ++j)
    out = out + torch::exp(sd.narrow(-1, static_cast<std::int64_t>(j), 1) - lse) * vd[j].to(torch::kFloat32);
  return out.to(q.scalar_type());
}

torch::Tensor ttt_attention(TttAttentionImpl impl, const torch::Tensor& q, const torch::Tensor& k0,
                            const torch::Tensor& v0, const std::vector<torch::Tensor>& kd,
                            const std::vector<torch::Tensor>& vd, const torch::Tensor& document_ids, double scale) {
  if (impl == TttAttentionImpl::reference) return ttt_attention_reference(q, k0, v0, kd, vd, document_ids, scale);
  // Query blocks sized so one block's fp32 scores stay near 2^25 elements (128 MiB) whatever B,
  // heads and T are; at least 16 queries per block, at most 256.
  const auto per_query = std::max<std::int64_t>(1, q.size(0) * q.size(1) * q.size(2));
  const auto chunk = std::clamp<std::int64_t>((std::int64_t{1} << 25) / per_query, 16, 256);
  return ttt_attention_efficient(q, k0, v0, kd, vd, document_ids, scale, chunk);
}

}  // namespace eagle::model
