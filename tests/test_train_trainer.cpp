// The real training run, in-process on the tiny Llama fixture: each way out (completed,
// interrupted, gate_missed, failed) writes summary.json; a resumed run's checkpoints hold the
// resumed run's options; the tokens seen are counted and survive a resume.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <fstream>
#include <tuple>

#include "eagle/config/resolve.h"
#include "eagle/run/signals.h"
#include "eagle/train/trainer.h"
#include "eagle/util/error.h"
#include "helpers.h"
#include "replay_server.h"
#include "train_helpers.h"

using namespace eagle;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

config::Options smoke_options(const fs::path& out) {
  config::Options o = test::smoke_options();
  o.output_dir = out.string();
  o.max_steps = 6;
  o.logging_steps = 2;
  o.eval_steps = 0;
  o.save_steps = 0;
  o.eval_num_prompts = 2;
  o.eval_max_new_tokens = 8;
  return o;
}

json read_json(const fs::path& p) { return json::parse(test::read_file(p)); }

// Runs the trainer expecting it to throw an eagle::Error; returns it.
}  // namespace

TEST_CASE("a completed run writes its summary and counts the real tokens it trained on", "[train]") {
  test::TempDir tmp;
  auto o = smoke_options(tmp / "run");
  run::RunSummary s = train::train(o, {"eagle-train", "train"});
  CHECK(s.exit_reason == run::ExitReason::completed);
  CHECK(s.steps == 6);
  CHECK(s.real_tokens > 0);
  auto summary = read_json(tmp / "run" / "summary.json");
  CHECK(summary["exit_reason"] == "completed");
  CHECK(summary["exit_code"] == 0);
  CHECK(summary["real_tokens"].get<double>() == s.real_tokens);
  CHECK(read_json(tmp / "run" / "checkpoint-6" / "trainer_state.json")["real_tokens"].get<double>() == s.real_tokens);
}

TEST_CASE("an interrupted run writes its summary; the resumed run saves its own options and keeps counting",
          "[train]") {
  test::TempDir tmp;
  auto straight = train::train(smoke_options(tmp / "straight"), {"eagle-train", "train"});

  auto o = smoke_options(tmp / "run");
  train::TrainHooks hooks;
  hooks.after_step = [](std::int64_t step) {
    if (step == 3) ::raise(SIGTERM);
  };
  Error e = test::train_error(o, hooks);
  CHECK(e.kind() == ErrorKind::interrupted);
  auto summary = read_json(tmp / "run" / "summary.json");
  CHECK(summary["exit_reason"] == "interrupted");
  CHECK(summary["exit_code"] == 130);
  CHECK(summary["detail"] == "SIGTERM");
  CHECK(summary["steps"] == 3);
  REQUIRE(fs::exists(tmp / "run" / "checkpoint-3" / "COMPLETE"));

  // Resumed with another logging interval (an option that may change): the new checkpoints hold it.
  o.resume_from_checkpoint = "auto";
  o.logging_steps = 3;
  run::RunSummary resumed = train::train(o, {"eagle-train", "train"});
  CHECK(resumed.exit_reason == run::ExitReason::completed);
  CHECK(resumed.resumed_from_step == 3);
  auto state = read_json(tmp / "run" / "checkpoint-6" / "trainer_state.json");
  CHECK(state["config"]["logging_steps"] == 3);
  CHECK(state["config"]["resume_from_checkpoint"] == "auto");
  // The same samples were trained on as in the straight run.
  CHECK(resumed.real_tokens == straight.real_tokens);
}

