// The EAGLE-3 variants vLLM 0.32 serves (EAGLE-variants.md): EAGLE 3.1's fc_norm and norm_output,
// norm_before_fc, the Qwen3-style draft layer. Each against an independent PyTorch TTT forward
// (scripts/make_head_reference.py), drafting against the unroll, export and import round trips,
// and the formats that refuse a variant.
#include <torch/torch.h>
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include "eagle/head/eagle/eagle3_head.h"
#include "eagle/head/export/io.h"
#include "eagle/model/safetensors.h"
#include "eagle/util/error.h"
#include "head_fixtures.h"
#include "helpers.h"

using namespace eagle;

namespace {

const std::string kRoot = std::string(EAGLE_SOURCE_DIR) + "/tests/fixtures/";

void check_against_reference(const std::string& head_name, const std::string& ref_name) {
  auto loaded = head::load_head(kRoot + "heads/" + head_name);
  test::check_head_against_reference(*loaded.head, loaded.config,
                                     model::load_safetensors(kRoot + "reference/" + ref_name + ".safetensors"));
}

head::HeadConfig variant_config(bool fc_norm, bool norm_output, bool qk_norm, bool norm_before_fc) {
  auto c = test::tiny_head_config(3, 3);
  c.fc_norm = fc_norm;
  c.norm_output = norm_output;
  c.qk_norm = qk_norm;
  c.norm_before_fc = norm_before_fc;
  return c;
}

}  // namespace

TEST_CASE("EAGLE 3.1 with the Qwen3-style layer, and norm_before_fc, match an independent PyTorch forward", "[head]") {
  SECTION("fc_norm + norm_output + q/k norm (Eagle3Qwen3ForCausalLM)") {
    const auto c = head::read_head_folder_config(kRoot + "heads/eagle31-qwen3-ref");
    CHECK((c.fc_norm && c.norm_output && c.qk_norm && !c.norm_before_fc));
    check_against_reference("eagle31-qwen3-ref", "eagle31-qwen3-head");
  }
  SECTION("norm_before_fc") {
    const auto c = head::read_head_folder_config(kRoot + "heads/eagle3-nbf-ref");
    CHECK((c.norm_before_fc && !c.fc_norm && !c.norm_output && !c.qk_norm));
    check_against_reference("eagle3-nbf-ref", "eagle3-nbf-head");
  }
}

TEST_CASE("each variant drafts what its training-time-test unroll predicts", "[head]") {
  for (auto [fc_norm, norm_output, qk_norm, nbf] :
       {std::tuple{true, true, false, false}, {false, true, true, false}, {false, false, false, true}}) {
    INFO("fc_norm " << fc_norm << " norm_output " << norm_output << " qk_norm " << qk_norm << " nbf " << nbf);
    torch::manual_seed(6);
    auto target = test::tiny_target();
    head::Eagle3Head head(variant_config(fc_norm, norm_output, qk_norm, nbf), test::tiny_vocab());
    head.set_target_weights(target.embedding, target.lm_head);
    head.init_lm_head_from_target(target.lm_head);
    {
      torch::NoGradGuard ng;  // norms away from 1, so a skipped norm shows
      for (auto& p : head.named_parameters())
        if (p.key().find("norm") != std::string::npos) p.value().uniform_(0.5, 1.5);
    }
    auto feats = torch::randn({1, 6, 48});
    auto ids = torch::randint(0, 40, {1, 7}, torch::kInt64);
    auto cache = head.new_cache(1, 32);
    test::check_drafting_matches_unroll(head, cache, feats, ids);
  }
}

TEST_CASE(
    "variants export with every switch written and import back bit-exactly; SGLang refuses what it "
    "does not serve",
    "[head]") {
  test::TempDir dir;
  torch::manual_seed(2);
  auto target = test::tiny_target();
  head::Eagle3Head head(variant_config(true, true, true, false), test::tiny_vocab());
  head.set_target_weights(target.embedding, target.lm_head);
  head::export_head(head, head::HeadFormat::speculators, (dir / "spec").string(), target.embedding);
  const auto j = nlohmann::json::parse(test::read_file(dir / "spec" / "config.json"));
  CHECK(j["fc_norm"] == true);
  CHECK(j["norm_output"] == true);
  CHECK(j["norm_before_fc"] == false);
  CHECK(j["norm_before_residual"] == false);
  CHECK(j["transformer_layer_config"]["model_type"] == "qwen3");
  CHECK(j["transformer_layer_config"]["use_sliding_window"] == false);
  const auto t = model::load_safetensors((dir / "spec" / "model.safetensors").string());
  for (const char* name :
       {"fc_norm.0.weight", "fc_norm.2.weight", "layers.0.self_attn.q_norm.weight", "layers.0.self_attn.k_norm.weight"})
    CHECK(t.count(name));
  auto back = head::load_head((dir / "spec").string());
  CHECK((back.config.fc_norm && back.config.norm_output && back.config.qk_norm));
  auto original = head.named_parameters();
  for (auto& p : back.head->module().named_parameters()) {
    INFO(p.key());
    CHECK(torch::equal(p.value(), original[p.key()]));
  }
  CHECK_THROWS_WITH(head::export_head(head, head::HeadFormat::sglang, (dir / "sg").string()),
                    Catch::Contains("SGLang does not serve") && Catch::Contains("draft_layer"));
  // EAGLE 3.1 on a Llama layer is served by SGLang (PR #24663): written at the top level.
  head::Eagle3Head llama31(variant_config(true, true, false, false), test::tiny_vocab());
  llama31.set_target_weights(target.embedding, target.lm_head);
  head::export_head(llama31, head::HeadFormat::sglang, (dir / "sg31").string());
  const auto s = nlohmann::json::parse(test::read_file(dir / "sg31" / "config.json"));
  CHECK(s["fc_norm"] == true);
  CHECK(s["norm_output"] == true);
  CHECK(head::load_head((dir / "sg31").string()).config.fc_norm);
  // A speculators head that does not say norm_before_residual has it true: not what this tool trains.
  auto no_key = j;
  no_key.erase("norm_before_residual");
  CHECK_THROWS_WITH(head::head_config_from_json(no_key, "config.json"), Catch::Contains("norm_before_residual"));
}
