// Attention over a training batch's documents (see attention.h): the layout and its device-built
// offsets, the forward kernels, and flash attention with a differentiable log-sum-exp.
#include "eagle/model/attention.h"

#include <algorithm>
#include <limits>

#include <fmt/format.h>

#include "eagle/model/layers.h"
#include "eagle/util/error.h"

#ifdef EAGLE_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>
#endif

namespace eagle::model {
namespace {

using torch::Tensor;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

enum class Kernel { cpu_flash, cuda_flash, tensor_ops };

// Extra head-dim columns the flash backward gets to carry the log-sum-exp gradient (FlashWithLse):
// two are used; CUDA flash needs head dims in multiples of 8.
constexpr std::int64_t kCpuLsePad = 2, kCudaLsePad = 8;

bool flash_capable_gpu([[maybe_unused]] const Tensor& q) {
#ifdef EAGLE_WITH_CUDA
  return at::cuda::getDeviceProperties(q.device().index())->major >= 8;  // FlashAttention 2: sm80 and newer
#else
  return false;
#endif
}

Kernel kernel_for(const Tensor& q, bool with_lse) {
  if (!q.is_cuda()) return Kernel::cpu_flash;
  const auto t = q.scalar_type();
  const auto d = q.size(-1);
  const bool ok = (t == torch::kHalf || t == torch::kBFloat16) && d % 8 == 0 &&
                  d + (with_lse ? kCudaLsePad : 0) <= 256 && flash_capable_gpu(q);
  return ok ? Kernel::cuda_flash : Kernel::tensor_ops;
}

// [B, h, T, d] <-> [B * T, h, d] (the token-major layout of variable-length flash attention; a view
// when the tensor came from a [B, T, h, d] one).
Tensor to_tokens(const Tensor& x) { return x.transpose(1, 2).reshape({x.size(0) * x.size(2), x.size(1), x.size(3)}); }
Tensor from_tokens(const Tensor& x, std::int64_t b, std::int64_t t) {
  return x.view({b, t, x.size(1), x.size(2)}).transpose(1, 2);
}

Tensor segment_of(const Tensor& x, const AttentionLayout::Segment& s) {
  return x.narrow(0, s.row, 1).narrow(2, s.start, s.length);
}

// Runs f on every segment (f returns tensors whose dim 2 is the segment's tokens) and puts the
// pieces back together: along dim 2 within a row, then along the rows.
template <typename F>
std::vector<Tensor> per_segment(const std::vector<AttentionLayout::Segment>& segments, std::int64_t rows, F&& f) {
  std::vector<std::vector<std::vector<Tensor>>> pieces(static_cast<std::size_t>(rows));
  for (const auto& s : segments) {
    auto outs = f(s);
    auto& row = pieces[static_cast<std::size_t>(s.row)];
    if (row.empty()) row.resize(outs.size());
    for (std::size_t i = 0; i < outs.size(); ++i) row[i].push_back(std::move(outs[i]));
  }
  std::vector<Tensor> result;
  for (std::size_t i = 0; i < pieces.front().size(); ++i) {
    std::vector<Tensor> per_row;
    for (auto& row : pieces) per_row.push_back(row[i].size() == 1 ? row[i][0] : torch::cat(row[i], 2));
    result.push_back(per_row.size() == 1 ? per_row[0] : torch::cat(per_row, 0));
  }
  return result;
}

// ---- flash attention with a differentiable log-sum-exp ----

// Forward results of one flash call: out [B, h, T, d]; lse as the kernel returned it (CUDA
// variable-length: [h, B * T]; otherwise [B, h, T]); the CUDA kernel's RNG words for its backward.
struct FlashForward {
  Tensor out, lse, rng, unused;
};

FlashForward cpu_flash_forward(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionLayout& layout,
                               double scale) {
  auto call = [&](const Tensor& qs, const Tensor& ks, const Tensor& vs) {
    auto [o, l] = at::_scaled_dot_product_flash_attention_for_cpu(qs, ks, vs, 0.0, /*is_causal=*/true, {}, scale);
    return std::vector<Tensor>{o, l};
  };
  auto r = layout.packed() ? per_segment(layout.segments(), layout.rows(),
                                         [&](const AttentionLayout::Segment& s) {
                                           return call(segment_of(q, s), segment_of(k, s), segment_of(v, s));
                                         })
                           : call(q, k, v);
  return {r[0], r[1], Tensor(), Tensor()};
}

FlashForward cuda_flash_forward(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionLayout& layout,
                                double scale) {
  const auto b = q.size(0), t = q.size(2);
  // Typed optionals: a bare nullopt for `scale` would also match the FP8 overload's descale tensor.
  const std::optional<double> s(scale);
  if (!layout.packed()) {
    auto [o, l, rng, unused, dbg] = at::_flash_attention_forward(
        q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), std::nullopt, std::nullopt, t, t, 0.0, true, false, s);
    return {o.transpose(1, 2), l, rng, unused};
  }
  const auto& cu = layout.cu_seqlens();
  // max_seqlen is the row length, a static bound: no segment is longer, and nothing is read back.
  auto [o, l, rng, unused, dbg] =
      at::_flash_attention_forward(to_tokens(q), to_tokens(k), to_tokens(v), cu, cu, t, t, 0.0, true, false, s);
  return {from_tokens(o, b, t), l, rng, unused};
}

// lse of the kernel -> [B, h, T, 1] fp32.
Tensor lse_per_query(const Tensor& lse, std::int64_t b, std::int64_t h, std::int64_t t) {
  if (lse.dim() == 2) return lse.view({h, b, t}).permute({1, 0, 2}).unsqueeze(-1).contiguous();
  return lse.unsqueeze(-1).contiguous();
}

// Flash attention whose log-sum-exp output is differentiable too. The kernels' backward computes
// each query's D = sum(dO * O) from the output it is given and the score gradients as
// p * (dO . v - D); a gradient g on the log-sum-exp adds p * g to them. So the backward appends
// columns to the head dim: zeros to q, k and v (the scores do not change), ones to dO and -g to O
// (split into a high and a low part, so that g survives an fp16/bf16 output), which turns D into
// D - g. One kernel call, exact.
struct FlashWithLse : public torch::autograd::Function<FlashWithLse> {
  static variable_list forward(AutogradContext* ctx, Tensor q, Tensor k, Tensor v, const AttentionLayout* layout,
                               double scale, bool cuda) {
    const auto b = q.size(0), h = q.size(1), t = q.size(2);
    auto f = cuda ? cuda_flash_forward(q, k, v, *layout, scale) : cpu_flash_forward(q, k, v, *layout, scale);
    ctx->save_for_backward({q, k, v, f.out, f.lse, f.rng, f.unused});
    ctx->saved_data["scale"] = scale;
    ctx->saved_data["cuda"] = cuda;
    ctx->saved_data["packed"] = layout->packed();
    if (layout->packed()) {
      ctx->saved_data["cu"] = layout->cu_seqlens();
      std::vector<std::int64_t> flat;
      for (const auto& s : layout->segments()) flat.insert(flat.end(), {s.row, s.start, s.length});
      ctx->saved_data["segments"] = flat;
    }
    return {f.out, lse_per_query(f.lse, b, h, t)};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto saved = ctx->get_saved_variables();
    const auto &q = saved[0], &k = saved[1], &v = saved[2], &out = saved[3], &lse = saved[4];
    const double scale = ctx->saved_data["scale"].toDouble();
    const bool cuda = ctx->saved_data["cuda"].toBool();
    const bool packed = ctx->saved_data["packed"].toBool();
    const auto d = q.size(-1);
    // Contiguous: the kernels read the last dim with stride 1 (a sum's gradient arrives expanded).
    auto g_out = grads[0].defined() ? grads[0].to(out.scalar_type()).contiguous() : torch::zeros_like(out);
    Tensor dO = g_out, qq = q, kk = k, vv = v, oo = out;
    if (grads[1].defined()) {
      const auto pad = cuda ? kCudaLsePad : kCpuLsePad;
      const auto acc = out.scalar_type() == torch::kDouble ? torch::kDouble : torch::kFloat32;
      auto g = grads[1].squeeze(-1).to(acc);  // [B, h, T]
      auto hi = g.to(out.scalar_type());
      auto lo = (g - hi.to(acc)).to(out.scalar_type());
      auto fill = [&](const Tensor& x, const Tensor& c0, const Tensor& c1) {
        return torch::cat({x, c0.unsqueeze(-1), c1.unsqueeze(-1), torch::zeros_like(x.narrow(-1, 0, pad - 2))}, -1);
      };
      oo = fill(out, -hi, -lo);
      dO = fill(g_out, torch::ones_like(hi), torch::ones_like(hi));
      qq = torch::constant_pad_nd(q, {0, pad});
      kk = torch::constant_pad_nd(k, {0, pad});
      vv = torch::constant_pad_nd(v, {0, pad});
    }
    std::vector<Tensor> r;
    const std::optional<double> s(scale);
    if (!cuda) {
      auto call = [&](const Tensor& g_, const Tensor& q_, const Tensor& k_, const Tensor& v_, const Tensor& o_,
                      const Tensor& l_) {
        auto [dq, dk, dv] =
            at::_scaled_dot_product_flash_attention_for_cpu_backward(g_, q_, k_, v_, o_, l_, 0.0, true, {}, scale);
        return std::vector<Tensor>{dq, dk, dv};
      };
      if (packed) {
        std::vector<AttentionLayout::Segment> segments;
        const auto flat = ctx->saved_data["segments"].toIntVector();
        for (std::size_t i = 0; i + 2 < flat.size(); i += 3) segments.push_back({flat[i], flat[i + 1], flat[i + 2]});
        r = per_segment(segments, q.size(0), [&](const AttentionLayout::Segment& sg) {
          return call(segment_of(dO, sg), segment_of(qq, sg), segment_of(kk, sg), segment_of(vv, sg),
                      segment_of(oo, sg), lse.narrow(0, sg.row, 1).narrow(2, sg.start, sg.length));
        });
      } else {
        r = call(dO, qq, kk, vv, oo, lse);
      }
    } else {
      const auto b = q.size(0), t = q.size(2);
      const auto &rng = saved[5], &unused = saved[6];
      if (packed) {
        const auto cu = ctx->saved_data["cu"].toTensor();
        auto [dq, dk, dv] = at::_flash_attention_backward(to_tokens(dO), to_tokens(qq), to_tokens(kk), to_tokens(vv),
                                                          to_tokens(oo), lse, cu, cu, t, t, 0.0, true, rng, unused, s);
        r = {from_tokens(dq, b, t), from_tokens(dk, b, t), from_tokens(dv, b, t)};
      } else {
        auto tr = [](const Tensor& x) { return x.transpose(1, 2); };
        auto [dq, dk, dv] = at::_flash_attention_backward(tr(dO), tr(qq), tr(kk), tr(vv), tr(oo), lse, Tensor(),
                                                          Tensor(), t, t, 0.0, true, rng, unused, s);
        r = {tr(dq), tr(dk), tr(dv)};
      }
    }
    return {r[0].narrow(-1, 0, d), r[1].narrow(-1, 0, d), r[2].narrow(-1, 0, d), Tensor(), Tensor(), Tensor()};
  }
};

// ---- the chunked tensor implementation ----

// Attention with its log-sum-exp in tensor ops, query block by query block: forward keeps only the
// output and the log-sum-exp; backward recomputes the probabilities block by block. Causality lets
// block [t0, t1) read keys [0, t1) only. k and v have q's head count here.
struct ChunkedAttention : public torch::autograd::Function<ChunkedAttention> {
  static variable_list forward(AutogradContext* ctx, Tensor q, Tensor k, Tensor v, Tensor doc, double scale,
                               std::int64_t chunk) {
    const auto t = q.size(2);
    std::vector<Tensor> outs, lses;
    for (std::int64_t t0 = 0; t0 < t; t0 += chunk) {
      const auto c = std::min(chunk, t - t0), t1 = t0 + c;
      auto s = torch::matmul(q.narrow(2, t0, c), k.narrow(2, 0, t1).transpose(-1, -2)).to(torch::kFloat32) * scale;
      s = s.masked_fill(document_causal_mask(doc, t0, c, t1).logical_not(), kNegInf);
      auto lse = torch::logsumexp(s, -1, /*keepdim=*/true);
      outs.push_back(torch::matmul(torch::exp(s - lse).to(v.scalar_type()), v.narrow(2, 0, t1)));
      lses.push_back(lse);
    }
    auto out = torch::cat(outs, 2).to(q.scalar_type());
    auto lse = torch::cat(lses, 2);
    ctx->save_for_backward({q, k, v, doc, out, lse});
    ctx->saved_data["scale"] = scale;
    ctx->saved_data["chunk"] = chunk;
    return {out, lse};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto saved = ctx->get_saved_variables();
    auto q = saved[0], k = saved[1], v = saved[2], doc = saved[3], out = saved[4], lse = saved[5];
    const double scale = ctx->saved_data["scale"].toDouble();
    const auto chunk = ctx->saved_data["chunk"].toInt();
    const auto t = q.size(2);
    const auto f32 = torch::kFloat32;
    auto g_out = grads[0].defined() ? grads[0].to(f32) : torch::zeros_like(out, out.options().dtype(f32));
    auto g_lse = grads[1].defined() ? grads[1].to(f32) : torch::zeros_like(lse);
    // The score gradient is p * (dO . v - delta) with delta = dO . out - g_lse (the normaliser's
    // share, and the log-sum-exp's own gradient).
    auto delta = (g_out * out.to(f32)).sum(-1, /*keepdim=*/true) - g_lse;  // [B, h, T, 1]
    auto kf = k.to(f32), vf = v.to(f32);
    auto dq = torch::zeros_like(q, q.options().dtype(f32));
    auto dk = torch::zeros_like(kf), dv = torch::zeros_like(vf);
    for (std::int64_t t0 = 0; t0 < t; t0 += chunk) {
      const auto c = std::min(chunk, t - t0), t1 = t0 + c;
      auto qc = q.narrow(2, t0, c).to(f32);
      auto gc = g_out.narrow(2, t0, c);
      auto kk = kf.narrow(2, 0, t1), vv = vf.narrow(2, 0, t1);
      auto s = torch::matmul(qc, kk.transpose(-1, -2)) * scale;
      s = s.masked_fill(document_causal_mask(doc, t0, c, t1).logical_not(), kNegInf);
      auto p = torch::exp(s - lse.narrow(2, t0, c));  // [B, h, c, t1]
      dv.narrow(2, 0, t1).add_(torch::matmul(p.transpose(-1, -2), gc));
      auto ds = p * (torch::matmul(gc, vv.transpose(-1, -2)) - delta.narrow(2, t0, c));
      dq.narrow(2, t0, c).copy_(torch::matmul(ds, kk) * scale);
      dk.narrow(2, 0, t1).add_(torch::matmul(ds.transpose(-1, -2), qc) * scale);
    }
    return {dq.to(q.scalar_type()), dk.to(k.scalar_type()), dv.to(v.scalar_type()), Tensor(), Tensor(), Tensor()};
  }
};

std::int64_t query_chunk_for(const Tensor& q) {
  // Query blocks sized so one block's fp32 scores stay near 2^25 elements (128 MiB) whatever B,
  // heads and T are; at least 16 queries per block, at most 256.
  const auto per_query = std::max<std::int64_t>(1, q.size(0) * q.size(1) * q.size(2));
  return std::clamp<std::int64_t>((std::int64_t{1} << 25) / per_query, 16, 256);
}

void check_qkv(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionLayout& layout) {
  EAGLE_CHECK(
      q.dim() == 4 && k.dim() == 4 && v.sizes() == k.sizes() && q.size(0) == k.size(0) && q.size(2) == k.size(2) &&
          q.size(3) == k.size(3) && k.size(1) > 0 && q.size(1) % k.size(1) == 0 && q.size(0) == layout.rows() &&
          q.size(2) == layout.length(),
      Error(ErrorKind::internal, "attention inputs do not fit together")
          .expected(fmt::format("q [B, h, T, d], k and v [B, kv_heads, T, d], document ids [{}, {}]", layout.rows(),
                                layout.length()))
          .found(fmt::format("q {}, k {}, v {}", c10::str(q.sizes()), c10::str(k.sizes()), c10::str(v.sizes()))));
}

}  // namespace

