// DeepSeek-V3 and GLM-4.7-Flash (multi-head latent attention, the sigmoid router with grouped top-k,
// shared experts), DeepSeek-V2 (the same attention, the softmax router) and GLM-4.5 targets: their config
// fields and refusals, the MTP layers left unloaded, the decompressed KV cache, and tree verification. Their parity with transformers on the other paths
// (full, padded, packed, bf16, KV cache, greedy, chunks, ragged) runs with every family in
// test_target_target.cpp and test_target_target_ragged.cpp.
#include <torch/torch.h>
#include <catch2/catch.hpp>

#include <cmath>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "eagle/model/moe.h"
#include "eagle/model/safetensors.h"
#include "eagle/target/target.h"
#include "eagle/util/error.h"
#include "helpers.h"
#include "target_fixtures.h"

using namespace eagle;
using eagle::target::TargetConfig;
using eagle::target::TargetModel;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

using test::max_err;
using test::reference;

fs::path fixture(const std::string& name) { return test::model_fixture(name); }
json config_of(const std::string& name) { return test::fixture_config(name); }
TargetConfig parse(const test::TempDir& dir, const json& config) { return test::parse_config(dir, config); }
using test::config_error;

std::map<std::string, torch::Tensor> tensors_of(const std::string& name) {
  return model::load_safetensors((fixture(name) / "model.safetensors").string());
}

}  // namespace

