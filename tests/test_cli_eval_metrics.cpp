// The tree and temperature metrics end to end: eval's JSON (a chain tree and temperature -> 0 equal
// the greedy AR, for chains and for the tree at a temperature; a seeded sampled run is
// reproducible), a run selecting checkpoint-best by tree_ar and recording every metric, and the
// refused combinations.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "cli_helpers.h"
#include "helpers.h"

using eagle::test::eval_json;
using eagle::test::read_jsonl;
using eagle::test::run_cli;
using eagle::test::TempDir;
using nlohmann::json;

TEST_CASE("eval: a chain tree and temperature -> 0 equal the greedy AR; seeded sampling repeats", "[cli]") {
  TempDir dir;
  auto run = dir / "run";
  REQUIRE(run_cli("train " + eagle::test::smoke_args() + " --max_steps 80 --eval_steps 0 --output_dir " + run.string())
              .exit_code == 0);
  const std::string common = " --checkpoint " + (run / "checkpoint-80").string() + " --model_name_or_path " +
                             EAGLE_SOURCE_DIR + "/tests/fixtures/models/tiny-llama --data_path " + EAGLE_SOURCE_DIR +
                             "/tests/fixtures/data/smoke.jsonl --training_seq_len 256 --validation_fraction 0.1" +
                             " --eval_num_prompts 6 --eval_max_new_tokens 24 --num_threads 1 --eval_draft_len 3";
  auto chain = eval_json(common +
                         " --eval_tree_topk 1 --eval_tree_steps 3 --eval_tree_draft_tokens 4"
                         " --eval_temperature 0.000001");
  INFO(chain.dump());
  CHECK(chain["ar"].get<double>() >= 1.0);
  CHECK(chain["tree_ar"] == chain["ar"]);
  CHECK(chain["temp_ar"] == chain["ar"]);
  CHECK(chain["tree_temp_ar"] == chain["ar"]);  // the chain tree verified by SGLang's tree sampling
  CHECK(chain["alpha"].size() == 3);
  CHECK(chain["tree"] == json::array({3, 1, 4}));
  const std::string sampled = common + " --eval_tree_topk 4 --eval_tree_steps 5 --eval_tree_draft_tokens 8" +
                              " --eval_temperature 1 --eval_draft_sampling sample --seed 7";
  auto a = eval_json(sampled), b = eval_json(sampled);
  CHECK(a == b);
  CHECK(a["tree_ar"].get<double>() >= 1.0);
  CHECK(a["temp_ar_ci95"].get<double>() > 0.0);
  CHECK(a["tree_temp_ar"].get<double>() >= 1.0);
  CHECK(a["tree_temp_ar_ci95"].get<double>() > 0.0);
  for (const auto& x : a["alpha"]) CHECK((x.get<double>() > 0.0 && x.get<double>() <= 1.0));
  CHECK(a["alpha_ar"].get<double>() >= 1.0);
  CHECK(a["alpha_ar"].get<double>() <= 4.0);
  // Gating on the tree AR: a threshold above it misses, naming the metric.
  auto gate = run_cli("eval" + sampled + " --best_metric tree_ar --min_ar 9");
  CHECK(gate.exit_code == 6);
  CHECK_THAT(gate.output, Catch::Contains("tree_ar"));
}

TEST_CASE("a run selects checkpoint-best by tree_ar and records every evaluated metric", "[cli]") {
  TempDir dir;
  auto run = dir / "run";
  auto r = run_cli("train " + eagle::test::smoke_args() +
                   " --max_steps 40 --eval_steps 20 --save_steps 20 --eval_num_prompts 3 --eval_tree_topk 2"
                   " --eval_tree_draft_tokens 5 --eval_temperature 0.7 --best_metric tree_ar --output_dir " +
                   run.string());
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  auto best = json::parse(eagle::test::read_file(run / "checkpoint-best" / "best.json"));
  CHECK(best["metric"] == "tree_ar");
  auto summary = json::parse(eagle::test::read_file(run / "summary.json"));
  CHECK(summary["best_metric"] == "tree_ar");
  for (const char* key : {"ar", "tree_ar", "temp_ar", "temp_ar_ci95", "tree_temp_ar", "tree_temp_ar_ci95", "alpha_ar",
                          "eval_loss"})
    CHECK(summary[key].is_number());
  CHECK(summary["alpha"].size() == 3);
  bool logged = false;
  for (const auto& line : read_jsonl(run / "metrics.jsonl"))
    if (line.contains("tree_ar"))
      logged = line.contains("temp_ar") && line.contains("tree_temp_ar") && line.contains("alpha");
  CHECK(logged);
}

TEST_CASE("refused metric settings name the option", "[cli]") {
  const std::string base = "train " + eagle::test::smoke_args() + " --max_steps 1 --output_dir /nonexistent/x";
  auto r = run_cli(base + " --best_metric tree_ar");
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.output, Catch::Contains("best_metric"));
  r = run_cli(base + " --best_metric temp_ar");
  CHECK(r.exit_code == 2);
  r = run_cli(base + " --eval_tree_topk 2 --eval_tree_steps 2 --eval_tree_draft_tokens 8");
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.output, Catch::Contains("eval_tree_draft_tokens") && Catch::Contains("2 .. 7"));
  r = run_cli(base + " --eval_tree_topk 3");
  CHECK(r.exit_code == 2);
  r = run_cli(base + " --eval_draft_sampling maybe");
  CHECK(r.exit_code == 2);
}

TEST_CASE("eval bounds the tree's draft tokens by the head's TTT steps, not the option's default", "[cli]") {
  // issue 41 item 17: eval takes ttt_steps from the head; the bound 1 + topk + (steps - 1) topk^2 too.
  TempDir dir;
  for (const int ttt : {3, 8}) {
    INFO("ttt_steps " << ttt);
    const auto run = dir / ("run" + std::to_string(ttt));
    auto t = run_cli("train " + eagle::test::smoke_args() + " --ttt_steps " + std::to_string(ttt) +
                     " --max_steps 1 --eval_steps 0 --output_dir " + run.string());
    INFO(t.output);
    REQUIRE(t.exit_code == 0);
    const std::string common = "eval --checkpoint " + (run / "checkpoint-1").string() + " " +
                               eagle::test::smoke_args() + " --eval_num_prompts 1 --eval_max_new_tokens 4" +
                               " --eval_tree_topk 2 --eval_tree_draft_tokens ";
    const int most = 1 + 2 + (ttt - 1) * 4;  // 11 for 3 steps, 31 for 8 (27 for the option's default 7)
    auto over = run_cli(common + std::to_string(most + 1));
    INFO(over.output);
    CHECK(over.exit_code == 2);
    CHECK_THAT(over.output, Catch::Contains("eval_tree_draft_tokens") &&
                                Catch::Contains("2 .. " + std::to_string(most)) &&
                                Catch::Contains("steps " + std::to_string(ttt)));
    auto fits = run_cli(common + std::to_string(most));
    INFO(fits.output);
    CHECK(fits.exit_code == 0);
  }
}
