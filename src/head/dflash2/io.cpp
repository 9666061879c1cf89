// The DFlash2 draft's config.json and weights in vLLM's and speculators' layouts, written and read back (see
// dflash2/io.h).
#include "eagle/head/dflash2/io.h"

#include <filesystem>

#include <fmt/format.h>

#include "eagle/head/config_fields.h"
#include "eagle/head/dflash/io.h"
#include "eagle/model/safetensors.h"
#include "eagle/util/error.h"
#include "eagle/util/json_file.h"

namespace eagle::head {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

constexpr const char* kArchitecture = "DFlash2DraftModel";  // vLLM's registry row and speculators' class

Error unsupported(const std::string& file, const std::string& key, const std::string& what) {
  return Error(ErrorKind::input, "the DFlash2 config asks for what this head does not compute")
      .file(file)
      .place(key)
      .found(what)
      .hint("eagle-train trains and reads non-causal full-attention DFlash2 drafts without output scaling");
}

}  // namespace

json dflash2_config_json(const HeadConfig& c) {
  EAGLE_CHECK(c.dflash2(), Error(ErrorKind::usage, "only a DFlash2 head exports as DFlash2").place("--format"));
  auto j = dflash_config_json(c, DFlashEngine::vllm);  // the backbone's fields, checks and dflash_config block
  j["architectures"] = {kArchitecture};
  auto& d = j["dflash_config"];
  d["conv_kernel_size"] = c.dflash2_conv_kernel_size;
  d["conv_group_size"] = c.dflash2_conv_group_size;
  d["selector_rank"] = c.dflash2_selector_rank;
  d["selector_top_k"] = c.dflash2_selector_top_k;
  j["eagle_train"]["draft"] = "dflash2";
  j["eagle_train"]["dflash2_selector_alpha"] = c.dflash2_selector_alpha;
  j["eagle_train"].erase("dflash_hard_labels");
  return j;
}

json dflash2_speculators_config_json(const HeadConfig& c) {
  auto j = block_draft_speculators_json(c, dflash2_config_json(c), "dflash2", kArchitecture);
  j["sample_from_anchor"] = false;
  j["sliding_window_non_causal"] = true;  // vLLM: dflash_config.causal = not this (full attention: non-causal)
  j["conv_kernel_size"] = c.dflash2_conv_kernel_size;
  j["conv_group_size"] = c.dflash2_conv_group_size;
  j["selector_rank"] = c.dflash2_selector_rank;
  j["selector_top_k"] = c.dflash2_selector_top_k;
  return j;
}

bool is_dflash2_config(const json& j) {
  const auto type = j.find("speculators_model_type");
  if (type != j.end() && type->is_string()) return type->get<std::string>() == "dflash2";
  const auto it = j.find("architectures");
  return it != j.end() && it->is_array() && !it->empty() && (*it)[0].is_string() &&
         (*it)[0].get<std::string>() == kArchitecture;
}

HeadConfig dflash2_config_from_json(const json& in, const std::string& file) {
  json j = in;
  if (in.contains("speculators_model_type")) {  // vLLM's update_dflash + update_dflash2
    const ConfigFields top{in, file, ""};
    j = block_draft_native_json(in, file, kArchitecture, {"draft_vocab_size", "target_hidden_size", "block_size"});
    auto& d = j["dflash_config"];
    d["sample_from_anchor"] = top.boolean_or("sample_from_anchor", false);
    d["causal"] = !top.boolean_or("sliding_window_non_causal", true);
    for (const char* key : {"conv_kernel_size", "conv_group_size", "selector_rank", "selector_top_k"})
      if (top.has(key)) d[key] = in[key];
  }
  const ConfigFields top{j, file, ""};
  auto c = dflash_config_from_json(j, file);  // the backbone: causal, sliding, anchor-first refused by name
  const auto d = top.object("dflash_config");
  if (d.number_or("input_embedding_scale", 1.0, -1e6, 1e6) != 1.0)
    throw unsupported(file, "dflash_config.input_embedding_scale", "a scale");
  if (d.number_or("output_multiplier", 1.0, -1e6, 1e6) != 1.0)
    throw unsupported(file, "dflash_config.output_multiplier", "a multiplier");
  if (d.number_or("final_logit_softcapping", 0.0, -1e6, 1e6) > 0)
    throw unsupported(file, "dflash_config.final_logit_softcapping", "a soft cap");
  for (const char* key : {"conv_kernel_size", "conv_group_size", "selector_rank", "selector_top_k"})
    EAGLE_CHECK(d.has(key), d.bad(key, "missing").expected("a number (vLLM requires it)").found("nothing"));
  c.dflash2_conv_kernel_size = d.integer("conv_kernel_size", 1, c.dflash_block_size);
  c.dflash2_conv_group_size = d.integer("conv_group_size", 1, c.hidden_size);
  EAGLE_CHECK(c.hidden_size % c.dflash2_conv_group_size == 0,
              d.bad("conv_group_size", "the groups do not tile the hidden size")
                  .expected(fmt::format("a divisor of hidden_size {}", c.hidden_size))
                  .found(std::to_string(c.dflash2_conv_group_size)));
  c.dflash2_selector_rank = d.integer("selector_rank", 1, 65536);
  c.dflash2_selector_top_k = d.integer("selector_top_k", 1, c.vocab_size);
  if (top.has("eagle_train")) {
    const auto e = top.object("eagle_train");
    c.dflash2_selector_alpha = e.number_or("dflash2_selector_alpha", c.dflash2_selector_alpha, 0, 1e6);
  }
  EAGLE_CHECK(c.dflash_decay_gamma > 0, top.bad("eagle_train.dflash_decay_gamma", "out of range")
                                            .expected("above 0 (DFlash2 weighs slot k by exp(-(k - 1) / gamma))")
                                            .found(fmt::format("{}", c.dflash_decay_gamma)));
  return c;
}

std::shared_ptr<DFlash2Head> load_dflash2_head(const std::string& dir, torch::Device device) {
  const auto config_path = (fs::path(dir) / "config.json").string();
  const auto j = util::read_json_object(config_path, "DFlash2 config");
  EAGLE_CHECK(is_dflash2_config(j), Error(ErrorKind::input, "not a DFlash2 draft")
                                        .file(config_path)
                                        .expected(fmt::format("architectures {} or speculators_model_type dflash2",
                                                              kArchitecture)));
  const auto cfg = dflash2_config_from_json(j, config_path);
  const auto weights_path = (fs::path(dir) / "model.safetensors").string();
  const auto g = cfg.hidden_size / cfg.dflash2_conv_group_size, taps = cfg.dflash2_conv_kernel_size;
  check_block_draft_shapes(
      model::SafetensorsFile::open(weights_path), cfg, "DFlash2",
      {{"candidate_selector.predecessor_codebook", {cfg.vocab_size, cfg.dflash2_selector_rank}},
       {"candidate_selector.successor_codebook", {cfg.vocab_size, cfg.dflash2_selector_rank}},
       {"layers.0.attention_conv.kernel_projection.weight", {2 * taps * g, cfg.hidden_size}},
       {"layers.0.attention_conv.base_kernel", {2, taps, cfg.hidden_size}}});
  auto head = std::make_shared<DFlash2Head>(cfg);
  read_block_draft_weights(*head, model::load_safetensors(weights_path), weights_path, "DFlash2");
  head->to(device);
  return head;
}

}  // namespace eagle::head
