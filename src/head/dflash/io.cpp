// The DFlash draft's config.json and weights as vLLM 0.32 and SGLang load them, written and read
// back (see dflash_io.h).
#include "eagle/head/dflash/io.h"

#include <algorithm>
#include <filesystem>
#include <set>

#include <fmt/format.h>

#include "eagle/model/safetensors.h"
#include "eagle/model/shape_check.h"
#include "eagle/util/error.h"
#include "eagle/util/fs_sync.h"
#include "eagle/util/json_file.h"

namespace eagle::head {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

Error unsupported(const std::string& file, const std::string& key, const std::string& what) {
  return Error(ErrorKind::input, "the DFlash config asks for what this head does not compute")
      .file(file)
      .place(key)
      .found(what)
      .hint("eagle-train trains and reads non-causal full-attention DFlash drafts with default RoPE");
}

// What SGLang's DFlashDraftModel (python/sglang/srt/models/dflash.py) and its config parser
// (python/sglang/srt/speculative/dflash_utils.py, parse_dflash_draft_config) would build or refuse
// otherwise than this head computes.
void check_sglang(const HeadConfig& c) {
  EAGLE_CHECK(c.target_hidden_size == c.hidden_size,
              Error(ErrorKind::usage, "SGLang builds the DFlash fc over the target layers at the draft's own width")
                  .place("target_hidden_size")
                  .expected(fmt::format("hidden_size ({})", c.hidden_size))
                  .found(std::to_string(c.target_hidden_size))
                  .hint("export --format dflash: vLLM reads target_hidden_size"));
  const auto ids = dflash_target_layer_ids(c);
  const auto deepest = ids.empty() ? 0 : *std::max_element(ids.begin(), ids.end());
  EAGLE_CHECK(
      c.target_num_hidden_layers > deepest,
      Error(ErrorKind::usage,
            "SGLang checks dflash_config.target_layer_ids against num_target_layers (without "
            "it, against the draft's own layer count)")
          .place("num_target_layers")
          .expected(fmt::format("more than {} target layers", deepest))
          .found(std::to_string(c.target_num_hidden_layers))
          .hint("a head trained here records it; an imported draft needs num_target_layers in its config.json"));
  EAGLE_CHECK(c.hidden_act == "silu",
              Error(ErrorKind::usage, "SGLang's DFlash MLP is SiLU only").place("hidden_act").found(c.hidden_act));
}

}  // namespace

json dflash_config_json(const HeadConfig& c, DFlashEngine engine) {
  EAGLE_CHECK(c.dflash(), Error(ErrorKind::usage, "only a DFlash head exports as dflash").place("--format"));
  EAGLE_CHECK(c.rope.type == "default",
              Error(ErrorKind::usage, "the DFlash export writes default RoPE only")
                  .place("rope")
                  .found(c.rope.type)
                  .hint("vLLM reads rope_theta and rope_scaling from the draft config; scaled RoPE is not written yet"));
  if (engine == DFlashEngine::sglang) check_sglang(c);
  const auto l = c.num_layers;
  return {{"architectures", {"DFlashDraftModel"}},
          {"model_type", "qwen3"},
          {"vocab_size", c.vocab_size},
          {"hidden_size", c.hidden_size},
          {"intermediate_size", c.intermediate_size},
          {"num_hidden_layers", l},
          {"num_attention_heads", c.num_attention_heads},
          {"num_key_value_heads", c.num_key_value_heads},
          {"head_dim", c.head_dim},
          {"hidden_act", c.hidden_act},
          {"rms_norm_eps", c.rms_norm_eps},
          {"rope_theta", c.rope.theta},
          {"rope_scaling", nullptr},
          {"max_position_embeddings", c.max_position_embeddings},
          {"attention_bias", c.attention_bias},
          {"tie_word_embeddings", false},
          {"torch_dtype", c.target_dtype},
          {"layer_types", std::vector<std::string>(static_cast<std::size_t>(l), "full_attention")},
          {"block_size", c.dflash_block_size},  // vLLM: informational; SGLang: the default block
          {"num_target_layers", c.target_num_hidden_layers},
          {"target_hidden_size", c.target_hidden_size},
          {"dflash_config", {{"mask_token_id", c.mask_token_id}, {"target_layer_ids", dflash_target_layer_ids(c)}}},
          {"eagle_train",
           {{"draft", "dflash"},
            {"dflash_num_anchors", c.dflash_num_anchors},
            {"dflash_decay_gamma", c.dflash_decay_gamma},
            {"dflash_hard_labels", c.dflash_hard_labels},
            {"target", c.target_name_or_path},
            {"target_architecture", c.target_architecture}}}};
}

