// Head checkpoints, export and import (see head_io.h and docs/export.md).
#include "eagle/head/head_io.h"
#include "eagle/head/head_quant.h"
#include "eagle/util/fs_sync.h"

#include <filesystem>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "eagle/head/eagle1_head.h"
#include "eagle/head/eagle3_head.h"
#include "eagle/model/safetensors.h"
#include "eagle/model/shape_check.h"
#include "eagle/util/error.h"
#include "eagle/util/json_file.h"
#include "eagle/util/log.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace eagle::head {

namespace {

constexpr const char* kSpeculatorsVersion = "0.3.0";

// The head's own parameter name under a format: EAGLE-3 modules are registered as SGLang names
// (midlayer.*), EAGLE-1 as vLLM names (layers.0.*); speculators says layers.0. for midlayer. A
// multi-layer head's layers 1..n-1 (extra_layers.{l-1}.*) are layers.{l}.* in every format.
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

std::string file_tensor_name(const model::SafetensorsFile& file, const std::string& key, HeadFormat format) {
  const auto name = format_tensor_name(key, format);
  // An SGLang head may use the vLLM spelling layers.0.
  const bool vllm = format == HeadFormat::sglang && name.rfind("midlayer.", 0) == 0 && !file.contains(name);
  return vllm && file.contains("layers.0." + name.substr(9)) ? "layers.0." + name.substr(9) : name;
}

// The config's sizes against the file's shapes before the head is built (intermediate_size 1e9 tried 256 GB).
void check_head_sizes(const HeadConfig& c, const model::SafetensorsFile& file, HeadFormat format) {
  const std::string layer = c.eagle_version == 3 ? "midlayer." : "layers.0.";
  const std::int64_t in = c.eagle_version == 3 ? 2 * c.hidden_size : c.hidden_size;
  std::vector<std::pair<std::string, std::vector<std::int64_t>>> expected = {
      {layer + "mlp.gate_proj.weight", {c.intermediate_size, c.hidden_size}},
      {layer + "mlp.down_proj.weight", {c.hidden_size, c.intermediate_size}},
      {layer + "self_attn.q_proj.weight", {c.num_attention_heads * c.head_dim, in}},
      {layer + "self_attn.k_proj.weight", {c.num_key_value_heads * c.head_dim, in}},
  };
  if (c.eagle_version == 3)
    expected.insert(expected.end(),
                    {{"lm_head.weight", {c.draft_vocab_size, c.hidden_size}},
                     {"fc.weight", {c.hidden_size, std::ssize(c.aux_layer_ids) * c.target_hidden_size}}});
  for (const auto& [key, shape] : expected) {
    const auto name = file_tensor_name(file, key, format);
    EAGLE_CHECK(file.contains(name), Error(ErrorKind::input, "a tensor of the head is missing")
                                         .file(file.path())
                                         .place(fmt::format("tensor {}", name)));
    model::check_shape(file.shape(name), shape,
                       Error(ErrorKind::input, "the head's config.json does not match its weights")
                           .file(file.path())
                           .place(fmt::format("tensor {}", name))
                           .hint("config.json and model.safetensors are of different heads"));
  }
}

// Copies every parameter of head from the file, where the format names it; checks presence and shape.
void copy_parameters(DraftHead& head, const model::SafetensorsFile& file, HeadFormat format, bool quantized) {
  torch::NoGradGuard ng;
  const std::string& weights_path = file.path();
  for (auto& p : head.module().named_parameters()) {
    const auto name = file_tensor_name(file, p.key(), format);
    EAGLE_CHECK(file.contains(name), Error(ErrorKind::input, "a tensor of the head is missing")
                                         .file(weights_path)
                                         .place(fmt::format("tensor {}", name)));
    auto stored = read_head_weight(file, name, quantized);
    // mask_hidden: any shape of A * H_t numbers (vLLM reshapes it; speculators saves [1, 1, A * H_t]).
    if (p.key() == "mask_hidden" && stored.numel() == p.value().numel()) stored = stored.reshape(p.value().sizes());
    model::check_shape(stored.sizes().vec(), p.value().sizes(),
                       Error(ErrorKind::input, "a tensor of the head has the wrong shape")
                           .file(weights_path)
                           .place(fmt::format("tensor {}", name)));
    p.value().copy_(stored.to(p.value().device(), torch::kFloat32));
  }
}

// The config.json of a head folder.
json read_head_config(const std::string& dir, std::string& config_path) {
  config_path = (fs::path(dir) / "config.json").string();
  return util::read_json_object(config_path, "head's config.json",
                                "--checkpoint must name a head folder with config.json and model.safetensors");
}

}  // namespace

