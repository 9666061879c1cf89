// The frozen target model: Llama-family decoders (Llama 2/3/3.x, Mistral, Qwen2, MiMo, Qwen3) and the
// mixture-of-experts families Qwen3-MoE, Mixtral, gpt-oss, DeepSeek-V3 and GLM-4.7-Flash (multi-head
// latent attention) and GLM-4.5, the hybrid linear-attention ones (Qwen3.5, Qwen3.5-MoE, Qwen3-Next:
// Gated DeltaNet layers among gated full-attention ones), read from a Hugging Face checkpoint
// folder, run without gradients for training features and teacher outputs, and incrementally with
// a KV cache for acceptance evaluation.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <torch/torch.h>

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

struct TargetConfig {
  std::string architecture;  // config.json "architectures"[0], e.g. LlamaForCausalLM
  std::string model_type;    // config.json model_type, as the family's row spells it (printed by inspect)
  Family family = Family::llama;  // read once from architectures and model_type
  std::int64_t vocab_size = 0, hidden_size = 0, intermediate_size = 0, num_hidden_layers = 0;
  // head_dim: the width of each head's queries and keys (MLA: qk_nope_head_dim + qk_rope_head_dim).
  std::int64_t num_attention_heads = 0, num_key_value_heads = 0, head_dim = 0;
  std::int64_t max_position_embeddings = 0;
  double rms_norm_eps = 1e-6;
  model::RopeConfig rope;
  bool tie_word_embeddings = false;
  bool attention_bias = false;      // q/k/v bias (Qwen2; Llama/Qwen3 with attention_bias)
  bool o_bias = false;              // o_proj bias (Llama/Qwen3 with attention_bias; never Qwen2)
  bool qk_norm = false;             // q_norm/k_norm (Qwen3)
  std::string hidden_act = "silu";  // or gelu_pytorch_tanh (Gemma's hidden_activation)
  std::string dtype = "float32";    // torch_dtype (4.x) or dtype (5.x)
  std::vector<std::int64_t> eos_token_ids;
  std::int64_t bos_token_id = -1;
  // The shipped MTP layers: MiMo's num_nextn_predict_layers (model.mtp_layers.{i}.*; DeepSeek-V3 and
  // GLM-4.5: model.layers.{num_hidden_layers + i}.*), Qwen3.5's mtp_num_hidden_layers and Qwen3-Next's
  // num_nextn_predict_layers (mtp.*). The target never loads them; --draft mtp trains layer 0
  // (head/mtp_head.h).
  std::int64_t num_mtp_layers = 0;
  // Multi-head latent attention (DeepSeek-V3; kv_lora_rank > 0): q from q_a_proj, its norm and q_b_proj
  // (q_lora_rank 0: q_proj), keys and values from the latent kv_a_proj_with_mqa (kv_lora_rank, normed,
  // through kv_b_proj) plus one shared RoPE key of qk_rope_head_dim; values v_head_dim wide. rope_interleave:
  // the rotary features come in (even, odd) pairs, as DeepSeek-V3 ships them.
  std::int64_t q_lora_rank = 0, kv_lora_rank = 0, qk_nope_head_dim = 0, qk_rope_head_dim = 0, v_head_dim = 0;
  bool rope_interleave = false;
  // DeepSeek-V2 (apply_rotary_emb's complex product): queries and keys turned in fp32 by fp32 cos and sin,
  // the result cast back to the model's dtype.
  bool rope_fp32 = false;

  // Hybrid linear attention (Qwen3.5, Qwen3-Next; layer_types linear_attention / full_attention): per layer
  // whether it is a Gated DeltaNet layer (else attention). Its causal depthwise conv1d of linear_conv_kernel
  // taps over q, k, v; linear_key_heads heads of linear_key_head_dim for q and k, linear_value_heads of
  // linear_value_head_dim for v (each key head serving value_heads / key_heads consecutive value heads).
  std::vector<bool> linear_layers;
  std::int64_t linear_conv_kernel = 0, linear_key_heads = 0, linear_value_heads = 0;
  std::int64_t linear_key_head_dim = 0, linear_value_head_dim = 0;
  bool attn_output_gate = false;  // q_proj doubled per head: [query; gate], the output times sigmoid(gate)
  // A multimodal checkpoint read as its text model (Qwen3_5ForConditionalGeneration): config.json's
  // text_config, the tensors model.language_model.* read as model.*, the vision tower model.visual.* not
  // loaded; media_tokens (Qwen3.5: image, video, vision start and end; Gemma 4: image, video, audio; by
  // their config.json keys) are refused in every dataset read against it (data::LoadOptions::media_tokens).
  bool multimodal = false;
  std::vector<data::MediaToken> media_tokens;

