// Head checkpoints, export and import in the layouts the serving engines load (EAGLE.md "Export
// layouts"; HeadFormat in draft_spec.h): SGLang/SpecForge LlamaForCausalLMEagle3, vLLM speculators
// Eagle3Speculator, vLLM EagleLlamaForCausalLM for EAGLE-1, an MTP head under the target's native names
// (mtp/io.h) and vLLM's DFlashDraftModel (dflash/io.h). A training checkpoint is the layout of the
// head's row (checkpoint_format), in fp32.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include <torch/torch.h>
#include <nlohmann/json.hpp>

#include "eagle/head/draft_spec.h"
#include "eagle/head/draft_vocab.h"
#include "eagle/head/head.h"
#include "eagle/head/export/quant.h"

namespace eagle::head {

// The draft layer as --draft_layer names it: llama, qwen3 or deepseek (the MLA layer).
std::string draft_layer_name(const HeadConfig& c);

// A new head of cfg's version (vocab ignored for EAGLE-1).
std::shared_ptr<DraftHead> make_head(const HeadConfig& cfg, const DraftVocab& vocab);

// The layout a head is checkpointed in: sglang for EAGLE-3 (speculators for the variants SGLang
// does not serve: the Qwen3-style layer, norm_before_fc), vllm_eagle1 for EAGLE-1.
HeadFormat checkpoint_format(const HeadConfig& cfg);

// The head's variant in a few fields (eval --json's "head"): version, layers, draft layer, switches.
nlohmann::json head_variant_json(const HeadConfig& cfg);

// config.json of a head in a format (throws when the format does not fit the head).
nlohmann::json head_config_json(const HeadConfig& cfg, HeadFormat format);
// The head's tensors under the format's names, on CPU, in fp32 (d2t int64, t2d bool).
std::map<std::string, torch::Tensor> head_tensors(DraftHead& head, HeadFormat format);

// Writes config.json and model.safetensors into the existing folder dir, each to a temporary name
// then renamed (the trainer writes its checkpoint folder this way and adds its own state file).
// target_embedding [V, H], when given, is written as embed_tokens.weight in its own dtype.
// fp8, when given, quantizes the linear weights (head_quant.h) and adds the quantization_config.
void write_head_files(DraftHead& head, HeadFormat format, const std::string& dir,
                      const torch::Tensor& target_embedding = {}, const Fp8Settings* fp8 = nullptr);
// Exports into a new folder: written under a temporary name beside it, then renamed. Refuses an
// existing dir. The speculators format needs target_embedding: speculators' from_pretrained leaves
// a missing embed_tokens at zero, silently (docs/export.md).
void export_head(DraftHead& head, HeadFormat format, const std::string& dir,
                 const torch::Tensor& target_embedding = {}, const Fp8Settings* fp8 = nullptr);

struct LoadedHead {
  HeadFormat format = HeadFormat::sglang;
  HeadConfig config;
  std::shared_ptr<DraftHead> head;
};

// Reads a head folder in any of the formats (found from config.json), checking every tensor's
// presence and shape; FP8 weights (an export --quantize fp8) are dequantized. The head still needs
// set_target_weights before use. An EAGLE-3 head whose config.json names no aux layers (SpecForge saves
// none by default; vLLM and SGLang then fuse their default layers of the target) reads
// unnamed_aux_layer_ids, logged; none given: refused by name.
LoadedHead load_head(const std::string& dir, torch::Device device = torch::kCPU,
                     const std::vector<std::int64_t>& unnamed_aux_layer_ids = {});
// The head reads this target: the same hidden size and vocabulary, the layer count and architecture it
// names (where it names them), aux layers inside the target; Error(input) naming head_dir's config.json.
void check_head_fits_target(const HeadConfig& h, const target::TargetConfig& t, const std::string& head_dir);
// Copies a head folder's weights (any format) into an existing head of the same shape, checking
// every tensor's presence and shape, and that its draft vocabulary (d2t, t2d) is the head's.
void load_head_weights(DraftHead& head, const std::string& dir);
// The HeadConfig of a config.json (any format); file names the source in errors. An EAGLE-3 head that names
// no aux layers has none (load_head resolves them).
HeadConfig head_config_from_json(const nlohmann::json& j, const std::string& file, HeadFormat* format = nullptr);
// A field of config.json that differs between two heads, with both values as text.
struct HeadDifference {
  std::string field, checkpoint, run;
};
// The fields a head's config.json records that differ between a stored head (as head_config_from_json reads
// it) and a run's, in a fixed order (sizes, RoPE, vocabularies, aux ids, the variant, TTT); empty: the same.
std::vector<HeadDifference> head_config_differences(const HeadConfig& stored, const HeadConfig& run);
// The HeadConfig of a head folder's config.json (any format), without its weights.
HeadConfig read_head_folder_config(const std::string& dir);

}  // namespace eagle::head
