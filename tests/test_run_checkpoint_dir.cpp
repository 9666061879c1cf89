// Checkpoint folders: temporary folder then rename then COMPLETE, listing, rotation, the best
// checkpoint, leftovers, resume resolution and the output_dir guard.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <sys/stat.h>

#include <filesystem>
#include <stdexcept>

#include "eagle/run/checkpoint_dir.h"
#include "eagle/util/error.h"
#include "helpers.h"

using namespace eagle::run;
namespace fs = std::filesystem;
using eagle::test::read_file;
using eagle::test::write_file;

namespace {

// A checkpoint whose files say which step they belong to.
CheckpointRef save_step(CheckpointDir& dir, std::int64_t step) {
  return dir.save(step, [step](const fs::path& folder) {
    write_file(folder / "state.json", "{\"step\": " + std::to_string(step) + "}");
    fs::create_directories(folder / "sub");
    write_file(folder / "sub" / "weights.bin", std::string(16, static_cast<char>(step)));
  });
}

std::vector<std::int64_t> steps_of(const std::vector<CheckpointRef>& refs) {
  std::vector<std::int64_t> out;
  for (const auto& r : refs) out.push_back(r.step);
  return out;
}

template <typename F>
eagle::Error error_of(F&& f) {
  try {
    f();
  } catch (const eagle::Error& e) {
    return e;
  }
  FAIL("no eagle::Error was thrown");
  throw std::logic_error("unreachable");
}

}  // namespace

TEST_CASE("save writes into a temporary folder, renames it, then marks it complete", "[run]") {
  eagle::test::TempDir tmp;
  CheckpointDir dir(tmp / "out");
  bool called = false;
  CheckpointRef ref = dir.save(5, [&](const fs::path& folder) {
    called = true;
    CHECK(folder == tmp / "out" / ".tmp-checkpoint-5");
    CHECK_FALSE(fs::exists(tmp / "out" / "checkpoint-5"));
    write_file(folder / "state.json", "{}");
  });
  CHECK(called);
  CHECK(ref.step == 5);
  CHECK(ref.path == tmp / "out" / "checkpoint-5");
  CHECK(read_file(ref.path / "state.json") == "{}");
  CHECK(fs::is_regular_file(ref.path / "COMPLETE"));
  CHECK(fs::file_size(ref.path / "COMPLETE") == 0);
  CHECK_FALSE(fs::exists(tmp / "out" / ".tmp-checkpoint-5"));

  // A callback that fails leaves neither a checkpoint nor a temporary folder.
  CHECK_THROWS_WITH(dir.save(6, [](const fs::path& folder) {
    write_file(folder / "half", "x");
    throw std::runtime_error("disk full");
  }), "disk full");
  CHECK_FALSE(fs::exists(tmp / "out" / "checkpoint-6"));
  CHECK_FALSE(fs::exists(tmp / "out" / ".tmp-checkpoint-6"));

  // Saving a step again (a resumed run) replaces the old folder's content entirely.
  dir.save(5, [](const fs::path& folder) { write_file(folder / "other.json", "[]"); });
  CHECK_FALSE(fs::exists(ref.path / "state.json"));
  CHECK(read_file(ref.path / "other.json") == "[]");
  CHECK(fs::exists(ref.path / "COMPLETE"));
}

TEST_CASE("only complete checkpoint-<step> folders are listed, in step order", "[run]") {
  eagle::test::TempDir tmp;
  CheckpointDir dir(tmp.path());
  CHECK(dir.list_complete().empty());
  CHECK_FALSE(dir.latest());
  for (std::int64_t s : {10, 9, 100}) save_step(dir, s);
  fs::create_directories(tmp / "checkpoint-200");      // renamed but not marked: incomplete
  fs::create_directories(tmp / "checkpoint-x1");
  fs::create_directories(tmp / "checkpoint-");
  write_file(tmp / "checkpoint-300", "a file, not a folder");
  fs::create_directories(tmp / "checkpoint-best");
  write_file(tmp / "checkpoint-best" / "COMPLETE", "");
  CHECK(steps_of(dir.list_complete()) == std::vector<std::int64_t>{9, 10, 100});
  CHECK(dir.latest()->step == 100);
  CHECK(dir.latest()->path == tmp / "checkpoint-100");
}

