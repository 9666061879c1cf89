// The run's end state (run/summary.h): CI gates (min_ar, max_final_loss) and summary.json.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <cmath>
#include <filesystem>

#include "eagle/run/summary.h"
#include "helpers.h"

using namespace eagle::run;
using nlohmann::json;

TEST_CASE("CI gates: min_ar and max_final_loss", "[run]") {
  RunSummary s;
  s.eval.emplace().acceptance.ar = 2.5;
  s.final_loss = 1.25;
  CHECK(check_gates(s, 0.0, 0.0).empty());
  auto pass = check_gates(s, 2.5, 1.25);  // equal to the threshold passes
  REQUIRE(pass.size() == 2);
  CHECK(pass[0].passed);
  CHECK(pass[1].passed);
  CHECK_FALSE(gate_error(pass));

  auto ar_missed = check_gates(s, 3.0, 0.0);
  auto e = gate_error(ar_missed);
  REQUIRE(e);
  CHECK(e->kind() == eagle::ErrorKind::gate);
  CHECK(e->exit_code() == eagle::ExitCode::gate);
  CHECK(e->format() == "min_ar: CI gate missed: AR 2.5000 < min_ar 3.0000");

  s.eval->acceptance.ar.reset();
  s.final_loss = std::nan("");
  auto both = gate_error(check_gates(s, 1.5, 2.0));
  REQUIRE(both);
  CHECK(both->format() == "min_ar, max_final_loss: CI gate missed: AR was never measured (min_ar 1.5000); "
                          "final loss nan > max_final_loss 2.0000");
  // A completed run that misses a gate becomes gate_missed with exit code 6.
  CHECK(s.exit_reason == ExitReason::completed);
  REQUIRE(apply_gates(s, 1.5, 0.0));
  CHECK(s.exit_reason == ExitReason::gate_missed);
  CHECK(s.exit_code == 6);
  CHECK(s.gates.size() == 1);
}

TEST_CASE("min_ar gates the chain AR at a depth (best_metric_depth)", "[run]") {
  RunSummary s;
  auto& a = s.eval.emplace().acceptance;
  a.ar = 2.5;
  a.ar_by_depth = {1.5, 2.0, 2.5};
  s.gate_metric = "ar@2";
  s.gate_depth = 2;
  auto at2 = check_gates(s, 2.0, 0.0);
  REQUIRE(at2.size() == 1);
  CHECK(at2[0].value == 2.0);
  CHECK(at2[0].passed);
  REQUIRE(apply_gates(s, 2.25, 0.0));
  CHECK(s.detail == "CI gate missed: ar@2 2.0000 < min_ar 2.2500");
  // A depth beyond the evaluation's draft length was never measured.
  s.exit_reason = ExitReason::completed;
  s.gate_depth = 4;
  auto beyond = check_gates(s, 1.0, 0.0);
  CHECK_FALSE(beyond[0].value);
  CHECK_FALSE(beyond[0].passed);
}

TEST_CASE("summary.json records ar_by_depth and ar_by_category as the report reads them", "[run]") {
  RunSummary s;
  auto& a = s.eval.emplace().acceptance;
  a.ar = 1.8;
  a.ar_ci95 = 0.2;
  a.ar_by_depth = {1.5, 1.8};
  a.ar_by_category["coding"] = eagle::io::CategoryAcceptance{3, 2.5, 0.5, {1.75, 2.5}};
  const json doc = to_json(s);
  CHECK(doc["ar_ci95"] == 0.2);
  CHECK(doc["ar_by_depth"] == json::array({1.5, 1.8}));
  CHECK(doc["ar_by_category"] ==
        json::parse(R"({"coding": {"count": 3, "ar": 2.5, "ar_ci95": 0.5, "ar_by_depth": [1.75, 2.5]}})"));
}

TEST_CASE("summary.json holds the run's end state", "[run]") {
  eagle::test::TempDir tmp;
  RunSummary s;
  s.exit_reason = ExitReason::interrupted;
  s.detail = "SIGTERM";
  s.exit_code = 130;
  s.steps = 40;
  s.total_steps = 100;
  s.resumed_from_step = 20;
  s.final_loss = 1.5;
  s.eval.emplace();
  s.eval->loss = std::nan("");  // nothing scored: null
  s.eval->acc = {0.75, 0.5};
  s.eval->tau = 2.25;
  s.real_tokens = 40000.0;
  s.tokens_per_s = 1000.0;
  s.wall_time_s = 12.5;
  s.model_flops = 4e12;
  s.tflops = 0.5;
  s.mfu = 0.25;
  s.peak_tflops = 2.0;
  s.peak_tflops_source = "--peak_tflops";
  CHECK_FALSE(apply_gates(s, 2.0, 0.0));  // an interrupted run records its gates but cannot miss them
  CHECK(s.exit_reason == ExitReason::interrupted);
  write_summary(tmp.path(), s);
  json doc = json::parse(eagle::test::read_file(tmp / "summary.json"));
  CHECK(doc == json::parse(R"({"exit_reason": "interrupted", "detail": "SIGTERM", "exit_code": 130, "steps": 40,
      "total_steps": 100, "resumed_from_step": 20, "final_loss": 1.5, "ar": null, "ar_ci95": null,
      "ar_by_depth": [], "ar_by_category": {}, "acc": [0.75, 0.5],
      "tau": 2.25, "eval_loss": null, "tree_ar": null, "temp_ar": null, "temp_ar_ci95": null, "tree_temp_ar": null, "tree_temp_ar_ci95": null, "alpha": [],
      "alpha_ar": null, "best_metric": "ar", "real_tokens": 40000.0, "tokens_per_s": 1000.0, "wall_time_s": 12.5, "best_step": null,
      "model_flops": 4e12, "tflops": 0.5, "mfu": 0.25, "peak_tflops": 2.0, "peak_tflops_source": "--peak_tflops",
      "gates": {"min_ar": {"threshold": 2.0, "value": null, "passed": false}}})"));
  // Written atomically: no temporary file is left behind.
  std::size_t entries = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(tmp.path())) ++entries;
  CHECK(entries == 1);
}
