// TargetModel loading: config.json plus model.safetensors or the shards of
// model.safetensors.index.json, every tensor checked for presence and shape before any use
// (target_checkpoint.cpp), then assembled into the forward's layout.
#include <filesystem>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "eagle/model/dtype.h"
#include "eagle/model/safetensors.h"
#include "eagle/model/shape_check.h"
#include "eagle/util/error.h"
#include "eagle/util/json_file.h"
#include "eagle/util/log.h"
#include "target_impl.h"

#ifdef EAGLE_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <cuda_runtime_api.h>
#endif

namespace eagle::target {

namespace fs = std::filesystem;

std::vector<std::int64_t> default_aux_layer_ids(std::int64_t L) {
  // EAGLE-3's [2, L/2, L-3] is strictly increasing from L = 7 on. Smaller (test) models get evenly
  // spread layer inputs [1, L/2, L-1] instead, clamped to [0, L-1], so the ids stay low -> high and
  // never select the final normed output (hidden_states[L]).
  if (L >= 7) return {2, L / 2, L - 3};
  auto clamp = [L](std::int64_t v) { return std::max<std::int64_t>(0, std::min(v, L - 1)); };
  return {clamp(1), clamp(L / 2), clamp(L - 1)};
}

TargetConfig TargetConfig::from_model_dir(const std::string& dir) {
  EAGLE_CHECK(fs::is_directory(dir), Error(ErrorKind::input, "model folder not found")
                                         .file(dir)
                                         .hint("--model_name_or_path must be a local Hugging Face model folder"));
  return from_json_file((fs::path(dir) / "config.json").string());
}

TargetModel TargetModel::load(const std::string& dir_name, torch::ScalarType dtype, torch::Device device) {
  const fs::path dir(dir_name);
  const auto c = TargetConfig::from_model_dir(dir_name);
  const auto ck = open_checkpoint(dir, c.multimodal);
  // The config's sizes are checked against what the files hold before anything is built from them
  // (a config claiming ten million layers must fail at once, not after listing their tensors).
  check_counts(dir, ck, c);
  const auto expected = expected_tensors(c);
  check_tensors(dir, ck, expected, c);

  auto raw = [&](const std::string& name) { return ck.files[ck.where.at(name)].get(ck.file_name(name)); };
  dtype = resolve_dtype(dtype, ck, expected, c);
  check_fits(c, dtype, device, dir_name);
  // On CPU in the stored dtype, to() returns the mapping's view itself: no copy. MXFP4 blocks and
  // scales stay uint8 until assemble dequantizes them.
  auto get = [&](const std::string& name) {
    auto t = raw(name);
    if (is_fp8_weight(c, name))  // dequantized on the device, block by block
      return dequantize_fp8(t.to(device), raw(name + "_scale_inv").to(device), c.quant.fp8_block, dtype, name);
    if (t.scalar_type() == torch::kUInt8) return t.to(device);
    // The sigmoid routers' correction bias stays fp32 (transformers' _keep_in_fp32_modules_strict).
    return t.to(device, name.ends_with("e_score_correction_bias") ? torch::kFloat32 : dtype);
  };
  TargetModel m;
  try {
    m = assemble(c, dtype, device, get);
  } catch (Error& e) {  // the dequantization's refusals name the tensor; the folder is named here
    if (e.file().empty()) e.file(dir_name);
    throw;
  }
  log::info("model", "loaded {} ({} layers, hidden {}, vocab {}, {} parameters) as {} on {}", c.architecture,
            c.num_hidden_layers, c.hidden_size, c.vocab_size, m.parameter_count(), c10::toString(dtype), device.str());
  return m;
}

TargetModel TargetModel::random(const TargetConfig& config_in, torch::ScalarType dtype, torch::Device device) {
  auto config = config_in;
  config.quant.method.clear();  // random float experts and weights
  config.quant.fp8_block.clear();
  const auto shapes = expected_tensors(config);
  const auto opts = torch::TensorOptions().dtype(dtype).device(device);
  auto m = assemble(config, dtype, device, [&](const std::string& name) {
    const auto& shape = shapes.at(name);
    // Unit scale: w = 1, or Gemma's (Qwen3.5's) 1 + w with w = 0; the Gated DeltaNet's gated norm is plain
    // (Gemma 4's MoE norms: post_feedforward_layernorm_1.weight and the like).
    if (name.find("norm.weight") != std::string::npos || name.find("layernorm_") != std::string::npos)
      return config.norm_one_plus && !name.ends_with("linear_attn.norm.weight") ? torch::zeros(shape, opts)
                                                                               : torch::ones(shape, opts);
    if (name.ends_with("A_log")) return torch::zeros(shape, opts);  // decay rate exp(A_log) = 1
    if (name.ends_with("layer_scalar")) return torch::ones(shape, opts);  // Gemma 4's, as initialised
    if (name.ends_with("router.scale") || name.ends_with("router.per_expert_scale"))
      return torch::ones(shape, opts);  // Gemma 4's router scales, as initialised
    return torch::randn(shape, opts).mul_(0.02);  // transformers' initializer_range
  });
  log::info("model", "random {} ({} layers, hidden {}, vocab {}, {} parameters) as {} on {}", config.architecture,
            config.num_hidden_layers, config.hidden_size, config.vocab_size, m.parameter_count(), c10::toString(dtype),
            device.str());
  return m;
}

namespace {

// An MLA layer's attention weights (DeepseekV3Attention): the two projections of the hidden state fused
// into qkv_w (q_a_proj or q_proj rows, then kv_a_proj_with_mqa's), the latent norms and b projections.
void assemble_mla(const TargetConfig& c, const std::string& p, TargetLayerWeights& w,
                  const std::function<torch::Tensor(const std::string&)>& get) {
  const auto a = p + "self_attn.";
  const bool lora = c.attention.q_lora_rank > 0;
  const auto q_w = get(a + (lora ? "q_a_proj.weight" : "q_proj.weight"));
  w.qkv_w = torch::cat({q_w, get(a + "kv_a_proj_with_mqa.weight")});
  if (c.attention.bias)  // q_proj has no bias (only q_a_proj does)
    w.qkv_b = torch::cat({lora ? get(a + "q_a_proj.bias") : torch::zeros({q_w.size(0)}, q_w.options()),
                          get(a + "kv_a_proj_with_mqa.bias")});
  if (lora) {
    w.q_a_norm = get(a + "q_a_layernorm.weight");
    w.q_b_w = get(a + "q_b_proj.weight");
  }
  w.kv_a_norm = get(a + "kv_a_layernorm.weight");
  w.kv_b_w = get(a + "kv_b_proj.weight");
}

// A Gated DeltaNet layer's weights (Qwen3_5GatedDeltaNet, Qwen3NextGatedDeltaNet). Qwen3-Next's in_proj_qkvz holds
// per key head [q (dk), k (dk), v (r dv), z (r dv)] and in_proj_ba [b (r), a (r)] (r = value_heads / key_heads, the
// key head's value heads), which fix_query_key_value_ordering splits per head: the rows are reordered here into
// Qwen3.5's [q of every head; k; v; z], [b; a], the same values in the same head order.
void assemble_linear(const TargetConfig& c, const std::string& p, TargetLayerWeights& w,
                     const std::function<torch::Tensor(const std::string&)>& get) {
  const auto a = p + "linear_attn.";
  if (c.family == Family::qwen3_next) {
    const auto nk = c.linear_attention.key_heads, dk = c.linear_attention.key_head_dim;
    const auto rdv = c.linear_attention.value_heads / nk * c.linear_attention.value_head_dim,
               r = c.linear_attention.value_heads / nk;
    const auto qkvz = get(a + "in_proj_qkvz.weight");
    const auto H = qkvz.size(1);
    const auto g = qkvz.view({nk, 2 * dk + 2 * rdv, H});
    const auto ba = get(a + "in_proj_ba.weight").view({nk, 2 * r, H});
    auto rows = [&](const torch::Tensor& t, std::int64_t from, std::int64_t n) { return t.narrow(1, from, n).reshape({-1, H}); };
    w.lin_in_w = torch::cat({rows(g, 0, dk), rows(g, dk, dk), rows(g, 2 * dk, rdv), rows(g, 2 * dk + rdv, rdv),
                             rows(ba, 0, r), rows(ba, r, r)});
  } else {
    w.lin_in_w = torch::cat({get(a + "in_proj_qkv.weight"), get(a + "in_proj_z.weight"), get(a + "in_proj_b.weight"),
                             get(a + "in_proj_a.weight")});
  }
  w.conv_w = get(a + "conv1d.weight").squeeze(1);  // [conv_dim, K]
  w.dt_bias = get(a + "dt_bias");
  w.a_log = get(a + "A_log");
  w.lin_norm = get(a + "norm.weight");
  w.o_w = get(a + "out_proj.weight");
}

}  // namespace

TargetModel TargetModel::assemble(const TargetConfig& c, torch::ScalarType dtype, torch::Device device,
                                  const std::function<torch::Tensor(const std::string&)>& get) {
  auto impl = std::make_shared<Impl>();
  impl->cfg = c;
  // "cuda" means the current device; tensors report it with its index, so the model's device does too.
  if (device.is_cuda() && !device.has_index())
    device = torch::empty({0}, torch::TensorOptions().device(device)).device();
  impl->device = device;
  impl->dtype = dtype;
  impl->embed = get("model.embed_tokens.weight");
  impl->final_norm = get("model.norm.weight");
  impl->lm_head = c.tie_word_embeddings ? impl->embed : get("lm_head.weight");
  for (std::int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const auto p = fmt::format("model.layers.{}.", l);
    TargetLayerWeights w;
    if (c.gemma4.enabled) {
      assemble_gemma4_layer(c, l, w, get);
      impl->layers.push_back(std::move(w));
      continue;
    }
    w.input_norm = get(p + "input_layernorm.weight");
    w.post_norm = get(p + "post_attention_layernorm.weight");
    if (c.sandwich_norms) {
      w.pre_ff_norm = get(p + "pre_feedforward_layernorm.weight");
      w.post_ff_norm = get(p + "post_feedforward_layernorm.weight");
    }
    if (c.linear(l)) {
      assemble_linear(c, p, w, get);
    } else if (c.mla()) {
      assemble_mla(c, p, w, get);
    } else {
      w.qkv_w = c.fused_checkpoint ? get(p + "self_attn.qkv_proj.weight")
                                   : torch::cat({get(p + "self_attn.q_proj.weight"), get(p + "self_attn.k_proj.weight"),
                                                 get(p + "self_attn.v_proj.weight")});
      if (c.attention.bias)
        w.qkv_b = torch::cat(
            {get(p + "self_attn.q_proj.bias"), get(p + "self_attn.k_proj.bias"), get(p + "self_attn.v_proj.bias")});
    }
    if (!c.linear(l)) w.o_w = get(p + "self_attn.o_proj.weight");
    if (c.attention.o_bias && !c.linear(l)) w.o_b = get(p + "self_attn.o_proj.bias");
    if (c.attention.qk_norm && !c.linear(l)) {
      w.q_norm = get(p + "self_attn.q_norm.weight");
      w.k_norm = get(p + "self_attn.k_norm.weight");
    }
    if (c.attention.sinks) w.sinks = get(p + "self_attn.sinks");
    if (c.sparse(l)) {
      assemble_experts(c, p, w, get, dtype);
    } else {
      w.gate_up_w = c.fused_checkpoint  // Phi-3: gate rows, then up rows, as chunk(2) splits them
                        ? get(p + "mlp.gate_up_proj.weight")
                        : torch::cat({get(p + "mlp.gate_proj.weight"), get(p + "mlp.up_proj.weight")});
      w.down_w = get(p + "mlp.down_proj.weight");
    }
    impl->layers.push_back(std::move(w));
  }
  std::tie(impl->parameter_count, impl->active_parameter_count) = parameter_counts(c);
  impl->inv_freq = model::rope_inv_freq(c.rope);
  // Gemma 4's proportional RoPE: the pairs past rope_angles have frequency 0 (cos 1, sin 0: they do not turn).
  if (c.gemma4.rope_angles > 0)
    impl->inv_freq.narrow(0, c.gemma4.rope_angles, impl->inv_freq.size(0) - c.gemma4.rope_angles).zero_();
  impl->inv_freq = impl->inv_freq.to(device);
  if (c.gemma4.per_layer_input_dim > 0)
    impl->per_layer = {get("model.embed_tokens_per_layer.weight"), get("model.per_layer_model_projection.weight"),
                       get("model.per_layer_projection_norm.weight")};
  if (c.rope.type == "longrope") impl->long_inv_freq = model::rope_inv_freq_long(c.rope).to(device);
  if (c.attention.local_rope) impl->local_inv_freq = model::rope_inv_freq(*c.attention.local_rope).to(device);
  impl->aux_ids = default_aux_layer_ids(c.num_hidden_layers);
  TargetModel m;
  m.impl_ = std::move(impl);
  return m;
}

TargetEnds TargetModel::load_ends(const std::string& dir_name, torch::ScalarType dtype, torch::Device device) {
  TargetEnds e;
  e.config = TargetConfig::from_model_dir(dir_name);
  const auto& c = e.config;
  const auto ck = open_checkpoint(fs::path(dir_name), c.multimodal);
  const auto expected = end_tensors(c);  // nothing per layer: the layer count is not compared here
  check_tensors(fs::path(dir_name), ck, expected, c, /*extras_allowed=*/true);
  e.dtype = resolve_dtype(dtype, ck, expected, c);
  auto get = [&](const std::string& name) {
    return ck.files[ck.where.at(name)].get(ck.file_name(name)).to(device, e.dtype);
  };
  e.embed = get("model.embed_tokens.weight");
  e.final_norm = get("model.norm.weight");
  e.lm_head = c.tie_word_embeddings ? e.embed : get("lm_head.weight");
  log::info("model", "loaded the ends of {} (embedding, final norm, LM head; no decoder layer) as {} on {}", dir_name,
            c10::toString(e.dtype), device.str());
  return e;
}

TargetEnds TargetModel::ends() const {
  return {impl_->cfg, impl_->dtype, impl_->embed, impl_->final_norm, impl_->lm_head};
}

const TargetConfig& TargetModel::config() const { return impl_->cfg; }
torch::Device TargetModel::device() const { return impl_->device; }
torch::ScalarType TargetModel::dtype() const { return impl_->dtype; }
std::int64_t TargetModel::parameter_count() const { return impl_->parameter_count; }
std::int64_t TargetModel::active_parameter_count() const { return impl_->active_parameter_count; }

bool TargetModel::graph_safe() const {
  const auto& m = *impl_;
  if (!m.cfg.moe.enabled() || !m.device.is_cuda()) return true;
#ifdef EAGLE_WITH_CUDA
  return m.dtype == torch::kBFloat16 && at::cuda::getDeviceProperties(m.device.index())->major >= 9 &&
         m.cfg.hidden_size % 8 == 0 && m.cfg.moe.intermediate_size % 8 == 0;
#else
  return false;
#endif
}

std::int64_t TargetModel::graphed_steps(std::int64_t max_cuda_graphs, Step step) const {
  if (!impl_->device.is_cuda() || !graph_safe()) return 0;
  if (step == Step::decoding && impl_->cfg.rope.type == "dynamic") return 0;
  return max_cuda_graphs;
}
const std::vector<std::int64_t>& TargetModel::aux_layer_ids() const { return impl_->aux_ids; }
torch::Tensor TargetModel::lm_head_weight() const { return impl_->lm_head; }
torch::Tensor TargetModel::embedding_weight() const { return impl_->embed; }

std::vector<std::string> TargetModel::non_finite_weights() const {
  torch::NoGradGuard no_grad;
  const auto& m = *impl_;
  std::vector<std::string> bad;
  auto check = [&](const std::string& name, const torch::Tensor& t) {
    if (t.defined() && !torch::isfinite(t).all().item<bool>()) bad.push_back(name);
  };
  check("model.embed_tokens.weight", m.embed);
  check("model.norm.weight", m.final_norm);
  if (!m.cfg.tie_word_embeddings) check("lm_head.weight", m.lm_head);
  for (std::size_t l = 0; l < m.layers.size(); ++l) {
    const auto& w = m.layers[l];
    const auto p = fmt::format("model.layers.{}.", l);
    check(p + "input_layernorm.weight", w.input_norm);
    check(p + "post_attention_layernorm.weight", w.post_norm);
    check(p + "pre_feedforward_layernorm.weight", w.pre_ff_norm);
    check(p + "post_feedforward_layernorm.weight", w.post_ff_norm);
    const bool mla = m.cfg.mla();
    check(p + (mla ? "self_attn.{q_a,q,kv_a}_proj(_with_mqa).weight" : "self_attn.{q,k,v}_proj.weight"), w.qkv_w);
    check(p + (mla ? "self_attn.{q_a,kv_a}_proj(_with_mqa).bias" : "self_attn.{q,k,v}_proj.bias"), w.qkv_b);
    check(p + "self_attn.q_a_layernorm.weight", w.q_a_norm);
    check(p + "self_attn.q_b_proj.weight", w.q_b_w);
    check(p + "self_attn.kv_a_layernorm.weight", w.kv_a_norm);
    check(p + "self_attn.kv_b_proj.weight", w.kv_b_w);
    check(p + (m.cfg.linear(static_cast<std::int64_t>(l)) ? "linear_attn.out_proj.weight" : "self_attn.o_proj.weight"),
          w.o_w);
    check(p + "self_attn.o_proj.bias", w.o_b);
    check(p + "self_attn.q_norm.weight", w.q_norm);
    check(p + "self_attn.k_norm.weight", w.k_norm);
    check(p + "mlp.{gate,up}_proj.weight", w.gate_up_w);
    check(p + "mlp.down_proj.weight", w.down_w);
    check(p + "self_attn.sinks", w.sinks);
    check(p + "router", w.router_w);
    check(p + "router bias", w.router_b);
    check(p + "experts (gate, up)", w.experts_gate_up);
    check(p + "experts (gate, up) bias", w.experts_gate_up_b);
    check(p + "experts (down)", w.experts_down);
    check(p + "experts (down) bias", w.experts_down_b);
    check(p + "mlp.gate.e_score_correction_bias", w.router_score_bias);
    check(p + "mlp.shared_experts.{gate,up}_proj.weight", w.shared_gate_up);
    check(p + "mlp.shared_experts.down_proj.weight", w.shared_down);
    check(p + "mlp.shared_expert_gate.weight", w.shared_gate_w);
    check(p + "linear_attn.in_proj_*.weight", w.lin_in_w);
    check(p + "linear_attn.conv1d.weight", w.conv_w);
    check(p + "linear_attn.dt_bias", w.dt_bias);
    check(p + "linear_attn.A_log", w.a_log);
    check(p + "linear_attn.norm.weight", w.lin_norm);
    check(p + "layer_scalar", w.layer_scalar);
    check(p + "per_layer_input_gate.weight", w.ple_gate_w);
    check(p + "per_layer_projection.weight", w.ple_proj_w);
    check(p + "post_per_layer_input_norm.weight", w.ple_norm);
    check(p + "router.scale", w.router_scale);
    check(p + "router.per_expert_scale", w.router_expert_scale);
    check(p + "pre_feedforward_layernorm_2.weight", w.pre_ff_norm_2);
    check(p + "post_feedforward_layernorm_1.weight", w.post_ff_norm_1);
    check(p + "post_feedforward_layernorm_2.weight", w.post_ff_norm_2);
  }
  check("model.embed_tokens_per_layer.weight", m.per_layer.embed);
  check("model.per_layer_model_projection.weight", m.per_layer.projection);
  check("model.per_layer_projection_norm.weight", m.per_layer.norm);
  return bad;
}

void TargetModel::set_aux_layer_ids(std::vector<std::int64_t> ids) {
  const auto L = impl_->cfg.num_hidden_layers;
  EAGLE_CHECK(
      !ids.empty(),
      Error(ErrorKind::usage, "aux hidden-state layer ids must not be empty").place("aux_hidden_state_layer_ids"));
  for (std::size_t i = 0; i < ids.size(); ++i) {
    EAGLE_CHECK(ids[i] >= 0 && ids[i] <= L, Error(ErrorKind::usage, "aux hidden-state layer id out of range")
                                                .place("aux_hidden_state_layer_ids")
                                                .expected(fmt::format("0..{} (input-of-layer ids)", L))
                                                .found(std::to_string(ids[i])));
    EAGLE_CHECK(i == 0 || ids[i] >= ids[i - 1],
                Error(ErrorKind::usage, "aux hidden-state layer ids must be listed low -> high")
                    .place("aux_hidden_state_layer_ids")
                    .found(fmt::format("{}", ids)));
  }
  impl_->aux_ids = std::move(ids);
}

bool TargetModel::last_aux_pre_norm() const { return impl_->last_aux_pre_norm; }
void TargetModel::set_last_aux_pre_norm(bool pre_norm) { impl_->last_aux_pre_norm = pre_norm; }

std::int64_t TargetModel::chunk_tokens() const { return impl_->chunk_tokens; }
void TargetModel::set_chunk_tokens(std::int64_t tokens) {
  EAGLE_CHECK(tokens >= 0, Error(ErrorKind::usage, "target_chunk_tokens must be >= 0").found(std::to_string(tokens)));
  impl_->chunk_tokens = tokens;
}

TargetModel load_target(const config::Options& opts, torch::Device device,
                        const std::vector<std::int64_t>& aux_layer_ids) {
  auto target = TargetModel::load(opts.model_name_or_path, model::target_dtype(opts.target_dtype), device);
  // Every command that runs the target refuses NaN or Inf weights by name before they reach a feature (one read
  // of every weight; a NaN correction bias or norm weight would otherwise train and export without an error).
  const auto non_finite = target.non_finite_weights();
  EAGLE_CHECK(non_finite.empty(), Error(ErrorKind::input, "the target's weights hold NaN or Inf")
                                      .file(opts.model_name_or_path)
                                      .place(fmt::format("tensor {}", fmt::join(non_finite, ", ")))
                                      .expected("finite values")
                                      .hint("the checkpoint is corrupt; download or convert it again"));
  if (!aux_layer_ids.empty()) target.set_aux_layer_ids(aux_layer_ids);
  target.set_chunk_tokens(opts.target_chunk_tokens);
  const auto& c = target.config();
  log::info("model", "target {}: {} layers, hidden {}, vocabulary {}, {} parameters, aux layers [{}]", c.architecture,
            c.num_hidden_layers, c.hidden_size, c.vocab_size, target.parameter_count(),
            fmt::join(target.aux_layer_ids(), ", "));
  return target;
}

TargetModel load_target(const config::Options& opts, torch::Device device) {
  return load_target(opts, device, opts.aux_hidden_state_layer_ids);
}

}  // namespace eagle::target
