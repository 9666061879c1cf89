// --draft dflash2 end to end on the tiny Qwen3 fixture, as subprocesses: it trains on DFlash's anchors and logs the
// AR of vLLM's DFlash2 rounds (the block's slots walked left to right by the candidate selector), a resume draws
// the same anchors (the same losses and weights), checkpoints and export --format dflash are vLLM's
// DFlash2DraftModel folder, export --format speculators speculators' layout, eval imports both back with the
// checkpoint's numbers, batched evaluation drafts as one by one, sampled rounds and the teacher-forced alpha run,
// and what it cannot do is refused by name.
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
// A small DFlash2 draft: block 4 (3 tokens a round), two layers, 2-tap convolutions over groups of 16 channels,
// the selector of rank 8 over the top 16, 32 anchors per row.
const std::string kDFlash2 =
    " --draft dflash2 --dflash_block_size 4 --draft_num_layers 2 --dflash_num_anchors 32 --dflash_decay_gamma 4"
    " --dflash2_selector_rank 8 --learning_rate 0.001 --warmup_steps 0 --logging_steps 1"
    " --gradient_accumulation_steps 2";

}  // namespace

TEST_CASE("train --draft dflash2 trains, resumes exactly, exports vLLM's and speculators' layouts, eval reads them",
          "[cli]") {
  TempDir dir;
  const auto run = dir / "run";
  const std::string train = "train" + kCommon + kDFlash2 + " --max_steps 4 --eval_steps 2 --save_steps 2";
  auto r = run_cli(train + " --output_dir " + run.string());
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.output, Catch::Contains("DFlash2 draft: 2 layer(s), block 4 (3 tokens per round)"));
  CHECK_THAT(r.output, Catch::Contains("selector rank 8 over the top 16"));
  std::map<std::int64_t, double> ar;
  for (const auto& j : read_jsonl(run / "metrics.jsonl")) {
    if (j.contains("ar")) ar[j["step"].get<std::int64_t>()] = j["ar"].get<double>();
    if (j.contains("acc")) CHECK(j["acc"].size() == 3);
  }
  REQUIRE(ar.count(4));
  CHECK(ar.at(4) >= 1.0);
  const auto losses = logged_losses(run);
  REQUIRE(losses.size() == 4);

  // The checkpoint is vLLM's DFlash2DraftModel folder: DFlash's keys with the four vLLM requires.
  const auto ckpt = run / "checkpoint-4";
  auto config = json::parse(read_file(ckpt / "config.json"));
  CHECK(config["architectures"][0] == "DFlash2DraftModel");
  CHECK(config["dflash_config"]["conv_kernel_size"] == 2);
  CHECK(config["dflash_config"]["conv_group_size"] == 16);
  CHECK(config["dflash_config"]["selector_rank"] == 8);
  CHECK(config["dflash_config"]["selector_top_k"] == 16);
  CHECK(config["dflash_config"]["target_layer_ids"] == json::array({0, 1}));
  auto tensors = eagle::model::load_safetensors((ckpt / "model.safetensors").string());
  CHECK(tensors.at("layers.1.attention_conv.base_kernel").sizes() == std::vector<std::int64_t>{2, 2, 48});
  CHECK(tensors.at("layers.1.mlp_conv.kernel_projection.weight").sizes() == std::vector<std::int64_t>{2 * 2 * 3, 48});
  CHECK(tensors.at("candidate_selector.predecessor_codebook").sizes() == std::vector<std::int64_t>{256, 8});
  CHECK(tensors.at("candidate_selector.hidden_projection.weight").sizes() == std::vector<std::int64_t>{8, 48});
  CHECK_FALSE(tensors.count("lm_head.weight"));

  // A resume from step 2: the same losses and weights at step 4.
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

  // Both layouts, the checkpoint's tensors bit for bit; eval reads each with the checkpoint's numbers.
  const auto native = dir / "native", spec = dir / "speculators";
  auto nx = run_cli("export --checkpoint " + ckpt.string() + " --format dflash --output " + native.string());
  INFO(nx.output);
  REQUIRE(nx.exit_code == 0);
  CHECK_THAT(nx.output, Catch::Contains("\"method\": \"dflash\""));
  CHECK(json::parse(read_file(native / "config.json")) == config);
  check_same_tensors(ckpt / "model.safetensors", native / "model.safetensors");
  auto sx = run_cli("export --checkpoint " + ckpt.string() + " --format speculators --output " + spec.string());
  INFO(sx.output);
  REQUIRE(sx.exit_code == 0);
  check_same_tensors(ckpt / "model.safetensors", spec / "model.safetensors");
  auto sc = json::parse(read_file(spec / "config.json"));
  CHECK(sc["speculators_model_type"] == "dflash2");
  CHECK(sc["architectures"][0] == "DFlash2DraftModel");
  CHECK(sc["sample_from_anchor"] == false);
  CHECK(sc["sliding_window_non_causal"] == true);
  CHECK(sc["selector_top_k"] == 16);
  CHECK(sc["aux_hidden_state_layer_ids"] == json::array({1, 2}));
  CHECK(sc["speculators_config"]["proposal_methods"][0]["speculative_tokens"] == 3);
  auto sglang = run_cli("export --checkpoint " + ckpt.string() + " --format sglang --output " + (dir / "x").string());
  CHECK(sglang.exit_code == 2);
  CHECK_THAT(sglang.output, Catch::Contains("dflash or speculators for a DFlash2 draft"));

  auto a = eval_json(" --checkpoint " + ckpt.string() + kCommon);
  auto b = eval_json(" --checkpoint " + native.string() + kCommon);
  auto c = eval_json(" --checkpoint " + spec.string() + kCommon);
  CHECK(a["ar_by_depth"].size() == 3);
  CHECK(a["ar_by_depth"] == b["ar_by_depth"]);
  CHECK(a["ar_by_depth"] == c["ar_by_depth"]);
  CHECK(a["eval_loss"] == b["eval_loss"]);
  CHECK(a["head"]["draft"] == "dflash2");
  CHECK(c["format"] == "speculators");
  CHECK(a["ar"].get<double>() == Approx(ar.at(4)).epsilon(1e-12));
  const std::string more = " --eval_num_prompts 6 --eval_max_new_tokens 16 --target_dtype float32";
  auto one = eval_json(" --checkpoint " + native.string() + kCommon + more + " --eval_batch_size 1");
  auto four = eval_json(" --checkpoint " + native.string() + kCommon + more + " --eval_batch_size 4");
  CHECK(one["ar_by_depth"] == four["ar_by_depth"]);
  // Sampled rounds (each slot sampled among its candidates, scored against the token sampled before) and alpha.
  auto sampled = eval_json(" --checkpoint " + native.string() + kCommon + " --eval_temperature 1.0");
  REQUIRE(sampled.contains("temp_ar"));
  CHECK(sampled["temp_ar"].get<double>() >= 1.0);
  REQUIRE(sampled.contains("alpha"));
  CHECK(sampled["alpha"].size() == 3);
}

