// A target's configuration read from its config.json without transformers: the family table's row
// (Family), every field the forward paths read (TargetConfig), the ids that end a reply and the default
// EAGLE-3 aux layers. The model itself and its steps: target.h.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "eagle/config/options.h"
#include "eagle/data/read_options.h"
#include "eagle/model/attention.h"
#include "eagle/model/layers.h"
#include "eagle/model/moe.h"

namespace eagle::target {

// How a mixture-of-experts layer weighs its experts (model/moe.h, shared with the MTP head's MoE block).
using MoeRouting = model::MoeRouting;

// The supported families, one per row of target_config.cpp's family table (its architecture,
// model_type, MoE bit and reader); the forward code never asks for a family, only for the flags below.
enum class Family {
  llama,
  mistral,
  qwen2,
  mimo,
  qwen3,
  qwen3_moe,
  mixtral,
  gpt_oss,
  gemma2,
  gemma3_text,
  phi3,
  deepseek_v2,  // DeepseekV2ForCausalLM: DeepSeek-V3's MLA (RoPE in fp32) with the softmax router
  deepseek_v3,
  glm4_moe,
  glm4_moe_lite,
  qwen3_next,   // Qwen3NextForCausalLM
  qwen3_5,      // Qwen3_5ForCausalLM (qwen3_5_text) or the multimodal Qwen3_5ForConditionalGeneration (qwen3_5)
  qwen3_5_moe,  // Qwen3_5MoeForCausalLM (qwen3_5_moe_text) or Qwen3_5MoeForConditionalGeneration (qwen3_5_moe)
  gemma4_text   // Gemma4ForCausalLM (gemma4_text) or the multimodal Gemma4ForConditionalGeneration (gemma4)
};

// Attention beyond its heads' count and width, every family (model::attention, model::mla; target_layer.cpp).
struct AttentionConfig {
  bool bias = false;         // q/k/v bias (Qwen2; Llama/Qwen3 with attention_bias)
  bool o_bias = false;       // o_proj bias (Llama/Qwen3 with attention_bias; never Qwen2)
  bool qk_norm = false;      // q_norm/k_norm (Qwen3)
  bool output_gate = false;  // attn_output_gate: q_proj doubled per head, [query; gate], the output times sigmoid(gate)
  bool sinks = false;        // gpt-oss: a learned per-head logit in every softmax denominator
  double scale = 0.0;        // Gemma 2/3: query_pre_attn_scalar^-1/2; 0: head_dim^-1/2
  double softcap = 0.0;      // Gemma 2: tanh soft cap on the scores; 0: none
  // Per layer: 0 full causal attention, W > 0 a sliding window of W keys (token i attends j iff
  // i - W < j <= i: transformers' sliding_window_overlay). Empty: full attention everywhere.
  std::vector<std::int64_t> layer_windows;
  std::optional<model::RopeConfig> local_rope;  // the sliding layers' RoPE where it differs (Gemma 3)
  // Multi-head latent attention (DeepSeek-V3; kv_lora_rank > 0): q from q_a_proj, its norm and q_b_proj
  // (q_lora_rank 0: q_proj), keys and values from the latent kv_a_proj_with_mqa (kv_lora_rank, normed,
  // through kv_b_proj) plus one shared RoPE key of qk_rope_head_dim; values v_head_dim wide. rope_interleave:
  // the rotary features come in (even, odd) pairs, as DeepSeek-V3 ships them.
  std::int64_t q_lora_rank = 0, kv_lora_rank = 0, qk_nope_head_dim = 0, qk_rope_head_dim = 0, v_head_dim = 0;
  bool rope_interleave = false;
  // DeepSeek-V2 (apply_rotary_emb's complex product): queries and keys turned in fp32 by fp32 cos and sin,
  // the result cast back to the model's dtype.
  bool rope_fp32 = false;

  bool mla() const { return kv_lora_rank > 0; }
  std::int64_t window(std::int64_t layer) const {
    return layer_windows.empty() ? 0 : layer_windows.at(static_cast<std::size_t>(layer));
  }
};

// Mixture of experts (target_moe.cpp); num_experts 0: a dense MLP (intermediate_size) in every layer.
struct MoeConfig {
  std::int64_t num_experts = 0, experts_per_token = 0;
  // Each expert's width (Qwen3-MoE's moe_intermediate_size; the others' intermediate_size).
  std::int64_t intermediate_size = 0;
  std::vector<bool> sparse_layers;  // per layer: a MoE block (else the dense MLP)
  MoeRouting routing = MoeRouting::softmax_topk;
  bool norm_topk_prob = true;         // softmax_topk: renormalise the chosen k weights
  bool routing_weights_fp32 = false;  // Mixtral weighs the experts' outputs in fp32 (Qwen3-MoE: model dtype)
  bool router_bias = false, expert_bias = false;  // gpt-oss
  // sigmoid_grouped routing (DeepSeek-V3, GLM-4.5) and softmax_grouped (DeepSeek-V2): expert groups, the
  // groups kept, the weights' factor, and the shared experts' MLP beside the routed ones (n_shared_experts x
  // moe_intermediate_size; 0: none).
  std::int64_t n_group = 1, topk_group = 1, shared_intermediate_size = 0;
  bool shared_expert_gate = false;  // Qwen3-Next, Qwen3.5-MoE: the shared expert times sigmoid(shared_expert_gate(x))
  double routed_scaling_factor = 1.0;
  // DeepSeek-V3: scoring_func and topk_method both written in config.json (DeepSeek's and Kimi-K2's releases
  // do). transformers computes the sigmoid router with its correction bias either way; vLLM's deepseek_v2.py
  // reads both, with the defaults softmax and no correction bias (the MTP head refuses their absence).
  bool router_named = false;
  // gpt-oss experts: gate and up interleaved in the checkpoint, clamped at swiglu_limit, activation
  // (up + 1) * gate * sigmoid(alpha * gate). Otherwise SiLU(gate) * up.
  bool clamped_swiglu = false;
  double swiglu_alpha = 1.702, swiglu_limit = 7.0;

