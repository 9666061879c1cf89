// A DFlash folder's config.json is read through the same bounded fields as the EAGLE and target readers
// (issue 53 item 3): sizes, counts, the block and RoPE within train's limits, named by key, and the file's
// shapes compared with the config before the head is allocated. Hostile values that hung eval and export
// (num_hidden_layers 1e9, 2^20 widths, block_size 1e6) or evaluated a wrong AR (rope_theta 0) are refused.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include <torch/torch.h>
#include <nlohmann/json.hpp>

#include "eagle/head/dflash/io.h"
#include "eagle/model/safetensors.h"
#include "eagle/util/error.h"
#include "helpers.h"

using namespace eagle;
using nlohmann::json;

namespace {

// What export_dflash writes for a two-layer draft of block 4 over a three-layer, 64-wide target.
json valid_config() {
  return json::parse(R"({
    "architectures": ["DFlashDraftModel"], "model_type": "qwen3", "vocab_size": 512, "hidden_size": 64,
    "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
    "head_dim": 16, "hidden_act": "silu", "rms_norm_eps": 1e-6, "rope_theta": 1000000.0, "rope_scaling": null,
    "max_position_embeddings": 2048, "attention_bias": false, "tie_word_embeddings": false,
    "layer_types": ["full_attention", "full_attention"], "block_size": 4, "num_target_layers": 3,
    "target_hidden_size": 64, "dflash_config": {"mask_token_id": 5, "target_layer_ids": [0, 1]}})");
}

std::string read_error(const json& j) {
  try {
    head::dflash_config_from_json(j, "draft/config.json");
  } catch (const Error& e) {
    return e.format();
  }
  return "";
}

}  // namespace

TEST_CASE("a DFlash config.json is read within train's limits, each refusal naming its key", "[head]") {
  const auto c = head::dflash_config_from_json(valid_config(), "draft/config.json");
  CHECK(c.num_layers == 2);
  CHECK(c.dflash_block_size == 4);
  CHECK(c.aux_layer_ids == std::vector<std::int64_t>{1, 2});

  struct Hostile {
    json::json_pointer key;
    json value;
    std::string named;
  };
  const std::int64_t big = std::int64_t{1} << 40;
  const std::vector<Hostile> cases{
      {json::json_pointer("/num_hidden_layers"), 1000000000, "key \"num_hidden_layers\""},
      {json::json_pointer("/num_hidden_layers"), 17, "an integer in [1, 16]"},
      {json::json_pointer("/hidden_size"), big, "key \"hidden_size\""},
      {json::json_pointer("/intermediate_size"), 0, "key \"intermediate_size\""},
      {json::json_pointer("/num_attention_heads"), std::int64_t{1} << 20, "key \"num_attention_heads\""},
      {json::json_pointer("/num_key_value_heads"), 3, "a divisor of num_attention_heads 4"},
      {json::json_pointer("/head_dim"), std::int64_t{1} << 20, "key \"head_dim\""},
      {json::json_pointer("/head_dim"), 0, "key \"head_dim\""},
      {json::json_pointer("/head_dim"), -16, "key \"head_dim\""},
      {json::json_pointer("/block_size"), 1000000, "an integer in [2, 64]"},
      {json::json_pointer("/block_size"), 1, "key \"block_size\""},
      {json::json_pointer("/dflash_config/block_size"), 8, "two block sizes"},
      {json::json_pointer("/rope_theta"), 1e300, "key \"rope_theta\""},
      {json::json_pointer("/rope_theta"), 0, "key \"rope_theta\""},
      {json::json_pointer("/rms_norm_eps"), 0, "key \"rms_norm_eps\""},
      {json::json_pointer("/max_position_embeddings"), big, "key \"max_position_embeddings\""},
      {json::json_pointer("/vocab_size"), big, "key \"vocab_size\""},
      {json::json_pointer("/dflash_config/mask_token_id"), 512, "key \"dflash_config.mask_token_id\""},
      {json::json_pointer("/dflash_config/target_layer_ids"), json::array({0, 3}), "target_layer_ids[1]"},
      {json::json_pointer("/dflash_config/target_layer_ids"), json::array(), "at least one target layer id"},
      {json::json_pointer("/dflash_config/target_layer_ids"), "0,1", "a list of integers"},
      {json::json_pointer("/layer_types"), json::array({"full_attention"}), "2 entries (num_hidden_layers)"},
      {json::json_pointer("/hidden_size"), "64", "wrong JSON type"},
  };
  for (const auto& h : cases) {
    INFO(h.key.to_string() << " = " << h.value.dump());
    auto j = valid_config();
    j[h.key] = h.value;
    const auto error = read_error(j);
    CHECK_THAT(error, Catch::Contains("draft/config.json") && Catch::Contains(h.named));
  }
}

TEST_CASE("a DFlash folder whose config.json is not its weights' is refused before the head is built", "[head]") {
  test::TempDir dir;
  // The weights of valid_config()'s draft (only the tensors the shape check reads need be right).
  std::map<std::string, torch::Tensor> tensors{
      {"fc.weight", torch::zeros({64, 128})},
      {"layers.1.self_attn.q_proj.weight", torch::zeros({64, 64})},
      {"layers.1.self_attn.k_proj.weight", torch::zeros({32, 64})},
      {"layers.1.mlp.gate_proj.weight", torch::zeros({128, 64})},
  };
  model::save_safetensors((dir / "model.safetensors").string(), tensors);
  // Within every limit, but 16384 wide: a head of gigabytes, refused from the file's header.
  auto wide = valid_config();
  wide["hidden_size"] = 16384;
  wide["intermediate_size"] = 65536;
  test::write_file(dir / "config.json", wide.dump());
  try {
    head::load_dflash_head(dir.path().string());
    FAIL("loaded");
  } catch (const Error& e) {
    CHECK_THAT(e.format(), Catch::Contains("does not match its weights") && Catch::Contains("fc.weight"));
  }
  // Four layers named, two in the file: the last layer's tensors are missing.
  auto deep = valid_config();
  deep["num_hidden_layers"] = 4;
  deep["layer_types"] = json::array({"full_attention", "full_attention", "full_attention", "full_attention"});
  test::write_file(dir / "config.json", deep.dump());
  try {
    head::load_dflash_head(dir.path().string());
    FAIL("loaded");
  } catch (const Error& e) {
    CHECK_THAT(e.format(), Catch::Contains("missing") && Catch::Contains("layers.3.self_attn.q_proj.weight"));
  }
}
