// The building blocks composed the way the trainer loop calls them, on a real (tiny) optimisation:
// gradient descent on (w - 3)^2 with the LR schedule, state saved as JSON in checkpoints. A run
// stopped by SIGTERM and resumed with "auto" must end exactly where an uninterrupted run ends.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <signal.h>

#include <fstream>
#include <sstream>

#include "eagle/io/run_logger.h"
#include "eagle/train/checkpoint_dir.h"
#include "eagle/train/lr_schedule.h"
#include "eagle/train/run_files.h"
#include "eagle/train/signals.h"
#include "eagle/train/summary.h"
#include "helpers.h"

using namespace eagle;
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

struct FlowResult {
  double w = 0.0;
  train::RunSummary summary;
};

// One process's worth of the loop. `stop_at`: raise SIGTERM during that step (0: never).
FlowResult run_flow(const fs::path& out, const std::string& resume, std::int64_t stop_at) {
  config::Options opts;
  opts.output_dir = out.string();
  opts.resume_from_checkpoint = resume;
  opts.learning_rate = 0.25;
  opts.warmup_steps = 3;
  opts.lr_scheduler_type = config::LrScheduler::cosine;
  const std::int64_t total = 20, save_steps = 5, eval_steps = 5, keep = 2;

  auto start = train::prepare_output_dir(out, opts.resume_from_checkpoint, opts.overwrite_output_dir);
  train::write_run_files(out, opts, {"eagle-train", "train", "--resume_from_checkpoint", resume});
  double w = 0.0;
  std::int64_t step = 0;
  if (start) {
    std::ifstream in(start->path / "state.json");
    json state = json::parse(in);
    w = state["w"];
    step = state["step"];
  }
  train::LrSchedule schedule = train::make_lr_schedule(opts, total);
  io::RunLogger logger(out, total, start ? std::optional<std::int64_t>(step) : std::nullopt, io::ProgressMode::off);
  train::StopSignals stop;
  train::CheckpointDir checkpoints(out);
  auto save = [&] {
    checkpoints.save(step, [&](const fs::path& dir) {
      std::ofstream(dir / "state.json") << json{{"step", step}, {"w", w}}.dump();
    });
    checkpoints.rotate(keep);
  };

  train::RunSummary summary;
  summary.total_steps = total;
  if (start) summary.resumed_from_step = step;
  while (step < total) {
    if (step + 1 == stop_at) ::raise(SIGTERM);  // arrives mid-step; the step still finishes
    double lr = schedule.lr(step);
    double loss = (w - 3.0) * (w - 3.0);
    double grad = 2.0 * (w - 3.0);
    w -= lr * grad;
    ++step;
    logger.on_step(step);
    io::StepStats s;
    s.step = step;
    s.total_steps = total;
    s.loss = loss;
    s.lr = lr;
    s.grad_norm = std::abs(grad);
    summary.final_loss = loss;
    bool evaluated = step % eval_steps == 0;
    io::EvalStats e;
    if (evaluated) {
      e.step = step;
      e.loss = (w - 3.0) * (w - 3.0);
      e.ar = 1.0 + 1.0 / (1.0 + e.loss);
      summary.ar = e.ar;
    }
    logger.log_step(s, evaluated ? &e : nullptr);
    bool saving = step % save_steps == 0 || step == total || stop.requested();
    if (saving) save();
    if (evaluated && saving) checkpoints.update_best(step, "ar", *e.ar);
    if (stop.requested()) {
      summary.exit_reason = "interrupted";
      summary.detail = stop.signal_name();
      summary.exit_code = static_cast<int>(ExitCode::interrupted);
      break;
    }
  }
  summary.steps = step;
  if (auto best = checkpoints.best()) summary.best_step = best->step;
  summary.gates = train::check_gates(summary, 1.9, 0.0);
  if (summary.exit_reason == "completed" && train::gate_error(summary.gates)) {
    summary.exit_reason = "gate_missed";
    summary.exit_code = static_cast<int>(ExitCode::gate);
  }
  logger.finish();
  train::write_summary(out, summary);
  return {w, summary};
}

std::vector<std::int64_t> logged_steps(const fs::path& out) {
  std::vector<std::int64_t> steps;
  std::istringstream in(test::read_file(out / "metrics.jsonl"));
  for (std::string l; std::getline(in, l);) steps.push_back(json::parse(l)["step"]);
  return steps;
}

}  // namespace

TEST_CASE("an interrupted, resumed run ends exactly where a straight run ends", "[io][flow]") {
  test::TempDir tmp;
  FlowResult straight = run_flow(tmp / "straight", "", 0);
  CHECK(straight.summary.exit_reason == "completed");
  CHECK(straight.summary.steps == 20);
  CHECK(straight.w == Approx(3.0).margin(0.05));

  fs::path out = tmp / "resumed";
  FlowResult first = run_flow(out, "", 12);
  CHECK(first.summary.exit_reason == "interrupted");
  CHECK(first.summary.detail == "SIGTERM");
  CHECK(first.summary.steps == 12);
  CHECK(json::parse(test::read_file(out / "summary.json"))["exit_code"] == 130);
  std::vector<std::int64_t> saved;
  for (const auto& c : train::CheckpointDir(out).list_complete()) saved.push_back(c.step);
  CHECK(saved == std::vector<std::int64_t>{10, 12});

  // Starting again without resume is refused; auto continues from checkpoint-12.
  CHECK_THROWS_AS(run_flow(out, "", 0), Error);
  FlowResult second = run_flow(out, "auto", 0);
  CHECK(second.summary.exit_reason == "completed");
  CHECK(second.summary.resumed_from_step == 12);
  CHECK(second.w == straight.w);  // bit for bit

  std::vector<std::int64_t> expected(20);
  for (int i = 0; i < 20; ++i) expected[i] = i + 1;
  CHECK(logged_steps(out) == expected);
  CHECK(logged_steps(tmp / "straight") == expected);
  saved.clear();
  for (const auto& c : train::CheckpointDir(out).list_complete()) saved.push_back(c.step);
  CHECK(saved == std::vector<std::int64_t>{15, 20});
  // AR rises as w approaches 3, so the best is the last evaluation.
  CHECK(train::CheckpointDir(out).best()->step == 20);
  json summary = json::parse(test::read_file(out / "summary.json"));
  CHECK(summary["best_step"] == 20);
  CHECK(summary["gates"]["min_ar"]["passed"] == true);
  std::string commands = test::read_file(out / "command_line.txt");
  CHECK(commands == "eagle-train train --resume_from_checkpoint ''\neagle-train train --resume_from_checkpoint auto\n");
}
