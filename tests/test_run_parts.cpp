// The run's plain C++ parts: LR schedules against Hugging Face's formulas worked by hand, stop
// signals (the second one in a forked child), summary.json and CI gates, config.json and the
// command line.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>

#include "eagle/config/resolve.h"
#include "eagle/run/lr_schedule.h"
#include "eagle/run/run_files.h"
#include "eagle/run/signals.h"
#include "eagle/run/summary.h"
#include "helpers.h"

using namespace eagle::run;
using eagle::config::LrScheduler;
using nlohmann::json;

TEST_CASE("cosine with warmup: Hugging Face get_cosine_schedule_with_warmup", "[run]") {
  // lr 1e-3, warmup 2, total 10. Warmup: step/2. Then progress p = (step-2)/8 and
  // 0.5*(1+cos(pi*p)): p=0 -> 1, p=1/8 -> 0.5*(1+0.9238795) = 0.96193977, p=1/2 -> 0.5,
  // p=3/4 -> 0.5*(1-0.70710678) = 0.14644661, p=1 -> 0. HF does not clamp p, so past the end
  // the factor rises again (checked below; the loop never goes there).
  LrSchedule s{LrScheduler::cosine, 1e-3, 2, 10};
  CHECK(s.multiplier(0) == 0.0);
  CHECK(s.multiplier(1) == 0.5);
  CHECK(s.multiplier(2) == 1.0);
  CHECK(s.multiplier(3) == Approx(0.9619397662556434).epsilon(1e-15));
  CHECK(s.multiplier(6) == Approx(0.5).epsilon(1e-15));
  CHECK(s.multiplier(8) == Approx(0.14644660940672627).epsilon(1e-15));
  CHECK(std::abs(s.multiplier(10)) < 1e-16);
  // p = 10/8: 0.5*(1+cos(1.25 pi)) = 0.5*(1-0.70710678) = 0.14644661 (HF does not clamp the phase).
  CHECK(s.multiplier(12) == Approx(0.14644660940672627).epsilon(1e-14));
  CHECK(s.lr(1) == 5e-4);
  CHECK(s.lr(8) == Approx(1.4644660940672627e-4).epsilon(1e-14));
}

TEST_CASE("linear with warmup: Hugging Face get_linear_schedule_with_warmup", "[run]") {
  // warmup 4, total 12: warmup step/4, then (12-step)/8, floored at 0.
  LrSchedule s{LrScheduler::linear, 2e-4, 4, 12};
  CHECK(s.multiplier(0) == 0.0);
  CHECK(s.multiplier(3) == 0.75);
  CHECK(s.multiplier(4) == 1.0);
  CHECK(s.multiplier(5) == 0.875);
  CHECK(s.multiplier(10) == 0.25);
  CHECK(s.multiplier(12) == 0.0);
  CHECK(s.multiplier(20) == 0.0);
  CHECK(s.lr(5) == 2e-4 * 0.875);
}

TEST_CASE("constant with warmup and the degenerate cases", "[run]") {
  LrSchedule c{LrScheduler::constant, 1e-4, 3, 10};
  CHECK(c.multiplier(0) == 0.0);
  CHECK(c.multiplier(2) == 2.0 / 3.0);
  CHECK(c.multiplier(3) == 1.0);
  CHECK(c.multiplier(1000) == 1.0);
  // No warmup: full rate from the first step (HF: max(1, 0) = 1 in the denominators).
  LrSchedule n{LrScheduler::cosine, 1e-4, 0, 4};
  CHECK(n.multiplier(0) == 1.0);
  CHECK(n.multiplier(2) == Approx(0.5).epsilon(1e-15));
  // Warmup longer than the run: the linear tail divides by max(1, total - warmup) = 1.
  LrSchedule l{LrScheduler::linear, 1e-4, 8, 5};
  CHECK(l.multiplier(4) == 0.5);
  CHECK(l.multiplier(8) == 0.0);
  eagle::config::Options o;
  o.learning_rate = 3e-4;
  o.warmup_steps = 7;
  o.lr_scheduler_type = LrScheduler::linear;
  LrSchedule m = make_lr_schedule(o, 70);
  CHECK(m.type == LrScheduler::linear);
  CHECK(m.peak_lr == 3e-4);
  CHECK(m.warmup_steps == 7);
  CHECK(m.total_steps == 70);
}