TEST_CASE("a missed gate and a failure each write their summary", "[train]") {
  test::TempDir tmp;
  auto gated = smoke_options(tmp / "gated");
  gated.min_ar = 9.0;
  Error g = test::train_error(gated);
  CHECK(g.kind() == ErrorKind::gate);
  auto gs = read_json(tmp / "gated" / "summary.json");
  CHECK(gs["exit_reason"] == "gate_missed");
  CHECK(gs["exit_code"] == 6);
  CHECK(gs["gates"]["min_ar"]["passed"] == false);

  auto failing = smoke_options(tmp / "failed");
  failing.learning_rate = 1e30;  // the weights overflow after the first update
  failing.warmup_steps = 0;
  Error f = test::train_error(failing);
  CHECK(f.kind() == ErrorKind::training);
  auto fs_ = read_json(tmp / "failed" / "summary.json");
  CHECK(fs_["exit_reason"] == "failed");
  CHECK(fs_["exit_code"] == 5);
  CHECK_THAT(fs_["detail"].get<std::string>(), Catch::Contains("non-finite loss or gradient"));
}

TEST_CASE("a signal during the final evaluation still ends interrupted with the checkpoint; resuming completes",
          "[train]") {
  test::TempDir tmp;
  auto o = smoke_options(tmp / "run");
  train::TrainHooks hooks;
  hooks.after_step = [](std::int64_t step) {
    if (step == 6) ::raise(SIGTERM);  // arrives as the final evaluation starts
  };
  Error e = test::train_error(o, hooks);
  CHECK(e.kind() == ErrorKind::interrupted);
  CHECK(read_json(tmp / "run" / "summary.json")["exit_reason"] == "interrupted");
  REQUIRE(fs::exists(tmp / "run" / "checkpoint-6" / "COMPLETE"));
  // Resuming runs what was cut short (the final evaluation) and completes.
  o.resume_from_checkpoint = "auto";
  run::RunSummary s = train::train(o, {"eagle-train", "train"});
  CHECK(s.exit_reason == run::ExitReason::completed);
  CHECK(read_json(tmp / "run" / "summary.json")["exit_reason"] == "completed");
}

TEST_CASE("a final evaluation that fails leaves the last step's checkpoint; resuming runs only the evaluation",
          "[train]") {
  test::TempDir tmp;
  auto o = smoke_options(tmp / "run");
  // Out of the option table's range (the CLI refuses it at start-up); in-process it reaches the
  // final evaluation, whose KV cache cannot be allocated.
  o.eval_max_new_tokens = 1'000'000'000'000;
  CHECK_THROWS(train::train(o, {"eagle-train", "train"}));  // the allocator's own error, mapped to exit 1 by main
  CHECK(read_json(tmp / "run" / "summary.json")["exit_reason"] == "failed");
  REQUIRE(fs::exists(tmp / "run" / "checkpoint-6" / "COMPLETE"));
  o.eval_max_new_tokens = 8;
  o.resume_from_checkpoint = "auto";
  run::RunSummary s = train::train(o, {"eagle-train", "train"});
  CHECK(s.exit_reason == run::ExitReason::completed);
  CHECK(s.resumed_from_step == 6);
  CHECK((s.eval && s.eval->acceptance.ar));
}

TEST_CASE("a checkpoint with a negative step is refused by name", "[train]") {
  test::TempDir tmp;
  auto o = smoke_options(tmp / "run");
  o.eval_num_prompts = 0;
  train::train(o, {"eagle-train", "train"});
  const auto state_file = tmp / "run" / "checkpoint-6" / "trainer_state.json";
  json state = read_json(state_file);
  state["step"] = -3;
  test::write_file(state_file, state.dump(2));
  o.resume_from_checkpoint = (tmp / "run" / "checkpoint-6").string();
  Error e = test::train_error(o);
  CHECK(e.kind() == ErrorKind::input);
  CHECK_THAT(e.format(), Catch::Contains("trainer_state.json") && Catch::Contains("step") &&
                             Catch::Contains("found -3"));
}

