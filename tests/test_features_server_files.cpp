// The files a --target_server names: a path outside target_server_storage, relative, with a ".."
// component, a link, or another request's file is refused by name (exit 3) and nothing it names is
// read or deleted; a FIFO planted as the lock never blocks; a stop signal ends a wait for a slow
// server at once with the last completed step saved; a later run into the same output_dir removes
// what a killed run's requests left in the storage folder, and nothing else; token_ids of another
// dtype or shape, other tokens at the probe and a max_model_len that is no length are refused.
#include <catch2/catch.hpp>

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <thread>

#include "eagle/model/safetensors.h"
#include "eagle/train/trainer.h"
#include "eagle/util/error.h"
#include "helpers.h"
#include "replay_server.h"
#include "server_helpers.h"
#include "train_helpers.h"

using namespace eagle;
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

// A copy of a recorded hidden-states file outside the storage folder: another dataset's file.
fs::path victim(const test::TempDir& tmp) {
  fs::create_directories(tmp / "other");
  const auto p = tmp / "other" / "hs_0.safetensors";
  fs::copy_file(test::kServerFixture + "/hidden_states/hs_0.safetensors", p);
  return p;
}

std::string answered_path(const nlohmann::json& j) { return j["kv_transfer_params"]["hidden_states_path"]; }

}  // namespace

TEST_CASE("a file the server names outside its storage folder is refused by name and never read or deleted",
          "[features]") {
  test::TempDir tmp;
  test::ReplayServer server(test::kServerFixture, tmp / "storage");
  const auto other = victim(tmp);
  const auto o = test::server_options(tmp / "run", server.url());
  auto refused = [&](const std::string& what, const std::string& named) {
    const auto e = test::train_error(o);
    CHECK(e.exit_code() == ExitCode::input);
    CHECK_THAT(e.format(), Catch::Contains(what) && Catch::Contains(named));
    CHECK(fs::exists(other));  // the other dataset's file is still there
    return e.format();
  };
  SECTION("another folder") {
    server.edit_answers([&](nlohmann::json& j) { j["kv_transfer_params"]["hidden_states_path"] = other.string(); });
    CHECK_THAT(refused("outside the storage folder", other.string()),
               Catch::Contains("kv_transfer_params.hidden_states_path"));
  }
  SECTION("a relative path") {
    server.edit_answers([](nlohmann::json& j) { j["kv_transfer_params"]["hidden_states_path"] = "hs_0.safetensors"; });
    CHECK_THAT(refused("relative", "hs_0.safetensors"), Catch::Contains("kv_transfer_params.hidden_states_path"));
  }
  SECTION("a path with a .. component") {
    const auto up = (tmp / "storage").string() + "/../other/hs_0.safetensors";
    server.edit_answers([&](nlohmann::json& j) { j["kv_transfer_params"]["hidden_states_path"] = up; });
    CHECK_THAT(refused("\"..\" component", up), Catch::Contains("kv_transfer_params.hidden_states_path"));
  }
  SECTION("another request's file in the storage folder") {
    const auto theirs = tmp / "storage" / "cmpl-someone-else-0-1.safetensors";
    fs::copy_file(other, theirs);
    server.edit_answers([&](nlohmann::json& j) { j["kv_transfer_params"]["hidden_states_path"] = theirs.string(); });
    CHECK_THAT(refused("not the file of this request", theirs.string()),
               Catch::Contains("kv_transfer_params.hidden_states_path"));
    CHECK(fs::exists(theirs));
  }
  SECTION("this request's name, planted as a link to the other file") {
    server.edit_answers([&](nlohmann::json& j) {
      const std::string p = answered_path(j);
      fs::remove(p);
      fs::create_symlink(other, p);
    });
    refused("symbolic link", (tmp / "storage").string());
    CHECK(test::files_in(tmp / "storage") == 0);  // the link and the lock removed, not what the link named
  }
}

TEST_CASE("a FIFO planted as the lock is refused at once, never waited on", "[features]") {
  test::TempDir tmp;
  test::ReplayServer server(test::kServerFixture, tmp / "storage");
  server.edit_answers([](nlohmann::json& j) {
    const std::string lock = answered_path(j) + ".lock";
    fs::remove(lock);
    REQUIRE(::mkfifo(lock.c_str(), 0600) == 0);
  });
  auto o = test::server_options(tmp / "run", server.url());
  o.target_server_timeout_s = 60;
  const auto t0 = Clock::now();
  const auto e = test::train_error(o);
  CHECK(Clock::now() - t0 < std::chrono::seconds(20));  // the old open() blocked forever
  CHECK(e.exit_code() == ExitCode::input);
  CHECK_THAT(e.format(),
             Catch::Contains("not a regular file") && Catch::Contains("FIFO") && Catch::Contains(".safetensors.lock"));
}

TEST_CASE("a stop signal while the step waits for a slow server ends the run at once, the last step saved",
          "[features]") {
  test::TempDir tmp;
  test::ReplayServer server(test::kServerFixture, tmp / "storage");
  auto o = test::server_options(tmp / "run", server.url());
  o.target_server_inflight = 1;  // step 3 waits for its second sample
  o.target_server_timeout_s = 60;
  Clock::time_point signalled{};
  std::thread signaller;
  train::TrainHooks hooks;
  hooks.after_step = [&](std::int64_t step) {
    if (step != 2) return;
    server.delay_answers(120000);
    signaller = std::thread([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
      signalled = Clock::now();
      ::kill(::getpid(), SIGTERM);  // the trainer's handler takes it: the first signal only asks to stop
    });
  };
  const auto e = test::train_error(o, hooks);
  const auto waited = Clock::now() - signalled;
  signaller.join();
  CHECK(waited < std::chrono::seconds(5));  // not the 60 s of the request's deadline
  CHECK(e.exit_code() == ExitCode::interrupted);
  CHECK(fs::exists(tmp / "run" / "checkpoint-2"));
  const auto summary = nlohmann::json::parse(test::read_file(tmp / "run" / "summary.json"));
  CHECK(summary["exit_reason"] == "interrupted");
  server.delay_answers(0);
}

