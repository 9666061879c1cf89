// eagle-train eval as a subprocess: a checkpoint and its exported copy measured alike, the run's own
// final evaluation reproduced, gates, and the refusals (unwritable output, a head holding NaN).
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <fstream>
#include <tuple>

#include "eagle/head/export/io.h"
#include "eagle/model/safetensors.h"
#include "head_fixtures.h"
#include "helpers.h"

using eagle::test::read_jsonl;
using eagle::test::run_cli;
using eagle::test::TempDir;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

const std::string kSmoke = eagle::test::smoke_args();

}  // namespace

TEST_CASE("eval measures a checkpoint and its exported copy alike", "[cli]") {
  TempDir dir;
  auto run = dir / "run";
  REQUIRE(run_cli("train " + kSmoke + " --max_steps 10 --eval_steps 0 --output_dir " + run.string()).exit_code == 0);
  auto ckpt = run / "checkpoint-10";
  auto exported = dir / "speculators";
  auto ex = run_cli("export --checkpoint " + ckpt.string() + " --format speculators --output " + exported.string());
  INFO(ex.output);
  REQUIRE(ex.exit_code == 0);
  // The speculators export carries the target's embedding (the head names its target), and its
  // config the target's dtype.
  auto spec = eagle::model::load_safetensors((exported / "model.safetensors").string());
  auto target = eagle::model::load_safetensors(EAGLE_SOURCE_DIR "/tests/fixtures/models/tiny-llama/model.safetensors");
  REQUIRE(spec.count("embed_tokens.weight"));
  CHECK(torch::equal(spec.at("embed_tokens.weight"), target.at("model.embed_tokens.weight")));
  CHECK(json::parse(eagle::test::read_file(exported / "config.json"))["torch_dtype"] == "float32");
  const std::string common = std::string(" --model_name_or_path ") + EAGLE_SOURCE_DIR +
                             "/tests/fixtures/models/tiny-llama" + " --data_path " + EAGLE_SOURCE_DIR +
                             "/tests/fixtures/data/smoke.jsonl" +
                             " --training_seq_len 256 --eval_num_prompts 3 --eval_max_new_tokens 12 --num_threads 1";
  auto a = run_cli("eval --checkpoint " + ckpt.string() + common + " --output " + (dir / "a.json").string());
  auto b = run_cli("eval --checkpoint " + exported.string() + common + " --json");
  INFO(a.output << b.output);
  REQUIRE(a.exit_code == 0);
  REQUIRE(b.exit_code == 0);
  CHECK_THAT(a.output, Catch::Contains("AR ") && Catch::Contains("eval loss"));
  auto ja = json::parse(eagle::test::read_file(dir / "a.json"));
  auto jb = json::parse(b.output.substr(b.output.find("{\n")));
  CHECK(ja["format"] == "sglang");
  CHECK(jb["format"] == "speculators");
  CHECK(ja["ar"].get<double>() >= 1.0);
  CHECK(ja["ar"] == jb["ar"]);
  CHECK(ja["eval_loss"].get<double>() == Approx(jb["eval_loss"].get<double>()).epsilon(1e-6));
  auto gate = run_cli("eval --checkpoint " + ckpt.string() + common + " --min_ar 9");
  CHECK(gate.exit_code == 6);
  // With the run's options, eval reproduces the run's own final evaluation (same split, same
  // numbers), whatever the batch size: the held-out loss is normalised over all its samples.
  double trained_eval_loss = -1;
  for (const auto& j : read_jsonl(run / "metrics.jsonl"))
    if (j.contains("eval_loss") && j["step"] == 10) trained_eval_loss = j["eval_loss"].get<double>();
  REQUIRE(trained_eval_loss > 0);
  for (const char* rows : {"4", "2"}) {
    auto same = run_cli("eval --json --checkpoint " + ckpt.string() + " " + kSmoke +
                        " --per_device_train_batch_size " + rows);
    INFO(same.output);
    REQUIRE(same.exit_code == 0);
    auto j = json::parse(same.output.substr(same.output.find("{\n")));
    CHECK(j["eval_loss"].get<double>() == Approx(trained_eval_loss).epsilon(1e-6));
  }
  // An unwritable --output fails at once, before the evaluation.
  auto unwritable = run_cli("eval --checkpoint " + ckpt.string() + common + " --output " +
                            (dir / "no" / "such" / "folder" / "r.json").string());
  CHECK(unwritable.exit_code == 4);
  CHECK_THAT(unwritable.output, !Catch::Contains("AR ") && Catch::Contains("r.json"));
  // A head holding NaN is refused naming the tensor, not reported as AR 1.
  auto broken = dir / "broken";
  fs::copy(ckpt, broken, fs::copy_options::recursive);
  auto weights = eagle::model::load_safetensors((broken / "model.safetensors").string());
  std::map<std::string, torch::Tensor> copy;
  for (const auto& [name, t] : weights) copy[name] = t.clone();
  copy["norm.weight"][0] = std::numeric_limits<float>::quiet_NaN();
  eagle::model::save_safetensors((broken / "model.safetensors").string(), copy);
  auto nan = run_cli("eval --checkpoint " + broken.string() + common);
  INFO(nan.output);
  CHECK(nan.exit_code == 3);
  CHECK_THAT(nan.output, Catch::Contains("NaN or Inf") && Catch::Contains("norm.weight"));
  // A head trained for another target (another hidden size and layer count) is refused.
  auto other = run_cli("eval --checkpoint " + ckpt.string() + common + " --model_name_or_path " EAGLE_SOURCE_DIR
                       "/tests/fixtures/models/tiny-llama3");
  INFO(other.output);
  CHECK(other.exit_code == 3);
  CHECK_THAT(other.output, Catch::Contains("trained for another target"));
  // ... and so is one of the same sizes but another architecture (the head records its target's).
  auto mistral = dir / "same-sizes-mistral";
  fs::create_directories(mistral);
  auto cfg = json::parse(eagle::test::read_file(EAGLE_SOURCE_DIR "/tests/fixtures/models/tiny-llama/config.json"));
  cfg["architectures"] = {"MistralForCausalLM"};
  cfg["model_type"] = "mistral";
  eagle::test::write_file(mistral / "config.json", cfg.dump(2));
  fs::create_symlink(EAGLE_SOURCE_DIR "/tests/fixtures/models/tiny-llama/model.safetensors",
                     mistral / "model.safetensors");
  auto arch = run_cli("eval --checkpoint " + ckpt.string() + common + " --model_name_or_path " + mistral.string());
  INFO(arch.output);
  CHECK(arch.exit_code == 3);
  CHECK_THAT(arch.output, Catch::Contains("target_architecture") && Catch::Contains("LlamaForCausalLM"));
  // The head decides its TTT steps, version and layers: eval does not take the first two, and
  // refuses other layers instead of ignoring them.
  for (const char* flag : {" --ttt_steps 2", " --eagle_version 1"}) {
    auto r = run_cli("eval --checkpoint " + ckpt.string() + common + flag);
    INFO(r.output);
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.output, Catch::Contains(std::string(flag).substr(1, std::string(flag).find(' ', 1) - 1)));
  }
  auto aux = run_cli("eval --checkpoint " + ckpt.string() + common + " --aux_hidden_state_layer_ids 0,1,2");
  INFO(aux.output);
  CHECK(aux.exit_code == 2);
  CHECK_THAT(aux.output, Catch::Contains("differs from the head's") && Catch::Contains("[1, 2, 3]"));
  CHECK(run_cli("eval --checkpoint " + ckpt.string() + common + " --aux_hidden_state_layer_ids 1,2,3").exit_code == 0);
}

