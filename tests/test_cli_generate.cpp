// eagle-train generate as a subprocess: the output is the target's replies as JSONL that prepare
// reads, bad samples are copied or dropped and counted, and a run stopped by SIGINT and then killed
// (SIGKILL) continues where it stopped to exactly the file of an uninterrupted run.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <unistd.h>

#include <filesystem>
#include <random>
#include <sstream>

#include "eagle/data/sample_writer.h"
#include "eagle/run/dir_lock.h"
#include "helpers.h"

using eagle::test::read_file;
using eagle::test::run_cli;
using eagle::test::run_command;
using eagle::test::TempDir;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

const std::string kModel = std::string(EAGLE_SOURCE_DIR) + "/tests/fixtures/models/tiny-llama";

std::string line(const std::vector<int>& ids, const std::vector<int>& mask) {
  return json{{"input_ids", ids}, {"loss_mask", mask}}.dump() + "\n";
}

// A one-turn sample: prompt (untrained) and a placeholder reply token.
std::string ask(const std::vector<int>& prompt) {
  std::vector<int> ids = prompt, mask(prompt.size(), 0);
  ids.push_back(7);
  mask.push_back(1);
  return line(ids, mask);
}

std::vector<json> lines(const fs::path& p) {
  std::vector<json> out;
  std::istringstream in(read_file(p));
  for (std::string l; std::getline(in, l);) out.push_back(json::parse(l));
  return out;
}

}  // namespace

TEST_CASE("generate writes the target's replies as JSONL; bad samples are copied or dropped", "[cli]") {
  TempDir dir;
  const auto fixture = json::parse(read_file(fs::path(EAGLE_SOURCE_DIR) / "tests/fixtures/reference/generate.json"));
  const auto& prompts = fixture["families"]["tiny-llama"]["prompts"];
  std::vector<int> long_prompt(40, 9);
  auto prompt = [&](int i) { return prompts[i]["prompt"].get<std::vector<int>>(); };
  eagle::test::write_file(dir / "in.jsonl",
                          ask(prompt(0)) + line({1, 2, 3}, {0, 0, 0}) + ask(long_prompt) + ask(prompt(1)));
  const std::string args = "generate --model_name_or_path " + kModel + " --data_path " + (dir / "in.jsonl").string() +
                           " --output " + (dir / "out.jsonl").string() +
                           " --max_new_tokens 10 --training_seq_len 32 --overlong_policy drop "
                           "--generate_batch_size 2 --device cpu --num_threads 1";
  auto r = run_cli(args);
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.output, Catch::Contains("4 samples: 2 regenerated") && Catch::Contains("1 copied unchanged") &&
                           Catch::Contains("1 dropped") && Catch::Contains("by an end id: 1, by length: 1"));
  auto out = lines(dir / "out.jsonl");
  REQUIRE(out.size() == 3);
  for (auto [k, p] : {std::pair<std::size_t, std::size_t>{0, 0}, {2, 1}}) {
    auto expected = prompt(static_cast<int>(p));
    std::vector<int> mask(expected.size(), 0);
    for (int t : prompts[p]["reply"]) {
      expected.push_back(t);
      mask.push_back(1);
    }
    CHECK(out[k]["input_ids"].get<std::vector<int>>() == expected);
    CHECK(out[k]["loss_mask"].get<std::vector<int>>() == mask);
  }
  CHECK(out[1] == json{{"input_ids", {1, 2, 3}}, {"loss_mask", {0, 0, 0}}});
  const auto progress = dir / ("out.jsonl" + std::string(eagle::data::kProgressSuffix));
  CHECK(json::parse(read_file(progress))["complete"] == true);  // the record a rerun reads

  // prepare reads it (the copied sample has no trained token: skipped as it would be from the input).
  auto p = run_cli("prepare --input " + (dir / "out.jsonl").string() + " --output " + (dir / "prepared").string() +
                   " --bad_sample_policy skip");
  INFO(p.output);
  CHECK(p.exit_code == 0);
  CHECK_THAT(p.output, Catch::Contains("2 train + 0 validation samples"));

  // The same command again: nothing to do (exit 0), the output untouched; the data path spelled
  // another way is the same setting.
  const std::string written = read_file(dir / "out.jsonl");
  auto again = run_cli(args);
  INFO(again.output);
  CHECK(again.exit_code == 0);
  CHECK_THAT(again.output, Catch::Contains("is complete (4 samples") && Catch::Contains("nothing to do"));
  CHECK(read_file(dir / "out.jsonl") == written);
  std::string respelled = args;
  respelled.replace(respelled.find(dir.path().string()), dir.path().string().size(), (dir / "." / "").string());
  CHECK(run_cli(respelled).exit_code == 0);
  // Other settings are refused naming the setting; an output changed since is not taken for done.
  auto other = run_cli(args + " --max_new_tokens 11");
  CHECK(other.exit_code == 2);
  CHECK_THAT(other.output, Catch::Contains("other settings") && Catch::Contains("max_new_tokens"));
  eagle::test::write_file(dir / "out.jsonl", written + "{}\n");
  auto changed = run_cli(args);
  CHECK(changed.exit_code == 4);
  CHECK_THAT(changed.output, Catch::Contains("already exists"));
  // Removed, the output is generated again to the same bytes (the stale record is replaced).
  fs::remove(dir / "out.jsonl");
  auto fresh = run_cli(args);
  INFO(fresh.output);
  CHECK(fresh.exit_code == 0);
  CHECK(read_file(dir / "out.jsonl") == written);
  auto usage = run_cli("generate --model_name_or_path " + kModel + " --data_path x.jsonl --output o.txt");
  CHECK(usage.exit_code == 2);
  CHECK_THAT(usage.output, Catch::Contains(".jsonl"));
  auto top_p = run_cli("generate --model_name_or_path " + kModel + " --data_path x.jsonl --output o.jsonl --top_p 0");
  CHECK(top_p.exit_code == 2);
  CHECK_THAT(top_p.output, Catch::Contains("--top_p"));
}

