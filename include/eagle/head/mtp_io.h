// The MTP head's files (MTP.md 4, docs/export.md): its config from the target's config.json, its
// weights read from a target folder (or a checkpoint) under the native names
// model.mtp_layers.0.*, its training checkpoint, and the export vLLM serves with method mtp: a copy
// of the target folder with the MTP tensors replaced.
#pragma once

#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "eagle/head/head.h"
#include "eagle/target/target.h"

namespace eagle::head {

// The MTP head of a target that ships one MTP layer (MiMo with num_nextn_predict_layers 1, Qwen3.5 and
// Qwen3.5-MoE with mtp_num_hidden_layers 1, Qwen3-Next with num_nextn_predict_layers 1): its family's layout
// (mtp_layout.h), the target's sizes, eps and RoPE (Qwen: its partial rotary width), for Qwen3.5-MoE and
// Qwen3-Next the target's router, expert widths and gated shared expert (head_moe.h), one layer, the full
// vocabulary, aux id L (the last hidden state, before or after the final norm as the family's step 1
// reads it). Throws Error(usage) for a target without MTP layers, with several, or with a dense Qwen3-Next
// one, each by name.
HeadConfig mtp_config_from_target(const target::TargetConfig& target);

// Whether a config.json is one the MTP head is read from: MiMoForCausalLM, or a Qwen3.5, Qwen3.5-MoE or
// Qwen3-Next architecture that ships MTP layers (mtp_num_hidden_layers, in text_config for a multimodal
// one; num_nextn_predict_layers, default 1, for Qwen3-Next).
bool is_mtp_config(const nlohmann::json& j);
// The MTP head config of a config.json at `file` (a target folder's, an export's or a checkpoint's):
// mtp_config_from_target plus its eagle_train block (ttt_steps, loss decay, the target's name);
// without one (the original target) ttt_steps is num_nextn_predict_layers, vLLM's default k.
HeadConfig mtp_config_from_json(const nlohmann::json& j, const std::string& file);
// config.json of an MTP checkpoint: the target's fields the config reader needs plus eagle_train.
nlohmann::json mtp_config_json(const HeadConfig& cfg);
// The native name of an MTP head parameter of a family (HeadConfig::mtp_family): MiMo's
// model.mtp_layers.0. + the name (mtp_block. dropped), Qwen3.5's mtp. + the name (mtp_block. as layers.0.).
std::string mtp_native_name(const std::string& parameter, const std::string& family = "mimo");

// Copies the MTP layer's tensors of a folder (model.safetensors.index.json's shards, or
// model.safetensors) into the head's parameters, the experts fused or per expert as the folder holds
// them (mtp_tensors.h), checking that each is present with its shape and that no other tensor under the
// family's MTP prefix (model.mtp_layers.0., mtp.) is left unread (an expert past num_experts by name).
void load_mtp_weights(DraftHead& head, const std::string& dir);
// The MTP head of a folder: its config.json (mtp_config_from_json) and its weights.
std::shared_ptr<DraftHead> load_mtp_head(const std::string& dir, torch::Device device);

// Writes out_dir (refused when it exists) as a copy of target_dir: the shards holding the MTP
// tensors rewritten with the head's weights in each stored tensor's dtype (the other tensors of
// those shards as stored), every other safetensors file hard-linked (copied where linking fails,
// e.g. across file systems), other files copied, config.json with the head's eagle_train block.
// Only names the target already holds are written (its experts fused or per expert as it holds them).
// Built under a temporary name, then renamed.
void export_mtp_target(DraftHead& head, const std::string& target_dir, const std::string& out_dir);

}  // namespace eagle::head