TEST_CASE("a later run into the same output_dir removes what a killed run's requests left, and nothing else",
          "[features]") {
  test::TempDir tmp;
  test::ReplayServer server(test::kServerFixture, tmp / "storage");
  const auto foreign = tmp / "storage" / "cmpl-another-run-0-1.safetensors";
  test::write_file(foreign, "another run's file");
  const auto o = test::server_options(tmp / "run", server.url());
  // The killed run: its requests are in flight (the server holds each answer 1.5 s) when SIGKILL ends it;
  // the server writes their files afterwards.
  server.delay_answers(1500);
  const std::string root = EAGLE_SOURCE_DIR;
  const auto pid = test::start_cli(
      "train --config " + root + "/configs/smoke.json --model_name_or_path " + o.model_name_or_path + " --data_path " +
          o.data_path + " --output_dir " + o.output_dir +
          " --training_seq_len 64 --bucket_granularity 16 --validation_fraction 0 --per_device_train_batch_size 2"
          " --max_steps 5 --eval_steps 0 --save_steps 0 --eval_num_prompts 0 --aux_hidden_state_layer_ids 1,2,3"
          " --target_server_inflight 2 --target_server_timeout_s 30 --target_server_storage " +
          o.target_server_storage + " --target_server " + server.url(),
      tmp / "killed.log");
  const auto t0 = Clock::now();
  while (server.requests() < 3 && Clock::now() - t0 < std::chrono::seconds(60))  // the probe and two in flight
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  ::kill(pid, SIGKILL);
  CHECK(test::wait_exit(pid) == -SIGKILL);
  while (server.completions() < server.requests() && Clock::now() - t0 < std::chrono::seconds(60))
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  INFO(test::read_file(tmp / "killed.log"));
  REQUIRE(test::files_in(tmp / "storage") > 2);  // the foreign file, the killed run's files and locks
  server.delay_answers(0);
  auto again = o;
  again.overwrite_output_dir = true;
  train::train(again, {"eagle-train", "train"});
  CHECK(test::files_in(tmp / "storage") == 1);
  CHECK(fs::exists(foreign));
}

TEST_CASE("token_ids of another dtype or shape, other tokens at the probe and a bad max_model_len are refused",
          "[features]") {
  test::TempDir tmp;
  test::ReplayServer server(test::kServerFixture, tmp / "storage");
  const auto o = test::server_options(tmp / "run", server.url());
  // Rewrites the first answer's file with token_ids changed by f (the later answers are the recording's).
  auto edit_first_file = [&](std::function<torch::Tensor(const torch::Tensor&)> f) {
    auto first = std::make_shared<bool>(true);
    server.edit_answers([first, f](nlohmann::json& j) {
      if (!*first) return;
      *first = false;
      const std::string p = answered_path(j);
      std::map<std::string, torch::Tensor> t;
      for (const auto& [name, v] : model::load_safetensors(p)) t[name] = v.clone();
      t["token_ids"] = f(t["token_ids"]);
      model::save_safetensors(p, t);
    });
  };
  SECTION("float32 token_ids") {
    edit_first_file([](const torch::Tensor& t) { return t.to(torch::kFloat32); });
    const auto e = test::train_error(o);
    CHECK(e.exit_code() == ExitCode::input);
    CHECK_THAT(e.format(), Catch::Contains("token_ids are of another dtype or shape") &&
                               Catch::Contains("int64 or int32 [") && Catch::Contains("float32"));
  }
  SECTION("token_ids of shape [1, T]") {
    edit_first_file([](const torch::Tensor& t) { return t.unsqueeze(0); });
    const auto e = test::train_error(o);
    CHECK_THAT(e.format(), Catch::Contains("token_ids are of another dtype or shape") && Catch::Contains("[1, "));
  }
  SECTION("the probe's token_ids differ from the prompt") {
    edit_first_file([](const torch::Tensor& t) {
      auto u = t.clone();
      u[5] += 1;
      return u;
    });
    const auto e = test::train_error(o);
    CHECK(e.exit_code() == ExitCode::input);
    CHECK_THAT(e.format(),
               Catch::Contains("other tokens than the sample's") && Catch::Contains("sample 0, token_ids[5]"));
    CHECK(server.completions() == 1);  // refused at the probe, before any step
  }
  SECTION("max_model_len as a string, or negative") {
    server.edit_models([](nlohmann::json& j) { j["data"][0]["max_model_len"] = "64"; });
    auto e = test::train_error(o);
    CHECK(e.exit_code() == ExitCode::input);
    CHECK_THAT(e.format(), Catch::Contains("data[0].max_model_len") && Catch::Contains("a positive integer") &&
                               Catch::Contains("\"64\""));
    server.edit_models([](nlohmann::json& j) { j["data"][0]["max_model_len"] = -5; });
    e = test::train_error(o);
    CHECK_THAT(e.format(), Catch::Contains("data[0].max_model_len") && Catch::Contains("-5"));
  }
}
