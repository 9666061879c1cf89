// --draft dflash end to end on the tiny Qwen3 fixture, as subprocesses: training samples anchors and
// logs the AR of vLLM's DFlash rounds, checkpoints are vLLM's DFlashDraftModel layout, a resume draws
// the same anchors (the same losses and weights), export --format dflash (vLLM) and sglang (the same
// folder) write what eval imports back with the checkpoint's numbers, batched evaluation rows draft as
// one by one, and what DFlash cannot do is refused by name.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <filesystem>

#include "eagle/model/safetensors.h"
#include "cli_helpers.h"
#include "helpers.h"

using eagle::test::eval_json;
using eagle::test::check_same_tensors;
using eagle::test::logged_losses;
using eagle::test::read_file;
using eagle::test::read_jsonl;
using eagle::test::run_cli;
using eagle::test::TempDir;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

const std::string kQwen3 = EAGLE_SOURCE_DIR "/tests/fixtures/models/tiny-qwen3";
// The options train and eval share (eval reproduces the run's held-out split, prompts and anchors).
const std::string kCommon = std::string(" --model_name_or_path ") + kQwen3 +
                            " --data_path " EAGLE_SOURCE_DIR
                            "/tests/fixtures/data/smoke.jsonl --training_seq_len 256 --bucket_granularity 64"
                            " --validation_fraction 0.1 --per_device_train_batch_size 4 --eval_num_prompts 2"
                            " --eval_max_new_tokens 8 --device cpu --num_threads 1 --seed 42";
// A small DFlash draft: block 4 (3 tokens a round), two layers, 32 anchors per row.
const std::string kDFlash =
    " --draft dflash --dflash_block_size 4 --draft_num_layers 2 --dflash_num_anchors 32 --learning_rate 0.001"
    " --warmup_steps 0 --logging_steps 1 --gradient_accumulation_steps 2";

}  // namespace

