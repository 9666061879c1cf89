// The DSpark draft's config.json and weights as vLLM 0.32 loads them (Qwen3DSparkModel), written and read
// back (see dspark/io.h).
#include "eagle/head/dspark/io.h"

#include <filesystem>

#include <fmt/format.h>

#include "eagle/head/config_fields.h"
#include "eagle/head/dflash/io.h"
#include "eagle/model/safetensors.h"
#include "eagle/model/shape_check.h"
#include "eagle/util/error.h"
#include "eagle/util/json_file.h"

namespace eagle::head {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

constexpr const char* kArchitecture = "Qwen3DSparkModel";
// What speculators 0.9.0's save_pretrained writes for its DSparkDraftModel (its class name as the architecture).
constexpr const char* kSpeculatorsArchitecture = "DSparkDraftModel";

Error unsupported(const std::string& file, const std::string& key, const std::string& what) {
  return Error(ErrorKind::input, "the DSpark config asks for what this head does not compute")
      .file(file)
      .place(key)
      .found(what)
      .hint("eagle-train trains and reads vanilla-Markov DSpark drafts over the full vocabulary");
}

}  // namespace

json dspark_config_json(const HeadConfig& c) {
  EAGLE_CHECK(c.dspark(), Error(ErrorKind::usage, "only a DSpark head exports as dspark").place("--format"));
  auto j = dflash_config_json(c, DFlashEngine::vllm);  // the backbone's fields, checks and dflash_config block
  j["architectures"] = {kArchitecture};
  j["block_size"] = c.dflash_block_size;
  j["sample_from_anchor"] = c.dspark_sample_from_anchor;
  j["markov_rank"] = c.dspark_markov_rank;
  j["markov_head_type"] = "vanilla";
  j["draft_vocab_size"] = c.draft_vocab_size;
  j["enable_confidence_head"] = c.dspark_confidence_head;
  j["confidence_head_with_markov"] = c.dspark_confidence_head;
  j["mask_token_id"] = c.mask_token_id;
  j["eagle_train"]["draft"] = "dspark";
  j["eagle_train"]["dspark_confidence_alpha"] = c.dspark_confidence_alpha;
  j["eagle_train"].erase("dflash_hard_labels");
  return j;
}

bool is_dspark_config(const json& j) {
  const auto it = j.find("architectures");
  return it != j.end() && it->is_array() && !it->empty() && (*it)[0].is_string() &&
         (*it)[0].get<std::string>() == kArchitecture;
}

json dspark_speculators_config_json(const HeadConfig& c) {
  auto j = block_draft_speculators_json(c, dspark_config_json(c), "dspark", kSpeculatorsArchitecture);
  j["sample_from_anchor"] = c.dspark_sample_from_anchor;
  j["sliding_window_non_causal"] = false;
  j["markov_rank"] = c.dspark_markov_rank;
  j["markov_head_type"] = "vanilla";
  j["enable_confidence_head"] = c.dspark_confidence_head;
  j["confidence_head_with_markov"] = c.dspark_confidence_head;
  return j;
}

bool is_dspark_speculators_config(const json& j) {
  const auto it = j.find("speculators_model_type");
  return it != j.end() && it->is_string() && it->get<std::string>() == "dspark";
}

// vLLM's reading of a speculators DSpark config (transformers_utils/configs/speculators/algos.py update_dspark):
// transformer_layer_config with the draft's keys beside it, sample_from_anchor false when absent, aux id i as
// target layer i - 1; then the native reader.
HeadConfig dspark_config_from_speculators_json(const json& j, const std::string& file) {
  auto native = block_draft_native_json(
      j, file, kArchitecture,
      {"draft_vocab_size", "target_hidden_size", "markov_rank", "markov_head_type", "block_size",
       "enable_confidence_head", "confidence_head_with_markov", "use_aux_hidden_state"});
  native["sample_from_anchor"] = ConfigFields{j, file, ""}.boolean_or("sample_from_anchor", false);  // vLLM's default
  return dspark_config_from_json(native, file);
}

HeadConfig dspark_config_from_json(const json& j, const std::string& file) {
  const ConfigFields top{j, file, ""};
  if (top.string_or("markov_head_type", "vanilla") != "vanilla")
    throw unsupported(file, "markov_head_type", top.string_or("markov_head_type", ""));
  if (top.number_or("logit_scale", 1.0, -1e6, 1e6) != 1.0) throw unsupported(file, "logit_scale", "a scale");
  // DFlash's reader for the backbone (it refuses sample_from_anchor, which is DSpark's own key here).
  auto backbone = j;
  backbone.erase("sample_from_anchor");
  if (backbone.contains("dflash_config")) backbone["dflash_config"].erase("sample_from_anchor");
  auto c = dflash_config_from_json(backbone, file);
  c.dspark_markov_rank = top.integer("markov_rank", 1, 65536);
  EAGLE_CHECK(top.integer_or("draft_vocab_size", c.vocab_size, 1, c.vocab_size) == c.vocab_size,
              unsupported(file, "draft_vocab_size", "a reduced draft vocabulary (lm_head and d2t of their own)"));
  c.dspark_confidence_head = top.boolean_or("enable_confidence_head", false);  // vLLM's default when absent
  if (c.dspark_confidence_head && !top.boolean_or("confidence_head_with_markov", false))
    throw unsupported(file, "confidence_head_with_markov", "false (a confidence head on h alone)");
  c.dspark_sample_from_anchor = top.boolean_or("sample_from_anchor", true);  // vLLM's native default
  c.ttt_steps = c.steps();
  if (top.has("eagle_train")) {
    const auto e = top.object("eagle_train");
    c.dspark_confidence_alpha = e.number_or("dspark_confidence_alpha", c.dspark_confidence_alpha, 0, 1e6);
  }
  EAGLE_CHECK(c.dflash_decay_gamma > 0, top.bad("eagle_train.dflash_decay_gamma", "out of range")
                                            .expected("above 0 (DSpark weighs slot k by exp(-k / gamma))")
                                            .found(fmt::format("{}", c.dflash_decay_gamma)));
  return c;
}

std::shared_ptr<DSparkHead> load_dspark_head(const std::string& dir, torch::Device device) {
  const auto config_path = (fs::path(dir) / "config.json").string();
  const auto j = util::read_json_object(config_path, "DSpark config");
  EAGLE_CHECK(is_dspark_config(j) || is_dspark_speculators_config(j),
              Error(ErrorKind::input, "not a DSpark draft")
                  .file(config_path)
                  .expected(fmt::format("architectures {} or speculators_model_type dspark", kArchitecture)));
  const auto cfg = is_dspark_config(j) ? dspark_config_from_json(j, config_path)
                                       : dspark_config_from_speculators_json(j, config_path);
  const auto weights_path = (fs::path(dir) / "model.safetensors").string();
  check_block_draft_shapes(model::SafetensorsFile::open(weights_path), cfg, "DSpark",
                           {{"markov_head.markov_w1.weight", {cfg.vocab_size, cfg.dspark_markov_rank}},
                            {"markov_head.markov_w2.weight", {cfg.draft_vocab_size, cfg.dspark_markov_rank}}});
  auto head = std::make_shared<DSparkHead>(cfg);
  read_block_draft_weights(*head, model::load_safetensors(weights_path), weights_path, "DSpark");
  head->to(device);
  return head;
}

}  // namespace eagle::head
