// The MTP head's files (MTP.md 4, docs/export.md): its weights read from a target folder (or a
// checkpoint) under the native names (model.mtp_layers.0.*, mtp.*, model.layers.{L}.*), its training
// checkpoint, and the export vLLM serves with method mtp: a copy of the target folder with the MTP
// tensors replaced. Its config: mtp_config.h (included).
#pragma once

#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "eagle/head/head.h"
#include "eagle/head/mtp/config.h"
#include "eagle/target/target.h"

namespace eagle::head {

// The native name of an MTP head parameter of a family (HeadConfig::mtp_family): MiMo's
// model.mtp_layers.0. + the name (mtp_block. dropped), Qwen3.5's mtp. + the name (mtp_block. as layers.0.).
// The families whose layer follows the target's last (DeepSeek-V3, GLM-4.5: model.layers.{L}. + the name,
// mtp_block. dropped) need the head's config, which holds L.
std::string mtp_native_name(const std::string& parameter, const std::string& family = "mimo");
std::string mtp_native_name(const std::string& parameter, const HeadConfig& cfg);

// Copies the MTP layer's tensors of a folder (model.safetensors.index.json's shards, or
// model.safetensors) into the head's parameters (and its frozen correction bias), the experts fused or
// per expert as the folder holds them (mtp_tensors.h), checking that each is present with its shape and
// that no other tensor under the family's MTP prefix (model.mtp_layers.0., mtp., model.layers.{L}.) is
// left unread (an expert past num_experts by name), but for those vLLM replaces by the target's (the
// embedding; DeepSeek's shared_head.head, the LM head: neither is read).
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
