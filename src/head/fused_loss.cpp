// The fused, chunked output layer and loss of one TTT step (see fused_loss.h).
#include "eagle/head/fused_loss.h"

#include <ATen/autocast_mode.h>
#include <c10/core/impl/LocalDispatchKeySet.h>

#include <algorithm>

namespace eagle::head {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// A chunk's loss [n] and, when asked, its gradient with respect to the logits [n, V] (per token, of
// the unweighted loss). z [n, V] and p [n, V] fp32.
struct ChunkTerms {
  torch::Tensor loss, grad;
};

ChunkTerms chunk_terms(LossKind kind, const torch::Tensor& z, const torch::Tensor& p, bool want_grad) {
  auto logq = torch::log_softmax(z, -1);
  auto q = logq.exp();
  ChunkTerms r;
  if (kind == LossKind::kl) {
    r.loss = -(p * logq).sum(-1);
    // d/dz of -sum p log softmax(z): q * sum(p) - p (as log_softmax's backward computes it).
    if (want_grad) r.grad = q * p.sum(-1, true) - p;
    return r;
  }
  auto alpha = torch::minimum(p, q).sum(-1);
  torch::Tensor tv_grad;
  if (want_grad) {
    // d(1 - sum min(p, q))/dq: -1 where q < p, -1/2 at ties (torch.minimum's rule), then through
    // the softmax: q * (g - sum q g).
    auto g = -torch::where(q < p, 1.0, torch::where(q == p, 0.5, 0.0)).to(torch::kFloat32);
    tv_grad = q * (g - (q * g).sum(-1, true));
  }
  if (kind == LossKind::tv) {
    r.loss = 1.0 - alpha;
    r.grad = tv_grad;
    return r;
  }
  auto lambda = torch::exp(-kLkEta * alpha);  // a weight, not differentiated
  auto kl = (torch::xlogy(p, p) - p * logq).sum(-1);
  r.loss = lambda * kl + (1.0 - lambda) * (1.0 - alpha);
  if (want_grad) {
    auto l = lambda.unsqueeze(-1);
    r.grad = l * (q * p.sum(-1, true) - p) + (1.0 - l) * tv_grad;
  }
  return r;
}

// Rows [c0, c0 + n) of the flat teacher logits moved by shift, softmaxed in fp32. Rows past the end
// repeat the last row (their positions are never valid: a chain needs its row's token t + shift + 1).
torch::Tensor teacher_chunk(const torch::Tensor& teacher, std::int64_t c0, std::int64_t n, std::int64_t shift) {
  const auto rows = teacher.size(0);
  torch::Tensor t;
  if (c0 + shift + n <= rows) {
    t = teacher.narrow(0, c0 + shift, n);
  } else {
    auto idx = torch::arange(c0 + shift, c0 + shift + n, teacher.options().dtype(torch::kInt64)).clamp_max(rows - 1);
    t = teacher.index_select(0, idx);
  }
  return torch::softmax(t.to(torch::kFloat32), -1);
}

torch::Tensor chunk_logits(const torch::Tensor& o_c, const torch::Tensor& w_c) { return torch::mm(o_c, w_c.t()); }

class ChunkedStepLoss : public torch::autograd::Function<ChunkedStepLoss> {
 public:
  // o [N, H], weight [V, H], teacher [N, V], valid [N] bool, scale 0-dim. With want_grad the
  // gradients of o and of the weight for an upstream gradient of 1 are made here, chunk by chunk
  // beside the loss (so backward multiplies them and makes no logits again); the weight's goes into
  // `head_sum` when it is defined (one [V, H] sum for the unroll, not one per step).
  static variable_list forward(AutogradContext* ctx, const torch::Tensor& o, const torch::Tensor& weight,
                               const torch::Tensor& teacher, const torch::Tensor& valid, const torch::Tensor& scale,
                               std::int64_t kind, std::int64_t shift, std::int64_t chunk, bool want_grad,
                               StepLossSum* head_sum) {
    const auto dev = o.device().type();
    const bool autocast = at::autocast::is_autocast_enabled(dev);
    // The logits' dtype: the autocast dtype when autocast was on, else o's.
    const auto compute = autocast ? at::autocast::get_autocast_dtype(dev) : o.scalar_type();
    c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
    const auto n_rows = o.size(0);
    auto w_c = weight.to(compute);
    const auto coef = scale.to(torch::kFloat32).reshape({1, 1});
    // A frozen LM head (the MTP head's, the target's own) gets no gradient: no [V, H] sum is made.
    const bool want_w = want_grad && weight.requires_grad();
    const bool shared = want_w && head_sum;
    torch::Tensor grad_w;
    if (shared) grad_w = head_sum->sum;
    if (want_w && !grad_w.defined()) grad_w = torch::zeros(weight.sizes(), weight.options().dtype(torch::kFloat32));
    if (shared && !head_sum->sum.defined()) {  // the unroll's first step
      head_sum->sum = grad_w;
      head_sum->claimed = torch::zeros({1}, torch::kInt8);
    }
    std::vector<torch::Tensor> losses, argmaxes, grad_o;
    for (std::int64_t c0 = 0; c0 < n_rows; c0 += chunk) {
      const auto n = std::min(chunk, n_rows - c0);
      auto o_c = o.narrow(0, c0, n).to(compute);
      auto z = chunk_logits(o_c, w_c);
      argmaxes.push_back(z.argmax(-1));
      auto terms = chunk_terms(static_cast<LossKind>(kind), z.to(torch::kFloat32), teacher_chunk(teacher, c0, n, shift),
                               want_grad);
      losses.push_back(terms.loss);
      if (!want_grad) continue;
      auto mask = valid.narrow(0, c0, n).unsqueeze(-1);
      auto dz = torch::where(mask, terms.grad * coef, torch::zeros_like(terms.grad)).to(compute);
      grad_o.push_back(torch::mm(dz, w_c).to(o.scalar_type()));
      if (want_w) grad_w.add_(torch::mm(dz.t(), o_c).to(torch::kFloat32));
    }
    auto loss = torch::cat(losses);
    auto weighted = scale * torch::where(valid, loss, torch::zeros_like(loss)).sum();
    auto argmax = torch::cat(argmaxes);
    if (want_grad) {
      ctx->save_for_backward({torch::cat(grad_o)});
      if (want_w) ctx->saved_data["grad_w"] = grad_w;
      ctx->saved_data["weight_dtype"] = static_cast<std::int64_t>(weight.scalar_type());
      if (shared) ctx->saved_data["claimed"] = head_sum->claimed;
    }
    ctx->mark_non_differentiable({loss, argmax});
    return {weighted, loss, argmax};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    variable_list out(10);
    if (!grads[0].defined()) return out;
    const auto saved = ctx->get_saved_variables();
    const auto g = grads[0].to(torch::kFloat32);
    out[0] = saved[0] * g.to(saved[0].scalar_type());
    if (!ctx->saved_data.count("grad_w")) return out;  // a frozen LM head
    if (ctx->saved_data.count("claimed")) {
      auto* claimed = ctx->saved_data["claimed"].toTensor().data_ptr<std::int8_t>();
      if (*claimed) return out;  // another step's backward returned the unroll's sum
      *claimed = 1;
    }
    const auto dtype = static_cast<at::ScalarType>(ctx->saved_data["weight_dtype"].toInt());
    out[1] = (ctx->saved_data["grad_w"].toTensor() * g).to(dtype);
    return out;
  }
};

}  // namespace

