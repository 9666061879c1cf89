// eagle-train generate --target_server against a recorded plain vLLM server
// (tests/fixtures/vllm-server/generate-tiny-llama-h32, scripts/record_vllm_server.py --generate)
// replayed inside the test, which answers only the exact request bodies vLLM saw: greedy, the output
// equals in-process generate on the same target and data (and the recorded run); sampled, the
// recorded run; a server going down mid-run ends it with exit 4 and the rerun finishes the file of an
// uninterrupted run; Ctrl-C does not wait for the answers in flight; two servers give the output of
// one, also when one of them fails every request (a retry moves to the next URL); a short context, a
// max_model_len that is not an integer, answers without token ids, token ids outside the
// vocabulary, tokens past an end id and a reply stopped early are refused by name.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <signal.h>

#include <chrono>
#include <filesystem>
#include <sstream>
#include <thread>

#include "eagle/data/sample_writer.h"
#include "helpers.h"
#include "replay_server.h"

using eagle::test::read_file;
using eagle::test::run_cli;
using eagle::test::TempDir;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

const fs::path kFixture = fs::path(EAGLE_SOURCE_DIR) / "tests/fixtures/vllm-server/generate-tiny-llama-h32";
const fs::path kModel = fs::path(EAGLE_SOURCE_DIR) / "tests/fixtures/models/tiny-llama-h32";

json run_record() { return json::parse(read_file(kFixture / "run.json")); }

// The target folder of the recorded runs: the fixture target's files linked, and
// generation_config.json adding the recording's end id to config.json's eos_token_id.
fs::path end_id_target(const TempDir& dir) {
  const auto target = dir / "target";
  fs::create_directories(target);
  for (const auto& e : fs::directory_iterator(kModel)) fs::create_symlink(e.path(), target / e.path().filename());
  const auto eos = json::parse(read_file(kModel / "config.json"))["eos_token_id"].get<int>();
  eagle::test::write_file(target / "generation_config.json",
                          json{{"eos_token_id", {eos, run_record()["end_id"].get<int>()}}}.dump());
  return target;
}

// generate with the recorded run's arguments (name: "greedy" or "sampled"), against `url` when given.
std::string args(const fs::path& target, const fs::path& out, const std::string& name, const std::string& url,
                 const std::string& extra = "") {
  std::string a = "generate --model_name_or_path " + target.string() + " --data_path " +
                  (kFixture / "samples.jsonl").string() + " --output " + out.string() + " --device cpu --num_threads 1";
  const auto record = run_record();  // held: a range-for over a member of a temporary would dangle
  const auto& recorded = record["runs"][name]["args"];
  for (std::size_t i = 0; i < recorded.size(); ++i) {
    const auto v = recorded[i].get<std::string>();
    // In-process, the server's own options would be refused as ignored: leave them (and their values) out.
    if (url.empty() && v.starts_with("--target_server")) {
      ++i;
      continue;
    }
    a += " " + v;
  }
  if (!url.empty()) a += " --target_server " + url;
  return a + " " + extra;
}

std::vector<json> lines(const fs::path& p) {
  std::vector<json> out;
  std::istringstream in(read_file(p));
  for (std::string l; std::getline(in, l);)
    if (!l.empty()) out.push_back(json::parse(l));
  return out;
}

}  // namespace

TEST_CASE("generate against a recorded vLLM server equals in-process generate (greedy) and the recording",
          "[generate]") {
  TempDir dir;
  const auto target = end_id_target(dir);
  eagle::test::ReplayServer server(kFixture, dir / "storage");
  auto r = run_cli(args(target, dir / "server.jsonl", "greedy", server.url()));
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.output, Catch::Contains("written by the server"));
  const auto recorded = run_record()["runs"];
  CHECK(lines(dir / "server.jsonl") == recorded["greedy"]["output"].get<std::vector<json>>());
  // In-process on the same target (fp32, as the server ran) and data: the same file, byte for byte.
  auto local = run_cli(args(target, dir / "local.jsonl", "greedy", ""));
  INFO(local.output);
  REQUIRE(local.exit_code == 0);
  CHECK(read_file(dir / "server.jsonl") == read_file(dir / "local.jsonl"));
  // The fixture covers what the stopping rules decide: an end id, the context, several turns, a copy.
  CHECK_THAT(r.output, Catch::Contains("by an end id: ") && !Catch::Contains("by an end id: 0,"));
  CHECK_THAT(r.output, Catch::Contains("1 copied unchanged"));
  // One request per reply: every greedy record answered once (the copied sample asks none, the
  // two-turn one twice).
  int greedy_records = 0;
  for (const auto& rec : eagle::test::read_jsonl(kFixture / "responses.jsonl"))
    greedy_records += rec["request"]["temperature"].get<double>() == 0.0;
  CHECK(server.completions() == greedy_records);

  // Sampled: vLLM's sampler with the per-(sample, turn) seeds; the recorded answers replayed.
  r = run_cli(args(target, dir / "sampled.jsonl", "sampled", server.url()));
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK(lines(dir / "sampled.jsonl") == recorded["sampled"]["output"].get<std::vector<json>>());
  CHECK(lines(dir / "sampled.jsonl") != lines(dir / "server.jsonl"));
  // A request the server never saw (another seed) has no recorded answer: the format is pinned.
  r = run_cli(args(target, dir / "other.jsonl", "sampled", server.url(), "--seed 8"));
  CHECK(r.exit_code == 3);
  CHECK_THAT(r.output, Catch::Contains("no recorded answer"));
}

