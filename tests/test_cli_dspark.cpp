// --draft dspark end to end on the tiny Qwen3 fixture, as subprocesses: training draws DFlash's anchors for the
// anchor-as-first block and logs the AR of vLLM's DSpark rounds (all block_size tokens, left to right with the
// Markov bias), checkpoints are vLLM's Qwen3DSparkModel layout, a resume draws the same anchors (the same
// losses and weights), export --format dspark and --format speculators write what eval imports back with the
// checkpoint's numbers, batched evaluation drafts as one by one, sampled rounds and the teacher-forced alpha
// run; the 1 + N fill-in layout trains, exports and evaluates; a draft speculators saved itself is read; and
// what DSpark cannot do is refused by name.
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
  CHECK_THAT(dflash.output, Catch::Contains("dspark or speculators for a DSpark draft"));
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
  // Sampled rounds (each token sampled after the one before it biased its logits) and the teacher-forced alpha;
  // trees are refused by name, before any decoding.
  auto sampled = eval_json(" --checkpoint " + out.string() + kCommon + " --eval_temperature 1.0");
  REQUIRE(sampled.contains("temp_ar"));
  CHECK(sampled["temp_ar"].get<double>() >= 1.0);
  REQUIRE(sampled.contains("alpha"));
  CHECK(sampled["alpha"].size() == 4);
  auto tree = run_cli("eval --checkpoint " + out.string() + kCommon + " --eval_tree_topk 1");
  CHECK(tree.exit_code == 2);
  CHECK_THAT(tree.output, Catch::Contains("eval_tree_topk"));

  // export --format speculators: speculators' layout of the same tensors, which eval reads with the same numbers.
  const auto spec = dir / "speculators-export";
  auto sx = run_cli("export --checkpoint " + ckpt.string() + " --format speculators --output " + spec.string());
  INFO(sx.output);
  REQUIRE(sx.exit_code == 0);
  check_same_tensors(ckpt / "model.safetensors", spec / "model.safetensors");
  auto sc = json::parse(read_file(spec / "config.json"));
  CHECK(sc["speculators_model_type"] == "dspark");
  CHECK(sc["speculators_config"]["proposal_methods"][0]["speculative_tokens"] == 4);
  CHECK(sc["aux_hidden_state_layer_ids"] == json::array({1, 2}));
  CHECK(sc["sample_from_anchor"] == true);
  auto c = eval_json(" --checkpoint " + spec.string() + kCommon);
  CHECK(c["ar"] == a["ar"]);
  CHECK(c["ar_by_depth"] == a["ar_by_depth"]);
  CHECK(c["format"] == "speculators");
}

TEST_CASE("--draft dspark in the 1 + N fill-in layout trains, exports and evaluates", "[cli]") {
  TempDir dir;
  const auto run = dir / "run";
  auto r = run_cli("train" + kCommon + kDSpark + " --dspark_sample_from_anchor=false --max_steps 2 --eval_steps 2" +
                   " --output_dir " + run.string());
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.output, Catch::Contains("block 4 (3 tokens per round, 1 + N fill-in)"));
  for (const auto& j : read_jsonl(run / "metrics.jsonl"))
    if (j.contains("acc")) CHECK(j["acc"].size() == 3);  // slots 1..3 draft
  const auto ckpt = run / "checkpoint-2";
  CHECK(json::parse(read_file(ckpt / "config.json"))["sample_from_anchor"] == false);
  const auto spec = dir / "speculators-export";
  auto sx = run_cli("export --checkpoint " + ckpt.string() + " --format speculators --output " + spec.string());
  INFO(sx.output);
  REQUIRE(sx.exit_code == 0);
  auto sc = json::parse(read_file(spec / "config.json"));
  CHECK(sc["sample_from_anchor"] == false);
  CHECK(sc["speculators_config"]["proposal_methods"][0]["speculative_tokens"] == 3);
  auto a = eval_json(" --checkpoint " + ckpt.string() + kCommon);
  auto b = eval_json(" --checkpoint " + spec.string() + kCommon);
  CHECK(a["ar_by_depth"].size() == 3);
  CHECK(a["ar_by_depth"] == b["ar_by_depth"]);
  // Another layout is another head: a resume in the anchor-as-first layout is refused by name.
  auto other = run_cli("train" + kCommon + kDSpark + " --max_steps 4 --resume_from_checkpoint " + ckpt.string() +
                       " --output_dir " + (dir / "other").string());
  INFO(other.output);
  CHECK(other.exit_code == 2);
  CHECK_THAT(other.output, Catch::Contains("sample_from_anchor"));
}

