// The draft table: one row per draft kind (EAGLE-3 with its variants as settings, EAGLE-1, the target's
// MTP layer, DFlash), as torchtitan's ModelSpec is one record per model. Everything outside head/ that
// depends on the kind asks its row: what the head reads of the target, how it is configured and made
// from head settings and the target's ends, its loss plan, its drafting limits, its formats, the
// options it resolves at start-up (resume) and its wording in logs. A new kind is a folder and a row.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "eagle/config/options.h"
#include "eagle/data/batch.h"
#include "eagle/data/dataset.h"
#include "eagle/head/draft_vocab.h"
#include "eagle/head/head.h"
#include "eagle/target/target.h"

namespace eagle::head {

using config::DraftKind;

// The folder layouts a head is written and read in. mtp: an MTP head under the target's native names
// (mtp/io.h): a checkpoint holds the MTP tensors alone, an export the whole target folder. dflash: a
// DFlash draft in the layout vLLM 0.32 loads (dflash/io.h), its checkpoints and exports alike.
// dspark: a DSpark draft in the layout vLLM 0.32 loads (Qwen3DSparkModel; dspark/io.h).
enum class HeadFormat { sglang, speculators, vllm_eagle1, mtp, dflash, dspark };
std::string format_name(HeadFormat f);

// What a head reads of the target, per position (the feature sources and the acceptance loop ask this,
// never the kind; vllm-project/vllm#43986 is the bug of a caller answering for the drafter).
struct FeatureNeeds {
  std::vector<std::int64_t> aux_layer_ids;  // input-of-layer ids read; empty: the target's default (or a store's own)
  bool aux_hidden = true;      // the target's hidden states at aux_layer_ids; false: the final normed hidden (EAGLE-1)
  bool last_as_aux = false;    // the target's last hidden state is the one aux feature, id L (MTP)
  bool last_pre_norm = false;  // aux id L taken before the final norm, as vLLM's aux states (DFlash)
};

// What one round of drafting can do (acceptance/measure.cpp refuses the rest by name before any decoding).
struct DraftLimits {
  std::int64_t max_draft_len = 0;  // the most tokens one round drafts; 0: any (chained steps)
  std::string max_draft_len_what;  // max_draft_len in words, e.g. "its block's mask slots"
  std::string max_draft_len_name;  // and as the option that sets it, e.g. "dflash_block_size - 1"
  std::string no_tree;             // empty: trees are drafted; else why not (the refusal)
  bool parallel_chain = false;     // a round's tokens all from one forward (P-EAGLE, DFlash): each from its own logits
};

// The denominators and per-batch extra inputs of a set of batches that share one normalisation (an
// optimizer step's micro-batches, or an evaluation's batches).
struct LossPlan {
  std::vector<std::int64_t> denominators;  // [steps] valid positions of each step, summed over the batches
  std::vector<torch::Tensor> extras;       // per batch: an extra host input of the head (DFlash: anchors [B, N]) or undefined
};
// Where a plan draws its randomness: a run's seed, the optimizer step (-1: an evaluation, the same every
// time) and the rank; batch i of the plan is micro-batch i.
struct PlanSeed {
  std::uint64_t seed = 0;
  std::int64_t step = 0;
  std::int64_t rank = 0;
};

// The head-level settings of a run (train/setup.cpp builds them from the options): what a row is
// configured from, never the whole options.
struct HeadSettings {
  std::int64_t eagle_version = 3;
  std::int64_t ttt_steps = 7;
  double ttt_loss_decay = 0.8;
  LossKind loss = LossKind::kl;
  std::string loss_name = "kl";
  std::int64_t loss_chunk_size = 1024;
  bool fc_norm = false, norm_output = false, norm_before_fc = false;
  std::string draft_layer = "llama";
  std::int64_t num_layers = 1;  // resolved (draft_num_layers 0: the kind's default)
  bool parallel_drafting = false;
  std::int64_t mask_token_id = -1;  // -1: the target's first end-of-sequence id
  std::string recompute_activations = "auto";
  std::vector<std::int64_t> dflash_target_layers;
  std::int64_t dflash_block_size = 16, dflash_num_anchors = 512;
  double dflash_decay_gamma = 7.0;
  bool dflash_hard_labels = false;
  std::int64_t dspark_markov_rank = 256;
  bool dspark_confidence_head = true;
  double dspark_confidence_alpha = 1.0;
  bool dspark_sample_from_anchor = true;
  std::int64_t dflash2_conv_kernel_size = 2;
  std::int64_t dflash2_conv_group_size = 16;
  std::int64_t dflash2_selector_rank = 256;
  std::int64_t dflash2_selector_top_k = 16;
  double dflash2_selector_alpha = 1.0;
  std::vector<std::int64_t> aux_layer_ids;  // EAGLE: the layers it fuses (empty: not yet resolved, plan())
  std::string model_dir;    // model_name_or_path (an MTP head's shipped layer is read from it)
  std::string target_dir;   // the folder holding the target's config.json (model_dir, or a dump's copy)
  std::string target_name;  // the target the head names in its exports