TEST_CASE("DeepSeek-V3 configs: MLA widths, the softmax scale's mscale, the grouped router", "[target]") {
  test::TempDir dir;
  const auto j = config_of("tiny-deepseek-v3");
  const auto c = parse(dir, j);
  CHECK(c.family == target::Family::deepseek_v3);
  CHECK(c.mla());
  CHECK(c.attention.q_lora_rank == 24);
  CHECK(c.attention.kv_lora_rank == 32);
  CHECK(c.head_dim == 20);  // qk_nope_head_dim 12 + qk_rope_head_dim 8 (config.json's head_dim 8 is the RoPE's)
  CHECK(c.value_head_dim() == 10);
  CHECK(c.rope.head_dim == 8);
  CHECK(c.rope.type == "yarn");
  CHECK(c.attention.rope_interleave);
  // yarn_apply_mscale: qk_head_dim^-1/2 times (0.1 mscale_all_dim ln(factor) + 1)^2.
  const double mscale = 0.1 * 0.8 * std::log(4.0) + 1.0;
  CHECK(c.attention.scale == Approx(mscale * mscale / std::sqrt(20.0)).epsilon(1e-12));
  CHECK(c.moe.routing == target::MoeRouting::sigmoid_grouped);
  CHECK(c.moe.num_experts == 8);
  CHECK(c.moe.experts_per_token == 3);
  CHECK(c.moe.n_group == 4);
  CHECK(c.moe.topk_group == 2);
  CHECK(c.moe.routed_scaling_factor == 2.5);
  CHECK(c.moe.shared_intermediate_size == 32);  // two shared experts of 16
  CHECK(c.moe.sparse_layers == std::vector<bool>{false, true, true});
  CHECK(c.num_mtp_layers == 1);
  CHECK_FALSE(c.attention.bias);

  SECTION("q_lora_rank null (Moonlight) and absent (transformers' default 1536)") {
    const auto nolora = parse(dir, config_of("tiny-deepseek-v3-nolora"));
    CHECK(nolora.attention.q_lora_rank == 0);
    CHECK_FALSE(nolora.attention.rope_interleave);
    CHECK(nolora.attention.scale == Approx(1.0 / std::sqrt(20.0)).epsilon(1e-12));  // default RoPE: no mscale
    auto k = j;
    k.erase("q_lora_rank");
    CHECK(parse(dir, k).attention.q_lora_rank == 1536);
  }
  SECTION("Kimi-K2's model_type kimi_k2 is DeepSeek-V3's architecture") {
    auto k = j;
    k["model_type"] = "kimi_k2";
    CHECK(parse(dir, k).family == target::Family::deepseek_v3);
    k["model_type"] = "deepseek_v2";
    CHECK_THAT(config_error(dir, k), Catch::Contains("\"model_type\"") && Catch::Contains("deepseek_v3 or kimi_k2") &&
                                         Catch::Contains("deepseek_v2"));
  }
  SECTION("the original configs' router fields, when other than what transformers computes, are refused") {
    auto k = j;
    k["scoring_func"] = "sigmoid";
    k["topk_method"] = "noaux_tc";
    k["moe_layer_freq"] = 1;
    CHECK(parse(dir, k).moe.routing == target::MoeRouting::sigmoid_grouped);
    k["scoring_func"] = "softmax";
    CHECK_THAT(config_error(dir, k), Catch::Contains("\"scoring_func\"") && Catch::Contains("softmax"));
    k["scoring_func"] = "sigmoid";
    k["topk_method"] = "group_limited_greedy";
    CHECK_THAT(config_error(dir, k), Catch::Contains("\"topk_method\"") && Catch::Contains("group_limited_greedy"));
    k["topk_method"] = "noaux_tc";
    k["moe_layer_freq"] = 2;
    CHECK_THAT(config_error(dir, k), Catch::Contains("\"moe_layer_freq\""));
  }
  SECTION("group and head counts that transformers could not compute are refused by name") {
    auto k = j;
    k["n_group"] = 3;  // 8 experts do not split into 3 groups
    CHECK_THAT(config_error(dir, k), Catch::Contains("\"n_group\"") && Catch::Contains("8 experts in 3 groups"));
    k = j;
    k["num_experts_per_tok"] = 5;  // 2 groups of 2 experts hold 4 candidates
    CHECK_THAT(config_error(dir, k), Catch::Contains("\"num_experts_per_tok\"") && Catch::Contains("1..4"));
    k = j;
    k["topk_group"] = 5;
    CHECK_THAT(config_error(dir, k), Catch::Contains("\"topk_group\""));
    k = j;
    k["num_key_value_heads"] = 2;
    CHECK_THAT(config_error(dir, k), Catch::Contains("\"num_key_value_heads\"") && Catch::Contains("expected 4"));
    k = j;
    k["qk_rope_head_dim"] = 7;
    CHECK_THAT(config_error(dir, k), Catch::Contains("\"qk_rope_head_dim\""));
  }
  SECTION("FP8 releases of a mixture of experts are refused by name") {
    auto k = j;
    k["quantization_config"] = {{"quant_method", "fp8"}, {"fmt", "e4m3"}, {"weight_block_size", {128, 128}}};
    CHECK_THAT(config_error(dir, k), Catch::Contains("quantization_config.quant_method") && Catch::Contains("fp8"));
  }
}

TEST_CASE("GLM-4.5 configs: q/k/v bias without o_proj's, q/k norm, partial RoPE of 0.5 by default", "[target]") {
  test::TempDir dir;
  const auto j = config_of("tiny-glm4-moe");
  const auto c = parse(dir, j);
  CHECK(c.family == target::Family::glm4_moe);
  CHECK_FALSE(c.mla());
  CHECK(c.attention.bias);
  CHECK_FALSE(c.attention.o_bias);
  CHECK(c.attention.qk_norm);   // use_qk_norm: GLM-4.5's own field, not refused as another decoder's
  CHECK(c.rope.head_dim == 8);  // 16 x 0.5
  CHECK(c.moe.routing == target::MoeRouting::sigmoid_grouped);
  CHECK(c.moe.n_group == 2);
  CHECK(c.moe.topk_group == 1);
  CHECK(c.moe.shared_intermediate_size == 16);
  CHECK(c.moe.sparse_layers == std::vector<bool>{false, true, true});
  CHECK(c.num_mtp_layers == 1);
  auto k = j;
  k["rope_parameters"].erase("partial_rotary_factor");
  CHECK(parse(dir, k).rope.head_dim == 8);  // Glm4MoeConfig's default
  k["rope_parameters"]["partial_rotary_factor"] = 1.0;
  CHECK(parse(dir, k).rope.head_dim == 16);
  k = j;
  k["use_qk_norm"] = false;
  CHECK_FALSE(parse(dir, k).attention.qk_norm);
  k["sliding_window"] = 4;  // transformers' GLM-4.5 never slides
  CHECK(parse(dir, k).attention.layer_windows.empty());
}