std::string format_name(HeadFormat f) {
  switch (f) {
    case HeadFormat::sglang:
      return "sglang";
    case HeadFormat::speculators:
      return "speculators";
    case HeadFormat::vllm_eagle1:
      return "vllm-eagle1";
  }
  return "?";
}

std::shared_ptr<DraftHead> make_head(const HeadConfig& cfg, const DraftVocab& vocab) {
  if (cfg.eagle_version == 1) return std::make_shared<Eagle1Head>(cfg);
  return std::make_shared<Eagle3Head>(cfg, vocab);
}

HeadFormat checkpoint_format(const HeadConfig& cfg) {
  if (cfg.eagle_version == 1) return HeadFormat::vllm_eagle1;
  // What SGLang does not serve is kept in the speculators layout, which vLLM reads.
  return cfg.qk_norm || cfg.norm_before_fc || cfg.parallel_drafting ? HeadFormat::speculators : HeadFormat::sglang;
}

nlohmann::json head_variant_json(const HeadConfig& c) {
  json j = {{"eagle_version", c.eagle_version}, {"ttt_steps", c.steps()}, {"draft_vocab_size", c.draft_vocab_size}};
  if (c.eagle_version != 3) return j;
  j["num_hidden_layers"] = c.num_layers;
  j["draft_layer"] = c.qk_norm ? "qwen3" : "llama";
  variant_fields(c, j);
  j["parallel_drafting"] = c.parallel_drafting;
  if (c.parallel_drafting) j["mask_token_id"] = c.mask_token_id;
  return j;
}

nlohmann::json head_config_json(const HeadConfig& c, HeadFormat format) {
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
  std::vector<std::int64_t> output_of_layer;
  for (auto id : c.aux_layer_ids) output_of_layer.push_back(id - 1);
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
    variant_fields(c, j);
    j["draft_vocab_size"] = c.draft_vocab_size;
    j["target_hidden_size"] = c.target_hidden_size;
    j["eagle_config"] = {{"eagle_aux_hidden_state_layer_ids", output_of_layer}, {"use_aux_hidden_state", true}};
    j["eagle_aux_hidden_state_layer_ids"] = c.aux_layer_ids;
    j["eagle_train"] = eagle_train_fields(c);
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
  for (const auto& p : head.module().named_parameters())
    out[format_tensor_name(p.key(), format)] = p.value().detach().to(torch::kCPU, torch::kFloat32).contiguous();
  // The draft-vocabulary maps are buffers of the EAGLE-3 head (draft_ids, derived, is not written).
  for (const auto& b : head.module().named_buffers())
    if (b.key() == "d2t" || b.key() == "t2d") out[b.key()] = b.value().to(torch::kCPU).contiguous();
  // SGLang after PR #24663 normalises the input of layers >= 1 with hidden_norm, vLLM with
  // input_layernorm (EAGLE-variants.md §2): both written, equal, so either engine serves the head.
  if (format == HeadFormat::sglang)
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
  EAGLE_CHECK(!fp8 || format == HeadFormat::sglang,
              Error(ErrorKind::usage, "FP8 exports are written in the sglang layout (LlamaForCausalLMEagle3, which vLLM "
                                      "loads with its compressed-tensors FP8 path); other layouts are not checked")
                  .place("--quantize")
                  .found(format_name(format))
                  .hint("pass --format sglang"));
  EAGLE_CHECK(format != HeadFormat::speculators || target_embedding.defined(),
              Error(ErrorKind::usage, "a speculators export carries the target's embedding (embed_tokens.weight)")
                  .place("--model_name_or_path")
                  .hint("speculators leaves embed_tokens at zero when it is missing; name the target"));
  if (format == HeadFormat::speculators && head.config().target_name_or_path.empty())
    log::warn("export", "the head does not name its target: speculators_config.verifier.name_or_path is empty");
  const auto tmp = util::temporary_name(target);
  std::error_code ec;
  fs::create_directories(tmp, ec);
  EAGLE_CHECK(!ec, Error(ErrorKind::output, "could not create the folder").file(tmp.string()).found(ec.message()));
  try {
    write_head_files(head, format, tmp.string(), target_embedding);
    fs::rename(tmp, target);
  } catch (...) {
    fs::remove_all(tmp, ec);
    throw;
  }
  log::info("export", "wrote {} head{} to {}", format_name(format), fp8 ? " (FP8 linear weights)" : "", dir);
}