TEST_CASE("train --draft dflash trains a DFlash draft, resumes exactly, exports as vLLM loads it, eval reads it",
          "[cli]") {
  TempDir dir;
  const auto run = dir / "run";
  const std::string train = "train" + kCommon + kDFlash + " --max_steps 4 --eval_steps 2 --save_steps 2";
  auto r = run_cli(train + " --output_dir " + run.string());
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.output, Catch::Contains("DFlash draft: 2 layer(s), block 4"));
  // The default target layers of a 3-layer target and 2 draft layers (SpecForge's rule): [0, 1].
  CHECK_THAT(r.output, Catch::Contains("target layers [0, 1]"));
  std::map<std::int64_t, double> ar;
  for (const auto& j : read_jsonl(run / "metrics.jsonl")) {
    if (j.contains("ar")) ar[j["step"].get<std::int64_t>()] = j["ar"].get<double>();
    if (j.contains("acc")) CHECK(j["acc"].size() == 3);  // one per mask slot
  }
  REQUIRE(ar.count(2));
  REQUIRE(ar.count(4));
  CHECK(ar.at(4) >= 1.0);
  const auto losses = logged_losses(run);
  REQUIRE(losses.size() == 4);

  // The checkpoint is vLLM's DFlashDraftModel folder: no embedding, LM head or vocabulary maps.
  const auto ckpt = run / "checkpoint-4";
  auto config = json::parse(read_file(ckpt / "config.json"));
  CHECK(config["architectures"][0] == "DFlashDraftModel");
  CHECK(config["model_type"] == "qwen3");
  CHECK(config["num_hidden_layers"] == 2);
  CHECK(config["block_size"] == 4);
  CHECK(config["dflash_config"]["mask_token_id"] == 5);  // mask_token_id -1: the target's first end id
  CHECK(config["dflash_config"]["target_layer_ids"] == json::array({0, 1}));
  CHECK(config["layer_types"] == json::array({"full_attention", "full_attention"}));
  auto tensors = eagle::model::load_safetensors((ckpt / "model.safetensors").string());
  for (const auto& [name, t] : tensors) {
    INFO(name);
    CHECK((name.rfind("fc.", 0) == 0 || name.rfind("hidden_norm.", 0) == 0 || name.rfind("layers.", 0) == 0 ||
           name.rfind("norm.", 0) == 0));
  }
  CHECK(tensors.count("fc.weight"));
  CHECK(tensors.at("fc.weight").size(1) == 2 * 48);  // two target layers of hidden size 48
  CHECK(tensors.count("layers.1.self_attn.k_norm.weight"));

  // A resume from step 2 draws the same anchors: the same losses and the same weights at step 4.
  const auto resumed = dir / "resumed";
  fs::create_directories(resumed);
  fs::copy(run / "checkpoint-2", resumed / "checkpoint-2", fs::copy_options::recursive);
  auto again = run_cli(train + " --output_dir " + resumed.string() + " --resume_from_checkpoint auto");
  INFO(again.output);
  REQUIRE(again.exit_code == 0);
  CHECK_THAT(again.output, Catch::Contains("resumed from"));
  const auto resumed_losses = logged_losses(resumed);
  for (std::int64_t step : {3, 4}) {
    INFO("step " << step);
    REQUIRE(resumed_losses.count(step));
    CHECK(resumed_losses.at(step) == losses.at(step));
  }
  check_same_tensors(ckpt / "model.safetensors", resumed / "checkpoint-4" / "model.safetensors");
  check_same_tensors(ckpt / "optimizer.safetensors", resumed / "checkpoint-4" / "optimizer.safetensors");
  // Another block is another head: refused by name.
  auto other = run_cli("train" + kCommon + kDFlash + " --dflash_block_size 8 --max_steps 6 --resume_from_checkpoint " +
                       ckpt.string() + " --output_dir " + (dir / "other").string());
  INFO(other.output);
  CHECK(other.exit_code == 2);
  CHECK_THAT(other.output, Catch::Contains("dflash_block_size"));

  // export --format dflash: vLLM's layout, the checkpoint's tensors bit for bit.
  const auto out = dir / "dflash-export";
  auto ex = run_cli("export --checkpoint " + ckpt.string() + " --format dflash --output " + out.string());
  INFO(ex.output);
  REQUIRE(ex.exit_code == 0);
  CHECK_THAT(ex.output, Catch::Contains("\"method\": \"dflash\""));
  CHECK_THAT(ex.output, Catch::Contains("\"num_speculative_tokens\": 3"));
  check_same_tensors(ckpt / "model.safetensors", out / "model.safetensors");
  CHECK(json::parse(read_file(out / "config.json"))["dflash_config"] == config["dflash_config"]);
  // export --format sglang: the same folder (SGLang's DFlashDraftModel reads vLLM's names and keys),
  // served with SGLang's DFLASH and the whole block as its draft tokens.
  const auto sg = dir / "sglang-export";
  auto sgx = run_cli("export --checkpoint " + ckpt.string() + " --format sglang --output " + sg.string());
  INFO(sgx.output);
  REQUIRE(sgx.exit_code == 0);
  CHECK_THAT(sgx.output, Catch::Contains("--speculative-algorithm DFLASH --speculative-draft-model-path " +
                                         sg.string() + " --speculative-num-draft-tokens 4"));
  check_same_tensors(ckpt / "model.safetensors", sg / "model.safetensors");
  CHECK(json::parse(read_file(sg / "config.json")) == json::parse(read_file(out / "config.json")));
  // speculators' layout (its DFlashDraftModel, non-causal blocks): the same tensors, read back as the checkpoint.
  const auto spec_dir = dir / "speculators-export";
  auto spec =
      run_cli("export --checkpoint " + ckpt.string() + " --format speculators --output " + spec_dir.string());
  INFO(spec.output);
  REQUIRE(spec.exit_code == 0);
  check_same_tensors(ckpt / "model.safetensors", spec_dir / "model.safetensors");
  const auto spec_config = json::parse(read_file(spec_dir / "config.json"));
  CHECK(spec_config["speculators_model_type"] == "dflash");
  CHECK(spec_config["sliding_window_non_causal"] == true);
  CHECK(spec_config["aux_hidden_state_layer_ids"] == json::array({1, 2}));
  CHECK(eval_json(" --checkpoint " + spec_dir.string() + kCommon)["ar"] ==
        eval_json(" --checkpoint " + ckpt.string() + kCommon)["ar"]);
  // A DFlash draft has no EAGLE layout, and nothing is overwritten.
  auto eagle1 =
      run_cli("export --checkpoint " + ckpt.string() + " --format vllm-eagle1 --output " + (dir / "x").string());
  CHECK(eagle1.exit_code == 2);
  CHECK_THAT(eagle1.output, Catch::Contains("dflash (vLLM's DFlashDraftModel), sglang"));
  CHECK_FALSE(fs::exists(dir / "x"));
  CHECK(run_cli("export --checkpoint " + ckpt.string() + " --format dflash --output " + out.string()).exit_code != 0);

  // eval imports the export as it reads the checkpoint: the same numbers, the run's final AR.
  auto a = eval_json(" --checkpoint " + ckpt.string() + kCommon);
  auto b = eval_json(" --checkpoint " + out.string() + kCommon);
  CHECK(a["ar"] == b["ar"]);
  CHECK(a["eval_loss"] == b["eval_loss"]);
  CHECK(a["ar_by_depth"] == b["ar_by_depth"]);
  auto c = eval_json(" --checkpoint " + sg.string() + kCommon);  // the SGLang export, imported back
  CHECK(a["ar"] == c["ar"]);
  CHECK(a["eval_loss"] == c["eval_loss"]);
  CHECK(a["ar_by_depth"] == c["ar_by_depth"]);
  CHECK(a["ar_by_depth"].size() == 3);
  CHECK(a["format"] == "dflash");
  CHECK(a["head"]["draft"] == "dflash");
  CHECK(a["ar"].get<double>() == Approx(ar.at(4)).epsilon(1e-12));
  // Sampled chains come from the same one forward a round; trees are refused by name.
  auto sampled = eval_json(" --checkpoint " + out.string() + kCommon + " --eval_temperature 1.0");
  CHECK(sampled.contains("temp_ar"));
  auto tree = run_cli("eval --checkpoint " + out.string() + kCommon + " --eval_tree_topk 1");
  CHECK(tree.exit_code == 2);
  CHECK_THAT(tree.output, Catch::Contains("eval_tree_topk"));
  auto longer = run_cli("eval --checkpoint " + out.string() + kCommon + " --eval_draft_len 5");
  CHECK(longer.exit_code == 2);
  CHECK_THAT(longer.output, Catch::Contains("eval_draft_len"));

  // Batched rows (eval_batch_size 4, rows refilled as prompts end) draft each round as one by one:
  // with an fp32 target, the same AR at every depth.
  const std::string more = " --eval_num_prompts 6 --eval_max_new_tokens 16 --target_dtype float32";
  auto one = eval_json(" --checkpoint " + ckpt.string() + kCommon + more + " --eval_batch_size 1");
  auto four = run_cli("eval --checkpoint " + ckpt.string() + kCommon + more + " --eval_batch_size 4 --json");
  INFO(four.output);
  REQUIRE(four.exit_code == 0);
  CHECK_THAT(four.output, Catch::Contains("prompts (4 at a time)"));
  const auto batched = json::parse(four.output.substr(four.output.find("{\n")));
  CHECK(batched["ar"] == one["ar"]);
  CHECK(batched["ar_by_depth"] == one["ar_by_depth"]);
  CHECK(one["ar_by_depth"].size() == 3);
}

