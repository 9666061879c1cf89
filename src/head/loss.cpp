// Shifted views, valid masks, soft cross-entropy and metric rows of the draft heads (see head_loss.h).
#include "eagle/head/loss.h"

#include "eagle/util/error.h"

namespace eagle::head {

torch::Tensor shift_left(const torch::Tensor& x, std::int64_t n, double fill) {
  const auto len = x.size(1);
  auto sizes = x.sizes().vec();
  sizes[1] = std::min(n, len);
  auto pad = torch::full(sizes, fill, x.options());
  if (n >= len) return pad;
  return torch::cat({x.narrow(1, n, len - n), pad}, 1);
}

torch::Tensor in_document_mask(const torch::Tensor& loss_mask, const torch::Tensor& document_ids, std::int64_t step) {
  auto doc_ahead = shift_left(document_ids, step + 2, -2.0);
  auto mask_ahead = shift_left(loss_mask.to(torch::kBool), step + 2, 0.0);
  return (doc_ahead == document_ids) & (document_ids >= 0) & mask_ahead;
}

torch::Tensor soft_cross_entropy(const torch::Tensor& logits, const torch::Tensor& teacher_probs) {
  auto logp = torch::log_softmax(logits.to(torch::kFloat32), -1);
  return -(teacher_probs.to(torch::kFloat32) * logp).sum(-1);
}

std::string loss_name(LossKind kind) {
  switch (kind) {
    case LossKind::kl:
      return "kl";
    case LossKind::tv:
      return "tv";
    case LossKind::lk_hybrid:
      return "lk_hybrid";
  }
  return "kl";
}

LossKind parse_loss_kind(const std::string& name) {
  for (auto k : {LossKind::kl, LossKind::tv, LossKind::lk_hybrid})
    if (loss_name(k) == name) return k;
  throw Error(ErrorKind::input, "unknown loss").place("loss").expected("kl, tv or lk_hybrid").found(name);
}

torch::Tensor position_loss(LossKind kind, const torch::Tensor& logits, const torch::Tensor& teacher_probs) {
  if (kind == LossKind::kl) return soft_cross_entropy(logits, teacher_probs);
  auto p = teacher_probs.to(torch::kFloat32);
  auto logq = torch::log_softmax(logits.to(torch::kFloat32), -1);
  auto alpha = torch::minimum(p, logq.exp()).sum(-1);
  if (kind == LossKind::tv) return 1.0 - alpha;
  auto kl = (torch::xlogy(p, p) - p * logq).sum(-1);
  auto lambda = torch::exp(-kLkEta * alpha.detach());
  return lambda * kl + (1.0 - lambda) * (1.0 - alpha);
}

torch::Tensor metric_row(const torch::Tensor& valid, const torch::Tensor& correct, const torch::Tensor& prefix_ok,
                         const torch::Tensor& position_loss) {
  auto v = valid.to(torch::kFloat32);
  auto c = (valid & correct).to(torch::kFloat32);
  auto cv = (valid & prefix_ok).to(torch::kFloat32);
  auto cc = (valid & prefix_ok & correct).to(torch::kFloat32);
  auto loss = torch::where(valid, position_loss.detach().to(torch::kFloat32), torch::zeros_like(v));
  return torch::stack({v.sum(), c.sum(), cv.sum(), cc.sum(), loss.sum()});
}

}  // namespace eagle::head
