// Reading a head folder back (see head_io.h): its config.json through the one reader, every tensor
// checked for presence and shape and every one of the file used, a checkpoint's head compared with
// the run's.
#include <filesystem>
#include <set>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "eagle/head/dflash/io.h"
#include "eagle/head/dflash2/io.h"
#include "eagle/head/dspark/io.h"
#include "eagle/head/export/io.h"
#include "eagle/head/export/quant.h"
#include "eagle/head/mtp/io.h"
#include "eagle/model/safetensors.h"
#include "eagle/model/shape_check.h"
#include "eagle/util/error.h"
#include "eagle/util/json_file.h"
#include "eagle/util/log.h"
#include "names.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace eagle::head {

namespace {

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
  };
  if (c.mla())
    expected.insert(expected.end(),
                    {{layer + "self_attn.q_a_proj.weight", {c.q_lora_rank, in}},
                     {layer + "self_attn.q_b_proj.weight", {c.num_attention_heads * c.head_dim, c.q_lora_rank}},
                     {layer + "self_attn.kv_a_proj_with_mqa.weight", {c.kv_lora_rank + c.qk_rope_head_dim, in}},
                     {layer + "self_attn.kv_b_proj.weight",
                      {c.num_attention_heads * (c.qk_nope_head_dim + c.v_head_dim), c.kv_lora_rank}}});
  else
    expected.insert(expected.end(), {{layer + "self_attn.q_proj.weight", {c.num_attention_heads * c.head_dim, in}},
                                     {layer + "self_attn.k_proj.weight", {c.num_key_value_heads * c.head_dim, in}}});
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

// A tensor of a head file that no parameter reads and that is still no module left out: the draft
// vocabulary maps (EAGLE-3), the target's embedding (speculators exports carry it; the head uses
// the target's own) and the SGLang copies of layers >= 1's input norm (hidden_norm, written equal).
bool carried_tensor(const std::string& name, const HeadConfig& c) {
  if (name == "embed_tokens.weight") return true;
  if (c.eagle_version != 3) return false;
  if (name == "d2t" || name == "t2d") return true;
  for (std::int64_t l = 1; l < c.num_layers; ++l)
    if (name == fmt::format("layers.{}.hidden_norm.weight", l)) return true;
  return false;
}

// Copies every parameter of head from the file, where the format names it; checks presence and
// shape, and that every tensor of the file is read: one the config's modules leave out (an extra
// layer, fc_norm, q/k norms, mask_hidden) would be evaluated without it and exported without it.
void copy_parameters(DraftHead& head, const model::SafetensorsFile& file, HeadFormat format, bool quantized) {
  torch::NoGradGuard ng;
  const std::string& weights_path = file.path();
  std::set<std::string> read;
  for (auto& p : head.module().named_parameters()) {
    const auto name = file_tensor_name(file, p.key(), format);
    read.insert(name);
    EAGLE_CHECK(file.contains(name), Error(ErrorKind::input, "a tensor of the head is missing")
                                         .file(weights_path)
                                         .place(fmt::format("tensor {}", name)));
    auto stored = read_head_weight(file, name, quantized);
    if (file.dtype(name) == torch::kFloat8_e4m3fn) read.insert(name + "_scale");  // read with its weight
    // mask_hidden: any shape of A * H_t numbers (vLLM reshapes it; speculators saves [1, 1, A * H_t]).
    if (p.key() == "mask_hidden" && stored.numel() == p.value().numel()) stored = stored.reshape(p.value().sizes());
    model::check_shape(stored.sizes().vec(), p.value().sizes(),
                       Error(ErrorKind::input, "a tensor of the head has the wrong shape")
                           .file(weights_path)
                           .place(fmt::format("tensor {}", name)));
    p.value().copy_(stored.to(p.value().device(), torch::kFloat32));
  }
  std::vector<std::string> unread;
  for (const auto& name : file.names())
    if (!read.count(name) && !carried_tensor(name, head.config())) unread.push_back(name);
  EAGLE_CHECK(unread.empty(),
              Error(ErrorKind::input, "a tensor of the head is not part of the head its config.json describes")
                  .file(weights_path)
                  .place(fmt::format("tensor {}", unread.empty() ? "" : unread.front()))
                  .found(fmt::format("{} such tensor{}: {}", unread.size(), unread.size() == 1 ? "" : "s",
                                     fmt::join(unread, ", ")))
                  .hint("config.json and model.safetensors are of different heads (a layer count, fc_norm, the "
                        "q/k norms or P-EAGLE's mask_hidden left out): fix config.json"));
}

// The config.json of a head folder.
json read_head_config(const std::string& dir, std::string& config_path) {
  config_path = (fs::path(dir) / "config.json").string();
  return util::read_json_object(config_path, "head's config.json",
                                "--checkpoint must name a head folder with config.json and model.safetensors");
}

}  // namespace

