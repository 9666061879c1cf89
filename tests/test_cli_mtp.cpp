// --draft mtp end to end on the tiny MiMo, dense Qwen3.5, Qwen3.5-MoE and DeepSeek-V3 fixtures, as subprocesses:
// training logs the shipped layer's AR at step 0, checkpoints hold the native names, export --format mtp writes the
// target folder with the MTP tensors replaced (Qwen3.5-MoE's and DeepSeek-V3's experts per expert, as the target
// holds them; DeepSeek's correction bias frozen), eval imports the export as it reads the checkpoint, a resume
// refuses another --draft.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <cmath>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

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

namespace {

// One MTP family's fixture and what its checkpoint and export hold (the train -> export -> eval round trip
// below runs every row).
struct MtpFamilyCase {
  std::string folder;                   // the fixture under tests/fixtures/models
  std::string trained_log;              // what the training log names of the layer
  std::size_t checkpoint_tensors;       // the checkpoint's tensors, all under `prefix`
  std::string prefix;                   // the layer's native names
  std::int64_t experts;                 // routed experts (0: a dense MLP), fused in the checkpoint
  std::string frozen;                   // a tensor the checkpoint holds unchanged (the correction bias), or ""
  std::string architecture, family;     // the export's config.json: architectures[0], eagle_train.mtp_family
  std::vector<std::pair<std::string, json>> config;  // and these fields of it
};

const std::vector<MtpFamilyCase>& mtp_family_cases() {
  static const std::vector<MtpFamilyCase> cases{
      {"tiny-qwen3-5-mtp", "'s mtp (", 15, "mtp.", 0, "", "Qwen3_5ForCausalLM", "qwen3_5",
       {{"mtp_num_hidden_layers", 1}}},
      {"tiny-qwen3-5-moe-mtp", "'s mtp (", 19, "mtp.", 4, "", "Qwen3_5MoeForCausalLM", "qwen3_5_moe", {}},
      {"tiny-deepseek-v3-mtp", "'s model.layers.2 (", 20, "model.layers.2.", 8,
       "model.layers.2.mlp.gate.e_score_correction_bias", "DeepseekV3ForCausalLM", "deepseek_v3",
       {{"scoring_func", "sigmoid"}}}};
  return cases;
}

}  // namespace

TEST_CASE("train --draft mtp fine-tunes each family's shipped layer; export --format mtp writes the target folder "
          "with it replaced (experts per expert); eval reads it",
          "[cli]") {
  const auto c = GENERATE(from_range(mtp_family_cases()));
  INFO(c.folder);
  const std::string folder = EAGLE_SOURCE_DIR "/tests/fixtures/models/" + c.folder;
  std::string common = kCommon;
  common.replace(common.find(kMimo), kMimo.size(), folder);
  TempDir dir;
  const auto run = dir / "run";
  auto r = run_cli("train" + common +
                   " --draft mtp --ttt_steps 3 --max_steps 4 --eval_steps 2 --save_steps 4 --learning_rate 0.001 "
                   "--warmup_steps 0 --output_dir " +
                   run.string());
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.output, Catch::Contains(c.trained_log) && Catch::Contains("3 TTT step(s)"));
  if (c.prefix == "model.layers.2.") CHECK_THAT(r.output, Catch::Contains("the target's lm_head"));
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
  auto shipped = eval_json(" --checkpoint " + folder + common + " --eval_draft_len 3");
  CHECK(shipped["ar"].get<double>() == Approx(ar.at(0)).epsilon(1e-12));

  // The checkpoint: the layer's parameters (experts fused) and its frozen buffers, under the native names alone.
  const auto ckpt = run / "checkpoint-4";
  auto tensors = eagle::model::load_safetensors((ckpt / "model.safetensors").string());
  CHECK(tensors.size() == c.checkpoint_tensors);
  for (const auto& [name, t] : tensors) CHECK(name.rfind(c.prefix, 0) == 0);
  auto before = eagle::model::load_safetensors(folder + "/model.safetensors");
  const std::string gate = c.prefix + "layers.0.mlp.gate.weight", x_moe = c.prefix + "layers.0.mlp.experts.",
                    x_ds = c.prefix + "mlp.experts.";
  const std::string x = c.prefix == "mtp." ? x_moe : x_ds;
  if (c.experts > 0) {
    const std::string router = c.prefix == "mtp." ? gate : c.prefix + "mlp.gate.weight";
    CHECK_FALSE(torch::equal(tensors.at(router), before.at(router)));  // the router trained
  }
  if (!c.frozen.empty()) CHECK(torch::equal(tensors.at(c.frozen), before.at(c.frozen)));

  // export --format mtp: the target's names (per expert, each the slice of the trained fused tensor); the
  // target's other tensors untouched.
  const auto out = dir / "mtp-export";
  auto ex = run_cli("export --checkpoint " + ckpt.string() + " --format mtp --output " + out.string());
  INFO(ex.output);
  REQUIRE(ex.exit_code == 0);
  CHECK_THAT(ex.output, Catch::Contains("\"method\":\"mtp\",\"num_speculative_tokens\":3"));
  auto after = eagle::model::load_safetensors((out / "model.safetensors").string());
  REQUIRE(before.size() == after.size());
  if (c.experts > 0) {
    REQUIRE(tensors.count(x + "gate_up_proj"));
    const auto gate_up = tensors.at(x + "gate_up_proj"), down = tensors.at(x + "down_proj");
    for (std::int64_t e = 0; e < c.experts; ++e) {
      const auto p = x + std::to_string(e) + ".";
      CHECK(torch::equal(after.at(p + "gate_proj.weight"), gate_up[e].narrow(0, 0, 16)));
      CHECK(torch::equal(after.at(p + "up_proj.weight"), gate_up[e].narrow(0, 16, 16)));
      CHECK(torch::equal(after.at(p + "down_proj.weight"), down[e]));
    }
  }
  for (const auto& [name, t] : before) {
    INFO(name);
    REQUIRE(after.count(name));
    if (tensors.count(name))
      CHECK(torch::equal(after.at(name), tensors.at(name)));
    else if (c.experts == 0 || name.rfind(x, 0) != 0)
      CHECK(torch::equal(after.at(name), t));  // the target's (DeepSeek: the layer's embed_tokens, shared_head.head)
  }
  auto config = json::parse(read_file(out / "config.json"));
  CHECK(config["architectures"][0] == c.architecture);
  CHECK(config["eagle_train"]["mtp_family"] == c.family);
  for (const auto& [key, value] : c.config) {
    INFO(key);
    CHECK(config[key] == value);
  }
  // eval imports the export as it reads the checkpoint.
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
  CHECK_THAT(bad.output, Catch::Contains("eagle|mtp|dflash"));
}
