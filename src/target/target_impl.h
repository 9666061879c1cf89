// Private state of TargetModel shared by its loader (target.cpp) and its forward passes
// (target_forward.cpp): device-resident weights, fused where that makes fewer, larger matmuls.
#pragma once

#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "eagle/model/safetensors.h"
#include "eagle/target/target.h"

namespace eagle::target {

// The safetensors files of a model folder (model.safetensors, or the shards its
// model.safetensors.index.json names) and where each tensor lives: the loader's and the
// fingerprint's (target_fingerprint.cpp).
// text_model: a multimodal checkpoint read as its text model: model.language_model.X is listed as model.X (the
// file's own name kept in `stored`), every other name (the vision tower model.visual.*) as it is.
struct CheckpointFiles {
  std::vector<model::SafetensorsFile> files;
  std::map<std::string, std::size_t> where;     // tensor name -> index into files
  std::map<std::string, std::string> stored;    // listed name -> the file's name, where they differ
  const std::string& file_name(const std::string& name) const {
    const auto it = stored.find(name);
    return it == stored.end() ? name : it->second;
  }
};
CheckpointFiles open_checkpoint(const std::filesystem::path& dir, bool text_model = false);

// The checks of a folder's files against its config.json before anything is built from them
// (target_checkpoint.cpp), each an Error(input) naming the file and the field or tensors.
// check_counts: no more layers, nor experts (families with per-expert tensors), than the files
// hold, and the embedding's vocabulary and hidden size, compared before any name is listed per
// layer or expert; check_tensors: every expected name present with its shape (one error naming
// every problem), extras refused unless extras_allowed; resolve_dtype: the dtype the target runs in
// (Undefined: the checkpoint's), every expected tensor floating point (FP8 and MXFP4 ones in their
// formats); check_fits: the weights in the GPU's free memory (nothing checked on CPU).
void check_counts(const std::filesystem::path& dir, const CheckpointFiles& ck, const TargetConfig& c);
void check_tensors(const std::filesystem::path& dir, const CheckpointFiles& ck,
                   const std::map<std::string, std::vector<std::int64_t>>& expected, const TargetConfig& c,
                   bool extras_allowed = false);
torch::ScalarType resolve_dtype(torch::ScalarType dtype, const CheckpointFiles& ck,
                                const std::map<std::string, std::vector<std::int64_t>>& expected,
                                const TargetConfig& c);
void check_fits(const TargetConfig& c, torch::ScalarType dtype, torch::Device device, const std::string& dir);

struct TargetLayerWeights {
  torch::Tensor input_norm, post_norm;      // [H]; Gemma: post_norm is the attention output's norm
  torch::Tensor pre_ff_norm, post_ff_norm;  // [H] Gemma's norms before and after the MLP, or undefined
  // [(heads + 2 kv_heads) * head_dim, H]; bias undefined unless attention_bias. MLA: the projections of
  // the hidden state fused, q_a_proj (or q_proj) rows then kv_a_proj_with_mqa's [kv_lora_rank + qk_rope_head_dim].
  torch::Tensor qkv_w, qkv_b;
  // MLA: q_a_layernorm [q_lora_rank] and q_b_proj [heads * head_dim, q_lora_rank] (undefined with
  // q_lora_rank 0), kv_a_layernorm [kv_lora_rank], kv_b_proj [heads * (qk_nope + v), kv_lora_rank].
  torch::Tensor q_a_norm, q_b_w, kv_a_norm, kv_b_w;
  torch::Tensor o_w, o_b;        // [H, heads * value_head_dim]; bias undefined unless o_bias
  torch::Tensor q_norm, k_norm;  // [head_dim] (Qwen3) or undefined
  torch::Tensor gate_up_w;       // [2 I, H]: gate rows then up rows (dense MLP layers)
  torch::Tensor down_w;          // [H, I]
  torch::Tensor sinks;           // [heads] learned softmax sinks (gpt-oss) or undefined
  // A mixture-of-experts layer (TargetConfig::sparse): router [E, H] (bias [E] or undefined), every
  // expert's gate and up rows [E, 2 I, H] (gate rows first, whatever the checkpoint's order) and
  // down [E, H, I], with biases [E, 2 I] and [E, H] where the family has them.
  torch::Tensor router_w, router_b;
  torch::Tensor experts_gate_up, experts_gate_up_b, experts_down, experts_down_b;
  // sigmoid_grouped routing: e_score_correction_bias [E] (fp32, as transformers keeps it), and the shared
  // experts' MLP [2 I_s, H] (gate rows then up) and [H, I_s], or undefined.
  torch::Tensor router_score_bias, shared_gate_up, shared_down;
  torch::Tensor shared_gate_w;  // [1, H]: Qwen3-Next's, Qwen3.5-MoE's shared_expert_gate, or undefined
  // A Gated DeltaNet layer (TargetConfig::linear): its input projections as one [conv_dim + value_dim +
  // 2 value_heads, H] (q, k, v rows, then z, b, a; Qwen3-Next's per-key-head in_proj_qkvz and in_proj_ba
  // reordered at load), conv1d [conv_dim, K], dt_bias and A_log [value_heads], the gated norm [value_head_dim];
  // out_proj is o_w.
  torch::Tensor lin_in_w, conv_w, dt_bias, a_log, lin_norm;
  // Gemma 4: layer_scalar [1]; the per-layer input's gate [Dp, H], projection [H, Dp] and norm [H] (or
  // undefined). Its qkv_w holds q_proj alone in a KV-shared layer, q_proj and k_proj with attention_k_eq_v.
  torch::Tensor layer_scalar, ple_gate_w, ple_proj_w, ple_norm;
  // Gemma 4's MoE block (router_w: router.proj; experts_gate_up, experts_down as above): the router's input scale
  // [H] and per_expert_scale [E], the experts' input norm (pre_feedforward_layernorm_2) and the norms of the dense
  // MLP's and the experts' outputs (post_feedforward_layernorm_1, _2), [H] each; undefined without the block.
  torch::Tensor router_scale, router_expert_scale, pre_ff_norm_2, post_ff_norm_1, post_ff_norm_2;
};

// Gemma 4 (target_gemma4.cpp): its checkpoint's names and shapes, one layer's weights, the tensors
// transformers ignores in its checkpoints (a KV-shared layer's k/v projections and norms, the multimodal
// wrapper's towers), and the per-layer inputs [B, T, L, Dp] of a walk from ids and their scaled embedding x.
void gemma4_tensors(const TargetConfig& c, std::map<std::string, std::vector<std::int64_t>>& e);
void assemble_gemma4_layer(const TargetConfig& c, std::int64_t l, TargetLayerWeights& w,
                           const std::function<torch::Tensor(const std::string&)>& get);
bool gemma4_ignored_tensor(const TargetConfig& c, const std::string& name);
struct Gemma4Inputs {
  torch::Tensor embed, projection, norm;  // embed_tokens_per_layer [Vp, L Dp], per_layer_model_projection [L Dp, H],
                                          // per_layer_projection_norm [Dp]; undefined without per-layer inputs
};
torch::Tensor gemma4_per_layer_inputs(const TargetConfig& c, const Gemma4Inputs& w, const torch::Tensor& ids,
                                      const torch::Tensor& x);
// A layer's per-layer-input step on its output h [.., H] with its input p [.., Dp], then the layer scalar.
torch::Tensor gemma4_layer_tail(const TargetConfig& c, const TargetLayerWeights& w, const torch::Tensor& h,
                                const torch::Tensor& p);
// A MoE layer's feed-forward output before post_feedforward_layernorm: the dense MLP's output `dense` [.., H]
// normed, plus the experts' normed output, routed from the residual stream r [.., H] (the attention's output
// added) and run on its pre_feedforward_layernorm_2.
torch::Tensor gemma4_moe(const TargetConfig& c, const TargetLayerWeights& w, const torch::Tensor& dense,
                         const torch::Tensor& r);

// Gated DeltaNet (target_linear.cpp). linear_runs: the run index of each token's document [B, T] (a new run
// wherever the document id changes), the sequences the training forward resets at. linear_attention: a layer's
// mixing of its normed input h [B, T, H] over whole rows of such runs (the conv window and the delta rule's state
// restart at every run) -> [B, T, value_dim] before out_proj. The cached forms carry per row the conv window and
// recurrent state of cache (init_linear_states at new_cache, with a ragged log of rollback_tokens; begin_linear_step
// before each call of `tokens`, linear_attention_cached per layer) and rollback_linear_states recomputes them at a
// length inside the last call.
torch::Tensor linear_runs(const torch::Tensor& document_ids);
torch::Tensor linear_attention(const TargetConfig& c, const TargetLayerWeights& w, const torch::Tensor& h,
                               const torch::Tensor& runs);
void init_linear_states(const TargetConfig& c, KvCache& cache, std::int64_t batch, const torch::TensorOptions& opts,
                        std::int64_t rollback_tokens);
void begin_linear_step(const TargetConfig& c, KvCache& cache, std::int64_t tokens);
torch::Tensor linear_attention_cached(const TargetConfig& c, const TargetLayerWeights& w, std::size_t l,
                                      const torch::Tensor& h, KvCache& cache);
void rollback_linear_states(const TargetConfig& c, const std::vector<TargetLayerWeights>& layers, KvCache& cache,
                            std::int64_t length);

// Tree verification on hybrid targets (target_linear_tree.cpp). linear_tree: the tree of forward_tree's depth [n]
// and tree_mask [n, n] (Error(internal) unless the mask is a tree's: each node sees itself and its ancestors, one
// per depth above it). A branched tree's call: begin_linear_tree instead of begin_linear_step, then per layer
// linear_attention_tree (each node's output along its own root-to-node path; the cache's states stay the root's).
// accept_linear_path sets the cache's states to those of an accepted path of the last call (tree or chain) at
// `before`; truncate_linear_tree is truncate after a tree call (to a chain of its first nodes only).
struct LinearTree {
  std::vector<std::int64_t> parent;               // per node; -1: the node follows the cached tokens
  std::vector<std::vector<std::int64_t>> levels;  // the nodes of depth 0, 1, ..., each level in node order
  std::vector<std::int64_t> row;                  // per node: its index within its level
  std::vector<torch::Tensor> level_nodes, parent_rows;  // per level, int64 on the device: levels[d], row of parents
  bool chain() const;  // node i + 1 the only child of node i: forward_cached's chain
};
LinearTree linear_tree(const torch::Tensor& depth, const torch::Tensor& tree_mask, torch::Device device);
void begin_linear_tree(const TargetConfig& c, KvCache& cache, const LinearTree& tree);
torch::Tensor linear_attention_tree(const TargetConfig& c, const TargetLayerWeights& w, std::size_t l,
                                    const torch::Tensor& h, KvCache& cache, const LinearTree& tree);
void accept_linear_path(const TargetConfig& c, const std::vector<TargetLayerWeights>& layers, KvCache& cache,
                        std::int64_t before, const std::vector<std::int64_t>& path);
void truncate_linear_tree(const TargetConfig& c, const std::vector<TargetLayerWeights>& layers, KvCache& cache,
                          std::int64_t length);
// A ragged step's rows as its Gated DeltaNet layers see them (KvCache::RaggedLinear): begin_ragged_linear makes it
// once per step from the step and the cache's per-row columns, linear_attention_ragged mixes one layer's normed input
// h [R, N, H] -> [R, N, value_dim] and writes that layer's states in place, end_ragged_linear then moves each row's
// start and count. No host synchronisation.
struct LinearRows {
  torch::Tensor rows;    // [R] int64 cache rows; undefined: all rows in order
  torch::Tensor real;    // [R, N] bool: a real token (padding: the cache's last column)
  torch::Tensor n_real;  // [R] int64 real tokens of each row
  torch::Tensor replay;  // [R] int64 logged tokens of the row's last step taken first (its accepted prefix)
  torch::Tensor fresh;   // [R] bool: the row begins a new sequence at column 0 (zero states)
  torch::Tensor next_start, next_count;  // [R] int64: the rows' start and count after this step
  bool logged = false;                   // this step's tokens are logged (N <= log_tokens)
};
LinearRows begin_ragged_linear(const KvCache& cache, const RaggedStep& step);
torch::Tensor linear_attention_ragged(const TargetConfig& c, const TargetLayerWeights& w, std::size_t l,
                                      const torch::Tensor& h, KvCache& cache, const LinearRows& rows);
void end_ragged_linear(KvCache& cache, const LinearRows& rows);

// The attention inputs of an MLA layer (target_mla.cpp) from its normed input h [B, T, H]: q and k
// [B, T, heads, qk_nope + qk_rope] (k's rope part the one shared key, broadcast), v [B, T, heads, v_head_dim],
// with RoPE applied (interleaved pairs where rope_interleave) from cos, sin [B, T, qk_rope_head_dim].
struct MlaQkv {
  torch::Tensor q, k, v;
};
MlaQkv mla_qkv(const TargetConfig& c, const TargetLayerWeights& w, const torch::Tensor& h, const torch::Tensor& cos,
               const torch::Tensor& sin);

// 1 + the largest position of each token's run of equal document ids: its sample's length, [B, T].
torch::Tensor document_lengths(const torch::Tensor& position_ids, const torch::Tensor& document_ids);
// The attention's score scale: query_pre_attn_scalar^-1/2 (Gemma) or head_dim^-1/2.
double target_attention_scale(const TargetConfig& config);

// Every tensor a checkpoint of this config holds, with its shape (target_tensors.cpp); end_tensors:
// only the embedding, the final norm and the LM head (nothing listed per layer).
std::map<std::string, std::vector<std::int64_t>> expected_tensors(const TargetConfig& c);
std::map<std::string, std::vector<std::int64_t>> end_tensors(const TargetConfig& c);
// Parameters of the model as a float checkpoint holds them (MXFP4 blocks count their values), and
// those one token runs through (the top-k experts of each sparse layer).
std::pair<std::int64_t, std::int64_t> parameter_counts(TargetConfig c);
// MXFP4 blocks and scales: uint8 tensors, not weights.
bool is_packed_fp4(const std::string& name);
// Whether a checkpoint weight is stored FP8 with a `<name>_scale_inv` beside it (fp8 configs: the
// decoder layers' projections, less quantization_config.modules_to_not_convert).
bool is_fp8_weight(const TargetConfig& c, const std::string& name);
// An FP8 e4m3 weight [rows, columns] times its block scales scale_inv [ceil(rows / b0),
// ceil(columns / b1)] in fp32, then cast to dtype (transformers' fine-grained FP8 dequantization).
torch::Tensor dequantize_fp8(const torch::Tensor& weight, const torch::Tensor& scale_inv,
                             const std::vector<std::int64_t>& block, torch::ScalarType dtype, const std::string& name);
// A sparse layer's router and experts into w, from the checkpoint tensors `get` returns (on the
// device; MXFP4 blocks and scales as uint8, dequantized here into dtype).
void assemble_experts(const TargetConfig& c, const std::string& prefix, TargetLayerWeights& w,
                      const std::function<torch::Tensor(const std::string&)>& get, torch::ScalarType dtype);

// Dequantizes MXFP4 (gpt-oss) expert weights as transformers' convert_moe_packed_tensors: blocks
// uint8 [E, rows, G, 16] (two e2m1 values a byte, low nibble first), scales uint8 [E, rows, G]
// (exponent + 127) -> [E, rows, G * 32] in dtype, expert by expert (bounded temporary memory).
// `name` is the checkpoint tensor's, for errors.
torch::Tensor dequantize_mxfp4(const torch::Tensor& blocks, const torch::Tensor& scales, torch::ScalarType dtype,
                               const std::string& name);

// Where one cached forward writes a layer's new keys and values, and which keys it then attends
// (target_ragged.cpp). Shared length (forward_cached): every row's new tokens go to columns
// [cache->length, cache->length + T) and [0, cache->length + T) is attended. Per-row
// (forward_ragged): row r's token i goes to column columns[r, i] of cache row row_index[r] and
// columns [0, key_len) of those rows are attended (the mask decides which of them each token sees).
struct CacheWrite {
  KvCache* cache = nullptr;
  torch::Tensor row_index;   // [R, 1] int64 cache rows; per-row only
  torch::Tensor columns;     // [R, T] int64 cache columns; undefined: shared length
  bool all_rows = false;     // per-row: the rows are 0..B-1 in order, so the cache is read without a gather
  std::int64_t key_len = 0;  // per-row: columns attended

