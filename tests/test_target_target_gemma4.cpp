// Gemma 4 targets (tiny-gemma4, scripts/make_reference_fixtures.py): what the config gives per layer,
// the refusals by name, the per-layer KV cache, tree verification (also of tiny-gemma4-moe, whose own cases
// are in test_target_target_gemma4_moe.cpp), and the multimodal wrapper read as its text model. Its parity
// with transformers on every forward path is in test_target_target.cpp and test_target_target_ragged.cpp
// with the other families.
#include <torch/torch.h>
#include <catch2/catch.hpp>

#include <functional>

#include <nlohmann/json.hpp>

#include "eagle/model/safetensors.h"
#include "eagle/target/target.h"
#include "helpers.h"
#include "target_fixtures.h"

using namespace eagle;
using eagle::target::TargetConfig;
using eagle::target::TargetModel;
using nlohmann::json;

namespace {

using I = std::vector<std::int64_t>;

std::string dir_of(const char* name) { return test::model_fixture(name).string(); }

}  // namespace

TEST_CASE("Gemma 4 config: per-layer geometry, KV sharing, per-layer inputs, proportional RoPE", "[target]") {
  const auto c = TargetConfig::from_model_dir(dir_of("tiny-gemma4"));
  CHECK(c.family == target::Family::gemma4_text);
  CHECK(c.gemma4.enabled);
  CHECK_FALSE(c.multimodal);
  CHECK(c.attention.layer_windows == I{4, 0, 4, 4, 0});
  CHECK(c.gemma4.layer_head_dims == I{16, 32, 16, 16, 32});  // per_layer_config (global_head_dim 32) on the full layers
  CHECK(c.gemma4.layer_kv_heads == I{2, 1, 2, 2, 1});        // num_global_key_value_heads 1 with attention_k_eq_v
  CHECK(c.gemma4.first_kv_shared == 3);
  CHECK(c.gemma4.kv_source == I{0, 1, 2, 2, 1});  // the last earlier layer of each type
  CHECK(c.layer_intermediate(2) == 48);
  CHECK(c.layer_intermediate(3) == 96);  // use_double_wide_mlp on the KV-shared layers
  CHECK(c.values_from_keys(1));
  CHECK_FALSE(c.values_from_keys(0));
  CHECK(c.gemma4.per_layer_input_dim == 8);
  CHECK(c.gemma4.per_layer_vocab == 256);
  CHECK(c.rope.head_dim == 32);
  CHECK(c.rope.theta == 1e6);
  CHECK(c.gemma4.rope_angles == 4);  // int(0.25 * 32 // 2) of 16 pairs turn
  REQUIRE(c.attention.local_rope.has_value());
  CHECK(c.attention.local_rope->head_dim == 16);
  CHECK(c.attention.local_rope->theta == 1e4);
  CHECK(c.attention.scale == 1.0);
  CHECK(c.final_softcap == 10.0);
  CHECK(c.norm_weight_fp32);
  CHECK_FALSE(c.norm_one_plus);
  CHECK((c.gemma4.value_norm && c.gemma4.layer_scalar && c.attention.qk_norm && c.sandwich_norms && c.embed_scaled));
  CHECK(c.tie_word_embeddings);

  // Without per_layer_config: global_head_dim (default 512) and num_global_key_value_heads on the full layers.
  test::TempDir dir;
  auto j = test::fixture_config("tiny-gemma4");
  j.erase("per_layer_config");
  j["global_head_dim"] = 64;
  auto g = test::parse_config(dir, j);
  CHECK(g.gemma4.layer_head_dims == I{16, 64, 16, 16, 64});
  CHECK(g.gemma4.layer_kv_heads == I{2, 2, 2, 2, 2});  // num_global_key_value_heads absent: num_key_value_heads
  j["attention_k_eq_v"] = false;
  j["num_global_key_value_heads"] = 1;  // read only with attention_k_eq_v
  CHECK(test::parse_config(dir, j).gemma4.layer_kv_heads == I{2, 2, 2, 2, 2});
  // The last layer is always full (transformers forces it), default layer types every sixth.
  auto k = test::fixture_config("tiny-gemma4");
  k["layer_types"] = {"sliding_attention", "full_attention", "sliding_attention", "sliding_attention",
                      "sliding_attention"};
  k.erase("per_layer_config");
  CHECK(test::parse_config(dir, k).attention.layer_windows == I{4, 0, 4, 4, 0});
}

TEST_CASE("Gemma 4 config: what is not implemented is refused by name", "[target]") {
  test::TempDir dir;
  const auto base = test::fixture_config("tiny-gemma4");
  auto refused = [&](const std::function<void(json&)>& change) {
    auto j = base;
    change(j);
    return test::config_error(dir, j);
  };
  CHECK_THAT(refused([](json& j) { j["use_bidirectional_attention"] = "all"; }),
             Catch::Contains("use_bidirectional_attention"));
  CHECK_THAT(refused([](json& j) { j["per_layer_config"]["1"]["intermediate_size"] = 8; }),
             Catch::Contains("per_layer_config.1.intermediate_size") && Catch::Contains("not supported"));
  CHECK_THAT(refused([](json& j) { j["vocab_size_per_layer_input"] = 128; }),
             Catch::Contains("vocab_size_per_layer_input"));
  CHECK_THAT(refused([](json& j) { j["rope_parameters"]["full_attention"]["rope_type"] = "yarn"; }),
             Catch::Contains("rope_parameters.full_attention.rope_type") && Catch::Contains("proportional"));
  CHECK_THAT(refused([](json& j) {
               j["rope_parameters"]["sliding_attention"] = {
                   {"rope_type", "proportional"}, {"partial_rotary_factor", 0.5}, {"rope_theta", 1e4}};
             }),
             Catch::Contains("rope_parameters.sliding_attention"));
  CHECK_THAT(refused([](json& j) { j["rope_parameters"].erase("sliding_attention"); }),
             Catch::Contains("rope_parameters.sliding_attention"));
  CHECK_THAT(refused([](json& j) { j["num_kv_shared_layers"] = 4; }), Catch::Contains("num_kv_shared_layers"));
  CHECK_THAT(refused([](json& j) { j["quantization_config"] = {{"quant_method", "fp8"}}; }),
             Catch::Contains("quantization_config.quant_method"));
  CHECK_THAT(refused([](json& j) { j["per_layer_config"]["3"] = {{"head_dim", 8}}; }),
             Catch::Contains("share their head_dim"));
  // Bidirectional attention among image tokens leaves text causal: accepted.
  auto vision = base;
  vision["use_bidirectional_attention"] = "vision";
  CHECK(test::parse_config(dir, vision).gemma4.enabled);
}

