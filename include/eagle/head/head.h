// What every draft head shares, whatever its kind (EAGLE-3 and its variants, EAGLE-1, MTP, DFlash): its
// configuration (the fields the export formats carry), the inputs of one training step, its outputs,
// the drafting cache, and the DraftHead interface the trainer and the evaluator call (its optional
// drafting steps refuse by name in head.cpp). What differs by kind is asked of the kind's row
// (draft_spec.h).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "eagle/head/loss.h"
#include "eagle/head/recompute.h"
#include "eagle/head/ttt_attention.h"
#include "eagle/model/layers.h"
#include "eagle/target/target.h"

namespace eagle::head {

struct HeadConfig {
  std::int64_t eagle_version = 3;  // 3 or 1
  std::int64_t hidden_size = 0;    // H of the head (= the target's, it shares the embedding)
  std::int64_t intermediate_size = 0;
  std::int64_t num_attention_heads = 0, num_key_value_heads = 0, head_dim = 0;
  double rms_norm_eps = 1e-6;
  std::string hidden_act = "silu";
  std::int64_t max_position_embeddings = 2048;
  model::RopeConfig rope;             // the RoPE the head is trained with (default: the target's)
  std::int64_t vocab_size = 0;        // V, the target's vocabulary
  std::int64_t draft_vocab_size = 0;  // V_d (EAGLE-1: = V)
  std::int64_t target_hidden_size = 0;
  std::int64_t target_num_hidden_layers = 0;
  std::vector<std::int64_t> aux_layer_ids;  // input-of-layer ids (hidden_states[id]), low -> high
  bool fc_bias = false;                     // EAGLE-1 only
  // EAGLE 3.1 and its parts (EAGLE-variants.md §1): fc_norm.{i} on each aux feature, input_norm over
  // their concatenation, the final-normed hidden as the recurrent state.
  bool fc_norm = false, norm_before_fc = false, norm_output = false;
  bool qk_norm = false;  // the Qwen3-style draft layer (q_norm, k_norm per head)
  // EAGLE-3 decoder layers (EAGLE-variants.md §2): layer 0 takes [embedding; state], layers 1..n-1
  // are plain pre-norm layers on H; each keeps its own keys/values (TTT and drafting).
  std::int64_t num_layers = 1;
  // P-EAGLE (EAGLE-variants.md §4): depths d >= 1 take token mask_token_id and the state
  // F1(mask_hidden); all drafted tokens come from one forward.
  bool parallel_drafting = false;
  std::int64_t mask_token_id = -1;                 // a target token id (< vocab_size) when parallel_drafting
  std::int64_t ttt_steps = 7;                      // EAGLE-3 TTT steps (and the speculative tokens exported)
  double ttt_loss_decay = 0.8;                     // weight of step k is decay^k
  LossKind loss = LossKind::kl;                    // EAGLE-3's per-position loss (head_loss.h); training only
  std::int64_t loss_chunk_size = 1024;             // EAGLE-3: tokens per chunk of the fused loss; 0 unchunked
  RecomputeMode recompute = RecomputeMode::layer;  // EAGLE-3: what the TTT unroll recomputes in backward
  double eagle1_feature_weight = 1.0;              // EAGLE-1: weight of SmoothL1 on the next feature
  double eagle1_token_weight = 0.1;                // EAGLE-1: weight of the soft cross-entropy
  std::string target_name_or_path;                 // named in the exports
  std::string target_architecture;                 // e.g. LlamaForCausalLM
  std::string target_dtype = "float32";            // the target's serving dtype (its config.json), written as the
                                                   // exports' torch_dtype: SGLang runs the draft in it
  TttAttentionImpl attention = TttAttentionImpl::efficient;
  // --draft mtp (MTP.md): the target's own shipped MTP layer, fine-tuned (head/mtp/head.h); "" for the
  // EAGLE heads, else the family whose MTP forward it is ("mimo", "qwen3_5", "deepseek_v3", ...: mtp_layout.h).
  // An MTP head is drafted and
  // trained as an EAGLE-3 head (eagle_version 3, one layer, aux_layer_ids {L}, the full vocabulary).
  std::string mtp_family;
  bool attention_bias = false;  // q/k/v bias of the draft layer (the MTP block of a Qwen2-type target)
  // --draft_layer deepseek (docs/heads.md): the MLA layer of vLLM's deepseek_eagle3.py
  // (DeepseekV2MLAAttention: q_a_proj, q_a_layernorm, q_b_proj, kv_a_proj_with_mqa, kv_a_layernorm,
  // kv_b_proj, o_proj) with a dense MLP. head_dim is qk_nope + qk_rope, num_key_value_heads the heads,
  // rope.head_dim qk_rope_head_dim; kv_lora_rank 0: not an MLA layer.
  std::int64_t q_lora_rank = 0, kv_lora_rank = 0, qk_nope_head_dim = 0, qk_rope_head_dim = 0, v_head_dim = 0;
  bool mla() const { return kv_lora_rank > 0; }
  // The MTP block of a Qwen3.5 target (head/mtp/layout.h): every RMSNorm x * (1 + w) in fp32, and
  // q_proj emitting [query | gate] per head, the attention times sigmoid(gate) before o_proj.
  bool norm_one_plus = false, attn_output_gate = false;
  bool mtp() const { return !mtp_family.empty(); }
  // The MTP block's mixture of experts (Qwen3.5-MoE, Qwen3-Next, DeepSeek-V3, GLM-4.5; head/moe.h): the
  // target's router
  // (num_experts 0: the dense MLP of intermediate_size), each routed expert's and the shared expert's
  // widths, and the shared expert's sigmoid gate.
  model::MoeRouter moe_router;
  std::int64_t moe_intermediate_size = 0, shared_intermediate_size = 0;
  bool shared_expert_gate = false;
  bool moe() const { return moe_router.num_experts > 0; }
  // --draft dflash (DFlash.md, head/dflash/head.h): num_layers Qwen3-style layers over the target's
  // features at aux_layer_ids (DFlash target layer t is aux id t + 1), drafting dflash_block_size - 1
  // tokens in one forward of the block [anchor, mask_token_id x (block - 1)]; 0: not a DFlash head.
  std::int64_t dflash_block_size = 0;
  std::int64_t dflash_num_anchors = 512;  // anchors per row of a micro-batch (a fixed count: one shape)
  double dflash_decay_gamma = 7.0;        // slot k's loss weight exp(-(k - 1) / gamma); <= 0: all 1
  bool dflash_hard_labels = false;        // hard CE on the data token instead of the target's distribution
  bool dflash() const { return dflash_block_size > 0; }
  // --draft dspark (head/dspark/head.h): DFlash's backbone with a Markov head of this rank and, when on, the
  // confidence head on [h; W1[prev]]; 0: not a DSpark head. sample_from_anchor: the anchor-as-first layout
  // (every slot of the block predicts the token after it: dflash_block_size tokens a round), else DFlash's
  // 1 + N fill-in layout (slot k >= 1 predicts the token at its own position: dflash_block_size - 1).
  std::int64_t dspark_markov_rank = 0;
  bool dspark_confidence_head = false;
  double dspark_confidence_alpha = 1.0;
  bool dspark_sample_from_anchor = true;
  bool dspark() const { return dspark_markov_rank > 0; }
  // --draft dflash2 (head/dflash2/head.h): DFlash's backbone in its 1 + N layout with two grouped causal
  // convolutions per layer (taps, channels per group) and the candidate selector of this rank over the LM
  // head's top selector_top_k; 0: not a DFlash2 head.
  std::int64_t dflash2_selector_rank = 0;
  std::int64_t dflash2_selector_top_k = 16;
  std::int64_t dflash2_conv_kernel_size = 2;
  std::int64_t dflash2_conv_group_size = 16;
  double dflash2_selector_alpha = 1.0;
  bool dflash2() const { return dflash2_selector_rank > 0; }