TEST_CASE("eval and export refuse a head config.json out of range or unlike its weights, naming the field", "[cli]") {
  TempDir dir;
  auto cfg = eagle::test::tiny_head_config(3);
  auto head = eagle::head::make_head(cfg, eagle::test::tiny_vocab());
  const auto good = dir / "good";
  fs::create_directories(good);
  eagle::head::write_head_files(*head, eagle::head::checkpoint_format(cfg), good.string());
  const json config = json::parse(eagle::test::read_file(good / "config.json"));
  int n = 0;
  // Each edit of the config: the field the error must name. num_attention_heads 0 without head_dim
  // divided by zero (SIGFPE); intermediate_size 1e9 tried to allocate 256 GB; 64 is in range but
  // not the weights' 32, refused before the head is built.
  const std::vector<std::tuple<std::string, json, std::string>> edits = {
      {"num_attention_heads", 0, "num_attention_heads"},
      {"intermediate_size", 1000000000, "intermediate_size"},
      {"intermediate_size", 64, "mlp.gate_proj.weight"},
      {"hidden_size", -16, "hidden_size"},
      {"draft_vocab_size", 41, "draft_vocab_size"},
  };
  for (const auto& [key, value, named] : edits) {
    const auto broken = dir / ("broken" + std::to_string(n++));
    fs::copy(good, broken, fs::copy_options::recursive);
    json j = config;
    j.erase("head_dim");
    j[key] = value;
    eagle::test::write_file(broken / "config.json", j.dump());
    auto eval = run_cli("eval --checkpoint " + broken.string() + " " + kSmoke);
    INFO(key << " = " << value.dump() << "\n" << eval.output);
    CHECK(eval.exit_code == 3);
    CHECK_THAT(eval.output, Catch::Contains("config.json") && Catch::Contains(named));
    auto ex = run_cli("export --checkpoint " + broken.string() + " --format sglang --output " +
                      (dir / ("out" + std::to_string(n))).string());
    INFO(ex.output);
    CHECK(ex.exit_code == 3);
    CHECK_THAT(ex.output, Catch::Contains(named));
  }
}