TEST_CASE("Gemma 4 KV cache: each layer's own widths; a draft tree's verification equals its chains", "[target]") {
  auto m = TargetModel::load(dir_of("tiny-gemma4"), torch::kFloat32, torch::kCPU);
  auto cache = m.new_cache(2, 16);
  REQUIRE(cache.keys.size() == 5);
  CHECK(cache.keys[0].sizes() == torch::IntArrayRef{2, 2, 16, 16});
  CHECK(cache.keys[1].sizes() == torch::IntArrayRef{2, 1, 16, 32});
  CHECK(cache.values[4].sizes() == torch::IntArrayRef{2, 1, 16, 32});
  CHECK(m.non_finite_weights().empty());

  for (const char* name : {"tiny-gemma4", "tiny-gemma4-moe"}) {
    INFO(name);
    const auto t = TargetModel::load(dir_of(name), torch::kFloat32, torch::kCPU);
    const auto ids = test::reference(name).at("a.input_ids");
    const auto prompt = ids.narrow(1, 0, 6), t0 = ids.narrow(1, 6, 1), t1 = ids.narrow(1, 7, 1);
    const auto t2 = ids.narrow(1, 8, 1);
    auto c = t.new_cache(1, 16);
    t.forward_cached(c, prompt);
    // t0 after the prompt, then t1 and t2 both after t0 (depths 0, 1, 1).
    const auto mask = torch::tensor({1, 0, 0, 1, 1, 0, 1, 0, 1}, torch::kBool).view({3, 3});
    auto tree = t.forward_tree(c, torch::cat({t0, t1, t2}, 1), torch::tensor({0, 1, 1}), mask);
    auto chain = [&](const torch::Tensor& last) {
      auto k = t.new_cache(1, 16);
      return t.forward_cached(k, torch::cat({prompt, t0, last}, 1)).logits.narrow(1, 6, 2);
    };
    const auto a = chain(t1), b = chain(t2);
    CHECK(test::max_err(tree.logits.select(1, 0), a.select(1, 0)) <= 1e-4);
    CHECK(test::max_err(tree.logits.select(1, 1), a.select(1, 1)) <= 1e-4);
    CHECK(test::max_err(tree.logits.select(1, 2), b.select(1, 1)) <= 1e-4);
  }
}

TEST_CASE("Gemma4ForConditionalGeneration is read as its text model", "[target]") {
  // The wrapper's layout: text_config, model.language_model.*, the towers under model.vision_tower.* and
  // model.embed_vision.* (not loaded), plus the k_proj a KV-shared layer may still store (transformers ignores it).
  test::TempDir dir;
  json j = {{"architectures", {"Gemma4ForConditionalGeneration"}},
            {"model_type", "gemma4"},
            {"text_config", test::fixture_config("tiny-gemma4")},
            {"image_token_id", 250},
            {"audio_token_id", 251},
            {"video_token_id", 252},
            {"dtype", "float32"}};
  j["text_config"].erase("architectures");
  std::map<std::string, torch::Tensor> tensors;
  for (auto& [name, t] : model::load_safetensors(dir_of("tiny-gemma4") + "/model.safetensors"))
    tensors["model.language_model." + name.substr(std::string("model.").size())] = t;
  tensors["model.vision_tower.encoder.weight"] = torch::zeros({4, 4});
  tensors["model.embed_vision.embedding_projection.weight"] = torch::zeros({48, 4});
  tensors["model.language_model.layers.3.self_attn.k_proj.weight"] = torch::zeros({32, 48});
  test::write_file(dir / "config.json", j.dump(2));
  model::save_safetensors((dir / "model.safetensors").string(), tensors);

  const auto c = TargetConfig::from_model_dir(dir.path().string());
  CHECK(c.family == target::Family::gemma4_text);
  CHECK(c.multimodal);
  CHECK(c.tie_word_embeddings);  // Gemma4Config's default
  I media;
  for (const auto& t : c.media_tokens) media.push_back(t.id);
  CHECK(media == I{250, 252, 251});  // image, video, audio
  CHECK(c.media_tokens.at(2).name == "audio_token_id");
  auto m = TargetModel::load(dir.path().string(), torch::kFloat32, torch::kCPU);
  const auto ref = test::reference("tiny-gemma4");
  auto out = m.forward(test::unpadded(ref.at("a.input_ids")), {torch::arange(c.vocab_size), 1024});
  CHECK(test::max_err(out.teacher_logits, ref.at("a.logits")) <= 1e-4);
  CHECK(m.parameter_count() == TargetModel::load(dir_of("tiny-gemma4"), torch::kFloat32, torch::kCPU).parameter_count());
}
