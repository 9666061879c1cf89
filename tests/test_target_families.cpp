// The dense families beyond Llama (Gemma 2/3, Phi-3/4), sliding windows in every family, partial
// rotary and longrope, and FP8 checkpoints: config fields in both transformers spellings and the
// named errors. The parity with transformers is in test_target_target.cpp with the other families.
#include <torch/torch.h>
#include <catch2/catch.hpp>

#include <filesystem>

#include <nlohmann/json.hpp>

#include "eagle/model/layers.h"
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

fs::path fixture(const std::string& name) { return test::model_fixture(name); }
json config_of(const std::string& name) { return test::fixture_config(name); }
TargetConfig parse(const test::TempDir& dir, const json& config) { return test::parse_config(dir, config); }
using test::config_error;

using Windows = std::vector<std::int64_t>;

}  // namespace

TEST_CASE("sliding windows per layer, as transformers' masks apply them in every family", "[target]") {
  test::TempDir dir;
  auto llama = config_of("tiny-llama");  // 4 layers
  SECTION("Mistral (and Mixtral, Phi-3): sliding_window in every layer") {
    auto c = llama;
    c["architectures"] = {"MistralForCausalLM"};
    c["model_type"] = "mistral";
    c["sliding_window"] = 64;
    CHECK(parse(dir, c).attention.layer_windows == Windows{64, 64, 64, 64});
    c["sliding_window"] = nullptr;
    CHECK(parse(dir, c).attention.layer_windows.empty());
  }
  SECTION("Qwen2 and Qwen3: use_sliding_window from max_window_layers on (4.x), or layer_types (5.x)") {
    auto c = llama;
    c["architectures"] = {"Qwen2ForCausalLM"};
    c["model_type"] = "qwen2";
    c["use_sliding_window"] = true;
    c["sliding_window"] = 32;
    c["max_window_layers"] = 2;
    CHECK(parse(dir, c).attention.layer_windows == Windows{0, 0, 32, 32});
    c["use_sliding_window"] = false;  // Qwen2.5's configs: a window that never applies
    CHECK(parse(dir, c).attention.layer_windows.empty());
    c["use_sliding_window"] = true;
    c["layer_types"] = {"sliding_attention", "full_attention", "full_attention", "sliding_attention"};
    CHECK(parse(dir, c).attention.layer_windows == Windows{32, 0, 0, 32});
  }
  SECTION("Gemma 3: every sliding_window_pattern-th layer is global (4.x), else layer_types") {
    auto c = config_of("tiny-gemma3");
    c.erase("layer_types");
    c["num_hidden_layers"] = 4;
    c["sliding_window_pattern"] = 2;
    CHECK(parse(dir, c).attention.layer_windows == Windows{4, 0, 4, 0});
    CHECK(parse(dir, config_of("tiny-gemma3")).attention.layer_windows == Windows{4, 4, 0, 4});
  }
  SECTION("layer types of the wrong kind or count") {
    auto c = llama;
    c["layer_types"] = {"full_attention"};
    CHECK_THAT(config_error(dir, c), Catch::Contains("\"layer_types\"") && Catch::Contains("4 entries"));
    c["layer_types"] = {"full_attention", "chunked_attention", "full_attention", "full_attention"};
    CHECK_THAT(config_error(dir, c), Catch::Contains("layer_types[1]") && Catch::Contains("chunked_attention"));
  }
}

