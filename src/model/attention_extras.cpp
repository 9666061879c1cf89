// Attention with sliding windows and learned sinks (see attention.h, AttentionExtras): the target's
// training forward over padded or packed rows, and the masked attention of its KV-cache forwards.
#include <algorithm>
#include <limits>

#include <fmt/format.h>

#include "eagle/model/attention.h"
#include "eagle/model/layers.h"
#include "eagle/util/error.h"

#ifdef EAGLE_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>
#endif

namespace eagle::model {
namespace {

using torch::Tensor;

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

bool cuda_flash_takes(const Tensor& q) {
#ifdef EAGLE_WITH_CUDA
  const auto t = q.scalar_type();
  return q.is_cuda() && (t == torch::kHalf || t == torch::kBFloat16) && q.size(-1) % 8 == 0 && q.size(-1) <= 256 &&
         at::cuda::getDeviceProperties(q.device().index())->major >= 8;
#else
  (void)q;
  return false;
#endif
}

// out [B, h, T, d] rescaled for sinks from each query's log-sum-exp lse [B, h, T, 1] (fp32): the
// sink adds exp(sink) to the denominator, so out_sink = out * sigmoid(lse - sink).
Tensor apply_sinks(const Tensor& out, const Tensor& lse, const Tensor& sinks) {
  if (!sinks.defined()) return out;
  const auto keep = torch::sigmoid(lse - sinks.to(torch::kFloat32).view({1, -1, 1, 1}));
  return (out.to(torch::kFloat32) * keep).to(out.scalar_type());
}

// CUDA flash attention with its window arguments (window_size_left = W - 1 keeps keys j > i - W).
Tensor cuda_flash_extras(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionLayout& layout, double scale,
                         const AttentionExtras& x) {
  const auto b = q.size(0), h = q.size(1), t = q.size(2);
  const std::optional<double> s(scale);
  const std::optional<std::int64_t> left = x.window > 0 ? std::optional<std::int64_t>(x.window - 1) : std::nullopt;
  const std::optional<std::int64_t> right = x.window > 0 ? std::optional<std::int64_t>(0) : std::nullopt;
  if (!layout.packed()) {
    auto [o, l, rng, unused, dbg] =
        at::_flash_attention_forward(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), std::nullopt,
                                     std::nullopt, t, t, 0.0, true, false, s, left, right);
    return apply_sinks(o.transpose(1, 2), l.unsqueeze(-1), x.sinks);
  }
  auto tokens = [](const Tensor& z) {
    return z.transpose(1, 2).reshape({z.size(0) * z.size(2), z.size(1), z.size(3)});
  };
  const auto& cu = layout.cu_seqlens();
  auto [o, l, rng, unused, dbg] =
      at::_flash_attention_forward(tokens(q), tokens(k), tokens(v), cu, cu, t, t, 0.0, true, false, s, left, right);
  auto out = o.view({b, t, h, q.size(3)}).transpose(1, 2);
  return apply_sinks(out, l.view({h, b, t}).permute({1, 0, 2}).unsqueeze(-1), x.sinks);
}

// fp32 scores in query blocks; block [t0, t1) reads keys [t0 - W + 1, t1) with a window, else [0, t1).
Tensor blocked_extras(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionLayout& layout, double scale,
                      const AttentionExtras& x) {
  const auto t = q.size(2), rep = q.size(1) / k.size(1);
  const auto kk = repeat_kv(k, rep), vv = repeat_kv(v, rep);
  const auto per_query = std::max<std::int64_t>(1, q.size(0) * q.size(1) * std::min(t, x.window > 0 ? x.window : t));
  const auto chunk = std::clamp<std::int64_t>((std::int64_t{1} << 24) / per_query, 16, 256);
  const auto& doc = layout.document_ids();
  const auto iopts = doc.options().dtype(torch::kInt64);
  std::vector<Tensor> outs;
  for (std::int64_t t0 = 0; t0 < t; t0 += chunk) {
    const auto c = std::min(chunk, t - t0), t1 = t0 + c;
    const auto lo = x.window > 0 ? std::max<std::int64_t>(0, t0 - x.window + 1) : 0;
    auto s = soft_cap(
        torch::matmul(q.narrow(2, t0, c), kk.narrow(2, lo, t1 - lo).transpose(-1, -2)).to(torch::kFloat32) * scale,
        x.softcap);
    const auto qpos = torch::arange(t0, t1, iopts).view({1, c, 1});
    const auto kpos = torch::arange(lo, t1, iopts).view({1, 1, t1 - lo});
    auto visible = (kpos <= qpos) & (doc.narrow(1, t0, c).unsqueeze(2) == doc.narrow(1, lo, t1 - lo).unsqueeze(1));
    if (x.window > 0) visible = visible & (kpos > qpos - x.window);
    s = s.masked_fill(visible.unsqueeze(1).logical_not(), kNegInf);
    const auto lse = torch::logsumexp(s, -1, /*keepdim=*/true);
    auto o = torch::matmul(torch::exp(s - lse).to(vv.scalar_type()), vv.narrow(2, lo, t1 - lo));
    outs.push_back(apply_sinks(o.to(q.scalar_type()), lse, x.sinks));
  }
  return outs.size() == 1 ? outs[0] : torch::cat(outs, 2);
}

}  // namespace

