// --draft dspark end to end on the tiny Qwen3 fixture, as subprocesses: training draws DFlash's anchors for the
// anchor-as-first block and logs the AR of vLLM's DSpark rounds (all block_size tokens, left to right with the
// Markov bias), checkpoints are vLLM's Qwen3DSparkModel layout, a resume draws the same anchors (the same
// losses and weights), export --format dspark writes what eval imports back with the checkpoint's numbers,
// batched evaluation drafts as one by one, and what DSpark cannot do yet is refused by name.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <filesystem>

#include "eagle/model/safetensors.h"
#include "cli_helpers.h"
#include "helpers.h"

using eagle::test::check_same_tensors;
using eagle::test::eval_json;
using eagle::test::logged_losses;
using eagle::test::read_file;
using eagle::test::read_jsonl;
using eagle::test::run_cli;
using eagle::test::TempDir;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

const std::string kQwen3 = EAGLE_SOURCE_DIR "/tests/fixtures/models/tiny-qwen3";
const std::string kCommon = std::string(" --model_name_or_path ") + kQwen3 +
                            " --data_path " EAGLE_SOURCE_DIR
                            "/tests/fixtures/data/smoke.jsonl --training_seq_len 256 --bucket_granularity 64"
                            " --validation_fraction 0.1 --per_device_train_batch_size 4 --eval_num_prompts 2"
                            " --eval_max_new_tokens 8 --device cpu --num_threads 1 --seed 42";
// A small DSpark draft: block 4 (4 tokens a round), two layers, Markov rank 8, 32 anchors per row.
const std::string kDSpark =
    " --draft dspark --dflash_block_size 4 --draft_num_layers 2 --dflash_num_anchors 32 --dflash_decay_gamma 4"
    " --dspark_markov_rank 8 --learning_rate 0.001 --warmup_steps 0 --logging_steps 1 --gradient_accumulation_steps 2";

}  // namespace

