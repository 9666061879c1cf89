// Training against a vLLM hidden-states server (--target_server): a recorded real vLLM run
// (tests/fixtures/vllm-server/tiny-llama-h32, scripts/record_vllm_server.py) replayed by a server
// inside the test trains exactly as the same features read as a speculators folder; the files are
// deleted once read; a server that is down or goes down ends the run with exit 4 (a checkpoint of
// the last step when it went down mid-run) and the resumed run continues exactly; features of
// another shape, a refused request and an answer without a file are refused by name; two ranks
// under torchrun against two servers train as one rank does.
#include <catch2/catch.hpp>

#include <chrono>

#include "eagle/config/resolve.h"
#include "eagle/train/trainer.h"
#include "eagle/util/error.h"
#include "helpers.h"
#include "replay_server.h"
#include "server_helpers.h"
#include "train_helpers.h"

using namespace eagle;
namespace fs = std::filesystem;

using test::files_in;
using test::server_options;
namespace {
const std::string& kFixture = test::kServerFixture;
}  // namespace

TEST_CASE("training against a recorded vLLM server equals training from its features as a speculators folder",
          "[features]") {
  test::TempDir tmp;
  test::ReplayServer server(kFixture, tmp / "storage");
  auto live = server_options(tmp / "server", server.url());
  train::train(live, {"eagle-train", "train"});

  auto stored = live;
  stored.output_dir = (tmp / "folder").string();
  stored.target_server.clear();
  stored.data_path.clear();
  stored.features_path = kFixture;  // the same files as a speculators folder (state.json + Arrow rows)
  train::train(stored, {"eagle-train", "train"});

  const auto a = test::logged_losses(tmp / "server"), b = test::logged_losses(tmp / "folder");
  REQUIRE(a.size() == 5);
  REQUIRE(b.size() == a.size());
  for (const auto& [step, loss] : a) CHECK(std::abs(loss - b.at(step)) <= 1e-6);
  // 5 steps of 2 samples, and the start-up probe; every file and lock deleted once read.
  CHECK(server.completions() == 11);
  CHECK(files_in(tmp / "storage") == 0);
}

TEST_CASE("two ranks under torchrun against two servers train what one rank trains from the stored features",
          "[features]") {
  const auto torchrun = fs::path(test::venv_python()).parent_path() / "torchrun";
  REQUIRE(fs::exists(torchrun));
  test::TempDir tmp;
  test::ReplayServer a(kFixture, tmp / "storage"), b(kFixture, tmp / "storage");  // one shared_storage_path
  auto stored = server_options(tmp / "folder", "");
  stored.data_path.clear();
  stored.features_path = kFixture;
  train::train(stored, {"eagle-train", "train"});

  // The same run as flags: each rank plans its own half of every batch (one sample) and requests
  // only those, starting at its own URL.
  const std::string root = EAGLE_SOURCE_DIR;
  const auto r = test::run_command(
      torchrun.string() + " --standalone --nproc-per-node 2 --no-python " + EAGLE_TRAIN_BIN + " train --config " +
      root + "/configs/smoke.json --model_name_or_path " + root + "/tests/fixtures/models/tiny-llama-h32 --data_path " +
      kFixture + "/samples.jsonl --output_dir " + (tmp / "ranks").string() +
      " --training_seq_len 64 --bucket_granularity 16 --validation_fraction 0 --per_device_train_batch_size 1"
      " --max_steps 5 --logging_steps 1 --eval_steps 0 --save_steps 0 --eval_num_prompts 0"
      " --aux_hidden_state_layer_ids 1,2,3 --target_server_retries 1 --target_server_timeout_s 10"
      " --target_server_storage " +
      (tmp / "storage").string() + " --target_server " + a.url() + "," + b.url() + " 2>&1");
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  const auto one = test::logged_losses(tmp / "folder"), two = test::logged_losses(tmp / "ranks");
  REQUIRE(one.size() == 5);
  REQUIRE(two.size() == one.size());
  for (const auto& [step, loss] : one) CHECK(std::abs(loss - two.at(step)) <= 1e-6);
  // 5 steps of one sample per rank, and each rank's probe; both servers asked.
  CHECK(a.completions() + b.completions() == 12);
  CHECK(a.completions() > 0);
  CHECK(b.completions() > 0);
  CHECK(files_in(tmp / "storage") == 0);
}

