// A head's config.json read back: a field of the wrong JSON type ("ttt_steps": "3") is a named error
// (file, field path, expected type), never nlohmann's type_error (exit 1); aux layer ids outside
// [0, the target's layers] or not low -> high are refused by name.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <limits>

#include "eagle/head/export/io.h"
#include "eagle/util/error.h"
#include "head_fixtures.h"
#include "helpers.h"

using namespace eagle;
using nlohmann::json;

namespace {

// The error reading j, which must be an eagle::Error of kind input.
std::string read_error(const json& j) {
  try {
    head::head_config_from_json(j, "head/config.json");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::input);
    return e.format();
  } catch (const std::exception& e) {
    FAIL("not an eagle::Error: " << e.what());
  }
  FAIL("the config was read");
  return "";
}

}  // namespace

TEST_CASE("a head config field of the wrong JSON type is named with the type expected", "[head]") {
  const auto cfg = test::tiny_head_config(3);
  const json sglang = head::head_config_json(cfg, head::HeadFormat::sglang);
  const json spec = head::head_config_json(cfg, head::HeadFormat::speculators);
  const json eagle1 = head::head_config_json(test::tiny_head_config(1), head::HeadFormat::vllm_eagle1);
  CHECK(head::head_config_from_json(sglang, "c").ttt_steps == 3);  // the unedited configs read
  CHECK(head::head_config_from_json(spec, "c").ttt_steps == 3);
  CHECK(head::head_config_from_json(eagle1, "c").eagle_version == 1);
  struct Case {
    const json* base;
    json::json_pointer at;
    json value;
    std::string named, expected;
  };
  const std::vector<Case> cases = {
      {&sglang, json::json_pointer("/eagle_train/ttt_steps"), "3", "eagle_train.ttt_steps", "an integer"},
      {&sglang, json::json_pointer("/eagle_train/eagle_version"), "3", "eagle_train.eagle_version", "an integer"},
      {&sglang, json::json_pointer("/eagle_train/ttt_loss_decay"), "0.8", "eagle_train.ttt_loss_decay", "a number"},
      {&sglang, json::json_pointer("/eagle_train/fc_bias"), "no", "eagle_train.fc_bias", "true or false"},
      {&sglang, json::json_pointer("/eagle_train/target_dtype"), 16, "eagle_train.target_dtype", "a string"},
      {&sglang, json::json_pointer("/eagle_train/target_num_hidden_layers"), 2.5,
       "eagle_train.target_num_hidden_layers", "an integer"},
      {&sglang, json::json_pointer("/eagle_train"), "yes", "eagle_train", "an object"},
      {&eagle1, json::json_pointer("/eagle_train/eagle1_token_weight"), json::array({0.1}),
       "eagle_train.eagle1_token_weight", "a number"},
      {&spec, json::json_pointer("/speculators_config/proposal_methods/0/speculative_tokens"), "3",
       "speculators_config.proposal_methods[0].speculative_tokens", "an integer"},
      {&spec, json::json_pointer("/speculators_config/proposal_methods"), "greedy",
       "speculators_config.proposal_methods", "a list of objects"},
      {&spec, json::json_pointer("/speculators_config/verifier/name_or_path"), 7,
       "speculators_config.verifier.name_or_path", "a string"},
      {&spec, json::json_pointer("/speculators_config/verifier/architectures"), "LlamaForCausalLM",
       "speculators_config.verifier.architectures", "a list of strings"},
      {&spec, json::json_pointer("/speculators_config"), json::array(), "speculators_config", "an object"},
      {&spec, json::json_pointer("/transformer_layer_config/rms_norm_eps"), "1e-6",
       "transformer_layer_config.rms_norm_eps", "a number"},
      {&sglang, json::json_pointer("/architectures"), "LlamaForCausalLMEagle3", "architectures", "a list of strings"},
      {&sglang, json::json_pointer("/eagle_aux_hidden_state_layer_ids/0"), "2", "eagle_aux_hidden_state_layer_ids[0]",
       "an integer"},
      {&sglang, json::json_pointer("/rope_scaling"), "linear", "rope_scaling", "an object"},
      {&sglang, json::json_pointer("/hidden_act"), 1, "hidden_act", "a string"},
  };
  for (const auto& c : cases) {
    json j = *c.base;
    j[c.at] = c.value;
    INFO(c.at.to_string() << " = " << c.value.dump());
    CHECK_THAT(read_error(j), Catch::Contains("head/config.json") && Catch::Contains("key \"" + c.named + "\"") &&
                                  Catch::Contains("expected " + c.expected));
  }
  json no_layer = spec;
  no_layer.erase("transformer_layer_config");
  CHECK_THAT(read_error(no_layer), Catch::Contains("transformer_layer_config"));
}

