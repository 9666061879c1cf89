// The frozen target model and its steps: every family of the family table (target_config.h: the Llama
// family, Mistral, Qwen2/3, MiMo, Phi-3/4, Gemma 2/3/4, the mixture-of-experts families, DeepSeek-V2/V3
// and GLM with multi-head latent attention, the Qwen3.5 / Qwen3-Next hybrids with Gated DeltaNet layers),
// read from a Hugging Face checkpoint folder, run without gradients for training features and teacher
// outputs, and incrementally with its caches (kv_cache.h) for acceptance evaluation and generation.
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
#include "eagle/target/kv_cache.h"
#include "eagle/target/target_config.h"

namespace eagle::target {

// RMSNorm as the family computes it (gpt-oss multiplies the weight in fp32 before the cast back;
// Gemma scales by 1 + w in fp32).
torch::Tensor target_norm(const TargetConfig& config, const torch::Tensor& x, const torch::Tensor& weight);

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

struct TargetStepOutput {
  torch::Tensor aux_hidden;    // [B, n, n_aux * H]
  torch::Tensor final_hidden;  // [B, n, H]
  torch::Tensor logits;        // [B, n, V] fp32
};

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