std::vector<HeadDifference> head_config_differences(const HeadConfig& checkpoint, const HeadConfig& run) {
  auto fields = [](const HeadConfig& c) {
    auto n = [](double v) { return fmt::format("{}", v); };
    auto i = [](std::int64_t v) { return std::to_string(v); };
    auto b = [](bool v) { return std::string(v ? "true" : "false"); };
    const auto& r = c.rope;
    return std::vector<std::pair<const char*, std::string>>{
        {"eagle_version", i(c.eagle_version)},
        {"hidden_size", i(c.hidden_size)},
        {"intermediate_size", i(c.intermediate_size)},
        {"num_attention_heads", i(c.num_attention_heads)},
        {"num_key_value_heads", i(c.num_key_value_heads)},
        {"head_dim", i(c.head_dim)},
        {"rms_norm_eps", n(c.rms_norm_eps)},
        {"max_position_embeddings", i(c.max_position_embeddings)},
        {"rope_theta", n(r.theta)},
        {"rope_scaling.rope_type", r.type},
        {"rope_scaling.factor", n(r.factor)},
        {"rope_scaling.low_freq_factor", n(r.low_freq_factor)},
        {"rope_scaling.high_freq_factor", n(r.high_freq_factor)},
        {"rope_scaling.original_max_position_embeddings", i(r.original_max_position_embeddings)},
        {"rope_scaling.beta_fast", n(r.beta_fast)},
        {"rope_scaling.beta_slow", n(r.beta_slow)},
        {"rope_scaling.truncate", b(r.truncate)},
        {"rope_scaling.attention_factor", n(r.attention_factor)},
        {"rope_scaling.mscale", n(r.mscale)},
        {"rope_scaling.mscale_all_dim", n(r.mscale_all_dim)},
        {"vocab_size", i(c.vocab_size)},
        {"draft_vocab_size", i(c.draft_vocab_size)},
        {"target_hidden_size", i(c.target_hidden_size)},
        {"eagle_train.target_num_hidden_layers", i(c.target_num_hidden_layers)},
        // Resolved ids (a default written out or left empty resolves to the same): the same shapes
        // with other layers would fuse other features silently.
        {"eagle_aux_hidden_state_layer_ids", fmt::format("[{}]", fmt::join(c.aux_layer_ids, ", "))},
        {"num_hidden_layers", i(c.num_layers)},
        {"model_type (the draft layer)", draft_layer_name(c)},
        {"q_lora_rank", i(c.q_lora_rank)},
        {"kv_lora_rank", i(c.kv_lora_rank)},
        {"qk_nope_head_dim", i(c.qk_nope_head_dim)},
        {"qk_rope_head_dim", i(c.qk_rope_head_dim)},
        {"v_head_dim", i(c.v_head_dim)},
        {"fc_norm", b(c.fc_norm)},
        {"norm_output", b(c.norm_output)},
        {"norm_before_fc", b(c.norm_before_fc)},
        {"eagle_train.parallel_drafting", b(c.parallel_drafting)},
        {"mask_token_id", i(c.mask_token_id)},
        {"ttt_steps", i(c.ttt_steps)},
        {"eagle_train.ttt_loss_decay", n(c.ttt_loss_decay)},
        {"eagle_train.fc_bias", b(c.fc_bias)},
        {"eagle_train.eagle1_feature_weight", n(c.eagle1_feature_weight)},
        {"eagle_train.eagle1_token_weight", n(c.eagle1_token_weight)},
        {"eagle_train.mtp_family", c.mtp_family},
        {"block_size (dflash_block_size)", i(c.dflash_block_size)},
        {"eagle_train.dflash_num_anchors", i(c.dflash_num_anchors)},
        {"eagle_train.dflash_decay_gamma", n(c.dflash_decay_gamma)},
        {"eagle_train.dflash_hard_labels", b(c.dflash_hard_labels)},
        {"markov_rank (dspark_markov_rank)", i(c.dspark_markov_rank)},
        {"enable_confidence_head (dspark_confidence_head)", b(c.dspark_confidence_head)},
        {"sample_from_anchor (dspark_sample_from_anchor)", b(c.dspark_sample_from_anchor)},
        {"dflash_config.conv_kernel_size (dflash2_conv_kernel_size)", i(c.dflash2_conv_kernel_size)},
        {"dflash_config.conv_group_size (dflash2_conv_group_size)", i(c.dflash2_conv_group_size)},
        {"dflash_config.selector_rank (dflash2_selector_rank)", i(c.dflash2_selector_rank)},
        {"dflash_config.selector_top_k (dflash2_selector_top_k)", i(c.dflash2_selector_top_k)}};
  };
  const auto a = fields(checkpoint), b = fields(run);
  std::vector<HeadDifference> out;
  for (std::size_t k = 0; k < a.size(); ++k)
    if (a[k].second != b[k].second) out.push_back({a[k].first, a[k].second, b[k].second});
  return out;
}

