// train --init_draft as subprocesses: a run starts from a draft folder in each layout eval reads (eagle-train's
// checkpoint, its speculators export, drafts speculators saved itself, an MTP target folder), with the draft's
// weights bit for bit (a step at learning rate 0 changes nothing) and its draft vocabulary, a fresh optimizer and
// schedule, and trains on from there; the draft's config decides the head (--draft and its sizes left at their
// defaults take the draft's); an option that contradicts it is refused by name; a SpecForge head that names no
// aux layers is read with the engines' default layers, by eval, export and --init_draft.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>

#include "cli_helpers.h"
#include "eagle/model/safetensors.h"
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

const std::string kModels = EAGLE_SOURCE_DIR "/tests/fixtures/models/";
const std::string kData = " --data_path " EAGLE_SOURCE_DIR
                          "/tests/fixtures/data/smoke.jsonl --training_seq_len 256 --bucket_granularity 64"
                          " --validation_fraction 0.1 --per_device_train_batch_size 4 --eval_num_prompts 2"
                          " --eval_max_new_tokens 8 --device cpu --num_threads 1 --seed 42";
const std::string kLlama = " --model_name_or_path " + kModels + "tiny-llama" + kData;
const std::string kQwen3 = " --model_name_or_path " + kModels + "tiny-qwen3" + kData;
// One step that changes nothing: the head it saves is the head it started from.
const std::string kStill = " --learning_rate 0 --warmup_steps 0 --max_steps 1 --eval_steps 0 --logging_steps 1";

// `train ARGS --output_dir DIR`, which must succeed; its output.
std::string train_ok(const std::string& args, const fs::path& dir) {
  auto r = run_cli("train" + args + " --output_dir " + dir.string());
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  return r.output;
}

// `train ARGS`, which must be refused (exit 2) naming `name`.
void refused(const std::string& args, const fs::path& dir, const std::string& name) {
  auto r = run_cli("train" + args + " --max_steps 1 --output_dir " + dir.string());
  INFO(r.output);
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.output, Catch::Contains(name));
}

// A head folder's config.json, edited.
void edit_config(const fs::path& dir, const std::function<void(json&)>& edit) {
  auto j = json::parse(read_file(dir / "config.json"));
  edit(j);
  std::ofstream(dir / "config.json") << j.dump(2);
}

}  // namespace