  bool enabled() const { return num_experts > 0; }
  bool sparse(std::int64_t layer) const { return enabled() && sparse_layers.at(static_cast<std::size_t>(layer)); }
};

// Hybrid linear attention (Qwen3.5, Qwen3-Next; layer_types linear_attention / full_attention): per layer
// whether it is a Gated DeltaNet layer (else attention). Its causal depthwise conv1d of conv_kernel taps over
// q, k, v; key_heads heads of key_head_dim for q and k, value_heads of value_head_dim for v (each key head
// serving value_heads / key_heads consecutive value heads). Empty layers: no linear attention.
struct LinearAttentionConfig {
  std::vector<bool> layers;
  std::int64_t conv_kernel = 0, key_heads = 0, value_heads = 0, key_head_dim = 0, value_head_dim = 0;

  bool enabled() const { return !layers.empty(); }
  // Gated DeltaNet widths: q and k (each key_heads x key_head_dim), v (value_heads x value_head_dim), and the
  // conv1d's channels (q, k, v).
  std::int64_t key_dim() const { return key_heads * key_head_dim; }
  std::int64_t value_dim() const { return value_heads * value_head_dim; }
  std::int64_t conv_dim() const { return 2 * key_dim() + value_dim(); }
};

// Gemma 4 (transformers' modeling_gemma4; docs/models.md): the full-attention layers' own head width and
// key/value heads (per_layer_config, or global_head_dim and num_global_key_value_heads), their values
// k_proj's output (attention_k_eq_v: no v_proj), values RMS-normed per head without a weight, each layer's
// output times its layer_scalar [1], proportional RoPE on the full layers (only the first rope_angles
// frequency pairs of the config's rope turn; 0: all), per-layer inputs (PLE: embed_tokens_per_layer of
// per_layer_input_dim per layer, 0: none), and the last layers from first_kv_shared on attending the keys
// and values of kv_source (the last earlier layer of their type), their MLP twice as wide with
// double_wide_mlp. Its MoE block (enable_moe_block) is every layer sparse with the dense MLP still running
// beside the experts (routing scaled_softmax_topk, GELU-tanh experts; target_gemma4.cpp).
struct Gemma4Config {
  bool enabled = false, k_eq_v = false, value_norm = false, layer_scalar = false, double_wide_mlp = false;
  std::vector<std::int64_t> layer_head_dims, layer_kv_heads;  // per layer; empty: head_dim, num_key_value_heads
  std::int64_t rope_angles = 0, per_layer_input_dim = 0, per_layer_vocab = 0;
  std::int64_t first_kv_shared = 0;     // num_hidden_layers - num_kv_shared_layers
  std::vector<std::int64_t> kv_source;  // per layer: the layer whose keys and values it attends (itself mostly)

