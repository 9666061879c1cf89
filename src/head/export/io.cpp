// Head checkpoints and export: config.json per format, tensor names (see head_io.h and docs/export.md);
// reading a head back is head_load.cpp.
#include "eagle/head/export/io.h"
#include "eagle/head/export/quant.h"
#include "eagle/util/fs_sync.h"
#include "names.h"

#include <filesystem>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "eagle/head/dflash/head.h"
#include "eagle/head/dflash/io.h"
#include "eagle/head/dflash2/io.h"
#include "eagle/head/dspark/io.h"
#include "eagle/head/eagle/eagle1_head.h"
#include "eagle/head/eagle/eagle3_head.h"
#include "eagle/head/mtp/head.h"
#include "eagle/head/mtp/io.h"
#include "eagle/head/mtp/layout.h"
#include "eagle/head/mtp/tensors.h"
#include "eagle/model/safetensors.h"
#include "eagle/model/shape_check.h"
#include "eagle/util/error.h"
#include "eagle/util/log.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace eagle::head {

namespace {

constexpr const char* kSpeculatorsVersion = "0.3.0";
// What --format a DFlash draft exports in: the same folder for either engine.
constexpr const char* kDFlashFormats =
    "dflash (vLLM's DFlashDraftModel), sglang (SGLang's, the same folder) or speculators for a DFlash draft (--draft "
    "dflash)";

json rope_scaling_json(const model::RopeConfig& r) {
  if (r.type == "default") return nullptr;
  json s = {{"rope_type", r.type}, {"factor", r.factor}};
  if (r.type == "llama3") {
    s["low_freq_factor"] = r.low_freq_factor;
    s["high_freq_factor"] = r.high_freq_factor;
    s["original_max_position_embeddings"] = r.original_max_position_embeddings;
  }
  if (r.type == "dynamic" && r.original_max_position_embeddings > 0)
    s["original_max_position_embeddings"] = r.original_max_position_embeddings;
  if (r.type == "yarn") {
    s["original_max_position_embeddings"] = r.original_max_position_embeddings;
    s["beta_fast"] = r.beta_fast;
    s["beta_slow"] = r.beta_slow;
    s["truncate"] = r.truncate;
    if (r.attention_factor > 0) s["attention_factor"] = r.attention_factor;
    if (r.mscale != 0) s["mscale"] = r.mscale;
    if (r.mscale_all_dim != 0) s["mscale_all_dim"] = r.mscale_all_dim;
  }
  return s;
}

// The EAGLE 3.1 switches, every one written (vLLM's defaults when absent are false, but speculators'
// norm_before_residual is true when absent: eagle-train writes what it trained).
void variant_fields(const HeadConfig& c, json& j) {
  if (c.eagle_version != 3) return;
  j["fc_norm"] = c.fc_norm;
  j["norm_output"] = c.norm_output;
  j["norm_before_fc"] = c.norm_before_fc;
  j["norm_before_residual"] = false;
}

// The EAGLE-3 fields SGLang's and vLLM's llama/deepseek EAGLE-3 loaders read beside the layer's: the
// switches, the vocabularies, the aux layers (eagle_config's as output-of-layer ids, vLLM's), the
// training record.
json eagle_train_fields(const HeadConfig& c);
void eagle3_engine_fields(const HeadConfig& c, json& j) {
  std::vector<std::int64_t> output_of_layer;
  for (auto id : c.aux_layer_ids) output_of_layer.push_back(id - 1);
  variant_fields(c, j);
  j["draft_vocab_size"] = c.draft_vocab_size;
  j["target_hidden_size"] = c.target_hidden_size;
  j["eagle_config"] = {{"eagle_aux_hidden_state_layer_ids", output_of_layer}, {"use_aux_hidden_state", true}};
  j["eagle_aux_hidden_state_layer_ids"] = c.aux_layer_ids;
  j["eagle_train"] = eagle_train_fields(c);
}

// The fields of the draft layer, shared by all formats (Llama, or Qwen3 with its q/k norm).
json llama_fields(const HeadConfig& c) {
  json j = {{"model_type", c.qk_norm ? "qwen3" : "llama"},
            {"hidden_size", c.hidden_size},
            {"intermediate_size", c.intermediate_size},
            {"num_attention_heads", c.num_attention_heads},
            {"num_key_value_heads", c.num_key_value_heads},
            {"head_dim", c.head_dim},
            {"num_hidden_layers", c.eagle_version == 3 ? c.num_layers : 1},
            {"rms_norm_eps", c.rms_norm_eps},
            {"hidden_act", c.hidden_act},
            {"max_position_embeddings", c.max_position_embeddings},
            {"rope_theta", c.rope.theta},
            {"rope_scaling", rope_scaling_json(c.rope)},
            {"vocab_size", c.vocab_size},
            {"attention_bias", false},
            {"mlp_bias", false},
            {"tie_word_embeddings", false},
            // The target's dtype, not the tensors' (fp32): SGLang's --dtype auto runs the draft in the
            // config's dtype, and a float32 config next to a bf16 target fails there (docs/export.md).
            {"torch_dtype", c.target_dtype},
            {"dtype", c.target_dtype}};
  // transformers' Qwen3Config would derive sliding windows and a head_dim of 128 when absent.
  if (c.qk_norm) j["use_sliding_window"] = false;
  return j;
}

// The MLA layer's config (docs/export.md "deepseek"): the draft layer's DeepSeek config, as vLLM's
// deepseek_eagle3.py reads it (its MoE fields left to the defaults: the layer's MLP is dense). model_type
// deepseek_v2, not deepseek_v3: vLLM 0.32's SpeculativeConfig.hf_config_override, applied to every draft config,
// rewrites a deepseek_v3 config to DeepSeekMTPModel (so eagle3 asks for Eagle3DeepSeekMTPModel and fails);
// DeepseekV2Config holds the same MLA and YaRN fields (checked by loading: scripts/check_vllm_draft.py).
json deepseek_fields(const HeadConfig& c) {
  return {{"architectures", {"Eagle3DeepseekV3ForCausalLM"}},
          {"model_type", "deepseek_v2"},
          {"hidden_size", c.hidden_size},
          {"intermediate_size", c.intermediate_size},
          {"num_attention_heads", c.num_attention_heads},
          {"num_key_value_heads", c.num_attention_heads},
          {"q_lora_rank", c.q_lora_rank},
          {"kv_lora_rank", c.kv_lora_rank},
          {"qk_nope_head_dim", c.qk_nope_head_dim},
          {"qk_rope_head_dim", c.qk_rope_head_dim},
          {"v_head_dim", c.v_head_dim},
          {"num_hidden_layers", 1},
          {"rms_norm_eps", c.rms_norm_eps},
          {"hidden_act", c.hidden_act},
          {"max_position_embeddings", c.max_position_embeddings},
          {"rope_theta", c.rope.theta},
          {"rope_scaling", rope_scaling_json(c.rope)},
          {"rope_interleave", true},
          {"vocab_size", c.vocab_size},
          {"attention_bias", false},
          {"tie_word_embeddings", false},
          {"torch_dtype", c.target_dtype},
          {"dtype", c.target_dtype}};
}

json eagle_train_fields(const HeadConfig& c) {
  return {{"eagle_version", c.eagle_version},
          {"target_name_or_path", c.target_name_or_path},
          {"target_dtype", c.target_dtype},
          {"target_architecture", c.target_architecture},
          {"target_num_hidden_layers", c.target_num_hidden_layers},
          {"ttt_steps", c.ttt_steps},
          {"ttt_loss_decay", c.ttt_loss_decay},
          {"fc_bias", c.fc_bias},
          {"eagle1_feature_weight", c.eagle1_feature_weight},
          {"eagle1_token_weight", c.eagle1_token_weight},
          {"parallel_drafting", c.parallel_drafting}};
}

}  // namespace

