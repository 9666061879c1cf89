// Target checkpoints and configs: both transformers spellings, sharded folders, and the errors for
// bad checkpoints (truncated, wrong shape, missing or unexpected tensor, refused architecture/fields).
#include <torch/torch.h>
#include <catch2/catch.hpp>

#include <sys/stat.h>

#include <filesystem>

#include <nlohmann/json.hpp>

#include "eagle/head/export/io.h"
#include "eagle/model/safetensors.h"
#include "eagle/target/target.h"
#include "eagle/util/error.h"
#include "helpers.h"
#include "target_fixtures.h"

using namespace eagle;
using eagle::target::TargetConfig;
using eagle::target::TargetModel;
namespace fs = std::filesystem;

namespace {

const fs::path kTinyLlama = fs::path(EAGLE_SOURCE_DIR) / "tests/fixtures/models/tiny-llama";

nlohmann::json tiny_config() { return nlohmann::json::parse(test::read_file(kTinyLlama / "config.json")); }

// A copy of tiny-llama in dir with the given config and tensors.
void write_model(const fs::path& dir, const nlohmann::json& config, const std::map<std::string, torch::Tensor>& t) {
  test::write_file(dir / "config.json", config.dump(2));
  model::save_safetensors((dir / "model.safetensors").string(), t);
}

std::string load_error(const fs::path& dir) {
  try {
    TargetModel::load(dir.string(), torch::kFloat32, torch::kCPU);
  } catch (const Error& e) {
    return e.format();
  }
  FAIL("no error loading " << dir);
  return "";
}

using test::config_error;

}  // namespace

TEST_CASE("target config: transformers 4.x spelling (rope_theta, rope_scaling, torch_dtype)", "[target]") {
  auto c = TargetConfig::from_json_file(std::string(EAGLE_SOURCE_DIR) + "/tests/fixtures/configs/llama31-4x.json");
  CHECK(c.architecture == "LlamaForCausalLM");
  CHECK(c.head_dim == 128);
  CHECK(c.num_key_value_heads == 8);
  CHECK(c.rope.type == "llama3");
  CHECK(c.rope.theta == 500000.0);
  CHECK(c.rope.factor == 8.0);
  CHECK(c.rope.original_max_position_embeddings == 8192);
  CHECK(c.rope.high_freq_factor == 4.0);
  CHECK(c.dtype == "bfloat16");
  CHECK(c.eos_token_ids == std::vector<std::int64_t>{128001, 128008, 128009});
  CHECK(c.bos_token_id == 128000);
  CHECK_FALSE(c.tie_word_embeddings);
}

TEST_CASE("target config: transformers 5.x spelling and family layouts", "[target]") {
  auto base = std::string(EAGLE_SOURCE_DIR) + "/tests/fixtures/models/";
  auto l3 = TargetConfig::from_json_file(base + "tiny-llama3/config.json");
  CHECK(l3.rope.type == "llama3");
  CHECK(l3.rope.theta == 500000.0);
  CHECK(l3.rope.original_max_position_embeddings == 16);
  CHECK(l3.tie_word_embeddings);
  CHECK(l3.dtype == "float32");
  CHECK(l3.eos_token_ids == std::vector<std::int64_t>{2, 3});
  auto q2 = TargetConfig::from_json_file(base + "tiny-qwen2/config.json");
  CHECK(q2.attention.bias);
  CHECK_FALSE(q2.attention.o_bias);
  CHECK(q2.rope.theta == 1000000.0);
  auto q3 = TargetConfig::from_json_file(base + "tiny-qwen3/config.json");
  CHECK(q3.attention.qk_norm);
  CHECK(q3.head_dim == 20);
  auto mi = TargetConfig::from_json_file(base + "tiny-mistral/config.json");
  CHECK(mi.model_type == "mistral");
  CHECK(mi.head_dim == 12);
}

