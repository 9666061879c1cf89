// Step statistics, metrics.jsonl (fresh and resumed), the console step line and the progress bar.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>
#include <limits>
#include <sstream>

#include <sys/stat.h>

#include "eagle/util/log_sink.h"
#include "eagle/io/metrics_log.h"
#include "eagle/io/progress.h"
#include "eagle/io/step_stats.h"
#include "eagle/util/error.h"
#include "helpers.h"

using namespace eagle::io;
using eagle::log::LogLevel;
using eagle::log::set_log_level;
using nlohmann::json;

namespace {

// Acceptance metrics with only the chain AR measured.
AcceptanceStats ar_of(double ar) {
  AcceptanceStats a;
  a.ar = ar;
  return a;
}

StepStats sample_stats() {
  StepStats s;
  s.step = 120;
  s.total_steps = 1000;
  s.loss = 2.345649;
  s.acc = {0.6124, 0.48, 0.3906};
  s.tau = 2.31;
  s.lr = 9.87e-5;
  s.grad_norm = 0.8124;
  s.tokens_per_s = 12345.4;
  s.padding_efficiency = 0.875;
  s.ms_per_step = 411.6;
  return s;
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

// Everything a FILE* received (a tmpfile read back).
std::string contents(std::FILE* f) {
  std::fflush(f);
  std::rewind(f);
  std::string out;
  char buf[4096];
  std::size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) out.append(buf, n);
  return out;
}

}  // namespace

TEST_CASE("the step line has a fixed format", "[io]") {
  StepStats s = sample_stats();
  CHECK(format_step_line(s) ==
        "step 120/1000 | loss 2.3456 | acc 0.612 0.480 0.391 | tau 2.310 | lr 9.870e-05 | grad 0.812 | "
        "12345 tok/s | pad 87.5% | 412 ms/step");
  s.nonfinite_steps = 3;
  s.acc.clear();
  CHECK(format_step_line(s) ==
        "step 120/1000 | loss 2.3456 | acc - | tau 2.310 | lr 9.870e-05 | grad 0.812 | 12345 tok/s | pad 87.5% | "
        "412 ms/step | 3 non-finite steps skipped");
  s.loss = std::numeric_limits<double>::quiet_NaN();
  CHECK_THAT(format_step_line(s), Catch::StartsWith("step 120/1000 | loss n/a | "));  // never a number
}

TEST_CASE("the eval line reads 'step N AR: x'", "[io]") {
  EvalStats e{300, 2.12345, {0.7, 0.5}, 2.4, ar_of(2.875)};
  CHECK(format_eval_line(e) == "step 300 AR: 2.875 | eval loss 2.1235 | acc 0.700 0.500 | tau 2.400");
  e.acceptance.ar.reset();
  CHECK(format_eval_line(e) == "step 300 AR: n/a | eval loss 2.1235 | acc 0.700 0.500 | tau 2.400");
  e.loss = std::numeric_limits<double>::quiet_NaN();  // nothing scored: never "eval loss 0.0000"
  CHECK(format_eval_line(e) == "step 300 AR: n/a | eval loss n/a | acc 0.700 0.500 | tau 2.400");
  CHECK(to_json(e)["eval_loss"].is_null());
}

TEST_CASE("progress bars and plain progress lines", "[io]") {
  // 300 of 1000 steps in 60 s: 0.2 s a step, 700 left: 140 s.
  CHECK(format_progress_bar(300, 1000, 60.0, 0) ==
        "[#########.....................]  30.0% 300/1000 | 1m00s elapsed | ETA 2m20s");
  // Resumed at 200: this process ran 100 steps in 60 s, 0.6 s a step, 700 left: 420 s.
  CHECK(format_progress_bar(300, 1000, 60.0, 200, 10) == "[###.......]  30.0% 300/1000 | 1m00s elapsed | ETA 7m00s");
  CHECK(format_progress_bar(0, 1000, 0.0, 0, 4) == "[....]   0.0% 0/1000 | 0s elapsed | ETA ?");
  CHECK(format_progress_bar(1000, 1000, 100.0, 0, 4) == "[####] 100.0% 1000/1000 | 1m40s elapsed | ETA 0s");
  CHECK(format_progress_line(300, 1000, 60.0, 0) == "progress 300/1000 (30.0%) | 1m00s elapsed | ETA 2m20s");
}