TEST_CASE("a head's aux layer ids outside the target or not low -> high are refused by name", "[head]") {
  const auto cfg = test::tiny_head_config(3);  // a target of 8 layers
  const json good = head::head_config_json(cfg, head::HeadFormat::sglang);
  auto with = [&](const json& ids) {
    json j = good;
    j["eagle_aux_hidden_state_layer_ids"] = ids;
    return j;
  };
  CHECK(head::head_config_from_json(with({0, 4, 8}), "c").aux_layer_ids == std::vector<std::int64_t>{0, 4, 8});
  for (const json& ids : {json({2, 4, 9}), json({5, 4, 2}), json({-1, 4, 5}), json::array()}) {
    INFO(ids.dump());
    CHECK_THAT(read_error(with(ids)), Catch::Contains("key \"eagle_aux_hidden_state_layer_ids\"") &&
                                          Catch::Contains("[0, 8] (the target's layers), low -> high"));
  }
  // The SGLang spelling (output-of-layer ids under eagle_config) is checked the same way.
  json nested = good;
  nested.erase("eagle_aux_hidden_state_layer_ids");
  nested["eagle_config"]["eagle_aux_hidden_state_layer_ids"] = {3, 1, 4};
  CHECK_THAT(read_error(nested), Catch::Contains("eagle_aux_hidden_state_layer_ids"));
  // A head that does not record its target's layer count: only the order and the sign are known.
  json unknown = with({1, 2, 40});
  unknown["eagle_train"].erase("target_num_hidden_layers");
  CHECK(head::head_config_from_json(unknown, "c").aux_layer_ids.back() == 40);
}

TEST_CASE("export of a head config with a wrong JSON type exits 3 naming the field, not 1", "[head]") {
  test::TempDir tmp;
  auto cfg = test::tiny_head_config(3);
  auto head = head::make_head(cfg, test::tiny_vocab());
  const auto dir = tmp / "ckpt";
  std::filesystem::create_directories(dir);
  head::write_head_files(*head, head::checkpoint_format(cfg), dir.string());
  json j = json::parse(test::read_file(dir / "config.json"));
  j["eagle_train"]["ttt_steps"] = "3";
  test::write_file(dir / "config.json", j.dump());
  auto r = test::run_cli("export --checkpoint " + dir.string() + " --output " + (tmp / "out").string());
  INFO(r.output);
  CHECK(r.exit_code == 3);
  CHECK_THAT(r.output, Catch::Contains("config.json") && Catch::Contains("eagle_train.ttt_steps") &&
                           Catch::Contains("expected an integer, found \"3\""));
}

TEST_CASE("a head's mask_token_id out of range names the vocabulary, whatever the number (issue 41 item 17)",
          "[head]") {
  auto j = json::parse(
      test::read_file(std::filesystem::path(EAGLE_SOURCE_DIR) / "tests/fixtures/heads/peagle-ref/config.json"));
  for (const json& id : {json(64), json(-1), json(std::numeric_limits<std::uint64_t>::max())}) {
    INFO(id.dump());
    j["mask_token_id"] = id;
    CHECK_THAT(read_error(j), Catch::Contains("mask_token_id") && Catch::Contains("outside the vocabulary") &&
                                  Catch::Contains("[0, 64)") && !Catch::Contains("2^63"));
  }
}

TEST_CASE("a head's eagle_train.eagle_version must agree with its architecture (issue 53 L6)", "[head]") {
  // It was never read: a head edited to 2, or an EAGLE-3 head saying 1, evaluated and exported with exit 0.
  const json sglang = head::head_config_json(test::tiny_head_config(3), head::HeadFormat::sglang);
  const json spec = head::head_config_json(test::tiny_head_config(3), head::HeadFormat::speculators);
  const json eagle1 = head::head_config_json(test::tiny_head_config(1), head::HeadFormat::vllm_eagle1);
  REQUIRE(sglang["eagle_train"].contains("eagle_version"));
  for (const auto& [base, value] :
       std::vector<std::pair<json, int>>{{sglang, 1}, {spec, 1}, {eagle1, 3}, {sglang, 2}}) {
    json j = base;
    j["eagle_train"]["eagle_version"] = value;
    CHECK_THAT(read_error(j), Catch::Contains("eagle_train.eagle_version") &&
                                  Catch::Contains("contradicts the head's architecture") &&
                                  Catch::Contains("found " + std::to_string(value)));
  }
  json out_of_range = sglang;
  out_of_range["eagle_train"]["eagle_version"] = -1;
  CHECK_THAT(read_error(out_of_range), Catch::Contains("eagle_train.eagle_version"));
}