TEST_CASE("a server going down mid-run ends generate with exit 4; the rerun finishes the uninterrupted file",
          "[generate]") {
  TempDir dir;
  const auto target = end_id_target(dir);
  eagle::test::ReplayServer server(kFixture, dir / "storage");
  REQUIRE(run_cli(args(target, dir / "whole.jsonl", "greedy", server.url())).exit_code == 0);
  const int requests = server.completions();

  // One request in flight: the first samples' requests are answered, then the server answers 503.
  const auto out = dir / "cut.jsonl";
  server.fail_after(requests + 3, 503);
  auto r = run_cli(args(target, out, "greedy", server.url(), "--generate_batch_size 1"));
  INFO(r.output);
  CHECK(r.exit_code == 4);
  CHECK_THAT(r.output, Catch::Contains("the server failed the request") && Catch::Contains("HTTP 503") &&
                           Catch::Contains(server.url()) && Catch::Contains("rerun the same command"));
  CHECK_FALSE(fs::exists(out));
  const auto part = dir / ("cut.jsonl" + std::string(eagle::data::kPartSuffix));
  REQUIRE(fs::exists(part));
  const auto kept = lines(part).size();
  CHECK(kept >= 1);
  CHECK(kept < lines(dir / "whole.jsonl").size());

  server.fail_after(0, 0);
  r = run_cli(args(target, out, "greedy", server.url()));
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.output, Catch::Contains(std::to_string(kept) + " done before"));
  CHECK(read_file(out) == read_file(dir / "whole.jsonl"));
}