TEST_CASE("target config: fields that change the math are refused by name", "[target]") {
  test::TempDir dir;
  auto c = tiny_config();
  SECTION("architecture") {
    c["architectures"] = {"GemmaForCausalLM"};
    CHECK_THAT(config_error(dir, c), Catch::Contains("\"architectures\"") && Catch::Contains("GemmaForCausalLM") &&
                                         Catch::Contains("unsupported architecture"));
  }
  SECTION("rope type") {
    c["rope_parameters"] = {{"rope_type", "mrope"}, {"rope_theta", 10000.0}, {"factor", 4.0}};
    CHECK_THAT(config_error(dir, c), Catch::Contains("rope_parameters.rope_type") && Catch::Contains("mrope"));
  }
  SECTION("4.x rope_scaling type") {
    c.erase("rope_parameters");
    c["rope_theta"] = 10000.0;
    c["rope_scaling"] = {{"type", "mrope"}, {"factor", 4.0}};
    CHECK_THAT(config_error(dir, c), Catch::Contains("rope_scaling.rope_type") && Catch::Contains("mrope"));
    c["rope_scaling"] = {{"type", "longrope"},
                         {"factor", 4.0},
                         {"original_max_position_embeddings", 64},
                         {"short_factor", {1.0, 1.0}},
                         {"long_factor", {2.0, 2.0}}};
    CHECK_THAT(config_error(dir, c), Catch::Contains("rope_scaling.short_factor") && Catch::Contains("8 factors"));
  }
  SECTION("activation") {
    c["hidden_act"] = "gelu";
    CHECK_THAT(config_error(dir, c), Catch::Contains("\"hidden_act\"") && Catch::Contains("gelu"));
  }
  SECTION("sliding windows: a sliding layer without a window") {
    c["layer_types"] = {"full_attention", "sliding_attention", "full_attention", "full_attention"};
    CHECK_THAT(config_error(dir, c), Catch::Contains("\"sliding_window\"") && Catch::Contains("need a window"));
  }
  SECTION("mlp bias") {
    c["mlp_bias"] = true;
    CHECK_THAT(config_error(dir, c), Catch::Contains("\"mlp_bias\""));
  }
  SECTION("model_type mismatch") {
    c["model_type"] = "qwen2";
    CHECK_THAT(config_error(dir, c), Catch::Contains("\"model_type\"") && Catch::Contains("expected llama"));
  }
  SECTION("missing size") {
    c.erase("hidden_size");
    CHECK_THAT(config_error(dir, c), Catch::Contains("\"hidden_size\"") && Catch::Contains("missing"));
  }
}