TEST_CASE("rotation keeps the newest save_total_limit checkpoints", "[run]") {
  eagle::test::TempDir tmp;
  CheckpointDir dir(tmp.path());
  for (std::int64_t s : {1, 2, 3, 4}) save_step(dir, s);
  CHECK(dir.rotate(0).empty());  // 0: keep all
  CHECK(dir.list_complete().size() == 4);
  CHECK(dir.update_best(1, "ar", 2.0));
  CHECK(steps_of(dir.rotate(2)) == std::vector<std::int64_t>{1, 2});
  CHECK(steps_of(dir.list_complete()) == std::vector<std::int64_t>{3, 4});
  CHECK_FALSE(fs::exists(tmp / "checkpoint-1"));
  // The best is kept apart from the limit and still holds step 1's files.
  REQUIRE(dir.best());
  CHECK(dir.best()->step == 1);
  CHECK(read_file(tmp / "checkpoint-best" / "state.json") == "{\"step\": 1}");
  CHECK(read_file(tmp / "checkpoint-best" / "sub" / "weights.bin") == std::string(16, '\x01'));
  CHECK(dir.rotate(5).empty());
}

TEST_CASE("a best-checkpoint record with a field of another JSON type is refused by name", "[run]") {
  eagle::test::TempDir tmp;
  CheckpointDir dir(tmp.path());
  save_step(dir, 1);
  REQUIRE(dir.update_best(1, "ar", 2.0));
  eagle::test::write_file(tmp / CheckpointDir::kBestFolder / CheckpointDir::kBestJson,
                          R"({"step": 1, "metric": 7, "value": 2.0})");
  CHECK_THROWS_AS(dir.best(), eagle::Error);  // was nlohmann's type_error (exit 1)
  CHECK_THROWS_WITH(dir.best(), Catch::Contains("best.json"));
}

TEST_CASE("the best checkpoint follows the highest metric", "[run]") {
  eagle::test::TempDir tmp;
  CheckpointDir dir(tmp.path());
  for (std::int64_t s : {1, 2, 3}) save_step(dir, s);
  CHECK_FALSE(dir.best());
  CHECK(dir.update_best(1, "ar", 1.5));
  CHECK_FALSE(dir.update_best(2, "ar", 1.4));
  CHECK_FALSE(dir.update_best(2, "ar", 1.5));  // a tie keeps the earlier one
  CHECK_FALSE(dir.update_best(2, "ar", std::nan("")));
  CHECK(dir.best()->step == 1);
  CHECK(dir.update_best(3, "ar", 2.25));
  auto best = dir.best();
  REQUIRE(best);
  CHECK(best->step == 3);
  CHECK(best->metric == "ar");
  CHECK(best->value == 2.25);
  CHECK(nlohmann::json::parse(read_file(tmp / "checkpoint-best" / "best.json")) ==
        nlohmann::json{{"step", 3}, {"metric", "ar"}, {"value", 2.25}});
  CHECK(read_file(tmp / "checkpoint-best" / "state.json") == "{\"step\": 3}");
  CHECK(fs::exists(tmp / "checkpoint-best" / "COMPLETE"));
  // Hard links: the replica shares the file, it does not copy it.
  struct stat a {}, b {};
  REQUIRE(::stat((tmp / "checkpoint-3" / "sub" / "weights.bin").c_str(), &a) == 0);
  REQUIRE(::stat((tmp / "checkpoint-best" / "sub" / "weights.bin").c_str(), &b) == 0);
  CHECK(a.st_ino == b.st_ino);
  CHECK_FALSE(fs::exists(tmp / "checkpoint-3" / "best.json"));  // best.json is the replica's own
  // The best must be a saved, complete checkpoint.
  CHECK_THROWS_AS(dir.update_best(7, "ar", 9.0), eagle::Error);
  CHECK(dir.best()->step == 3);
  // Only the best's own swap folders are used.
  for (const auto& e : fs::directory_iterator(tmp.path())) CHECK(e.path().filename().string().rfind(".tmp", 0) != 0);
}

