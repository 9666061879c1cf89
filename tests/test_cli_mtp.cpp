// --draft mtp end to end on the tiny MiMo, dense Qwen3.5, Qwen3.5-MoE and DeepSeek-V3 fixtures, as subprocesses:
// training logs the shipped layer's AR at step 0, checkpoints hold the native names, export --format mtp writes the
// target folder with the MTP tensors replaced (Qwen3.5-MoE's and DeepSeek-V3's experts per expert, as the target
// holds them; DeepSeek's correction bias frozen), eval imports the export as it reads the checkpoint, a resume
// refuses another --draft.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <cmath>
#include <filesystem>

#include "eagle/model/safetensors.h"
#include "cli_helpers.h"
#include "helpers.h"

using eagle::test::eval_json;
using eagle::test::read_file;
using eagle::test::read_jsonl;
using eagle::test::run_cli;
using eagle::test::TempDir;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

const std::string kMimo = EAGLE_SOURCE_DIR "/tests/fixtures/models/tiny-mimo";
// The options train and eval share (eval reproduces the run's held-out split and prompts).
const std::string kCommon = std::string(" --model_name_or_path ") + kMimo +
                            " --data_path " EAGLE_SOURCE_DIR
                            "/tests/fixtures/data/smoke.jsonl --training_seq_len 256 --bucket_granularity 64"
                            " --validation_fraction 0.1 --per_device_train_batch_size 4 --eval_num_prompts 2"
                            " --eval_max_new_tokens 8 --device cpu --num_threads 1 --seed 42";

}  // namespace

TEST_CASE("train --draft mtp fine-tunes MiMo's MTP layer; export --format mtp writes the target folder; eval reads it",
          "[cli]") {
  TempDir dir;
  const auto run = dir / "run";
  const std::string train = "train" + kCommon +
                            " --draft mtp --ttt_steps 3 --max_steps 4 --eval_steps 2 "
                            "--save_steps 2 --learning_rate 0.001 --warmup_steps 0 --output_dir " +
                            run.string();
  auto r = run_cli(train);
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.output, Catch::Contains("model.mtp_layers.0"));
  // The shipped layer's AR before any update, logged at step 0, then at steps 2 and 4.
  std::map<std::int64_t, double> ar;
  for (const auto& j : read_jsonl(run / "metrics.jsonl"))
    if (j.contains("ar")) ar[j["step"].get<std::int64_t>()] = j["ar"].get<double>();
  REQUIRE(ar.count(0));
  CHECK(ar.at(0) >= 1.0);
  CHECK(ar.count(4));
  // eval of the original target folder (its MTP layer as shipped) with the run's draft length
  // measures what the run logged at step 0.
  auto shipped = eval_json(" --checkpoint " + kMimo + kCommon + " --eval_draft_len 3");
  CHECK(shipped["ar"].get<double>() == Approx(ar.at(0)).epsilon(1e-12));

  // The checkpoint: the MTP tensors alone, under their native names.
  const auto ckpt = run / "checkpoint-4";
  auto tensors = eagle::model::load_safetensors((ckpt / "model.safetensors").string());
  CHECK(tensors.size() == 16);
  for (const auto& [name, t] : tensors) CHECK(name.rfind("model.mtp_layers.0.", 0) == 0);

  // export --format mtp: the target (the one the head names) copied, the MTP shard rewritten.
  const auto out = dir / "mimo-mtp";
  auto ex = run_cli("export --checkpoint " + ckpt.string() + " --format mtp --output " + out.string());
  INFO(ex.output);
  REQUIRE(ex.exit_code == 0);
  CHECK_THAT(ex.output, Catch::Contains("\"method\":\"mtp\",\"num_speculative_tokens\":3"));
  const std::string shard1 = "model-00001-of-00002.safetensors", shard2 = "model-00002-of-00002.safetensors";
  // The unchanged shard: a hard link where the file system allows it, else a copy; the same bytes.
  CHECK(read_file(out / shard1) == read_file(fs::path(kMimo) / shard1));
  CHECK(read_file(out / "model.safetensors.index.json") == read_file(fs::path(kMimo) / "model.safetensors.index.json"));
  auto before = eagle::model::load_safetensors(kMimo + "/" + shard2);
  auto after = eagle::model::load_safetensors((out / shard2).string());
  REQUIRE(before.size() == after.size());
  for (const auto& [name, t] : before) {
    INFO(name);
    REQUIRE(after.count(name));
    if (name.rfind("model.mtp_layers.0.", 0) == 0)
      CHECK(torch::equal(after.at(name), tensors.at(name)));  // the trained values (fp32 target: exact)
    else
      CHECK(torch::equal(after.at(name), t));  // the target's own tensors of that shard, unchanged
  }
  auto config = json::parse(read_file(out / "config.json"));
  CHECK(config["architectures"][0] == "MiMoForCausalLM");
  CHECK(config["num_nextn_predict_layers"] == 1);
  CHECK(config["eagle_train"]["ttt_steps"] == 3);
  // Nothing is overwritten: a second export into the same folder is refused.
  CHECK(run_cli("export --checkpoint " + ckpt.string() + " --format mtp --output " + out.string()).exit_code != 0);
  // An MTP head has no EAGLE layout.
  CHECK(
      run_cli("export --checkpoint " + ckpt.string() + " --format sglang --output " + (dir / "x").string()).exit_code ==
      2);

  // eval imports the export as it reads the checkpoint: the same numbers.
  auto a = eval_json(" --checkpoint " + ckpt.string() + kCommon);
  auto b = eval_json(" --checkpoint " + out.string() + kCommon);
  CHECK(a["ar"] == b["ar"]);
  CHECK(a["eval_loss"] == b["eval_loss"]);
  CHECK(a["ar"].get<double>() == Approx(ar.at(4)).epsilon(1e-12));

  // A resume cannot switch the head.
  auto resume = run_cli("train" + kCommon +
                        " --draft eagle --ttt_steps 3 --max_steps 6 --eval_steps 2 --save_steps 2 "
                        "--learning_rate 0.001 --warmup_steps 0 --resume_from_checkpoint " +
                        ckpt.string() + " --output_dir " + run.string());
  INFO(resume.output);
  CHECK(resume.exit_code == 2);
  CHECK_THAT(resume.output, Catch::Contains("draft: checkpoint \"mtp\", now \"eagle\""));
}