TEST_CASE("train --init_draft starts from an EAGLE-3 draft in each layout, its weights and vocabulary kept", "[cli]") {
  TempDir dir;
  // The source: a run with a reduced draft vocabulary of 128 ids and two layers.
  const auto base = dir / "base";
  train_ok(kLlama + " --draft_vocab_size 128 --draft_num_layers 2 --ttt_steps 3 --max_steps 4 --eval_steps 0" +
               " --learning_rate 0.001 --warmup_steps 0",
           base);
  const auto ckpt = base / "checkpoint-4";
  const auto speculators = dir / "speculators";
  REQUIRE(run_cli("export --checkpoint " + ckpt.string() + " --format speculators --output " + speculators.string())
              .exit_code == 0);
  for (const auto& source : {ckpt, speculators}) {
    INFO(source);
    // Neither --draft_vocab_size nor --draft_num_layers is given: the draft's are taken.
    const auto run = dir / ("still-" + source.filename().string());
    const auto out = train_ok(kLlama + kStill + " --ttt_steps 3 --init_draft " + source.string(), run);
    CHECK_THAT(out, Catch::Contains("starting from the draft " + source.string()));
    CHECK_THAT(out, Catch::Contains("draft vocabulary (the draft's): 128 of 512"));
    // The draft's tensors (d2t and t2d included) bit for bit, and a fresh optimizer: the state is at step 1.
    check_same_tensors(ckpt / "model.safetensors", run / "checkpoint-1" / "model.safetensors");
    CHECK(json::parse(read_file(run / "checkpoint-1" / "trainer_state.json"))["step"] == 1);
    // eval measures the started run's head as the source's.
    const auto a = eval_json("--checkpoint " + source.string() + kLlama);
    const auto b = eval_json("--checkpoint " + (run / "checkpoint-1").string() + kLlama);
    CHECK(a["ar"] == b["ar"]);
  }
  // It trains on from there: the weights move, the losses are finite, and its first loss is below a fresh head's.
  const auto on = dir / "on";
  train_ok(kLlama + " --ttt_steps 3 --max_steps 2 --eval_steps 0 --logging_steps 1 --learning_rate 0.001" +
               " --warmup_steps 0 --init_draft " + ckpt.string(),
           on);
  auto before = eagle::model::load_safetensors((ckpt / "model.safetensors").string());
  auto after = eagle::model::load_safetensors((on / "checkpoint-2" / "model.safetensors").string());
  CHECK_FALSE(torch::equal(before.at("midlayer.mlp.down_proj.weight"), after.at("midlayer.mlp.down_proj.weight")));
  CHECK(torch::equal(before.at("d2t"), after.at("d2t")));
  const auto fresh = dir / "fresh";
  train_ok(kLlama + " --draft_vocab_size 128 --draft_num_layers 2 --ttt_steps 3 --max_steps 1 --eval_steps 0" +
               " --logging_steps 1 --learning_rate 0.001 --warmup_steps 0",
           fresh);
  const auto started = logged_losses(on), scratch = logged_losses(fresh);
  REQUIRE(started.count(1));
  REQUIRE(scratch.count(1));
  CHECK(started.at(1) < scratch.at(1));

  // A restart of the same command resumes its own checkpoint, not the draft.
  auto again = run_cli("train" + kLlama + " --ttt_steps 3 --max_steps 3 --eval_steps 0 --learning_rate 0.001" +
                       " --warmup_steps 0 --init_draft " + ckpt.string() + " --resume_from_checkpoint auto" +
                       " --output_dir " + on.string());
  INFO(again.output);
  CHECK(again.exit_code == 0);
  CHECK_THAT(again.output, Catch::Contains("resumed from"));

  // Options that would build another head are refused by name; the kind too.
  const std::string from = kLlama + " --init_draft " + ckpt.string();
  refused(from + " --draft_num_layers 1", dir / "r1", "draft_num_layers");
  refused(from + " --draft_vocab_size 64", dir / "r2", "draft_vocab_size");
  refused(from + " --fc_norm", dir / "r3", "fc_norm");
  refused(from + " --aux_hidden_state_layer_ids 0 1 2", dir / "r4", "aux_hidden_state_layer_ids");
  refused(from + " --draft dflash", dir / "r5", "--draft eagle --eagle_version 3 (the draft's)");
  // Another target is refused before training.
  auto other = run_cli("train --model_name_or_path " + kModels + "tiny-qwen3" + kData + " --max_steps 1" +
                       " --init_draft " + ckpt.string() + " --output_dir " + (dir / "r6").string());
  INFO(other.output);
  CHECK(other.exit_code != 0);
  CHECK_THAT(other.output, Catch::Contains("the head was trained for another target"));
}

TEST_CASE("A SpecForge head that names no aux layers is read with the engines' default layers", "[cli]") {
  TempDir dir;
  const auto base = dir / "base";
  train_ok(kLlama + " --max_steps 2 --eval_steps 0", base);
  // SpecForge's default save: the SGLang layout without eagle_aux_hidden_state_layer_ids or eagle_config.
  const auto specforge = dir / "specforge";
  fs::copy(base / "checkpoint-2", specforge, fs::copy_options::recursive);
  fs::remove(specforge / "trainer_state.json");
  fs::remove(specforge / "optimizer.safetensors");
  edit_config(specforge, [](json& j) {
    j.erase("eagle_aux_hidden_state_layer_ids");
    j.erase("eagle_config");
    j.erase("eagle_train");
  });
  // tiny-llama's 4 layers: the default [1, 2, 3] (docs/models.md), what the run trained on.
  const auto a = eval_json("--checkpoint " + (base / "checkpoint-2").string() + kLlama);
  const auto b = eval_json("--checkpoint " + specforge.string() + kLlama);
  CHECK(a["ar"] == b["ar"]);
  const auto c = eval_json("--checkpoint " + specforge.string() + kLlama + " --aux_hidden_state_layer_ids 1 2 3");
  CHECK(a["ar"] == c["ar"]);
  auto logged = run_cli("eval --checkpoint " + specforge.string() + kLlama);
  CHECK_THAT(logged.output, Catch::Contains("the head names no aux layers; fusing [1, 2, 3]"));
  // Without a target nothing can resolve them: refused by name.
  auto bare = run_cli("export --checkpoint " + specforge.string() + " --output " + (dir / "x").string());
  INFO(bare.output);
  CHECK(bare.exit_code != 0);
  CHECK_THAT(bare.output, Catch::Contains("eagle_aux_hidden_state_layer_ids"));
  CHECK_FALSE(fs::exists(dir / "x"));
  // With one, export writes them out.
  const auto named = dir / "named";
  REQUIRE(run_cli("export --checkpoint " + specforge.string() + " --model_name_or_path " + kModels + "tiny-llama" +
                  " --output " + named.string())
              .exit_code == 0);
  CHECK(json::parse(read_file(named / "config.json"))["eagle_aux_hidden_state_layer_ids"] == json::array({1, 2, 3}));
  // --init_draft takes the same default.
  const auto run = dir / "still";
  train_ok(kLlama + kStill + " --init_draft " + specforge.string(), run);
  check_same_tensors(base / "checkpoint-2" / "model.safetensors", run / "checkpoint-1" / "model.safetensors");
}