TEST_CASE("Gemma, Phi-3 and RoPE fields in the 4.x and 5.x spellings", "[target]") {
  test::TempDir dir;
  SECTION("Gemma 3: per-layer-type RoPE (5.x) and rope_theta + rope_local_base_freq + rope_scaling (4.x)") {
    auto j = config_of("tiny-gemma3");
    const auto c5 = parse(dir, j);
    REQUIRE(c5.attention.local_rope);
    CHECK(c5.rope.type == "linear");
    CHECK(c5.rope.factor == 8.0);
    CHECK(c5.rope.theta == 1e6);
    CHECK(c5.attention.local_rope->type == "default");
    CHECK(c5.attention.local_rope->theta == 10000.0);
    CHECK((c5.norm_one_plus && c5.embed_scaled && c5.sandwich_norms && c5.attention.qk_norm));
    CHECK(c5.attention.scale == Approx(1.0 / std::sqrt(24.0)));
    CHECK(c5.hidden_act == "gelu_pytorch_tanh");
    j.erase("rope_parameters");
    j["rope_theta"] = 1e6;
    j["rope_local_base_freq"] = 10000.0;
    j["rope_scaling"] = {{"rope_type", "linear"}, {"factor", 8.0}};
    const auto c4 = parse(dir, j);
    REQUIRE(c4.attention.local_rope);
    CHECK(c4.rope.type == "linear");
    CHECK(c4.rope.factor == 8.0);
    CHECK(c4.attention.local_rope->theta == 10000.0);
    CHECK(c4.attention.local_rope->type == "default");
    j["use_bidirectional_attention"] = true;
    CHECK_THAT(config_error(dir, j), Catch::Contains("use_bidirectional_attention"));
  }
  SECTION("Gemma 2: soft caps on scores and logits") {
    const auto j = config_of("tiny-gemma2");
    const auto c = parse(dir, j);
    CHECK(c.attention.softcap == j["attn_logit_softcapping"].get<double>());
    CHECK(c.final_softcap == j["final_logit_softcapping"].get<double>());
    CHECK(c.attention.softcap > 0);
    CHECK(c.final_softcap > 0);
    CHECK(!c.attention.qk_norm);
  }
  SECTION("Phi-3: fused checkpoint, partial rotary, longrope (and its old name su)") {
    auto j = config_of("tiny-phi3");
    const auto c = parse(dir, j);
    CHECK(c.fused_checkpoint);
    CHECK(c.rope.type == "longrope");
    CHECK(c.rope.head_dim == 12);  // 0.75 of 16
    CHECK(c.rope.short_factor.size() == 6);
    CHECK(c.rope.original_max_position_embeddings == 8);
    auto old = j;
    old["rope_parameters"]["rope_type"] = "su";
    CHECK(parse(dir, old).rope.type == "longrope");
    auto bad = j;
    bad["rope_parameters"]["long_factor"] = {1.0, 2.0};
    CHECK_THAT(config_error(dir, bad), Catch::Contains("long_factor") && Catch::Contains("6 factors"));
    bad = j;
    bad["rope_parameters"]["partial_rotary_factor"] = 0.1;  // 1.6 rotary features
    CHECK_THAT(config_error(dir, bad), Catch::Contains("partial_rotary_factor"));
  }
}

TEST_CASE("longrope and partial rotary: frequencies, the attention factor and the per-sample switch", "[target]") {
  model::RopeConfig r{.head_dim = 8,
                      .theta = 10000.0,
                      .type = "longrope",
                      .factor = 4.0,
                      .original_max_position_embeddings = 16,
                      .max_position_embeddings = 64};
  r.short_factor = {1.0, 1.5, 2.0, 3.0};
  r.long_factor = {2.0, 4.0, 8.0, 16.0};
  auto base = 1.0 / torch::pow(torch::tensor(10000.0), torch::arange(0, 8, 2).to(torch::kFloat64) / 8.0);
  auto expect_short = (base / torch::tensor({1.0, 1.5, 2.0, 3.0}, torch::kFloat64)).to(torch::kFloat32);
  auto expect_long = (base / torch::tensor({2.0, 4.0, 8.0, 16.0}, torch::kFloat64)).to(torch::kFloat32);
  CHECK(torch::allclose(model::rope_inv_freq(r), expect_short, 1e-6, 0));
  CHECK(torch::allclose(model::rope_inv_freq(r, 17), expect_long, 1e-6, 0));
  CHECK(torch::allclose(model::rope_inv_freq_long(r), expect_long, 1e-6, 0));
  CHECK(model::rope_attention_factor(r) == Approx(std::sqrt(1.0 + std::log(4.0) / std::log(16.0))));
  // Partial rotary: cos/sin of 4 features turn the first 4 of 6; the last 2 pass unchanged.
  auto x = torch::randn({1, 2, 3, 6});
  auto [cos, sin] = model::rope_cos_sin(torch::tensor({0.5f, 0.25f}), torch::arange(3).unsqueeze(0), torch::kFloat32);
  auto y = model::apply_rope(x, cos, sin);
  CHECK(torch::equal(y.narrow(-1, 4, 2), x.narrow(-1, 4, 2)));
  CHECK(torch::allclose(y.narrow(-1, 0, 4), model::apply_rope(x.narrow(-1, 0, 4).contiguous(), cos, sin)));
}