  bool kv_shared(std::int64_t layer) const { return enabled && layer >= first_kv_shared; }
};

// Quantized checkpoints: quantization_config.quant_method "" (none), "mxfp4" (gpt-oss experts stored as FP4
// blocks and scales) or "fp8" (e4m3 weights with weight_scale_inv per block of fp8_block[0] x fp8_block[1];
// modules_to_not_convert: names containing one of fp8_skip stay float).
struct QuantConfig {
  std::string method;
  std::vector<std::int64_t> fp8_block;
  std::vector<std::string> fp8_skip;
};

// Every field the forward paths read: the model-wide ones, then one struct per concern, each filled by the
// family's reader (target_config*.cpp) as torchtitan's families build their nested configs.
struct TargetConfig {
  std::string architecture;       // config.json "architectures"[0], e.g. LlamaForCausalLM
  std::string model_type;         // config.json model_type, as the family's row spells it (printed by inspect)
  Family family = Family::llama;  // read once from architectures and model_type
  std::int64_t vocab_size = 0, hidden_size = 0, intermediate_size = 0, num_hidden_layers = 0;
  // head_dim: the width of each head's queries and keys (MLA: qk_nope_head_dim + qk_rope_head_dim).
  std::int64_t num_attention_heads = 0, num_key_value_heads = 0, head_dim = 0;
  std::int64_t max_position_embeddings = 0;
  double rms_norm_eps = 1e-6;
  model::RopeConfig rope;
  bool tie_word_embeddings = false;
  std::string hidden_act = "silu";  // or gelu_pytorch_tanh (Gemma's hidden_activation)
  std::string dtype = "float32";    // torch_dtype (4.x) or dtype (5.x)
  std::vector<std::int64_t> eos_token_ids;
  std::int64_t bos_token_id = -1;
  // The shipped MTP layers: MiMo's num_nextn_predict_layers (model.mtp_layers.{i}.*; DeepSeek-V3 and
  // GLM-4.5: model.layers.{num_hidden_layers + i}.*), Qwen3.5's mtp_num_hidden_layers and Qwen3-Next's
  // num_nextn_predict_layers (mtp.*). The target never loads them; --draft mtp trains layer 0
  // (head/mtp/head.h).
  std::int64_t num_mtp_layers = 0;
  // A multimodal checkpoint read as its text model (Qwen3_5ForConditionalGeneration): config.json's
  // text_config, the tensors model.language_model.* read as model.*, the vision tower model.visual.* not
  // loaded; media_tokens (Qwen3.5: image, video, vision start and end; Gemma 4: image, video, audio; by
  // their config.json keys) are refused in every dataset read against it (data::LoadOptions::media_tokens).
  bool multimodal = false;
  std::vector<data::MediaToken> media_tokens;
  // Gemma 2/3: RMSNorm x * (1 + w) in fp32, the embedding times sqrt(hidden_size) in the model dtype, a norm
  // on the attention's output and norms before and after the MLP, a tanh soft cap on the final logits.
  bool norm_one_plus = false, embed_scaled = false, sandwich_norms = false;
  double final_softcap = 0.0;     // 0: none
  bool norm_weight_fp32 = false;  // GptOssRMSNorm multiplies its weight before the cast back
  bool fused_checkpoint = false;  // Phi-3: qkv_proj and gate_up_proj stored fused

  AttentionConfig attention;
  MoeConfig moe;
  LinearAttentionConfig linear_attention;
  Gemma4Config gemma4;
  QuantConfig quant;

  model::MoeRouter moe_router() const;  // the sparse layers' router (target_moe.cpp)
  bool mla() const { return attention.mla(); }
  bool hybrid() const { return linear_attention.enabled(); }
  bool linear(std::int64_t layer) const {
    return hybrid() && linear_attention.layers.at(static_cast<std::size_t>(layer));
  }
  std::int64_t value_head_dim() const { return mla() ? attention.v_head_dim : head_dim; }  // each head's values
  bool sparse(std::int64_t layer) const { return moe.sparse(layer); }
  std::int64_t window(std::int64_t layer) const { return attention.window(layer); }
  // Gemma 4's per-layer attention geometry (every other family: the same in every layer).
  std::int64_t layer_head_dim(std::int64_t layer) const {
    return gemma4.layer_head_dims.empty() ? head_dim : gemma4.layer_head_dims.at(static_cast<std::size_t>(layer));
  }
  std::int64_t layer_kv_heads_of(std::int64_t layer) const {
    return gemma4.layer_kv_heads.empty() ? num_key_value_heads
                                         : gemma4.layer_kv_heads.at(static_cast<std::size_t>(layer));
  }
  bool kv_shared(std::int64_t layer) const { return gemma4.kv_shared(layer); }
  // Values from k_proj (Gemma 4's attention_k_eq_v, full-attention layers only).
  bool values_from_keys(std::int64_t layer) const { return gemma4.k_eq_v && window(layer) == 0; }
  std::int64_t layer_intermediate(std::int64_t layer) const {
    return gemma4.double_wide_mlp && kv_shared(layer) ? 2 * intermediate_size : intermediate_size;
  }

  // Reads config.json (transformers 4.x and 5.x spellings); refuses unsupported architectures and
  // fields that change the math, by name.
  static TargetConfig from_json_file(const std::string& path);
  // dir/config.json of a model folder (Error(input) naming dir when it is not a folder): cheap, so
  // the data can be checked against the vocabulary before the weights load.
  static TargetConfig from_model_dir(const std::string& dir);
};

// The ids that end a reply: config's eos_token_ids plus generation_config.json's eos_token_id (an id
// or a list) in model_dir when that file exists; each id once, in that order.
std::vector<std::int64_t> generation_end_ids(const std::string& model_dir, const TargetConfig& config);

// Default EAGLE-3 input-of-layer ids for L layers: [2, L/2, L-3] for L >= 7; smaller models get
// [1, L/2, L-1] clamped to [0, L-1] (docs/models.md).
std::vector<std::int64_t> default_aux_layer_ids(std::int64_t num_layers);

}  // namespace eagle::target
