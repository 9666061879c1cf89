// P-EAGLE heads (parallel drafting, EAGLE-variants.md §4, §6): depths d >= 1 on the mask token and
// F1(mask_hidden). A training step and the served forward (one causal pass over the prefix and K-1
// mask slots) against independent PyTorch code (scripts/make_head_reference.py), drafting against the
// unroll, the speculators peagle export and its import, SGLang's refusal.
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

head::HeadConfig parallel_config(std::int64_t layers = 1, bool fc_norm = false) {
  auto c = test::tiny_head_config(3, 3);
  c.parallel_drafting = true;
  c.mask_token_id = 7;
  c.num_layers = layers;
  c.fc_norm = fc_norm;
  return c;
}

}  // namespace

TEST_CASE("a P-EAGLE head's training step and served forward match independent PyTorch code", "[head]") {
  auto loaded = head::load_head(kRoot + "heads/peagle-ref");
  REQUIRE(loaded.config.parallel_drafting);
  CHECK(loaded.config.mask_token_id == 5);
  auto ref = model::load_safetensors(kRoot + "reference/peagle-head.safetensors");
  test::check_head_against_reference(*loaded.head, loaded.config, ref);
  test::check_train_step_against_reference(*loaded.head, loaded.config, ref);
  // Served: the 5 prefix slots (positions 0..4, tokens x_1..x_5) and 2 mask slots, one forward.
  auto& head = dynamic_cast<head::Eagle3Head&>(*loaded.head);
  head.set_target_weights(ref["embedding"], ref["embedding"]);
  auto cache = head.new_cache(1, 16);
  auto drafted = head.draft(cache, ref["aux_hidden"].narrow(1, 0, 5), ref["input_ids"].narrow(1, 1, 5), 3);
  CHECK(torch::equal(drafted, ref["served_drafts"]));
  CHECK(cache.length == 5);  // the mask slots are not kept
}

TEST_CASE("P-EAGLE heads draft in one forward what their training unroll predicts", "[head]") {
  for (auto [layers, fc_norm] : {std::tuple{1, false}, {2, true}}) {
    INFO("layers " << layers << " fc_norm " << fc_norm);
    torch::manual_seed(9);
    auto target = test::tiny_target();
    head::Eagle3Head head(parallel_config(layers, fc_norm), test::tiny_vocab());
    head.set_target_weights(target.embedding, target.lm_head);
    head.init_lm_head_from_target(target.lm_head);
    auto cache = head.new_cache(1, 32);
    auto feats = torch::randn({1, 6, 48});
    auto ids = torch::randint(0, 40, {1, 7}, torch::kInt64);
    auto drafted = test::check_drafting_matches_unroll(head, cache, feats, ids);
    // No recurrence: a draft of K tokens starts with the draft of fewer (the mask slots are causal).
    auto again = head.new_cache(1, 32);
    CHECK(torch::equal(head.draft(again, feats, ids.narrow(1, 1, 6), 2), drafted.narrow(1, 0, 2)));
  }
}

TEST_CASE("P-EAGLE exports as speculators peagle and imports back bit-exactly; SGLang refuses it", "[head]") {
  test::TempDir dir;
  torch::manual_seed(4);
  auto target = test::tiny_target();
  head::Eagle3Head head(parallel_config(2, true), test::tiny_vocab());
  head.set_target_weights(target.embedding, target.lm_head);
  head::export_head(head, head::HeadFormat::speculators, (dir / "spec").string(), target.embedding);
  const auto j = nlohmann::json::parse(test::read_file(dir / "spec" / "config.json"));
  CHECK(j["speculators_model_type"] == "peagle");
  CHECK(j["speculators_config"]["algorithm"] == "peagle");
  CHECK(j["mask_token_id"] == 7);
  CHECK(j["norm_before_residual"] == false);
  CHECK(j["fc_norm"] == true);
  CHECK(j["transformer_layer_config"]["fc_norm"] == true);  // the peagle updater does not forward it
  CHECK(j["speculators_config"]["proposal_methods"][0]["speculative_tokens"] == 3);
  const auto t = model::load_safetensors((dir / "spec" / "model.safetensors").string());
  REQUIRE(t.count("mask_hidden"));
  CHECK(t.at("mask_hidden").sizes() == torch::IntArrayRef({1, 1, 48}));
  auto back = head::load_head((dir / "spec").string());
  CHECK((back.config.parallel_drafting && back.config.mask_token_id == 7 && back.config.num_layers == 2));
  CHECK(head::checkpoint_format(back.config) == head::HeadFormat::speculators);
  auto original = head.named_parameters();
  auto params = back.head->module().named_parameters();
  CHECK(params.size() == original.size());
  for (auto& p : params) {
    INFO(p.key());
    CHECK(torch::equal(p.value(), original[p.key()]));
  }
  CHECK_THROWS_WITH(head::export_head(head, head::HeadFormat::sglang, (dir / "sg").string()),
                    Catch::Contains("SGLang does not serve P-EAGLE") && Catch::Contains("speculators"));
  // mask_token_id outside the vocabulary is refused by name.
  auto bad = j;
  bad["mask_token_id"] = 40;
  CHECK_THROWS_WITH(head::head_config_from_json(bad, "config.json"), Catch::Contains("mask_token_id"));
}
