// Gemma 4's checkpoint layout and the pieces of its forward no other family has (transformers'
// modeling_gemma4: Gemma4TextModel, Gemma4TextDecoderLayer, Gemma4TextAttention, Gemma4TextRouter,
// Gemma4TextExperts): the per-layer inputs (PLE), each layer's per-layer-input step and layer scalar, and
// the MoE block beside the dense MLP.
#include <cmath>

#include <fmt/format.h>

#include "eagle/model/moe.h"
#include "target_impl.h"

namespace eagle::target {

namespace {

// A MoE layer's router (router.proj [E, H], its scale [H], per_expert_scale [E]), experts (all in one tensor per
// projection: gate rows then up rows [E, 2 I, H], as chunk(2) splits them; down [E, H, I]) and its three norms.
void gemma4_moe_tensors(const TargetConfig& c, const std::string& p,
                        std::map<std::string, std::vector<std::int64_t>>& e) {
  const auto H = c.hidden_size, E = c.moe.num_experts, I = c.moe.intermediate_size;
  e[p + "router.proj.weight"] = {E, H};
  e[p + "router.scale"] = {H};
  e[p + "router.per_expert_scale"] = {E};
  e[p + "experts.gate_up_proj"] = {E, 2 * I, H};
  e[p + "experts.down_proj"] = {E, H, I};
  for (const char* n : {"pre_feedforward_layernorm_2", "post_feedforward_layernorm_1", "post_feedforward_layernorm_2"})
    e[p + n + ".weight"] = {H};
}

void assemble_gemma4_moe(const std::string& p, TargetLayerWeights& w,
                         const std::function<torch::Tensor(const std::string&)>& get) {
  w.router_w = get(p + "router.proj.weight");
  w.router_scale = get(p + "router.scale");
  w.router_expert_scale = get(p + "router.per_expert_scale");
  w.experts_gate_up = get(p + "experts.gate_up_proj");
  w.experts_down = get(p + "experts.down_proj");
  w.pre_ff_norm_2 = get(p + "pre_feedforward_layernorm_2.weight");
  w.post_ff_norm_1 = get(p + "post_feedforward_layernorm_1.weight");
  w.post_ff_norm_2 = get(p + "post_feedforward_layernorm_2.weight");
}

}  // namespace

void gemma4_tensors(const TargetConfig& c, std::map<std::string, std::vector<std::int64_t>>& e) {
  const auto H = c.hidden_size, nh = c.num_attention_heads, L = c.num_hidden_layers, Dp = c.gemma4.per_layer_input_dim;
  if (Dp > 0) {
    e["model.embed_tokens_per_layer.weight"] = {c.gemma4.per_layer_vocab, L * Dp};
    e["model.per_layer_model_projection.weight"] = {L * Dp, H};
    e["model.per_layer_projection_norm.weight"] = {Dp};
  }
  for (std::int64_t l = 0; l < L; ++l) {
    const auto p = fmt::format("model.layers.{}.", l);
    const auto a = p + "self_attn.";
    const auto d = c.layer_head_dim(l), kv = c.layer_kv_heads_of(l) * d, I = c.layer_intermediate(l);
    for (const char* n : {"input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm",
                          "post_feedforward_layernorm"})
      e[p + n + ".weight"] = {H};
    e[p + "layer_scalar"] = {1};
    e[a + "q_proj.weight"] = {nh * d, H};
    e[a + "q_norm.weight"] = {d};
    e[a + "o_proj.weight"] = {H, nh * d};
    if (c.attention.bias) {
      e[a + "q_proj.bias"] = {nh * d};
      e[a + "o_proj.bias"] = {H};
    }
    if (!c.kv_shared(l)) {  // a KV-shared layer has no k/v projections (nor k_norm)
      e[a + "k_proj.weight"] = {kv, H};
      e[a + "k_norm.weight"] = {d};
      if (c.attention.bias) e[a + "k_proj.bias"] = {kv};
      if (!c.values_from_keys(l)) {
        e[a + "v_proj.weight"] = {kv, H};
        if (c.attention.bias) e[a + "v_proj.bias"] = {kv};
      }
    }
    e[p + "mlp.gate_proj.weight"] = {I, H};
    e[p + "mlp.up_proj.weight"] = {I, H};
    e[p + "mlp.down_proj.weight"] = {H, I};
    if (Dp > 0) {
      e[p + "per_layer_input_gate.weight"] = {Dp, H};
      e[p + "per_layer_projection.weight"] = {H, Dp};
      e[p + "post_per_layer_input_norm.weight"] = {H};
    }
    if (c.sparse(l)) gemma4_moe_tensors(c, p, e);
  }
}

void assemble_gemma4_layer(const TargetConfig& c, std::int64_t l, TargetLayerWeights& w,
                           const std::function<torch::Tensor(const std::string&)>& get) {
  const auto p = fmt::format("model.layers.{}.", l);
  const auto a = p + "self_attn.";
  std::vector<torch::Tensor> rows = {get(a + "q_proj.weight")}, bias;
  if (c.attention.bias) bias.push_back(get(a + "q_proj.bias"));
  if (!c.kv_shared(l)) {
    rows.push_back(get(a + "k_proj.weight"));
    if (c.attention.bias) bias.push_back(get(a + "k_proj.bias"));
    if (!c.values_from_keys(l)) {
      rows.push_back(get(a + "v_proj.weight"));
      if (c.attention.bias) bias.push_back(get(a + "v_proj.bias"));
    }
    w.k_norm = get(a + "k_norm.weight");
  }
  w.qkv_w = torch::cat(rows);
  if (c.attention.bias) {
    w.qkv_b = torch::cat(bias);
    w.o_b = get(a + "o_proj.bias");
  }
  w.q_norm = get(a + "q_norm.weight");
  w.o_w = get(a + "o_proj.weight");
  w.input_norm = get(p + "input_layernorm.weight");
  w.post_norm = get(p + "post_attention_layernorm.weight");
  w.pre_ff_norm = get(p + "pre_feedforward_layernorm.weight");
  w.post_ff_norm = get(p + "post_feedforward_layernorm.weight");
  w.gate_up_w = torch::cat({get(p + "mlp.gate_proj.weight"), get(p + "mlp.up_proj.weight")});
  w.down_w = get(p + "mlp.down_proj.weight");
  w.layer_scalar = get(p + "layer_scalar");
  if (c.gemma4.per_layer_input_dim > 0) {
    w.ple_gate_w = get(p + "per_layer_input_gate.weight");
    w.ple_proj_w = get(p + "per_layer_projection.weight");
    w.ple_norm = get(p + "post_per_layer_input_norm.weight");
  }
  if (c.sparse(l)) assemble_gemma4_moe(p, w, get);
}

bool gemma4_ignored_tensor(const TargetConfig& c, const std::string& name) {
  if (!c.gemma4.enabled) return false;
  // Gemma4Model's vision and audio towers and their embedders (a text-only target never runs them).
  if (c.multimodal)
    for (const char* tower : {"model.vision_tower.", "model.audio_tower.", "model.embed_vision.", "model.embed_audio."})
      if (name.starts_with(tower)) return true;
  // Gemma4TextModel's _keys_to_ignore_on_load_unexpected: a KV-shared layer's k/v projections and norms.
  for (std::int64_t l = c.gemma4.first_kv_shared; l < c.num_hidden_layers; ++l) {
    const auto a = fmt::format("model.layers.{}.self_attn.", l);
    if (!name.starts_with(a)) continue;
    for (const char* m : {"k_proj.", "v_proj.", "k_norm.", "v_norm."})
      if (name.compare(a.size(), std::string(m).size(), m) == 0) return true;
  }
  return false;
}

namespace {

// A float32 scalar cast to x's dtype, then the product (Gemma4TextScaledWordEmbedding's embed_scale).
torch::Tensor times_scale(const torch::Tensor& x, double scale) {
  const auto s = torch::scalar_tensor(scale, torch::TensorOptions().dtype(torch::kFloat32).device(x.device()));
  return x * s.to(x.scalar_type());
}

}  // namespace

torch::Tensor gemma4_per_layer_inputs(const TargetConfig& c, const Gemma4Inputs& w, const torch::Tensor& ids,
                                      const torch::Tensor& x) {
  const auto L = c.num_hidden_layers, Dp = c.gemma4.per_layer_input_dim;
  auto shape = x.sizes().vec();
  shape.pop_back();
  shape.push_back(L);
  shape.push_back(Dp);
  // get_per_layer_inputs: the token's per-layer embedding times sqrt(Dp).
  const auto token = times_scale(torch::embedding(w.embed, ids), std::sqrt(static_cast<double>(Dp))).view(shape);
  // project_per_layer_inputs: the scaled input embedding projected, times hidden_size^-1/2, normed per layer,
  // then (projection + token) * 2^-1/2.
  auto proj = torch::linear(x, w.projection) * std::pow(static_cast<double>(c.hidden_size), -0.5);
  proj = target_norm(c, proj.view(shape), w.norm);
  return (proj + token) * std::pow(2.0, -0.5);
}

torch::Tensor gemma4_layer_tail(const TargetConfig& c, const TargetLayerWeights& w, const torch::Tensor& h,
                                const torch::Tensor& p) {
  auto out = h;
  if (p.defined()) {
    auto g = torch::gelu(torch::linear(h, w.ple_gate_w), "tanh") * p;
    out = h + target_norm(c, torch::linear(g, w.ple_proj_w), w.ple_norm);
  }
  return out * w.layer_scalar;
}

torch::Tensor gemma4_moe(const TargetConfig& c, const TargetLayerWeights& w, const torch::Tensor& dense,
                         const torch::Tensor& r) {
  // Gemma4TextDecoderLayer: the router sees the residual stream itself, the experts its own pre-norm.
  const auto flat = r.reshape({-1, r.size(-1)});
  const auto route =
      model::route_experts(c.moe_router(), flat, w.router_w, {}, {}, w.router_scale, w.router_expert_scale);
  model::ExpertActivation act;
  act.gelu_tanh = true;  // Gemma4TextExperts: ACT2FN[hidden_activation], gelu_pytorch_tanh
  const model::ExpertWeights experts{w.experts_gate_up, {}, w.experts_down, {}};
  const auto moe = model::run_experts(target_norm(c, flat, w.pre_ff_norm_2), route, experts, act).view(r.sizes());
  return target_norm(c, dense, w.post_ff_norm_1) + target_norm(c, moe, w.post_ff_norm_2);
}

}  // namespace eagle::target