bool is_dflash_config(const json& j) {
  if (j.contains("dflash_config")) return true;
  const auto it = j.find("architectures");
  return it != j.end() && it->is_array() && !it->empty() && (*it)[0].is_string() &&
         (*it)[0].get<std::string>() == "DFlashDraftModel";
}

HeadConfig dflash_config_from_json(const json& j, const std::string& file) {
  using util::json_field;
  using util::json_field_or;
  const auto d = json_field<json>(j, "dflash_config", file);
  if (json_field_or<bool>(j, "is_causal", false, file) || json_field_or<bool>(d, "causal", false, file))
    throw unsupported(file, "is_causal / dflash_config.causal", "causal layers");
  if (json_field_or<bool>(d, "use_swa", false, file)) throw unsupported(file, "dflash_config.use_swa", "true");
  if (!json_field_or<bool>(d, "use_aux_hidden_state", true, file))
    throw unsupported(file, "dflash_config.use_aux_hidden_state", "false");
  if (d.contains("attention_value_scale")) throw unsupported(file, "dflash_config.attention_value_scale", "a scale");
  // DSpark (vLLM's qwen3_dspark.py) shifts every slot to the next token and adds a Markov head.
  if (json_field_or<bool>(d, "sample_from_anchor", false, file) ||
      json_field_or<bool>(j, "sample_from_anchor", false, file))
    throw unsupported(file, "sample_from_anchor", "true (a DSpark draft; not implemented, docs/heads.md)");
  if (j.contains("rope_scaling") && !j["rope_scaling"].is_null()) throw unsupported(file, "rope_scaling", "scaled RoPE");
  if (j.contains("layer_types"))
    for (const auto& t : json_field<std::vector<std::string>>(j, "layer_types", file))
      if (t != "full_attention") throw unsupported(file, "layer_types", t);
  HeadConfig c;
  c.eagle_version = 3;
  c.hidden_size = json_field<std::int64_t>(j, "hidden_size", file);
  c.intermediate_size = json_field<std::int64_t>(j, "intermediate_size", file);
  c.num_layers = json_field<std::int64_t>(j, "num_hidden_layers", file);
  c.num_attention_heads = json_field<std::int64_t>(j, "num_attention_heads", file);
  c.num_key_value_heads = json_field_or<std::int64_t>(j, "num_key_value_heads", c.num_attention_heads, file);
  EAGLE_CHECK(c.hidden_size > 0 && c.num_attention_heads > 0 && c.num_key_value_heads > 0 && c.num_layers > 0 &&
                  c.num_attention_heads % c.num_key_value_heads == 0,
              Error(ErrorKind::input, "the DFlash config's sizes do not fit together")
                  .file(file)
                  .found(fmt::format("hidden_size {}, heads {}/{}, layers {}", c.hidden_size, c.num_attention_heads,
                                     c.num_key_value_heads, c.num_layers)));
  c.head_dim = json_field_or<std::int64_t>(j, "head_dim", c.hidden_size / c.num_attention_heads, file);
  c.rms_norm_eps = json_field_or<double>(j, "rms_norm_eps", 1e-6, file);
  c.hidden_act = json_field_or<std::string>(j, "hidden_act", "silu", file);
  c.max_position_embeddings = json_field_or<std::int64_t>(j, "max_position_embeddings", 2048, file);
  c.rope = model::RopeConfig{};
  c.rope.head_dim = c.head_dim;
  c.rope.theta = json_field_or<double>(j, "rope_theta", 1e6, file);  // vLLM's set_default_rope_theta
  c.rope.max_position_embeddings = c.max_position_embeddings;
  c.attention_bias = json_field_or<bool>(j, "attention_bias", false, file);
  c.vocab_size = json_field<std::int64_t>(j, "vocab_size", file);
  c.draft_vocab_size = c.vocab_size;
  c.target_hidden_size = json_field_or<std::int64_t>(j, "target_hidden_size", c.hidden_size, file);
  c.target_num_hidden_layers = json_field_or<std::int64_t>(j, "num_target_layers", 0, file);
  c.target_dtype = json_field_or<std::string>(j, "torch_dtype", "float32", file);
  c.qk_norm = true;
  c.mask_token_id = json_field<std::int64_t>(d, "mask_token_id", file);
  std::set<std::int64_t> ids;
  for (auto t : json_field<std::vector<std::int64_t>>(d, "target_layer_ids", file)) ids.insert(t + 1);
  c.aux_layer_ids.assign(ids.begin(), ids.end());
  c.dflash_block_size = json_field<std::int64_t>(j, "block_size", file);
  EAGLE_CHECK(c.dflash_block_size >= 2 && !ids.empty() && *ids.begin() >= 1 && c.mask_token_id >= 0 &&
                  c.mask_token_id < c.vocab_size,
              Error(ErrorKind::input, "the DFlash config's block, layers or mask token are out of range")
                  .file(file)
                  .found(fmt::format("block_size {}, {} target layers, mask_token_id {} of vocab {}",
                                     c.dflash_block_size, ids.size(), c.mask_token_id, c.vocab_size)));
  c.ttt_steps = c.dflash_block_size - 1;
  if (j.contains("eagle_train")) {
    const auto e = json_field<json>(j, "eagle_train", file);
    c.dflash_num_anchors = json_field_or<std::int64_t>(e, "dflash_num_anchors", c.dflash_num_anchors, file);
    c.dflash_decay_gamma = json_field_or<double>(e, "dflash_decay_gamma", c.dflash_decay_gamma, file);
    c.dflash_hard_labels = json_field_or<bool>(e, "dflash_hard_labels", c.dflash_hard_labels, file);
    c.target_name_or_path = json_field_or<std::string>(e, "target", "", file);
    c.target_architecture = json_field_or<std::string>(e, "target_architecture", "", file);
  }
  return c;
}