TEST_CASE("target checkpoint: bad tensors are named", "[target]") {
  test::TempDir dir;
  auto tensors = model::load_safetensors((kTinyLlama / "model.safetensors").string());
  SECTION("truncated file") {
    fs::copy_file(kTinyLlama / "config.json", dir / "config.json");
    auto raw = test::read_file(kTinyLlama / "model.safetensors");
    test::write_file(dir / "model.safetensors", raw.substr(0, raw.size() / 2));
    CHECK_THAT(load_error(dir.path()), Catch::Contains("model.safetensors") && Catch::Contains("truncated"));
  }
  SECTION("bad header") {
    fs::copy_file(kTinyLlama / "config.json", dir / "config.json");
    test::write_file(dir / "model.safetensors", std::string("\x10\0\0\0\0\0\0\0", 8) + "{\"oops\": [1, 2,}");
    CHECK_THAT(load_error(dir.path()), Catch::Contains("model.safetensors") && Catch::Contains("not valid JSON"));
  }
  SECTION("wrong shape") {
    tensors["model.layers.1.self_attn.k_proj.weight"] = torch::zeros({16, 64});
    write_model(dir.path(), tiny_config(), tensors);
    CHECK_THAT(load_error(dir.path()),
               Catch::Contains("wrong shape") &&
                   Catch::Contains("model.layers.1.self_attn.k_proj.weight [16, 64] (expected [32, 64])"));
  }
  SECTION("missing and unexpected tensors") {
    tensors.erase("model.layers.3.mlp.up_proj.weight");
    tensors["model.layers.9.extra.weight"] = torch::zeros({2});
    write_model(dir.path(), tiny_config(), tensors);
    CHECK_THAT(load_error(dir.path()), Catch::Contains("1 missing: model.layers.3.mlp.up_proj.weight") &&
                                           Catch::Contains("1 unexpected: model.layers.9.extra.weight"));
  }
  SECTION("integer weights") {
    tensors["model.norm.weight"] = torch::ones({64}, torch::kInt32);
    write_model(dir.path(), tiny_config(), tensors);
    CHECK_THAT(load_error(dir.path()), Catch::Contains("model.norm.weight") && Catch::Contains("floating point"));
  }
  SECTION("no weights") {
    fs::copy_file(kTinyLlama / "config.json", dir / "config.json");
    test::write_file(dir / "pytorch_model.bin", "pickle");
    CHECK_THAT(load_error(dir.path()), Catch::Contains("pytorch_model.bin") && Catch::Contains("never read"));
  }
  SECTION("missing folder") { CHECK_THAT(load_error(dir / "nope"), Catch::Contains("model folder not found")); }
  SECTION("a config that claims far more layers than the files hold fails before building anything") {
    auto config = tiny_config();
    config["num_hidden_layers"] = 1000;  // under the ceiling (1024; 10000000 is refused by the reader)
    write_model(dir.path(), config, tensors);
    auto r = test::run_cli("inspect --model_name_or_path " + dir.path().string());
    INFO(r.output);
    CHECK(r.exit_code == 3);
    CHECK_THAT(r.output, Catch::Contains("config.json") && Catch::Contains("num_hidden_layers") &&
                             Catch::Contains("at most 4") && Catch::Contains("1000"));
    CHECK(r.max_rss_kb < (1L << 20));  // well under 1 GiB: no per-layer list was built
  }
  SECTION("FIFOs are refused by name, never opened (opening one blocks)") {
    fs::copy_file(kTinyLlama / "config.json", dir / "config.json");
    REQUIRE(::mkfifo((dir / "model.safetensors").c_str(), 0600) == 0);
    CHECK_THAT(load_error(dir.path()), Catch::Contains("model.safetensors") && Catch::Contains("FIFO"));
  }
}

TEST_CASE("target checkpoint: sharded folders load like single files", "[target]") {
  test::TempDir dir;
  auto tensors = model::load_safetensors((kTinyLlama / "model.safetensors").string());
  std::map<std::string, torch::Tensor> one, two;
  nlohmann::json map = nlohmann::json::object();
  for (const auto& [name, t] : tensors) {
    const bool first = name.find("layers.0.") != std::string::npos || name.find("layers.1.") != std::string::npos;
    (first ? one : two)[name] = t;
    map[name] = first ? "model-00001-of-00002.safetensors" : "model-00002-of-00002.safetensors";
  }
  fs::copy_file(kTinyLlama / "config.json", dir / "config.json");
  model::save_safetensors((dir / "model-00001-of-00002.safetensors").string(), one);
  model::save_safetensors((dir / "model-00002-of-00002.safetensors").string(), two);
  nlohmann::json index = {{"metadata", {{"total_size", 0}}}, {"weight_map", map}};
  test::write_file(dir / "model.safetensors.index.json", index.dump());

  auto sharded = TargetModel::load(dir.path().string(), torch::kFloat32, torch::kCPU);
  auto single = TargetModel::load(kTinyLlama.string(), torch::kFloat32, torch::kCPU);
  CHECK(sharded.parameter_count() == single.parameter_count());
  CHECK(single.parameter_count() == 188992);  // transformers' count for tiny-llama
  auto ids = torch::tensor({5, 9, 300, 7}, torch::kInt64).unsqueeze(0);
  target::TargetBatch b{ids, torch::arange(4).unsqueeze(0), torch::zeros({1, 4}, torch::kInt64)};
  CHECK(torch::equal(sharded.forward(b, {}).final_hidden, single.forward(b, {}).final_hidden));

  // An index naming a tensor that its shard lacks.
  map["model.norm.weight"] = "model-00001-of-00002.safetensors";
  index["weight_map"] = map;
  test::write_file(dir / "model.safetensors.index.json", index.dump());
  CHECK_THAT(load_error(dir.path()), Catch::Contains("model-00001-of-00002.safetensors") &&
                                         Catch::Contains("tensor \"model.norm.weight\"") && Catch::Contains("lacks"));
}