TEST_CASE("a server that goes down mid-run ends it with a checkpoint and exit 4; the resumed run is exact",
          "[features]") {
  test::TempDir tmp;
  test::ReplayServer server(kFixture, tmp / "storage");
  auto whole = server_options(tmp / "whole", server.url());
  whole.target_server_inflight = 1;
  train::train(whole, {"eagle-train", "train"});

  auto cut = whole;
  cut.output_dir = (tmp / "cut").string();
  train::TrainHooks hooks;
  hooks.after_step = [&](std::int64_t step) {
    if (step == 2) server.fail_with(503);  // vLLM's answer while its engine is dead
  };
  const auto e = test::train_error(cut, hooks);
  CHECK(e.exit_code() == ExitCode::output);
  CHECK_THAT(e.format(), Catch::Contains("the server failed the request") && Catch::Contains(server.url()) &&
                             Catch::Contains("resume"));
  // Steps 1 and 2 are done, step 3 could not get its second sample (at most one was fetched ahead): the
  // checkpoint is of step 2, the last one completed.
  CHECK(fs::exists(tmp / "cut" / "checkpoint-2"));
  CHECK_FALSE(fs::exists(tmp / "cut" / "checkpoint-3"));

  // summary.json's rate counts the two steps over their time (the counter was unset on this exit: ~1e13).
  const auto summary = nlohmann::json::parse(test::read_file(tmp / "cut" / "summary.json"));
  CHECK(summary["tokens_per_s"].get<double>() > 0);
  CHECK(summary["tokens_per_s"].get<double>() < 1e8);

  server.fail_with(0);
  auto resumed = cut;
  resumed.resume_from_checkpoint = "auto";
  train::train(resumed, {"eagle-train", "train"});
  const auto a = test::logged_losses(tmp / "whole"), b = test::logged_losses(tmp / "cut");
  REQUIRE(b.size() == a.size());
  for (const auto& [step, loss] : a) CHECK(std::abs(loss - b.at(step)) <= 1e-6);
  CHECK(files_in(tmp / "storage") == 0);
}

TEST_CASE("a refused answer mid-run ends it with exit 3 after saving the last completed step", "[features]") {
  test::TempDir tmp;
  test::ReplayServer server(kFixture, tmp / "storage");
  auto o = server_options(tmp / "run", server.url());
  o.target_server_inflight = 1;
  train::TrainHooks hooks;
  hooks.after_step = [&](std::int64_t step) {
    if (step == 2) server.fail_with(400);  // refused, never retried
  };
  const auto e = test::train_error(o, hooks);
  CHECK(e.exit_code() == ExitCode::input);
  CHECK_THAT(e.format(), Catch::Contains("the server refused the request") && Catch::Contains("HTTP 400"));
  CHECK(fs::exists(tmp / "run" / "checkpoint-2"));
  CHECK_FALSE(fs::exists(tmp / "run" / "checkpoint-3"));
}

TEST_CASE("no server, another feature shape, a refused request and an answer without a file are refused by name",
          "[features]") {
  test::TempDir tmp;
  SECTION("nothing listening: exit 4 naming the URL, after the retries") {
    int port = 0;
    {
      test::ReplayServer gone(kFixture, tmp / "storage");
      port = gone.port();
    }
    auto o = server_options(tmp / "down", "http://127.0.0.1:" + std::to_string(port));
    o.target_server_retries = 1;
    const auto t0 = std::chrono::steady_clock::now();
    const auto e = test::train_error(o);
    CHECK(e.exit_code() == ExitCode::output);
    CHECK_THAT(e.format(), Catch::Contains("cannot connect to the server") && Catch::Contains("/health"));
    CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(30));  // never a hang
  }
  test::ReplayServer server(kFixture, tmp / "storage");
  SECTION("two aux layers read where the server gives three and the last") {
    auto o = server_options(tmp / "shape", server.url());
    o.aux_hidden_state_layer_ids = {1, 2};
    const auto e = test::train_error(o);
    CHECK(e.exit_code() == ExitCode::input);
    CHECK_THAT(e.format(), Catch::Contains("another shape or dtype") && Catch::Contains(", 4, 64]") &&
                               Catch::Contains("eagle_aux_hidden_state_layer_ids"));
  }
  SECTION("an answer without kv_transfer_params (a server without the connector)") {
    server.edit_answers([](nlohmann::json& j) { j.erase("kv_transfer_params"); });
    const auto e = test::train_error(server_options(tmp / "nofile", server.url()));
    CHECK_THAT(e.format(), Catch::Contains("names no hidden-states file") &&
                               Catch::Contains("kv_transfer_params.hidden_states_path"));
  }
  SECTION("a refused request (HTTP 400) is not retried: exit 3") {
    server.fail_with(400);
    const auto e = test::train_error(server_options(tmp / "refused", server.url()));
    CHECK(e.exit_code() == ExitCode::input);
    CHECK_THAT(e.format(), Catch::Contains("the server refused the request") && Catch::Contains("HTTP 400"));
    CHECK(server.completions() == 0);
  }
  SECTION("target_server with features_path is refused") {
    auto o = server_options(tmp / "both", server.url());
    o.features_path = kFixture;
    CHECK_THROWS_WITH(config::validate(o, config::Command::train), Catch::Contains("target_server"));
  }
}