  // Mixture of experts; num_experts 0: a dense MLP (intermediate_size) in every layer.
  std::int64_t num_experts = 0, experts_per_token = 0;
  std::int64_t moe_intermediate_size = 0;  // each expert's (Qwen3-MoE's field; the others' intermediate_size)
  std::vector<bool> sparse_layers;         // per layer: a MoE block (else the dense MLP)
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
  std::string quant_method;  // "" or "mxfp4" (gpt-oss experts stored as FP4 blocks and scales)

  // Attention per layer: 0 full causal attention, W > 0 a sliding window of W keys (token i attends
  // j iff i - W < j <= i: transformers' sliding_window_overlay). Empty: full attention everywhere.
  std::vector<std::int64_t> layer_windows;
  bool attention_sinks = false;                 // gpt-oss: a learned per-head logit in every softmax denominator
  bool norm_weight_fp32 = false;                // GptOssRMSNorm multiplies its weight before the cast back
  std::optional<model::RopeConfig> local_rope;  // the sliding layers' RoPE where it differs (Gemma 3)

  // Gemma 2/3: RMSNorm x * (1 + w) in fp32, the embedding times sqrt(hidden_size) in the model
  // dtype, a norm on the attention's output and norms before and after the MLP, attention scaled
  // by query_pre_attn_scalar^-1/2, tanh soft caps on the attention scores and the final logits.
  bool norm_one_plus = false, embed_scaled = false, sandwich_norms = false;
  double attention_scale = 0.0;                    // 0: head_dim^-1/2
  double attn_softcap = 0.0, final_softcap = 0.0;  // 0: none
  bool fused_checkpoint = false;                   // Phi-3: qkv_proj and gate_up_proj stored fused

  // Gemma 4 (transformers' modeling_gemma4; docs/models.md): the full-attention layers' own head width and
  // key/value heads (per_layer_config, or global_head_dim and num_global_key_value_heads), their values
  // k_proj's output (attention_k_eq_v: no v_proj), values RMS-normed per head without a weight, each layer's
  // output times its layer_scalar [1], proportional RoPE on the full layers (only the first rope_angles
  // frequency pairs of c.rope turn; 0: all), per-layer inputs (PLE: embed_tokens_per_layer of
  // per_layer_input_dim per layer, 0: none), and the last layers from first_kv_shared on attending the keys
  // and values of kv_source (the last earlier layer of their type), their MLP twice as wide with
  // double_wide_mlp. Its MoE block (enable_moe_block) is every layer sparse with the dense MLP still running beside
  // the experts (routing scaled_softmax_topk, GELU-tanh experts; target_gemma4.cpp).
  bool gemma4 = false, k_eq_v = false, value_norm = false, layer_scalar = false, double_wide_mlp = false;
  std::vector<std::int64_t> layer_head_dims, layer_kv_heads;  // per layer; empty: head_dim, num_key_value_heads
  std::int64_t rope_angles = 0, per_layer_input_dim = 0, per_layer_vocab = 0;
  std::int64_t first_kv_shared = 0;     // num_hidden_layers - num_kv_shared_layers (Gemma 4; else unused)
  std::vector<std::int64_t> kv_source;  // per layer: the layer whose keys and values it attends (itself mostly)
  // FP8 checkpoints (quantization_config.quant_method fp8): e4m3 weights with weight_scale_inv
  // per block of fp8_block[0] x fp8_block[1]; empty: none.
  std::vector<std::int64_t> fp8_block;
  std::vector<std::string> fp8_skip;  // modules_to_not_convert: names containing one stay float