  // Writes k, v [R, kv_heads, T, head_dim] of layer l; returns the keys and values to attend.
  std::pair<torch::Tensor, torch::Tensor> apply(std::size_t l, const torch::Tensor& k, const torch::Tensor& v) const;
};

struct TargetModel::Impl {
  // cos, sin [B, T, rotary] of the full-attention layers and (local_*) of the sliding ones where
  // their RoPE differs (see rope()).
  struct RopeTables {
    torch::Tensor cos, sin, local_cos, local_sin;
  };
  TargetConfig cfg;
  torch::Device device{torch::kCPU};
  torch::ScalarType dtype = torch::kFloat32;
  torch::Tensor embed, final_norm, lm_head;  // lm_head aliases embed when tied
  std::vector<TargetLayerWeights> layers;
  torch::Tensor inv_freq;        // [rotary / 2] fp32 on device (dynamic RoPE rescales it per call)
  torch::Tensor long_inv_freq;   // longrope: the long factors' frequencies
  torch::Tensor local_inv_freq;  // cfg.local_rope's (Gemma 3's sliding layers), or undefined
  Gemma4Inputs per_layer;        // Gemma 4's per-layer-input tensors, or undefined
  std::vector<std::int64_t> aux_ids;
  bool last_aux_pre_norm = false;  // aux id L is the last layer's output before the final norm (MiMo MTP)
  std::int64_t parameter_count = 0, active_parameter_count = 0;
  std::int64_t chunk_tokens = 0;  // positions per chunk of a layer's position-wise half; 0: all at once

