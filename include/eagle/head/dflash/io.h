// The DFlash draft's files (docs/export.md): the folder vLLM 0.32 serves with speculative_config
// {"method": "dflash", "model": DIR, "num_speculative_tokens": block - 1}: config.json
// (DFlashDraftModel, model_type qwen3, dflash_config with mask_token_id and target_layer_ids,
// explicit head_dim, rope_theta, rms_norm_eps, attention_bias, layer_types) and model.safetensors
// under the checkpoint names (fc, hidden_norm, layers.{i}.*, norm), with no embedding and no LM head
// (vLLM shares the target's); and its import for eval. SGLang's DFlashDraftModel
// (python/sglang/srt/models/dflash.py, --speculative-algorithm DFLASH) reads the same folder: the
// same architecture, config keys and tensor names, with checks of its own (dflash_config_json).
#pragma once

#include <map>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "eagle/head/dflash/head.h"
#include "eagle/model/safetensors.h"

namespace eagle::head {

// The engine a DFlash export is written for: both load the same folder; sglang adds SGLang's checks.
enum class DFlashEngine { vllm, sglang };

// config.json of a DFlash head, with an eagle_train block (draft dflash, the anchors, gamma, the
// labels, the target) that the engines ignore. Throws Error(usage) for a RoPE other than the default
// (the export writes rope_theta alone; vLLM's default when it is absent is 1e6, so it is always
// written); for sglang also, naming the field, for what SGLang's DFlashDraftModel would build or
// check otherwise: fc's input width is (target layers x the draft's hidden_size), so target_hidden_size
// must equal hidden_size; dflash_config.target_layer_ids are checked against num_target_layers (the
// draft's own layer count when it is absent), so the target's depth must be known; SiLU only.
nlohmann::json dflash_config_json(const HeadConfig& cfg, DFlashEngine engine = DFlashEngine::vllm);
// Whether a config.json is a DFlash draft's (architectures DFlashDraftModel or a dflash_config block).
bool is_dflash_config(const nlohmann::json& j);
// The head config of such a config.json at `file` (eagle_train's fields when present, else the
// defaults). Throws Error(input) naming the field for what vLLM would serve differently than this
// head computes: causal or sliding-window layers, rope_scaling, attention_value_scale,
// use_aux_hidden_state false, no block_size, and sample_from_anchor true (a DSpark draft's: every
// slot predicts the next token; not implemented, docs/heads.md).
// speculators' DFlash layout (speculators_model_type dflash) is read as vLLM's update_dflash converts it; its
// block-causal layers (sliding_window_non_causal false, speculators' default for dflash: vLLM then sets
// dflash_config.causal) are refused by name.
HeadConfig dflash_config_from_json(const nlohmann::json& j, const std::string& file);
// speculators' layout of a DFlash head (block_draft_speculators_json, algorithm dflash): the fill-in layout
// (sample_from_anchor false) with non-causal blocks (sliding_window_non_causal true).
nlohmann::json dflash_speculators_config_json(const HeadConfig& cfg);

// Writes dir (refused when it exists; built under a temporary name, then renamed): config.json and
// model.safetensors, every parameter in its own dtype (fp32 master weights: bit for bit).
void export_dflash(DraftHead& head, const std::string& dir, DFlashEngine engine = DFlashEngine::vllm);
// The head of such a folder on `device`: every tensor present with its shape, none left over
// (vLLM's aliases encoder.fc.weight and encoder.output_norm_enc.weight accepted). The caller sets
// the target's embedding and LM head (set_target_weights).
std::shared_ptr<DFlashHead> load_dflash_head(const std::string& dir, torch::Device device = torch::kCPU);

// speculators' layout of a block draft built on this backbone (DSpark, DFlash2), as its save_pretrained writes
// one: speculators_model_type and architectures (speculators' class name), transformer_layer_config (the
// Qwen3 layer: sizes, layer_types, rope_parameters), aux_hidden_state_layer_ids, block_size,
// draft_vocab_size, target_hidden_size, mask_token_id, speculators_config (one greedy proposal of steps()
// tokens, the verifier) and `native`'s eagle_train block; the kind adds its own keys.
nlohmann::json block_draft_speculators_json(const HeadConfig& cfg, const nlohmann::json& native,
                                            const std::string& algorithm, const std::string& architecture);
// vLLM's reading of such a config (transformers_utils/configs/speculators/algos.py update_dflash and the
// kind's updater): transformer_layer_config with `architecture`, dflash_config {mask_token_id,
// target_layer_ids: aux id - 1}, the RoPE of rope_parameters as rope_theta (scaled RoPE refused), and the
// keys of `copied` that are present (with eagle_train); errors name `file` and the speculators key.
nlohmann::json block_draft_native_json(const nlohmann::json& speculators, const std::string& file,
                                       const std::string& architecture, const std::vector<std::string>& copied);

// The file's header against the config, before the head is allocated (a config whose sizes are within the
// limits but not the file's, hidden_size 2^20 over a 64-wide draft, is refused here, not after gigabytes): fc,
// the last layer's q, k and gate projections, and `more` (a kind's own tensors); errors name the file, the
// tensor and the draft (noun). Shared by the block drafts' loaders.
void check_block_draft_shapes(const model::SafetensorsFile& file, const HeadConfig& cfg, const std::string& noun,
                              const std::vector<std::pair<std::string, std::vector<std::int64_t>>>& more = {});
// A block draft's parameters copied from `file` (the tensors of weights_path under the head's names): every
// parameter present with its shape, none left over; errors name the file, the tensor and the draft (noun:
// "DFlash", "DSpark"). Shared by the block drafts' loaders.
void read_block_draft_weights(torch::nn::Module& head, std::map<std::string, torch::Tensor> file,
                              const std::string& weights_path, const std::string& noun);

}  // namespace eagle::head