TEST_CASE("train --draft mtp fine-tunes dense Qwen3.5's mtp.* layer; export --format mtp; eval reads it", "[cli]") {
  const std::string qwen = EAGLE_SOURCE_DIR "/tests/fixtures/models/tiny-qwen3-5-mtp";
  std::string common = kCommon;
  common.replace(common.find(kMimo), kMimo.size(), qwen);
  TempDir dir;
  const auto run = dir / "run";
  auto r = run_cli("train" + common +
                   " --draft mtp --ttt_steps 3 --max_steps 4 --eval_steps 2 --save_steps 4 --learning_rate 0.001 "
                   "--warmup_steps 0 --output_dir " +
                   run.string());
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.output, Catch::Contains("'s mtp (") && Catch::Contains("3 TTT step(s)"));
  std::map<std::int64_t, double> ar, loss;
  for (const auto& j : read_jsonl(run / "metrics.jsonl")) {
    if (j.contains("ar")) ar[j["step"].get<std::int64_t>()] = j["ar"].get<double>();
    if (j.contains("loss")) loss[j["step"].get<std::int64_t>()] = j["loss"].get<double>();
  }
  REQUIRE(ar.count(0));
  REQUIRE(ar.count(4));
  CHECK(ar.at(0) >= 1.0);
  REQUIRE(!loss.empty());
  for (const auto& [step, l] : loss) CHECK(std::isfinite(l));
  // The shipped layer as the target folder holds it: the AR the run logged at step 0.
  auto shipped = eval_json(" --checkpoint " + qwen + common + " --eval_draft_len 3");
  CHECK(shipped["ar"].get<double>() == Approx(ar.at(0)).epsilon(1e-12));

  const auto ckpt = run / "checkpoint-4";
  auto tensors = eagle::model::load_safetensors((ckpt / "model.safetensors").string());
  CHECK(tensors.size() == 15);
  for (const auto& [name, t] : tensors) CHECK(name.rfind("mtp.", 0) == 0);
  const auto out = dir / "qwen-mtp";
  auto ex = run_cli("export --checkpoint " + ckpt.string() + " --format mtp --output " + out.string());
  INFO(ex.output);
  REQUIRE(ex.exit_code == 0);
  CHECK_THAT(ex.output, Catch::Contains("\"method\":\"mtp\",\"num_speculative_tokens\":3"));
  auto before = eagle::model::load_safetensors(qwen + "/model.safetensors");
  auto after = eagle::model::load_safetensors((out / "model.safetensors").string());
  REQUIRE(before.size() == after.size());
  for (const auto& [name, t] : before) {
    INFO(name);
    REQUIRE(after.count(name));
    CHECK(torch::equal(after.at(name), name.rfind("mtp.", 0) == 0 ? tensors.at(name) : t));
  }
  auto config = json::parse(read_file(out / "config.json"));
  CHECK(config["architectures"][0] == "Qwen3_5ForCausalLM");
  CHECK(config["mtp_num_hidden_layers"] == 1);
  CHECK(config["eagle_train"]["mtp_family"] == "qwen3_5");
  // eval imports the export as it reads the checkpoint.
  auto a = eval_json(" --checkpoint " + ckpt.string() + common);
  auto b = eval_json(" --checkpoint " + out.string() + common);
  CHECK(a["ar"] == b["ar"]);
  CHECK(a["eval_loss"] == b["eval_loss"]);
  CHECK(a["ar"].get<double>() == Approx(ar.at(4)).epsilon(1e-12));
}