  // The head shaped after its target: H, heads, head_dim, intermediate size, eps, RoPE.
  static HeadConfig from_target(const target::TargetConfig& target, std::int64_t eagle_version,
                                std::vector<std::int64_t> aux_layer_ids, std::int64_t draft_vocab_size);
  // Makes this EAGLE-3 config's layer the MLA draft layer shaped after the MLA target (its heads, LoRA
  // ranks and head widths; the RoPE vLLM's deepseek_eagle3 rotates with). Throws Error(usage) for a
  // target without MLA, without a q_lora_rank (vLLM's loader fuses q_a_proj with kv_a_proj_with_mqa), or
  // a RoPE other than default and YaRN (vLLM serves every scaled type as deepseek_yarn).
  void use_mla_layer(const target::TargetConfig& target);
  // The MLA layer's shape as vLLM's DeepseekV2MLAAttention builds it from an MLA target's config (use_mla_layer
  // and DeepSeek-V3's MTP layer): its heads (one key/value head each), LoRA ranks and head widths, no biases,
  // and the target's RoPE over qk_rope_head_dim as vLLM serves it (deepseek_yarn for YaRN: the correction
  // range always truncated, attn_factor not attention_factor read). No checks.
  void set_mla_shape(const target::TargetConfig& target);
  std::int64_t steps() const {
    if (dspark() && dspark_sample_from_anchor) return dflash_block_size;
    return dflash() ? dflash_block_size - 1 : eagle_version == 3 ? ttt_steps : 1;
  }
};

// One micro-batch for the head's training forward; every tensor [B, T, ...] on the head's device.
struct HeadInputs {
  torch::Tensor input_ids;           // [B, T] int64
  torch::Tensor loss_mask;           // [B, T] bool/uint8: 1 where the token is trained
  torch::Tensor position_ids;        // [B, T] int64, position within the token's own sample
  torch::Tensor document_ids;        // [B, T] int64, sample of the row; -1 padding
  torch::Tensor aux_hidden;          // EAGLE-3: [B, T, 3 * H_target] target features (TargetOutput)
  torch::Tensor final_hidden;        // EAGLE-1: [B, T, H] final normed hidden (TargetOutput)
  torch::Tensor teacher_logits;      // EAGLE-3: [B, T, V_d] fp32 over the draft ids (TargetOutput)
  torch::Tensor target_argmax;       // [B, T] int64 target argmax over the full vocabulary
  torch::Tensor extra;               // the loss plan's extra input (draft_spec.h; DFlash: [B, N] int64 block anchors)
  model::AttentionSpec attention{};  // packed or padded rows (default: packed, exact for any layout)
};

struct HeadStepOutput {
  torch::Tensor loss;         // scalar fp32 with autograd: sum_k w_k * sum_valid loss / denominator_k
  torch::Tensor metric_sums;  // [K, kMetricColumns] fp32, detached (see head_loss.h)
};

// Key/value cache of the head's layers for drafting; slots [0, length) hold the accepted prefix,
// drafted tokens are written after it and forgotten at the next call.
struct DraftCache {
  torch::Tensor keys, values;  // [layers, B, kv_heads, capacity, head_dim]
  std::int64_t length = 0;
};

class DraftHead {
 public:
  virtual ~DraftHead() = default;
  virtual const HeadConfig& config() const = 0;
  virtual torch::nn::Module& module() = 0;  // parameters() for the optimizer; to(device)

