// The MTP layouts of the supported families (see mtp_layout.h).
#include "eagle/head/mtp_layout.h"

#include <array>

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
  l.replaced_by_target = "embed_tokens.weight";
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

}  // namespace

const MtpLayout& mtp_layout(const std::string& family) {
  static const std::array<MtpLayout, 4> kLayouts = {
      mimo(), qwen("qwen3_5", "Qwen3_5ForCausalLM or Qwen3_5ForConditionalGeneration"),
      qwen("qwen3_5_moe", "Qwen3_5MoeForCausalLM or Qwen3_5MoeForConditionalGeneration"),
      qwen("qwen3_next", "Qwen3NextForCausalLM")};
  for (const auto& l : kLayouts)
    if (l.family == family) return l;
  throw Error(ErrorKind::internal, "unknown MTP family")
      .found(family)
      .expected("mimo, qwen3_5, qwen3_5_moe or qwen3_next");
}

std::string mtp_native_name(const MtpLayout& layout, const std::string& parameter) {
  const std::string block = "mtp_block.";
  return layout.prefix + (parameter.rfind(block, 0) == 0 ? layout.block + parameter.substr(block.size()) : parameter);
}

}  // namespace eagle::head