TEST_CASE("GLM-4.7-Flash configs: DeepSeek-V3's attention, GLM-4.5's router, mlp_layer_types", "[target]") {
  test::TempDir dir;
  const auto j = config_of("tiny-glm4-moe-lite");
  const auto c = parse(dir, j);
  CHECK(c.family == target::Family::glm4_moe_lite);
  CHECK(c.mla());
  CHECK(c.head_dim == 20);
  CHECK(c.value_head_dim() == 24);  // wider than the queries and keys: they are padded in the training forward
  CHECK(c.rope.head_dim == 8);      // no partial rotary by default (GLM-4.5's 0.5 is not Glm4MoeLiteConfig's)
  CHECK(c.attention.rope_interleave);
  CHECK(c.moe.routing == target::MoeRouting::sigmoid_grouped);
  CHECK(c.moe.routed_scaling_factor == 1.8);
  CHECK(c.moe.sparse_layers == std::vector<bool>{true, false, true});
  auto k = j;
  k.erase("mlp_layer_types");      // transformers' default: the first layer dense
  k["first_k_dense_replace"] = 2;  // not read by Glm4MoeLiteConfig
  CHECK(parse(dir, k).moe.sparse_layers == std::vector<bool>{false, true, true});
  k["mlp_layer_types"] = {"sparse", "moe", "dense"};
  CHECK_THAT(config_error(dir, k), Catch::Contains("mlp_layer_types[1]") && Catch::Contains("moe"));
  k["mlp_layer_types"] = {"sparse"};
  CHECK_THAT(config_error(dir, k), Catch::Contains("\"mlp_layer_types\"") && Catch::Contains("3 entries"));
}