LoadedHead load_head(const std::string& dir, torch::Device device,
                     const std::vector<std::int64_t>& unnamed_aux_layer_ids) {
  std::string config_path;
  const json j = read_head_config(dir, config_path);
  LoadedHead out;
  out.config = head_config_from_json(j, config_path, &out.format);
  if (out.config.eagle_version == 3 && !out.config.mtp() && !out.config.dflash() && out.config.aux_layer_ids.empty()) {
    // SpecForge saves no aux ids by default; vLLM and SGLang then fuse their default layers of the target.
    EAGLE_CHECK(!unnamed_aux_layer_ids.empty(),
                Error(ErrorKind::input, "the aux layers are not named")
                    .file(config_path)
                    .place("eagle_aux_hidden_state_layer_ids")
                    .expected("eagle_aux_hidden_state_layer_ids or eagle_config.eagle_aux_hidden_state_layer_ids")
                    .hint("give --model_name_or_path (the engines' default layers of the target are used, as vLLM "
                          "and SGLang serve such a head) or --aux_hidden_state_layer_ids"));
    out.config.aux_layer_ids = unnamed_aux_layer_ids;
    log::info("model", "{}: the head names no aux layers; fusing [{}], as the engines do", config_path,
              fmt::join(unnamed_aux_layer_ids, ", "));
  }
  if (out.format == HeadFormat::mtp) {  // a target folder (the shipped layer, an export) or a checkpoint
    out.head = load_mtp_head(dir, device);
    return out;
  }
  if (out.config.dspark()) {  // vLLM's Qwen3DSparkModel or speculators' layout: no embedding, LM head or d2t
    out.head = load_dspark_head(dir, device);
    return out;
  }
  if (out.config.dflash2()) {  // vLLM's DFlash2DraftModel or speculators' layout: no embedding, LM head or d2t
    out.head = load_dflash2_head(dir, device);
    return out;
  }
  if (out.config.dflash()) {  // vLLM's or speculators' layout: no embedding, LM head or d2t
    out.head = load_dflash_head(dir, device);
    return out;
  }
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

void check_head_fits_target(const HeadConfig& h, const target::TargetConfig& t, const std::string& head_dir) {
  auto mismatch = [&](const char* field, std::int64_t head_value, std::int64_t target_value) {
    return Error(ErrorKind::input, "the head was trained for another target")
        .file(head_dir + "/config.json")
        .place(field)
        .expected(fmt::format("{} (the target's)", target_value))
        .found(std::to_string(head_value));
  };
  EAGLE_CHECK(h.target_hidden_size == t.hidden_size,
              mismatch("target_hidden_size", h.target_hidden_size, t.hidden_size));
  EAGLE_CHECK(h.vocab_size == t.vocab_size, mismatch("vocab_size", h.vocab_size, t.vocab_size));
  // The same sizes do not make the same target: its layer count and architecture are recorded too
  // (0 or empty: a head imported from elsewhere that does not say).
  EAGLE_CHECK(h.target_num_hidden_layers == 0 || h.target_num_hidden_layers == t.num_hidden_layers,
              mismatch("target_num_hidden_layers", h.target_num_hidden_layers, t.num_hidden_layers));
  EAGLE_CHECK(h.target_architecture.empty() || t.architecture.empty() || h.target_architecture == t.architecture,
              Error(ErrorKind::input, "the head was trained for another target")
                  .file(head_dir + "/config.json")
                  .place("target_architecture")
                  .expected(fmt::format("{} (the target's)", t.architecture))
                  .found(h.target_architecture));
  for (auto id : h.aux_layer_ids)
    EAGLE_CHECK(id >= 0 && id <= t.num_hidden_layers,
                mismatch("eagle_aux_hidden_state_layer_ids", id, t.num_hidden_layers));
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
  // One reader, one verdict: the checkpoint's config.json as eval and export read it must describe
  // the run's head in every field that config.json records (an edited one is refused, not ignored).
  const auto differences = head_config_differences(c, head.config());
  EAGLE_CHECK(differences.empty(),
              Error(ErrorKind::input, "the checkpoint holds another head")
                  .file(config_path)
                  .place(differences.empty() ? "" : differences.front().field)
                  .expected(differences.empty() ? "" : differences.front().run + " (the run's)")
                  .found(differences.empty() ? "" : differences.front().checkpoint)
                  .hint(differences.size() > 1 ? fmt::format("{} fields differ; resume with the checkpoint's "
                                                             "options, or restore its config.json",
                                                             differences.size())
                                               : "resume with the checkpoint's options, or restore its config.json"));
  if (format == HeadFormat::mtp) {
    load_mtp_weights(head, dir);
    return;
  }
  auto file = model::SafetensorsFile::open((fs::path(dir) / "model.safetensors").string());
  copy_parameters(head, file, format, quantized);
  // The draft vocabulary is part of the head: its buffers must hold the checkpoint's maps.
  torch::NoGradGuard ng;
  for (auto& b : head.module().named_buffers()) {
    if (b.key() != "d2t" && b.key() != "t2d") continue;
    // A full draft vocabulary is the identity, which the sglang layout (the checkpoints' own) writes as
    // no maps at all (head_tensors): nothing to compare.
    if (!file.contains(b.key()) && head.config().draft_vocab_size == head.config().vocab_size) continue;
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