TEST_CASE("leftovers of interrupted writes are cleaned or restored", "[run]") {
  eagle::test::TempDir tmp;
  CheckpointDir dir(tmp.path());
  save_step(dir, 1);
  save_step(dir, 2);
  dir.update_best(1, "ar", 2.0);
  // A crash mid-save, mid-metrics rewrite, and between the two renames of a best swap and of a
  // checkpoint replacement.
  fs::create_directories(tmp / ".tmp-checkpoint-3");
  write_file(tmp / ".tmp-metrics.jsonl.123", "x");
  fs::rename(tmp / "checkpoint-best", tmp / ".tmp-old-checkpoint-best");
  fs::create_directories(tmp / ".tmp-checkpoint-best");
  fs::rename(tmp / "checkpoint-2", tmp / ".tmp-old-checkpoint-2");
  // ... and after the new checkpoint-1 was renamed into place but before its COMPLETE marker.
  fs::rename(tmp / "checkpoint-1", tmp / ".tmp-old-checkpoint-1");
  fs::create_directories(tmp / "checkpoint-1");
  write_file(tmp / "checkpoint-1" / "state.json", "new, unmarked");
  CHECK(dir.clean_temporaries() == 3);
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(tmp.path())) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  CHECK(names == std::vector<std::string>{"checkpoint-1", "checkpoint-2", "checkpoint-best"});
  CHECK(dir.best()->step == 1);
  CHECK(read_file(tmp / "checkpoint-1" / "state.json") == "{\"step\": 1}");
  CHECK(read_file(tmp / "checkpoint-2" / "state.json") == "{\"step\": 2}");
  // A newer complete replacement wins over the moved-aside old one, which is removed.
  fs::create_directories(tmp / ".tmp-old-checkpoint-2");
  write_file(tmp / ".tmp-old-checkpoint-2" / "COMPLETE", "");
  CHECK(dir.clean_temporaries() == 1);
  CHECK(read_file(tmp / "checkpoint-2" / "state.json") == "{\"step\": 2}");
  // A rotation killed after it removed checkpoint-2's marker leaves a full folder nothing would
  // ever remove: it goes at the next start, as does a save killed before its marker.
  fs::remove(tmp / "checkpoint-2" / "COMPLETE");
  fs::create_directories(tmp / "checkpoint-7");
  write_file(tmp / "checkpoint-7" / "model.safetensors", "partial");
  CHECK(dir.clean_temporaries() == 2);
  CHECK_FALSE(fs::exists(tmp / "checkpoint-2"));
  CHECK_FALSE(fs::exists(tmp / "checkpoint-7"));
  CHECK(fs::exists(tmp / "checkpoint-1" / "COMPLETE"));
}

TEST_CASE("find_resume: empty, auto, a path; incomplete or missing ones are refused", "[run]") {
  eagle::test::TempDir tmp;
  CHECK_FALSE(find_resume("", tmp.path()));
  CHECK_FALSE(find_resume("auto", tmp.path()));
  CheckpointDir dir(tmp.path());
  save_step(dir, 4);
  save_step(dir, 12);
  fs::create_directories(tmp / "checkpoint-20");  // newer but incomplete
  auto a = find_resume("auto", tmp.path());
  REQUIRE(a);
  CHECK(a->step == 12);
  auto p = find_resume((tmp / "checkpoint-4").string() + "/", tmp / "elsewhere");
  REQUIRE(p);
  CHECK(p->step == 4);
  dir.update_best(4, "ar", 3.0);
  CHECK(find_resume((tmp / "checkpoint-best").string(), tmp.path())->step == 4);

  auto missing = error_of([&] { find_resume((tmp / "checkpoint-99").string(), tmp.path()); });
  CHECK(missing.kind() == eagle::ErrorKind::input);
  CHECK(missing.format() == (tmp / "checkpoint-99").string() +
                                ": resume_from_checkpoint: the checkpoint to resume from does not exist (hint: give a "
                                "checkpoint-<step> folder, or auto for the newest in output_dir)");
  auto incomplete = error_of([&] { find_resume((tmp / "checkpoint-20").string(), tmp.path()); });
  CHECK(incomplete.kind() == eagle::ErrorKind::input);
  CHECK_THAT(incomplete.format(), Catch::Contains("incomplete") && Catch::Contains("expected a COMPLETE marker"));
}

