// Gemma 4's mixture of experts (tiny-gemma4-moe, scripts/make_reference_fixtures.py; transformers'
// Gemma4TextRouter, Gemma4TextExperts): the config's MoE fields and their refusals, the router and the GELU
// experts of the kit (model/moe.h), the checkpoint's names and shapes, the parameter counts and inspect. Its
// parity with transformers on every forward path is in test_target_target.cpp and test_target_target_ragged.cpp,
// its tree verification in test_target_target_gemma4.cpp.
#include <torch/torch.h>
#include <catch2/catch.hpp>

#include <cmath>
#include <functional>

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

namespace {

std::string dir_of(const char* name) { return test::model_fixture(name).string(); }

std::map<std::string, torch::Tensor> tensors_of(const char* name) {
  return model::load_safetensors(dir_of(name) + "/model.safetensors");
}

// 4 layers of 8 experts of 3 x 48 x 16 weights, 2 of them per token.
constexpr std::int64_t kIdleExperts = 4 * (8 - 2) * 3 * 48 * 16;

}  // namespace

TEST_CASE("Gemma 4 MoE config: the router and experts beside the dense MLP in every layer", "[target]") {
  const auto c = TargetConfig::from_model_dir(dir_of("tiny-gemma4-moe"));
  CHECK(c.family == target::Family::gemma4_text);
  CHECK(c.gemma4.enabled);
  REQUIRE(c.moe.enabled());
  CHECK(c.moe.num_experts == 8);
  CHECK(c.moe.experts_per_token == 2);  // top_k_experts
  CHECK(c.moe.intermediate_size == 16);
  CHECK(c.intermediate_size == 48);  // the dense MLP still runs
  CHECK(c.moe.routing == target::MoeRouting::scaled_softmax_topk);
  CHECK(c.moe.norm_topk_prob);
  CHECK(c.moe.routing_weights_fp32);
  CHECK(c.moe.sparse_layers == std::vector<bool>{true, true, true, true});
  CHECK(c.moe_router().input_norm_eps == c.rms_norm_eps);
  CHECK(c.gemma4.per_layer_input_dim == 0);  // as gemma-4-26B-A4B: no per-layer inputs, no KV sharing
  CHECK(c.gemma4.first_kv_shared == 4);
  CHECK_FALSE(TargetConfig::from_model_dir(dir_of("tiny-gemma4")).moe.enabled());  // enable_moe_block false

  test::TempDir dir;
  const auto base = test::fixture_config("tiny-gemma4-moe");
  auto refused = [&](const std::function<void(json&)>& change) {
    auto j = base;
    change(j);
    return test::config_error(dir, j);
  };
  // Gemma4TextConfig has no defaults for these (null, as tiny-gemma4's config.json writes them).
  CHECK_THAT(refused([](json& j) { j["num_experts"] = nullptr; }),
             Catch::Contains("\"num_experts\"") && Catch::Contains("required"));
  CHECK_THAT(refused([](json& j) { j.erase("top_k_experts"); }),
             Catch::Contains("\"top_k_experts\"") && Catch::Contains("required"));
  CHECK_THAT(refused([](json& j) { j["moe_intermediate_size"] = nullptr; }),
             Catch::Contains("\"moe_intermediate_size\"") && Catch::Contains("required"));
  CHECK_THAT(refused([](json& j) { j["top_k_experts"] = 9; }),
             Catch::Contains("\"top_k_experts\"") && Catch::Contains("[1, 8]"));
  // The dense model's config with enable_moe_block and its sizes reads as the MoE one.
  auto dense = test::fixture_config("tiny-gemma4");
  dense["enable_moe_block"] = true;
  dense["num_experts"] = 4;
  dense["top_k_experts"] = 1;
  dense["moe_intermediate_size"] = 8;
  const auto g = test::parse_config(dir, dense);
  CHECK(g.moe.enabled());
  CHECK(g.moe.sparse_layers == std::vector<bool>(5, true));
  CHECK(g.gemma4.per_layer_input_dim == 8);
}

TEST_CASE("Gemma 4's router: normed, scaled input; the top k renormalised, then times each expert's scale",
          "[target]") {
  torch::manual_seed(11);
  const std::int64_t N = 5, H = 8, E = 6, k = 2;
  const auto x = torch::randn({N, H}), w = torch::randn({E, H});
  const auto scale = torch::rand({H}) + 0.5, expert_scale = torch::tensor({0.5f, 0.75f, 1.0f, 1.25f, 1.5f, 2.0f});
  model::MoeRouter r;
  r.routing = model::MoeRouting::scaled_softmax_topk;
  r.num_experts = E;
  r.experts_per_token = k;
  r.input_norm_eps = 1e-6;
  const auto route = model::route_experts(r, x, w, {}, {}, scale, expert_scale);
  REQUIRE(route.chosen.sizes() == torch::IntArrayRef{N, k});
  CHECK(route.weights.scalar_type() == torch::kFloat32);
  // In double: x / rms(x) * scale * H^-1/2, softmax over all experts, the k best renormalised.
  const auto xd = x.to(torch::kFloat64);
  const auto h = xd * (xd.pow(2).mean(-1, true) + 1e-6).rsqrt() * scale.to(torch::kFloat64) / std::sqrt(double(H));
  const auto p = torch::softmax(torch::linear(h, w.to(torch::kFloat64)), -1);
  const auto [top, idx] = p.topk(k, -1);
  CHECK(torch::equal(route.chosen, idx));
  const auto want =
      top / top.sum(-1, true) * expert_scale.to(torch::kFloat64).index_select(0, idx.reshape({-1})).view({N, k});
  CHECK(test::max_err(route.weights, want) <= 1e-5);
  // The weights do not sum to 1: each is its expert's scale times its renormalised probability.
  CHECK((route.weights.sum(-1) - 1).abs().max().item<float>() > 1e-3);
  // The input is RMS-normed first: a scaled x routes the same.
  const auto scaled = model::route_experts(r, x * 7.0, w, {}, {}, scale, expert_scale);
  CHECK(torch::equal(scaled.chosen, route.chosen));
  CHECK(test::max_err(scaled.weights, route.weights) <= 1e-5);
  // Its scales are required.
  CHECK_THROWS_AS(model::route_experts(r, x, w), Error);
}

