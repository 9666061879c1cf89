// Atomic writes and the one temporary-name rule (util/fs_sync.h): a write replaces the whole file and
// leaves no temporary, a failed write leaves the old file, and the cleaners recognise every spelling.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <algorithm>
#include <stdexcept>

#include "eagle/util/fs_sync.h"
#include "helpers.h"

using namespace eagle;
namespace fs = std::filesystem;

namespace {

std::vector<std::string> names_in(const fs::path& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

TEST_CASE("write_atomic replaces the whole file and leaves no temporary", "[util]") {
  test::TempDir tmp;
  const auto file = tmp / "state.json";
  util::write_file_atomic(file, "a much longer first content\n");
  util::write_file_atomic(file, "short\n");
  CHECK(test::read_file(file) == "short\n");
  util::write_atomic(file, [](std::ostream& out) { out << "from " << 2 << " parts"; });
  CHECK(test::read_file(file) == "from 2 parts");
  CHECK(names_in(tmp.path()) == std::vector<std::string>{"state.json"});

  // A writer that fails leaves the old file and no temporary.
  CHECK_THROWS_WITH(util::write_atomic(file, [](std::ostream& out) {
    out << "half";
    throw std::runtime_error("disk full");
  }), "disk full");
  CHECK(test::read_file(file) == "from 2 parts");
  CHECK(names_in(tmp.path()) == std::vector<std::string>{"state.json"});

  // A folder that does not exist: Error(output) naming the temporary file.
  try {
    util::write_file_atomic(tmp / "none" / "x.json", "x");
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::output);
    CHECK_THAT(e.file(), Catch::Contains("none") && Catch::Contains("x.json"));
  }
}

TEST_CASE("is_temporary recognises temporary_name's output and the older spellings", "[util]") {
  const auto name = util::temporary_name(fs::path("out") / "model.safetensors");
  CHECK(name.parent_path() == fs::path("out"));
  CHECK(name.filename().string() == ".tmp-model.safetensors." + std::to_string(::getpid()));
  CHECK(util::temporary_name("x.json").parent_path() == fs::path("."));
  CHECK(util::is_temporary(name.filename().string()));
  CHECK(util::is_temporary(name.filename().string(), "model.safetensors"));
  CHECK_FALSE(util::is_temporary(name.filename().string(), "model"));

  const auto folder = util::temporary_folder_name(fs::path("run") / "checkpoint-5");
  CHECK(folder == fs::path("run") / ".tmp-checkpoint-5");
  CHECK(util::is_temporary(folder.filename().string()));
  CHECK(util::is_temporary(folder.filename().string(), "checkpoint-5"));

  // The spellings of the writers before the one rule.
  CHECK(util::is_temporary("train-00002.safetensors.tmp.12345"));
  CHECK(util::is_temporary("config.json.tmp-77"));
  CHECK(util::is_temporary("ds.tmp-99999", "ds"));
  CHECK(util::is_temporary(".tmp-old-checkpoint-3"));

  CHECK_FALSE(util::is_temporary("train-00002.safetensors"));
  CHECK_FALSE(util::is_temporary("notes.tmp.txt"));
  CHECK_FALSE(util::is_temporary("ds.tmp-99999", "other"));
  CHECK_FALSE(util::is_temporary("ds", "ds"));
  CHECK_FALSE(util::is_temporary(".tmp-ds.x", "ds"));
}

TEST_CASE("atomic writes replace the file whole and leave no temporary", "[util]") {
  eagle::test::TempDir tmp;
  util::write_file_atomic(tmp / "a.json", "old");
  util::write_file_atomic(tmp / "a.json", "new");
  CHECK(eagle::test::read_file(tmp / "a.json") == "new");
  std::size_t entries = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(tmp.path())) ++entries;
  CHECK(entries == 1);
  CHECK_THROWS_AS(util::write_file_atomic(tmp / "missing" / "a.json", "x"), eagle::Error);
}

TEST_CASE("write_atomic never writes through a link planted at its temporary name", "[util]") {
  test::TempDir tmp;
  test::write_file(tmp / "victim", "precious");
  const fs::path target = tmp / "stats.json";
  fs::create_symlink(tmp / "victim", util::temporary_name(target));
  CHECK_THROWS_AS(util::write_file_atomic(target, "{}"), Error);
  CHECK(test::read_file(tmp / "victim") == "precious");
  CHECK_FALSE(fs::exists(target));
  // A regular file there is a dead writer's leftover (the name holds this pid) and is replaced.
  fs::remove(util::temporary_name(target));
  test::write_file(util::temporary_name(target), "torn");
  util::write_file_atomic(target, "{}");
  CHECK(test::read_file(target) == "{}");
  CHECK_FALSE(fs::exists(util::temporary_name(target)));
}
