// Llama-family building blocks (see layers.h); formulas follow transformers' modeling_llama and
// modeling_rope_utils.
#include "eagle/model/layers.h"

#include <cmath>

namespace eagle::model {

torch::Tensor rms_norm(const torch::Tensor& x, const torch::Tensor& weight, double eps) {
  auto h = x.to(torch::kFloat32);
  auto var = h.pow(2).mean(-1, /*keepdim=*/true);
  h = h * torch::rsqrt(var + eps);
  return weight * h.to(x.scalar_type());
}

torch::Tensor rms_norm_one_plus(const torch::Tensor& x, const torch::Tensor& weight, double eps) {
  auto h = x.to(torch::kFloat32);
  h = h * torch::rsqrt(h.pow(2).mean(-1, /*keepdim=*/true) + eps);
  return (h * (1.0 + weight.to(torch::kFloat32))).to(x.scalar_type());
}

torch::Tensor soft_cap(const torch::Tensor& x, double cap) {
  if (cap <= 0) return x;
  return torch::tanh(x / cap) * cap;
}

torch::Tensor rms_norm_fp32_weight(const torch::Tensor& x, const torch::Tensor& weight, double eps) {
  auto h = x.to(torch::kFloat32);
  h = h * torch::rsqrt(h.pow(2).mean(-1, /*keepdim=*/true) + eps);
  return (weight * h).to(x.scalar_type());
}

torch::Tensor rms_norm_unscaled(const torch::Tensor& x, double eps) {
  auto h = x.to(torch::kFloat32);
  return (h * torch::rsqrt(h.pow(2).mean(-1, /*keepdim=*/true) + eps)).to(x.scalar_type());
}

namespace {

// The dynamic-NTK base for a sequence length: theta * (factor * len / max_pos - factor + 1)^(d / (d - 2)).
double dynamic_base(const RopeConfig& cfg, double len, double max_pos) {
  const double d = static_cast<double>(cfg.head_dim);
  return cfg.theta * std::pow(cfg.factor * len / max_pos - (cfg.factor - 1.0), d / (d - 2.0));
}

double dynamic_max_pos(const RopeConfig& cfg) {
  return static_cast<double>(cfg.original_max_position_embeddings > 0 ? cfg.original_max_position_embeddings
                                                                       : cfg.max_position_embeddings);
}

// 1 / base^(2j / d) for j < d/2, in fp32 (base given as an fp32 tensor of any shape broadcasting).
torch::Tensor inv_freq_of(const RopeConfig& cfg, const torch::Tensor& base) {
  auto idx = torch::arange(0, cfg.head_dim, 2, base.options().dtype(torch::kInt64)).to(torch::kFloat32);
  return 1.0 / torch::pow(base, idx / static_cast<double>(cfg.head_dim));
}

// YaRN (transformers' _compute_yarn_parameters): frequencies below the correction range are
// interpolated (divided by factor), those above it kept, with a linear ramp between.
torch::Tensor yarn_inv_freq(const RopeConfig& cfg) {
  const double dim = static_cast<double>(cfg.head_dim), base = cfg.theta;
  const double orig = static_cast<double>(cfg.original_max_position_embeddings);
  auto correction_dim = [&](double rotations) {
    return dim * std::log(orig / (rotations * 2.0 * M_PI)) / (2.0 * std::log(base));
  };
  double low = correction_dim(cfg.beta_fast), high = correction_dim(cfg.beta_slow);
  if (cfg.truncate) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  low = std::max(low, 0.0);
  high = std::min(high, dim - 1.0);
  if (low == high) high += 0.001;  // transformers' guard against a zero-width ramp
  const auto f32 = torch::TensorOptions().dtype(torch::kFloat32);
  auto pos_freqs = torch::pow(torch::tensor(base, f32), torch::arange(0, cfg.head_dim, 2, f32) / dim);
  auto extrapolation = 1.0 / pos_freqs;
  auto interpolation = 1.0 / (cfg.factor * pos_freqs);
  auto ramp = ((torch::arange(cfg.head_dim / 2, f32) - low) / (high - low)).clamp(0, 1);
  auto keep = 1 - ramp;  // 1: extrapolate (the original frequency)
  return interpolation * (1 - keep) + extrapolation * keep;
}

}  // namespace

double rope_attention_factor(const RopeConfig& cfg) {
  if (cfg.type == "longrope") {  // transformers' _compute_longrope_parameters
    if (cfg.attention_factor > 0) return cfg.attention_factor;
    const double orig = static_cast<double>(cfg.original_max_position_embeddings);
    return cfg.factor <= 1.0 ? 1.0 : std::sqrt(1.0 + std::log(cfg.factor) / std::log(orig));
  }
  if (cfg.type != "yarn") return 1.0;
  if (cfg.attention_factor > 0) return cfg.attention_factor;
  auto mscale = [](double scale, double m) { return scale <= 1 ? 1.0 : 0.1 * m * std::log(scale) + 1.0; };
  if (cfg.mscale != 0 && cfg.mscale_all_dim != 0)
    return mscale(cfg.factor, cfg.mscale) / mscale(cfg.factor, cfg.mscale_all_dim);
  return mscale(cfg.factor, 1.0);
}

// 1 / (ext * base^(2j / d)) with the short or long per-frequency factors ext.
torch::Tensor longrope_inv_freq(const RopeConfig& cfg, const std::vector<double>& ext) {
  const auto f32 = torch::TensorOptions().dtype(torch::kFloat32);
  const auto shape = torch::arange(0, cfg.head_dim, 2, torch::TensorOptions().dtype(torch::kInt64)).to(torch::kFloat32) /
                     static_cast<double>(cfg.head_dim);
  return 1.0 / (torch::tensor(ext, torch::TensorOptions().dtype(torch::kFloat64)).to(torch::kFloat32) *
                torch::pow(torch::tensor(cfg.theta, f32), shape));
}

torch::Tensor rope_inv_freq_long(const RopeConfig& cfg) { return longrope_inv_freq(cfg, cfg.long_factor); }

torch::Tensor rope_inv_freq(const RopeConfig& cfg, std::int64_t seq_len) {
  if (cfg.type == "yarn") return yarn_inv_freq(cfg);
  if (cfg.type == "longrope")
    return longrope_inv_freq(
        cfg, seq_len > cfg.original_max_position_embeddings ? cfg.long_factor : cfg.short_factor);
  double base = cfg.theta;
  if (cfg.type == "dynamic" && static_cast<double>(seq_len) > dynamic_max_pos(cfg))
    base = dynamic_base(cfg, static_cast<double>(seq_len), dynamic_max_pos(cfg));
  auto inv = inv_freq_of(cfg, torch::tensor(base, torch::TensorOptions().dtype(torch::kFloat32)));
  if (cfg.type == "linear") return inv / cfg.factor;
  if (cfg.type == "llama3") {
    const double old_ctx = static_cast<double>(cfg.original_max_position_embeddings);
    const double low_wavelen = old_ctx / cfg.low_freq_factor;
    const double high_wavelen = old_ctx / cfg.high_freq_factor;
    auto wavelen = 2.0 * M_PI / inv;
    auto scaled = torch::where(wavelen > low_wavelen, inv / cfg.factor, inv);
    auto smooth = (old_ctx / wavelen - cfg.low_freq_factor) / (cfg.high_freq_factor - cfg.low_freq_factor);
    auto smoothed = (1.0 - smooth) * scaled / cfg.factor + smooth * scaled;
    auto is_medium = (wavelen >= high_wavelen) & (wavelen <= low_wavelen);
    return torch::where(is_medium, smoothed, scaled);
  }
  return inv;
}

torch::Tensor rope_inv_freq_dynamic(const RopeConfig& cfg, const torch::Tensor& inv_freq,
                                    const torch::Tensor& seq_len) {
  const double max_pos = dynamic_max_pos(cfg), d = static_cast<double>(cfg.head_dim);
  // rope_inv_freq's arithmetic on the device: the base in float64, then fp32 like the host path.
  auto len = seq_len.to(torch::kFloat64);
  auto ratio = (cfg.factor * len / max_pos - (cfg.factor - 1.0)).clamp_min(1.0);
  auto scaled = inv_freq_of(cfg, (cfg.theta * torch::pow(ratio, d / (d - 2.0))).to(torch::kFloat32));
  return torch::where(len > max_pos, scaled, inv_freq.to(seq_len.device()));
}

torch::Tensor rope_inv_freq_serving(const RopeConfig& cfg) {
  if (cfg.type != "dynamic") return rope_inv_freq(cfg);
  // vLLM: max_len = max_position_embeddings * factor, fed to the dynamic formula once.
  const double m = static_cast<double>(cfg.max_position_embeddings);
  const double base = dynamic_base(cfg, cfg.factor * m, m);
  return inv_freq_of(cfg, torch::tensor(base, torch::TensorOptions().dtype(torch::kFloat32)));
}

std::pair<torch::Tensor, torch::Tensor> rope_cos_sin(const torch::Tensor& inv_freq, const torch::Tensor& position_ids,
                                                     torch::ScalarType dtype, double scaling) {
  auto inv = inv_freq.to(position_ids.device(), torch::kFloat32);
  auto freqs = position_ids.to(torch::kFloat32).unsqueeze(-1) * inv.view({1, 1, -1});  // [B, T, D/2]
  auto emb = torch::cat({freqs, freqs}, -1);
  if (scaling == 1.0) return {emb.cos().to(dtype), emb.sin().to(dtype)};
  return {(emb.cos() * scaling).to(dtype), (emb.sin() * scaling).to(dtype)};
}

namespace {
torch::Tensor rotate_half(const torch::Tensor& x) {
  auto half = x.size(-1) / 2;
  auto x1 = x.narrow(-1, 0, half);
  auto x2 = x.narrow(-1, half, half);
  return torch::cat({-x2, x1}, -1);
}
}  // namespace

torch::Tensor apply_rope(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin,
                         std::int64_t head_axis) {
  auto c = cos.unsqueeze(head_axis);
  auto s = sin.unsqueeze(head_axis);
  const auto r = cos.size(-1);
  if (r == x.size(-1)) return x * c + rotate_half(x) * s;
  const auto rot = x.narrow(-1, 0, r);  // partial rotary: the first r features turn, the rest pass
  return torch::cat({rot * c + rotate_half(rot) * s, x.narrow(-1, r, x.size(-1) - r)}, -1);
}

torch::Tensor repeat_kv(const torch::Tensor& x, std::int64_t n_rep) {
  if (n_rep == 1) return x;
  auto b = x.size(0), h = x.size(1), t = x.size(2), d = x.size(3);
  return x.unsqueeze(2).expand({b, h, n_rep, t, d}).reshape({b, h * n_rep, t, d});
}

torch::Tensor swiglu(const torch::Tensor& x, const torch::Tensor& gate_w, const torch::Tensor& up_w,
                     const torch::Tensor& down_w) {
  return torch::linear(torch::silu(torch::linear(x, gate_w)) * torch::linear(x, up_w), down_w);
}

}  // namespace eagle::model