TEST_CASE("Ctrl-C stops generate at once, though its requests are still being answered", "[generate]") {
  TempDir dir;
  const auto target = end_id_target(dir);
  eagle::test::ReplayServer server(kFixture, dir / "storage");
  server.delay_answers(60000);  // every reply takes a minute
  const auto pid = eagle::test::start_cli(args(target, dir / "o.jsonl", "greedy", server.url()), dir / "log.txt");
  // Once a request arrived, generation (and its signal handler) has started.
  for (int i = 0; i < 3000 && server.requests() == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  REQUIRE(server.requests() > 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const auto t0 = std::chrono::steady_clock::now();
  ::kill(pid, SIGINT);
  const int code = eagle::test::wait_exit(pid);
  INFO(read_file(dir / "log.txt"));
  CHECK(code == 130);
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(5));
  CHECK_THAT(read_file(dir / "log.txt"), Catch::Contains("stopped by SIGINT after 0 of 8 samples"));
  CHECK(fs::exists(dir / ("o.jsonl" + std::string(eagle::data::kPartSuffix))));
  server.stop();  // ends the answer it is holding
}

TEST_CASE("two servers give the output of one", "[generate]") {
  TempDir dir;
  const auto target = end_id_target(dir);
  eagle::test::ReplayServer a(kFixture, dir / "a"), b(kFixture, dir / "b");
  REQUIRE(run_cli(args(target, dir / "one.jsonl", "greedy", a.url())).exit_code == 0);
  const int one = a.completions();
  auto r = run_cli(args(target, dir / "two.jsonl", "greedy", a.url() + "," + b.url()));
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK(read_file(dir / "two.jsonl") == read_file(dir / "one.jsonl"));
  CHECK(a.completions() - one > 0);
  CHECK(b.completions() > 0);
  CHECK(a.completions() - one + b.completions() == one);
}

TEST_CASE("a request failing on one replica is retried on the next one before its retries are spent", "[generate]") {
  TempDir dir;
  const auto target = end_id_target(dir);
  eagle::test::ReplayServer a(kFixture, dir / "a"), b(kFixture, dir / "b");
  REQUIRE(run_cli(args(target, dir / "one.jsonl", "greedy", a.url())).exit_code == 0);
  const int one = a.completions();
  b.fail_with(503);  // healthy by /health, failing every completion
  // One retry each: a request that began on b must take its retry to a, whatever the other requests do.
  auto r = run_cli(args(target, dir / "two.jsonl", "greedy", b.url() + "," + a.url(),
                        "--generate_batch_size 4 --target_server_retries 1"));
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK(read_file(dir / "two.jsonl") == read_file(dir / "one.jsonl"));
  CHECK(b.requests() > 0);
  CHECK(a.completions() - one == one);
}

TEST_CASE("a short server context, answers without token ids, tokens past an end id and early stops are refused",
          "[generate]") {
  TempDir dir;
  const auto target = end_id_target(dir);
  eagle::test::ReplayServer server(kFixture, dir / "storage");
  const auto end_id = run_record()["end_id"].get<int>();
  SECTION("max_model_len below training_seq_len") {
    const auto max_len = json::parse(read_file(kFixture / "models.json"))["data"][0]["max_model_len"].get<int>();
    auto r = run_cli(
        args(target, dir / "o.jsonl", "greedy", server.url(), "--training_seq_len " + std::to_string(max_len + 1)));
    CHECK(r.exit_code == 3);
    CHECK_THAT(r.output, Catch::Contains("shorter than training_seq_len") && Catch::Contains("max_model_len") &&
                             Catch::Contains(std::to_string(max_len)));
    CHECK(server.completions() == 0);
  }
  SECTION("max_model_len of another JSON type") {
    server.edit_models([](json& j) { j["data"][0]["max_model_len"] = "4096"; });
    auto r = run_cli(args(target, dir / "o.jsonl", "greedy", server.url()));
    CHECK(r.exit_code == 3);
    CHECK_THAT(r.output, Catch::Contains("data[0].max_model_len") && Catch::Contains("\"4096\"") &&
                             Catch::Contains("a positive integer"));
    CHECK(server.completions() == 0);
  }
  SECTION("a token id outside the target's vocabulary") {
    const auto vocab = json::parse(read_file(kModel / "config.json"))["vocab_size"].get<int>();
    server.edit_answers([&](json& j) { j["choices"][0]["token_ids"][0] = vocab; });
    auto r = run_cli(args(target, dir / "o.jsonl", "greedy", server.url()));
    CHECK(r.exit_code == 3);
    CHECK_THAT(r.output, Catch::Contains("outside the target's vocabulary") &&
                             Catch::Contains("[0, " + std::to_string(vocab) + ") (vocab_size)") &&
                             Catch::Contains(std::to_string(vocab)));
    CHECK_FALSE(fs::exists(dir / "o.jsonl"));
  }
  SECTION("an answer without token_ids") {
    server.edit_answers([](json& j) { j["choices"][0].erase("token_ids"); });
    auto r = run_cli(args(target, dir / "o.jsonl", "greedy", server.url()));
    CHECK(r.exit_code == 3);
    CHECK_THAT(r.output, Catch::Contains("has no token ids") && Catch::Contains("choices[0].token_ids") &&
                             Catch::Contains(server.url()));
  }
  SECTION("tokens after an end id") {
    server.edit_answers(
        [&](json& j) { j["choices"][0]["token_ids"].insert(j["choices"][0]["token_ids"].begin(), end_id); });
    auto r = run_cli(args(target, dir / "o.jsonl", "greedy", server.url()));
    CHECK(r.exit_code == 3);
    CHECK_THAT(r.output, Catch::Contains("generated past the end of the reply") &&
                             Catch::Contains("ended after token 1 (" + std::to_string(end_id) + ")"));
  }
  SECTION("a reply stopped before its budget without an end id") {
    server.edit_answers([](json& j) { j["choices"][0]["token_ids"].erase(j["choices"][0]["token_ids"].size() - 1); });
    auto r = run_cli(args(target, dir / "o.jsonl", "greedy", server.url()));
    CHECK(r.exit_code == 3);
    CHECK_THAT(r.output, Catch::Contains("stopped the reply early") && Catch::Contains("finish_reason"));
  }
}