TEST_CASE("Gemma 4's experts: GELU (tanh) of the gate times up, weighted", "[target]") {
  torch::manual_seed(12);
  const std::int64_t H = 4, I = 3;
  const auto x = torch::randn({1, H});
  const model::ExpertWeights w{torch::randn({2, 2 * I, H}), {}, torch::randn({2, H, I}), {}};
  const model::MoeRoute route{torch::full({1, 1}, 0.5), torch::full({1, 1}, 1, torch::kInt64)};  // expert 1
  model::ExpertActivation gelu;
  gelu.gelu_tanh = true;
  const auto gu = torch::linear(x, w.gate_up[1]);
  const auto want = 0.5 * torch::linear(torch::gelu(gu.narrow(1, 0, I), "tanh") * gu.narrow(1, I, I), w.down[1]);
  CHECK(test::max_err(model::run_experts(x, route, w, gelu), want) <= 1e-6);
  CHECK(test::max_err(model::run_experts(x, route, w), want) > 1e-3);  // SiLU, the default, is another function
}

TEST_CASE("Gemma 4 MoE checkpoint: its tensors, parameter counts, refusals by name, inspect", "[target]") {
  const auto t = tensors_of("tiny-gemma4-moe");
  for (const char* n :
       {"router.proj.weight", "router.scale", "router.per_expert_scale", "experts.gate_up_proj", "experts.down_proj",
        "pre_feedforward_layernorm_2.weight", "post_feedforward_layernorm_1.weight",
        "post_feedforward_layernorm_2.weight", "mlp.gate_proj.weight"})
    CHECK(t.count(std::string("model.layers.3.") + n) == 1);
  CHECK(t.at("model.layers.0.experts.gate_up_proj").sizes() == torch::IntArrayRef{8, 32, 48});  // [E, 2 I, H]
  auto m = TargetModel::load(dir_of("tiny-gemma4-moe"), torch::kFloat32, torch::kCPU);
  std::int64_t stored = 0;
  for (const auto& [name, x] : t) stored += x.numel();
  CHECK(m.parameter_count() == stored);  // tied: the file holds every parameter once
  CHECK(m.parameter_count() - m.active_parameter_count() == kIdleExperts);
  CHECK(m.non_finite_weights().empty());

  test::TempDir dir;
  const auto config = test::fixture_config("tiny-gemma4-moe");
  SECTION("a missing router scale is named") {
    auto u = t;
    u.erase("model.layers.2.router.scale");
    CHECK_THAT(test::model_load_error(dir.path(), config, u),
               Catch::Contains("1 missing: model.layers.2.router.scale"));
  }
  SECTION("experts in another layout are refused by shape") {
    auto u = t;
    u["model.layers.1.experts.gate_up_proj"] = u.at("model.layers.1.experts.gate_up_proj").transpose(1, 2).contiguous();
    CHECK_THAT(test::model_load_error(dir.path(), config, u),
               Catch::Contains("1 with a wrong shape: model.layers.1.experts.gate_up_proj"));
  }
  SECTION("without enable_moe_block the router and experts are unexpected") {
    auto j = config;
    j["enable_moe_block"] = false;
    CHECK_THAT(test::model_load_error(dir.path(), j, t),
               Catch::Contains("unexpected") && Catch::Contains("model.layers.0.experts.down_proj"));
  }
  SECTION("a non-finite expert scale is named") {
    auto u = t;
    u["model.layers.1.router.per_expert_scale"] = torch::full({8}, std::nan(""));
    test::write_file(dir / "config.json", config.dump(2));
    model::save_safetensors((dir / "model.safetensors").string(), u);
    const auto bad = TargetModel::load(dir.path().string(), torch::kFloat32, torch::kCPU).non_finite_weights();
    CHECK(bad == std::vector<std::string>{"model.layers.1.router.per_expert_scale"});
  }
  SECTION("inspect names the routing, the experts and the dense MLP beside them") {
    auto r = test::run_cli("inspect --json --model_name_or_path " + dir_of("tiny-gemma4-moe"));
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    const auto j = json::parse(r.output.substr(r.output.find('{')));
    CHECK(j["routing"] == "scaled_softmax_topk");
    CHECK(j["experts"] == 8);
    CHECK(j["experts_per_token"] == 2);
    CHECK(j["moe_intermediate_size"] == 16);
    CHECK(j["parameters"].get<std::int64_t>() - j["active_parameters"].get<std::int64_t>() == kIdleExperts);
    auto text = test::run_cli("inspect --model_name_or_path " + dir_of("tiny-gemma4-moe"));
    INFO(text.output);
    CHECK_THAT(text.output, Catch::Contains("8 per sparse layer, 2 per token") &&
                                Catch::Contains("scaled_softmax_topk") &&
                                Catch::Contains("dense MLP of intermediate 48 beside the experts"));
  }
}