std::string format_tensor_name(const std::string& name, HeadFormat format) {
  if (format == HeadFormat::speculators && name.rfind("midlayer.", 0) == 0) return "layers.0." + name.substr(9);
  const std::string extra = "extra_layers.";
  if (name.rfind(extra, 0) == 0) {
    const auto dot = name.find('.', extra.size());
    const auto index = std::stoll(name.substr(extra.size(), dot - extra.size()));
    return fmt::format("layers.{}{}", index + 1, name.substr(dot));
  }
  return name;
}

std::string draft_layer_name(const HeadConfig& c) { return c.mla() ? "deepseek" : c.qk_norm ? "qwen3" : "llama"; }

std::shared_ptr<DraftHead> make_head(const HeadConfig& cfg, const DraftVocab& vocab) {
  if (cfg.mtp()) return std::make_shared<MtpHead>(cfg);
  if (cfg.dspark()) return std::make_shared<DSparkHead>(cfg);
  if (cfg.dflash2()) return std::make_shared<DFlash2Head>(cfg);
  if (cfg.dflash()) return std::make_shared<DFlashHead>(cfg);  // the full vocabulary, always
  if (cfg.eagle_version == 1) return std::make_shared<Eagle1Head>(cfg);
  return std::make_shared<Eagle3Head>(cfg, vocab);
}