  bool moe() const { return num_experts > 0; }
  model::MoeRouter moe_router() const;  // the sparse layers' router (target_moe.cpp)
  bool mla() const { return kv_lora_rank > 0; }
  bool hybrid() const { return !linear_layers.empty(); }
  bool linear(std::int64_t layer) const {
    return hybrid() && linear_layers.at(static_cast<std::size_t>(layer));
  }
  // Gated DeltaNet widths: q and k (each key_heads x key_head_dim), v (value_heads x value_head_dim), and the
  // conv1d's channels (q, k, v).
  std::int64_t linear_key_dim() const { return linear_key_heads * linear_key_head_dim; }
  std::int64_t linear_value_dim() const { return linear_value_heads * linear_value_head_dim; }
  std::int64_t linear_conv_dim() const { return 2 * linear_key_dim() + linear_value_dim(); }
  std::int64_t value_head_dim() const { return mla() ? v_head_dim : head_dim; }  // each head's values
  bool sparse(std::int64_t layer) const { return moe() && sparse_layers.at(static_cast<std::size_t>(layer)); }
  std::int64_t window(std::int64_t layer) const {
    return layer_windows.empty() ? 0 : layer_windows.at(static_cast<std::size_t>(layer));
  }
  // Gemma 4's per-layer attention geometry (every other family: the same in every layer).
  std::int64_t layer_head_dim(std::int64_t layer) const {
    return layer_head_dims.empty() ? head_dim : layer_head_dims.at(static_cast<std::size_t>(layer));
  }
  std::int64_t layer_kv_heads_of(std::int64_t layer) const {
    return layer_kv_heads.empty() ? num_key_value_heads : layer_kv_heads.at(static_cast<std::size_t>(layer));
  }
  bool kv_shared(std::int64_t layer) const { return gemma4 && layer >= first_kv_shared; }
  // Values from k_proj (Gemma 4's attention_k_eq_v, full-attention layers only).
  bool values_from_keys(std::int64_t layer) const { return k_eq_v && window(layer) == 0; }
  std::int64_t layer_intermediate(std::int64_t layer) const {
    return double_wide_mlp && kv_shared(layer) ? 2 * intermediate_size : intermediate_size;
  }

  // Reads config.json (transformers 4.x and 5.x spellings); refuses unsupported architectures and
  // fields that change the math, by name.
  static TargetConfig from_json_file(const std::string& path);
  // dir/config.json of a model folder (Error(input) naming dir when it is not a folder): cheap, so
  // the data can be checked against the vocabulary before the weights load.
  static TargetConfig from_model_dir(const std::string& dir);
};

// RMSNorm as the family computes it (gpt-oss multiplies the weight in fp32 before the cast back;
// Gemma scales by 1 + w in fp32).
torch::Tensor target_norm(const TargetConfig& config, const torch::Tensor& x, const torch::Tensor& weight);

// The ids that end a reply: config's eos_token_ids plus generation_config.json's eos_token_id (an id
// or a list) in model_dir when that file exists; each id once, in that order.
std::vector<std::int64_t> generation_end_ids(const std::string& model_dir, const TargetConfig& config);

// One batch for the training forward (all [B, T], on the model's device).
struct TargetBatch {
  torch::Tensor input_ids;           // int64
  torch::Tensor position_ids;        // int64, position within its own sample
  torch::Tensor document_ids;        // int64; -1 padding; token i attends j iff same id >= 0 and j <= i
  model::AttentionSpec attention{};  // packed or padded rows (default: packed, exact for any layout)
};

struct TeacherSpec {
  torch::Tensor draft_ids;           // [Vd] int64 target ids of the draft vocabulary (keep it on the
                                     // model's device, else it is copied every call); undefined: none
  std::int64_t chunk_tokens = 1024;  // tokens per chunk of the LM-head computation (bounds memory)
};

struct TargetOutput {
  torch::Tensor aux_hidden;      // [B, T, n_aux * H]: hidden_states[id] for the aux ids, low -> high
  torch::Tensor final_hidden;    // [B, T, H]: after the final norm
  torch::Tensor teacher_logits;  // [B, T, Vd] fp32 logits over draft_ids (undefined without draft_ids)
  torch::Tensor target_argmax;   // [B, T] int64 argmax over the full vocabulary
};