void export_dflash(DraftHead& head, const std::string& dir, DFlashEngine engine) {
  const auto config = dflash_config_json(head.config(), engine);
  const fs::path out(dir);
  EAGLE_CHECK(!fs::exists(out), Error(ErrorKind::output, "the output folder exists; nothing is overwritten")
                                    .file(dir)
                                    .hint("choose a new --output folder"));
  std::map<std::string, torch::Tensor> tensors;
  for (const auto& [name, p] : named_parameters(head)) tensors[name] = p.detach().to(torch::kCPU).contiguous();
  const auto tmp = util::temporary_name(out);
  fs::create_directories(tmp);
  try {
    util::write_file_atomic(tmp / "config.json", config.dump(2) + "\n");
    model::save_safetensors((tmp / "model.safetensors").string(), tensors, {{"format", "pt"}});
    util::fsync_tree(tmp);
    fs::rename(tmp, out);
  } catch (...) {
    std::error_code ec;
    fs::remove_all(tmp, ec);
    throw;
  }
}

std::shared_ptr<DFlashHead> load_dflash_head(const std::string& dir, torch::Device device) {
  const auto config_path = (fs::path(dir) / "config.json").string();
  const auto j = util::read_json_object(config_path, "DFlash config");
  EAGLE_CHECK(is_dflash_config(j), Error(ErrorKind::input, "not a DFlash draft")
                                       .file(config_path)
                                       .expected("architectures DFlashDraftModel and a dflash_config block"));
  auto head = std::make_shared<DFlashHead>(dflash_config_from_json(j, config_path));
  const auto weights_path = (fs::path(dir) / "model.safetensors").string();
  auto file = model::load_safetensors(weights_path);
  // vLLM's aliases (qwen3_dflash.py): the encoder's names of fc and hidden_norm.
  for (auto [alias, name] : {std::pair{"encoder.fc.weight", "fc.weight"},
                             {"encoder.output_norm_enc.weight", "hidden_norm.weight"}})
    if (file.count(alias) && !file.count(name)) {
      file[name] = file.at(alias);
      file.erase(alias);
    }
  std::set<std::string> read;
  {
    torch::NoGradGuard ng;
    for (auto& p : head->named_parameters()) {
      const auto it = file.find(p.key());
      EAGLE_CHECK(it != file.end(), Error(ErrorKind::input, "a tensor of the DFlash draft is missing")
                                        .file(weights_path)
                                        .place(fmt::format("tensor {}", p.key())));
      model::check_shape(it->second, p.value().sizes(),
                         Error(ErrorKind::input, "a DFlash tensor has another shape than its config says")
                             .file(weights_path)
                             .place(fmt::format("tensor {}", p.key())));
      p.value().copy_(it->second.to(p.value().scalar_type()));
      read.insert(p.key());
    }
  }
  for (const auto& [name, t] : file)
    EAGLE_CHECK(read.count(name), Error(ErrorKind::input, "the DFlash draft holds a tensor this head does not use")
                                      .file(weights_path)
                                      .place(fmt::format("tensor {}", name))
                                      .hint("a draft with its own embed_tokens, lm_head or d2t is not supported"));
  head->to(device);
  return head;
}

}  // namespace eagle::head