HeadFormat checkpoint_format(const HeadConfig& cfg) {
  if (cfg.mtp()) return HeadFormat::mtp;
  if (cfg.dspark()) return HeadFormat::dspark;
  if (cfg.dflash()) return HeadFormat::dflash;
  if (cfg.eagle_version == 1) return HeadFormat::vllm_eagle1;
  // What SGLang does not serve is kept in the speculators layout, which vLLM reads.
  return !cfg.mla() && (cfg.qk_norm || cfg.norm_before_fc || cfg.parallel_drafting) ? HeadFormat::speculators
                                                                                    : HeadFormat::sglang;
}

nlohmann::json head_variant_json(const HeadConfig& c) {
  json j = {{"eagle_version", c.eagle_version}, {"ttt_steps", c.steps()}, {"draft_vocab_size", c.draft_vocab_size}};
  if (c.mtp()) return {{"draft", "mtp"}, {"mtp_family", c.mtp_family}, {"ttt_steps", c.steps()}};
  if (c.dflash()) {
    json d = {{"draft", draft_spec(c).name},
              {"num_hidden_layers", c.num_layers},
              {"block_size", c.dflash_block_size},
              {"ttt_steps", c.steps()},
              {"target_layer_ids", dflash_target_layer_ids(c)},
              {"mask_token_id", c.mask_token_id}};
    if (c.dspark()) {
      d["markov_rank"] = c.dspark_markov_rank;
      d["sample_from_anchor"] = c.dspark_sample_from_anchor;
    }
    if (c.dflash2()) {
      d["conv_kernel_size"] = c.dflash2_conv_kernel_size;
      d["selector_top_k"] = c.dflash2_selector_top_k;
    }
    return d;
  }
  if (c.eagle_version != 3) return j;
  j["num_hidden_layers"] = c.num_layers;
  j["draft_layer"] = draft_layer_name(c);
  variant_fields(c, j);
  j["parallel_drafting"] = c.parallel_drafting;
  if (c.parallel_drafting) j["mask_token_id"] = c.mask_token_id;
  return j;
}