// The teacher of a head from final normed hidden states [.., H]: the LM head [V, H] applied in
// chunks of teacher.chunk_tokens rows (never [.., V] at once), giving the full-vocabulary argmax
// [..] int64 and, when teacher.draft_ids is defined, the fp32 logits over the draft ids [.., V_d].
struct TeacherOutput {
  torch::Tensor logits, argmax;
};
// final_softcap (Gemma's final_logit_softcapping, 0: none) caps the logits first, as the target's
// own logits are.
TeacherOutput lm_head_teacher(const torch::Tensor& final_hidden, const torch::Tensor& lm_head,
                              const TeacherSpec& teacher, double final_softcap = 0.0);

// The target's tensors on either side of its decoder layers: all that the head (the embedding)
// and its teacher (final norm, LM head) need of it, so training from stored features
// (docs/offline.md) loads only these.
struct TargetEnds {
  TargetConfig config;
  torch::ScalarType dtype = torch::kFloat32;
  torch::Tensor embed;       // [V, H]
  torch::Tensor final_norm;  // [H]
  torch::Tensor lm_head;     // [V, H]; the embedding itself when tied

  // The final norm on x [.., H] as the family computes it (stored pre-norm features made post-norm).
  torch::Tensor norm(const torch::Tensor& x) const { return target_norm(config, x, final_norm); }
};

// Per-layer key/value cache of one sequence batch, for incremental decoding. MLA layers keep their
// keys and values decompressed per head (values value_head_dim wide), not the latent.
struct KvCache {
  std::vector<torch::Tensor> keys, values;  // per layer [B, kv_heads, capacity, head_dim or value_head_dim]
  std::int64_t length = 0;                  // tokens currently cached
  // Hybrid targets' Gated DeltaNet layers (empty tensors [B, kv_heads, capacity, 0] in keys/values): per layer
  // (undefined for attention layers) the conv window, the last linear_conv_kernel - 1 inputs [B, K - 1, conv_dim],
  // and the recurrent state [B, value_heads, key_head_dim, value_head_dim] fp32, both at `length`. `rollback`
  // keeps what the last forward_cached appended (calls of at most 256 tokens): the states before it and, per
  // token, the conv's inputs and outputs and the b, a projections, so that truncate inside that call recomputes
  // the states at the accepted length (target_linear.cpp). After a forward_tree of a branched tree (its per-node
  // inputs kept in node order, whatever its size) the states stay the root's, from before the call, until
  // accept_tree_path recomputes the accepted path's (target_linear_tree.cpp).
  struct LinearStep {
    std::int64_t start = -1, count = 0;  // the call's first position and its token count (start -1: none)
    std::vector<torch::Tensor> conv_before, state_before, conv_inputs, conv_outputs, b, a;  // per layer
    // The last call's tree, not yet accepted: each node's parent (-1: it follows the cached tokens); empty: a chain.
    std::vector<std::int64_t> tree_parent;
  };
  // The ragged forwards (forward_ragged, forward_ragged_all) keep each row at its own column instead: row r's
  // conv_states and recurrent_states stand at column start[r], followed by count[r] tokens of the row's last ragged
  // step, logged per Gated DeltaNet layer (their conv inputs and b, a projections [B, log_tokens, conv_dim or
  // value_heads], in place) when that step had at most log_tokens columns (new_cache's rollback_tokens), else count
  // 0 and the states at the step's end. A row's next step starts at a column in [start, start + count] (the
  // accepted prefix: the attention layers' rollback is the same column) or at 0 (a new sequence: zero states), and
  // first replays the accepted logged tokens (the recurrent form): recomputation, not a snapshot of the state per
  // drafted position (log_tokens x (conv_dim + 2 value_heads) values per row and layer against log_tokens states).
  struct RaggedLinear {
    std::int64_t log_tokens = 0;
    torch::Tensor start, count;                    // [B] int64 on the model's device
    std::vector<torch::Tensor> conv_inputs, b, a;  // per layer (undefined: attention layers, or log_tokens 0)
  };
  std::vector<torch::Tensor> conv_states, recurrent_states;
  LinearStep rollback;
  RaggedLinear ragged;
};