TEST_CASE("--draft dflash refuses what it would ignore or cannot do, by name", "[cli]") {
  TempDir dir;
  int n = 0;
  auto refused = [&](const std::string& flags, const std::string& named) {
    auto r = run_cli("train" + kCommon + flags + " --max_steps 1 --output_dir " + (dir / std::to_string(n++)).string());
    INFO(flags << "\n" << r.output);
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.output, Catch::Contains(named));
  };
  // DFlash options without --draft dflash, and EAGLE's options with it.
  refused(" --dflash_block_size 8", "--dflash_block_size 8 acts only with --draft dflash");
  refused(" --dflash_hard_labels", "acts only with --draft dflash");
  refused(" --draft dflash --ttt_steps 3", "--ttt_steps 3 acts only with --draft eagle or mtp");
  refused(" --draft dflash --draft_vocab_size 64", "--draft_vocab_size 64 acts only with --draft eagle or mtp");
  refused(" --draft dflash --fc_norm", "dflash, dspark and dflash2 are their own drafts");
  refused(" --draft dflash --aux_hidden_state_layer_ids 1,2,3", "dflash, dspark and dflash2 are their own drafts");
  // What the target or the evaluation cannot take.
  refused(" --draft dflash --mask_token_id 300", "mask_token_id");
  refused(" --draft dflash --dflash_target_layers 0,7", "dflash_target_layers");
  refused(" --draft dflash --eval_tree_topk 1", "0 for a DFlash draft");
  refused(" --draft dflash --dflash_block_size 4 --eval_draft_len 4", "eval_draft_len");
  refused(" --draft dflash --dry_run", "dry_run");
  refused(" --draft medusa", "eagle|mtp|dflash");
}

