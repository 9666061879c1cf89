// eagle-train run as a subprocess: help, version, dump-config, exit codes.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "helpers.h"

using eagle::test::run_cli;

TEST_CASE("--help lists the subcommands and exits 0", "[cli]") {
  auto r = run_cli("--help");
  CHECK(r.exit_code == 0);
  for (const char* sub : {"train", "prepare", "data-stats", "inspect", "export", "eval"})
    CHECK_THAT(r.output, Catch::Contains(sub));
  auto t = run_cli("train --help");
  CHECK(t.exit_code == 0);
  CHECK_THAT(t.output, Catch::Contains("--bucket_granularity") && Catch::Contains("Data options"));
}

TEST_CASE("--version names LibTorch and CUDA support", "[cli]") {
  auto r = run_cli("--version");
  CHECK(r.exit_code == 0);
  CHECK_THAT(r.output, Catch::Contains("eagle-train ") && Catch::Contains("LibTorch 2.") &&
                           Catch::Contains("CUDA compiled in: ") && Catch::Contains("CUDA available: "));
}

TEST_CASE("train --dump-config prints resolved JSON with the flag applied", "[cli]") {
  auto r = run_cli("train --dump-config --bucket_granularity 512");
  REQUIRE(r.exit_code == 0);
  auto doc = nlohmann::json::parse(r.output);
  CHECK(doc["bucket_granularity"] == 512);
  CHECK(doc["training_seq_len"] == 2048);
}

TEST_CASE("usage and config errors exit 2 with the cause", "[cli]") {
  auto bad_flag = run_cli("train --no_such_flag 1");
  CHECK(bad_flag.exit_code == 2);
  CHECK_THAT(bad_flag.output, Catch::Contains("no_such_flag"));
  auto bad_value = run_cli("train --ttt_steps 0");
  CHECK(bad_value.exit_code == 2);
  CHECK_THAT(bad_value.output, Catch::Contains("--ttt_steps") && Catch::Contains("found 0"));
  auto missing_cfg = run_cli("train --config /nonexistent/x.json");
  CHECK(missing_cfg.exit_code == 2);
  CHECK_THAT(missing_cfg.output, Catch::Contains("/nonexistent/x.json"));
  auto no_sub = run_cli("");
  CHECK(no_sub.exit_code == 2);
}

TEST_CASE("the binary does not need the CUDA driver library", "[cli]") {
  std::string out = eagle::test::run_command(std::string("readelf -d ") + EAGLE_TRAIN_BIN + " 2>&1").output;
  REQUIRE_THAT(out, Catch::Contains("NEEDED"));
  CHECK_THAT(out, !Catch::Contains("libcuda.so"));
}