TEST_CASE("eagle-train inspect prints and checks a target folder", "[target]") {
  auto r = test::run_cli("inspect --model_name_or_path " + kTinyLlama.string());
  CHECK(r.exit_code == 0);
  CHECK_THAT(r.output, Catch::Contains("LlamaForCausalLM") && Catch::Contains("188992") &&
                           Catch::Contains("aux layers:    [1, 2, 3]") && Catch::Contains("checkpoint:    ok"));
  auto j = test::run_cli("inspect --json --model_name_or_path " + kTinyLlama.string() +
                         " --target_dtype bfloat16 --aux_hidden_state_layer_ids 0,2,4");
  REQUIRE(j.exit_code == 0);
  auto parsed = nlohmann::json::parse(j.output.substr(j.output.find('{')));
  CHECK(parsed["architecture"] == "LlamaForCausalLM");
  CHECK(parsed["parameters"] == 188992);
  CHECK(parsed["dtype"] == "bfloat16");
  CHECK(parsed["checkpoint_dtype"] == "float32");
  CHECK(parsed["aux_hidden_state_layer_ids"] == nlohmann::json::array({0, 2, 4}));

  test::TempDir dir;
  auto c = tiny_config();
  c["architectures"] = {"PhiForCausalLM"};
  test::write_file(dir / "config.json", c.dump());
  auto bad = test::run_cli("inspect --model_name_or_path " + dir.path().string());
  CHECK(bad.exit_code == 3);
  CHECK_THAT(bad.output, Catch::Contains("PhiForCausalLM"));
}

TEST_CASE("eagle-train inspect names weights holding NaN", "[target]") {
  test::TempDir dir;
  auto tensors = model::load_safetensors((kTinyLlama / "model.safetensors").string());
  auto w = tensors.at("model.layers.2.mlp.down_proj.weight").clone();
  w[3][5] = std::nanf("");
  tensors["model.layers.2.mlp.down_proj.weight"] = w;
  write_model(dir.path(), tiny_config(), tensors);
  auto r = test::run_cli("inspect --model_name_or_path " + dir.path().string());
  CHECK(r.exit_code == 3);
  CHECK_THAT(r.output, Catch::Contains("NaN or Inf") && Catch::Contains("model.layers.2.mlp.down_proj.weight"));
}

