// Mixture-of-experts targets (Qwen3-MoE, Mixtral, gpt-oss): their config fields, the checkpoint
// errors (top-k, missing experts, MXFP4 blocks), the host-sync-free forward, YaRN and inspect. The
// parity with transformers is in test_target_target.cpp with the dense families.
#include <torch/torch.h>
#include <catch2/catch.hpp>

#include <filesystem>

#include <nlohmann/json.hpp>

#include "eagle/model/layers.h"
#include "eagle/model/safetensors.h"
#include "eagle/target/target.h"
#include "eagle/util/error.h"
#include "helpers.h"
#include "host_sync_probe.h"
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
std::string load_error(const fs::path& dir, const json& config, const std::map<std::string, torch::Tensor>& t) {
  return test::model_load_error(dir, config, t);
}

std::map<std::string, torch::Tensor> tensors_of(const std::string& name) {
  return model::load_safetensors((fixture(name) / "model.safetensors").string());
}

double max_err(const torch::Tensor& a, const torch::Tensor& b) {
  return (a.to(torch::kFloat64) - b.to(torch::kFloat64)).abs().max().item<double>();
}

}  // namespace

TEST_CASE("MoE configs: experts, dense layers, routing and attention types per family", "[target]") {
  test::TempDir dir;
  SECTION("Qwen3-MoE: the Hub's num_experts, decoder_sparse_step and mlp_only_layers") {
    auto j = config_of("tiny-qwen3-moe");
    j.erase("num_local_experts");
    j["num_experts"] = 8;
    j["decoder_sparse_step"] = 2;
    j["mlp_only_layers"] = {3};
    const auto c = parse(dir, j);
    CHECK(c.moe.num_experts == 8);
    CHECK(c.moe.experts_per_token == 2);
    CHECK(c.moe.intermediate_size == 24);
    CHECK(c.moe.sparse_layers == std::vector<bool>{false, true, false, false});  // (l + 1) % 2 == 0, not 3
    CHECK(c.moe.routing == target::MoeRouting::softmax_topk);
    CHECK(c.moe.norm_topk_prob);
    CHECK(c.attention.qk_norm);
    CHECK(c.attention.layer_windows.empty());
    j["use_sliding_window"] = true;
    j["sliding_window"] = 6;
    CHECK(parse(dir, j).attention.layer_windows == std::vector<std::int64_t>{6, 6, 6, 6});
  }
  SECTION("Mixtral: every layer sparse, its sliding window in every layer, fp32 routing weights") {
    const auto c = parse(dir, config_of("tiny-mixtral"));
    CHECK(c.moe.sparse_layers == std::vector<bool>{true, true, true});
    CHECK(c.attention.layer_windows == std::vector<std::int64_t>{8, 8, 8});
    CHECK(c.moe.intermediate_size == c.intermediate_size);
    CHECK(c.moe.routing_weights_fp32);
    CHECK(!c.attention.bias);
  }
  SECTION("gpt-oss: top-k then softmax, biases, sinks, layer types (default: sliding first), YaRN") {
    auto j = config_of("tiny-gpt-oss");
    auto c = parse(dir, j);
    CHECK(c.moe.routing == target::MoeRouting::topk_softmax);
    CHECK((c.moe.router_bias && c.moe.expert_bias && c.moe.clamped_swiglu && c.attention.sinks && c.norm_weight_fp32));
    CHECK((c.attention.bias && c.attention.o_bias));
    CHECK(c.moe.swiglu_limit == 1.5);
    CHECK(c.attention.layer_windows == std::vector<std::int64_t>{4, 0, 4, 0});
    CHECK(c.rope.type == "yarn");
    CHECK(!c.rope.truncate);
    CHECK(c.rope.original_max_position_embeddings == 16);
    j.erase("layer_types");
    j["num_hidden_layers"] = 3;
    CHECK(parse(dir, j).attention.layer_windows == std::vector<std::int64_t>{4, 0, 4});
  }
}

