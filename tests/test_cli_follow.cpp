// eagle-train follow as subprocesses, on tiny-llama-learn and the recurrence data cut into shards
// (scripts/make_learning_fixture.py: a random target whose argmax a draft can fit): rounds train on new shards
// and publish versions/<n> and latest, a malformed shard is quarantined, a reader of latest never sees a partial
// folder, shards added while it runs are each consumed once across a SIGKILL and a restart, a new policy version is
// picked up and logged, and the publish gate keeps a damaged draft out.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <signal.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <thread>

#include "eagle/model/safetensors.h"
#include "helpers.h"

using eagle::test::read_file;
using eagle::test::read_jsonl;
using eagle::test::run_cli;
using eagle::test::start_cli;
using eagle::test::TempDir;
using eagle::test::wait_exit;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

const std::string kFixtures = EAGLE_SOURCE_DIR "/tests/fixtures/";
// What the publish gate's evaluation and eval share.
const std::string kEval =
    " --training_seq_len 256 --eval_num_prompts 8 --eval_max_new_tokens 16 --eval_draft_len 3 --device cpu"
    " --num_threads 1";
const std::string kRun =
    kEval +
    " --per_device_train_batch_size 4 --bucket_granularity 64 --learning_rate 3e-3 --warmup_steps 0"
    " --seed 11 --logging_steps 10 --draft_vocab_size 512 --follow_poll_s 0.05";

// Shard k of the recurrence data: its lines [25 k, 25 k + 25) written as rollouts/<name> (a temporary, renamed in).
void add_shard(const fs::path& rollouts, int k, const std::string& name) {
  static const auto lines = [] {
    std::vector<std::string> v;
    std::ifstream in(kFixtures + "data/recurrence_train.jsonl");
    for (std::string line; std::getline(in, line);) v.push_back(line);
    return v;
  }();
  const auto tmp = rollouts / (".tmp-" + name);
  {
    std::ofstream out(tmp);
    for (int i = 25 * k; i < 25 * k + 25; ++i) out << lines.at(static_cast<std::size_t>(i % 300)) << "\n";
  }
  fs::rename(tmp, rollouts / name);
}

// A policy folder: versions v<N> of the target (copies of tiny-llama-learn) and latest naming one.
void set_policy(const fs::path& policy, int version) {
  const auto dir = policy / ("v" + std::to_string(version));
  fs::create_directories(policy);
  if (!fs::exists(dir)) fs::copy(kFixtures + "models/tiny-llama-learn", dir, fs::copy_options::recursive);
  const auto tmp = policy / ".latest.tmp";
  std::ofstream(tmp) << "v" << version << "\n";
  fs::rename(tmp, policy / "latest");
}

std::string follow_args(const fs::path& dir) {
  return "follow --model_name_or_path " + (dir / "policy").string() + " --rollout_dir " + (dir / "rollouts").string() +
         " --output_dir " + (dir / "out").string() + kRun;
}

// The round lines of a follower's metrics.jsonl.
std::vector<json> rounds_of(const fs::path& out) {
  std::vector<json> rounds;
  for (auto& j : read_jsonl(out / "metrics.jsonl"))
    if (j.contains("round")) rounds.push_back(j);
  return rounds;
}

json ledger(const fs::path& dir) { return json::parse(read_file(dir / "out" / "follow_state.json")); }

std::vector<std::string> consumed(const fs::path& dir) {
  std::vector<std::string> names;
  const auto j = ledger(dir);  // kept: a range over a temporary's member would dangle
  for (const auto& s : j["shards"]) names.push_back(s["name"].get<std::string>());
  return names;
}

}  // namespace