LoadedHead load_head(const std::string& dir, torch::Device device) {
  std::string config_path;
  const json j = read_head_config(dir, config_path);
  LoadedHead out;
  out.config = head_config_from_json(j, config_path, &out.format);
  const bool quantized = check_quantization_config(j, config_path);
  const auto weights_path = (fs::path(dir) / "model.safetensors").string();
  auto file = model::SafetensorsFile::open(weights_path);
  auto& c = out.config;
  check_head_sizes(c, file, out.format);
  DraftVocab vocab = DraftVocab::identity(c.vocab_size);
  if (c.eagle_version == 3) {
    vocab =
        file.contains("d2t") ? DraftVocab::from_d2t(file.get("d2t"), c.vocab_size) : DraftVocab::identity(c.vocab_size);
    EAGLE_CHECK(vocab.size() == c.draft_vocab_size, Error(ErrorKind::input, "d2t does not match draft_vocab_size")
                                                        .file(weights_path)
                                                        .place("tensor d2t")
                                                        .expected(fmt::format("{} entries", c.draft_vocab_size))
                                                        .found(fmt::format("{}", vocab.size())));
  } else if (file.contains("fc.bias")) {
    c.fc_bias = true;
  }
  out.head = make_head(c, vocab);
  copy_parameters(*out.head, file, out.format, quantized);
  out.head->module().to(device);
  return out;
}

HeadConfig read_head_folder_config(const std::string& dir) {
  std::string config_path;
  const json j = read_head_config(dir, config_path);
  return head_config_from_json(j, config_path);
}

void load_head_weights(DraftHead& head, const std::string& dir) {
  std::string config_path;
  HeadFormat format;
  const json j = read_head_config(dir, config_path);
  const HeadConfig c = head_config_from_json(j, config_path, &format);
  const bool quantized = check_quantization_config(j, config_path);
  auto mismatch = [&](const char* field, const std::string& expected, const std::string& found) {
    return Error(ErrorKind::input, "the checkpoint holds another head")
        .file(config_path)
        .place(field)
        .expected(expected)
        .found(found);
  };
  const HeadConfig& h = head.config();
  EAGLE_CHECK(c.eagle_version == h.eagle_version,
              mismatch("eagle_version", std::to_string(h.eagle_version), std::to_string(c.eagle_version)));
  EAGLE_CHECK(c.draft_vocab_size == h.draft_vocab_size,
              mismatch("draft_vocab_size", std::to_string(h.draft_vocab_size), std::to_string(c.draft_vocab_size)));
  // Resolved ids (a default written out or left empty resolves to the same): the same shapes with
  // other layers would fuse other features silently.
  EAGLE_CHECK(c.aux_layer_ids == h.aux_layer_ids,
              mismatch("aux_hidden_state_layer_ids", fmt::format("[{}]", fmt::join(h.aux_layer_ids, ", ")),
                       fmt::format("[{}]", fmt::join(c.aux_layer_ids, ", "))));
  auto file = model::SafetensorsFile::open((fs::path(dir) / "model.safetensors").string());
  copy_parameters(head, file, format, quantized);
  // The draft vocabulary is part of the head: its buffers must hold the checkpoint's maps.
  torch::NoGradGuard ng;
  for (auto& b : head.module().named_buffers()) {
    if (b.key() != "d2t" && b.key() != "t2d") continue;
    EAGLE_CHECK(file.contains(b.key()), Error(ErrorKind::input, "a tensor of the head is missing")
                                            .file(file.path())
                                            .place(fmt::format("tensor {}", b.key())));
    auto stored = file.get(b.key()).to(b.value().device(), b.value().scalar_type());
    model::check_shape(stored.sizes().vec(), b.value().sizes(),
                       Error(ErrorKind::input, "a tensor of the head has the wrong shape")
                           .file(file.path())
                           .place(fmt::format("tensor {}", b.key())));
    EAGLE_CHECK(torch::equal(stored, b.value()),
                Error(ErrorKind::input, "the checkpoint's draft vocabulary differs from the one built from the data")
                    .file(file.path())
                    .place(fmt::format("tensor {}", b.key()))
                    .hint("resume with the data the run started with"));
  }
}

}  // namespace eagle::head
