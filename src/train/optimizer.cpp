// Device-side AdamW step: clip, non-finite check, fused update (see optimizer.h).
#include "eagle/train/optimizer.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "eagle/model/shape_check.h"
#include "eagle/util/error.h"

namespace eagle::train {

AdamW::AdamW(std::vector<std::pair<std::string, torch::Tensor>> named_params, AdamWConfig cfg)
    : params_(std::move(named_params)), cfg_(cfg) {
  EAGLE_CHECK(!params_.empty(), Error(ErrorKind::internal, "AdamW: no parameters to optimise"));
  const auto device = params_.front().second.device();
  const auto f32 = torch::TensorOptions().dtype(torch::kFloat32).device(device);
  torch::NoGradGuard no_grad;
  for (auto& [name, p] : params_) {
    EAGLE_CHECK(p.scalar_type() == torch::kFloat32,
                Error(ErrorKind::internal, "AdamW expects fp32 master weights").place(name));
    if (!p.grad().defined()) p.mutable_grad() = torch::zeros_like(p);
    tensors_.push_back(p);
    exp_avg_.push_back(torch::zeros_like(p));
    exp_avg_sq_.push_back(torch::zeros_like(p));
    steps_.push_back(torch::zeros({}, f32));
  }
  lr_ = torch::zeros({}, f32);
  grad_norm_ = torch::zeros({}, f32);
  found_inf_ = torch::zeros({}, f32);
  nonfinite_steps_ = torch::zeros({}, f32);
  first_nonfinite_step_ = torch::full({}, -1.0, f32);
  step_count_ = torch::zeros({}, f32);
}

void AdamW::zero_grad() {
  torch::NoGradGuard no_grad;
  for (auto& p : tensors_) p.mutable_grad().zero_();
}

void AdamW::set_lr(double lr) { lr_.fill_(lr); }

void AdamW::step(const torch::Tensor& loss) {
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> grads;
  grads.reserve(tensors_.size());
  for (auto& p : tensors_) grads.push_back(p.grad());
  step_count_.add_(1.0);

  auto norms = torch::_foreach_norm(grads, 2);
  auto total = torch::stack(norms).to(torch::kFloat32).norm(2);
  grad_norm_.copy_(total);
  auto bad = torch::logical_not(torch::isfinite(total)) |
             torch::logical_not(torch::isfinite(loss.detach().to(torch::kFloat32).sum()));
  found_inf_.copy_(bad.to(torch::kFloat32));
  // Count the bad step and remember the first one, without reading anything on the host.
  nonfinite_steps_.add_(found_inf_);
  first_nonfinite_step_.copy_(
      torch::where(bad & (first_nonfinite_step_ < 0), step_count_, first_nonfinite_step_));

  if (cfg_.max_grad_norm > 0) {
    // coef = min(1, max_norm / (norm + 1e-6)); a non-finite norm makes coef 0 here, and the
    // update is skipped through found_inf anyway.
    auto coef = torch::clamp(cfg_.max_grad_norm / (total + 1e-6), 0.0, 1.0);
    coef = torch::nan_to_num(coef, 0.0, 0.0, 0.0);
    torch::_foreach_mul_(grads, std::vector<torch::Tensor>(grads.size(), coef));
  }
  torch::_foreach_add_(steps_, 1.0);
  at::_fused_adamw_(tensors_, grads, exp_avg_, exp_avg_sq_, {}, steps_, lr_, cfg_.beta1, cfg_.beta2,
                    cfg_.weight_decay, cfg_.eps, /*amsgrad=*/false, /*maximize=*/false, std::nullopt, found_inf_);
  // A skipped update does not count as an Adam step (as torch.optim does with found_inf).
  torch::_foreach_sub_(steps_, std::vector<torch::Tensor>(steps_.size(), found_inf_));
}

std::map<std::string, torch::Tensor> AdamW::state() const {
  std::map<std::string, torch::Tensor> out;
  for (std::size_t i = 0; i < params_.size(); ++i) {
    const auto& name = params_[i].first;
    out[name + ".exp_avg"] = exp_avg_[i];
    out[name + ".exp_avg_sq"] = exp_avg_sq_[i];
    out[name + ".step"] = steps_[i];
  }
  out["optimizer.nonfinite_steps"] = nonfinite_steps_;
  out["optimizer.first_nonfinite_step"] = first_nonfinite_step_;
  out["optimizer.step_count"] = step_count_;
  return out;
}

void AdamW::load_state(const std::map<std::string, torch::Tensor>& state, const std::string& source) {
  torch::NoGradGuard no_grad;
  auto take = [&](const std::string& key, torch::Tensor& dst) {
    auto it = state.find(key);
    EAGLE_CHECK(it != state.end(), Error(ErrorKind::input, "optimizer state tensor missing").file(source).place(key));
    model::check_shape(it->second, dst.sizes(),
                       Error(ErrorKind::input, "optimizer state tensor has the wrong shape").file(source).place(key));
    dst.copy_(it->second);
  };
  for (std::size_t i = 0; i < params_.size(); ++i) {
    const auto& name = params_[i].first;
    take(name + ".exp_avg", exp_avg_[i]);
    take(name + ".exp_avg_sq", exp_avg_sq_[i]);
    take(name + ".step", steps_[i]);
  }
  take("optimizer.nonfinite_steps", nonfinite_steps_);
  take("optimizer.first_nonfinite_step", first_nonfinite_step_);
  take("optimizer.step_count", step_count_);
}

}  // namespace eagle::train