TEST_CASE("generation end ids: config.json's eos ids, then generation_config.json's", "[target]") {
  test::TempDir dir;
  auto config = tiny_config();
  config["eos_token_id"] = {2, 3};
  test::write_file(dir / "config.json", config.dump());
  const auto c = TargetConfig::from_json_file((dir / "config.json").string());
  CHECK(target::generation_end_ids(dir.path().string(), c) == std::vector<std::int64_t>{2, 3});
  test::write_file(dir / "generation_config.json", R"({"eos_token_id": [3, 7], "temperature": 0.6})");
  CHECK(target::generation_end_ids(dir.path().string(), c) == std::vector<std::int64_t>{2, 3, 7});
  test::write_file(dir / "generation_config.json", R"({"eos_token_id": 9})");
  CHECK(target::generation_end_ids(dir.path().string(), c) == std::vector<std::int64_t>{2, 3, 9});
  test::write_file(dir / "generation_config.json", R"({"eos_token_id": ["</s>"]})");
  CHECK_THROWS_WITH(target::generation_end_ids(dir.path().string(), c),
                    Catch::Contains("generation_config.json") && Catch::Contains("eos_token_id"));
  test::write_file(dir / "generation_config.json", "{");
  CHECK_THROWS_WITH(target::generation_end_ids(dir.path().string(), c), Catch::Contains("not valid JSON"));
  // An id outside the vocabulary is refused by name; 2^64-1 never becomes -1.
  for (const char* id : {"18446744073709551615", "-1", "[2, 100000]"}) {
    INFO(id);
    test::write_file(dir / "generation_config.json", std::string(R"({"eos_token_id": )") + id + "}");
    CHECK_THROWS_WITH(target::generation_end_ids(dir.path().string(), c),
                      Catch::Contains("eos_token_id") && Catch::Contains("outside the vocabulary"));
  }
  auto huge = config;
  huge["eos_token_id"] = std::numeric_limits<std::uint64_t>::max();
  test::write_file(dir / "config.json", huge.dump());
  CHECK_THROWS_WITH(TargetConfig::from_json_file((dir / "config.json").string()),
                    Catch::Contains("config.json") && Catch::Contains("outside the vocabulary"));
  huge = config;
  huge["bos_token_id"] = std::numeric_limits<std::uint64_t>::max();
  test::write_file(dir / "config.json", huge.dump());
  CHECK_THROWS_WITH(TargetConfig::from_json_file((dir / "config.json").string()),
                    Catch::Contains("bos_token_id") && Catch::Contains("out of range"));
}

TEST_CASE("target config: each family's row gives its Family, MoE layout and refusal list", "[target]") {
  using target::Family;
  const std::vector<std::pair<std::string, Family>> fixtures{
      {"tiny-llama", Family::llama},     {"tiny-mistral", Family::mistral},     {"tiny-qwen2", Family::qwen2},
      {"tiny-qwen3", Family::qwen3},     {"tiny-qwen3-moe", Family::qwen3_moe}, {"tiny-mixtral", Family::mixtral},
      {"tiny-gpt-oss", Family::gpt_oss}, {"tiny-gemma2", Family::gemma2},       {"tiny-gemma3", Family::gemma3_text},
      {"tiny-phi3", Family::phi3},       {"tiny-mimo", Family::mimo},           {"tiny-gemma4", Family::gemma4_text},
      {"tiny-deepseek-v2", Family::deepseek_v2}, {"tiny-gemma4-moe", Family::gemma4_text}};
  for (const auto& [name, family] : fixtures) {
    INFO(name);
    const auto c = TargetConfig::from_model_dir((fs::path(EAGLE_SOURCE_DIR) / "tests/fixtures/models" / name).string());
    CHECK(c.family == family);
    CHECK(c.moe.enabled() == (family == Family::qwen3_moe || family == Family::mixtral || family == Family::gpt_oss ||
                              family == Family::deepseek_v2 ||
                              name == "tiny-gemma4-moe"));  // Gemma 4's by enable_moe_block
  }
  // The refusal lists every row's architecture, in the table's order.
  test::TempDir dir;
  auto c = tiny_config();
  c["architectures"] = {"FalconForCausalLM"};
  CHECK_THAT(config_error(dir, c),
             Catch::Contains("LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, MiMoForCausalLM, "
                             "Qwen3ForCausalLM, Qwen3MoeForCausalLM, MixtralForCausalLM, GptOssForCausalLM, "
                             "Gemma2ForCausalLM, Gemma3ForCausalLM, Phi3ForCausalLM, DeepseekV2ForCausalLM, "
                             "DeepseekV3ForCausalLM, Glm4MoeForCausalLM, Glm4MoeLiteForCausalLM, Qwen3NextForCausalLM, "
                             "Qwen3_5ForCausalLM, Qwen3_5ForConditionalGeneration, Qwen3_5MoeForCausalLM, "
                             "Qwen3_5MoeForConditionalGeneration, Gemma4ForCausalLM or "
                             "Gemma4ForConditionalGeneration"));
}

