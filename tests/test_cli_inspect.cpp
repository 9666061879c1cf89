// eagle-train inspect on the 2026 target families: the attention kind, each layer's type (a hybrid's
// Gated DeltaNet layers named linear_attention), the expert routing with its groups and shared experts,
// the latent-attention widths and the shipped MTP layers, in the JSON and the text report alike.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "helpers.h"

using nlohmann::json;
namespace test = eagle::test;

namespace {

std::string fixture(const std::string& name) { return std::string(EAGLE_SOURCE_DIR) + "/tests/fixtures/models/" + name; }

json inspect_json(const std::string& name) {
  auto r = test::run_cli("inspect --json --model_name_or_path " + fixture(name));
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  return json::parse(r.output.substr(r.output.find('{')));
}

}  // namespace

TEST_CASE("inspect names MLA, the grouped sigmoid router and the MTP layers of a DeepSeek-V3 target", "[cli]") {
  const auto j = inspect_json("tiny-deepseek-v3");
  CHECK(j["attention_kind"] == "mla");
  CHECK(j["routing"] == "sigmoid_grouped");
  CHECK(j["n_group"] == 4);
  CHECK(j["topk_group"] == 2);
  CHECK(j["routed_scaling_factor"] == 2.5);
  CHECK(j["q_lora_rank"] == 24);
  CHECK(j["kv_lora_rank"] == 32);
  CHECK(j["qk_nope_head_dim"] == 12);
  CHECK(j["qk_rope_head_dim"] == 8);
  CHECK(j["v_head_dim"] == 10);
  CHECK(j["mtp_layers"] == 1);
  CHECK(j["layer_types"] == json({"full_attention", "full_attention", "full_attention"}));
  auto r = test::run_cli("inspect --model_name_or_path " + fixture("tiny-deepseek-v3"));
  INFO(r.output);
  CHECK_THAT(r.output, Catch::Contains("attention:     mla,") && Catch::Contains("routing:       sigmoid_grouped") &&
                           Catch::Contains("top 2 of 4 groups, scaling 2.5") &&
                           Catch::Contains("kv_lora_rank 32") && Catch::Contains("mtp layers:    1 shipped"));
}

TEST_CASE("inspect names a hybrid target's linear-attention layers, gated attention and shared expert", "[cli]") {
  const auto j = inspect_json("tiny-qwen3-5-moe");
  CHECK(j["attention_kind"] == "gated");
  CHECK(j["layer_types"] == json({"linear_attention", "full_attention", "linear_attention", "linear_attention"}));
  CHECK(j["linear_attention_layers"] == 3);
  CHECK(j["routing"] == "softmax_topk");
  CHECK(j["shared_expert_gate"] == true);
  CHECK(j["shared_expert_intermediate_size"] == 24);
  CHECK(j["rotary_dim"].get<std::int64_t>() < j["head_dim"].get<std::int64_t>());  // partial RoPE
  auto r = test::run_cli("inspect --model_name_or_path " + fixture("tiny-qwen3-5-moe"));
  INFO(r.output);
  CHECK_THAT(r.output, Catch::Contains("attention:     gated,") && Catch::Contains("rotary dims") &&
                           Catch::Contains("linear attn:   Gated DeltaNet") &&
                           Catch::Contains("shared expert intermediate 24 with a sigmoid gate") &&
                           Catch::Contains("[\"linear_attention\", \"full_attention\""));
  // A dense target names neither routing nor layer types it does not have.
  const auto dense = inspect_json("tiny-llama");
  CHECK(dense["routing"].is_null());
  CHECK(dense["attention_kind"] == "gqa");
  CHECK(dense["mtp_layers"] == 0);
}