TEST_CASE("the bar is redrawn in place and log lines print above it", "[io]") {
  std::FILE* out = std::tmpfile();
  REQUIRE(out);
  {
    Progress p(10, 0, ProgressMode::bar, out);
    CHECK(p.is_bar());
    CHECK(p.update(1, 2.0));
    CHECK_FALSE(p.update(2, 2.1));  // too soon after the last redraw
    CHECK(p.update(2, 4.0));
    // A log line (any area) clears the bar, prints, and the bar comes back; the line itself goes
    // to stderr through spdlog, so only the bar's own bytes are in `out`.
    set_log_level(LogLevel::info);
    p.log_step(sample_stats());
    set_log_level(LogLevel::warn);
  }
  std::string bar1 = format_progress_bar(1, 10, 2.0, 0), bar2 = format_progress_bar(2, 10, 4.0, 0);
  CHECK(contents(out) == "\r" + bar1 + "\x1b[K" + "\r" + bar2 + "\x1b[K" + "\r\x1b[K" + "\r" + bar2 + "\x1b[K" + "\n");
  std::fclose(out);
}

TEST_CASE("plain mode logs progress lines at most every interval", "[io]") {
  std::FILE* out = std::tmpfile();
  REQUIRE(out);
  Progress p(10, 0, ProgressMode::plain, out, 30.0);
  CHECK_FALSE(p.is_bar());
  CHECK_FALSE(p.update(1, 10.0));
  CHECK(p.update(2, 31.0));
  CHECK_FALSE(p.update(3, 45.0));
  CHECK(p.update(4, 61.5));
  CHECK(p.update(10, 62.0));  // the last step always
  CHECK(contents(out).empty());  // plain lines go through the log, never as bar bytes
  std::fclose(out);
  // auto picks plain when the stream is not a terminal
  std::FILE* file = std::tmpfile();
  CHECK(Progress(10, 0, ProgressMode::auto_, file).mode() == ProgressMode::plain);
  std::fclose(file);
}

TEST_CASE("step and eval statistics as JSON and TensorBoard scalars", "[io]") {
  StepStats s = sample_stats();
  s.grad_norm = std::numeric_limits<double>::infinity();
  json j = to_json(s);
  CHECK(j == json::parse(R"({"step": 120, "loss": 2.345649, "acc": [0.6124, 0.48, 0.3906], "tau": 2.31,
      "lr": 9.87e-05, "grad_norm": null, "tokens_per_s": 12345.4, "padding_efficiency": 0.875,
      "ms_per_step": 411.6, "nonfinite_steps": 0})"));
  EvalStats e{300, 2.5, {0.75}, 1.75, ar_of(2.5)};
  CHECK(to_json(e) ==
        json::parse(R"({"step": 300, "eval_loss": 2.5, "eval_acc": [0.75], "eval_tau": 1.75, "ar": 2.5})"));
  e.acceptance.ar.reset();
  CHECK_FALSE(to_json(e).contains("ar"));
  auto tb = tensorboard_scalars(sample_stats());
  std::vector<std::string> tags;
  for (const auto& [t, v] : tb) tags.push_back(t);
  CHECK(tags == std::vector<std::string>{"train/loss", "train/acc_0", "train/acc_1", "train/acc_2", "train/tau",
                                         "train/lr", "train/grad_norm", "train/tokens_per_s",
                                         "train/padding_efficiency", "train/ms_per_step"});
  CHECK(tb[1].second == 0.6124f);
  auto etb = tensorboard_scalars(EvalStats{300, 2.5, {0.75}, 1.75, ar_of(2.5)});
  CHECK(etb == std::vector<std::pair<std::string, float>>{
                   {"eval/loss", 2.5f}, {"eval/acc_0", 0.75f}, {"eval/tau", 1.75f}, {"eval/ar", 2.5f}});
}