TEST_CASE("MoE configs and checkpoints: bad input is named", "[target]") {
  test::TempDir dir;
  SECTION("top-k larger than the number of experts") {
    auto j = config_of("tiny-mixtral");
    j["num_experts_per_tok"] = 5;
    CHECK_THAT(config_error(dir, j),
               Catch::Contains("num_experts_per_tok") && Catch::Contains("1..4") && Catch::Contains("found 5"));
  }
  SECTION("an unknown layer type") {
    auto j = config_of("tiny-gpt-oss");
    j["layer_types"][2] = "chunked_attention";
    CHECK_THAT(config_error(dir, j), Catch::Contains("layer_types[2]") && Catch::Contains("chunked_attention"));
    j["layer_types"] = {"full_attention"};
    CHECK_THAT(config_error(dir, j), Catch::Contains("one attention type per layer"));
  }
  SECTION("a quantization other than gpt-oss's MXFP4") {
    auto j = config_of("tiny-gpt-oss");
    j["quantization_config"] = {{"quant_method", "fp8"}};
    CHECK_THAT(config_error(dir, j), Catch::Contains("quantization_config.quant_method") && Catch::Contains("fp8"));
    auto q = config_of("tiny-qwen3-moe");
    q["quantization_config"] = {{"quant_method", "mxfp4"}};
    CHECK_THAT(config_error(dir, q), Catch::Contains("quantized checkpoint not supported"));
  }
  SECTION("a missing expert tensor") {
    auto t = tensors_of("tiny-qwen3-moe");
    t.erase("model.layers.3.mlp.experts.5.up_proj.weight");
    CHECK_THAT(load_error(dir.path(), config_of("tiny-qwen3-moe"), t),
               Catch::Contains("1 missing: model.layers.3.mlp.experts.5.up_proj.weight"));
  }
  SECTION("an expert of the wrong size") {
    auto t = tensors_of("tiny-mixtral");
    t["model.layers.1.block_sparse_moe.experts.2.w2.weight"] = torch::zeros({48, 39});
    CHECK_THAT(load_error(dir.path(), config_of("tiny-mixtral"), t),
               Catch::Contains("model.layers.1.block_sparse_moe.experts.2.w2.weight [48, 39] (expected [48, 40])"));
  }
  SECTION("an MXFP4 block of the wrong size, and blocks that are not bytes") {
    auto t = tensors_of("tiny-gpt-oss-mxfp4");
    const auto name = "model.layers.0.mlp.experts.down_proj_blocks";
    auto good = t.at(name);
    t[name] = good.narrow(3, 0, 8).contiguous();
    CHECK_THAT(load_error(dir.path(), config_of("tiny-gpt-oss-mxfp4"), t),
               Catch::Contains("wrong shape") && Catch::Contains(std::string(name) + " [4, 64, 1, 8]"));
    t[name] = good.to(torch::kFloat32);
    CHECK_THAT(load_error(dir.path(), config_of("tiny-gpt-oss-mxfp4"), t),
               Catch::Contains(name) && Catch::Contains("uint8"));
  }
  SECTION("MXFP4 scales no checkpoint holds: E8M0's NaN code, an overflowing exponent (issue 41 item 9)") {
    const auto name = std::string("model.layers.1.mlp.experts.gate_up_proj_scales");
    for (const int code : {255, 254}) {
      INFO(code);
      auto t = tensors_of("tiny-gpt-oss-mxfp4");
      auto s = t.at(name).clone();
      s.view(-1).narrow(0, 0, 8).fill_(code);  // 256 values: some of them 2 or more
      t[name] = s;
      const auto e = load_error(dir.path(), config_of("tiny-gpt-oss-mxfp4"), t);
      CHECK_THAT(e, Catch::Contains(dir.path().string()) && Catch::Contains(name));
      CHECK_THAT(e, Catch::Contains(code == 255 ? "NaN" : "overflow"));
    }
  }
  SECTION("a dense checkpoint under an MXFP4 config") {
    CHECK_THAT(load_error(dir.path(), config_of("tiny-gpt-oss-mxfp4"), tensors_of("tiny-gpt-oss")),
               Catch::Contains("16 missing: model.layers.0.mlp.experts.down_proj_blocks") &&
                   Catch::Contains("model.layers.3.mlp.experts.gate_up_proj (hint"));
  }
}