TEST_CASE("the first SIGINT/SIGTERM sets the stop flag; handlers are restored", "[run]") {
  struct sigaction before {};
  ::sigaction(SIGTERM, nullptr, &before);
  {
    StopSignals stop;
    CHECK_FALSE(stop.requested());
    CHECK(stop.signal_number() == 0);
    CHECK(std::string(stop.signal_name()).empty());
    CHECK_THROWS_AS(StopSignals(), eagle::Error);
    ::raise(SIGTERM);
    CHECK(stop.requested());
    CHECK(stop.signal_number() == SIGTERM);
    CHECK(std::string(stop.signal_name()) == "SIGTERM");
  }
  struct sigaction after {};
  ::sigaction(SIGTERM, nullptr, &after);
  CHECK(after.sa_handler == before.sa_handler);
  {
    StopSignals stop;  // a new run starts clear
    CHECK_FALSE(stop.requested());
    ::raise(SIGINT);
    CHECK(std::string(stop.signal_name()) == "SIGINT");
  }
}

TEST_CASE("handlers installed at start-up keep a signal for the StopSignals that comes later", "[run]") {
  struct sigaction before {};
  ::sigaction(SIGTERM, nullptr, &before);
  eagle::run::install_stop_signals();
  ::raise(SIGTERM);  // the process survives: the handler sets the flag
  {
    StopSignals stop;
    CHECK(stop.requested());
    CHECK(std::string(stop.signal_name()) == "SIGTERM");
  }
  struct sigaction after {};
  ::sigaction(SIGTERM, nullptr, &after);
  CHECK(after.sa_handler == before.sa_handler);
}

TEST_CASE("a second signal exits at once with 130", "[run]") {
  pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    // The child: only async-signal-safe work until it exits.
    StopSignals stop;
    ::raise(SIGINT);
    if (!stop.requested()) ::_exit(10);
    ::raise(SIGTERM);
    ::_exit(11);  // not reached when the second signal exits
  }
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 130);
  CHECK(WEXITSTATUS(status) == static_cast<int>(eagle::ExitCode::interrupted));
}

TEST_CASE("CI gates: min_ar and max_final_loss", "[run]") {
  RunSummary s;
  s.ar = 2.5;
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

  s.ar.reset();
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
  s.acc = {0.75, 0.5};
  s.tau = 2.25;
  s.real_tokens = 40000.0;
  s.tokens_per_s = 1000.0;
  s.wall_time_s = 12.5;
  CHECK_FALSE(apply_gates(s, 2.0, 0.0));  // an interrupted run records its gates but cannot miss them
  CHECK(s.exit_reason == ExitReason::interrupted);
  write_summary(tmp.path(), s);
  json doc = json::parse(eagle::test::read_file(tmp / "summary.json"));
  CHECK(doc == json::parse(R"({"exit_reason": "interrupted", "detail": "SIGTERM", "exit_code": 130, "steps": 40,
      "total_steps": 100, "resumed_from_step": 20, "final_loss": 1.5, "ar": null, "acc": [0.75, 0.5],
      "tau": 2.25, "eval_loss": null, "tree_ar": null, "temp_ar": null, "temp_ar_ci95": null, "alpha": [],
      "alpha_ar": null, "best_metric": "ar", "real_tokens": 40000.0, "tokens_per_s": 1000.0, "wall_time_s": 12.5, "best_step": null,
      "gates": {"min_ar": {"threshold": 2.0, "value": null, "passed": false}}})"));
  // Written atomically: no temporary file is left behind.
  std::size_t entries = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(tmp.path())) ++entries;
  CHECK(entries == 1);
}

TEST_CASE("config.json and command_line.txt of the run", "[run]") {
  CHECK(shell_quote({"eagle-train", "train", "--max_steps", "20"}) == "eagle-train train --max_steps 20");
  CHECK(shell_quote({"a b", "it's", "", "x=1,2"}) == "'a b' 'it'\\''s' '' x=1,2");
  eagle::test::TempDir tmp;
  eagle::config::Options o;
  o.max_steps = 20;
  o.output_dir = tmp.path().string();
  write_run_files(tmp.path(), o, {"eagle-train", "train", "--max_steps", "20", "--output_dir", o.output_dir});
  json cfg = json::parse(eagle::test::read_file(tmp / "config.json"));
  CHECK(cfg == eagle::config::to_json(o, eagle::config::Command::train));
  CHECK(cfg["max_steps"] == 20);
  // The saved config is accepted back as a config file, giving the same options.
  eagle::config::Options back;
  eagle::config::apply_json_file(back, (tmp / "config.json").string());
  CHECK(eagle::config::to_json(back, eagle::config::Command::train) == cfg);
  std::string first = "eagle-train train --max_steps 20 --output_dir " + tmp.path().string() + "\n";
  CHECK(eagle::test::read_file(tmp / "command_line.txt") == first);
  // A resumed start adds its own line below.
  write_run_files(tmp.path(), o, {"eagle-train", "train", "--resume_from_checkpoint", "auto"});
  CHECK(eagle::test::read_file(tmp / "command_line.txt") ==
        first + "eagle-train train --resume_from_checkpoint auto\n");
}