// One forward of batched generation (target_ragged.cpp) over a KvCache whose rows hold sequences of
// different lengths: a row's tokens sit at columns 0, 1, ... of its cache row, and the column is the
// token's position id. KvCache::length is not used. A row's step starting at column 0 begins a new sequence.
struct RaggedStep {
  torch::Tensor ids;         // [R, N] int64: each row's new tokens, right-padded
  torch::Tensor columns;     // [R, N] int64: the column (= position) of each new token; padding tokens go to
                             // the cache's last column (capacity - 1), which no real token reaches: a hybrid
                             // target's Gated DeltaNet layers tell padding by it (a row all padding idles)
  torch::Tensor rows;        // [R] int64: the cache rows extended; undefined: all B rows in order (no gather)
  torch::Tensor last;        // [R] int64 in [0, N): the token of each row whose logits are returned
  std::int64_t key_len = 0;  // columns [0, key_len) are read (> every real column); each token attends
                             // the columns <= its own; dynamic RoPE scales for key_len positions
};

struct TargetStepOutput {
  torch::Tensor aux_hidden;    // [B, n, n_aux * H]
  torch::Tensor final_hidden;  // [B, n, H]
  torch::Tensor logits;        // [B, n, V] fp32
};

// Default EAGLE-3 input-of-layer ids for L layers: [2, L/2, L-3] for L >= 7; smaller models get
// [1, L/2, L-1] clamped to [0, L-1] (docs/models.md).
std::vector<std::int64_t> default_aux_layer_ids(std::int64_t num_layers);

// Every tensor of a model folder's safetensors files, cheaply (no weight is loaded): name -> "dtype
// [shape] hash", the hash an FNV-1a of the byte count and of 4 chunks of 1 KiB at fixed offsets
// (start, thirds, end; all bytes of a smaller tensor). A fine-tune differs in the tensors it
// changed, which a fingerprint of the ends alone (final norm, LM head) missed.
std::map<std::string, std::string> tensor_fingerprints(const std::string& model_dir);

class TargetModel {
 public:
  // Loads dir/config.json and model.safetensors or the sharded files of
  // model.safetensors.index.json; checks every tensor's presence and shape. dtype Undefined: the
  // checkpoint's dtype.
  static TargetModel load(const std::string& dir, torch::ScalarType dtype, torch::Device device);
  // A model of this config with random weights made on the device (normal with std 0.02, norms 1;
  // LibTorch's generator): benchmarks at real shapes without a checkpoint.
  static TargetModel random(const TargetConfig& config, torch::ScalarType dtype, torch::Device device);
  // Only the ends of the same folder (config.json, the embedding, the final norm and the LM head,
  // each checked), without the decoder layers.
  static TargetEnds load_ends(const std::string& dir, torch::ScalarType dtype, torch::Device device);

  const TargetConfig& config() const;
  torch::Device device() const;
  torch::ScalarType dtype() const;
  std::int64_t parameter_count() const;         // as a float checkpoint holds them
  std::int64_t active_parameter_count() const;  // one token's: the top-k experts of each sparse layer
  // Whether a forward is free of host synchronisation, so it can be captured in a CUDA graph: false
  // only for a mixture of experts on a GPU where at::_grouped_mm does not run (not bf16, or before
  // sm90), whose per-expert loop reads the expert counts on the host.
  bool graph_safe() const;
  // How many shapes of a step may replay CUDA graphs: max_cuda_graphs on a GPU where every forward of
  // the step is capture-safe on this target (graph_safe; a decoding step also needs static RoPE:
  // dynamic NTK scales with the step's key length, which graphed steps round up), else 0 (eager).
  enum class Step { training, decoding };
  std::int64_t graphed_steps(std::int64_t max_cuda_graphs, Step step) const;
  // Input-of-layer ids (hidden_states[id]); default EAGLE-3 [2, L/2, L-3] (see EAGLE.md).
  const std::vector<std::int64_t>& aux_layer_ids() const;
  void set_aux_layer_ids(std::vector<std::int64_t> ids);  // validated: each in [0, L]
  // Whether aux id L (hidden_states[L]) is kept before the final norm instead of after it, in every
  // forward: the MiMo MTP layer's step-1 input (vLLM's MiMoModel returns hidden + residual, the norm
  // is applied in compute_logits only; MTP.md 2.4). Default false (Hugging Face's hidden_states[L]).
  bool last_aux_pre_norm() const;
  void set_last_aux_pre_norm(bool pre_norm);
  // Positions per chunk of each layer's position-wise half (o_proj, residual, MLP or experts) in
  // every forward: its temporaries grow with the chunk, not the sequence (--target_chunk_tokens);
  // 0: whole rows. The results do not depend on it beyond rounding.
  std::int64_t chunk_tokens() const;
  void set_chunk_tokens(std::int64_t tokens);