TEST_CASE("DeepSeek-V2 configs: MLA without q LoRA, the RoPE in fp32, the softmax router's two methods", "[target]") {
  test::TempDir dir;
  const auto j = config_of("tiny-deepseek-v2");
  const auto c = parse(dir, j);
  CHECK(c.family == target::Family::deepseek_v2);
  CHECK(c.mla());
  CHECK(c.attention.q_lora_rank == 0);  // q_lora_rank null, as DeepSeek-V2-Lite
  CHECK(c.head_dim == 20);
  CHECK(c.value_head_dim() == 10);
  CHECK(c.rope.type == "yarn");
  CHECK(c.attention.rope_interleave);
  CHECK(c.attention.rope_fp32);
  const double mscale = 0.1 * 0.707 * std::log(4.0) + 1.0;  // yarn_apply_mscale, as DeepSeek-V3's
  CHECK(c.attention.scale == Approx(mscale * mscale / std::sqrt(20.0)).epsilon(1e-12));
  CHECK(c.moe.routing == target::MoeRouting::softmax_grouped);
  CHECK(c.moe.routing_weights_fp32);
  CHECK_FALSE(c.moe.norm_topk_prob);
  CHECK(c.moe.num_experts == 8);
  CHECK(c.moe.experts_per_token == 3);
  CHECK(c.moe.n_group == 4);  // group_limited_greedy
  CHECK(c.moe.topk_group == 2);
  CHECK(c.moe.routed_scaling_factor == 2.0);
  CHECK(c.moe.shared_intermediate_size == 32);  // two shared experts of 16
  CHECK(c.moe.sparse_layers == std::vector<bool>{false, true, true});
  CHECK(c.num_mtp_layers == 0);

  SECTION("greedy (the default, DeepSeek-V2-Lite's) reads no groups; rope_interleave is not read") {
    auto k = j;
    k["topk_method"] = "greedy";
    auto g = parse(dir, k);
    CHECK(g.moe.routing == target::MoeRouting::softmax_grouped);
    CHECK(g.moe.n_group == 1);
    CHECK(g.moe.topk_group == 1);
    k.erase("topk_method");
    k["n_group"] = nullptr;
    k["topk_group"] = nullptr;
    k["num_experts_per_tok"] = 6;  // more than 2 groups of 2 hold: greedy chooses among all 8
    g = parse(dir, k);
    CHECK(g.moe.n_group == 1);
    CHECK(g.moe.experts_per_token == 6);
    k = j;
    k["rope_interleave"] = false;  // DeepseekV2Attention always turns interleaved pairs
    CHECK(parse(dir, k).attention.rope_interleave);
    k = j;
    k.erase("first_k_dense_replace");  // DeepseekV2Config's default: no dense layer
    CHECK(parse(dir, k).moe.sparse_layers == std::vector<bool>{true, true, true});
  }
  SECTION("what transformers' DeepSeek-V2 does not compute is refused by name") {
    auto k = j;
    k["topk_method"] = "noaux_tc";
    CHECK_THAT(config_error(dir, k), Catch::Contains("\"topk_method\"") && Catch::Contains("noaux_tc") &&
                                         Catch::Contains("DeepseekV3ForCausalLM"));
    k = j;
    k["scoring_func"] = "sigmoid";
    CHECK_THAT(config_error(dir, k), Catch::Contains("\"scoring_func\"") && Catch::Contains("sigmoid"));
    k = j;
    k["norm_topk_prob"] = true;
    CHECK_THAT(config_error(dir, k), Catch::Contains("\"norm_topk_prob\""));
    k = j;
    k["moe_layer_freq"] = 2;
    CHECK_THAT(config_error(dir, k), Catch::Contains("\"moe_layer_freq\""));
    k = j;
    k["mlp_bias"] = true;
    CHECK_THAT(config_error(dir, k), Catch::Contains("\"mlp_bias\""));
    k = j;
    k["n_group"] = 3;
    CHECK_THAT(config_error(dir, k), Catch::Contains("\"n_group\"") && Catch::Contains("8 experts in 3 groups"));
    k = j;
    k.erase("n_group");  // group_limited_greedy needs its groups
    CHECK_THAT(config_error(dir, k), Catch::Contains("\"n_group\"") && Catch::Contains("required"));
    k = j;
    k["num_experts_per_tok"] = 5;  // 2 groups of 2 experts hold 4 candidates
    CHECK_THAT(config_error(dir, k), Catch::Contains("\"num_experts_per_tok\"") && Catch::Contains("1..4"));
    k = j;
    k.erase("num_experts_per_tok");  // DeepseekV2Config has no default
    CHECK_THAT(config_error(dir, k), Catch::Contains("\"num_experts_per_tok\"") && Catch::Contains("required"));
  }
}

