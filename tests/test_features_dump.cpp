// dump-features: the folder it writes (manifest, prepared data, target ends, bounded shards that
// hold exactly the target's outputs), a killed dump that continues to the same bytes, a complete
// folder left alone, other options refused, and the command line (size estimate, refusals).
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "eagle/config/resolve.h"
#include "eagle/data/binary_format.h"
#include "eagle/features/dump.h"
#include "eagle/features/store.h"
#include "eagle/model/safetensors.h"
#include "eagle/target/target.h"
#include "eagle/util/error.h"
#include "helpers.h"
#include "train_helpers.h"

using namespace eagle;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

const std::string kRoot = EAGLE_SOURCE_DIR;
const std::string kTinyLlama = kRoot + "/tests/fixtures/models/tiny-llama";

config::Options dump_options(const fs::path& out) {
  config::Options o = test::smoke_options();
  o.training_seq_len = 128;
  o.output = out.string();
  o.features_shard_mb = 1;
  return o;
}

// Every file below dir (but the lock) with its bytes.
std::map<std::string, std::string> files_of(const fs::path& dir) {
  std::map<std::string, std::string> out;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.is_regular_file() && e.path().filename() != ".lock")
      out[fs::relative(e.path(), dir).string()] = test::read_file(e.path());
  return out;
}

}  // namespace

TEST_CASE("a dump holds the target's outputs for every token, in bounded shards", "[features]") {
  test::TempDir tmp;
  auto o = dump_options(tmp / "f");
  o.features_dtype = config::TargetDtype::float32;
  const auto s = features::dump_features(o);
  const auto m = features::read_manifest(o.output);
  CHECK(m.complete);
  CHECK(m.aux_layer_ids == std::vector<std::int64_t>{1, 2, 3});
  CHECK(static_cast<std::int64_t>(m.shards.size()) == s.shards);
  CHECK(m.shards.back().split == "validation");  // smoke.json holds out 10%
  for (const auto& sh : m.shards)
    CHECK((sh.samples == 1 || static_cast<std::uint64_t>(sh.tokens) * s.bytes_per_token <= (1u << 20)));

  // The first sample of the train split: its features are the target's forward on it alone.
  auto train = data::open_dataset_file((fs::path(o.output) / data::kTrainFile).string());
  auto target = target::TargetModel::load(kTinyLlama, torch::kFloat32, torch::kCPU);
  const auto n = train.length(0);
  std::vector<std::int64_t> ids(static_cast<std::size_t>(n));
  for (std::int64_t p = 0; p < n; ++p) ids[static_cast<std::size_t>(p)] = train.token(0, p);
  auto x = torch::tensor(ids).view({1, n});
  auto ref = target.forward({x, torch::arange(n).view({1, n}), torch::zeros({1, n}, torch::kInt64)}, {});
  auto shard = model::load_safetensors((fs::path(o.output) / m.shards[0].file).string());
  CHECK(torch::allclose(shard.at("aux_hidden").narrow(0, 0, n), ref.aux_hidden[0], 1e-5, 1e-5));
  CHECK(torch::allclose(shard.at("last_hidden").narrow(0, 0, n), ref.final_hidden[0], 1e-5, 1e-5));
  CHECK(torch::equal(shard.at("target_argmax").narrow(0, 0, n).to(torch::kInt64), ref.target_argmax[0]));
  // The target's ends: enough to build the head and its teacher without the decoder layers.
  auto ends = target::TargetModel::load_ends((fs::path(o.output) / features::kFeaturesTargetDir).string(),
                                             torch::ScalarType::Undefined, torch::kCPU);
  CHECK(torch::equal(ends.lm_head, target.lm_head_weight()));
  CHECK(torch::equal(ends.embed, target.embedding_weight()));
}

TEST_CASE("a killed dump continues to the same folder; a complete one is left alone", "[features]") {
  test::TempDir tmp;
  auto straight = dump_options(tmp / "straight");
  features::dump_features(straight);

  auto o = dump_options(tmp / "killed");
  features::DumpHooks kill;
  kill.after_shard = [](std::int64_t written) {
    if (written == 2) throw Error(ErrorKind::interrupted, "killed");
  };
  CHECK_THROWS_AS(features::dump_features(o, kill), Error);
  CHECK_FALSE(features::read_manifest(o.output).complete);
  // A temporary shard a kill left behind is removed.
  test::write_file(fs::path(o.output) / features::kFeaturesShardDir / "train-00002.safetensors.tmp.12345", "torn");

  const auto resumed = features::dump_features(o);
  CHECK(resumed.shards_written == resumed.shards - 2);
  CHECK(files_of(tmp / "straight") == files_of(tmp / "killed"));

  const auto again = features::dump_features(o);
  CHECK(again.already_complete);
  CHECK(again.shards_written == 0);

  auto other = o;
  other.features_dtype = config::TargetDtype::float32;
  try {
    features::dump_features(other);
    FAIL("other options were accepted");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::usage);
    CHECK_THAT(e.format(), Catch::Contains("features_dtype"));
  }
}