TEST_CASE("MXFP4 experts compute what the same weights do in gpt-oss's bf16 layout", "[target]") {
  // Dequantized by hand (two e2m1 values a byte, low nibble first, 2^(scale - 127) per 32 values)
  // and stored in the dense layout ([E, in, out]: the blocks' rows become columns), the checkpoint
  // must give the MXFP4 one's logits exactly: the values are exact in fp32 either way.
  const float lut[16] = {0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0f, -0.5, -1, -1.5, -2, -3, -4, -6};
  auto t = tensors_of("tiny-gpt-oss-mxfp4");
  std::map<std::string, torch::Tensor> dense;
  for (const auto& [name, tensor] : t) {
    if (name.ends_with("_scales")) continue;
    if (!name.ends_with("_blocks")) {
      dense[name] = tensor;
      continue;
    }
    const auto base = name.substr(0, name.size() - 7);
    const auto scales = t.at(base + "_scales");
    const auto E = tensor.size(0), rows = tensor.size(1), G = tensor.size(2);
    auto w = torch::empty({E, rows, G * 32});
    auto acc = w.accessor<float, 3>();
    auto bytes = tensor.accessor<std::uint8_t, 4>();
    auto sc = scales.accessor<std::uint8_t, 3>();
    for (std::int64_t e = 0; e < E; ++e)
      for (std::int64_t r = 0; r < rows; ++r)
        for (std::int64_t g = 0; g < G; ++g)
          for (std::int64_t b = 0; b < 16; ++b) {
            const float s = std::ldexp(1.0f, static_cast<int>(sc[e][r][g]) - 127);
            acc[e][r][g * 32 + 2 * b] = lut[bytes[e][r][g][b] & 0x0F] * s;
            acc[e][r][g * 32 + 2 * b + 1] = lut[bytes[e][r][g][b] >> 4] * s;
          }
    dense[base] = w.transpose(1, 2).contiguous();
  }
  test::TempDir dir;
  auto cfg = config_of("tiny-gpt-oss-mxfp4");
  cfg.erase("quantization_config");
  test::write_file(dir / "config.json", cfg.dump(2));
  model::save_safetensors((dir / "model.safetensors").string(), dense);
  auto a = TargetModel::load(fixture("tiny-gpt-oss-mxfp4").string(), torch::kFloat32, torch::kCPU);
  auto b = TargetModel::load(dir.path().string(), torch::kFloat32, torch::kCPU);
  CHECK(a.parameter_count() == b.parameter_count());
  const auto ids = torch::randint(3, 256, {1, 12});
  target::TargetBatch batch{ids, torch::arange(12).unsqueeze(0), torch::zeros({1, 12}, torch::kInt64)};
  const target::TeacherSpec teacher{torch::arange(256), 1024};
  CHECK(torch::equal(a.forward(batch, teacher).teacher_logits, b.forward(batch, teacher).teacher_logits));
}

TEST_CASE("MoE forward: no host synchronisation, so its steps capture as CUDA graphs", "[target]") {
  for (const char* name :
       {"tiny-qwen3-moe", "tiny-mixtral", "tiny-gpt-oss", "tiny-deepseek-v3", "tiny-glm4-moe", "tiny-glm4-moe-lite",
        "tiny-gemma4-moe"}) {
    INFO(name);
    auto m = TargetModel::load(fixture(name).string(), torch::kFloat32, torch::kCPU);
    CHECK(m.graph_safe());
    const auto ids = torch::randint(3, m.config().vocab_size, {2, 24});
    const auto pos = torch::arange(24).repeat({2, 1});
    for (bool packed : {false, true}) {
      INFO("packed " << packed);
      auto docs =
          packed ? (torch::arange(24) >= 10).to(torch::kInt64).repeat({2, 1}) : torch::zeros({2, 24}, torch::kInt64);
      target::TargetBatch batch{
          ids, packed ? torch::cat({torch::arange(10), torch::arange(14)}).repeat({2, 1}) : pos, docs, {packed, 0}};
      target::TeacherSpec teacher{torch::arange(64), 16};
      // Packed rows on CPU read their segment table from host memory, which is no device wait; the
      // grouped matmul's CPU reference loop reads its offsets where the CUDA kernel reads them on the device.
      test::HostSyncProbe probe({"aten::_grouped_mm"});
      auto out = m.forward(batch, teacher);
      INFO(probe.names());
      CHECK(probe.count() == 0);
      CHECK(torch::isfinite(out.teacher_logits).all().item<bool>());
    }
  }
}

TEST_CASE("YaRN frequencies and attention factor equal transformers'", "[target]") {
  auto ref = model::load_safetensors(std::string(EAGLE_SOURCE_DIR) + "/tests/fixtures/reference/rope.safetensors");
  model::RopeConfig yarn{.head_dim = 64,
                         .theta = 150000.0,
                         .type = "yarn",
                         .factor = 32.0,
                         .original_max_position_embeddings = 4096,
                         .max_position_embeddings = 131072};
  yarn.truncate = false;
  CHECK(max_err(model::rope_inv_freq(yarn), ref.at("yarn")) <= 1e-7);
  CHECK(model::rope_attention_factor(yarn) == Approx(ref.at("yarn.attention_factor").item<double>()).epsilon(1e-12));
  model::RopeConfig truncated{.head_dim = 64,
                              .theta = 10000.0,
                              .type = "yarn",
                              .factor = 4.0,
                              .original_max_position_embeddings = 32,
                              .max_position_embeddings = 128};
  CHECK(max_err(model::rope_inv_freq(truncated), ref.at("yarn_truncated")) <= 1e-7);
  CHECK(model::rope_attention_factor(truncated) ==
        Approx(ref.at("yarn_truncated.attention_factor").item<double>()).epsilon(1e-12));
  // Serving (the draft head's RoPE) is the same for yarn; other types keep factor 1.
  CHECK(max_err(model::rope_inv_freq_serving(yarn), model::rope_inv_freq(yarn)) == 0.0);
  CHECK(model::rope_attention_factor(model::RopeConfig{}) == 1.0);
}