nlohmann::json head_config_json(const HeadConfig& c, HeadFormat format) {
  EAGLE_CHECK((format == HeadFormat::mtp) == c.mtp(),
              Error(ErrorKind::usage, "the export format does not fit the head")
                  .place("--format")
                  .expected(c.mtp()      ? "mtp for an MTP head (--draft mtp)"
                            : c.dflash() ? kDFlashFormats
                                         : "sglang, speculators or vllm-eagle1")
                  .found(format_name(format)));
  if (format == HeadFormat::mtp) return mtp_config_json(c);
  // A DSpark draft: vLLM's Qwen3DSparkModel folder, or speculators' layout of it.
  EAGLE_CHECK(
      c.dspark() ? format == HeadFormat::dspark || format == HeadFormat::speculators : format != HeadFormat::dspark,
      Error(ErrorKind::usage, "the export format does not fit the head")
          .place("--format")
          .expected(c.dspark()   ? "dspark or speculators for a DSpark draft (--draft dspark)"
                    : c.dflash() ? kDFlashFormats
                                 : "sglang, speculators or vllm-eagle1")
          .found(format_name(format)));
  if (c.dspark()) return format == HeadFormat::speculators ? dspark_speculators_config_json(c) : dspark_config_json(c);
  // A DFlash2 draft: vLLM's DFlash2DraftModel folder (served with method dflash), or speculators' layout of it.
  if (c.dflash2()) {
    EAGLE_CHECK(format == HeadFormat::dflash || format == HeadFormat::speculators,
                Error(ErrorKind::usage, "the export format does not fit the head")
                    .place("--format")
                    .expected("dflash or speculators for a DFlash2 draft (--draft dflash2)")
                    .found(format_name(format)));
    return format == HeadFormat::speculators ? dflash2_speculators_config_json(c) : dflash2_config_json(c);
  }
  // A DFlash draft: vLLM's DFlashDraftModel folder, which SGLang's DFlashDraftModel reads too, or speculators'.
  if (c.dflash() && format == HeadFormat::speculators) return dflash_speculators_config_json(c);
  EAGLE_CHECK(c.dflash() ? format == HeadFormat::dflash || format == HeadFormat::sglang : format != HeadFormat::dflash,
              Error(ErrorKind::usage, "the export format does not fit the head")
                  .place("--format")
                  .expected(c.dflash() ? kDFlashFormats : "sglang, speculators or vllm-eagle1")
                  .found(format_name(format)));
  if (c.dflash())
    return dflash_config_json(c, format == HeadFormat::sglang ? DFlashEngine::sglang : DFlashEngine::vllm);
  const bool eagle3_format = format != HeadFormat::vllm_eagle1;
  EAGLE_CHECK(eagle3_format == (c.eagle_version == 3),
              Error(ErrorKind::usage, "the export format does not fit the head's EAGLE version")
                  .place("--format")
                  .expected(c.eagle_version == 3 ? "sglang or speculators for an EAGLE-3 head"
                                                 : "vllm-eagle1 for an EAGLE-1 head")
                  .found(format_name(format)));
  if (format == HeadFormat::vllm_eagle1) {
    EAGLE_CHECK(!c.fc_bias, Error(ErrorKind::usage,
                                  "vLLM's EagleLlamaForCausalLM builds fc without a bias and "
                                  "would silently drop fc.bias")
                                .place("fc.bias")
                                .expected("an EAGLE-1 head trained without an fc bias")
                                .found("a biased fc")
                                .hint("train the EAGLE-1 head with the default unbiased fc"));
    json j = llama_fields(c);
    j["architectures"] = {"EagleLlamaForCausalLM"};
    j["eagle_train"] = eagle_train_fields(c);
    return j;
  }
  // The MLA layer: vLLM's Eagle3DeepseekV3ForCausalLM, in the EAGLE layout (midlayer.*, a top-level config).
  EAGLE_CHECK(!c.mla() || format == HeadFormat::sglang,
              Error(ErrorKind::usage, "the MLA draft layer exports in the EAGLE layout only")
                  .place("--format")
                  .expected("sglang (Eagle3DeepseekV3ForCausalLM, which vLLM's deepseek_eagle3.py loads)")
                  .found(format_name(format))
                  .hint("speculators describes a Llama or Qwen3 draft layer (transformer_layer_config)"));
  if (c.mla()) {
    json j = deepseek_fields(c);
    eagle3_engine_fields(c, j);
    return j;
  }
  if (format == HeadFormat::sglang) {
    EAGLE_CHECK(!c.parallel_drafting,
                Error(ErrorKind::usage, "SGLang does not serve P-EAGLE (parallel drafting)")
                    .place("parallel_drafting")
                    .expected("a sequential EAGLE-3 head for --format sglang")
                    .found("a P-EAGLE head")
                    .hint("export --format speculators: vLLM serves it as speculators_model_type peagle"));
    // SGLang serves neither the Qwen3-style layer nor norm_before_fc (it drops input_norm silently).
    EAGLE_CHECK(!c.qk_norm && !c.norm_before_fc,
                Error(ErrorKind::usage, "SGLang does not serve this head")
                    .place(c.qk_norm ? "draft_layer" : "norm_before_fc")
                    .expected("a Llama-style layer without norm_before_fc for --format sglang")
                    .found(c.qk_norm ? "the Qwen3-style layer" : "norm_before_fc")
                    .hint("export --format speculators: vLLM serves it (Eagle3Qwen3ForCausalLM / input_norm)"));
    json j = llama_fields(c);
    j["architectures"] = {"LlamaForCausalLMEagle3"};
    eagle3_engine_fields(c, j);
    return j;
  }
  json layer = llama_fields(c);
  layer["architectures"] = {c.qk_norm ? "Qwen3ForCausalLM" : "LlamaForCausalLM"};
  // vLLM's peagle updater forwards neither fc_norm nor norm_output; the draft config is built from
  // transformer_layer_config, so fc_norm is written there too (EAGLE-variants.md §4).
  if (c.parallel_drafting) layer["fc_norm"] = c.fc_norm;
  json variant;
  variant_fields(c, variant);
  const char* algorithm = c.parallel_drafting ? "peagle" : "eagle3";
  json out = {
      {"architectures", {c.parallel_drafting ? "PEagleSpeculator" : "Eagle3Speculator"}},
      {"speculators_model_type", algorithm},
      {"transformer_layer_config", layer},
      {"draft_vocab_size", c.draft_vocab_size},
      {"target_hidden_size", c.target_hidden_size},
      {"norm_before_residual", false},
      {"eagle_aux_hidden_state_layer_ids", c.aux_layer_ids},
      {"speculators_config",
       {{"algorithm", algorithm},
        {"proposal_methods",
         {{{"proposal_type", "greedy"},
           {"speculative_tokens", c.ttt_steps},
           {"verifier_accept_k", 1},
           {"accept_tolerance", 0.0}}}},
        {"default_proposal_method", "greedy"},
        {"verifier",
         {{"name_or_path", c.target_name_or_path},
          {"architectures", c.target_architecture.empty() ? json::array() : json::array({c.target_architecture})}}}}},
      {"speculators_version", kSpeculatorsVersion},
      // The target's dtype, as in the other formats (docs/export.md): engines run the draft in it.
      {"torch_dtype", c.target_dtype},
      {"dtype", c.target_dtype},
      {"eagle_train", eagle_train_fields(c)}};
  out.update(variant);
  if (c.parallel_drafting) out["mask_token_id"] = c.mask_token_id;
  return out;
}