TEST_CASE("dump-features on the command line: size estimate, progress, refusals", "[features]") {
  test::TempDir tmp;
  const std::string args = "dump-features " + test::smoke_args() + " --training_seq_len 64 --output ";
  auto r = test::run_cli(args + (tmp / "f").string());
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.output,
             Catch::Contains("bytes per token") && Catch::Contains("GB free") && Catch::Contains("dump 100%"));
  auto again = test::run_cli(args + (tmp / "f").string());
  CHECK(again.exit_code == 0);
  CHECK_THAT(again.output, Catch::Contains("nothing to do"));

  // A folder holding the user's files is never written into.
  fs::create_directories(tmp / "busy");
  test::write_file(tmp / "busy" / "notes.txt", "mine");
  auto busy = test::run_cli(args + (tmp / "busy").string());
  CHECK(busy.exit_code == 4);
  CHECK_THAT(busy.output, Catch::Contains("notes.txt"));
  CHECK(test::read_file(tmp / "busy" / "notes.txt") == "mine");

  // train and eval read the folder without a target.
  auto t = test::run_cli("train --config " + kRoot + "/configs/smoke.json --data_path '' --model_name_or_path '' " +
                         "--features_path " + (tmp / "f").string() + " --training_seq_len 64 --max_steps 2 " +
                         "--eval_steps 0 --save_steps 0 --output_dir " + (tmp / "run").string());
  INFO(t.output);
  REQUIRE(t.exit_code == 0);
  CHECK_THAT(t.output, Catch::Contains("no target forward in the step") &&
                           Catch::Contains("the acceptance rate (AR) is not measured"));
  auto e = test::run_cli("eval --features_path " + (tmp / "f").string() + " --checkpoint " +
                         (tmp / "run" / "checkpoint-2").string() + " --training_seq_len 64 --json");
  INFO(e.output);
  REQUIRE(e.exit_code == 0);
  auto j = json::parse(e.output.substr(e.output.find("{\n")));
  CHECK(j["eval_loss"].get<double>() > 0);
  CHECK_FALSE(j.contains("ar"));
}

TEST_CASE("dump-features removes only what its own unfinished dump wrote", "[features]") {
  test::TempDir tmp;
  // A folder with names a dump writes but no marker (a prepared dataset, say) is refused, untouched.
  fs::create_directories(tmp / "prepared");
  test::write_file(tmp / "prepared" / data::kTrainFile, "mine");
  test::write_file(tmp / "prepared" / data::kStatsFile, "{}");
  try {
    features::dump_features(dump_options(tmp / "prepared"));
    FAIL("a folder without the dump's marker was taken for an unfinished dump");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::output);
    CHECK_THAT(e.format(), Catch::Contains("not an unfinished dump") && Catch::Contains("train.bin"));
  }
  CHECK(test::read_file(tmp / "prepared" / data::kTrainFile) == "mine");

  // This tool's unfinished dump (its marker first): its files and dead writers' temporaries go.
  fs::create_directories(tmp / "ours");
  test::write_file(tmp / "ours" / ".eagle-dump", "eagle-train dump-features\n");
  test::write_file(tmp / "ours" / data::kTrainFile, "torn");
  test::write_file(tmp / "ours" / ".tmp-stats.json.12345", "torn");
  const auto s = features::dump_features(dump_options(tmp / "ours"));
  CHECK(features::read_manifest((tmp / "ours").string()).complete);
  CHECK(s.shards_written == s.shards);
  CHECK_FALSE(fs::exists(tmp / "ours" / ".tmp-stats.json.12345"));

  // A symlinked features/ is refused, and nothing inside its target is deleted.
  fs::create_directories(tmp / "elsewhere");
  test::write_file(tmp / "elsewhere" / "train-00000.safetensors.tmp.999999999", "someone's");
  fs::create_directories(tmp / "linked");
  test::write_file(tmp / "linked" / ".eagle-dump", "eagle-train dump-features\n");
  fs::create_directory_symlink(tmp / "elsewhere", tmp / "linked" / features::kFeaturesShardDir);
  CHECK_THROWS_WITH(features::dump_features(dump_options(tmp / "linked")), Catch::Contains("symbolic link"));
  CHECK(fs::exists(tmp / "elsewhere" / "train-00000.safetensors.tmp.999999999"));
}

TEST_CASE("dump-features refuses an --output equal to, inside or around --data_path", "[features]") {
  test::TempDir tmp;
  auto p = test::run_cli("prepare --input " + kRoot + "/tests/fixtures/data/smoke.jsonl --training_seq_len 64 " +
                         "--output " + (tmp / "P").string());
  INFO(p.output);
  REQUIRE(p.exit_code == 0);
  const auto before = files_of(tmp / "P");
  const std::string args = "dump-features --config " + kRoot + "/configs/smoke.json --model_name_or_path " +
                           kTinyLlama + " --training_seq_len 64";
  // Equal to, inside and around it.
  for (const fs::path& out : {tmp / "P", tmp / "P" / "f", tmp.path()}) {
    auto r = test::run_cli(args + " --data_path " + (tmp / "P").string() + " --output " + out.string());
    INFO(r.output);
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.output, Catch::Contains("equal to, inside or around --data_path"));
  }
  CHECK(files_of(tmp / "P") == before);
  CHECK_FALSE(fs::exists(tmp / "P" / "f"));
}