TEST_CASE("FP8 checkpoints: block scales named with the weights, other FP8 layouts refused", "[target]") {
  test::TempDir dir;
  const auto cfg = config_of("tiny-qwen3-fp8");
  const auto c = parse(dir, cfg);
  CHECK(c.quant.fp8_block == std::vector<std::int64_t>{16, 16});
  auto t = model::load_safetensors((fixture("tiny-qwen3-fp8") / "model.safetensors").string());
  const std::string w = "model.layers.1.mlp.down_proj.weight";
  REQUIRE(t.at(w).scalar_type() == torch::kFloat8_e4m3fn);
  auto load_error = [&](const std::map<std::string, torch::Tensor>& tensors, const json& config) {
    return test::model_load_error(dir.path(), config, tensors);
  };
  SECTION("a missing block scale") {
    auto u = t;
    u.erase(w + "_scale_inv");
    CHECK_THAT(load_error(u, cfg), Catch::Contains("1 missing: " + w + "_scale_inv"));
  }
  SECTION("a block scale of the wrong shape") {
    auto u = t;
    u[w + "_scale_inv"] = torch::ones({4, 4});
    CHECK_THAT(load_error(u, cfg), Catch::Contains(w + "_scale_inv [4, 4] (expected"));
  }
  SECTION("an FP8 weight stored as another dtype") {
    auto u = t;
    u[w] = t.at(w).to(torch::kFloat32);
    CHECK_THAT(load_error(u, cfg), Catch::Contains(w) && Catch::Contains("float8_e4m3fn"));
  }
  SECTION("hostile but finite block scales: negative, zero, overflowing (issue 41 item 9)") {
    for (const float bad : {-0.01f, 0.0f, 3e38f}) {
      INFO(bad);
      auto u = t;
      auto s = t.at(w + "_scale_inv").clone();
      s[0][1] = bad;
      u[w + "_scale_inv"] = s;
      const auto e = load_error(u, cfg);
      CHECK_THAT(e, Catch::Contains(dir.path().string()) && Catch::Contains(w));
      CHECK_THAT(e, Catch::Contains(bad > 1 ? "overflow" : "positive and finite"));
    }
  }
  SECTION("per-tensor FP8 and e5m2 are refused by name") {
    auto j = cfg;
    j["quantization_config"].erase("weight_block_size");
    CHECK_THAT(config_error(dir, j), Catch::Contains("quantization_config.weight_block_size"));
    j = cfg;
    j["quantization_config"]["fmt"] = "e5m2";
    CHECK_THAT(config_error(dir, j), Catch::Contains("quantization_config.fmt") && Catch::Contains("e5m2"));
    j = cfg;
    j["quantization_config"]["quant_method"] = "awq";
    CHECK_THAT(config_error(dir, j), Catch::Contains("quantization_config.quant_method") && Catch::Contains("awq"));
  }
  SECTION("the dequantized weights are exactly e4m3 times the block's scale") {
    auto m = TargetModel::load(fixture("tiny-qwen3-fp8").string(), torch::kFloat32, torch::kCPU);
    // The same weights written dense give bit-identical logits.
    std::map<std::string, torch::Tensor> dense;
    for (const auto& [name, tensor] : t) {
      if (name.ends_with("_scale_inv")) continue;
      if (tensor.scalar_type() != torch::kFloat8_e4m3fn) {
        dense[name] = tensor;
        continue;
      }
      const auto s = t.at(name + "_scale_inv");
      auto d = tensor.to(torch::kFloat32).clone();
      for (std::int64_t i = 0; i < d.size(0); ++i)
        for (std::int64_t j = 0; j < d.size(1); j += 16)
          d[i].narrow(0, j, std::min<std::int64_t>(16, d.size(1) - j)).mul_(s[i / 16][j / 16]);
      dense[name] = d;
    }
    auto j = cfg;
    j.erase("quantization_config");
    test::write_file(dir / "config.json", j.dump(2));
    model::save_safetensors((dir / "model.safetensors").string(), dense);
    auto d = TargetModel::load(dir.path().string(), torch::kFloat32, torch::kCPU);
    const auto ids = torch::randint(3, 256, {1, 9});
    const target::TargetBatch b{ids, torch::arange(9).unsqueeze(0), torch::zeros({1, 9}, torch::kInt64)};
    CHECK(torch::equal(m.forward(b, {torch::arange(256), 64}).teacher_logits,
                       d.forward(b, {torch::arange(256), 64}).teacher_logits));
  }
}

