// TTT-step attention: a reference that autograd differentiates, and a recomputing custom autograd
// function that stores no probabilities (see ttt_attention.h).
#include "eagle/model/ttt_attention.h"

#include <algorithm>
#include <limits>

namespace eagle::model {

namespace {

using torch::indexing::Slice;
constexpr double kNegInf = -std::numeric_limits<double>::infinity();

bool has_diag(const torch::Tensor& kd) { return kd.defined() && kd.dim() == 5 && kd.size(3) > 0; }

// Scores of queries [B, h, c, d] against diagonal keys [B, h, c, k, d] -> [B, h, c, k] in fp32.
torch::Tensor diag_scores(const torch::Tensor& q, const torch::Tensor& kd, double scale) {
  return (q.unsqueeze(3).to(torch::kFloat32) * kd.to(torch::kFloat32)).sum(-1) * scale;
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
                                      const torch::Tensor& kd, const torch::Tensor& vd,
                                      const torch::Tensor& document_ids, double scale) {
  const auto t = q.size(2);
  auto s0 = torch::matmul(q, k0.transpose(-1, -2)).to(torch::kFloat32) * scale;  // [B, h, T, T]
  s0 = s0.masked_fill(document_causal_mask(document_ids, 0, t, t).logical_not(), kNegInf);
  if (!has_diag(kd)) {
    auto p = torch::softmax(s0, -1);
    return torch::matmul(p.to(v0.scalar_type()), v0).to(q.scalar_type());
  }
  auto sd = diag_scores(q, kd, scale);  // [B, h, T, k]
  auto p = torch::softmax(torch::cat({s0, sd}, -1), -1);
  auto p0 = p.narrow(-1, 0, t), pd = p.narrow(-1, t, kd.size(3));
  auto out = torch::matmul(p0.to(v0.scalar_type()), v0).to(torch::kFloat32) +
             (pd.unsqueeze(-1) * vd.to(torch::kFloat32)).sum(3);
  return out.to(q.scalar_type());
}

namespace {

// Flash-style attention in tensor ops: forward keeps the log-sum-exp per query, backward recomputes
// the probabilities one query block at a time. Causality lets block [t0, t1) read keys [0, t1) only.
struct TttAttentionFunction : public torch::autograd::Function<TttAttentionFunction> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, torch::Tensor q, torch::Tensor k0,
                               torch::Tensor v0, torch::Tensor kd, torch::Tensor vd, torch::Tensor doc,
                               double scale, std::int64_t chunk) {
    const auto t = q.size(2);
    const bool diag = has_diag(kd);
    std::vector<torch::Tensor> outs, lses;
    for (std::int64_t t0 = 0; t0 < t; t0 += chunk) {
      const auto c = std::min(chunk, t - t0), t1 = t0 + c;
      auto qc = q.narrow(2, t0, c);
      auto s0 = torch::matmul(qc, k0.narrow(2, 0, t1).transpose(-1, -2)).to(torch::kFloat32) * scale;
      s0 = s0.masked_fill(document_causal_mask(doc, t0, c, t1).logical_not(), kNegInf);
      torch::Tensor sd, lse;
      if (diag) {
        sd = diag_scores(qc, kd.narrow(2, t0, c), scale);
        lse = torch::logsumexp(torch::cat({s0, sd}, -1), -1, /*keepdim=*/true);
      } else {
        lse = torch::logsumexp(s0, -1, /*keepdim=*/true);
      }
      auto out = torch::matmul(torch::exp(s0 - lse).to(v0.scalar_type()), v0.narrow(2, 0, t1)).to(torch::kFloat32);
      if (diag) out = out + (torch::exp(sd - lse).unsqueeze(-1) * vd.narrow(2, t0, c).to(torch::kFloat32)).sum(3);
      outs.push_back(out);
      lses.push_back(lse);
    }
    auto out = torch::cat(outs, 2);
    auto lse = torch::cat(lses, 2);
    ctx->save_for_backward({q, k0, v0, kd, vd, doc, out, lse});
    ctx->saved_data["scale"] = scale;
    ctx->saved_data["chunk"] = chunk;
    ctx->saved_data["diag"] = diag;
    return out.to(q.scalar_type());
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto saved = ctx->get_saved_variables();
    auto q = saved[0], k0 = saved[1], v0 = saved[2], kd = saved[3], vd = saved[4], doc = saved[5];
    auto out = saved[6], lse = saved[7];
    const double scale = ctx->saved_data["scale"].toDouble();
    const auto chunk = ctx->saved_data["chunk"].toInt();
    const bool diag = ctx->saved_data["diag"].toBool();
    const auto t = q.size(2);
    const auto f32 = torch::kFloat32;
    auto dout = grads[0].to(f32);
    auto k0f = k0.to(f32), v0f = v0.to(f32);
    auto dq = torch::zeros_like(q, q.options().dtype(f32));
    auto dk0 = torch::zeros_like(k0f), dv0 = torch::zeros_like(v0f);
    std::vector<torch::Tensor> dkds, dvds;
    for (std::int64_t t0 = 0; t0 < t; t0 += chunk) {
      const auto c = std::min(chunk, t - t0), t1 = t0 + c;
      auto qc = q.narrow(2, t0, c).to(f32);
      auto lc = lse.narrow(2, t0, c);
      auto gout_c = dout.narrow(2, t0, c);
      auto delta = (gout_c * out.narrow(2, t0, c)).sum(-1, /*keepdim=*/true);  // [B, h, c, 1]
      auto kk = k0f.narrow(2, 0, t1), vv = v0f.narrow(2, 0, t1);
      auto s0 = torch::matmul(qc, kk.transpose(-1, -2)) * scale;
      s0 = s0.masked_fill(document_causal_mask(doc, t0, c, t1).logical_not(), kNegInf);
      auto p0 = torch::exp(s0 - lc);                                   // [B, h, c, t1]
      dv0.narrow(2, 0, t1).add_(torch::matmul(p0.transpose(-1, -2), gout_c));
      auto ds0 = p0 * (torch::matmul(gout_c, vv.transpose(-1, -2)) - delta);
      auto dqc = torch::matmul(ds0, kk);
      dk0.narrow(2, 0, t1).add_(torch::matmul(ds0.transpose(-1, -2), qc) * scale);
      if (diag) {
        auto kdc = kd.narrow(2, t0, c).to(f32), vdc = vd.narrow(2, t0, c).to(f32);
        auto pd = torch::exp(diag_scores(qc, kdc, scale) - lc);              // [B, h, c, k]
        dvds.push_back(pd.unsqueeze(-1) * gout_c.unsqueeze(3));
        auto dsd = pd * ((gout_c.unsqueeze(3) * vdc).sum(-1) - delta);
        dqc = dqc + (dsd.unsqueeze(-1) * kdc).sum(3);
        dkds.push_back(dsd.unsqueeze(-1) * qc.unsqueeze(3) * scale);
      }
      dq.narrow(2, t0, c).copy_(dqc * scale);
    }
    torch::Tensor dkd, dvd;
    if (diag) {
      dkd = torch::cat(dkds, 2).to(kd.scalar_type());
      dvd = torch::cat(dvds, 2).to(vd.scalar_type());
    }
    return {dq.to(q.scalar_type()), dk0.to(k0.scalar_type()), dv0.to(v0.scalar_type()), dkd, dvd,
            torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor ttt_attention_efficient(const torch::Tensor& q, const torch::Tensor& k0, const torch::Tensor& v0,
                                      const torch::Tensor& kd, const torch::Tensor& vd,
                                      const torch::Tensor& document_ids, double scale,
                                      std::int64_t query_chunk) {
  auto kdd = kd, vdd = vd;
  if (!has_diag(kd)) {
    auto sizes = q.sizes().vec();
    sizes.insert(sizes.begin() + 3, 0);
    kdd = torch::zeros(sizes, q.options());
    vdd = torch::zeros(sizes, v0.options());
  }
  return TttAttentionFunction::apply(q, k0, v0, kdd, vdd, document_ids, scale, std::max<std::int64_t>(1, query_chunk));
}

torch::Tensor ttt_attention(TttAttentionImpl impl, const torch::Tensor& q, const torch::Tensor& k0,
                            const torch::Tensor& v0, const torch::Tensor& kd, const torch::Tensor& vd,
                            const torch::Tensor& document_ids, double scale) {
  if (impl == TttAttentionImpl::reference) return ttt_attention_reference(q, k0, v0, kd, vd, document_ids, scale);
  // Query blocks sized so one block's fp32 scores stay near 2^25 elements (128 MiB) whatever B,
  // heads and T are; at least 16 queries per block, at most 256.
  const auto per_query = std::max<std::int64_t>(1, q.size(0) * q.size(1) * q.size(2));
  const auto chunk = std::clamp<std::int64_t>((std::int64_t{1} << 25) / per_query, 16, 256);
  return ttt_attention_efficient(q, k0, v0, kd, vd, document_ids, scale, chunk);
}

}  // namespace eagle::model
