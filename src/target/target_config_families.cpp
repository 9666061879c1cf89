// The fields of config.json only some families have (target_config.cpp reads the common ones and calls
// these from each family's row): Gemma 2/3, Phi-3, MiMo, DeepSeek-V2/V3's MLA and softmax scale, GLM-4.5,
// and the hybrid linear-attention families (Qwen3.5, Qwen3-Next).
#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "config_reader.h"
#include "eagle/model/mla.h"
#include "eagle/target/target_config.h"
#include "eagle/util/error.h"

namespace eagle::target {

// Gemma 2 and 3 (transformers' modeling_gemma2, _gemma3): norms, embedding scale, attention scale,
// soft caps, the GELU MLP, q/k norm (Gemma 3).
void read_gemma(const Reader& r, TargetConfig& c) {
  c.norm_one_plus = c.embed_scaled = c.sandwich_norms = true;
  c.attention.qk_norm = c.family == Family::gemma3_text;
  c.hidden_act = r.string_or("hidden_activation", r.string_or("hidden_act", "gelu_pytorch_tanh"));
  EAGLE_CHECK(c.hidden_act == "gelu_pytorch_tanh",
              r.bad("hidden_activation", "unsupported activation").expected("gelu_pytorch_tanh").found(c.hidden_act));
  const double scalar = r.number_in("query_pre_attn_scalar", static_cast<double>(c.head_dim), 1e-6, 1e12);
  c.attention.scale = 1.0 / std::sqrt(scalar);
  // Gemma 3's attention never applies attn_logit_softcapping (transformers does not pass it on).
  // A soft cap of 0 or null is no cap (kNoneMeansZero); each one is named by its own field.
  c.attention.softcap = c.family == Family::gemma2 ? r.softcap("attn_logit_softcapping") : 0.0;
  c.final_softcap = r.softcap("final_logit_softcapping");
  EAGLE_CHECK(!r.boolean_or("use_bidirectional_attention", false),
              r.bad("use_bidirectional_attention", "bidirectional attention (an encoder) is not a causal target")
                  .found("true"));
}

// Phi-3 / Phi-4: fused qkv_proj and gate_up_proj in the checkpoint (split at load), no bias.
void read_phi3(const Reader& r, TargetConfig& c) {
  c.fused_checkpoint = true;
  EAGLE_CHECK(!r.boolean_or("attention_bias", false),
              r.bad("attention_bias", "Phi-3 has no attention bias").found("true"));
}

// MiMo-7B: a Qwen2 decoder plus num_nextn_predict_layers MTP layers (model.mtp_layers.{i}.*), which
// the target does not load (MTP.md 2.4); 0 or absent: none.
void read_mimo(const Reader& r, TargetConfig& c) {
  c.num_mtp_layers = r.bounded_or("num_nextn_predict_layers", 0, 0, 16);
}

// DeepSeek-V3's multi-head latent attention (transformers' DeepseekV3Attention): the LoRA ranks and head
// widths, read before the RoPE (whose rotary width is qk_rope_head_dim: DeepseekV3Config sets head_dim to it).
void read_mla_dims(const Reader& r, TargetConfig& c) {
  namespace lim = model::limits;
  // Glm4MoeLiteConfig's defaults, else DeepseekV3Config's (DeepseekV2Config's are the same)
  const bool lite = c.family == Family::glm4_moe_lite;
  // null: q_proj straight from the hidden state (Moonlight); absent: transformers' default.
  c.attention.q_lora_rank =
      r.j.contains("q_lora_rank") ? r.bounded_or("q_lora_rank", 0, 1, lim::kMaxSize) : (lite ? 768 : 1536);
  c.attention.kv_lora_rank = r.bounded_or("kv_lora_rank", 512, 1, lim::kMaxSize);
  c.attention.qk_nope_head_dim = r.bounded_or("qk_nope_head_dim", lite ? 192 : 128, 1, lim::kMaxHeadDim);
  c.attention.qk_rope_head_dim = r.bounded_or("qk_rope_head_dim", 64, 2, lim::kMaxHeadDim);
  c.attention.v_head_dim = r.bounded_or("v_head_dim", lite ? 256 : 128, 1, lim::kMaxHeadDim);
  EAGLE_CHECK(c.attention.qk_rope_head_dim % 2 == 0,
              r.bad("qk_rope_head_dim", "must be even for RoPE").found(std::to_string(c.attention.qk_rope_head_dim)));
  EAGLE_CHECK(c.attention.qk_nope_head_dim + c.attention.qk_rope_head_dim <= lim::kMaxHeadDim,
              r.bad("qk_nope_head_dim", "query/key head width (qk_nope_head_dim + qk_rope_head_dim) out of range")
                  .expected(fmt::format("at most {}", lim::kMaxHeadDim))
                  .found(std::to_string(c.attention.qk_nope_head_dim + c.attention.qk_rope_head_dim)));
  // transformers builds one key and value per query head (kv_b_proj), then repeat_kv by heads / kv_heads:
  // only equal counts compute.
  EAGLE_CHECK(c.num_key_value_heads == c.num_attention_heads,
              r.bad("num_key_value_heads", "multi-head latent attention has one key/value head per query head")
                  .expected(std::to_string(c.num_attention_heads))
                  .found(std::to_string(c.num_key_value_heads)));
  c.head_dim = c.attention.qk_rope_head_dim;  // the RoPE's width until read_rope_layers has read it
}

// DeepSeek-V3 (and Kimi-K2, Moonlight; transformers' modeling_deepseek_v3) and GLM-4.7-Flash
// (glm4_moe_lite, whose attention is DeepseekV3Attention): MLA (read_mla_dims), the
// softmax scale qk_head_dim^-1/2 times mscale^2 (yarn_apply_mscale: any non-default RoPE with
// mscale_all_dim), attention_bias on q_a_proj, kv_a_proj_with_mqa and o_proj, the interleaved RoPE.
// DeepSeek-V2 (modeling_deepseek_v2's DeepseekV2Attention) is the same attention but for its RoPE: always
// interleaved pairs (no rope_interleave field), turned as complex numbers in fp32.
void read_deepseek(const Reader& r, TargetConfig& c) {
  c.attention.bias = c.attention.o_bias = r.boolean_or("attention_bias", false);
  const bool v2 = c.family == Family::deepseek_v2;
  c.attention.rope_interleave = v2 || r.boolean_or("rope_interleave", true);
  c.attention.rope_fp32 = v2;
  double scale = 1.0 / std::sqrt(static_cast<double>(c.head_dim));
  const char* key = r.has("rope_parameters") ? "rope_parameters" : "rope_scaling";
  if (c.rope.type != "default" && r.has(key) && r.j[key].is_object()) {
    const Reader p{r.path, r.j[key]};
    const double all_dim = p.number_or("mscale_all_dim", 0.0);
    // yarn_apply_mscale: yarn_get_mscale(factor, mscale_all_dim)^2 (1 for factors up to 1).
    if (all_dim != 0.0) {
      const double mscale = model::yarn_get_mscale(c.rope.factor, all_dim);
      scale *= mscale * mscale;
    }
  }
  c.attention.scale = scale;
}

// GLM-4.5 / 4.6 (transformers' modeling_glm4_moe): attention_bias on q/k/v only (o_proj never), q/k
// RMSNorm per head with use_qk_norm, partial RoPE (partial_rotary_factor, default 0.5: read_rope_layers).
void read_glm4_moe(const Reader& r, TargetConfig& c) {
  c.attention.bias = r.boolean_or("attention_bias", false);
  c.attention.o_bias = false;
  c.attention.qk_norm = r.boolean_or("use_qk_norm", false);
}

// Qwen3.5 / Qwen3.5-MoE / Qwen3-Next (transformers' modeling_qwen3_5, _qwen3_5_moe, _qwen3_next): layer_types of
// linear_attention (Gated DeltaNet) and full_attention (default: every full_attention_interval-th layer full,
// 4), the Gated DeltaNet's sizes (the config classes' defaults), full attention with an output gate (q_proj
// doubled), q/k norm and partial RoPE (partial_rotary_factor, default 0.25: read_rope_layers), every RMSNorm
// x * (1 + w) in fp32 (Qwen3NextRMSNorm), but the Gated DeltaNet's gated norm (plain weight).
void read_hybrid(const Reader& r, TargetConfig& c) {
  namespace lim = model::limits;
  const auto L = c.num_hidden_layers;
  c.linear_attention.layers.assign(static_cast<std::size_t>(L), false);
  if (auto types = read_layer_types(r, L, "full_attention", "linear_attention", "layer type")) {
    c.linear_attention.layers = std::move(*types);
  } else {
    const auto interval = r.bounded_or("full_attention_interval", 4, 1, lim::kMaxLayers);
    for (std::int64_t l = 0; l < L; ++l)
      c.linear_attention.layers[static_cast<std::size_t>(l)] = (l + 1) % interval != 0;
  }
  c.linear_attention.conv_kernel = r.bounded_or("linear_conv_kernel_dim", 4, 1, 64);
  c.linear_attention.key_head_dim = r.bounded_or("linear_key_head_dim", 128, 1, lim::kMaxHeadDim);
  c.linear_attention.value_head_dim = r.bounded_or("linear_value_head_dim", 128, 1, lim::kMaxHeadDim);
  c.linear_attention.key_heads = r.bounded_or("linear_num_key_heads", 16, 1, lim::kMaxHeads);
  c.linear_attention.value_heads = r.bounded_or("linear_num_value_heads", 32, 1, lim::kMaxHeads);
  EAGLE_CHECK(c.linear_attention.value_heads % c.linear_attention.key_heads == 0,
              r.bad("linear_num_value_heads", "must be a multiple of linear_num_key_heads")
                  .found(fmt::format("{} value heads, {} key heads", c.linear_attention.value_heads,
                                     c.linear_attention.key_heads)));
  c.attention.output_gate = true;  // transformers doubles q_proj whatever attn_output_gate says
  c.attention.qk_norm = true;
  c.norm_one_plus = true;
  c.attention.bias = c.attention.o_bias = r.boolean_or("attention_bias", false);
  // The shipped MTP layers (mtp.*, never loaded by the target; --draft mtp reads them, head/mtp/io.h): Qwen3.5's
  // mtp_num_hidden_layers (absent: none, as transformers writes the config), Qwen3-Next's
  // num_nextn_predict_layers (vLLM's qwen3_next_mtp.py reads it with default 1).
  c.num_mtp_layers = c.family == Family::qwen3_next ? r.bounded_or("num_nextn_predict_layers", 1, 0, 16)
                                                    : r.bounded_or("mtp_num_hidden_layers", 0, 0, 16);
}

}  // namespace eagle::target