torch::Tensor document_cu_seqlens(const torch::Tensor& document_ids, std::int64_t segments_per_row) {
  const auto b = document_ids.size(0), t = document_ids.size(1);
  const auto i64 = document_ids.options().dtype(torch::kInt64);
  auto prev = torch::cat({torch::full({b, 1}, -2, i64), document_ids.narrow(1, 0, t - 1)}, 1);
  auto run = (document_ids != prev).to(torch::kInt64).cumsum(1) - 1;  // run index within the row
  auto slot = run + torch::arange(b, i64).unsqueeze(1) * segments_per_row;
  auto i32 = document_ids.options().dtype(torch::kInt32);
  auto counts = torch::zeros({b * segments_per_row}, i32).scatter_add_(0, slot.view(-1), torch::ones({b * t}, i32));
  return torch::cat({torch::zeros({1}, i32), counts.cumsum(0, torch::kInt32)});
}

AttentionLayout::AttentionLayout(torch::Tensor document_ids, AttentionSpec spec)
    : document_ids_(std::move(document_ids)), packed_(spec.packed) {
  EAGLE_CHECK(document_ids_.defined() && document_ids_.dim() == 2 && document_ids_.size(1) > 0,
              Error(ErrorKind::internal, "document ids must be [B, T]"));
  if (!packed_) return;
  const auto t = length();
  const auto per_row = spec.max_segments > 0 ? std::min(spec.max_segments, t) : t;
  cu_seqlens_ = document_cu_seqlens(document_ids_, per_row);
  if (cu_seqlens_.is_cuda()) return;
  // Host memory: the offsets are read where they are; nothing waits for a device.
  const auto* cu = cu_seqlens_.data_ptr<std::int32_t>();
  for (std::int64_t i = 0; i + 1 < cu_seqlens_.numel(); ++i)
    if (cu[i + 1] > cu[i]) segments_.push_back({cu[i] / t, cu[i] % t, cu[i + 1] - cu[i]});
}

