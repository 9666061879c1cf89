// The DSpark draft's files (docs/export.md): the folder vLLM 0.32 serves with speculative_config
// {"method": "dspark", "model": DIR, "num_speculative_tokens": block}: config.json (Qwen3DSparkModel,
// model_type qwen3, DFlash's fields with dflash_config's mask_token_id and target_layer_ids, block_size,
// markov_rank, draft_vocab_size, enable_confidence_head, confidence_head_with_markov and sample_from_anchor
// true: the anchor-as-first layout) and model.safetensors under the checkpoint names (DFlash's, and
// markov_head.markov_w1.weight, markov_head.markov_w2.weight, confidence_head.proj.{weight,bias}), with no
// embedding or LM head (vLLM shares the target's); and its import for eval.
#pragma once

#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "eagle/head/dspark/head.h"

namespace eagle::head {

nlohmann::json dspark_config_json(const HeadConfig& cfg);
// Whether a config.json is a DSpark draft's (architectures Qwen3DSparkModel).
bool is_dspark_config(const nlohmann::json& j);
// The head config of such a config.json at `file`, every field bounded (DFlash's reader for the backbone).
// Throws Error(input) naming the field for what this head does not compute: sample_from_anchor false (the
// 1 + N fill-in layout), a Markov head other than vanilla, a confidence head without the Markov input, a
// reduced draft vocabulary, logit_scale other than 1.
HeadConfig dspark_config_from_json(const nlohmann::json& j, const std::string& file);
// The head of such a folder on `device`: every tensor present with its shape, none left over. The caller
// sets the target's embedding and LM head (set_target_weights).
std::shared_ptr<DSparkHead> load_dspark_head(const std::string& dir, torch::Device device = torch::kCPU);

}  // namespace eagle::head