TEST_CASE("--draft dflash2 refuses what it would ignore or cannot do, by name", "[cli]") {
  TempDir dir;
  int n = 0;
  auto refused = [&](const std::string& flags, const std::string& named) {
    auto r = run_cli("train" + kCommon + flags + " --max_steps 1 --output_dir " + (dir / std::to_string(n++)).string());
    INFO(flags << "\n" << r.output);
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.output, Catch::Contains(named));
  };
  refused(" --dflash2_selector_rank 8", "--dflash2_selector_rank 8 acts only with --draft dflash2");
  refused(" --draft dflash2 --dflash2_conv_group_size 5", "dflash2_conv_group_size");  // 48 is not a multiple
  refused(" --draft dflash2 --dflash_block_size 4 --dflash2_conv_kernel_size 5", "dflash2_conv_kernel_size");
  refused(" --draft dflash2 --dflash2_selector_top_k 300", "dflash2_selector_top_k");  // the vocabulary is 256
  refused(" --draft dflash2 --dflash_hard_labels", "acts only with --draft dflash");
  refused(" --draft dflash2 --fc_norm", "dflash, dspark and dflash2 are their own drafts");
}

TEST_CASE("eval reads a DFlash2 draft as speculators 0.9.0 saved it, and export writes its layouts back", "[cli]") {
  // tests/fixtures/models/dflash2-speculators: speculators' own save_pretrained (scripts/make_dflash2_reference.py)
  // for the tiny Qwen3 target: block 4, 2 taps over groups of 16, the selector of rank 8 over the top 64.
  const std::string saved = EAGLE_SOURCE_DIR "/tests/fixtures/models/dflash2-speculators";
  TempDir dir;
  const auto native = dir / "native", spec = dir / "speculators";
  auto nx = run_cli("export --checkpoint " + saved + " --format dflash --output " + native.string());
  INFO(nx.output);
  REQUIRE(nx.exit_code == 0);
  check_same_tensors(fs::path(saved) / "model.safetensors", native / "model.safetensors");
  auto nc = json::parse(read_file(native / "config.json"));
  CHECK(nc["architectures"][0] == "DFlash2DraftModel");
  CHECK(nc["dflash_config"]["target_layer_ids"] == json::array({0, 1}));  // aux ids 1, 2
  CHECK(nc["dflash_config"]["selector_top_k"] == 64);
  auto sx = run_cli("export --checkpoint " + saved + " --format speculators --output " + spec.string());
  INFO(sx.output);
  REQUIRE(sx.exit_code == 0);
  check_same_tensors(fs::path(saved) / "model.safetensors", spec / "model.safetensors");
  const auto theirs = json::parse(read_file(fs::path(saved) / "config.json"));
  const auto ours = json::parse(read_file(spec / "config.json"));
  for (const char* key : {"speculators_model_type", "architectures", "aux_hidden_state_layer_ids", "block_size",
                          "draft_vocab_size", "mask_token_id", "sample_from_anchor", "sliding_window_non_causal",
                          "conv_kernel_size", "conv_group_size", "selector_rank", "selector_top_k"}) {
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
  const std::string args = std::string(" --model_name_or_path ") + kQwen3 +
                           " --data_path " EAGLE_SOURCE_DIR "/tests/fixtures/data/smoke.jsonl --training_seq_len 256"
                           " --validation_fraction 0.1 --eval_num_prompts 2 --eval_max_new_tokens 8 --device cpu"
                           " --num_threads 1 --seed 42";
  auto a = eval_json(" --checkpoint " + saved + args);
  auto b = eval_json(" --checkpoint " + native.string() + args);
  auto c = eval_json(" --checkpoint " + spec.string() + args);
  CHECK(a["format"] == "speculators");
  CHECK(a["ar_by_depth"].size() == 3);
  CHECK(a["ar_by_depth"] == b["ar_by_depth"]);
  CHECK(a["ar_by_depth"] == c["ar_by_depth"]);
}
