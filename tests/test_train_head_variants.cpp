// The newer EAGLE-3 heads trained end to end (issue 24), as a subprocess on the smoke run: a
// multi-layer head trains, exports both layouts, eval reads them back with the checkpoint's numbers,
// and a resume with another layer count is refused.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "helpers.h"

using eagle::test::run_cli;
using eagle::test::TempDir;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

const std::string kSmoke = eagle::test::smoke_args();

json last_json(const std::string& output) { return json::parse(output.substr(output.find("{\n"))); }

}  // namespace

TEST_CASE("a two-layer EAGLE-3 head trains, exports, is evaluated from its exports and refuses another layer count",
          "[train]") {
  TempDir dir;
  auto out = dir / "run";
  auto r = run_cli("train " + kSmoke + " --draft_num_layers 2 --max_steps 4 --eval_steps 4 --save_steps 4" +
                   " --output_dir " + out.string());
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.output, Catch::Contains("step 4 AR: "));
  const auto ckpt = out / "checkpoint-4";
  CHECK(json::parse(eagle::test::read_file(ckpt / "config.json"))["num_hidden_layers"] == 2);
  for (const char* format : {"speculators", "sglang"}) {
    auto ex = run_cli("export --checkpoint " + ckpt.string() + " --format " + format + " --output " +
                      (dir / format).string());
    INFO(ex.output);
    REQUIRE(ex.exit_code == 0);
  }
  auto spec = json::parse(eagle::test::read_file(dir / "speculators" / "config.json"));
  CHECK(spec["transformer_layer_config"]["num_hidden_layers"] == 2);
  auto a = run_cli("eval --json --checkpoint " + ckpt.string() + " " + kSmoke);
  auto b = run_cli("eval --json --checkpoint " + (dir / "speculators").string() + " " + kSmoke);
  INFO(a.output << b.output);
  REQUIRE(a.exit_code == 0);
  REQUIRE(b.exit_code == 0);
  const auto ja = last_json(a.output), jb = last_json(b.output);
  CHECK(ja["ar"] == jb["ar"]);
  CHECK(ja["head"]["num_hidden_layers"] == 2);
  CHECK(jb["head"]["num_hidden_layers"] == 2);
  auto resumed =
      run_cli("train " + kSmoke + " --max_steps 6 --resume_from_checkpoint auto --output_dir " + out.string());
  INFO(resumed.output);
  CHECK(resumed.exit_code == 2);
  CHECK_THAT(resumed.output, Catch::Contains("draft_num_layers"));
}

TEST_CASE("a P-EAGLE head trains, exports as speculators peagle, is evaluated from it and refuses a sequential resume",
          "[train]") {
  TempDir dir;
  auto out = dir / "run";
  auto r = run_cli("train " + kSmoke + " --parallel_drafting --mask_token_id 3 --max_steps 4 --eval_steps 4" +
                   " --save_steps 4 --output_dir " + out.string());
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.output, Catch::Contains("step 4 AR: "));
  const auto ckpt = out / "checkpoint-4";
  CHECK(json::parse(eagle::test::read_file(ckpt / "config.json"))["speculators_model_type"] == "peagle");
  auto ex =
      run_cli("export --checkpoint " + ckpt.string() + " --format speculators --output " + (dir / "spec").string());
  INFO(ex.output);
  REQUIRE(ex.exit_code == 0);
  auto sg = run_cli("export --checkpoint " + ckpt.string() + " --format sglang --output " + (dir / "sg").string());
  CHECK(sg.exit_code == 2);
  CHECK_THAT(sg.output, Catch::Contains("P-EAGLE") && Catch::Contains("speculators"));
  auto a = run_cli("eval --json --checkpoint " + ckpt.string() + " " + kSmoke);
  auto b = run_cli("eval --json --checkpoint " + (dir / "spec").string() + " " + kSmoke);
  INFO(a.output << b.output);
  REQUIRE(a.exit_code == 0);
  REQUIRE(b.exit_code == 0);
  const auto ja = last_json(a.output), jb = last_json(b.output);
  CHECK(ja["ar"] == jb["ar"]);
  CHECK(jb["head"]["parallel_drafting"] == true);
  CHECK(jb["head"]["mask_token_id"] == 3);
  auto resumed =
      run_cli("train " + kSmoke + " --max_steps 6 --resume_from_checkpoint auto --output_dir " + out.string());
  INFO(resumed.output);
  CHECK(resumed.exit_code == 2);
  CHECK_THAT(resumed.output, Catch::Contains("parallel_drafting"));
}

TEST_CASE("a P-EAGLE resume naming the mask id its default resolved to resumes; another one is refused", "[train]") {
  // issue 41 item 15: mask_token_id -1 resolves to the target's first end id (2 for tiny-llama); the
  // checkpoint's head records 2, so --mask_token_id 2 is the same run, as the aux ids are (round 2).
  TempDir dir;
  auto out = dir / "run";
  auto r =
      run_cli("train " + kSmoke + " --parallel_drafting --max_steps 2 --eval_steps 0 --output_dir " + out.string());
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  REQUIRE(json::parse(eagle::test::read_file(out / "checkpoint-2" / "config.json"))["mask_token_id"] == 2);
  auto other = run_cli("train " + kSmoke + " --parallel_drafting --mask_token_id 3 --max_steps 3 --eval_steps 0" +
                       " --resume_from_checkpoint auto --output_dir " + out.string());
  INFO(other.output);
  CHECK(other.exit_code == 2);
  CHECK_THAT(other.output, Catch::Contains("mask_token_id: checkpoint 2, now 3"));
  auto same = run_cli("train " + kSmoke + " --parallel_drafting --mask_token_id 2 --max_steps 3 --eval_steps 0" +
                      " --resume_from_checkpoint auto --output_dir " + out.string());
  INFO(same.output);
  CHECK(same.exit_code == 0);
  CHECK_THAT(same.output, Catch::Contains("resumed from"));
}