std::map<std::string, torch::Tensor> head_tensors(DraftHead& head, HeadFormat format) {
  head_config_json(head.config(), format);  // refuses a format that does not fit
  std::map<std::string, torch::Tensor> out;
  if (format == HeadFormat::mtp) {
    // An MTP head's names are its family's, its experts fused as the head holds them, its frozen correction
    // bias beside the parameters (mtp_tensors.h); its identity vocabulary maps have no native name (vLLM's
    // MiMo loader raises on unknown names).
    for (const auto& t : mtp_tensors(head, mtp_layout(head.config()), ExpertNames::fused))
      out[t.name] = t.value.detach().to(torch::kCPU, torch::kFloat32).contiguous();
    return out;
  }
  for (const auto& p : head.module().named_parameters())
    out[format_tensor_name(p.key(), format)] = p.value().detach().to(torch::kCPU, torch::kFloat32).contiguous();
  // The draft-vocabulary maps are buffers of the EAGLE-3 head (draft_ids, derived, is not written). A full draft
  // vocabulary writes none in the sglang layout: vLLM's llama_eagle3.py and deepseek_eagle3.py make no
  // draft_id_to_target_id when draft_vocab_size equals the target's and then refuse a d2t tensor by name;
  // SGLang reads a folder without d2t as the full vocabulary; the importer reads it as the identity.
  const bool identity_vocab = head.config().draft_vocab_size == head.config().vocab_size;
  for (const auto& b : head.module().named_buffers())
    if ((b.key() == "d2t" || b.key() == "t2d") && !(identity_vocab && format == HeadFormat::sglang))
      out[b.key()] = b.value().to(torch::kCPU).contiguous();
  // SGLang after PR #24663 normalises the input of layers >= 1 with hidden_norm, vLLM with
  // input_layernorm (EAGLE-variants.md §2): both written, equal, so either engine serves the head.
  // (A DFlash draft's sglang folder is vLLM's: its layers have no hidden_norm.)
  if (format == HeadFormat::sglang && !head.config().dflash())
    for (std::int64_t l = 1; l < head.config().num_layers; ++l)
      out[fmt::format("layers.{}.hidden_norm.weight", l)] = out.at(fmt::format("layers.{}.input_layernorm.weight", l));
  return out;
}