TEST_CASE("follow trains rounds on new shards, quarantines a malformed one and publishes whole versions", "[follow]") {
  TempDir dir;
  fs::create_directories(dir / "rollouts");
  set_policy(dir / "policy", 0);
  for (int k : {0, 1, 3}) add_shard(dir / "rollouts", k, "s" + std::to_string(k) + ".jsonl");
  // s2 in the prepared binary format (eagle-train prepare's train.bin).
  add_shard(dir.path(), 2, "s2-source.jsonl");
  auto prep = run_cli("prepare --input " + (dir / "s2-source.jsonl").string() + " --output " +
                      (dir / "prepared").string() + " --training_seq_len 256 --validation_fraction 0");
  INFO(prep.output);
  REQUIRE(prep.exit_code == 0);
  fs::rename(dir / "prepared" / "train.bin", dir / "rollouts" / "s2.bin");
  // s3 is the newest: held out for the gate.
  fs::last_write_time(dir / "rollouts" / "s3.jsonl", fs::file_time_type::clock::now() + std::chrono::seconds(5));
  std::ofstream(dir / "rollouts" / "bad.jsonl") << "{\"input_ids\": [1, 2, \n";
  // A reader of latest, polling while follow runs: the folder it names is always whole.
  std::atomic<bool> done{false};
  std::atomic<int> seen{0}, partial{0};
  std::thread reader([&] {
    const auto out = dir / "out";
    while (!done) {
      std::ifstream in(out / "latest");
      std::string name;
      if (std::getline(in, name) && !name.empty()) {
        const auto v = out / name;
        const bool whole = fs::exists(v / "config.json") && fs::exists(v / "model.safetensors") &&
                           fs::file_size(v / "model.safetensors") > 0;
        (whole ? seen : partial)++;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  });
  const auto published = dir / "published.txt";
  auto r = run_cli(follow_args(dir.path()) +
                   " --publish_every 10 --max_steps 20 --follow_window 2 --follow_replay 1 --keep_versions 1"
                   " --keep_rollouts 2 --publish_command 'echo $EAGLE_PUBLISHED_VERSION $EAGLE_PUBLISHED_DIR >> " +
                   published.string() + "'");
  done = true;
  reader.join();
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK(seen > 0);
  CHECK(partial == 0);
  // The malformed shard is moved aside with one line, and the run goes on.
  CHECK(fs::exists(dir / "rollouts" / "quarantine" / "bad.jsonl"));
  CHECK_FALSE(fs::exists(dir / "rollouts" / "bad.jsonl"));
  CHECK_THAT(r.output, Catch::Contains("quarantined a malformed shard"));
  // Round 1 trains on s0 and s1 (window 2) holding out s3; round 2 on s2 (the binary shard) with one replayed.
  CHECK(consumed(dir.path()) == std::vector<std::string>{"s0.jsonl", "s1.jsonl", "s2.bin"});
  // The command ran after each publish, with the version and its folder; one version is kept, two shards.
  const auto out = dir / "out";
  CHECK(read_file(published) ==
        "1 " + (out / "versions" / "1").string() + "\n2 " + (out / "versions" / "2").string() + "\n");
  CHECK_FALSE(fs::exists(out / "versions" / "1"));
  CHECK(fs::exists(out / "versions" / "2" / "model.safetensors"));
  CHECK_FALSE(fs::exists(dir / "rollouts" / "s0.jsonl"));
  CHECK(fs::exists(dir / "rollouts" / "s1.jsonl"));
  CHECK(fs::exists(dir / "rollouts" / "s2.bin"));
  CHECK(ledger(dir.path())["steps"] == 20);
  const auto rounds = rounds_of(dir / "out");
  REQUIRE(rounds.size() == 2);
  CHECK(rounds[0]["shards"] == json::array({"s0.jsonl", "s1.jsonl"}));
  CHECK(rounds[0]["heldout"] == "s3.jsonl");
  CHECK(rounds[0]["published"] == true);
  CHECK(rounds[0]["version"] == 1);
  CHECK(rounds[0]["mfu"].get<double>() > 0);  // the round's train run's MFU (docs/training.md)
  CHECK(rounds[1]["shards"] == json::array({"s2.bin"}));
  CHECK(rounds[1]["replay"].size() == 1);
  CHECK(rounds[1]["step"] == 20);
  CHECK(rounds[1].contains("loss"));
  CHECK(rounds[1].contains("eval_loss"));
  // The report draws the rounds, and TensorBoard has them.
  CHECK_THAT(read_file(out / "report.html"), Catch::Contains("Follow: rounds and publish decisions"));
  bool events = false;
  for (const auto& e : fs::directory_iterator(out))
    events |= e.path().filename().string().rfind("events.out.tfevents.", 0) == 0 && fs::file_size(e.path()) > 0;
  CHECK(events);
  CHECK(rounds[1]["serving_version"] == 1);
  // latest names a published version, an EAGLE-3 folder eval reads.
  const auto latest = read_file(dir / "out" / "latest");
  const auto version = rounds[1]["version"].get<int>();
  CHECK(latest == "versions/" + std::to_string(version) + "\n");
  auto e = run_cli("eval --checkpoint " + (dir / "out" / "versions" / std::to_string(version)).string() +
                   " --model_name_or_path " + kFixtures + "models/tiny-llama-learn --eval_data_path " +
                   (dir / "rollouts" / "s3.jsonl").string() + kEval + " --json");
  INFO(e.output);
  CHECK(e.exit_code == 0);
  // Done: a restart with the same max_steps has nothing left to do.
  auto again = run_cli(follow_args(dir.path()) + " --publish_every 10 --max_steps 20");
  CHECK(again.exit_code == 0);
  CHECK(rounds_of(dir / "out").size() == 2);
}

TEST_CASE("follow consumes every shard once across a SIGKILL and a restart", "[follow]") {
  TempDir dir;
  fs::create_directories(dir / "rollouts");
  set_policy(dir / "policy", 0);
  for (int k = 0; k < 3; ++k) add_shard(dir / "rollouts", k, "s" + std::to_string(k) + ".jsonl");
  const auto args = follow_args(dir.path()) + " --publish_every 10 --max_steps 40 --follow_window 1 --follow_replay 1";
  auto pid = start_cli(args, dir / "log1.txt");
  // Shards arrive while it runs; it is killed in the middle of a round after the first has completed.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(3);
  while (!fs::exists(dir / "out" / "follow_state.json") && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  add_shard(dir / "rollouts", 3, "s3.jsonl");
  add_shard(dir / "rollouts", 4, "s4.jsonl");
  while (!fs::exists(dir / "out" / "round" / "run") && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  ::kill(pid, SIGKILL);
  CHECK(wait_exit(pid) == -SIGKILL);
  const auto before = consumed(dir.path());
  INFO(read_file(dir / "log1.txt"));
  REQUIRE_FALSE(before.empty());
  add_shard(dir / "rollouts", 5, "s5.jsonl");
  add_shard(dir / "rollouts", 6, "s6.jsonl");
  auto r = run_cli(args);
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  // The ledger grew from the killed run's: each shard once, every one but the newest (held out) trained on.
  const auto after = consumed(dir.path());
  CHECK(std::equal(before.begin(), before.end(), after.begin()));
  std::map<std::string, int> count;
  for (const auto& name : after) count[name]++;
  for (const auto& [name, n] : count) CHECK(n == 1);
  CHECK(ledger(dir.path())["steps"] == 40);
  for (int k = 0; k < 4; ++k) CHECK(count.count("s" + std::to_string(k) + ".jsonl"));
  CHECK_FALSE(count.count("s6.jsonl"));
  CHECK_FALSE(fs::exists(dir / "out" / "round"));

  // SIGTERM while it waits for shards (one alone: a round needs two): exit 130, nothing trained or written.
  fs::create_directories(dir / "rollouts2");
  add_shard(dir / "rollouts2", 0, "only.jsonl");
  auto waiting = start_cli("follow --model_name_or_path " + (dir / "policy").string() + " --rollout_dir " +
                               (dir / "rollouts2").string() + " --output_dir " + (dir / "out2").string() + kRun,
                           dir / "log2.txt");
  std::this_thread::sleep_for(std::chrono::seconds(3));
  ::kill(waiting, SIGTERM);
  CHECK(wait_exit(waiting) == 130);
  INFO(read_file(dir / "log2.txt"));
  CHECK_THAT(read_file(dir / "log2.txt"), Catch::Contains("follow stopped by a signal between rounds"));
  CHECK_FALSE(fs::exists(dir / "out2" / "follow_state.json"));
}

TEST_CASE("follow picks up a new policy version and its gate keeps a damaged draft out", "[follow]") {
  TempDir dir;
  fs::create_directories(dir / "rollouts");
  set_policy(dir / "policy", 0);
  for (int k = 0; k < 3; ++k) add_shard(dir / "rollouts", k, "s" + std::to_string(k) + "-v0.jsonl");
  auto first = run_cli(follow_args(dir.path()) + " --publish_every 150 --max_steps 150 --follow_window 2");
  INFO(first.output);
  REQUIRE(first.exit_code == 0);
  CHECK(read_file(dir / "out" / "latest") == "versions/1\n");
  // Version 1 of the policy, and new shards of it.
  set_policy(dir / "policy", 1);
  for (int k = 3; k < 5; ++k) add_shard(dir / "rollouts", k, "s" + std::to_string(k) + "-v1.jsonl");
  // A damaged round (a learning rate that wrecks the draft): measured below the serving version, kept out.
  auto damaged = run_cli(follow_args(dir.path()) + " --publish_every 20 --max_steps 170 --learning_rate 0.5");
  INFO(damaged.output);
  REQUIRE(damaged.exit_code == 0);
  CHECK_THAT(damaged.output, Catch::Contains("policy version 0 -> 1"));
  CHECK_THAT(damaged.output, Catch::Contains("kept version 1"));
  const auto rounds = rounds_of(dir / "out");
  REQUIRE(rounds.size() == 2);
  CHECK(rounds[1]["policy_version"] == 1);
  CHECK(rounds[1]["published"] == false);
  CHECK(rounds[1]["ar"].get<double>() < rounds[1]["serving_ar"].get<double>());
  CHECK(read_file(dir / "out" / "latest") == "versions/1\n");
  CHECK_FALSE(fs::exists(dir / "out" / "versions" / "2"));
  CHECK(ledger(dir.path())["policy_dir"].get<std::string>() == (dir / "policy" / "v1").string());
  // The shards' versions come from their names.
  const auto j = ledger(dir.path());
  for (const auto& s : j["shards"])
    CHECK(s["version"] == (s["name"].get<std::string>().find("-v1") != std::string::npos ? 1 : 0));
}