TEST_CASE("DeepSeek-V2's router: softmax scores, groups by their best, no renormalisation", "[target]") {
  // One token (H 1, x = 1): the logits are the router weights. Groups of 2: {3, 0} {2.5, 0.1} {2, 1.9} {-1, -1}.
  const auto logits = torch::tensor({3.0f, 0.0f, 2.5f, 0.1f, 2.0f, 1.9f, -1.0f, -1.0f});
  const auto x = torch::ones({1, 1}), w = logits.view({8, 1});
  model::MoeRouter r;
  r.routing = model::MoeRouting::softmax_grouped;
  r.num_experts = 8;
  r.experts_per_token = 3;
  r.routed_scaling_factor = 2.0;
  const auto p = torch::softmax(logits, 0);
  auto chosen_of = [](const model::MoeRoute& route) {
    const auto c = std::get<0>(route.chosen.squeeze(0).sort());
    return std::vector<std::int64_t>(c.data_ptr<std::int64_t>(), c.data_ptr<std::int64_t>() + c.numel());
  };
  auto weight_of = [](const model::MoeRoute& route, std::int64_t e) {
    const auto at = (route.chosen.squeeze(0) == e).nonzero().item<std::int64_t>();
    return route.weights.squeeze(0)[at].item<float>();
  };
  // greedy (1 group of 8): the three best of all.
  const auto greedy = model::route_experts(r, x, w);
  CHECK(chosen_of(greedy) == std::vector<std::int64_t>{0, 2, 4});
  // group_limited_greedy: the groups of 3 and 2.5 stay, so expert 3 (0.1) comes before expert 4 (2.0).
  r.n_group = 4;
  r.topk_group = 2;
  const auto limited = model::route_experts(r, x, w);
  CHECK(chosen_of(limited) == std::vector<std::int64_t>{0, 2, 3});
  CHECK(limited.weights.scalar_type() == torch::kFloat32);
  for (std::int64_t e : {0, 2, 3}) CHECK(weight_of(limited, e) == Approx(2.0 * p[e].item<float>()).epsilon(1e-6));
}

TEST_CASE("DeepSeek-V2 checkpoints: no correction bias, the shared experts named", "[target]") {
  auto t = tensors_of("tiny-deepseek-v2");
  REQUIRE(t.count("model.layers.1.mlp.gate.weight") == 1);
  CHECK(t.count("model.layers.1.mlp.gate.e_score_correction_bias") == 0);
  auto m = TargetModel::load(fixture("tiny-deepseek-v2").string(), torch::kFloat32, torch::kCPU);
  // A token runs 3 of the 8 routed experts (3 x 64 x 16 each) of the two sparse layers.
  CHECK(m.parameter_count() - m.active_parameter_count() == 2 * 5 * 3 * 64 * 16);
  test::TempDir dir;
  SECTION("a DeepSeek-V3 correction bias is unexpected") {
    auto u = t;
    u["model.layers.1.mlp.gate.e_score_correction_bias"] = torch::zeros({8});
    CHECK_THAT(test::model_load_error(dir.path(), config_of("tiny-deepseek-v2"), u),
               Catch::Contains("1 unexpected: model.layers.1.mlp.gate.e_score_correction_bias"));
  }
  SECTION("a missing shared expert is named") {
    auto u = t;
    u.erase("model.layers.2.mlp.shared_experts.up_proj.weight");
    CHECK_THAT(test::model_load_error(dir.path(), config_of("tiny-deepseek-v2"), u),
               Catch::Contains("model.layers.2.mlp.shared_experts.up_proj.weight"));
  }
}

TEST_CASE("DeepSeek-V3 and GLM-4.5 checkpoints: the MTP layers after the last are left unloaded", "[target]") {
  for (const char* name : {"tiny-deepseek-v3", "tiny-glm4-moe", "tiny-glm4-moe-lite"}) {
    INFO(name);
    auto t = tensors_of(name);
    REQUIRE(t.count("model.layers.3.eh_proj.weight") == 1);  // the fixture's MTP layer (num_hidden_layers 3)
    auto m = TargetModel::load(fixture(name).string(), torch::kFloat32, torch::kCPU);
    CHECK(m.config().num_hidden_layers == 3);
    test::TempDir dir;
    SECTION("a tensor past the MTP layers is refused") {
      auto u = t;
      u["model.layers.4.enorm.weight"] = torch::ones({64});
      CHECK_THAT(test::model_load_error(dir.path(), config_of(name), u),
                 Catch::Contains("1 unexpected: model.layers.4.enorm.weight"));
    }
    SECTION("without num_nextn_predict_layers' MTP layer its tensors are unexpected") {
      auto j = config_of(name);
      j["num_nextn_predict_layers"] = 0;
      CHECK_THAT(test::model_load_error(dir.path(), j, t), Catch::Contains("unexpected: model.layers.3."));
    }
    SECTION("a missing correction bias or shared expert is named") {
      auto u = t;
      u.erase("model.layers.2.mlp.gate.e_score_correction_bias");
      u.erase("model.layers.2.mlp.shared_experts.down_proj.weight");
      const auto e = test::model_load_error(dir.path(), config_of(name), u);
      CHECK_THAT(e, Catch::Contains("2 missing") &&
                        Catch::Contains("model.layers.2.mlp.gate.e_score_correction_bias") &&
                        Catch::Contains("model.layers.2.mlp.shared_experts.down_proj.weight"));
    }
  }
}