torch::Tensor document_causal_mask(const torch::Tensor& document_ids, std::int64_t t0, std::int64_t tq,
                                   std::int64_t tk) {
  auto opts = torch::TensorOptions().dtype(torch::kInt64).device(document_ids.device());
  auto qpos = torch::arange(t0, t0 + tq, opts).view({1, tq, 1});
  auto kpos = torch::arange(0, tk, opts).view({1, 1, tk});
  auto qdoc = document_ids.narrow(1, t0, tq).unsqueeze(2);
  auto kdoc = document_ids.narrow(1, 0, tk).unsqueeze(1);
  return ((kpos <= qpos) & (qdoc == kdoc)).unsqueeze(1);
}

torch::Tensor layout_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                               const AttentionLayout& layout, double scale) {
  check_qkv(q, k, v, layout);
  const auto kernel = kernel_for(q, /*with_lse=*/false);
  const auto rep = q.size(1) / k.size(1);
  if (kernel == Kernel::tensor_ops) {
    // CUDA without flash (fp32): the memory-efficient kernel, which needs equal head counts.
    auto kk = repeat_kv(k, rep), vv = repeat_kv(v, rep);
    if (!layout.packed()) return at::scaled_dot_product_attention(q, kk, vv, {}, 0.0, true, scale);
    return at::scaled_dot_product_attention(
        q, kk, vv, document_causal_mask(layout.document_ids(), 0, q.size(2), q.size(2)), 0.0, false, scale);
  }
  if (!layout.packed())  // causal alone is exact for right-padded rows; flash takes grouped heads
    return at::scaled_dot_product_attention(q, k, v, {}, 0.0, /*is_causal=*/true, scale, /*enable_gqa=*/true);
  if (kernel == Kernel::cuda_flash) return cuda_flash_forward(q, k, v, layout, scale).out;
  return per_segment(layout.segments(), layout.rows(), [&](const AttentionLayout::Segment& s) {
    return std::vector<Tensor>{at::scaled_dot_product_attention(segment_of(q, s), segment_of(k, s), segment_of(v, s),
                                                                {}, 0.0, true, scale, true)};
  })[0];
}

AttentionWithLse chunked_attention_with_lse(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                            const torch::Tensor& document_ids, double scale, std::int64_t query_chunk) {
  const auto rep = q.size(1) / k.size(1);
  auto r = ChunkedAttention::apply(q, repeat_kv(k, rep), repeat_kv(v, rep), document_ids, scale,
                                   std::max<std::int64_t>(1, query_chunk));
  return {r[0], r[1]};
}

AttentionWithLse attention_with_lse(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                    const AttentionLayout& layout, double scale) {
  check_qkv(q, k, v, layout);
  const auto kernel = kernel_for(q, /*with_lse=*/true);
  if (kernel == Kernel::tensor_ops)
    return chunked_attention_with_lse(q, k, v, layout.document_ids(), scale, query_chunk_for(q));
  // The kernels want one dtype (autocast may have left k or v in another).
  auto r = FlashWithLse::apply(q, k.to(q.scalar_type()), v.to(q.scalar_type()), &layout, scale,
                               kernel == Kernel::cuda_flash);
  return {r[0], r[1]};
}

}  // namespace eagle::model
