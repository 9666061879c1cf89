// Multi-layer EAGLE-3 heads (EAGLE-variants.md §2): layer 0 on [embedding; state], layers >= 1 plain
// pre-norm layers on H, each with its own keys/values. A training step (logits, loss, every gradient)
// against an independent PyTorch forward (scripts/make_head_reference.py), drafting against the
// unroll, export and import round trips in both EAGLE-3 layouts.
#include <torch/torch.h>
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include "eagle/head/eagle/eagle3_head.h"
#include "eagle/head/export/io.h"
#include "eagle/model/safetensors.h"
#include "head_fixtures.h"
#include "helpers.h"

using namespace eagle;

namespace {

const std::string kRoot = std::string(EAGLE_SOURCE_DIR) + "/tests/fixtures/";

head::HeadConfig layers_config(std::int64_t layers, bool qk_norm = false, bool norm_output = false) {
  auto c = test::tiny_head_config(3, 3);
  c.num_layers = layers;
  c.qk_norm = qk_norm;
  c.norm_output = norm_output;
  return c;
}

}  // namespace

TEST_CASE("a two-layer EAGLE-3 head's training step matches an independent PyTorch forward", "[head]") {
  auto loaded = head::load_head(kRoot + "heads/eagle3-2layer-ref");
  REQUIRE(loaded.config.num_layers == 2);
  auto ref = model::load_safetensors(kRoot + "reference/eagle3-2layer-head.safetensors");
  test::check_head_against_reference(*loaded.head, loaded.config, ref);

  test::check_train_step_against_reference(*loaded.head, loaded.config, ref);
}

TEST_CASE("multi-layer heads draft what their training-time-test unroll predicts", "[head]") {
  for (auto [layers, qk_norm, norm_output] : {std::tuple{2, false, false}, {3, true, true}}) {
    INFO("layers " << layers << " qk_norm " << qk_norm << " norm_output " << norm_output);
    torch::manual_seed(8);
    auto target = test::tiny_target();
    head::Eagle3Head head(layers_config(layers, qk_norm, norm_output), test::tiny_vocab());
    head.set_target_weights(target.embedding, target.lm_head);
    head.init_lm_head_from_target(target.lm_head);
    {
      torch::NoGradGuard ng;  // norms away from 1, so a norm skipped or taken from another layer shows
      for (auto& p : head.named_parameters())
        if (p.key().find("norm") != std::string::npos) p.value().uniform_(0.5, 1.5);
    }
    auto cache = head.new_cache(1, 32);
    CHECK(cache.keys.size(0) == layers);
    auto feats = torch::randn({1, 6, 48});
    auto ids = torch::randint(0, 40, {1, 7}, torch::kInt64);
    test::check_drafting_matches_unroll(head, cache, feats, ids);
    // A second round on the same cache: every layer's prefix keys must still be right.
    auto more = torch::randn({1, 2, 48});
    auto next = torch::randint(0, 40, {1, 2}, torch::kInt64);
    auto d1 = head.draft(cache, more, next, 3);
    auto fresh = head.new_cache(1, 32);
    head.draft(fresh, feats, ids.narrow(1, 1, 6), 1);
    CHECK(torch::equal(head.draft(fresh, more, next, 3), d1));
  }
}

TEST_CASE("multi-layer heads export layers.{l}.* with num_hidden_layers and import back bit-exactly", "[head]") {
  test::TempDir dir;
  torch::manual_seed(3);
  auto target = test::tiny_target();
  head::Eagle3Head head(layers_config(3), test::tiny_vocab());
  head.set_target_weights(target.embedding, target.lm_head);
  {
    torch::NoGradGuard ng;
    for (auto& p : head.named_parameters())
      if (p.key().find("norm") != std::string::npos) p.value().uniform_(0.5, 1.5);
  }
  head::export_head(head, head::HeadFormat::speculators, (dir / "spec").string(), target.embedding);
  head::export_head(head, head::HeadFormat::sglang, (dir / "sg").string());
  const auto spec = nlohmann::json::parse(test::read_file(dir / "spec" / "config.json"));
  CHECK(spec["transformer_layer_config"]["num_hidden_layers"] == 3);
  CHECK(!spec["transformer_layer_config"].contains("layer_types"));
  CHECK(!spec["transformer_layer_config"].contains("sliding_window"));
  const auto sg = nlohmann::json::parse(test::read_file(dir / "sg" / "config.json"));
  CHECK(sg["num_hidden_layers"] == 3);
  CHECK(!sg.contains("layer_types"));
  const auto st = model::load_safetensors((dir / "spec" / "model.safetensors").string());
  const auto gt = model::load_safetensors((dir / "sg" / "model.safetensors").string());
  for (const char* name : {"layers.0.hidden_norm.weight", "layers.1.self_attn.q_proj.weight",
                           "layers.2.input_layernorm.weight", "layers.2.mlp.down_proj.weight"})
    CHECK(st.count(name));
  CHECK(st.at("layers.1.self_attn.q_proj.weight").size(1) == 16);  // layers >= 1 take H, not 2H
  CHECK(!st.count("layers.1.hidden_norm.weight"));
  CHECK(gt.count("midlayer.hidden_norm.weight"));
  for (const char* l : {"1", "2"}) {  // SGLang (PR #24663) normalises layers >= 1 with hidden_norm
    const std::string p = std::string("layers.") + l + ".";
    REQUIRE(gt.count(p + "hidden_norm.weight"));
    CHECK(torch::equal(gt.at(p + "hidden_norm.weight"), gt.at(p + "input_layernorm.weight")));
  }
  auto original = head.named_parameters();
  for (const char* format : {"spec", "sg"}) {
    INFO(format);
    auto back = head::load_head((dir / format).string());
    CHECK(back.config.num_layers == 3);
    auto params = back.head->module().named_parameters();
    CHECK(params.size() == original.size());
    for (auto& p : params) {
      INFO(p.key());
      CHECK(torch::equal(p.value(), original[p.key()]));
    }
  }
  // A config naming more layers than the weights hold: the missing layer is named; past 16 refused.
  auto more = sg;
  more["num_hidden_layers"] = 4;
  test::write_file(dir / "sg" / "config.json", more.dump());
  CHECK_THROWS_WITH(head::load_head((dir / "sg").string()), Catch::Contains("layers.3."));
  more["num_hidden_layers"] = 17;
  CHECK_THROWS_WITH(head::head_config_from_json(more, "c.json"), Catch::Contains("num_hidden_layers"));
}
