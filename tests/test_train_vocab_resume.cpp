// Every draft kind and variant the smoke targets train, with a full and (where the kind has one) a reduced
// draft vocabulary, resumes from its checkpoint, exports to every layout its row writes, and is evaluated
// from the checkpoint and from each export to the same acceptance. Issue 53 item 1: a full-vocabulary
// EAGLE-3 checkpoint (written without d2t/t2d, as vLLM loads it) was refused by the resume reader only.
// MTP heads: test_cli_mtp.cpp (the same round trip over every MTP family; their vocabulary is always full).
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "eagle/model/safetensors.h"
#include "helpers.h"

using eagle::test::run_cli;
using eagle::test::TempDir;
using nlohmann::json;

namespace {

struct Case {
  std::string name, base, variant;  // eval reads the base (the target, data and split), train both
  bool reduced;    // the kind has a draft vocabulary of its own (EAGLE-3); else it drafts over the target's
  bool full_maps;  // its checkpoint layout writes the identity maps of a full vocabulary (speculators)
  std::vector<std::string> formats;  // the export layouts of its row besides the checkpoint's own
};

json last_json(const std::string& output) { return json::parse(output.substr(output.find("{\n"))); }

}  // namespace

TEST_CASE("each draft with a full or a reduced vocabulary resumes, exports every layout and evaluates the same",
          "[train]") {
  const std::string root = EAGLE_SOURCE_DIR;
  // DFlash: test_cli_dflash.cpp's run (a Qwen3 target; smoke.json's EAGLE settings are not DFlash options).
  const std::string dflash_run = " --model_name_or_path " + root + "/tests/fixtures/models/tiny-qwen3" +
                                 " --data_path " + root + "/tests/fixtures/data/smoke.jsonl --training_seq_len 256" +
                                 " --validation_fraction 0.1 --per_device_train_batch_size 4 --device cpu" +
                                 " --num_threads 1 --seed 42";
  // The tiny targets' vocabulary is 512; smoke.json's draft_vocab_size is 256.
  const auto vocab = GENERATE(as<std::string>{}, "256", "512");
  const std::string smoke = " " + eagle::test::smoke_args();
  const auto c = GENERATE_COPY(values<Case>({
      {"EAGLE-3", smoke, "", true, false, {"sglang", "speculators"}},
      {"EAGLE-3, two layers", smoke, " --draft_num_layers 2", true, false, {"sglang", "speculators"}},
      {"P-EAGLE", smoke, " --parallel_drafting --mask_token_id 3", true, true, {"speculators"}},
      {"EAGLE-1", smoke, " --eagle_version 1", false, false, {"vllm-eagle1"}},
      {"DFlash", dflash_run, " --draft dflash --dflash_block_size 4 --dflash_num_anchors 16", false, false, {"dflash"}},
  }));
  if (!c.reduced && vocab != "512") return;
  INFO(c.name << ", draft vocabulary " << vocab);
  TempDir dir;
  const auto run = dir / "run";
  const std::string evaluated = c.base + " --eval_num_prompts 2 --eval_max_new_tokens 8";
  const std::string args =
      evaluated + c.variant + (c.name == "DFlash" ? "" : " --draft_vocab_size " + vocab) + " --logging_steps 1";
  auto r = run_cli("train" + args + " --max_steps 2 --save_steps 2 --eval_steps 0 --output_dir " + run.string());
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  const auto ckpt = run / "checkpoint-2";
  const bool has_maps = eagle::model::SafetensorsFile::open((ckpt / "model.safetensors").string()).contains("d2t");
  // A full vocabulary is written without maps in the sglang layout, as vLLM loads it.
  CHECK(has_maps == (vocab == "256" || c.full_maps));

  auto resumed = run_cli("train" + args + " --max_steps 3 --save_steps 3 --eval_steps 0" +
                         " --resume_from_checkpoint auto --output_dir " + run.string());
  INFO(resumed.output);
  CHECK(resumed.exit_code == 0);
  CHECK_THAT(resumed.output, Catch::Contains("resumed from"));
  CHECK(std::filesystem::exists(run / "checkpoint-3" / "model.safetensors"));

  const auto from_ckpt = run_cli("eval --json --checkpoint " + ckpt.string() + evaluated);
  INFO(from_ckpt.output);
  REQUIRE(from_ckpt.exit_code == 0);
  const double ar = last_json(from_ckpt.output)["ar"].get<double>();
  for (const auto& format : c.formats) {
    INFO(format);
    const auto out = dir / ("export-" + format);
    auto ex = run_cli("export --checkpoint " + ckpt.string() + " --format " + format + " --output " + out.string());
    INFO(ex.output);
    REQUIRE(ex.exit_code == 0);
    auto ev = run_cli("eval --json --checkpoint " + out.string() + evaluated);
    INFO(ev.output);
    REQUIRE(ev.exit_code == 0);
    CHECK(last_json(ev.output)["ar"].get<double>() == ar);
  }
}
