// FP8 exports (head_quant.h): per-channel scales and their error bounds, the compressed-tensors
// block vLLM reads, the tensors written, the dequantized import, refusals and the export command.
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include <cmath>

#include "eagle/head/export/io.h"
#include "eagle/head/export/quant.h"
#include "eagle/model/safetensors.h"
#include "eagle/util/error.h"
#include "head_fixtures.h"
#include "helpers.h"

using namespace eagle;
using namespace eagle::test;
using nlohmann::json;
namespace fs = std::filesystem;

TEST_CASE("FP8 per-channel scales: the row maximum is exact, errors within e4m3's rounding", "[head]") {
  torch::manual_seed(3);
  auto w = torch::randn({8, 64}) * torch::linspace(0.01, 5.0, 8).unsqueeze(1);
  w[2].zero_();  // an all-zero row quantizes to zeros, never NaN
  auto s = head::fp8_row_scales(w, head::Fp8Scale::amax);
  REQUIRE(s.sizes() == torch::IntArrayRef({8, 1}));
  CHECK(s.scalar_type() == torch::kFloat32);
  auto q = head::quantize_fp8(w, s);
  CHECK(q.scalar_type() == torch::kFloat8_e4m3fn);
  auto back = head::dequantize_fp8(q, s);
  CHECK(torch::isfinite(back).all().item<bool>());
  CHECK(torch::equal(back[2], torch::zeros({64})));
  // 448 is an e4m3 value: each row's largest magnitude comes back exactly (up to the scale's rounding).
  auto amax = w.abs().amax(1), back_amax = back.abs().amax(1);
  CHECK(torch::allclose(back_amax, amax, 1e-6, 0));
  // Round to nearest with 3 mantissa bits: at most 1/16 of the value, or half the subnormal step.
  auto bound = w.abs() / 16 + s * std::ldexp(1.0, -10) + 1e-12;
  CHECK(((back - w).abs() <= bound).all().item<bool>());
  // mse tries amax's scale among its clips: never a larger squared error, per row.
  auto s_mse = head::fp8_row_scales(w, head::Fp8Scale::mse);
  auto err = [&](const torch::Tensor& sc) { return (head::dequantize_fp8(head::quantize_fp8(w, sc), sc) - w).square().sum(1); };
  CHECK((err(s_mse) <= err(s)).all().item<bool>());
  CHECK((s_mse <= s * (1 + 1e-6)).all().item<bool>());
  CHECK((s_mse >= s * 0.8 * (1 - 1e-6)).all().item<bool>());
}

TEST_CASE("an FP8 export: compressed-tensors config, FP8 linears with [out, 1] scales, the rest unquantized",
          "[head]") {
  torch::manual_seed(5);
  auto cfg = tiny_head_config(3, 2);
  auto target = tiny_target();
  head::Eagle3Head head(cfg, tiny_vocab());
  head.set_target_weights(target.embedding, target.lm_head);
  TempDir tmp;
  head::Fp8Settings fp8;
  head::export_head(head, head::HeadFormat::sglang, (tmp / "fp8").string(), {}, &fp8);
  auto j = json::parse(read_file(tmp / "fp8" / "config.json"));
  const json& q = j["quantization_config"];
  CHECK(q["quant_method"] == "compressed-tensors");
  CHECK(q["format"] == "float-quantized");
  CHECK(q["config_groups"]["group_0"]["targets"] == json({"Linear"}));
  CHECK(q["config_groups"]["group_0"]["weights"]["strategy"] == "channel");
  CHECK(q["config_groups"]["group_0"]["input_activations"]["dynamic"] == true);
  CHECK(q["config_groups"]["group_0"]["input_activations"]["strategy"] == "token");
  CHECK(q["ignore"] == json({"lm_head", "fc", "model.fc"}));
  auto file = model::SafetensorsFile::open((tmp / "fp8" / "model.safetensors").string());
  for (const char* name : {"midlayer.self_attn.q_proj.weight", "midlayer.self_attn.k_proj.weight",
                           "midlayer.self_attn.v_proj.weight", "midlayer.self_attn.o_proj.weight",
                           "midlayer.mlp.gate_proj.weight", "midlayer.mlp.up_proj.weight",
                           "midlayer.mlp.down_proj.weight"}) {
    INFO(name);
    auto w = file.get(name);
    CHECK(w.scalar_type() == torch::kFloat8_e4m3fn);
    auto s = file.get(std::string(name) + "_scale");
    CHECK(s.scalar_type() == torch::kFloat32);
    CHECK(s.sizes() == torch::IntArrayRef({w.size(0), 1}));
  }
  for (const char* name : {"fc.weight", "lm_head.weight", "midlayer.input_layernorm.weight", "norm.weight"}) {
    INFO(name);
    CHECK(file.get(name).scalar_type() == torch::kFloat32);
    CHECK_FALSE(file.contains(std::string(name) + "_scale"));
  }
  // Read back: the quantized weights dequantized, everything else as trained.
  auto loaded = head::load_head((tmp / "fp8").string());
  auto params = loaded.head->module().named_parameters();
  for (const auto& p : head.module().named_parameters()) {
    INFO(p.key());
    const auto& name = p.key();
    torch::Tensor expected = p.value().detach();
    if (head::is_fp8_linear(name, fp8)) {
      auto s = head::fp8_row_scales(expected, head::Fp8Scale::amax);
      expected = head::dequantize_fp8(head::quantize_fp8(expected, s), s);
    }
    CHECK(torch::equal(params[name], expected));
  }
  // Quantizing the dequantized head again writes the same FP8 values (amax maps to 448 exactly).
  head::export_head(*loaded.head, head::HeadFormat::sglang, (tmp / "again").string(), {}, &fp8);
  auto again = model::SafetensorsFile::open((tmp / "again" / "model.safetensors").string());
  CHECK(torch::equal(again.get("midlayer.mlp.down_proj.weight").view(torch::kUInt8),
                     file.get("midlayer.mlp.down_proj.weight").view(torch::kUInt8)));
  // --quantize_fc: fc too, and no longer ignored.
  head::Fp8Settings with_fc{head::Fp8Scale::mse, true};
  head::export_head(head, head::HeadFormat::sglang, (tmp / "fc").string(), {}, &with_fc);
  auto fc_file = model::SafetensorsFile::open((tmp / "fc" / "model.safetensors").string());
  CHECK(fc_file.get("fc.weight").scalar_type() == torch::kFloat8_e4m3fn);
  CHECK(json::parse(read_file(tmp / "fc" / "config.json"))["quantization_config"]["ignore"] == json({"lm_head"}));
  // Other layouts are not written quantized.
  CHECK_THROWS_WITH(head::export_head(head, head::HeadFormat::speculators, (tmp / "spec").string(),
                                      target.embedding, &fp8),
                    Catch::Contains("sglang layout"));
}

