// The tensors of a target checkpoint per family: every name and shape the config implies, the
// parameter counts, and the experts of sparse layers assembled into the forward's layout.
#include <fmt/format.h>

#include "eagle/util/error.h"
#include "target_impl.h"

namespace eagle::target {

namespace {

// Where a sparse layer's router and experts live in each family's checkpoint.
struct ExpertNames {
  std::string router, router_bias;
  std::string gate, up, down;  // per expert, with {} for its index (Qwen3-MoE, Mixtral)
};
ExpertNames expert_names(const TargetConfig& c, const std::string& p) {
  if (c.family == Family::mixtral)
    return {p + "block_sparse_moe.gate.weight", "", p + "block_sparse_moe.experts.{}.w1.weight",
            p + "block_sparse_moe.experts.{}.w3.weight", p + "block_sparse_moe.experts.{}.w2.weight"};
  if (c.family == Family::gpt_oss) return {p + "mlp.router.weight", p + "mlp.router.bias", "", "", ""};
  return {p + "mlp.gate.weight", "", p + "mlp.experts.{}.gate_proj.weight", p + "mlp.experts.{}.up_proj.weight",
          p + "mlp.experts.{}.down_proj.weight"};
}
std::string expert(const std::string& pattern, std::int64_t e) { return fmt::format(fmt::runtime(pattern), e); }

// DeepSeek-V2/V3 and GLM-4.5's grouped routers: shared experts beside the routed ones (mlp.shared_experts.*).
bool grouped(const TargetConfig& c) {
  return c.moe.routing == MoeRouting::sigmoid_grouped || c.moe.routing == MoeRouting::softmax_grouped;
}

// gpt-oss keeps all experts of a layer in one tensor per projection: [E, in, out] in bf16 (gate and
// up columns interleaved), or MXFP4 blocks [E, out, in / 32, 16] and scales [E, out, in / 32].
void gpt_oss_experts(const TargetConfig& c, const std::string& p, std::map<std::string, std::vector<std::int64_t>>& e) {
  const auto E = c.moe.num_experts, H = c.hidden_size, I = c.moe.intermediate_size;
  const auto x = p + "mlp.experts.";
  e[x + "gate_up_proj_bias"] = {E, 2 * I};
  e[x + "down_proj_bias"] = {E, H};
  if (c.quant.method == "mxfp4") {
    e[x + "gate_up_proj_blocks"] = {E, 2 * I, H / 32, 16};
    e[x + "gate_up_proj_scales"] = {E, 2 * I, H / 32};
    e[x + "down_proj_blocks"] = {E, H, I / 32, 16};
    e[x + "down_proj_scales"] = {E, H, I / 32};
  } else {
    e[x + "gate_up_proj"] = {E, H, 2 * I};
    e[x + "down_proj"] = {E, I, H};
  }
}

// Each FP8 projection weight's block scales, [ceil(rows / b0), ceil(columns / b1)] fp32.
void add_fp8_scales(const TargetConfig& c, std::map<std::string, std::vector<std::int64_t>>& e) {
  std::vector<std::pair<std::string, std::vector<std::int64_t>>> scales;
  for (const auto& [name, shape] : e)
    if (is_fp8_weight(c, name))
      scales.push_back({name + "_scale_inv",
                        {(shape[0] + c.quant.fp8_block[0] - 1) / c.quant.fp8_block[0],
                         (shape[1] + c.quant.fp8_block[1] - 1) / c.quant.fp8_block[1]}});
  for (auto& [name, shape] : scales) e[name] = shape;
}

// DeepSeek-V3's multi-head latent attention (DeepseekV3Attention's modules); attention_bias puts a bias on
// q_a_proj, kv_a_proj_with_mqa and o_proj (q_proj and the b projections never have one).
void mla_tensors(const TargetConfig& c, const std::string& p, std::map<std::string, std::vector<std::int64_t>>& e) {
  const auto H = c.hidden_size, nh = c.num_attention_heads,
             qk = c.attention.qk_nope_head_dim + c.attention.qk_rope_head_dim;
  const auto a = p + "self_attn.";
  if (c.attention.q_lora_rank > 0) {
    e[a + "q_a_proj.weight"] = {c.attention.q_lora_rank, H};
    if (c.attention.bias) e[a + "q_a_proj.bias"] = {c.attention.q_lora_rank};
    e[a + "q_a_layernorm.weight"] = {c.attention.q_lora_rank};
    e[a + "q_b_proj.weight"] = {nh * qk, c.attention.q_lora_rank};
  } else {
    e[a + "q_proj.weight"] = {nh * qk, H};
  }
  e[a + "kv_a_proj_with_mqa.weight"] = {c.attention.kv_lora_rank + c.attention.qk_rope_head_dim, H};
  if (c.attention.bias) e[a + "kv_a_proj_with_mqa.bias"] = {c.attention.kv_lora_rank + c.attention.qk_rope_head_dim};
  e[a + "kv_a_layernorm.weight"] = {c.attention.kv_lora_rank};
  e[a + "kv_b_proj.weight"] = {nh * (c.attention.qk_nope_head_dim + c.attention.v_head_dim), c.attention.kv_lora_rank};
  e[a + "o_proj.weight"] = {H, nh * c.attention.v_head_dim};
  if (c.attention.o_bias) e[a + "o_proj.bias"] = {H};
}

// A Gated DeltaNet layer (Qwen3NextGatedDeltaNet, Qwen3_5GatedDeltaNet): Qwen3-Next's projections fused per key
// head (in_proj_qkvz, in_proj_ba), Qwen3.5's split (in_proj_qkv, in_proj_z, in_proj_b, in_proj_a); the
// depthwise conv1d [conv_dim, 1, K] without bias, dt_bias and A_log per value head, the gated norm per value
// head's features, out_proj.
void linear_tensors(const TargetConfig& c, const std::string& p, std::map<std::string, std::vector<std::int64_t>>& e) {
  const auto H = c.hidden_size, kd = c.linear_attention.key_dim(), vd = c.linear_attention.value_dim(),
             hv = c.linear_attention.value_heads;
  const auto a = p + "linear_attn.";
  if (c.family == Family::qwen3_next) {
    e[a + "in_proj_qkvz.weight"] = {2 * kd + 2 * vd, H};
    e[a + "in_proj_ba.weight"] = {2 * hv, H};
  } else {
    e[a + "in_proj_qkv.weight"] = {2 * kd + vd, H};
    e[a + "in_proj_z.weight"] = {vd, H};
    e[a + "in_proj_b.weight"] = {hv, H};
    e[a + "in_proj_a.weight"] = {hv, H};
  }
  e[a + "conv1d.weight"] = {c.linear_attention.conv_dim(), 1, c.linear_attention.conv_kernel};
  e[a + "dt_bias"] = {hv};
  e[a + "A_log"] = {hv};
  e[a + "norm.weight"] = {c.linear_attention.value_head_dim};
  e[a + "out_proj.weight"] = {H, vd};
}

}  // namespace

std::map<std::string, std::vector<std::int64_t>> end_tensors(const TargetConfig& c) {
  std::map<std::string, std::vector<std::int64_t>> e;
  e["model.embed_tokens.weight"] = {c.vocab_size, c.hidden_size};
  e["model.norm.weight"] = {c.hidden_size};
  if (!c.tie_word_embeddings) e["lm_head.weight"] = {c.vocab_size, c.hidden_size};
  return e;
}

std::map<std::string, std::vector<std::int64_t>> expected_tensors(const TargetConfig& c) {
  const auto H = c.hidden_size, I = c.intermediate_size, D = c.head_dim;
  const auto q = c.num_attention_heads * D, kv = c.num_key_value_heads * D;
  auto e = end_tensors(c);
  if (c.gemma4.enabled) {  // per-layer head widths, KV sharing, per-layer inputs (target_gemma4.cpp)
    gemma4_tensors(c, e);
    return e;
  }
  for (std::int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const auto p = fmt::format("model.layers.{}.", l);
    e[p + "input_layernorm.weight"] = {H};
    e[p + "post_attention_layernorm.weight"] = {H};
    if (c.sandwich_norms) {
      e[p + "pre_feedforward_layernorm.weight"] = {H};
      e[p + "post_feedforward_layernorm.weight"] = {H};
    }
    // Gated attention (Qwen3.5, Qwen3-Next): q_proj holds each head's query and its output gate.
    const auto qp = c.attention.output_gate ? 2 * q : q;
    if (c.linear(l)) {
      linear_tensors(c, p, e);
    } else if (c.mla()) {
      mla_tensors(c, p, e);
    } else if (c.fused_checkpoint) {
      e[p + "self_attn.qkv_proj.weight"] = {q + 2 * kv, H};
    } else {
      e[p + "self_attn.q_proj.weight"] = {qp, H};
      e[p + "self_attn.k_proj.weight"] = {kv, H};
      e[p + "self_attn.v_proj.weight"] = {kv, H};
    }
    const bool attention = !c.mla() && !c.linear(l);  // q/k/v/o_proj
    if (attention) e[p + "self_attn.o_proj.weight"] = {H, q};
    if (c.attention.bias && attention) {
      e[p + "self_attn.q_proj.bias"] = {qp};
      e[p + "self_attn.k_proj.bias"] = {kv};
      e[p + "self_attn.v_proj.bias"] = {kv};
    }
    if (c.attention.o_bias && attention) e[p + "self_attn.o_proj.bias"] = {H};
    if (c.attention.qk_norm && !c.linear(l)) {
      e[p + "self_attn.q_norm.weight"] = {D};
      e[p + "self_attn.k_norm.weight"] = {D};
    }
    if (c.attention.sinks) e[p + "self_attn.sinks"] = {c.num_attention_heads};
    if (!c.sparse(l)) {
      if (c.fused_checkpoint) {
        e[p + "mlp.gate_up_proj.weight"] = {2 * I, H};
      } else {
        e[p + "mlp.gate_proj.weight"] = {I, H};
        e[p + "mlp.up_proj.weight"] = {I, H};
      }
      e[p + "mlp.down_proj.weight"] = {H, I};
      continue;
    }
    const auto n = expert_names(c, p);
    const auto E = c.moe.num_experts, Ie = c.moe.intermediate_size;
    e[n.router] = {E, H};
    if (c.moe.router_bias) e[n.router_bias] = {E};
    // DeepSeek-V3, GLM-4.5: a score correction bias; DeepSeek-V2 (softmax_grouped) has none.
    if (c.moe.routing == MoeRouting::sigmoid_grouped) e[p + "mlp.gate.e_score_correction_bias"] = {E};
    if (grouped(c) && c.moe.shared_intermediate_size > 0) {
      const auto Is = c.moe.shared_intermediate_size;
      e[p + "mlp.shared_experts.gate_proj.weight"] = {Is, H};
      e[p + "mlp.shared_experts.up_proj.weight"] = {Is, H};
      e[p + "mlp.shared_experts.down_proj.weight"] = {H, Is};
    }
    if (c.moe.shared_expert_gate) {  // Qwen3-Next, Qwen3.5-MoE: one gated shared expert
      const auto Is = c.moe.shared_intermediate_size;
      e[p + "mlp.shared_expert.gate_proj.weight"] = {Is, H};
      e[p + "mlp.shared_expert.up_proj.weight"] = {Is, H};
      e[p + "mlp.shared_expert.down_proj.weight"] = {H, Is};
      e[p + "mlp.shared_expert_gate.weight"] = {1, H};
    }
    if (c.family == Family::gpt_oss) {
      gpt_oss_experts(c, p, e);
      continue;
    }
    for (std::int64_t x = 0; x < E; ++x) {
      e[expert(n.gate, x)] = {Ie, H};
      e[expert(n.up, x)] = {Ie, H};
      e[expert(n.down, x)] = {H, Ie};
    }
  }
  if (!c.quant.fp8_block.empty()) add_fp8_scales(c, e);
  return e;
}

bool is_fp8_weight(const TargetConfig& c, const std::string& name) {
  if (c.quant.fp8_block.empty() || name.rfind("model.layers.", 0) != 0 || !name.ends_with("_proj.weight")) return false;
  for (const auto& skip : c.quant.fp8_skip)
    if (name.find(skip) != std::string::npos) return false;
  return true;
}

torch::Tensor dequantize_fp8(const torch::Tensor& weight, const torch::Tensor& scale_inv,
                             const std::vector<std::int64_t>& block, torch::ScalarType dtype, const std::string& name) {
  EAGLE_CHECK(weight.scalar_type() == torch::kFloat8_e4m3fn,
              Error(ErrorKind::input, "FP8 weights must be float8_e4m3fn (F8_E4M3)")
                  .place(fmt::format("tensor \"{}\"", name))
                  .found(std::string(c10::toString(weight.scalar_type()))));
  const auto rows = weight.size(0), cols = weight.size(1);
  // A block scale is a positive finite number in every real checkpoint: a negative one flips the
  // block's signs, zero erases it, and both are finite, so no later check would see them.
  const auto scales = scale_inv.to(torch::kFloat32);
  const auto bad_scales =
      torch::logical_not(torch::isfinite(scales).logical_and(scales > 0)).sum().item<std::int64_t>();
  EAGLE_CHECK(bad_scales == 0, Error(ErrorKind::input, "FP8 block scales must be positive and finite")
                                   .place(fmt::format("tensor \"{}_scale_inv\"", name))
                                   .expected("weight_scale_inv > 0 in every block")
                                   .found(fmt::format("{} of {} blocks not (smallest {})", bad_scales, scales.numel(),
                                                      scales.min().item<float>()))
                                   .hint("no real checkpoint holds these: the file is damaged or not FP8 scales"));
  // Each scale covers a block of rows x columns (the last blocks may be partial).
  const auto s =
      scales.repeat_interleave(block[0], 0).narrow(0, 0, rows).repeat_interleave(block[1], 1).narrow(1, 0, cols);
  auto out = (weight.to(torch::kFloat32) * s).to(dtype);
  EAGLE_CHECK(torch::isfinite(out).all().item<bool>(),
              Error(ErrorKind::input, "FP8 weights times their block scales overflow the target's dtype")
                  .place(fmt::format("tensor \"{}\"", name))
                  .found(fmt::format("largest scale {}", scales.max().item<float>()))
                  .hint("no real checkpoint holds these: the file is damaged"));
  return out;
}

// Parameters of the checkpoint as a float model has them (MXFP4 blocks count their values), and
// those one token runs through (top-k of the experts).
std::pair<std::int64_t, std::int64_t> parameter_counts(TargetConfig c) {
  c.quant.method.clear();
  c.quant.fp8_block.clear();  // the block scales are not parameters
  std::int64_t total = 0;
  for (const auto& [name, shape] : expected_tensors(c)) {
    std::int64_t n = 1;
    for (auto d : shape) n *= d;
    total += n;
  }
  std::int64_t idle = 0;
  const auto per_expert = 3 * c.hidden_size * c.moe.intermediate_size +
                          (c.moe.expert_bias ? 2 * c.moe.intermediate_size + c.hidden_size : 0);
  for (std::int64_t l = 0; l < c.num_hidden_layers; ++l)
    if (c.sparse(l)) idle += (c.moe.num_experts - c.moe.experts_per_token) * per_expert;
  return {total, total - idle};
}

bool is_packed_fp4(const std::string& name) { return name.ends_with("_blocks") || name.ends_with("_scales"); }

// A sparse layer's router and experts in the layout of TargetLayerWeights: [E, 2 I, H] gate rows
// then up rows, [E, H, I] down.
void assemble_experts(const TargetConfig& c, const std::string& p, TargetLayerWeights& w,
                      const std::function<torch::Tensor(const std::string&)>& get, torch::ScalarType dtype) {
  const auto n = expert_names(c, p);
  w.router_w = get(n.router);
  if (c.moe.router_bias) w.router_b = get(n.router_bias);
  // fp32 as transformers keeps it (_keep_in_fp32_modules_strict), whatever the model's dtype.
  if (c.moe.routing == MoeRouting::sigmoid_grouped)
    w.router_score_bias = get(p + "mlp.gate.e_score_correction_bias").to(torch::kFloat32);
  if (grouped(c) && c.moe.shared_intermediate_size > 0) {
    w.shared_gate_up =
        torch::cat({get(p + "mlp.shared_experts.gate_proj.weight"), get(p + "mlp.shared_experts.up_proj.weight")});
    w.shared_down = get(p + "mlp.shared_experts.down_proj.weight");
  }
  if (c.moe.shared_expert_gate) {
    w.shared_gate_up =
        torch::cat({get(p + "mlp.shared_expert.gate_proj.weight"), get(p + "mlp.shared_expert.up_proj.weight")});
    w.shared_down = get(p + "mlp.shared_expert.down_proj.weight");
    w.shared_gate_w = get(p + "mlp.shared_expert_gate.weight");
  }
  if (c.family != Family::gpt_oss) {
    std::vector<torch::Tensor> gate_up, down;
    for (std::int64_t e = 0; e < c.moe.num_experts; ++e) {
      gate_up.push_back(torch::cat({get(expert(n.gate, e)), get(expert(n.up, e))}));
      down.push_back(get(expert(n.down, e)));
    }
    w.experts_gate_up = torch::stack(gate_up);
    w.experts_down = torch::stack(down);
    return;
  }
  // gpt-oss: [E, 2 I, H] with gate and up rows interleaved (the checkpoint's [E, H, 2 I] transposed,
  // or the MXFP4 blocks' own row order), de-interleaved here; down [E, H, I].
  const auto x = p + "mlp.experts.";
  torch::Tensor gate_up, down;
  if (c.quant.method == "mxfp4") {
    gate_up =
        dequantize_mxfp4(get(x + "gate_up_proj_blocks"), get(x + "gate_up_proj_scales"), dtype, x + "gate_up_proj");
    down = dequantize_mxfp4(get(x + "down_proj_blocks"), get(x + "down_proj_scales"), dtype, x + "down_proj");
  } else {
    gate_up = get(x + "gate_up_proj").transpose(1, 2);
    down = get(x + "down_proj").transpose(1, 2).contiguous();
  }
  using torch::indexing::Slice;
  auto split = [](const torch::Tensor& t) {  // interleaved along dim 1 -> gate block, then up block
    return torch::cat({t.index({Slice(), Slice(0, torch::indexing::None, 2)}),
                       t.index({Slice(), Slice(1, torch::indexing::None, 2)})},
                      1)
        .contiguous();
  };
  w.experts_gate_up = split(gate_up);
  w.experts_gate_up_b = split(get(x + "gate_up_proj_bias"));
  w.experts_down = down;
  w.experts_down_b = get(x + "down_proj_bias");
}

}  // namespace eagle::target