TEST_CASE("generate stopped by SIGINT, then killed, continues to the uninterrupted output", "[cli]") {
  TempDir dir;
  std::mt19937 rng(5);
  std::string input;
  // About 8 s here: long enough that both signals land mid-run (progress is committed once a second)
  // also on a machine a few times faster.
  for (int i = 0; i < 300; ++i) {
    std::vector<int> prompt(4 + i % 9);
    for (auto& t : prompt) t = 10 + static_cast<int>(rng() % 500);
    input += ask(prompt);
  }
  eagle::test::write_file(dir / "in.jsonl", input);
  // One row: each sample's computation is then the same whichever sample a run starts at.
  auto command = [&](const std::string& out) {
    return std::string(EAGLE_TRAIN_BIN) + " generate --model_name_or_path " + kModel + " --data_path " +
           (dir / "in.jsonl").string() + " --output " + (dir / out).string() +
           " --max_new_tokens 64 --generate_batch_size 1 --device cpu --num_threads 1";
  };
  auto reference = run_command(command("ref.jsonl") + " 2>&1");
  REQUIRE(reference.exit_code == 0);

  // Starts the run in the background, waits until its progress file records more than `after`
  // samples, sends `signal` and returns the run's exit status and log.
  const auto progress = (dir / "out.jsonl").string() + eagle::data::kProgressSuffix;
  auto interrupt = [&](const char* signal, int after, const char* log) {
    return run_command(command("out.jsonl") + " > " + (dir / log).string() + " 2>&1 & pid=$!; " +
                       "for i in $(seq 1 1200); do "
                       "n=$(sed -n 's/.*\"samples_done\": *\\([0-9]*\\).*/\\1/p' " +
                       progress + " 2>/dev/null); " + "[ \"${n:-0}\" -gt " + std::to_string(after) +
                       " ] && break; sleep 0.05; done; " + "kill -" + signal +
                       " $pid; wait $pid; echo \"exit $?\"; cat " + (dir / log).string());
  };
  auto first = interrupt("INT", 0, "first.log");
  INFO(first.output);
  REQUIRE_THAT(first.output, Catch::Contains("exit 130") && Catch::Contains("stopped by SIGINT after") &&
                                 Catch::Contains("rerun the same command"));
  const auto done = json::parse(read_file(progress))["samples_done"].get<int>();
  CHECK(done > 0);
  CHECK(done < 300);
  auto second = interrupt("KILL", done, "second.log");
  INFO(second.output);
  REQUIRE_THAT(second.output, Catch::Contains("exit 137") && Catch::Contains("resuming"));
  CHECK(!fs::exists(dir / "out.jsonl"));
  auto last = run_command(command("out.jsonl") + " 2>&1");
  INFO(last.output);
  REQUIRE(last.exit_code == 0);
  CHECK_THAT(last.output, Catch::Contains("resuming") && Catch::Contains("300 samples: 300 regenerated"));
  CHECK(read_file(dir / "out.jsonl") == read_file(dir / "ref.jsonl"));
}

TEST_CASE("a second generate on the same output is refused, naming the holder's pid", "[cli]") {
  TempDir dir;
  eagle::test::write_file(dir / "in.jsonl", ask({10, 11, 12}));
  const auto out = (dir / "out.jsonl").string();
  const std::string args = "generate --model_name_or_path " + kModel + " --data_path " + (dir / "in.jsonl").string() +
                           " --output " + out + " --max_new_tokens 4 --device cpu --num_threads 1";
  {
    // This process holds the lock as a running generate would.
    eagle::run::DirLock held(out + ".lock", "the generate output", /*beside_output=*/true);
    auto r = run_cli(args);
    INFO(r.output);
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.output, Catch::Contains("in use by another eagle-train process") &&
                             Catch::Contains("pid " + std::to_string(::getpid())));
    CHECK_FALSE(fs::exists(out + eagle::data::kPartSuffix));
  }
  // A lock file left by a killed run (nobody holds it) never blocks.
  eagle::test::write_file(out + ".lock", "999999999\n");
  eagle::test::write_file(dir / ".tmp-out.jsonl.progress.999999999", "torn");  // a killed run's temporary
  auto r = run_cli(args);
  INFO(r.output);
  CHECK(r.exit_code == 0);
  CHECK(fs::exists(out));
  CHECK_FALSE(fs::exists(out + ".lock"));
  CHECK_FALSE(fs::exists(dir / ".tmp-out.jsonl.progress.999999999"));
}