TEST_CASE("an FP8 head is refused when its config or scales are not the ones eagle-train writes", "[head]") {
  torch::manual_seed(6);
  auto cfg = tiny_head_config(3, 2);
  head::Eagle3Head head(cfg, tiny_vocab());
  TempDir tmp;
  head::Fp8Settings fp8;
  head::export_head(head, head::HeadFormat::sglang, (tmp / "h").string(), {}, &fp8);
  const auto config_path = tmp / "h" / "config.json";
  const std::string good = read_file(config_path);
  // A per-tensor weight strategy would read [out, 1] scales wrongly: refused by its field.
  auto j = json::parse(good);
  j["quantization_config"]["config_groups"]["group_0"]["weights"]["strategy"] = "tensor";
  write_file(config_path, j.dump());
  CHECK_THROWS_WITH(head::load_head((tmp / "h").string()),
                    Catch::Contains("quantization_config.config_groups.group_0.weights.strategy") &&
                        Catch::Contains("\"channel\""));
  // FP8 weights with the quantization_config removed: refused naming the tensor.
  j = json::parse(good);
  j.erase("quantization_config");
  write_file(config_path, j.dump());
  CHECK_THROWS_WITH(head::load_head((tmp / "h").string()), Catch::Contains("no quantization_config"));
  // A scale of the wrong shape or a non-positive one: refused naming the scale.
  write_file(config_path, good);
  auto file = model::SafetensorsFile::open((tmp / "h" / "model.safetensors").string());
  std::map<std::string, torch::Tensor> tensors;
  for (const auto& name : file.names()) tensors[name] = file.get(name).clone();
  auto broken = tensors;
  broken["midlayer.mlp.up_proj.weight_scale"] = -broken["midlayer.mlp.up_proj.weight_scale"];
  model::save_safetensors((tmp / "h" / "model.safetensors").string(), broken, {});
  CHECK_THROWS_WITH(head::load_head((tmp / "h").string()),
                    Catch::Contains("midlayer.mlp.up_proj.weight_scale") && Catch::Contains("positive"));
  broken = tensors;
  broken.erase("midlayer.self_attn.o_proj.weight_scale");
  model::save_safetensors((tmp / "h" / "model.safetensors").string(), broken, {});
  CHECK_THROWS_WITH(head::load_head((tmp / "h").string()), Catch::Contains("midlayer.self_attn.o_proj.weight_scale"));
}

TEST_CASE("eagle-train export --quantize fp8 writes a head that eval reads back", "[head]") {
  torch::manual_seed(7);
  auto cfg = tiny_head_config(3, 2);
  head::Eagle3Head head(cfg, tiny_vocab());
  TempDir tmp;
  fs::create_directories(tmp / "ckpt");
  head::write_head_files(head, head::checkpoint_format(cfg), (tmp / "ckpt").string());
  auto ok = run_cli("export --checkpoint " + (tmp / "ckpt").string() + " --quantize fp8 --quantize_scale mse --output " +
                    (tmp / "out").string());
  INFO(ok.output);
  REQUIRE(ok.exit_code == 0);
  CHECK(model::SafetensorsFile::open((tmp / "out" / "model.safetensors").string())
            .get("midlayer.mlp.gate_proj.weight")
            .scalar_type() == torch::kFloat8_e4m3fn);
  CHECK_NOTHROW(head::load_head((tmp / "out").string()));
  // The scale choices without --quantize fp8 would be ignored: refused instead.
  auto ignored = run_cli("export --checkpoint " + (tmp / "ckpt").string() + " --quantize_fc --output " +
                         (tmp / "x").string());
  CHECK(ignored.exit_code == 2);
  CHECK_THAT(ignored.output, Catch::Contains("--quantize"));
  auto layout = run_cli("export --checkpoint " + (tmp / "ckpt").string() +
                        " --quantize fp8 --format vllm-eagle1 --output " + (tmp / "y").string());
  CHECK(layout.exit_code == 2);
  CHECK_FALSE(fs::exists(tmp / "x"));
}
