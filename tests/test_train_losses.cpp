// eagle-train train with each --loss (kl, tv, lk_hybrid) on the smoke fixture: the head learns
// (held-out acceptance above 1, the loss falls), the chunked and unchunked losses train alike, and a
// resumed run refuses a changed loss.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "helpers.h"
#include "train_helpers.h"

using eagle::test::logged_losses;
using eagle::test::run_cli;
using eagle::test::TempDir;
using nlohmann::json;

namespace {
const std::string kSmoke = eagle::test::smoke_args();
}  // namespace

TEST_CASE("a short run with each loss learns: held-out AR above 1 and a falling loss", "[train]") {
  for (const char* loss : {"kl", "tv", "lk_hybrid"}) {
    INFO(loss);
    TempDir dir;
    auto out = dir / "run";
    auto r = run_cli("train " + kSmoke + " --loss " + loss + " --loss_chunk_size 100 --eval_steps 0 --output_dir " +
                     out.string());
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    auto summary = json::parse(eagle::test::read_file(out / "summary.json"));
    CHECK(summary["ar"].get<double>() > 1.0);
    CHECK(summary["acc"][0].get<double>() > 0.1);
    auto l = logged_losses(out);
    REQUIRE(l.size() == 8);
    CHECK(l.at(80) < l.at(10));
    auto config = json::parse(eagle::test::read_file(out / "config.json"));
    CHECK(config["loss"] == loss);
  }
}

TEST_CASE("the chunked and unchunked loss train the same run, and resume refuses a changed loss", "[train]") {
  TempDir dir;
  auto args = std::string(" --max_steps 4 --save_steps 2 --eval_steps 0 --eval_num_prompts 0 --logging_steps 1");
  auto chunked = dir / "chunked", full = dir / "full";
  REQUIRE(run_cli("train " + kSmoke + args + " --loss lk_hybrid --loss_chunk_size 37 --output_dir " + chunked.string())
              .exit_code == 0);
  REQUIRE(run_cli("train " + kSmoke + args + " --loss lk_hybrid --loss_chunk_size 0 --output_dir " + full.string())
              .exit_code == 0);
  auto a = logged_losses(chunked), b = logged_losses(full);
  REQUIRE(a.size() == 4);
  for (const auto& [step, value] : a) CHECK(value == Approx(b.at(step)).epsilon(1e-4));
  auto ckpt = (chunked / "checkpoint-2").string();
  auto r = run_cli("train " + kSmoke + args + " --loss tv --loss_chunk_size 37 --resume_from_checkpoint " + ckpt +
                   " --output_dir " + chunked.string());
  INFO(r.output);
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.output, Catch::Contains("loss: checkpoint \"lk_hybrid\", now \"tv\""));
  // The chunk size may change on resume (same values up to rounding).
  auto ok = run_cli("train " + kSmoke + args + " --loss lk_hybrid --loss_chunk_size 0 --resume_from_checkpoint " +
                    ckpt + " --output_dir " + chunked.string());
  INFO(ok.output);
  CHECK(ok.exit_code == 0);
  // tv and lk_hybrid are EAGLE-3's.
  auto e1 = run_cli("train " + kSmoke + args + " --eagle_version 1 --loss tv --output_dir " + (dir / "e1").string());
  CHECK(e1.exit_code == 2);
  CHECK_THAT(e1.output, Catch::Contains("loss"));
}
