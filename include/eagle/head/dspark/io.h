// The DSpark draft's files (docs/export.md), in two layouts with the same model.safetensors (the checkpoint
// names: DFlash's, and markov_head.markov_w1.weight, markov_head.markov_w2.weight,
// confidence_head.proj.{weight,bias}; no embedding or LM head: vLLM shares the target's):
//  - dspark, the folder vLLM 0.32 serves natively with speculative_config {"method": "dspark", "model": DIR,
//    "num_speculative_tokens": steps}: config.json Qwen3DSparkModel, model_type qwen3, DFlash's fields with
//    dflash_config's mask_token_id and target_layer_ids, block_size, markov_rank, draft_vocab_size,
//    enable_confidence_head, confidence_head_with_markov and sample_from_anchor (the layout);
//  - speculators, as speculators 0.9.0's save_pretrained writes a DSparkDraftModel (speculators_model_type
//    dspark, transformer_layer_config, aux_hidden_state_layer_ids, speculators_config), which vLLM converts
//    (update_dspark: sample_from_anchor false when absent, aux id i as target layer i - 1);
// and their import for eval.
#pragma once

#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "eagle/head/dspark/head.h"

namespace eagle::head {

nlohmann::json dspark_config_json(const HeadConfig& cfg);
nlohmann::json dspark_speculators_config_json(const HeadConfig& cfg);
// Whether a config.json is a DSpark draft's (architectures Qwen3DSparkModel), or in speculators' layout
// (speculators_model_type dspark).
bool is_dspark_config(const nlohmann::json& j);
bool is_dspark_speculators_config(const nlohmann::json& j);
// The head config of such a config.json at `file`, every field bounded (DFlash's reader for the backbone).
// Throws Error(input) naming the field for what this head does not compute: a Markov head other than
// vanilla, a confidence head without the Markov input, a reduced draft vocabulary, logit_scale other than 1.
// A native config without sample_from_anchor is anchor-as-first (vLLM's native default).
HeadConfig dspark_config_from_json(const nlohmann::json& j, const std::string& file);
// The same for the speculators layout, read as vLLM converts it: one without sample_from_anchor is the 1 + N
// fill-in layout; aux ids must be >= 1; scaled RoPE in transformer_layer_config.rope_parameters is refused.
HeadConfig dspark_config_from_speculators_json(const nlohmann::json& j, const std::string& file);
// The head of such a folder on `device`: every tensor present with its shape, none left over. The caller
// sets the target's embedding and LM head (set_target_weights).
std::shared_ptr<DSparkHead> load_dspark_head(const std::string& dir, torch::Device device = torch::kCPU);

}  // namespace eagle::head