TEST_CASE("train --draft dspark trains a DSpark draft, resumes exactly, exports as vLLM loads it, eval reads it",
          "[cli]") {
  TempDir dir;
  const auto run = dir / "run";
  const std::string train = "train" + kCommon + kDSpark + " --max_steps 4 --eval_steps 2 --save_steps 2";
  auto r = run_cli(train + " --output_dir " + run.string());
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.output, Catch::Contains("DSpark draft: 2 layer(s), block 4 (4 tokens per round, anchor first)"));
  CHECK_THAT(r.output, Catch::Contains("Markov rank 8, confidence head on"));
  std::map<std::int64_t, double> ar;
  for (const auto& j : read_jsonl(run / "metrics.jsonl")) {
    if (j.contains("ar")) ar[j["step"].get<std::int64_t>()] = j["ar"].get<double>();
    if (j.contains("acc")) CHECK(j["acc"].size() == 4);  // one per slot: every slot drafts
  }
  REQUIRE(ar.count(4));
  CHECK(ar.at(4) >= 1.0);
  const auto losses = logged_losses(run);
  REQUIRE(losses.size() == 4);

  // The checkpoint is vLLM's Qwen3DSparkModel folder: DFlash's keys and tensors, the Markov and confidence heads.
  const auto ckpt = run / "checkpoint-4";
  auto config = json::parse(read_file(ckpt / "config.json"));
  CHECK(config["architectures"][0] == "Qwen3DSparkModel");
  CHECK(config["model_type"] == "qwen3");
  CHECK(config["block_size"] == 4);
  CHECK(config["sample_from_anchor"] == true);
  CHECK(config["markov_rank"] == 8);
  CHECK(config["enable_confidence_head"] == true);
  CHECK(config["confidence_head_with_markov"] == true);
  CHECK(config["draft_vocab_size"] == 256);
  CHECK(config["mask_token_id"] == 5);
  CHECK(config["dflash_config"]["mask_token_id"] == 5);  // vLLM reads the mask id here first
  CHECK(config["dflash_config"]["target_layer_ids"] == json::array({0, 1}));
  auto tensors = eagle::model::load_safetensors((ckpt / "model.safetensors").string());
  CHECK(tensors.at("markov_head.markov_w1.weight").sizes() == std::vector<std::int64_t>{256, 8});
  CHECK(tensors.at("markov_head.markov_w2.weight").sizes() == std::vector<std::int64_t>{256, 8});
  CHECK(tensors.at("confidence_head.proj.weight").sizes() == std::vector<std::int64_t>{1, 48 + 8});
  CHECK(tensors.count("confidence_head.proj.bias"));
  CHECK_FALSE(tensors.count("lm_head.weight"));
  CHECK_FALSE(tensors.count("embed_tokens.weight"));

  // A resume from step 2 draws the same anchors: the same losses and the same weights at step 4.
  const auto resumed = dir / "resumed";
  fs::create_directories(resumed);
  fs::copy(run / "checkpoint-2", resumed / "checkpoint-2", fs::copy_options::recursive);
  auto again = run_cli(train + " --output_dir " + resumed.string() + " --resume_from_checkpoint auto");
  INFO(again.output);
  REQUIRE(again.exit_code == 0);
  const auto resumed_losses = logged_losses(resumed);
  for (std::int64_t step : {3, 4}) {
    INFO("step " << step);
    REQUIRE(resumed_losses.count(step));
    CHECK(resumed_losses.at(step) == losses.at(step));
  }
  check_same_tensors(ckpt / "model.safetensors", resumed / "checkpoint-4" / "model.safetensors");
  check_same_tensors(ckpt / "optimizer.safetensors", resumed / "checkpoint-4" / "optimizer.safetensors");
  // Another Markov rank is another head: refused by name.
  auto other = run_cli("train" + kCommon + kDSpark + " --dspark_markov_rank 16 --max_steps 6 --resume_from_checkpoint " +
                       ckpt.string() + " --output_dir " + (dir / "other").string());
  INFO(other.output);
  CHECK(other.exit_code == 2);
  CHECK_THAT(other.output, Catch::Contains("dspark_markov_rank"));

  // export --format dspark: vLLM's layout, the checkpoint's tensors bit for bit; no other layout.
  const auto out = dir / "dspark-export";
  auto ex = run_cli("export --checkpoint " + ckpt.string() + " --format dspark --output " + out.string());
  INFO(ex.output);
  REQUIRE(ex.exit_code == 0);
  CHECK_THAT(ex.output, Catch::Contains("\"method\": \"dspark\""));
  CHECK_THAT(ex.output, Catch::Contains("\"num_speculative_tokens\": 4"));
  check_same_tensors(ckpt / "model.safetensors", out / "model.safetensors");
  CHECK(json::parse(read_file(out / "config.json")) == config);
  auto dflash = run_cli("export --checkpoint " + ckpt.string() + " --format dflash --output " + (dir / "x").string());
  CHECK(dflash.exit_code == 2);
  CHECK_THAT(dflash.output, Catch::Contains("dspark for a DSpark draft"));
  CHECK_FALSE(fs::exists(dir / "x"));

  // eval imports the export as it reads the checkpoint: the same numbers, the run's final AR; batched rows
  // draft each round as one by one.
  auto a = eval_json(" --checkpoint " + ckpt.string() + kCommon);
  auto b = eval_json(" --checkpoint " + out.string() + kCommon);
  CHECK(a["ar"] == b["ar"]);
  CHECK(a["eval_loss"] == b["eval_loss"]);
  CHECK(a["ar_by_depth"] == b["ar_by_depth"]);
  CHECK(a["ar_by_depth"].size() == 4);
  CHECK(a["format"] == "dspark");
  CHECK(a["ar"].get<double>() == Approx(ar.at(4)).epsilon(1e-12));
  const std::string more = " --eval_num_prompts 6 --eval_max_new_tokens 16 --target_dtype float32";
  auto one = eval_json(" --checkpoint " + out.string() + kCommon + more + " --eval_batch_size 1");
  auto four = eval_json(" --checkpoint " + out.string() + kCommon + more + " --eval_batch_size 4");
  CHECK(one["ar_by_depth"] == four["ar_by_depth"]);
  // Sampled rounds and trees are not DSpark's yet: refused by name, before any decoding.
  auto tree = run_cli("eval --checkpoint " + out.string() + kCommon + " --eval_tree_topk 1");
  CHECK(tree.exit_code == 2);
  CHECK_THAT(tree.output, Catch::Contains("eval_tree_topk"));
  auto sampled = run_cli("eval --checkpoint " + out.string() + kCommon + " --eval_temperature 1.0");
  CHECK(sampled.exit_code == 2);
  CHECK_THAT(sampled.output, Catch::Contains("left to right"));
}

TEST_CASE("--draft dspark refuses what it would ignore or cannot do, by name", "[cli]") {
  TempDir dir;
  int n = 0;
  auto refused = [&](const std::string& flags, const std::string& named) {
    auto r = run_cli("train" + kCommon + flags + " --max_steps 1 --output_dir " + (dir / std::to_string(n++)).string());
    INFO(flags << "\n" << r.output);
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.output, Catch::Contains(named));
  };
  refused(" --dspark_markov_rank 8", "--dspark_markov_rank 8 acts only with --draft dspark");
  refused(" --draft dflash --dspark_confidence_head=false", "acts only with --draft dspark");
  refused(" --draft dspark --dflash_hard_labels", "acts only with --draft dflash");
  refused(" --draft dspark --dflash_decay_gamma 0", "dflash_decay_gamma");
  refused(" --draft dspark --ttt_steps 3", "--ttt_steps 3 acts only with --draft eagle or mtp");
  refused(" --draft dspark --fc_norm", "dflash and dspark are their own drafts");
}