  // Training forward under NoGradGuard (not inference mode).
  TargetOutput forward(const TargetBatch& batch, const TeacherSpec& teacher) const;

  // Weights holding NaN or Inf, by checkpoint name (reads every weight: for inspect, not hot paths).
  std::vector<std::string> non_finite_weights() const;

  torch::Tensor embed(const torch::Tensor& ids) const;  // [.., H]
  torch::Tensor lm_head_weight() const;                 // [V, H]
  torch::Tensor embedding_weight() const;               // [V, H]
  TargetEnds ends() const;                              // views of the loaded tensors

  // Incremental decoding: appends ids [B, n] at positions cache.length.. and returns their outputs.
  // rollback_tokens (hybrid targets; ignored by the others): a ragged step of at most this many columns can be
  // rolled back into by the next step's columns (KvCache::RaggedLinear); 0: a row continues only at the end of
  // its last ragged step.
  KvCache new_cache(std::int64_t batch, std::int64_t capacity, std::int64_t rollback_tokens = 0) const;
  TargetStepOutput forward_cached(KvCache& cache, const torch::Tensor& ids) const;
  // A draft tree's verification (acceptance/decode.cpp): ids [1, n] written at cache slots
  // cache.length.., token i at position cache.length + depth[i] (depth [n] int64), attending every
  // cached key and the new tokens tree_mask [n, n] (bool, i sees j) allows. A chain (depth 0..n-1,
  // causal mask) equals forward_cached bit for bit. tree_mask must be the tree's: each node sees itself and
  // its ancestors, one per depth above it (its parent the one of depth - 1). Hybrid targets: each Gated
  // DeltaNet layer gives every node the output of its own root-to-node path (docs/models.md); the cache then
  // waits for accept_tree_path (or a truncate to the call's start or inside a chain of its first nodes).
  TargetStepOutput forward_tree(KvCache& cache, const torch::Tensor& ids, const torch::Tensor& depth,
                                const torch::Tensor& tree_mask) const;
  // After forward_tree at cache length `before`: keeps the accepted root-to-node path (node indices of that
  // call, root first) as if it had been decoded as a chain: its nodes' keys and values moved to the slots
  // before, before + 1, ..., the Gated DeltaNet layers' conv windows and recurrent states the path's, and the
  // length before + path.size().
  void accept_tree_path(KvCache& cache, std::int64_t before, const std::vector<std::int64_t>& path) const;
  void truncate(KvCache& cache, std::int64_t length) const;  // roll back to the accepted length
  // Batched generation with per-row lengths: writes the step's keys and values into the cache and
  // returns [R, V] fp32 logits of each row's `last` token. No host synchronisation, so a fixed-shape
  // step can be captured as a CUDA graph. A hybrid target's Gated DeltaNet states advance over each
  // row's real tokens only and are written in place (KvCache::RaggedLinear).
  torch::Tensor forward_ragged(KvCache& cache, const RaggedStep& step) const;
  // The same step's outputs at every position (speculative decoding of many prompts at once,
  // acceptance/batched.cpp): aux_hidden [R, N, n_aux * H], final_hidden [R, N, H] and fp32
  // logits [R, N, V]; a padding position's outputs are meaningless. `last` still marks each row's
  // last real token (longrope's length).
  TargetStepOutput forward_ragged_all(KvCache& cache, const RaggedStep& step) const;

  struct Impl;

 private:
  // The model from one tensor per checkpoint name, already on the device in dtype.
  static TargetModel assemble(const TargetConfig& config, torch::ScalarType dtype, torch::Device device,
                              const std::function<torch::Tensor(const std::string&)>& get);
  std::shared_ptr<Impl> impl_;
};

// The target of a command: model_name_or_path in --target_dtype on the device, with these aux
// layers (empty: the default ones; the two-argument form: the options'); logs what it loaded.
TargetModel load_target(const config::Options& opts, torch::Device device,
                        const std::vector<std::int64_t>& aux_layer_ids);
TargetModel load_target(const config::Options& opts, torch::Device device);

}  // namespace eagle::target
