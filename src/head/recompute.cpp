// Activation recomputation through a custom autograd function (see recompute.h).
#include "eagle/head/recompute.h"

#include <ATen/autocast_mode.h>

#include "eagle/util/error.h"

namespace eagle::head {

RecomputeMode parse_recompute_mode(const std::string& name) {
  if (name == "off") return RecomputeMode::off;
  if (name == "mlp") return RecomputeMode::mlp;
  if (name == "layer") return RecomputeMode::layer;
  throw Error(ErrorKind::usage, "unknown activation recomputation mode")
      .place("recompute_activations")
      .expected("off, mlp or layer")
      .found(name);
}

std::string recompute_mode_name(RecomputeMode mode) {
  switch (mode) {
    case RecomputeMode::off:
      return "off";
    case RecomputeMode::mlp:
      return "mlp";
    case RecomputeMode::layer:
      return "layer";
  }
  return "off";
}

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// The function and the autocast state it ran under, kept in the context until backward.
struct Recorded : torch::CustomClassHolder {
  TensorFunction fn;
  std::size_t n_inputs = 0;
  std::vector<torch::Tensor> params;
  c10::DeviceType device = c10::DeviceType::CPU;
  bool autocast = false;
  at::ScalarType autocast_dtype = at::kBFloat16;
};

// Autocast as the forward had it while fn runs again (backward runs outside the trainer's guard);
// the cast cache off, so no cast made here is reused by an op outside fn, or the other way round.
class AutocastAs {
 public:
  explicit AutocastAs(const Recorded& r)
      : device_(r.device),
        enabled_(at::autocast::is_autocast_enabled(device_)),
        dtype_(at::autocast::get_autocast_dtype(device_)),
        cache_(at::autocast::is_autocast_cache_enabled()) {
    at::autocast::set_autocast_enabled(device_, r.autocast);
    at::autocast::set_autocast_dtype(device_, r.autocast_dtype);
    at::autocast::set_autocast_cache_enabled(false);
  }
  ~AutocastAs() {
    at::autocast::set_autocast_enabled(device_, enabled_);
    at::autocast::set_autocast_dtype(device_, dtype_);
    at::autocast::set_autocast_cache_enabled(cache_);
  }
  AutocastAs(const AutocastAs&) = delete;
  AutocastAs& operator=(const AutocastAs&) = delete;