TEST_CASE("a checkpoint with a step no run can plan, or of another format version, is refused by name", "[train]") {
  // issue 41 item 16: step 2^62 and format_version 99 were accepted.
  test::TempDir tmp;
  auto o = smoke_options(tmp / "run");
  o.max_steps = 2;
  o.eval_num_prompts = 0;
  train::train(o, {"eagle-train", "train"});
  const auto state_file = tmp / "run" / "checkpoint-2" / "trainer_state.json";
  const json original = read_json(state_file);
  o.resume_from_checkpoint = (tmp / "run" / "checkpoint-2").string();
  o.max_steps = 3;
  for (const auto& [key, value, found] : std::vector<std::tuple<std::string, json, std::string>>{
           {"step", std::int64_t{1} << 62, "found 4611686018427387904"},
           {"format_version", 99, "found 99"},
           {"format_version", nullptr, "format_version"}}) {
    INFO(key << " " << value.dump());
    json state = original;
    if (value.is_null())
      state.erase(key);
    else
      state[key] = value;
    test::write_file(state_file, state.dump(2));
    Error e = test::train_error(o);
    CHECK(e.kind() == ErrorKind::input);
    CHECK_THAT(e.format(), Catch::Contains("trainer_state.json") && Catch::Contains(key) && Catch::Contains(found));
  }
}

TEST_CASE("a signal during start-up is kept and ends the run interrupted with its summary", "[train]") {
  test::TempDir tmp;
  auto o = smoke_options(tmp / "run");
  run::install_stop_signals();  // what main does first for train
  ::raise(SIGTERM);             // before the trainer exists: without the handlers the process dies (143)
  Error e = test::train_error(o);
  CHECK(e.kind() == ErrorKind::interrupted);
  auto summary = read_json(tmp / "run" / "summary.json");
  CHECK(summary["exit_reason"] == "interrupted");
  CHECK(summary["detail"] == "SIGTERM");
  CHECK(summary["steps"] == 0);
}

TEST_CASE("a resume that switches between a target server and the target's forward says it is not bit-exact",
          "[train]") {
  // issue 41 item 19: allowed (target_server may change on resume), logged.
  const std::string fixture = std::string(EAGLE_SOURCE_DIR) + "/tests/fixtures/vllm-server/tiny-llama-h32";
  test::TempDir tmp;
  test::ReplayServer server(fixture, tmp / "storage");
  config::Options o = test::smoke_options();
  o.model_name_or_path = std::string(EAGLE_SOURCE_DIR) + "/tests/fixtures/models/tiny-llama-h32";
  o.data_path = fixture + "/samples.jsonl";
  o.output_dir = (tmp / "run").string();
  o.training_seq_len = 64;
  o.bucket_granularity = 16;
  o.validation_fraction = 0;
  o.per_device_train_batch_size = 2;
  o.max_steps = 2;
  o.eval_steps = 0;
  o.eval_num_prompts = 0;
  o.aux_hidden_state_layer_ids = {1, 2, 3};  // as the recording's server was started
  o.target_server = server.url();
  o.target_server_storage = (tmp / "storage").string();
  train::train(o, {"eagle-train", "train"});
  // The resume's log, from this process's stderr.
  auto resumed_log = [&](config::Options r) {
    const auto log = tmp / "log.txt";
    const int saved = ::dup(STDERR_FILENO);
    const int file = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    ::dup2(file, STDERR_FILENO);
    ::close(file);
    r.resume_from_checkpoint = "auto";
    try {
      train::train(r, {"eagle-train", "train"});
    } catch (...) {
      ::dup2(saved, STDERR_FILENO);
      ::close(saved);
      throw;
    }
    ::dup2(saved, STDERR_FILENO);
    ::close(saved);
    return test::read_file(log);
  };
  auto online = o;
  online.target_server.clear();
  online.max_steps = 3;
  CHECK_THAT(resumed_log(online), Catch::Contains("not bit-exact") &&
                                      Catch::Contains("--target_server " + server.url()) &&
                                      Catch::Contains("from the target here"));
  auto served = o;
  served.max_steps = 4;
  CHECK_THAT(resumed_log(served), Catch::Contains("not bit-exact"));
  auto again = o;
  again.max_steps = 5;
  CHECK_THAT(resumed_log(again), !Catch::Contains("not bit-exact"));  // server to server: nothing to say
}