TEST_CASE("longrope in the KV-cache forward switches per call as transformers' cache does", "[target]") {
  // tiny-phi3, original context 8: prompt b of 7 tokens is prefilled with the short factors, the
  // token at position 7 too (call length 8), every later call with the long ones; cached keys keep
  // the rotation of their call. transformers' greedy continuation through its cache does the same.
  auto m = TargetModel::load(fixture("tiny-phi3").string(), torch::kFloat32, torch::kCPU);
  auto ref = model::load_safetensors(std::string(EAGLE_SOURCE_DIR) + "/tests/fixtures/reference/tiny-phi3.safetensors");
  const auto ids = ref.at("b.input_ids"), greedy = ref.at("b.greedy"), logits = ref.at("b.greedy_logits");
  const auto T = ids.size(1), N = greedy.size(1);
  auto cache = m.new_cache(1, T + N);
  auto step = m.forward_cached(cache, ids).logits.select(1, T - 1);
  std::vector<torch::Tensor> got;
  for (std::int64_t i = 0; i < N; ++i) {
    INFO("step " << i);
    CHECK((step[0] - logits[i]).abs().max().item<double>() <= 1e-4);
    got.push_back(step.argmax(-1, true));
    if (i + 1 < N) step = m.forward_cached(cache, got.back()).logits.select(1, 0);
  }
  CHECK(torch::equal(torch::cat(got, 1), greedy));
}

TEST_CASE("config messages name the field at fault and print numbers as written (issue 41 item 17)", "[target]") {
  test::TempDir dir;
  SECTION("Gemma 2: a negative attn_logit_softcapping is named as itself, not as final_logit_softcapping") {
    auto j = config_of("tiny-gemma2");
    j["attn_logit_softcapping"] = -1.0;
    const auto e = config_error(dir, j);
    CHECK_THAT(e, Catch::Contains("\"attn_logit_softcapping\"") && !Catch::Contains("final_logit_softcapping"));
  }
  SECTION("one rule: a soft cap of 0 or null is none in every family") {
    auto j = config_of("tiny-gpt-oss");
    for (const nlohmann::json& value : {nlohmann::json(0), nlohmann::json(nullptr)}) {
      j["final_logit_softcapping"] = value;
      j["attn_logit_softcapping"] = value;
      CHECK(parse(dir, j).final_softcap == 0.0);
    }
    j["final_logit_softcapping"] = 30.0;  // a cap gpt-oss does not apply: refused
    CHECK_THAT(config_error(dir, j), Catch::Contains("\"final_logit_softcapping\"") && Catch::Contains("30"));
    auto g = config_of("tiny-gemma2");
    g["final_logit_softcapping"] = 0;
    CHECK(parse(dir, g).final_softcap == 0.0);
  }
  SECTION("sliding layers without a window: the value found is printed as written") {
    auto j = config_of("tiny-gpt-oss");
    j["sliding_window"] = 0;
    CHECK_THAT(config_error(dir, j), Catch::Contains("\"sliding_window\"") && Catch::Contains("found 0") &&
                                         Catch::Contains("0 and null mean none"));
    // null is "none" as 0 is, in every family that must slide (issue 53 L9): it took gpt-oss's default 128
    // and Gemma's 4096 silently, and Gemma's alternating layers took 0 as full attention.
    j["sliding_window"] = nullptr;
    CHECK_THAT(config_error(dir, j), Catch::Contains("\"sliding_window\"") && Catch::Contains("found null"));
    for (const nlohmann::json& value : {nlohmann::json(0), nlohmann::json(nullptr)}) {
      auto g = config_of("tiny-gemma2");
      g["sliding_window"] = value;
      CHECK_THAT(config_error(dir, g), Catch::Contains("\"sliding_window\"") && Catch::Contains("need a window"));
    }
    j.erase("sliding_window");  // absent: the family's default
    CHECK(parse(dir, j).attention.layer_windows.front() == 128);
  }
  SECTION("reader leftovers of round 4 (issue 53 L9): each refused by its field, not ending in NaN or ignored") {
    auto g = config_of("tiny-gemma2");
    g["final_logit_softcapping"] = 1e-300;  // 0 in fp32: x / 0
    CHECK_THAT(config_error(dir, g), Catch::Contains("\"final_logit_softcapping\"") && Catch::Contains("[1e-06"));
    auto y = config_of("tiny-qwen3-yarn");
    y["rope_parameters"]["beta_fast"] = 1.0;
    y["rope_parameters"]["beta_slow"] = 32.0;
    CHECK_THAT(config_error(dir, y), Catch::Contains("beta_fast") && Catch::Contains("more than beta_slow 32"));
    y = config_of("tiny-qwen3-yarn");
    y["rope_parameters"]["attention_factor"] = 1e12;  // scores times 1e24: NaN at step 1
    CHECK_THAT(config_error(dir, y), Catch::Contains("attention_factor") && Catch::Contains("[0, 100]"));
    y["rope_parameters"]["attention_factor"] = 1.2;
    CHECK(parse(dir, y).rope.attention_factor == 1.2);
    auto q = config_of("tiny-qwen3-fp8");
    q["quantization_config"]["modules_to_not_convert"] = "lm_head";  // a string, silently read as none before
    CHECK_THAT(config_error(dir, q),
               Catch::Contains("quantization_config.modules_to_not_convert") && Catch::Contains("a list of strings"));
  }
  SECTION("FP8 weight_block_size near 2^63 is refused with its range") {
    auto j = config_of("tiny-qwen3-fp8");
    j["quantization_config"]["weight_block_size"] = {std::int64_t{1} << 62, 16};
    CHECK_THAT(config_error(dir, j), Catch::Contains("quantization_config.weight_block_size") &&
                                         Catch::Contains("[1, 1048576]") && !Catch::Contains("[0, 0]"));
  }
}