  // The head-level options of a run; target_dir as features::target_config_dir finds it (aux_layer_ids:
  // the options', resolved by the inputs later for EAGLE).
  static HeadSettings from(const config::Options& o, const std::string& target_dir);
};

struct DraftSpec {
  DraftKind kind;
  const char* name;       // the row's name ("eagle3", "eagle1", "mtp", "dflash")
  const char* noun;       // the head in a log line: "EAGLE-3", "the target's MTP", "a DFlash"
  const char* step_noun;  // its K steps in a log line: "TTT step(s)", "mask slot(s) per block"
  bool reduced_vocab;     // a draft vocabulary of the most frequent trained tokens (else the target's whole)
  bool memory_model;      // train's memory estimate models its step (check_step_memory, --dry_run)
  bool auto_recompute;    // --recompute_activations auto is resolved by that estimate (else configure sets it)
  bool evaluate_at_start;  // its AR before any update is logged at step 0 (a shipped MTP layer: MTP.md 7.14)
  std::vector<HeadFormat> formats;  // the layouts it is exported in (the first is export's default for it)
  HeadFormat checkpoint;            // the layout of its training checkpoints (checkpoint_format refines EAGLE-3's)

  // What a new head of these settings will read (train: the inputs are loaded for it before the head is
  // made; every kind-specific refusal of the target comes here, before anything heavy loads).
  FeatureNeeds (*plan)(const HeadSettings& s);
  // What a made or loaded head reads (eval, and the acceptance loop).
  FeatureNeeds (*reads)(const HeadConfig& cfg);
  // The head's config for this target: its shape, its kind's settings, every refusal by name.
  HeadConfig (*configure)(const HeadSettings& s, const target::TargetConfig& target, std::int64_t draft_vocab_size);
  // The head of a config (configure's, its recompute mode set), on the device, started from the
  // target's ends (an MTP head: from the layer the target ships).
  std::shared_ptr<DraftHead> (*make)(const HeadConfig& cfg, const HeadSettings& s, const target::TargetEnds& ends,
                                     const DraftVocab& vocab, torch::Device device);
  LossPlan (*loss_plan)(const std::vector<data::Batch>& batches, const HeadConfig& cfg, const PlanSeed& seed);
  DraftLimits (*limits)(const HeadConfig& cfg);
  // Train's start, beside the rule every kind shares (a trained token at position 2 or later): what a sample of
  // the training data, truncated at max_len tokens, must hold for this head to train on it, or "" when some
  // sample does. Null: the shared rule is the kind's.
  std::string (*untrainable)(const data::Dataset& train, const HeadConfig& cfg, std::int64_t max_len);
  // A resume compares the checkpoint's options with the run's; the options whose default stands for a
  // value resolved at start-up are rewritten, in both, to what the checkpoint's head resolved.
  void (*resolve_resume)(const HeadConfig& saved, nlohmann::json& before, nlohmann::json& now);
  // The model FLOPs of one training micro-batch on its real tokens, forward and backward of the head
  // (head/flops.h; the trainer's TFLOP/s and MFU). extra: the batch's extra input of the loss plan.
  double (*train_flops)(const HeadConfig& cfg, const data::Batch& batch, const torch::Tensor& extra);
};

// Every row, in DraftKind order.
const std::vector<DraftSpec>& draft_specs();
const DraftSpec& draft_spec(DraftKind kind);
// The kind of a head's config (what a checkpoint or export folder holds).
DraftKind kind_of(const HeadConfig& cfg);
inline const DraftSpec& draft_spec(const HeadConfig& cfg) { return draft_spec(kind_of(cfg)); }

// Host side, before the step: for k = 0..steps-1, the positions t of the batch with t+k+2 in the
// same document as t and loss_mask[t+k+2] = 1. The trainer sums these over the micro-batches (and
// ranks) of one optimizer step and passes them as the loss denominators. The third condition of
// the rule (teacher argmax in the draft vocabulary) is only known on the device: positions failing
// it add nothing to the numerator but still count here (docs/heads.md).
std::vector<std::int64_t> count_loss_positions(const data::Batch& batch, std::int64_t steps);
// resolve_resume's rule for one option whose default stands for a value resolved at start-up: where both
// options hold `key`, the checkpoint's becomes `saved` (what its head resolved) and the run's becomes
// `resolved` while it is still the default `unset`.
void resolve_resumed_option(nlohmann::json& before, nlohmann::json& now, const std::string& key,
                            const nlohmann::json& saved, const nlohmann::json& unset, const nlohmann::json& resolved);
// The loss plan of the heads trained with TTT (EAGLE-3, EAGLE-1, MTP): count_loss_positions summed, no extras.
LossPlan ttt_loss_plan(const std::vector<data::Batch>& batches, const HeadConfig& cfg, const PlanSeed& seed);

}  // namespace eagle::head
