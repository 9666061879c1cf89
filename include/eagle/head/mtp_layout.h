// What differs between the families' shipped MTP layers (MTP.md 2, 7), as one descriptor the MTP head
// reads instead of asking for a family: the input's concat order and position-0 mask, the norm
// formula, which target state feeds step 1 and which output feeds the next step, the decoder
// block's attention, and the native tensor names (vLLM's mimo_mtp.py, qwen3_5_mtp.py, qwen3_next_mtp.py).
// The block's MLP, dense or a mixture of experts, is the config's (HeadConfig::moe_router).
#pragma once

#include <string>

namespace eagle::head {

struct MtpLayout {
  std::string family;  // HeadConfig::mtp_family: "mimo", "qwen3_5", "qwen3_5_moe", "qwen3_next"
  // Native names: prefix + module + ".weight"; the decoder block's tensors are prefix + block + their
  // names (input_layernorm, self_attn.*, post_attention_layernorm, mlp.*).
  std::string prefix;                       // "model.mtp_layers.0." (MiMo), "mtp." (Qwen)
  std::string embedding_norm, hidden_norm;  // the norms of e and h before the projection
  std::string projection;                   // [H, 2H], no bias: MiMo's input_proj, Qwen's fc
  std::string output_norm;                  // o = output_norm(block(u)): MiMo's final_layernorm, Qwen's norm
  std::string block;                        // "" (MiMo) or "layers.0." (Qwen)
  // A tensor under the prefix that is not the head's but vLLM loads and then replaces by the target's
  // (Qwen: embed_tokens.weight, which SpecForge's merge writes); "" none.
  std::string replaced_by_target;
  bool embedding_first = false;   // cat[e, h] (Qwen, DeepSeek, GLM) or cat[h, e] (MiMo)
  bool mask_position0 = false;    // the embedding zeroed at position 0 (MiMo, DeepSeek, GLM; not Qwen)
  bool norm_one_plus = false;     // every RMSNorm x * (1 + w) in fp32 (Qwen's GemmaRMSNorm), else x * w
  bool step1_pre_norm = false;    // step 1's h: the target's last hidden state before its final norm (MiMo)
                                  // or after it (DeepSeek, GLM, Qwen)
  bool feed_back_normed = true;   // steps >= 2 take o (MiMo, Qwen, DeepSeek) or the block's z (GLM, ERNIE)
  bool attention_bias = false;    // q/k/v bias (MiMo's Qwen2 block)
  bool qk_norm = false;           // q_norm, k_norm per head before RoPE (Qwen)
  bool attn_output_gate = false;  // q_proj emits [q | gate] per head; sigmoid(gate) * attention (Qwen)
  bool partial_rope = false;      // the target's rotary width (Qwen: partial_rotary_factor), else head_dim
  std::string architecture_hint;  // for messages: the architectures of the family
};

// The layout of a family name (HeadConfig::mtp_family); Error(internal) for an unknown one.
const MtpLayout& mtp_layout(const std::string& family);

// The native name of an MTP head parameter: layout.prefix + the name, the block's "mtp_block."
// replaced by layout.block.
std::string mtp_native_name(const MtpLayout& layout, const std::string& parameter);

}  // namespace eagle::head