TEST_CASE("a resume reads the checkpoint's config.json as eval and export do: an edited one is refused", "[train]") {
  // issue 41 item 19: one reader, one verdict. The run's head must be the head the checkpoint's
  // config.json describes, field by field, or the resume is refused naming the field.
  TempDir dir;
  auto out = dir / "run";
  auto r = run_cli("train " + kSmoke + " --max_steps 2 --eval_steps 0 --output_dir " + out.string());
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  const auto config = out / "checkpoint-2" / "config.json";
  const auto original = eagle::test::read_file(config);
  const std::vector<std::pair<std::string, json>> edits{
      {"rope_theta", 500000.0}, {"num_hidden_layers", 2}, {"fc_norm", true}, {"rms_norm_eps", 0.001}};
  for (const auto& [field, value] : edits) {
    INFO(field);
    auto j = json::parse(original);
    j[field] = value;
    eagle::test::write_file(config, j.dump(2));
    auto resumed = run_cli("train " + kSmoke + " --max_steps 3 --eval_steps 0 --resume_from_checkpoint auto" +
                           " --output_dir " + out.string());
    INFO(resumed.output);
    CHECK(resumed.exit_code == 3);
    CHECK_THAT(resumed.output, Catch::Contains("checkpoint-2/config.json") &&
                                   Catch::Contains("the checkpoint holds another head") && Catch::Contains(field));
  }
  eagle::test::write_file(config, original);
  auto resumed = run_cli("train " + kSmoke + " --max_steps 3 --eval_steps 0 --resume_from_checkpoint auto" +
                         " --output_dir " + out.string());
  INFO(resumed.output);
  CHECK(resumed.exit_code == 0);
}

TEST_CASE("an MLA draft layer trains on a DeepSeek-V3 target, exports as Eagle3DeepseekV3ForCausalLM and is "
          "evaluated from it",
          "[train]") {
  // --draft_layer deepseek: vLLM's deepseek_eagle3.py layer, shaped after the MLA target.
  TempDir dir;
  auto out = dir / "run";
  const std::string target =
      " --model_name_or_path " + std::string(EAGLE_SOURCE_DIR) + "/tests/fixtures/models/tiny-deepseek-v3";
  auto r = run_cli("train " + kSmoke + target + " --draft_layer deepseek --max_steps 4 --eval_steps 4" +
                   " --save_steps 4 --output_dir " + out.string());
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.output, Catch::Contains("step 4 AR: "));
  const auto ckpt = out / "checkpoint-4";
  const auto cj = json::parse(eagle::test::read_file(ckpt / "config.json"));
  CHECK(cj["architectures"] == json::array({"Eagle3DeepseekV3ForCausalLM"}));
  CHECK(cj["kv_lora_rank"] == 32);
  auto ex = run_cli("export --checkpoint " + ckpt.string() + " --format sglang --output " + (dir / "mla").string());
  INFO(ex.output);
  REQUIRE(ex.exit_code == 0);
  const auto ej = json::parse(eagle::test::read_file(dir / "mla" / "config.json"));
  CHECK(ej["architectures"] == json::array({"Eagle3DeepseekV3ForCausalLM"}));
  CHECK(ej["model_type"] == "deepseek_v2");
  CHECK(ej["q_lora_rank"] == 24);
  CHECK(ej["rope_scaling"]["rope_type"] == "yarn");
  auto spec =
      run_cli("export --checkpoint " + ckpt.string() + " --format speculators --output " + (dir / "spec").string());
  CHECK(spec.exit_code == 2);
  CHECK_THAT(spec.output, Catch::Contains("EAGLE layout only"));
  auto a = run_cli("eval --json --checkpoint " + ckpt.string() + " " + kSmoke + target);
  auto b = run_cli("eval --json --checkpoint " + (dir / "mla").string() + " " + kSmoke + target);
  INFO(a.output << b.output);
  REQUIRE(a.exit_code == 0);
  REQUIRE(b.exit_code == 0);
  const auto ja = last_json(a.output), jb = last_json(b.output);
  CHECK(ja["ar"] == jb["ar"]);
  CHECK(jb["head"]["draft_layer"] == "deepseek");
  auto resumed = run_cli("train " + kSmoke + target + " --max_steps 6 --resume_from_checkpoint auto --output_dir " +
                         out.string());
  INFO(resumed.output);
  CHECK(resumed.exit_code == 2);
  CHECK_THAT(resumed.output, Catch::Contains("draft_layer"));
  // A target without multi-head latent attention is refused by name before any training.
  auto llama = run_cli("train " + kSmoke + " --draft_layer deepseek --max_steps 2 --output_dir " +
                       (dir / "llama").string());
  CHECK(llama.exit_code == 2);
  CHECK_THAT(llama.output, Catch::Contains("multi-head latent attention"));
}