 private:
  c10::DeviceType device_;
  bool enabled_;
  at::ScalarType dtype_;
  bool cache_;
};

// The saved inputs [0, n_in) as detached leaves, with gradients where the forward's input wanted one;
// those and the trained params (at `all` index n_in + j) go into wrt, their `all` indices into index.
std::vector<torch::Tensor> leaves(AutogradContext* ctx, const variable_list& saved, std::size_t n_in,
                                  const Recorded& rec, std::vector<torch::Tensor>& wrt,
                                  std::vector<std::size_t>& index) {
  std::vector<torch::Tensor> inputs;
  for (std::size_t i = 0; i < n_in; ++i) {
    auto x = saved[i].detach();
    if (ctx->needs_input_grad(i) && x.is_floating_point()) {
      x.requires_grad_(true);
      wrt.push_back(x);
      index.push_back(i);
    }
    inputs.push_back(x);
  }
  for (std::size_t j = 0; j < rec.params.size(); ++j)
    if (ctx->needs_input_grad(n_in + j) && rec.params[j].requires_grad()) {
      wrt.push_back(rec.params[j]);
      index.push_back(n_in + j);
    }
  return inputs;
}

// What both functions keep in the context: the tensors saved for backward, the count of `all` and
// the recorded function; and what their backward reads back.
void keep(AutogradContext* ctx, const std::vector<torch::Tensor>& saved, std::size_t n_all,
          const c10::intrusive_ptr<Recorded>& rec) {
  ctx->save_for_backward(saved);
  ctx->set_materialize_grads(false);  // an unused output's gradient stays undefined, no zeros made
  ctx->saved_data["n_all"] = static_cast<std::int64_t>(n_all);
  ctx->saved_data["fn"] = c10::IValue::make_capsule(rec);
}

struct Kept {
  c10::intrusive_ptr<Recorded> rec;
  variable_list saved;
  std::size_t n_all;
};

Kept kept(AutogradContext* ctx) {
  return {c10::static_intrusive_pointer_cast<Recorded>(ctx->saved_data["fn"].toCapsule()), ctx->get_saved_variables(),
          static_cast<std::size_t>(ctx->saved_data["n_all"].toInt())};
}

class Recompute : public torch::autograd::Function<Recompute> {
 public:
  // all: fn's inputs, then its parameters (they are inputs here so that their gradients flow).
  static variable_list forward(AutogradContext* ctx, at::TensorList all, c10::intrusive_ptr<Recorded> rec) {
    std::vector<torch::Tensor> inputs(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(rec->n_inputs));
    std::vector<torch::Tensor> outs;
    {
      AutocastAs same(*rec);  // the state it already has, the cast cache off
      outs = rec->fn(inputs);
    }
    keep(ctx, inputs, all.size(), rec);
    return outs;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto [rec, saved, n_all] = kept(ctx);
    std::vector<torch::Tensor> wrt;
    std::vector<std::size_t> wrt_index;
    auto inputs = leaves(ctx, saved, saved.size(), *rec, wrt, wrt_index);
    std::vector<torch::Tensor> outs;
    {
      torch::AutoGradMode grad_on(true);
      AutocastAs same(*rec);
      outs = rec->fn(inputs);
    }
    variable_list out(n_all + 1);  // one per tensor of `all`, and the undefined one of `rec`
    std::vector<torch::Tensor> ys, gys;
    for (std::size_t i = 0; i < outs.size() && i < grads.size(); ++i) {
      if (!grads[i].defined() || !outs[i].requires_grad()) continue;
      ys.push_back(outs[i]);
      gys.push_back(grads[i]);
    }
    if (ys.empty() || wrt.empty()) return out;
    auto g = torch::autograd::grad(ys, wrt, gys, /*retain_graph=*/false, /*create_graph=*/false, /*allow_unused=*/true);
    for (std::size_t i = 0; i < wrt_index.size(); ++i) out[wrt_index[i]] = g[i];
    return out;
  }
};

// x = fn(inputs)[0] made again in backward, the projections y_j = linear(x, W_j) once.
class RecomputeInput : public torch::autograd::Function<RecomputeInput> {
 public:
  // all: fn's inputs, its parameters, then the weights.
  static variable_list forward(AutogradContext* ctx, at::TensorList all, c10::intrusive_ptr<Recorded> rec,
                               std::int64_t n_weights) {
    const auto n_in = static_cast<std::ptrdiff_t>(rec->n_inputs), n_w = static_cast<std::ptrdiff_t>(n_weights);
    std::vector<torch::Tensor> inputs(all.begin(), all.begin() + n_in), saved(inputs);
    std::vector<torch::Tensor> ys;
    {
      AutocastAs same(*rec);
      const auto x = rec->fn(inputs).at(0);
      for (auto w = all.end() - n_w; w != all.end(); ++w) {
        ys.push_back(torch::linear(x, *w));
        saved.push_back(*w);
      }
    }
    keep(ctx, saved, all.size(), rec);
    return ys;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto [rec, saved, n_all] = kept(ctx);
    const auto n_in = rec->n_inputs, n_w = saved.size() - n_in, first_w = n_all - n_w;
    std::vector<torch::Tensor> wrt;
    std::vector<std::size_t> wrt_index;
    auto inputs = leaves(ctx, saved, n_in, *rec, wrt, wrt_index);
    torch::Tensor x;  // in the projections' dtype, with its graph back to the inputs
    {
      torch::AutoGradMode grad_on(true);
      AutocastAs same(*rec);
      x = rec->fn(inputs).at(0);
      const auto dt = x.scalar_type();
      const bool cast = rec->autocast && (dt == at::kFloat || dt == at::kHalf || dt == at::kBFloat16);
      if (cast) x = x.to(rec->autocast_dtype);
    }
    c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
    variable_list out(n_all + 2);  // one per tensor of `all`, and the undefined ones of rec and n_weights
    torch::Tensor gx;
    {
      torch::NoGradGuard no_grad;
      const auto x2 = x.detach().reshape({-1, x.size(-1)});
      for (std::size_t j = 0; j < n_w && j < grads.size(); ++j) {
        if (!grads[j].defined()) continue;
        const auto& w = saved[n_in + j];
        const auto w_c = w.to(x.scalar_type());
        const auto g2 = grads[j].to(x.scalar_type()).reshape({-1, w.size(0)});
        if (ctx->needs_input_grad(first_w + j)) out[first_w + j] = g2.t().mm(x2).to(w.scalar_type());
        auto part = g2.mm(w_c);
        gx = gx.defined() ? gx.add_(part) : part;
      }
    }
    if (!gx.defined() || wrt.empty() || !x.requires_grad()) return out;
    auto g = torch::autograd::grad({x}, wrt, {gx.view(x.sizes())}, /*retain_graph=*/false, /*create_graph=*/false,
                                   /*allow_unused=*/true);
    for (std::size_t i = 0; i < wrt_index.size(); ++i) out[wrt_index[i]] = g[i];
    return out;
  }
};

c10::intrusive_ptr<Recorded> record(const TensorFunction& fn, const std::vector<torch::Tensor>& inputs,
                                    const std::vector<torch::Tensor>& params) {
  auto rec = c10::make_intrusive<Recorded>();
  rec->fn = fn;
  rec->n_inputs = inputs.size();
  rec->params = params;
  for (const auto& x : inputs) {
    if (x.is_floating_point()) {
      rec->device = x.device().type();
      break;
    }
  }
  rec->autocast = at::autocast::is_autocast_enabled(rec->device);
  rec->autocast_dtype = at::autocast::get_autocast_dtype(rec->device);
  return rec;
}

}  // namespace

std::vector<torch::Tensor> recompute(const TensorFunction& fn, const std::vector<torch::Tensor>& inputs,
                                     const std::vector<torch::Tensor>& params) {
  std::vector<torch::Tensor> all(inputs);
  all.insert(all.end(), params.begin(), params.end());
  return Recompute::apply(at::TensorList(all), record(fn, inputs, params));
}

std::vector<torch::Tensor> recompute_input(const TensorFunction& fn, const std::vector<torch::Tensor>& inputs,
                                           const std::vector<torch::Tensor>& params,
                                           const std::vector<torch::Tensor>& weights) {
  std::vector<torch::Tensor> all(inputs);
  all.insert(all.end(), params.begin(), params.end());
  all.insert(all.end(), weights.begin(), weights.end());
  return RecomputeInput::apply(at::TensorList(all), record(fn, inputs, params),
                               static_cast<std::int64_t>(weights.size()));
}

}  // namespace eagle::head
