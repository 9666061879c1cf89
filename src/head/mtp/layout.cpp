// The MTP layouts of the supported families (see mtp_layout.h).
#include "eagle/head/mtp/layout.h"

#include <array>

#include <fmt/format.h>

#include "eagle/head/head.h"
#include "eagle/util/error.h"

namespace eagle::head {

namespace {

MtpLayout mimo() {
  // vllm/model_executor/models/mimo_mtp.py: inputs_embeds[positions == 0] = 0, then
  // input_proj(cat[hidden_layernorm(h), token_layernorm(e)]); a Qwen2 layer; final_layernorm(r + y).
  // Step 1's h is MiMoModel's hidden + residual, before the norm (vllm/model_executor/models/mimo.py).
  MtpLayout l;
  l.family = "mimo";
  l.prefix = "model.mtp_layers.0.";
  l.embedding_norm = "token_layernorm";
  l.hidden_norm = "hidden_layernorm";
  l.projection = "input_proj";
  l.output_norm = "final_layernorm";
  l.block = "";
  l.embedding_first = false;
  l.mask_position0 = true;
  l.norm_one_plus = false;
  l.step1_pre_norm = true;
  l.attention_bias = true;
  l.architecture_hint = "MiMoForCausalLM";
  return l;
}

// The Qwen MTP layer (one layout for the three families; their MLP, dense or a mixture of experts, is
// the config's: HeadConfig::moe_router).
MtpLayout qwen(const std::string& family, const std::string& architectures) {
  // vllm/model_executor/models/qwen3_5_mtp.py (Qwen3_5MultiTokenPredictor): fc(cat[pre_fc_norm_embedding(e),
  // pre_fc_norm_hidden(h)]), no position-0 mask; one full-attention Qwen3_5DecoderLayer; norm(y, r); the
  // GemmaRMSNorm x * (1 + w) throughout. Step 1's h is the target's output after its final norm. The loader
  // maps mtp.* to model.* for the text and the multimodal checkpoints alike (both keep mtp.* at the top).
  // Qwen3.5-MoE (Qwen3_5MoeMTP, the same file) and Qwen3-Next (qwen3_next_mtp.py: Qwen3NextMultiTokenPredictor,
  // a full-attention Qwen3NextDecoderLayer) are the same forward with a Qwen3NextSparseMoeBlock as the MLP.
  MtpLayout l;
  l.family = family;
  l.prefix = "mtp.";
  l.embedding_norm = "pre_fc_norm_embedding";
  l.hidden_norm = "pre_fc_norm_hidden";
  l.projection = "fc";
  l.output_norm = "norm";
  l.block = "layers.0.";
  l.replaced_by_target = {"embed_tokens.weight"};
  l.embedding_first = true;
  l.mask_position0 = false;
  l.norm_one_plus = true;
  l.step1_pre_norm = false;
  l.qk_norm = true;
  l.attn_output_gate = true;
  l.partial_rope = true;
  l.architecture_hint = architectures;
  return l;
}

// The MTP layer stored as the layer after the target's last, model.layers.{L}. (one layout for DeepSeek-V3 and
// GLM-4.5; what differs is the block's attention and the fed-back state).
MtpLayout after_last_layer(const std::string& family, const std::string& architectures) {
  // vllm/model_executor/models/deepseek_mtp.py (DeepSeekMultiTokenPredictorLayer) and glm4_moe_mtp.py
  // (Glm4MoeMultiTokenPredictorLayer): the embedding zeroed where positions == 0, eh_proj(cat[enorm(e),
  // hnorm(h)]) (embedding first, no bias), the block (model.layers.{L}.* with mtp_block. dropped by
  // _rewrite_spec_layer_name), z = residual + out; logits shared_head.head(shared_head.norm(z)) with the
  // target's lm_head as shared_head.head (load_eagle_model swaps it in). x * w norms with rms_norm_eps.
  // Step 1's h is the target's output after its final norm (DeepseekV2Model, Glm4MoeModel return norm(.)).
  MtpLayout l;
  l.family = family;
  l.prefix = "model.layers.{}.";
  l.prefix_after_last_layer = true;
  l.embedding_norm = "enorm";
  l.hidden_norm = "hnorm";
  l.projection = "eh_proj";
  l.output_norm = "shared_head.norm";
  l.block = "";
  l.replaced_by_target = {"embed_tokens.weight", "shared_head.head.weight"};
  l.embedding_first = true;
  l.mask_position0 = true;
  l.norm_one_plus = false;
  l.step1_pre_norm = false;
  l.architecture_hint = architectures;
  return l;
}

MtpLayout deepseek_v3() {
  // DeepSeekMultiTokenPredictorLayer returns (z, shared_head(z)): the logits from z, the normed z fed back
  // (the spec decoder splits the tuple). The block is a DeepseekV2DecoderLayer: MLA, a MoE MLP.
  auto l = after_last_layer("deepseek_v3", "DeepseekV3ForCausalLM (deepseek_v3, kimi_k2)");
  l.feed_back_normed = true;
  l.mla = true;
  return l;
}

MtpLayout glm4_moe() {
  // Glm4MoeMultiTokenPredictorLayer returns z alone: the logits normalise it, the next step takes z as it is.
  // The block is a Glm4MoeDecoderLayer: GQA with the target's qkv bias and use_qk_norm, partial RoPE, MoE.
  auto l = after_last_layer("glm4_moe", "Glm4MoeForCausalLM");
  l.feed_back_normed = false;
  l.attention_bias = true;
  l.qk_norm_of_target = true;
  l.partial_rope = true;
  return l;
}

}  // namespace

MtpLayout mtp_layout(const std::string& family, std::int64_t num_hidden_layers) {
  static const std::array<MtpLayout, 6> kLayouts = {
      mimo(),
      qwen("qwen3_5", "Qwen3_5ForCausalLM or Qwen3_5ForConditionalGeneration"),
      qwen("qwen3_5_moe", "Qwen3_5MoeForCausalLM or Qwen3_5MoeForConditionalGeneration"),
      qwen("qwen3_next", "Qwen3NextForCausalLM"),
      deepseek_v3(),
      glm4_moe()};
  for (auto l : kLayouts) {
    if (l.family != family) continue;
    if (l.prefix_after_last_layer) {
      EAGLE_CHECK(num_hidden_layers > 0, Error(ErrorKind::internal, "the MTP layer's index is unknown")
                                             .place(family)
                                             .expected("the target's num_hidden_layers (the layer after its last)")
                                             .found(std::to_string(num_hidden_layers)));
      l.prefix = fmt::format(fmt::runtime(l.prefix), num_hidden_layers);
    }
    return l;
  }
  throw Error(ErrorKind::internal, "unknown MTP family")
      .found(family)
      .expected("mimo, qwen3_5, qwen3_5_moe, qwen3_next, deepseek_v3 or glm4_moe");
}

MtpLayout mtp_layout(const HeadConfig& cfg) { return mtp_layout(cfg.mtp_family, cfg.target_num_hidden_layers); }

std::string mtp_native_name(const MtpLayout& layout, const std::string& parameter) {
  const std::string block = "mtp_block.";
  return layout.prefix + (parameter.rfind(block, 0) == 0 ? layout.block + parameter.substr(block.size()) : parameter);
}

}  // namespace eagle::head