torch::Tensor layout_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                               const AttentionLayout& layout, double scale, const AttentionExtras& extras) {
  if (!extras.any()) return layout_attention(q, k, v, layout, scale);
  EAGLE_CHECK(!extras.sinks.defined() || (extras.sinks.dim() == 1 && extras.sinks.size(0) == q.size(1)),
              Error(ErrorKind::internal, "attention sinks must be one per head").found(c10::str(extras.sinks.sizes())));
  if (cuda_flash_takes(q) && extras.softcap <= 0) return cuda_flash_extras(q, k, v, layout, scale, extras);
  return blocked_extras(q, k, v, layout, scale, extras);
}

torch::Tensor masked_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                               const torch::Tensor& mask, double scale, const AttentionExtras& extras) {
  const auto rep = q.size(1) / k.size(1);
  if (!extras.sinks.defined() && extras.softcap <= 0) {
    if (rep > 1 && mask.dim() == 4 && mask.size(1) == 1) {
      // The rep query heads of a key head folded into its query axis (head h = g * rep + r, as
      // repeat_kv orders them): the cached keys and values are read in place, not copied rep times
      // per call, which was most of a batched decode step's time.
      const auto b = q.size(0), n = q.size(2), d = q.size(3), kv = k.size(1);
      const auto folded_mask = mask.expand({mask.size(0), 1, n, mask.size(3)}).repeat({1, 1, rep, 1});
      auto o = at::scaled_dot_product_attention(q.reshape({b, kv, rep * n, d}), k, v, folded_mask, 0.0, false, scale);
      return o.reshape({b, q.size(1), n, v.size(3)});
    }
    return at::scaled_dot_product_attention(q, repeat_kv(k, rep), repeat_kv(v, rep), mask, 0.0, false, scale);
  }
  const auto kk = repeat_kv(k, rep), vv = repeat_kv(v, rep);
  // transformers' eager attention: scores (soft-capped: Gemma 2), then for gpt-oss the sink as a
  // last column of the softmax, dropped after it.
  auto s = soft_cap((torch::matmul(q, kk.transpose(-1, -2)) * scale).to(torch::kFloat32), extras.softcap);
  s = s.masked_fill(mask.logical_not(), kNegInf);
  if (!extras.sinks.defined()) return torch::matmul(torch::softmax(s, -1).to(vv.scalar_type()), vv);
  const auto sink =
      extras.sinks.to(torch::kFloat32).view({1, -1, 1, 1}).expand({s.size(0), s.size(1), s.size(2), 1});
  const auto p = torch::softmax(torch::cat({s, sink}, -1), -1).narrow(-1, 0, s.size(-1));
  return torch::matmul(p.to(vv.scalar_type()), vv);
}

torch::Tensor window_mask(const torch::Tensor& mask, const torch::Tensor& query_positions,
                          const torch::Tensor& key_positions, std::int64_t window) {
  if (window <= 0) return mask;
  return mask & (key_positions > query_positions - window);
}

}  // namespace eagle::model
