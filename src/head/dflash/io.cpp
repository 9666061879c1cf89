// The DFlash draft's config.json and weights as vLLM 0.32 and SGLang load them, written and read
// back (see dflash_io.h).
#include "eagle/head/dflash/io.h"

#include <algorithm>
#include <filesystem>
#include <set>

#include <fmt/format.h>

#include "eagle/head/config_fields.h"
#include "eagle/model/config_limits.h"
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

namespace {

// vLLM's update_dflash (transformers_utils/configs/speculators/algos.py): speculators' DFlash layout as the
// native config vLLM builds from it; dflash_config.causal = not sliding_window_non_causal (default true).
json dflash_native_from_speculators(const json& in, const std::string& file) {
  const ConfigFields top{in, file, ""};
  if (!top.boolean_or("sliding_window_non_causal", true))
    throw unsupported(file, "sliding_window_non_causal",
                      "false (block-causal layers, speculators' default for dflash; vLLM serves them with "
                      "dflash_config.causal true)");
  auto j =
      block_draft_native_json(in, file, "DFlashDraftModel", {"draft_vocab_size", "target_hidden_size", "block_size"});
  j["dflash_config"]["sample_from_anchor"] = top.boolean_or("sample_from_anchor", false);
  return j;
}

}  // namespace

json dflash_speculators_config_json(const HeadConfig& c) {
  auto j = block_draft_speculators_json(c, dflash_config_json(c), "dflash", "DFlashDraftModel");
  j["sample_from_anchor"] = false;
  j["sliding_window_non_causal"] = true;  // vLLM: dflash_config.causal = not this (DFlash's blocks: non-causal)
  return j;
}