TEST_CASE("train --init_draft starts from drafts speculators saved, the kind taken from the draft", "[cli]") {
  TempDir dir;
  struct Case {
    std::string folder, target, kind_line;
  };
  // Written by scripts/make_released_drafts.py and make_{dspark,dflash2}_reference.py with speculators' own code.
  for (const auto& c : {Case{"eagle3-speculators", kLlama, "EAGLE-3"}, Case{"dflash-speculators", kQwen3, "DFlash"},
                        Case{"dspark-speculators", kQwen3, "DSpark"}, Case{"dflash2-speculators", kQwen3, "DFlash2"}}) {
    INFO(c.folder);
    const auto source = kModels + c.folder;
    const auto run = dir / c.folder;
    // No --draft: the draft's kind, sizes, layers and vocabulary.
    const auto out = train_ok(c.target + kStill + " --init_draft " + source, run);
    CHECK_THAT(out, Catch::Contains("starting from the draft"));
    // Written back in speculators' layout, the run's head is the draft, key by key.
    const auto back = dir / (c.folder + "-back");
    auto ex = run_cli("export --checkpoint " + (run / "checkpoint-1").string() + " --format speculators --output " +
                      back.string() + " --model_name_or_path " + kModels +
                      (c.target == kLlama ? "tiny-llama" : "tiny-qwen3"));
    INFO(ex.output);
    REQUIRE(ex.exit_code == 0);
    check_same_tensors(fs::path(source) / "model.safetensors", back / "model.safetensors");
    // And it trains on.
    const auto on = dir / (c.folder + "-on");
    train_ok(c.target + " --max_steps 2 --eval_steps 0 --logging_steps 1 --learning_rate 0.001 --warmup_steps 0" +
                 " --init_draft " + source,
             on);
    for (const auto& [step, loss] : logged_losses(on)) CHECK(std::isfinite(loss));
  }
  // speculators' default DFlash blocks are causal (vLLM: dflash_config.causal): not what DFlash trains, refused.
  const auto causal = dir / "causal";
  fs::copy(kModels + "dflash-speculators", causal, fs::copy_options::recursive);
  edit_config(causal, [](json& j) { j["sliding_window_non_causal"] = false; });
  auto r = run_cli("eval --checkpoint " + causal.string() + kQwen3);
  INFO(r.output);
  CHECK(r.exit_code == 3);
  CHECK_THAT(r.output, Catch::Contains("sliding_window_non_causal"));
  // A block draft's shape is its config's: another block size is refused by name.
  refused(kQwen3 + " --draft dflash --dflash_block_size 8 --init_draft " + kModels + "dflash-speculators", dir / "r1",
          "dflash_block_size");
  refused(kQwen3 + " --draft dspark --dspark_markov_rank 16 --init_draft " + kModels + "dspark-speculators", dir / "r2",
          "dspark_markov_rank");
}

TEST_CASE("train --init_draft starts an MTP run from an MTP folder", "[cli]") {
  TempDir dir;
  const std::string mimo = " --model_name_or_path " + kModels + "tiny-mimo" + kData;
  const auto shipped = dir / "shipped";
  train_ok(mimo + kStill + " --draft mtp --ttt_steps 2", shipped);
  const auto base = dir / "base";
  train_ok(mimo + " --draft mtp --ttt_steps 2 --max_steps 2 --eval_steps 0 --learning_rate 0.001 --warmup_steps 0",
           base);
  // Started from the trained run's checkpoint, not from the layer the target ships.
  const auto run = dir / "still";
  train_ok(mimo + kStill + " --ttt_steps 2 --init_draft " + (base / "checkpoint-2").string(), run);
  check_same_tensors(base / "checkpoint-2" / "model.safetensors", run / "checkpoint-1" / "model.safetensors");
  auto a = eagle::model::load_safetensors((shipped / "checkpoint-1" / "model.safetensors").string());
  auto b = eagle::model::load_safetensors((run / "checkpoint-1" / "model.safetensors").string());
  bool same = true;
  for (const auto& [name, t] : a) same = same && torch::equal(t, b.at(name));
  CHECK_FALSE(same);
}