TEST_CASE("graphed_steps: eager on the CPU whatever the options ask", "[target]") {
  const auto m = TargetModel::load(kTinyLlama.string(), torch::kFloat32, torch::kCPU);
  CHECK(m.graph_safe());
  CHECK(m.graphed_steps(8, TargetModel::Step::training) == 0);
  CHECK(m.graphed_steps(8, TargetModel::Step::decoding) == 0);
}

TEST_CASE("target config: every size and RoPE number is bounded, the field named (issue 41 item 12)", "[target]") {
  test::TempDir dir;
  const std::vector<std::pair<std::string, nlohmann::json>> hostile{{"max_position_embeddings", std::int64_t{1} << 62},
                                                                    {"rms_norm_eps", 0},
                                                                    {"rms_norm_eps", -1e-6},
                                                                    {"rms_norm_eps", 1e300},
                                                                    {"vocab_size", std::int64_t{1} << 40},
                                                                    {"num_attention_heads", 1 << 20},
                                                                    {"intermediate_size", std::int64_t{1} << 40}};
  for (const auto& [key, value] : hostile) {
    INFO(key << " " << value.dump());
    auto c = tiny_config();
    c[key] = value;
    CHECK_THAT(config_error(dir, c), Catch::Contains("config.json") && Catch::Contains("\"" + key + "\"") &&
                                         Catch::Contains("out of range") && Catch::Contains(value.dump()));
  }
  const std::vector<std::pair<nlohmann::json, std::string>> rope{
      {{{"rope_type", "default"}, {"rope_theta", 1e300}}, "rope_parameters.rope_theta"},
      {{{"rope_type", "yarn"}, {"rope_theta", 1e4}, {"factor", 1e13}, {"original_max_position_embeddings", 64}},
       "rope_parameters.factor"},
      {{{"rope_type", "yarn"},
        {"rope_theta", 1e4},
        {"factor", 4.0},
        {"original_max_position_embeddings", 64},
        {"mscale", -1e300}},
       "rope_parameters.mscale"},
      {{{"rope_type", "linear"}, {"rope_theta", 1e4}, {"factor", 1e-300}}, "rope_parameters.factor"}};
  for (const auto& [params, field] : rope) {
    INFO(params.dump());
    auto c = tiny_config();
    c["rope_parameters"] = params;
    const auto e = config_error(dir, c);
    CHECK_THAT(e, Catch::Contains(field) && Catch::Contains("out of range"));
    CHECK_THAT(e, !Catch::Contains("0.000000"));  // 1e-300 is printed as itself
  }
}

TEST_CASE("target config: a target at every ceiling makes a head whose config.json reads back", "[target]") {
  // One set of limits for the target's reader and the head's: what train accepts, eval, export and
  // resume read back (the head's reader refused what the target's accepted before issue 41).
  test::TempDir dir;
  auto c = tiny_config();
  c["max_position_embeddings"] = std::int64_t{1} << 24;
  c["rms_norm_eps"] = 0.999;
  c["rope_parameters"] = {{"rope_type", "yarn"},      {"rope_theta", 1e12},
                          {"factor", 1e12},           {"original_max_position_embeddings", std::int64_t{1} << 24},
                          {"beta_fast", 1e12},        {"beta_slow", 1e-6},
                          {"attention_factor", 100.0}, {"mscale", -1e12},
                          {"mscale_all_dim", 1e12}};
  const auto t = test::parse_config(dir, c);
  const auto h = head::HeadConfig::from_target(t, 3, {}, 32);
  for (auto format : {head::HeadFormat::sglang, head::HeadFormat::speculators}) {
    const auto back = head::head_config_from_json(head::head_config_json(h, format), "config.json");
    CHECK(back.max_position_embeddings == t.max_position_embeddings);
    CHECK(back.rms_norm_eps == t.rms_norm_eps);
    CHECK(back.rope.theta == 1e12);
    CHECK(back.rope.factor == 1e12);
    CHECK(back.rope.mscale == -1e12);
    CHECK(back.rope.attention_factor == 100.0);  // the target's ceiling (it scales every score by its square)
    CHECK(back.target_num_hidden_layers == t.num_hidden_layers);
  }
}
