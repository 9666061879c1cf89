// The pieces of eagle-train follow that need no training: shard names and their policy versions, the scan of a
// rollout folder (new shards oldest first, hidden and temporary files skipped), quarantine, the ledger written and
// read back, and the policy pointer (a folder's `latest` line) with its refusals.
#include <catch2/catch.hpp>

#include <chrono>
#include <filesystem>
#include <fstream>

#include "eagle/follow/publish.h"
#include "eagle/follow/rollouts.h"
#include "eagle/follow/state.h"
#include "eagle/util/error.h"
#include "helpers.h"

using eagle::test::TempDir;
namespace fs = std::filesystem;
using namespace eagle::follow;

TEST_CASE("shard names: data files only, policy versions from -v<N> or .v<N>", "[follow]") {
  CHECK(is_shard_name("a.jsonl"));
  CHECK(is_shard_name("a.jsonl.gz"));
  CHECK(is_shard_name("a.json"));
  CHECK(is_shard_name("prepared.bin"));
  CHECK_FALSE(is_shard_name(".a.jsonl"));      // hidden: being written
  CHECK_FALSE(is_shard_name(".tmp-a.jsonl"));  // a temporary
  CHECK_FALSE(is_shard_name("a.txt"));
  CHECK_FALSE(is_shard_name("quarantine"));
  CHECK(version_in_name("step-1200-v3.jsonl") == 3);
  CHECK(version_in_name("rollouts.v12.jsonl.gz") == 12);
  CHECK(version_in_name("x-v7.bin") == 7);
  CHECK(version_in_name("v3.jsonl") == -1);  // a bare name is not a version tag
  CHECK(version_in_name("step-v3x.jsonl") == -1);
  CHECK(version_in_name("plain.jsonl") == -1);
}

TEST_CASE("the rollout folder's new shards come oldest first; quarantine keeps every name", "[follow]") {
  TempDir dir;
  auto write = [&](const std::string& name, int age_s) {
    std::ofstream(dir / name) << "{}\n";
    fs::last_write_time(dir / name, fs::file_time_type::clock::now() - std::chrono::seconds(age_s));
  };
  write("b.jsonl", 30);
  write("a.jsonl", 20);
  write("c.jsonl", 10);
  write(".tmp-d.jsonl", 40);
  write("notes.txt", 50);
  auto found = new_shard_files(dir.path(), {"a.jsonl"});
  REQUIRE(found.size() == 2);
  CHECK(found[0].filename() == "b.jsonl");
  CHECK(found[1].filename() == "c.jsonl");
  CHECK(quarantine(dir.path(), "b.jsonl") == dir / kQuarantineDir / "b.jsonl");
  write("b.jsonl", 5);
  CHECK(quarantine(dir.path(), "b.jsonl") == dir / kQuarantineDir / "b.jsonl.1");
  CHECK(new_shard_files(dir.path(), {}).size() == 2);  // the quarantine folder is not scanned
  CHECK_THROWS_AS(new_shard_files(dir / "missing", {}), eagle::Error);
}

TEST_CASE("the follow ledger is written whole and read back the same", "[follow]") {
  TempDir dir;
  FollowState s;
  s.rounds = 3;
  s.steps = 300;
  s.policy_version = 2;
  s.policy_dir = "/p/v2";
  s.shards = {{"a-v1.jsonl", 123, 1, 0, false}, {"b.jsonl", 456, 2, 1, true}};
  s.published = {{1, 1.5, 1, 1, 100}, {2, 1.75, 2, 3, 300}};
  s.draft = "draft-3";
  s.save(dir.path());
  const auto back = FollowState::load(dir.path());
  CHECK(back.to_json() == s.to_json());
  CHECK(back.consumed("b.jsonl"));
  CHECK_FALSE(back.consumed("c.jsonl"));
  REQUIRE(back.serving());
  CHECK(back.serving()->version == 2);
  CHECK(FollowState::load(dir / "none").rounds == 0);
  fs::create_directories(dir / "bad");
  std::ofstream(dir / "bad" / kStateFile) << "{\"rounds\": 1}";
  CHECK_THROWS_AS(FollowState::load(dir / "bad"), eagle::Error);
}

TEST_CASE("the policy pointer: latest names a subfolder, its number the version", "[follow]") {
  TempDir dir;
  auto p = read_policy(dir.path());
  CHECK(p.dir == dir.path());
  CHECK(p.version == 0);
  fs::create_directories(dir / "versions" / "12");
  std::ofstream(dir / kLatestFile) << "versions/12\n";
  p = read_policy(dir.path());
  CHECK(p.dir == dir / "versions" / "12");
  CHECK(p.version == 12);
  std::ofstream(dir / kLatestFile) << "../elsewhere\n";
  CHECK_THROWS_AS(read_policy(dir.path()), eagle::Error);
  std::ofstream(dir / kLatestFile) << "v9\n";  // missing
  CHECK_THROWS_AS(read_policy(dir.path()), eagle::Error);
}