TEST_CASE("inspect reports experts, active parameters and layer types", "[target]") {
  auto r = test::run_cli("inspect --json --model_name_or_path " + fixture("tiny-gpt-oss-mxfp4").string());
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  const auto j = json::parse(r.output.substr(r.output.find('{')));
  CHECK(j["architecture"] == "GptOssForCausalLM");
  CHECK(j["experts"] == 4);
  CHECK(j["experts_per_token"] == 2);
  CHECK(j["quantization"] == "mxfp4");
  CHECK(j["layer_types"] == json({"sliding_attention", "full_attention", "sliding_attention", "full_attention"}));
  CHECK(j["sliding_window"] == 4);
  // Per sparse layer 4 experts of 3 * 64 * 32 weights + 2 * 32 + 64 biases; a token runs 2 of them.
  const std::int64_t per_expert = 3 * 64 * 32 + 2 * 32 + 64;
  CHECK(j["parameters"].get<std::int64_t>() - j["active_parameters"].get<std::int64_t>() == 4 * 2 * per_expert);
  auto dense = test::run_cli("inspect --model_name_or_path " + fixture("tiny-qwen3-moe").string());
  INFO(dense.output);
  CHECK_THAT(dense.output, Catch::Contains("experts:") && Catch::Contains("8 per sparse layer, 2 per token") &&
                               Catch::Contains("dense MLP layers [2]"));
}

TEST_CASE("counts from config.json are bounded before anything is made per item (issue 41 item 5)", "[target]") {
  test::TempDir dir;
  SECTION("more experts than the checkpoint holds: refused before a name is listed per expert") {
    auto j = config_of("tiny-mixtral");
    j["num_local_experts"] = 4000;  // under the ceiling, far over the files' 4
    fs::copy_file(fixture("tiny-mixtral") / "model.safetensors", dir / "model.safetensors");
    test::write_file(dir / "config.json", j.dump());
    auto r = test::run_cli("inspect --model_name_or_path " + dir.path().string());
    INFO(r.output);
    CHECK(r.exit_code == 3);
    CHECK_THAT(r.output, Catch::Contains("config.json") && Catch::Contains("num_local_experts") &&
                             Catch::Contains("at most 4 (the checkpoint's)") && Catch::Contains("4000"));
  }
  SECTION("experts past the documented ceiling: refused by the reader") {
    auto j = config_of("tiny-mixtral");
    j["num_local_experts"] = 1000000000;
    CHECK_THAT(config_error(dir, j), Catch::Contains("num_local_experts") && Catch::Contains("[1, 4096]"));
  }
  SECTION("layers past the ceiling: train --dry_run refuses at once (2^62 was bad_alloc, 2^31 minutes)") {
    for (const auto layers : {std::int64_t{1} << 62, std::int64_t{1} << 31, std::int64_t{5000}}) {
      INFO(layers);
      auto j = test::fixture_config("tiny-llama");
      j["num_hidden_layers"] = layers;
      test::write_file(dir / "config.json", j.dump());
      auto r = test::run_cli("train --dry_run --model_name_or_path " + dir.path().string() + " --data_path " +
                             std::string(EAGLE_SOURCE_DIR) + "/tests/fixtures/data/smoke.jsonl --output_dir " +
                             (dir / "out").string());
      INFO(r.output);
      CHECK(r.exit_code == 3);
      CHECK_THAT(r.output, Catch::Contains("num_hidden_layers") && Catch::Contains("[1, 1024]"));
    }
  }
  SECTION("the ends alone (training from stored features) list nothing per layer") {
    auto j = test::fixture_config("tiny-llama");
    j["num_hidden_layers"] = 1024;
    fs::copy_file(test::model_fixture("tiny-llama") / "model.safetensors", dir / "model.safetensors");
    test::write_file(dir / "config.json", j.dump());
    const auto ends = TargetModel::load_ends(dir.path().string(), torch::kFloat32, torch::kCPU);
    CHECK(ends.config.num_hidden_layers == 1024);
  }
}
