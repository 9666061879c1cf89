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

Error unsupported(const std::string& file, const std::string& key, const std::string& what) {
  return Error(ErrorKind::input, "the DSpark config asks for what this head does not compute")
      .file(file)
      .place(key)
      .found(what)
      .hint("eagle-train trains and reads vanilla-Markov DSpark drafts in the anchor-as-first layout, full vocabulary");
}

}  // namespace

json dspark_config_json(const HeadConfig& c) {
  EAGLE_CHECK(c.dspark(), Error(ErrorKind::usage, "only a DSpark head exports as dspark").place("--format"));
  auto j = dflash_config_json(c, DFlashEngine::vllm);  // the backbone's fields, checks and dflash_config block
  j["architectures"] = {kArchitecture};
  j["block_size"] = c.dflash_block_size;
  j["sample_from_anchor"] = true;
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

HeadConfig dspark_config_from_json(const json& j, const std::string& file) {
  const ConfigFields top{j, file, ""};
  if (!top.boolean_or("sample_from_anchor", true))
    throw unsupported(file, "sample_from_anchor", "false (the 1 + N fill-in layout; not implemented)");
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
  c.ttt_steps = c.dflash_block_size;
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
  EAGLE_CHECK(is_dspark_config(j), Error(ErrorKind::input, "not a DSpark draft")
                                       .file(config_path)
                                       .expected(fmt::format("architectures {}", kArchitecture)));
  const auto cfg = dspark_config_from_json(j, config_path);
  const auto weights_path = (fs::path(dir) / "model.safetensors").string();
  {
    const auto file = model::SafetensorsFile::open(weights_path);
    for (const auto& [name, shape] : std::vector<std::pair<std::string, std::vector<std::int64_t>>>{
             {"markov_head.markov_w1.weight", {cfg.vocab_size, cfg.dspark_markov_rank}},
             {"markov_head.markov_w2.weight", {cfg.draft_vocab_size, cfg.dspark_markov_rank}},
             {"fc.weight", {cfg.hidden_size, std::ssize(cfg.aux_layer_ids) * cfg.target_hidden_size}}}) {
      EAGLE_CHECK(file.contains(name), Error(ErrorKind::input, "a tensor of the DSpark draft is missing")
                                           .file(weights_path)
                                           .place(fmt::format("tensor {}", name)));
      model::check_shape(file.shape(name), shape,
                         Error(ErrorKind::input, "the DSpark config.json does not match its weights")
                             .file(weights_path)
                             .place(fmt::format("tensor {}", name))
                             .hint("config.json and model.safetensors are of different drafts"));
    }
  }
  auto head = std::make_shared<DSparkHead>(cfg);
  read_block_draft_weights(*head, model::load_safetensors(weights_path), weights_path, "DSpark");
  head->to(device);
  return head;
}

}  // namespace eagle::head