TEST_CASE("train --draft mtp fine-tunes Qwen3.5-MoE's mtp.* layer, router and experts; export keeps them per expert",
          "[cli]") {
  const std::string moe = EAGLE_SOURCE_DIR "/tests/fixtures/models/tiny-qwen3-5-moe-mtp";
  std::string common = kCommon;
  common.replace(common.find(kMimo), kMimo.size(), moe);
  TempDir dir;
  const auto run = dir / "run";
  auto r = run_cli("train" + common +
                   " --draft mtp --ttt_steps 3 --max_steps 4 --eval_steps 2 --save_steps 4 --learning_rate 0.001 "
                   "--warmup_steps 0 --output_dir " +
                   run.string());
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  std::map<std::int64_t, double> ar, loss;
  for (const auto& j : read_jsonl(run / "metrics.jsonl")) {
    if (j.contains("ar")) ar[j["step"].get<std::int64_t>()] = j["ar"].get<double>();
    if (j.contains("loss")) loss[j["step"].get<std::int64_t>()] = j["loss"].get<double>();
  }
  REQUIRE(ar.count(0));
  REQUIRE(ar.count(4));
  REQUIRE(!loss.empty());
  for (const auto& [step, l] : loss) CHECK(std::isfinite(l));
  auto shipped = eval_json(" --checkpoint " + moe + common + " --eval_draft_len 3");
  CHECK(shipped["ar"].get<double>() == Approx(ar.at(0)).epsilon(1e-12));

  // The checkpoint holds the experts fused (the head's parameters); the router and every expert trained.
  const auto ckpt = run / "checkpoint-4";
  auto tensors = eagle::model::load_safetensors((ckpt / "model.safetensors").string());
  CHECK(tensors.size() == 19);
  for (const auto& [name, t] : tensors) CHECK(name.rfind("mtp.", 0) == 0);
  const std::string x = "mtp.layers.0.mlp.experts.";
  auto before = eagle::model::load_safetensors(moe + "/model.safetensors");
  CHECK_FALSE(torch::equal(tensors.at("mtp.layers.0.mlp.gate.weight"), before.at("mtp.layers.0.mlp.gate.weight")));
  REQUIRE(tensors.count(x + "gate_up_proj"));
  const auto gate_up = tensors.at(x + "gate_up_proj"), down = tensors.at(x + "down_proj");

  // export --format mtp: the target's per-expert names, each the slice of the trained fused tensor.
  const auto out = dir / "moe-mtp";
  auto ex = run_cli("export --checkpoint " + ckpt.string() + " --format mtp --output " + out.string());
  INFO(ex.output);
  REQUIRE(ex.exit_code == 0);
  auto after = eagle::model::load_safetensors((out / "model.safetensors").string());
  REQUIRE(before.size() == after.size());
  for (std::int64_t e = 0; e < 4; ++e) {
    const auto p = x + std::to_string(e) + ".";
    CHECK(torch::equal(after.at(p + "gate_proj.weight"), gate_up[e].narrow(0, 0, 16)));
    CHECK(torch::equal(after.at(p + "up_proj.weight"), gate_up[e].narrow(0, 16, 16)));
    CHECK(torch::equal(after.at(p + "down_proj.weight"), down[e]));
  }
  for (const auto& [name, t] : before) {
    INFO(name);
    REQUIRE(after.count(name));
    if (name.rfind("mtp.", 0) != 0)
      CHECK(torch::equal(after.at(name), t));
    else if (tensors.count(name))
      CHECK(torch::equal(after.at(name), tensors.at(name)));
  }
  auto config = json::parse(read_file(out / "config.json"));
  CHECK(config["architectures"][0] == "Qwen3_5MoeForCausalLM");
  CHECK(config["eagle_train"]["mtp_family"] == "qwen3_5_moe");
  auto a = eval_json(" --checkpoint " + ckpt.string() + common);
  auto b = eval_json(" --checkpoint " + out.string() + common);
  CHECK(a["ar"] == b["ar"]);
  CHECK(a["eval_loss"] == b["eval_loss"]);
  CHECK(a["ar"].get<double>() == Approx(ar.at(4)).epsilon(1e-12));
}

