// The DFlash2 draft's files (docs/export.md), in two layouts with the same model.safetensors (the checkpoint
// names: DFlash's, and layers.{l}.attention_conv.{base_kernel, kernel_projection.weight},
// layers.{l}.mlp_conv.*, candidate_selector.{predecessor_codebook, successor_codebook,
// hidden_projection.weight}; no embedding or LM head: vLLM shares the target's):
//  - dflash, the folder vLLM 0.32 serves with speculative_config {"method": "dflash", "model": DIR,
//    "num_speculative_tokens": block - 1}: DFlash's config.json with architectures DFlash2DraftModel and
//    dflash_config's conv_kernel_size, conv_group_size, selector_rank and selector_top_k (vLLM requires all
//    four);
//  - speculators, as speculators 0.9.0's save_pretrained writes a DFlash2DraftModel (speculators_model_type
//    dflash2), which vLLM converts (update_dflash, update_dflash2);
// and their import for eval.
#pragma once

#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "eagle/head/dflash2/head.h"

namespace eagle::head {

nlohmann::json dflash2_config_json(const HeadConfig& cfg);
nlohmann::json dflash2_speculators_config_json(const HeadConfig& cfg);
// Whether a config.json is a DFlash2 draft's: architectures DFlash2DraftModel, or speculators_model_type dflash2.
bool is_dflash2_config(const nlohmann::json& j);
// The head config of either layout at `file`, every field bounded (DFlash's reader for the backbone). Throws
// Error(input) naming the field for what this head does not compute: the anchor-as-first layout, causal or
// sliding-window layers, input_embedding_scale or output_multiplier other than 1, a final logit soft cap,
// conv_group_size not dividing hidden_size, conv_kernel_size above block_size, selector_top_k above the
// vocabulary.
HeadConfig dflash2_config_from_json(const nlohmann::json& j, const std::string& file);
// The head of such a folder on `device`: every tensor present with its shape, none left over.
std::shared_ptr<DFlash2Head> load_dflash2_head(const std::string& dir, torch::Device device = torch::kCPU);

}  // namespace eagle::head