  // The training forward of one micro-batch: denominators [K] (fp32, on the head's device) are
  // the valid-position counts of the whole optimizer step (counted on the host, train/loss_metrics.h);
  // counts below 1 are treated as 1. No host synchronisation.
  virtual HeadStepOutput train_step_forward(const HeadInputs& in, const torch::Tensor& denominators) = 0;

  // Incremental drafting. features [B, n, F] are the target's features (EAGLE-3: aux_hidden,
  // EAGLE-1: final_hidden) of positions cache.length .. cache.length+n-1 and next_ids [B, n] the
  // tokens at the following positions (x_{t+1}; the last is the target's newest token). Appends
  // them to the cache, then drafts draft_len tokens chained on the head's own recurrent hidden.
  // Returns [B, draft_len] int64 target ids.
  virtual DraftCache new_cache(std::int64_t batch, std::int64_t capacity) const = 0;
  virtual torch::Tensor draft(DraftCache& cache, const torch::Tensor& features, const torch::Tensor& next_ids,
                              std::int64_t draft_len) = 0;
  // Rolls the cache back to the first `length` prefix positions (after a rejection).
  void truncate(DraftCache& cache, std::int64_t length) const { cache.length = std::min(cache.length, length); }

  // Drafting in explicit steps, for trees and sampled drafts (acceptance/propose.cpp; sequentially
  // drafting EAGLE-3 heads, head/eagle/eagle3_tree.cpp; other heads throw Error(usage)). draft_extend is draft()'s
  // prefix pass: appends features/next_ids as draft() does and returns the last position's output.
  // draft_nodes runs n drafted nodes: their tokens ids [B, n] (target ids) with the recurrent
  // states of their parents [B, n, H] at RoPE positions [B, n], their keys written at cache slots
  // [slot, slot + n), each attending the keys mask [n, slot + n] (bool) allows; cache.length is
  // unchanged. Either's logits are fp32 over the draft vocabulary (draft_vocab_ids maps them).
  struct Step {
    torch::Tensor state, logits;  // the next step's recurrent state [B, n, H], draft logits [B, n, V_d] (extend: n = 1)
  };
  virtual Step draft_extend(DraftCache& cache, const torch::Tensor& features, const torch::Tensor& next_ids);
  virtual Step draft_nodes(DraftCache& cache, const torch::Tensor& states, const torch::Tensor& ids,
                           const torch::Tensor& positions, std::int64_t slot, const torch::Tensor& mask);
  virtual torch::Tensor draft_vocab_ids() const;  // [V_d] int64 target ids of the draft vocabulary
  // P-EAGLE's draft(): the same one forward, returning the draft logits [B, draft_len, V_d] (fp32) of
  // the drafted positions instead of their argmax (sampled chains; other heads throw Error(usage)).
  virtual torch::Tensor parallel_logits(DraftCache& cache, const torch::Tensor& features, const torch::Tensor& next_ids,
                                        std::int64_t draft_len);
  // A chain of draft_len tokens from one forward whose slot j may depend on the token drafted at slot j - 1
  // (DSpark's Markov bias): pick(j, logits_j) is called for j = 0 .. draft_len - 1 in turn with slot j's draft
  // logits [B, V_d] (fp32) and returns the target ids [B] drafted there (an argmax or a sample). Default:
  // parallel_logits' slots, each handed to pick in turn (P-EAGLE, DFlash).
  using PickToken = std::function<torch::Tensor(std::int64_t, const torch::Tensor&)>;
  virtual void parallel_chain(DraftCache& cache, const torch::Tensor& features, const torch::Tensor& next_ids,
                              std::int64_t draft_len, const PickToken& pick);
  // The draft logits [B, T, V_d] of every TTT step, teacher-forced as in training (alpha_k;
  // EAGLE-3 heads, EAGLE-1 throws Error(usage) as draft_vocab_ids does).
  virtual std::vector<torch::Tensor> ttt_logits(const HeadInputs& in);

