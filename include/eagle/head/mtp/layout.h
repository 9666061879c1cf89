// What differs between the families' shipped MTP layers (MTP.md 2, 7), as one descriptor the MTP head
// reads instead of asking for a family: the input's concat order and position-0 mask, the norm
// formula, which target state feeds step 1 and which output feeds the next step, the decoder
// block's attention, and the native tensor names (vLLM's mimo_mtp.py, qwen3_5_mtp.py, qwen3_next_mtp.py,
// deepseek_mtp.py, glm4_moe_mtp.py). The block's MLP, dense or a mixture of experts, is the config's
// (HeadConfig::moe_router).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace eagle::head {

struct HeadConfig;

struct MtpLayout {
  // HeadConfig::mtp_family: "mimo", "qwen3_5", "qwen3_5_moe", "qwen3_next", "deepseek_v3" (also Kimi-K2),
  // "glm4_moe" (GLM-4.5 / 4.6)
  std::string family;
  // Native names: prefix + module + ".weight"; the decoder block's tensors are prefix + block + their
  // names (input_layernorm, self_attn.*, post_attention_layernorm, mlp.*).
  std::string prefix;  // "model.mtp_layers.0." (MiMo), "mtp." (Qwen), "model.layers.{L}." (DeepSeek, GLM)
  // DeepSeek-V3, GLM-4.5: the layer after the target's last, model.layers.{num_hidden_layers}. (prefix
  // holds it once mtp_layout is given the target's layer count).
  bool prefix_after_last_layer = false;
  std::string embedding_norm, hidden_norm;  // the norms of e and h before the projection
  std::string projection;                   // [H, 2H], no bias: MiMo's input_proj, Qwen's fc, DeepSeek's eh_proj
  // o = output_norm(block(u)): MiMo's final_layernorm, Qwen's norm, DeepSeek's and GLM's shared_head.norm
  // (a dotted name: the module inside a holder module)
  std::string output_norm;
  std::string block;  // "" (MiMo, DeepSeek, GLM) or "layers.0." (Qwen)
  // Tensors under the prefix that are not the head's but that vLLM loads and then replaces by the target's:
  // Qwen's embed_tokens.weight (SpecForge's merge writes it); DeepSeek's and GLM's embed_tokens.weight and
  // shared_head.head.weight (the LM head: vLLM's load_eagle_model swaps in the target's lm_head).
  std::vector<std::string> replaced_by_target;
  bool embedding_first = false;   // cat[e, h] (Qwen, DeepSeek, GLM) or cat[h, e] (MiMo)
  bool mask_position0 = false;    // the embedding zeroed at position 0 (MiMo, DeepSeek, GLM; not Qwen)
  bool norm_one_plus = false;     // every RMSNorm x * (1 + w) in fp32 (Qwen's GemmaRMSNorm), else x * w
  bool step1_pre_norm = false;    // step 1's h: the target's last hidden state before its final norm (MiMo)
                                  // or after it (DeepSeek, GLM, Qwen)
  bool feed_back_normed = true;   // steps >= 2 take o (MiMo, Qwen, DeepSeek) or the block's z (GLM, ERNIE)
  bool attention_bias = false;    // q/k/v bias where the target has it (MiMo's Qwen2 block, GLM-4.5)
  bool qk_norm = false;           // q_norm, k_norm per head before RoPE (Qwen)
  bool qk_norm_of_target = false;  // q_norm, k_norm where the target has them (GLM-4.5's use_qk_norm)
  bool attn_output_gate = false;  // q_proj emits [q | gate] per head; sigmoid(gate) * attention (Qwen)
  bool partial_rope = false;      // the target's rotary width (Qwen, GLM: partial_rotary_factor), else head_dim
  bool mla = false;               // the target's multi-head latent attention (DeepSeek-V3's MLA)
  std::string architecture_hint;  // for messages: the architectures of the family
};

// The layout of a family name (HeadConfig::mtp_family); Error(internal) for an unknown one, and for a
// family whose layer sits after the target's last without num_hidden_layers (> 0) to place it.
MtpLayout mtp_layout(const std::string& family, std::int64_t num_hidden_layers = 0);
// The layout of an MTP head config: its family's, at its target_num_hidden_layers.
MtpLayout mtp_layout(const HeadConfig& cfg);

// The native name of an MTP head parameter: layout.prefix + the name, the block's "mtp_block."
// replaced by layout.block.
std::string mtp_native_name(const MtpLayout& layout, const std::string& parameter);

}  // namespace eagle::head