  // The attention of layer l: q [B, heads, T, d], k, v [B, kv_heads, T, d] (with RoPE) -> [B, heads,
  // T, d]. The training forward attends within the batch's documents; the incremental ones write
  // k, v into layer l of the KV cache and attend it (cached_attend).
  // The layer's window and sinks come with them.
  using Attend = std::function<torch::Tensor(std::size_t l, const torch::Tensor&, const torch::Tensor&,
                                             const torch::Tensor&, const model::AttentionExtras&)>;
  // Sees hidden_states[id] as the walk makes it (id 0: the embedding, id l: layer l's input).
  using Keep = std::function<void(std::int64_t id, const torch::Tensor& h)>;
  // The token mixing of a Gated DeltaNet layer l (hybrid targets): its normed input [B, T, H] -> [B, T,
  // value_dim] before out_proj, with the forward's sequences (linear_attention) or cache states.
  using Mix = std::function<torch::Tensor(std::size_t l, const torch::Tensor& h)>;
  // What one walk carries between Gemma 4's layers: the per-layer inputs [B, T, L, Dp] (undefined: none) and
  // the keys and values [B, T, kv_heads, d] (normed, with RoPE) of the layers that KV-shared layers attend.
  struct Walk {
    torch::Tensor per_layer;
    std::vector<std::pair<torch::Tensor, torch::Tensor>> kv;
  };
  // One decoder layer with the layer's RoPE tables.
  torch::Tensor layer(std::size_t l, const torch::Tensor& x, const RopeTables& rope, const Attend& attend,
                      const Mix& mix, Walk& walk) const;
  // The walk every forward shares: the embedding of ids, then each decoder layer, keep shown
  // hidden_states[0..L-1]; returns the last layer's output before the final norm (hidden_states[L]
  // is that norm, which each forward applies to the positions it needs).
  torch::Tensor run_layers(const torch::Tensor& ids, const RopeTables& rope, const Attend& attend, const Keep& keep,
                           const Mix& mix = Mix()) const;
  // The attention of the cached forwards (target_ragged.cpp): each layer's new keys and values
  // written where `write` says, then the cache attended under mask [.., n, keys] (bool), less what a
  // sliding window drops by the queries' and keys' positions.
  Attend cached_attend(const CacheWrite& write, const torch::Tensor& mask, const torch::Tensor& query_pos,
                       const torch::Tensor& key_pos) const;
  // The embedding of ids (Gemma: times sqrt(hidden_size) in the model dtype).
  torch::Tensor embed_scaled(const torch::Tensor& ids) const;
  // The LM head on final normed hidden states, soft-capped where the family caps (model dtype).
  torch::Tensor logits(const torch::Tensor& final_hidden) const;
  // cos, sin [B, T, rotary] in the model dtype for position_ids [B, T], of the full-attention
  // layers and (local_*) of the sliding ones where their RoPE differs. Dynamic NTK scales from the
  // call's largest position; longrope takes the long factors per row where `lengths` [B, T] (each
  // token's sequence length: its document's in a training batch) exceed the original context.
  RopeTables rope(const torch::Tensor& position_ids, const torch::Tensor& lengths) const;
  // The feed-forward half of layer l on its normed input [B, T, H]: the dense MLP or the experts (Gemma 4: the
  // dense MLP always, its experts beside it in gemma4_moe).
  torch::Tensor mlp(std::size_t l, const torch::Tensor& x) const;
  // The experts of a sparse layer (target_moe.cpp): routing, then the tokens sorted by expert
  // through grouped matmuls; no host synchronisation where grouped_mm runs (see graph_safe).
  torch::Tensor moe(const TargetLayerWeights& w, const torch::Tensor& x) const;
  // RMSNorm as the family computes it.
  torch::Tensor norm(const torch::Tensor& x, const torch::Tensor& w) const;
};

}  // namespace eagle::target