HeadConfig dflash_config_from_json(const json& in, const std::string& file) {
  namespace lim = model::limits;
  const json j = in.contains("speculators_model_type") ? dflash_native_from_speculators(in, file) : in;
  const ConfigFields top{j, file, ""};
  EAGLE_CHECK(top.has("dflash_config"), top.bad("dflash_config", "missing").expected("an object").found("nothing"));
  const auto d = top.object("dflash_config");
  if (top.boolean_or("is_causal", false) || d.boolean_or("causal", false))
    throw unsupported(file, "is_causal / dflash_config.causal", "causal layers");
  if (d.boolean_or("use_swa", false)) throw unsupported(file, "dflash_config.use_swa", "true");
  if (!d.boolean_or("use_aux_hidden_state", true))
    throw unsupported(file, "dflash_config.use_aux_hidden_state", "false");
  if (d.has("attention_value_scale")) throw unsupported(file, "dflash_config.attention_value_scale", "a scale");
  // Every slot shifted to the next token is DSpark's layout (vLLM's qwen3_dspark.py, with its Markov head); a
  // DFlash draft in it is not served as DFlash here.
  if (d.boolean_or("sample_from_anchor", false) || top.boolean_or("sample_from_anchor", false))
    throw unsupported(file, "sample_from_anchor",
                      "true (the anchor-as-first layout: a DSpark draft's, architectures Qwen3DSparkModel)");
  if (top.has("rope_scaling")) throw unsupported(file, "rope_scaling", "scaled RoPE");
  // Every size, count and number within the limits train and the other readers apply (config_fields.h,
  // model/config_limits.h), before anything is allocated: the shapes are then compared with the file.
  HeadConfig c;
  c.eagle_version = 3;
  c.hidden_size = top.integer("hidden_size", 1, lim::kMaxSize);
  c.intermediate_size = top.integer("intermediate_size", 1, lim::kMaxSize);
  c.num_layers = top.integer("num_hidden_layers", 1, kMaxDraftLayers);
  c.num_attention_heads = top.integer("num_attention_heads", 1, lim::kMaxHeads);
  c.num_key_value_heads = top.integer_or("num_key_value_heads", c.num_attention_heads, 1, lim::kMaxHeads);
  EAGLE_CHECK(c.num_attention_heads % c.num_key_value_heads == 0,
              top.bad("num_key_value_heads", "the DFlash config's heads do not fit together")
                  .expected(fmt::format("a divisor of num_attention_heads {}", c.num_attention_heads))
                  .found(std::to_string(c.num_key_value_heads)));
  if (top.has("layer_types")) {
    const auto& types = top.typed("layer_types", j["layer_types"].is_array(), "a list of strings");
    EAGLE_CHECK(std::ssize(types) == c.num_layers,
                top.bad("layer_types", "one entry per layer")
                    .expected(fmt::format("{} entries (num_hidden_layers)", c.num_layers))
                    .found(std::to_string(types.size())));
    for (const auto& t : types) {
      EAGLE_CHECK(t.is_string(),
                  top.bad("layer_types", "wrong JSON type").expected("a list of strings").found(t.dump()));
      if (t.get<std::string>() != "full_attention") throw unsupported(file, "layer_types", t.get<std::string>());
    }
  }
  if (top.has("head_dim")) {
    c.head_dim = top.integer("head_dim", 2, lim::kMaxHeadDim);
  } else {
    c.head_dim = c.hidden_size / c.num_attention_heads;
    EAGLE_CHECK(
        c.head_dim >= 2 && c.head_dim <= lim::kMaxHeadDim,
        top.bad("head_dim", "out of range")
            .expected(fmt::format("hidden_size / num_attention_heads in [2, {}], or head_dim given", lim::kMaxHeadDim))
            .found(fmt::format("{} / {}", c.hidden_size, c.num_attention_heads)));
  }
  EAGLE_CHECK(c.head_dim % 2 == 0, top.bad("head_dim", "RoPE turns pairs of features")
                                       .expected("an even head_dim")
                                       .found(std::to_string(c.head_dim)));
  c.rms_norm_eps = top.rms_norm_eps();
  c.hidden_act = top.string_or("hidden_act", "silu");
  c.max_position_embeddings = top.integer_or("max_position_embeddings", 2048, 1, lim::kMaxPositions);
  c.rope = model::RopeConfig{};
  c.rope.head_dim = c.head_dim;
  c.rope.theta = top.number_or("rope_theta", 1e6, lim::kMinRope, lim::kMaxRope);  // vLLM's set_default_rope_theta
  c.rope.max_position_embeddings = c.max_position_embeddings;
  c.attention_bias = top.boolean_or("attention_bias", false);
  c.vocab_size = top.integer("vocab_size", 1, lim::kMaxVocab);
  c.draft_vocab_size = c.vocab_size;
  c.target_hidden_size = top.integer_or("target_hidden_size", c.hidden_size, 1, lim::kMaxSize);
  c.target_num_hidden_layers = top.integer_or("num_target_layers", 0, 0, lim::kMaxLayers);
  c.target_dtype = top.string_or("torch_dtype", "float32");
  c.qk_norm = true;
  c.mask_token_id = d.integer("mask_token_id", 0, c.vocab_size - 1);
  const std::int64_t top_layer = c.target_num_hidden_layers > 0 ? c.target_num_hidden_layers - 1 : lim::kMaxLayers - 1;
  EAGLE_CHECK(d.has("target_layer_ids"),
              d.bad("target_layer_ids", "missing").expected("a list of target layer ids").found("nothing"));
  std::set<std::int64_t> ids;
  const auto layer_ids = d.integers("target_layer_ids");
  for (std::size_t i = 0; i < layer_ids.size(); ++i) {
    EAGLE_CHECK(layer_ids[i] >= 0 && layer_ids[i] <= top_layer,
                d.bad(fmt::format("target_layer_ids[{}]", i), "out of range")
                    .expected(fmt::format("a layer id in [0, {}]", top_layer))
                    .found(std::to_string(layer_ids[i])));
    ids.insert(layer_ids[i] + 1);
  }
  EAGLE_CHECK(!ids.empty(), d.bad("target_layer_ids", "empty").expected("at least one target layer id").found("[]"));
  c.aux_layer_ids.assign(ids.begin(), ids.end());
  c.dflash_block_size = top.integer("block_size", 2, kMaxBlockSize);
  // speculators writes the block twice; both must agree.
  EAGLE_CHECK(!d.has("block_size") || d.integer("block_size", 2, kMaxBlockSize) == c.dflash_block_size,
              d.bad("block_size", "two block sizes")
                  .expected(fmt::format("block_size {} (the top level's)", c.dflash_block_size))
                  .found(j["dflash_config"]["block_size"].dump()));
  c.ttt_steps = c.dflash_block_size - 1;
  if (top.has("eagle_train")) {
    const auto e = top.object("eagle_train");
    c.dflash_num_anchors = e.integer_or("dflash_num_anchors", c.dflash_num_anchors, 1, 1 << 20);
    c.dflash_decay_gamma = e.number_or("dflash_decay_gamma", c.dflash_decay_gamma, 0, 1e6);
    c.dflash_hard_labels = e.boolean_or("dflash_hard_labels", c.dflash_hard_labels);
    c.target_name_or_path = e.string_or("target", "");
    c.target_architecture = e.string_or("target_architecture", "");
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

json block_draft_speculators_json(const HeadConfig& c, const json& native, const std::string& algorithm,
                                  const std::string& architecture) {
  json layer = {{"model_type", "qwen3"},
                {"vocab_size", c.vocab_size},
                {"hidden_size", c.hidden_size},
                {"intermediate_size", c.intermediate_size},
                {"num_hidden_layers", c.num_layers},
                {"num_attention_heads", c.num_attention_heads},
                {"num_key_value_heads", c.num_key_value_heads},
                {"head_dim", c.head_dim},
                {"hidden_act", c.hidden_act},
                {"rms_norm_eps", c.rms_norm_eps},
                {"max_position_embeddings", c.max_position_embeddings},
                {"attention_bias", c.attention_bias},
                {"layer_types", native["layer_types"]},
                {"rope_parameters", {{"rope_theta", c.rope.theta}, {"rope_type", "default"}}},
                {"tie_word_embeddings", false}};
  return {
      {"architectures", {architecture}},
      {"speculators_model_type", algorithm},
      {"speculators_version", "0.9.0"},
      {"speculators_config",
       {{"algorithm", algorithm},
        {"proposal_methods",
         {{{"proposal_type", "greedy"},
           {"speculative_tokens", c.steps()},
           {"verifier_accept_k", 1},
           {"accept_tolerance", 0.0}}}},
        {"default_proposal_method", "greedy"},
        {"verifier",
         {{"name_or_path", c.target_name_or_path},
          {"architectures", c.target_architecture.empty() ? json::array() : json::array({c.target_architecture})}}}}},
      {"transformer_layer_config", layer},
      {"aux_hidden_state_layer_ids", c.aux_layer_ids},
      {"block_size", c.dflash_block_size},
      {"draft_vocab_size", c.draft_vocab_size},
      {"target_hidden_size", c.target_hidden_size},
      {"mask_token_id", c.mask_token_id},
      {"tie_word_embeddings", false},
      {"dtype", c.target_dtype},
      {"eagle_train", native["eagle_train"]}};
}

json block_draft_native_json(const json& j, const std::string& file, const std::string& architecture,
                             const std::vector<std::string>& copied) {
  const ConfigFields top{j, file, ""};
  const auto layer = top.object("transformer_layer_config");
  json native = layer.j;
  if (layer.has("rope_parameters")) {  // transformers 5 writes the RoPE here
    const auto rope = layer.object("rope_parameters");
    if (rope.string_or("rope_type", "default") != "default")
      throw unsupported(file, "transformer_layer_config.rope_parameters.rope_type", rope.string_or("rope_type", ""));
    if (rope.has("rope_theta")) native["rope_theta"] = rope.j["rope_theta"];
    native.erase("rope_parameters");
  }
  if (native.contains("rope_scaling") && native["rope_scaling"].is_null()) native.erase("rope_scaling");
  native["architectures"] = {architecture};
  EAGLE_CHECK(top.has("mask_token_id"),
              top.bad("mask_token_id", "missing").expected("the mask token id (vLLM requires it)").found("nothing"));
  const auto aux = top.integers("aux_hidden_state_layer_ids");
  std::vector<std::int64_t> layers;
  for (std::size_t i = 0; i < aux.size(); ++i) {
    EAGLE_CHECK(aux[i] >= 1, top.bad(fmt::format("aux_hidden_state_layer_ids[{}]", i), "out of range")
                                 .expected("an id >= 1 (the state after layer id - 1: vLLM serves id i as target "
                                           "layer i - 1)")
                                 .found(std::to_string(aux[i])));
    layers.push_back(aux[i] - 1);
  }
  native["dflash_config"] = {{"mask_token_id", j["mask_token_id"]}, {"target_layer_ids", layers}};
  for (const auto& key : copied)
    if (top.has(key)) native[key] = j[key];
  if (top.has("eagle_train")) native["eagle_train"] = j["eagle_train"];
  if (!native.contains("torch_dtype") && top.has("dtype")) native["torch_dtype"] = j["dtype"];
  return native;
}

void check_block_draft_shapes(const model::SafetensorsFile& file, const HeadConfig& c, const std::string& noun,
                              const std::vector<std::pair<std::string, std::vector<std::int64_t>>>& more) {
  const auto last = fmt::format("layers.{}.", c.num_layers - 1);
  const std::int64_t A = std::ssize(c.aux_layer_ids);
  std::vector<std::pair<std::string, std::vector<std::int64_t>>> expected{
      {"fc.weight", {c.hidden_size, A * c.target_hidden_size}},
      {last + "self_attn.q_proj.weight", {c.num_attention_heads * c.head_dim, c.hidden_size}},
      {last + "self_attn.k_proj.weight", {c.num_key_value_heads * c.head_dim, c.hidden_size}},
      {last + "mlp.gate_proj.weight", {c.intermediate_size, c.hidden_size}},
  };
  expected.insert(expected.end(), more.begin(), more.end());
  for (const auto& [name, shape] : expected) {
    const auto alias = name == "fc.weight" && !file.contains(name) ? std::string("encoder.fc.weight") : name;
    EAGLE_CHECK(file.contains(alias), Error(ErrorKind::input, fmt::format("a tensor of the {} draft is missing", noun))
                                          .file(file.path())
                                          .place(fmt::format("tensor {}", name))
                                          .hint("config.json and model.safetensors are of different drafts"));
    model::check_shape(file.shape(alias), shape,
                       Error(ErrorKind::input, fmt::format("the {} config.json does not match its weights", noun))
                           .file(file.path())
                           .place(fmt::format("tensor {}", alias))
                           .hint("config.json and model.safetensors are of different drafts"));
  }
}

void read_block_draft_weights(torch::nn::Module& head, std::map<std::string, torch::Tensor> file,
                              const std::string& weights_path, const std::string& noun) {
  std::set<std::string> read;
  {
    torch::NoGradGuard ng;
    for (auto& p : head.named_parameters()) {
      const auto it = file.find(p.key());
      EAGLE_CHECK(it != file.end(), Error(ErrorKind::input, fmt::format("a tensor of the {} draft is missing", noun))
                                        .file(weights_path)
                                        .place(fmt::format("tensor {}", p.key())));
      model::check_shape(
          it->second, p.value().sizes(),
          Error(ErrorKind::input, fmt::format("a {} tensor has another shape than its config says", noun))
              .file(weights_path)
              .place(fmt::format("tensor {}", p.key())));
      p.value().copy_(it->second.to(p.value().scalar_type()));
      read.insert(p.key());
    }
  }
  for (const auto& [name, t] : file)
    EAGLE_CHECK(read.count(name),
                Error(ErrorKind::input, fmt::format("the {} draft holds a tensor this head does not use", noun))
                    .file(weights_path)
                    .place(fmt::format("tensor {}", name))
                    .hint("a draft with its own embed_tokens, lm_head or d2t is not supported"));
}

std::shared_ptr<DFlashHead> load_dflash_head(const std::string& dir, torch::Device device) {
  const auto config_path = (fs::path(dir) / "config.json").string();
  const auto j = util::read_json_object(config_path, "DFlash config");
  EAGLE_CHECK(is_dflash_config(j), Error(ErrorKind::input, "not a DFlash draft")
                                       .file(config_path)
                                       .expected("architectures DFlashDraftModel and a dflash_config block"));
  const auto cfg = dflash_config_from_json(j, config_path);
  const auto weights_path = (fs::path(dir) / "model.safetensors").string();
  check_block_draft_shapes(model::SafetensorsFile::open(weights_path), cfg, "DFlash");
  auto head = std::make_shared<DFlashHead>(cfg);
  auto file = model::load_safetensors(weights_path);
  // vLLM's aliases (qwen3_dflash.py): the encoder's names of fc and hidden_norm.
  for (auto [alias, name] : {std::pair{"encoder.fc.weight", "fc.weight"},
                             {"encoder.output_norm_enc.weight", "hidden_norm.weight"}})
    if (file.count(alias) && !file.count(name)) {
      file[name] = file.at(alias);
      file.erase(alias);
    }
  read_block_draft_weights(*head, std::move(file), weights_path, "DFlash");
  head->to(device);
  return head;
}

}  // namespace eagle::head