TEST_CASE("train --draft mtp fine-tunes DeepSeek-V3's model.layers.{L} MTP layer; export keeps the frozen bias",
          "[cli]") {
  const std::string ds = EAGLE_SOURCE_DIR "/tests/fixtures/models/tiny-deepseek-v3-mtp";
  std::string common = kCommon;
  common.replace(common.find(kMimo), kMimo.size(), ds);
  TempDir dir;
  const auto run = dir / "run";
  auto r = run_cli("train" + common +
                   " --draft mtp --ttt_steps 3 --max_steps 4 --eval_steps 2 --save_steps 4 --learning_rate 0.001 "
                   "--warmup_steps 0 --output_dir " +
                   run.string());
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.output, Catch::Contains("'s model.layers.2 (") && Catch::Contains("the target's lm_head"));
  std::map<std::int64_t, double> ar, loss;
  for (const auto& j : read_jsonl(run / "metrics.jsonl")) {
    if (j.contains("ar")) ar[j["step"].get<std::int64_t>()] = j["ar"].get<double>();
    if (j.contains("loss")) loss[j["step"].get<std::int64_t>()] = j["loss"].get<double>();
  }
  REQUIRE(ar.count(0));
  REQUIRE(ar.count(4));
  CHECK(ar.at(0) >= 1.0);
  REQUIRE(!loss.empty());
  for (const auto& [step, l] : loss) CHECK(std::isfinite(l));
  // The shipped layer as the target folder holds it: the AR the run logged at step 0.
  auto shipped = eval_json(" --checkpoint " + ds + common + " --eval_draft_len 3");
  CHECK(shipped["ar"].get<double>() == Approx(ar.at(0)).epsilon(1e-12));

  // The checkpoint: the layer's parameters (experts fused) and its correction bias, model.layers.2.* alone.
  const auto ckpt = run / "checkpoint-4";
  auto tensors = eagle::model::load_safetensors((ckpt / "model.safetensors").string());
  CHECK(tensors.size() == 20);
  for (const auto& [name, t] : tensors) CHECK(name.rfind("model.layers.2.", 0) == 0);
  const std::string gate = "model.layers.2.mlp.gate.", x = "model.layers.2.mlp.experts.";
  auto before = eagle::model::load_safetensors(ds + "/model.safetensors");
  CHECK_FALSE(torch::equal(tensors.at(gate + "weight"), before.at(gate + "weight")));  // the router trained
  CHECK(torch::equal(tensors.at(gate + "e_score_correction_bias"), before.at(gate + "e_score_correction_bias")));
  const auto gate_up = tensors.at(x + "gate_up_proj"), down = tensors.at(x + "down_proj");

  // export --format mtp: the target's per-expert names; its embedding and LM head copies untouched.
  const auto out = dir / "ds-mtp";
  auto ex = run_cli("export --checkpoint " + ckpt.string() + " --format mtp --output " + out.string());
  INFO(ex.output);
  REQUIRE(ex.exit_code == 0);
  CHECK_THAT(ex.output, Catch::Contains("\"method\":\"mtp\",\"num_speculative_tokens\":3"));
  auto after = eagle::model::load_safetensors((out / "model.safetensors").string());
  REQUIRE(before.size() == after.size());
  for (std::int64_t e = 0; e < 8; ++e) {
    const auto p = x + std::to_string(e) + ".";
    CHECK(torch::equal(after.at(p + "gate_proj.weight"), gate_up[e].narrow(0, 0, 16)));
    CHECK(torch::equal(after.at(p + "up_proj.weight"), gate_up[e].narrow(0, 16, 16)));
    CHECK(torch::equal(after.at(p + "down_proj.weight"), down[e]));
  }
  for (const auto& [name, t] : before) {
    INFO(name);
    REQUIRE(after.count(name));
    if (tensors.count(name))
      CHECK(torch::equal(after.at(name), tensors.at(name)));
    else if (name.rfind(x, 0) != 0)
      CHECK(torch::equal(after.at(name), t));  // the target's, and model.layers.2's embed_tokens, shared_head.head
  }
  auto config = json::parse(read_file(out / "config.json"));
  CHECK(config["architectures"][0] == "DeepseekV3ForCausalLM");
  CHECK(config["scoring_func"] == "sigmoid");
  CHECK(config["eagle_train"]["mtp_family"] == "deepseek_v3");
  auto a = eval_json(" --checkpoint " + ckpt.string() + common);
  auto b = eval_json(" --checkpoint " + out.string() + common);
  CHECK(a["ar"] == b["ar"]);
  CHECK(a["eval_loss"] == b["eval_loss"]);
  CHECK(a["ar"].get<double>() == Approx(ar.at(4)).epsilon(1e-12));
}

TEST_CASE("--draft mtp refuses targets without MTP layers and the EAGLE-only switches", "[cli]") {
  TempDir dir;
  auto qwen = run_cli("train --model_name_or_path " EAGLE_SOURCE_DIR
                      "/tests/fixtures/models/tiny-qwen2 --data_path " EAGLE_SOURCE_DIR
                      "/tests/fixtures/data/smoke.jsonl --draft mtp --max_steps 1 --device cpu "
                      "--output_dir " +
                      (dir / "a").string());
  INFO(qwen.output);
  CHECK(qwen.exit_code == 2);
  CHECK_THAT(qwen.output, Catch::Contains("the target ships no MTP layer"));
  auto fc = run_cli("train" + kCommon + " --draft mtp --fc_norm --max_steps 1 --output_dir " + (dir / "b").string());
  CHECK(fc.exit_code == 2);
  CHECK_THAT(fc.output, Catch::Contains("mtp trains the target's own layer"));
  auto bad = run_cli("train" + kCommon + " --draft medusa --max_steps 1 --output_dir " + (dir / "c").string());
  CHECK(bad.exit_code == 2);
  CHECK_THAT(bad.output, Catch::Contains("eagle, mtp or dflash"));
}