StepLossOutput step_loss(LossKind kind, const torch::Tensor& o, const torch::Tensor& weight,
                         const torch::Tensor& teacher_logits, std::int64_t shift, const torch::Tensor& valid,
                         const torch::Tensor& scale, std::int64_t chunk, StepLossSum* head_sum) {
  const auto b = o.size(0), len = o.size(1), vocab = weight.size(0);
  if (chunk <= 0) {
    auto logits = torch::linear(o, weight);
    auto teacher = torch::softmax(shift_left(teacher_logits, shift, 0.0).to(torch::kFloat32), -1);
    auto pos = position_loss(kind, logits, teacher);
    auto weighted = scale * torch::where(valid, pos, torch::zeros_like(pos)).sum();
    return {weighted, pos.detach(), logits.argmax(-1)};
  }
  const bool want_grad = torch::GradMode::is_enabled() && (o.requires_grad() || weight.requires_grad());
  auto outs =
      ChunkedStepLoss::apply(o.reshape({b * len, o.size(2)}), weight, teacher_logits.reshape({b * len, vocab}),
                             valid.reshape({b * len}), scale.to(torch::kFloat32), static_cast<std::int64_t>(kind),
                             shift, std::min(chunk, std::max<std::int64_t>(b * len, 1)), want_grad, head_sum);
  return {outs[0], outs[1].view({b, len}), outs[2].view({b, len})};
}

}  // namespace eagle::head