TEST_CASE("MiMo runs as a Qwen2 target and hands the MTP head its last hidden state before the final norm",
          "[target]") {
  const auto c = TargetConfig::from_model_dir(fixture("tiny-mimo").string());
  CHECK(c.family == target::Family::mimo);
  CHECK(c.model_type == "mimo");
  CHECK(c.num_mtp_layers == 1);
  CHECK(c.attention.bias);
  CHECK_FALSE(c.attention.o_bias);
  // model.mtp_layers.0.* is in the checkpoint but not the target's: loaded without it, not refused.
  auto model = TargetModel::load(fixture("tiny-mimo").string(), torch::kFloat32, torch::kCPU);
  auto ref = model::load_safetensors(std::string(EAGLE_SOURCE_DIR) + "/tests/fixtures/reference/mtp-mimo.safetensors");
  model.set_aux_layer_ids({2});
  CHECK_FALSE(model.last_aux_pre_norm());
  target::TargetBatch batch;
  batch.input_ids = ref.at("input_ids");
  batch.position_ids = ref.at("position_ids");
  batch.document_ids = ref.at("document_ids");
  target::TeacherSpec teacher{torch::arange(c.vocab_size, torch::kInt64)};
  const auto post = model.forward(batch, teacher);
  CHECK(torch::equal(post.aux_hidden, post.final_hidden));  // hidden_states[L]: after the final norm
  model.set_last_aux_pre_norm(true);
  const auto out = model.forward(batch, teacher);
  // transformers' Qwen2 run per sample (the reference): the last layer's output, and the logits.
  CHECK(torch::allclose(out.aux_hidden, ref.at("hidden"), 1e-4, 1e-5));
  CHECK(torch::allclose(out.teacher_logits, ref.at("target_logits"), 1e-4, 1e-5));
  CHECK(torch::equal(out.target_argmax, ref.at("target_argmax")));
  // The decoding forward keeps the same state (sample 0 through the KV cache).
  auto cache = model.new_cache(1, 16);
  const auto step = model.forward_cached(cache, ref.at("input_ids").narrow(1, 0, 7));
  CHECK(torch::allclose(step.aux_hidden, ref.at("hidden").narrow(1, 0, 7), 1e-4, 1e-5));
}
