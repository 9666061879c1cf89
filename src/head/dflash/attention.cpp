// DFlash's anchors and its block-sparse training attention (see dflash_attention.h).
#include "eagle/head/dflash/attention.h"

#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
#include <limits>

#include <fmt/format.h>

#include "eagle/head/loss.h"
#include "eagle/head/recompute.h"
#include "eagle/util/error.h"

namespace eagle::head {
namespace {

using torch::Tensor;

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// q [B, h, n, d] against keys [B, kv_heads, T, d]: fp32 scores [B, h, n, T], the keys not repeated
// (head kv * rep + r reads key head kv, as model::repeat_kv lays them out).
Tensor grouped_scores(const Tensor& q, const Tensor& k) {
  const auto b = q.size(0), h = q.size(1), n = q.size(2), d = q.size(3), kvh = k.size(1);
  auto s = torch::matmul(q.reshape({b, kvh, (h / kvh) * n, d}), k.transpose(-1, -2));
  return s.view({b, h, n, k.size(2)}).to(torch::kFloat32);
}

// Probabilities p [B, h, n, T] times values [B, kv_heads, T, d] -> [B, h, n, d] (p cast to v's dtype).
Tensor grouped_values(const Tensor& p, const Tensor& v) {
  const auto b = p.size(0), h = p.size(1), n = p.size(2), kvh = v.size(1);
  auto o = torch::matmul(p.to(v.scalar_type()).reshape({b, kvh, (h / kvh) * n, p.size(3)}), v);
  return o.view({b, h, n, v.size(3)});
}

// [B, 1, c * S, T] bool: query (j, i) sees context key s iff s < anchors[j] in anchors[j]'s document.
Tensor context_visible(const Tensor& anchors, const Tensor& document_ids, std::int64_t s) {
  const auto b = anchors.size(0), c = anchors.size(1), t = document_ids.size(1);
  auto kpos = torch::arange(t, anchors.options()).view({1, 1, t});
  auto doc_a = document_ids.gather(1, anchors).unsqueeze(-1);                              // [B, c, 1]
  auto ok = (kpos < anchors.unsqueeze(-1)) & (document_ids.unsqueeze(1) == doc_a);         // [B, c, T]
  return ok.unsqueeze(2).expand({b, c, s, t}).reshape({b, 1, c * s, t});
}

// One chunk of c anchors: q [B, h, c*S, d], blk_k/blk_v [B, kvh, c*S, d], anchors [B, c]; one
// softmax over [context keys (T); the block's own S keys].
Tensor chunk_attention(const Tensor& q, const Tensor& ctx_k, const Tensor& ctx_v, const Tensor& blk_k,
                       const Tensor& blk_v, const Tensor& anchors, const Tensor& document_ids, double scale) {
  const auto b = q.size(0), h = q.size(1), d = q.size(3), kvh = blk_k.size(1), rep = h / kvh;
  const auto c = anchors.size(1), s = q.size(2) / c, t = ctx_k.size(2);
  auto ctx = (grouped_scores(q, ctx_k) * scale).masked_fill(context_visible(anchors, document_ids, s).logical_not(),
                                                            kNegInf);
  // Block scores per anchor: [B, kvh, rep, c, S, d] x [B, kvh, 1, c, S, d]^T -> [B, h, c*S, S].
  auto q6 = q.reshape({b, kvh, rep, c, s, d});
  auto blk = torch::matmul(q6, blk_k.reshape({b, kvh, 1, c, s, d}).transpose(-1, -2)).to(torch::kFloat32) * scale;
  auto p = torch::softmax(torch::cat({ctx, blk.reshape({b, h, c * s, s})}, -1), -1);
  auto out_ctx = grouped_values(p.narrow(-1, 0, t), ctx_v);
  auto p_blk = p.narrow(-1, t, s).to(blk_v.scalar_type()).reshape({b, kvh, rep, c, s, s});
  auto out_blk = torch::matmul(p_blk, blk_v.reshape({b, kvh, 1, c, s, d})).reshape({b, h, c * s, d});
  return (out_ctx + out_blk).to(q.scalar_type());
}

void check_attention_inputs(const Tensor& q, const Tensor& ctx_k, const Tensor& ctx_v, const Tensor& blk_k,
                            const Tensor& blk_v, const Tensor& anchors, const Tensor& document_ids) {
  const bool ok = q.dim() == 4 && ctx_k.dim() == 4 && anchors.dim() == 2 && anchors.size(1) > 0 &&
                  q.size(2) % anchors.size(1) == 0 && ctx_v.sizes() == ctx_k.sizes() && blk_k.sizes() == blk_v.sizes() &&
                  blk_k.dim() == 4 && blk_k.size(2) == q.size(2) && blk_k.size(1) == ctx_k.size(1) &&
                  ctx_k.size(1) > 0 && q.size(1) % ctx_k.size(1) == 0 && document_ids.dim() == 2 &&
                  document_ids.size(1) == ctx_k.size(2) && anchors.size(0) == q.size(0) &&
                  document_ids.size(0) == q.size(0);
  EAGLE_CHECK(ok, Error(ErrorKind::internal, "DFlash attention inputs do not fit together")
                      .expected("q [B, h, N*S, d], ctx_k/ctx_v [B, kv_heads, T, d], blk_k/blk_v [B, kv_heads, N*S, d], "
                                "anchors [B, N], document_ids [B, T]")
                      .found(fmt::format("q {}, ctx_k {}, blk_k {}, anchors {}, document_ids {}", c10::str(q.sizes()),
                                         c10::str(ctx_k.sizes()), c10::str(blk_k.sizes()), c10::str(anchors.sizes()),
                                         c10::str(document_ids.sizes()))));
}

}  // namespace

torch::Tensor dflash_anchor_candidates(const torch::Tensor& loss_mask, const torch::Tensor& document_ids,
                                       std::int64_t block_size) {
  auto ahead = shift_left(document_ids, block_size - 1, -2.0);
  return (loss_mask != 0) & (document_ids >= 0) & (ahead == document_ids);
}

torch::Tensor dflash_sample_anchors(const torch::Tensor& loss_mask, const torch::Tensor& document_ids,
                                    std::int64_t block_size, std::int64_t num_anchors, at::Generator generator) {
  const auto b = loss_mask.size(0), t = loss_mask.size(1);
  EAGLE_CHECK(num_anchors > 0 && block_size > 1,
              Error(ErrorKind::usage, "DFlash needs anchors and a block of at least two slots")
                  .place("dflash_num_anchors, dflash_block_size")
                  .expected("num_anchors >= 1, block_size >= 2")
                  .found(fmt::format("{}, {}", num_anchors, block_size)));
  const auto n = std::min(num_anchors, t);
  auto cand = dflash_anchor_candidates(loss_mask, document_ids, block_size);
  auto f32 = torch::TensorOptions().dtype(torch::kFloat32);
  auto noise = torch::rand({b, t}, generator, f32.device(generator.device())).to(loss_mask.device());
  // Non-candidates score above every uniform value, earliest first: too few candidates pad in a fixed order.
  auto fallback = 1.0 + (torch::arange(t, f32.device(loss_mask.device())) + 1) / static_cast<double>(t + 1);
  auto score = torch::where(cand, noise, fallback.unsqueeze(0).expand({b, t}));
  auto idx = std::get<1>(torch::topk(score, n, /*dim=*/1, /*largest=*/false, /*sorted=*/true));
  return std::get<0>(torch::sort(idx, 1));
}

at::Generator dflash_anchor_generator(std::uint64_t seed, std::int64_t step, std::int64_t micro_batch,
                                      std::int64_t rank) {
  auto s = splitmix64(seed);
  s = splitmix64(s ^ static_cast<std::uint64_t>(step));
  s = splitmix64(s ^ static_cast<std::uint64_t>(micro_batch));
  s = splitmix64(s ^ static_cast<std::uint64_t>(rank));
  return at::make_generator<at::CPUGeneratorImpl>(s);
}

torch::Tensor dflash_slot_valid(const torch::Tensor& loss_mask, const torch::Tensor& document_ids,
                                const torch::Tensor& anchors, std::int64_t block_size) {
  const auto b = anchors.size(0), n = anchors.size(1), t = loss_mask.size(1), k = block_size - 1;
  auto pos = anchors.unsqueeze(-1) + torch::arange(1, block_size, anchors.options()).view({1, 1, k});  // [B, N, K]
  auto at_pos = loss_mask.ne(0).gather(1, pos.clamp_max(t - 1).view({b, n * k})).view({b, n, k});
  auto cand = dflash_anchor_candidates(loss_mask, document_ids, block_size).gather(1, anchors).unsqueeze(-1);
  return cand & (pos < t) & at_pos;
}

std::vector<std::int64_t> dflash_count_slots(const torch::Tensor& loss_mask, const torch::Tensor& document_ids,
                                             const torch::Tensor& anchors, std::int64_t block_size) {
  auto counts = dflash_slot_valid(loss_mask, document_ids, anchors, block_size)
                    .sum(std::vector<std::int64_t>{0, 1})
                    .to(torch::kCPU, torch::kInt64)
                    .contiguous();
  const auto* p = counts.data_ptr<std::int64_t>();
  return std::vector<std::int64_t>(p, p + counts.numel());
}

torch::Tensor dflash_attention(const torch::Tensor& q, const torch::Tensor& ctx_k, const torch::Tensor& ctx_v,
                               const torch::Tensor& blk_k, const torch::Tensor& blk_v, const torch::Tensor& anchors,
                               const torch::Tensor& document_ids, double scale, std::int64_t anchor_chunk) {
  check_attention_inputs(q, ctx_k, ctx_v, blk_k, blk_v, anchors, document_ids);
  const auto b = q.size(0), h = q.size(1), n = anchors.size(1), s = q.size(2) / n, t = ctx_k.size(2);
  // About 2^25 fp32 scores (128 MiB) per chunk, whatever B, heads, S and T are.
  const auto per_anchor = std::max<std::int64_t>(1, b * h * s * (t + s));
  const auto chunk = anchor_chunk > 0 ? std::min(anchor_chunk, n)
                                      : std::clamp<std::int64_t>((std::int64_t{1} << 25) / per_anchor, 1, n);
  TensorFunction fn = [scale](const std::vector<torch::Tensor>& x) {
    return std::vector<torch::Tensor>{chunk_attention(x[0], x[1], x[2], x[3], x[4], x[5], x[6], scale)};
  };
  const bool grad = torch::GradMode::is_enabled();
  std::vector<torch::Tensor> outs;
  for (std::int64_t j0 = 0; j0 < n; j0 += chunk) {
    const auto c = std::min(chunk, n - j0);
    std::vector<torch::Tensor> in{q.narrow(2, j0 * s, c * s),     ctx_k, ctx_v, blk_k.narrow(2, j0 * s, c * s),
                                  blk_v.narrow(2, j0 * s, c * s), anchors.narrow(1, j0, c), document_ids};
    // Backward makes each chunk's probabilities again: only the chunk's output is kept.
    outs.push_back(grad ? recompute(fn, in, {})[0] : fn(in)[0]);
  }
  return outs.size() == 1 ? outs[0] : torch::cat(outs, 2);
}

torch::Tensor dflash_attention_dense(const torch::Tensor& q, const torch::Tensor& ctx_k, const torch::Tensor& ctx_v,
                                     const torch::Tensor& blk_k, const torch::Tensor& blk_v,
                                     const torch::Tensor& anchors, const torch::Tensor& document_ids, double scale) {
  check_attention_inputs(q, ctx_k, ctx_v, blk_k, blk_v, anchors, document_ids);
  const auto b = q.size(0), n = anchors.size(1), s = q.size(2) / n, m = n * s;
  auto block = torch::arange(m, anchors.options()).div(s, "floor");
  auto own = (block.view({m, 1}) == block.view({1, m})).view({1, 1, m, m}).expand({b, 1, m, m});
  auto mask = torch::cat({context_visible(anchors, document_ids, s), own}, -1);  // [B, 1, N*S, T + N*S]
  auto scores = (grouped_scores(q, torch::cat({ctx_k, blk_k}, 2)) * scale).masked_fill(mask.logical_not(), kNegInf);
  return grouped_values(torch::softmax(scores, -1), torch::cat({ctx_v, blk_v}, 2)).to(q.scalar_type());
}

}  // namespace eagle::head