TEST_CASE("the output_dir guard protects another run's files", "[run]") {
  eagle::test::TempDir tmp;
  fs::path out = tmp / "run";
  // A new folder: created, nothing to resume.
  CHECK_FALSE(prepare_output_dir(out, "", false));
  CHECK(fs::is_directory(out));

  // An earlier run: a checkpoint, metrics, events, plus a file of the user's own.
  CheckpointDir dir(out);
  save_step(dir, 3);
  write_file(out / "metrics.jsonl", "{\"step\":3}\n");
  write_file(out / "events.out.tfevents.1.host", "");
  write_file(out / "notes.txt", "mine");
  fs::create_directories(out / ".tmp-checkpoint-4");

  auto refused = error_of([&] { prepare_output_dir(out, "", false); });
  CHECK(refused.kind() == eagle::ErrorKind::usage);
  CHECK(refused.format() ==
        out.string() +
            ": output_dir: output_dir holds another run: expected a new or empty run folder, found "
            "checkpoint-3, events.out.tfevents.1.host, metrics.jsonl (hint: "
            "--resume_from_checkpoint auto continues that run; --overwrite_output_dir replaces it)");
  CHECK(fs::exists(out / "checkpoint-3"));
  CHECK(fs::exists(out / ".tmp-checkpoint-4"));  // a refused start touches nothing

  // auto continues it (cleaning the leftovers); auto together with overwrite is a contradiction.
  auto resume = prepare_output_dir(out, "auto", false);
  REQUIRE(resume);
  CHECK(resume->step == 3);
  CHECK_FALSE(fs::exists(out / ".tmp-checkpoint-4"));
  CHECK(error_of([&] { prepare_output_dir(out, "auto", true); }).kind() == eagle::ErrorKind::usage);
  CHECK(fs::exists(out / "checkpoint-3"));

  // Resuming from another folder's checkpoint into this one still needs overwrite.
  fs::path other = tmp / "other";
  CheckpointDir other_dir(other);
  save_step(other_dir, 7);
  CHECK(error_of([&] { prepare_output_dir(out, (other / "checkpoint-7").string(), false); }).kind() ==
        eagle::ErrorKind::usage);

  // overwrite deletes the run's files and nothing else.
  auto from_other = prepare_output_dir(out, (other / "checkpoint-7").string(), true);
  REQUIRE(from_other);
  CHECK(from_other->step == 7);
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(out)) names.push_back(e.path().filename().string());
  CHECK(names == std::vector<std::string>{"notes.txt"});

  // An attempt that never saved a checkpoint is replaced under auto, refused without it.
  write_file(out / "metrics.jsonl", "{\"step\":1}\n");
  CHECK(error_of([&] { prepare_output_dir(out, "", false); }).kind() == eagle::ErrorKind::usage);
  CHECK_FALSE(prepare_output_dir(out, "auto", false));
  CHECK_FALSE(fs::exists(out / "metrics.jsonl"));
  CHECK(read_file(out / "notes.txt") == "mine");
}

TEST_CASE("rotation and cleaning never follow a symlinked checkpoint-<step> (another run's)", "[run]") {
  eagle::test::TempDir tmp;
  CheckpointDir other(tmp / "other");
  save_step(other, 1);
  save_step(other, 7);
  fs::create_directories(tmp / "other" / "checkpoint-9");  // incomplete: cleaning would remove it
  CheckpointDir dir(tmp / "run");
  save_step(dir, 5);
  fs::create_directory_symlink(tmp / "other" / "checkpoint-1", tmp / "run" / "checkpoint-1");
  fs::create_directory_symlink(tmp / "other" / "checkpoint-9", tmp / "run" / "checkpoint-9");
  save_step(dir, 6);
  CHECK(steps_of(dir.list_complete()) == std::vector<std::int64_t>{5, 6});
  CHECK(steps_of(dir.rotate(1)) == std::vector<std::int64_t>{5});
  dir.clean_temporaries();
  // The other run's checkpoints are whole, and the links are left alone.
  CHECK(fs::exists(tmp / "other" / "checkpoint-1" / CheckpointDir::kComplete));
  CHECK(read_file(tmp / "other" / "checkpoint-1" / "state.json") == "{\"step\": 1}");
  CHECK(fs::is_directory(tmp / "other" / "checkpoint-9"));
  CHECK(fs::is_symlink(tmp / "run" / "checkpoint-1"));
  CHECK(fs::is_symlink(tmp / "run" / "checkpoint-9"));
  CHECK(steps_of(other.list_complete()) == std::vector<std::int64_t>{1, 7});
}