void write_head_files(DraftHead& head, HeadFormat format, const std::string& dir,
                      const torch::Tensor& target_embedding, const Fp8Settings* fp8) {
  auto tensors = head_tensors(head, format);
  json config = head_config_json(head.config(), format);
  if (fp8) config["quantization_config"] = quantize_head_tensors(tensors, *fp8);
  if (target_embedding.defined()) {
    const auto& c = head.config();
    model::check_shape(
        target_embedding, {c.vocab_size, c.hidden_size},
        Error(ErrorKind::input, "the target's embedding does not fit the head").place("embed_tokens.weight"));
    tensors["embed_tokens.weight"] = target_embedding.detach().to(torch::kCPU).contiguous();
  }
  util::write_file_atomic(fs::path(dir) / "config.json", config.dump(2) + "\n");
  model::save_safetensors((fs::path(dir) / "model.safetensors").string(), tensors, {{"format", "pt"}});
}

void export_head(DraftHead& head, HeadFormat format, const std::string& dir, const torch::Tensor& target_embedding,
                 const Fp8Settings* fp8) {
  const fs::path target(dir);
  EAGLE_CHECK(!fs::exists(target), Error(ErrorKind::output, "the output folder exists; nothing is overwritten")
                                       .file(dir)
                                       .hint("choose a new --output folder"));
  head_config_json(head.config(), format);  // refuse before creating anything
  EAGLE_CHECK(!fp8 || !head.config().mla(),
              Error(ErrorKind::usage,
                    "FP8 exports of the MLA draft layer are not written (its latent projections "
                    "are not among the quantized linear weights; not checked)")
                  .place("--quantize")
                  .hint("export the MLA head unquantized"));
  EAGLE_CHECK(!fp8 || format == HeadFormat::sglang,
              Error(ErrorKind::usage, "FP8 exports are written in the sglang layout (LlamaForCausalLMEagle3, which vLLM "
                                      "loads with its compressed-tensors FP8 path); other layouts are not checked")
                  .place("--quantize")
                  .found(format_name(format))
                  .hint("pass --format sglang"));
  EAGLE_CHECK(format != HeadFormat::speculators || target_embedding.defined() || head.config().dflash(),
              Error(ErrorKind::usage, "a speculators export carries the target's embedding (embed_tokens.weight)")
                  .place("--model_name_or_path")
                  .hint("speculators leaves embed_tokens at zero when it is missing; name the target"));
  if (format == HeadFormat::speculators && head.config().target_name_or_path.empty())
    log::warn("export", "the head does not name its target: speculators_config.verifier.name_or_path is empty");
  // vLLM collects a target's aux states by membership (`if idx in aux_hidden_state_layers`), so a repeated id
  // gives fewer states than fc reads, and the served head fails at its first draft (a target of few layers).
  const auto& ids = head.config().aux_layer_ids;
  if (head.config().eagle_version == 3 && !head.config().dflash() && !head.config().mtp() &&
      std::set<std::int64_t>(ids.begin(), ids.end()).size() != ids.size())
    log::warn("export", "aux_hidden_state_layer_ids {} repeat a layer: vLLM collects each layer once and cannot serve "
              "this head (fc reads {} states); train with distinct ids (--aux_hidden_state_layer_ids)",
              fmt::join(ids, ","), ids.size());
  const auto tmp = util::temporary_name(target);
  std::error_code ec;
  fs::create_directories(tmp, ec);
  EAGLE_CHECK(!ec, Error(ErrorKind::output, "could not create the folder").file(tmp.string()).found(ec.message()));
  try {
    write_head_files(head, format, tmp.string(), target_embedding, fp8);
    fs::rename(tmp, target);
  } catch (...) {
    fs::remove_all(tmp, ec);
    throw;
  }
  log::info("export", "wrote {} head{} to {}", format_name(format), fp8 ? " (FP8 linear weights)" : "", dir);
}
}  // namespace eagle::head