  // Drafting many sequences at once with per-row lengths (acceptance/batched.cpp; EAGLE-3
  // heads that draft sequentially and DFlash drafts, drafts_ragged()). Row r's new positions go to the
  // cache slots columns[r, :] (= their RoPE positions, as in draft()), right-padded; padding sits at
  // the spare last slot, and a row whose `last` token sits there is idle (its drafts are meaningless).
  // EAGLE-3: the row's draft_len - 1 chained tokens go to the slots after its last real one, each token
  // attending its row's slots <= its own; DFlash: the block after the last real slot, written nowhere
  // (dflash_head.h). Returns [R, draft_len] int64 target ids; no host synchronisation.
  struct RaggedDraft {
    torch::Tensor features;    // [R, N, F] the target's features (EAGLE-3: aux_hidden)
    torch::Tensor next_ids;    // [R, N] int64 the token after each position
    torch::Tensor columns;     // [R, N] int64 cache slot of each position
    torch::Tensor rows;        // [R] int64 cache rows; undefined: all rows, in order
    torch::Tensor last;        // [R] int64 in [0, N): each row's last real position
    std::int64_t key_len = 0;  // slots [0, key_len) are read: beyond every real slot and chained draft
  };
  virtual bool drafts_ragged() const { return false; }
  virtual torch::Tensor draft_ragged(DraftCache& cache, const RaggedDraft& step, std::int64_t draft_len);

  // The frozen target tensors the head uses but does not train: the embedding [V, H] (both) and
  // the LM head [V, H] (EAGLE-1's output layer). Kept by reference, never registered.
  virtual void set_target_weights(const torch::Tensor& embedding, const torch::Tensor& lm_head) = 0;
  // A new head's start from its target's embedding and LM head [V, H] (TargetEnds):
  // set_target_weights, and for EAGLE-3 the LM head rows of the draft ids (EAGLE.md). A head loaded
  // from a checkpoint needs only set_target_weights.
  virtual void init_from_target(const torch::Tensor& embedding, const torch::Tensor& lm_head) = 0;
  // What the target computes as this head's teacher (EAGLE-3: logits over its draft ids, on the
  // head's device; EAGLE-1: nothing beyond the target's own outputs).
  virtual target::TeacherSpec teacher_spec() const = 0;
};

// A training step's input checked by shape only (host metadata, no device synchronisation): Error(internal)
// naming HeadInputs.<name>.
void check_head_input(const torch::Tensor& t, const char* name, c10::IntArrayRef expected);
// The [B, T] inputs every head's training step reads (loss_mask, position_ids, document_ids,
// target_argmax) checked against input_ids' [B, T].
void check_row_inputs(const HeadInputs& in);

// The trainable parameters by name (the frozen target tensors are not parameters of the head).
std::vector<std::pair<std::string, torch::Tensor>> named_parameters(DraftHead& head);
std::int64_t count_parameters(DraftHead& head);
// Throws Error(input) naming head_dir and every parameter holding NaN or Inf (with hint): such a head
// reports AR 1 and a NaN loss, and an export of it would be served broken (eval, export).
void check_finite_parameters(DraftHead& head, const std::string& head_dir, const std::string& hint);

}  // namespace eagle::head