TEST_CASE(
    "--draft dflash refuses training data with no whole block to train, before anything is written (issue 53 "
    "item 5)",
    "[cli]") {
  TempDir dir;
  // Samples of 6 tokens, the last four trained: EAGLE trains on them, but no block of 8 fits in a sample.
  std::string lines;
  for (int i = 0; i < 20; ++i)
    lines += "{\"input_ids\":[1," + std::to_string(10 + i) + ",20,30,40,50],\"loss_mask\":[0,0,1,1,1,1]}\n";
  const auto data = dir / "short.jsonl";
  eagle::test::write_file(data, lines);
  std::string common = kCommon;
  common.replace(common.find(EAGLE_SOURCE_DIR "/tests/fixtures/data/smoke.jsonl"),
                 std::string(EAGLE_SOURCE_DIR "/tests/fixtures/data/smoke.jsonl").size(), data.string());
  auto r = run_cli("train" + common + " --draft dflash --dflash_block_size 8 --max_steps 2 --save_steps 1" +
                   " --output_dir " + (dir / "run").string());
  INFO(r.output);
  CHECK(r.exit_code == 3);
  CHECK_THAT(r.output, Catch::Contains("short.jsonl") && Catch::Contains("nothing a DFlash draft can train on") &&
                           Catch::Contains("a whole block of 8 tokens"));
  CHECK_FALSE(std::filesystem::exists(dir / "run" / "checkpoint-1"));
  // A block of 4 fits: it trains.
  auto ok = run_cli("train" + common + " --draft dflash --dflash_block_size 4 --max_steps 2 --eval_steps 0" +
                    " --output_dir " + (dir / "ok").string());
  INFO(ok.output);
  CHECK(ok.exit_code == 0);
}

TEST_CASE("A DFlash draft learns where EAGLE-3 learns (issue 53 item 2)", "[cli]") {
  // tiny-llama-learn and the recurrence data (scripts/make_learning_fixture.py): a random target whose
  // argmax a draft can fit. The same data, steps, learning rate and seed for an EAGLE-3 head and a one-layer
  // DFlash draft with block 4, each evaluated at 3 drafted tokens on the same held-out prompts. Slot 1 of
  // the block sees what EAGLE-3's first step sees (the context before the anchor and the anchor's token), so
  // their AR at depth 1 must be alike. Measured on this machine (2 cores, --num_threads 1): EAGLE-3
  // ar@1 1.135, DFlash 1.143 (speculators 0.9.0's DFlash on the same features and data: held-out slot-1
  // accuracy within 0.01 of ours, docs/benchmarks.md); the draft reported in issue 53 stayed at 1.001. The
  // bounds leave room for another CPU's rounding: EAGLE-3 must gain at least 0.06 (half its measured 0.135),
  // DFlash at least half of what EAGLE-3 gains.
  TempDir dir;
  const std::string fixtures = EAGLE_SOURCE_DIR "/tests/fixtures/";
  const std::string common = " --model_name_or_path " + fixtures + "models/tiny-llama-learn --data_path " + fixtures +
                             "data/recurrence_train.jsonl --eval_data_path " + fixtures +
                             "data/recurrence_eval.jsonl --per_device_train_batch_size 4 --training_seq_len 256"
                             " --bucket_granularity 64 --learning_rate 3e-3 --seed 11 --max_steps 150"
                             " --logging_steps 50 --eval_num_prompts 16 --eval_max_new_tokens 32 --device cpu"
                             " --num_threads 1";
  auto ar_at_1 = [&](const std::string& flags, const std::string& name) {
    auto r = run_cli("train" + common + flags + " --output_dir " + (dir / name).string());
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    const auto summary = json::parse(read_file(dir / name / "summary.json"));
    REQUIRE(summary["ar_by_depth"].size() == 3);
    return summary["ar_by_depth"][0].get<double>();
  };
  const double eagle = ar_at_1(" --draft_vocab_size 512 --eval_draft_len 3", "eagle3");
  const double dflash = ar_at_1(" --draft dflash --dflash_block_size 4 --draft_num_layers 1", "dflash");
  INFO("EAGLE-3 ar@1 " << eagle << ", DFlash ar@1 " << dflash);
  CHECK(eagle - 1.0 >= 0.06);
  CHECK(dflash - 1.0 >= 0.5 * (eagle - 1.0));
}