TEST_CASE("throughput of a logging window counts real tokens only", "[io]") {
  ThroughputWindow w;
  StepStats s;
  w.fill(s, 0.0);
  CHECK(s.tokens_per_s == 0.0);
  CHECK(s.padding_efficiency == 0.0);
  CHECK(s.ms_per_step == 0.0);
  w.add(300, 512);
  w.add(500, 512);
  w.add(200, 256);
  w.fill(s, 2.5);
  CHECK(s.tokens_per_s == 400.0);                // 1000 real tokens / 2.5 s
  CHECK(s.padding_efficiency == 1000.0 / 1280.0);
  CHECK(s.ms_per_step == 2500.0 / 3.0);
  w = {};
  CHECK(w.steps == 0);
}

TEST_CASE("metrics.jsonl: one flushed object per line", "[io]") {
  eagle::test::TempDir tmp;
  {
    MetricsLog log(tmp.path());
    log.write({{"step", 1}, {"loss", 3.0}});
    // Flushed per line: readable before the log is closed.
    CHECK(eagle::test::read_file(tmp / "metrics.jsonl") == "{\"loss\":3.0,\"step\":1}\n");
    log.write({{"step", 2}, {"loss", std::nan("")}});
    CHECK_THROWS_AS(log.write({{"loss", 1.0}}), eagle::Error);
  }
  CHECK(eagle::test::read_file(tmp / "metrics.jsonl") == "{\"loss\":3.0,\"step\":1}\n{\"loss\":null,\"step\":2}\n");
  // A fresh run replaces the file.
  { MetricsLog log(tmp.path()); }
  CHECK(eagle::test::read_file(tmp / "metrics.jsonl").empty());
}

TEST_CASE("metrics.jsonl: a resumed run keeps steps up to the checkpoint and continues", "[io]") {
  eagle::test::TempDir tmp;
  // Steps 1..6 logged, the run killed in the middle of writing step 7's line.
  std::string earlier;
  for (int step = 1; step <= 6; ++step) earlier += json{{"step", step}, {"loss", 10 - step}}.dump() + "\n";
  earlier += "{\"step\": 7, \"lo";
  eagle::test::write_file(tmp / "metrics.jsonl", earlier);
  {
    MetricsLog log(tmp.path(), 4);  // resumed from checkpoint-4
    CHECK(log.kept_lines() == 4);
    CHECK(log.dropped_lines() == 3);
    log.write({{"step", 5}, {"loss", 0.5}});
  }
  auto lines = lines_of(eagle::test::read_file(tmp / "metrics.jsonl"));
  REQUIRE(lines.size() == 5);
  for (int i = 0; i < 4; ++i) CHECK(json::parse(lines[i])["step"] == i + 1);
  CHECK(json::parse(lines[4]) == json{{"step", 5}, {"loss", 0.5}});
  // Resuming where no metrics.jsonl exists yet starts one.
  eagle::test::TempDir empty;
  {
    MetricsLog log(empty.path(), 10);
    log.write({{"step", 11}});
  }
  CHECK(eagle::test::read_file(empty / "metrics.jsonl") == "{\"step\":11}\n");
}

TEST_CASE("a FIFO or folder planted as metrics.jsonl is refused by name, never opened (issue 53 L1)", "[io]") {
  eagle::test::TempDir dir;
  const auto log = dir / MetricsLog::kFileName;
  REQUIRE(::mkfifo(log.c_str(), 0600) == 0);
  for (const auto resumed : {std::optional<std::int64_t>{}, std::optional<std::int64_t>{5}}) {
    try {
      MetricsLog m(dir.path(), resumed);  // opening the FIFO would block this test forever
      FAIL("opened");
    } catch (const eagle::Error& e) {
      CHECK(e.kind() == eagle::ErrorKind::output);
      CHECK_THAT(e.format(), Catch::Contains("metrics.jsonl") && Catch::Contains("metrics log"));
    }
  }
  std::filesystem::remove(log);
  std::filesystem::create_directories(log);
  CHECK_THROWS_AS(MetricsLog(dir.path(), 5), eagle::Error);
  std::filesystem::remove(log);
  MetricsLog fresh(dir.path(), std::nullopt);  // a regular file (none yet) opens
  fresh.write(json{{"step", 1}});
  CHECK(std::filesystem::is_regular_file(log));
}