TEST_CASE("the MLA KV cache holds decompressed per-head keys and narrower values", "[target]") {
  auto m = TargetModel::load(fixture("tiny-deepseek-v3").string(), torch::kFloat32, torch::kCPU);
  auto cache = m.new_cache(2, 16);
  REQUIRE(cache.keys.size() == 3);
  CHECK(cache.keys[0].sizes() == torch::IntArrayRef{2, 4, 16, 20});
  CHECK(cache.values[0].sizes() == torch::IntArrayRef{2, 4, 16, 10});
  // The parameter counts: a token runs 3 of the 8 routed experts (3 x 64 x 16 each) of the two sparse layers.
  CHECK(m.parameter_count() - m.active_parameter_count() == 2 * 5 * 3 * 64 * 16);
}

TEST_CASE("MLA and GLM-4.5 targets: a draft tree's verification equals the chains it holds", "[target]") {
  for (const char* name :
       {"tiny-deepseek-v3", "tiny-deepseek-v3-nolora", "tiny-glm4-moe", "tiny-glm4-moe-lite", "tiny-deepseek-v2"}) {
    INFO(name);
    auto m = TargetModel::load(fixture(name).string(), torch::kFloat32, torch::kCPU);
    const auto ids = reference(name).at("a.input_ids");
    const auto prompt = ids.narrow(1, 0, 6), t0 = ids.narrow(1, 6, 1), t1 = ids.narrow(1, 7, 1),
               t2 = ids.narrow(1, 8, 1);
    // t0 after the prompt, then t1 and t2 both after t0 (depths 0, 1, 1).
    auto cache = m.new_cache(1, 16);
    m.forward_cached(cache, prompt);
    const auto mask = torch::tensor({1, 0, 0, 1, 1, 0, 1, 0, 1}, torch::kBool).view({3, 3});
    auto tree = m.forward_tree(cache, torch::cat({t0, t1, t2}, 1), torch::tensor({0, 1, 1}), mask);
    auto chain = [&](const torch::Tensor& last) {
      auto c = m.new_cache(1, 16);
      return m.forward_cached(c, torch::cat({prompt, t0, last}, 1)).logits.narrow(1, 6, 2);
    };
    const auto a = chain(t1), b = chain(t2);
    CHECK(max_err(tree.logits.select(1, 0), a.select(1, 0)) <= 1e-4);
    CHECK(max_err(tree.logits.select(1, 1), a.select(1, 1)) <= 1e-4);
    CHECK(max_err(tree.logits.select(1, 2), b.select(1, 1)) <= 1e-4);
    // A chain through forward_tree is forward_cached bit for bit.
    m.truncate(cache, 6);
    auto as_tree =
        m.forward_tree(cache, torch::cat({t0, t1}, 1), torch::tensor({0, 1}), torch::ones({2, 2}, torch::kBool).tril());
    auto c2 = m.new_cache(1, 16);
    m.forward_cached(c2, prompt);
    CHECK(torch::equal(as_tree.logits, m.forward_cached(c2, torch::cat({t0, t1}, 1)).logits));
  }
}