TEST_CASE("eval reads a DSpark draft as speculators 0.9.0 saved it, and export writes its layouts back", "[cli]") {
  // tests/fixtures/models/dspark-speculators: speculators' own save_pretrained (scripts/make_dspark_reference.py)
  // for the tiny Qwen3 target, anchor first.
  const std::string saved = EAGLE_SOURCE_DIR "/tests/fixtures/models/dspark-speculators";
  TempDir dir;
  const auto native = dir / "native", spec = dir / "speculators";
  auto nx = run_cli("export --checkpoint " + saved + " --format dspark --output " + native.string());
  INFO(nx.output);
  REQUIRE(nx.exit_code == 0);
  check_same_tensors(fs::path(saved) / "model.safetensors", native / "model.safetensors");
  auto nc = json::parse(read_file(native / "config.json"));
  CHECK(nc["dflash_config"]["target_layer_ids"] == json::array({0, 1}));  // aux ids 1, 2
  CHECK(nc["sample_from_anchor"] == true);
  CHECK(nc["block_size"] == 4);
  CHECK(nc["markov_rank"] == 8);
  // Written back in speculators' layout: every key vLLM's update_dspark reads, as speculators wrote it.
  auto sx = run_cli("export --checkpoint " + saved + " --format speculators --output " + spec.string());
  INFO(sx.output);
  REQUIRE(sx.exit_code == 0);
  check_same_tensors(fs::path(saved) / "model.safetensors", spec / "model.safetensors");
  const auto theirs = json::parse(read_file(fs::path(saved) / "config.json"));
  const auto ours = json::parse(read_file(spec / "config.json"));
  for (const char* key : {"speculators_model_type", "aux_hidden_state_layer_ids", "block_size", "draft_vocab_size",
                          "mask_token_id", "markov_rank", "markov_head_type", "enable_confidence_head",
                          "confidence_head_with_markov", "sample_from_anchor", "sliding_window_non_causal"}) {
    INFO(key);
    CHECK(ours[key] == theirs[key]);
  }
  CHECK(ours["speculators_config"]["proposal_methods"] == theirs["speculators_config"]["proposal_methods"]);
  for (const char* key : {"vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                          "num_key_value_heads", "head_dim", "hidden_act", "rms_norm_eps", "attention_bias",
                          "layer_types", "rope_parameters", "max_position_embeddings"}) {
    INFO(key);
    CHECK(ours["transformer_layer_config"][key] == theirs["transformer_layer_config"][key]);
  }
  // eval reads speculators' folder and both exports alike.
  const std::string args = std::string(" --model_name_or_path ") + kQwen3 +
                           " --data_path " EAGLE_SOURCE_DIR
                           "/tests/fixtures/data/smoke.jsonl --training_seq_len 256"
                           " --validation_fraction 0.1 --eval_num_prompts 2 --eval_max_new_tokens 8 --device cpu"
                           " --num_threads 1 --seed 42";
  auto a = eval_json(" --checkpoint " + saved + args);
  auto b = eval_json(" --checkpoint " + native.string() + args);
  auto c = eval_json(" --checkpoint " + spec.string() + args);
  CHECK(a["format"] == "speculators");
  CHECK(a["ar_by_depth"].size() == 4);
  CHECK(a["ar_by_depth"] == b["ar_by_depth"]);
  CHECK(a["ar_by_depth"] == c["ar_by_depth"]);
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
  refused(" --draft dspark --fc_norm", "dflash, dspark and dflash2 are their own drafts");
}

TEST_CASE("--draft dspark and dflash2 train from dumped float32 features as with the target in the step", "[cli]") {
  // The stored-feature path: the features of target layers 0, 1, 2 (aux ids 1, 2, 3) of the 4-layer tiny Llama,
  // dumped in float32, train the same losses as the target run in the step (DSpark, and DFlash2 on the same
  // backbone).
  const std::string draft =
      GENERATE(as<std::string>{}, kDSpark,
               " --draft dflash2 --dflash_block_size 4 --draft_num_layers 2 --dflash_num_anchors 32"
               " --dflash_decay_gamma 4 --dflash2_selector_rank 8 --learning_rate 0.001"
               " --warmup_steps 0 --logging_steps 1 --gradient_accumulation_steps 2");
  INFO(draft);
  const std::string llama = EAGLE_SOURCE_DIR "/tests/fixtures/models/tiny-llama";
  const std::string data = " --data_path " EAGLE_SOURCE_DIR
                           "/tests/fixtures/data/smoke.jsonl --training_seq_len 128"
                           " --validation_fraction 0.1 --device cpu --num_threads 1 --seed 42";
  TempDir dir;
  const auto features = dir / "features";
  auto d = run_cli("dump-features --model_name_or_path " + llama + data + " --features_dtype float32" +
                   " --aux_hidden_state_layer_ids 1,2,3 --output " + features.string());
  INFO(d.output);
  REQUIRE(d.exit_code == 0);
  const std::string train = "train --model_name_or_path " + llama + data + draft +
                            " --dflash_target_layers 0,1,2 --per_device_train_batch_size 4 --bucket_granularity 32" +
                            " --max_steps 3 --eval_steps 0 --save_steps 0 --eval_num_prompts 0";
  auto on = run_cli(train + " --output_dir " + (dir / "online").string());
  INFO(on.output);
  REQUIRE(on.exit_code == 0);
  auto off = run_cli(train + " --features_path " + features.string() + " --output_dir " + (dir / "offline").string());
  INFO(off.output);
  REQUIRE(off.exit_code == 0);
  const auto a = logged_losses(dir / "online"), b = logged_losses(dir / "offline");
  REQUIRE(a.size() == 3);
  REQUIRE(b.size() == 3);
  // The same fp32 features (stored and read back exactly) and the same anchors; the target's forward in the
  // step and the dump's batch differ only in the rows batched together (1e-5: test_features_source.cpp's bound).
  for (const auto& [step, loss] : a) {
    INFO("step " << step);
    CHECK(std::abs(loss - b.at(step)) <= 1e-5);
  }
}
