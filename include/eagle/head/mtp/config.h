// The MTP head's configuration (MTP.md 1, 7): read from the target's config (each family's checks and
// refusals, by name), from a folder's config.json (the target's, an export's or a checkpoint's), and
// written as an MTP checkpoint's config.json.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "eagle/head/head.h"
#include "eagle/target/target.h"

namespace eagle::head {

// The MTP head of a target that ships one MTP layer (MiMo with num_nextn_predict_layers 1, Qwen3.5 and
// Qwen3.5-MoE with mtp_num_hidden_layers 1, Qwen3-Next, DeepSeek-V3 / Kimi-K2 and GLM-4.5 with
// num_nextn_predict_layers 1, default 1): its family's layout (mtp_layout.h), the target's sizes, eps and
// RoPE (Qwen, GLM: its partial rotary width; DeepSeek-V3: its MLA shape, head.h set_mla_shape), for the
// MoE families the target's router, expert widths and shared expert(s) (head_moe.h), one layer, the full
// vocabulary, aux id L (the last hidden state, before or after the final norm as the family's step 1 reads
// it). Throws Error(usage) for a target without MTP layers, with several, with a dense Qwen3-Next one, a
// GLM-4.7-Flash one (vLLM does not load it from model.layers.{L}), and for what vLLM would serve otherwise
// (DeepSeek-V3 without scoring_func and topk_method, without q_lora_rank, with attention_bias, a RoPE
// other than default and YaRN; no shared experts), each by name.
HeadConfig mtp_config_from_target(const target::TargetConfig& target);

// Whether a config.json is one the MTP head is read from: MiMoForCausalLM, a Qwen3.5, Qwen3.5-MoE or
// Qwen3-Next architecture that ships MTP layers (mtp_num_hidden_layers, in text_config for a multimodal
// one; num_nextn_predict_layers, default 1, for Qwen3-Next), or a DeepSeek-V3 or GLM-4.5 / GLM-4.7-Flash
// one (num_nextn_predict_layers, default 1 as transformers' configs).
bool is_mtp_config(const nlohmann::json& j);
// The MTP head config of a config.json at `file` (a target folder's, an export's or a checkpoint's):
// mtp_config_from_target plus its eagle_train block (ttt_steps, loss decay, the target's name);
// without one (the original target) ttt_steps is num_nextn_predict_layers, vLLM's default k.
HeadConfig mtp_config_from_json(const nlohmann::json& j, const std::string& file);
// config.json of an MTP checkpoint: the target's fields the config reader needs plus eagle_train.
nlohmann::json mtp_config_json(const HeadConfig& cfg);

}  // namespace eagle::head
