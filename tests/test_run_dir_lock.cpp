// The exclusive lock of an output: a second holder is refused naming the first one's pid; the lock
// goes with its holder (destroyed, or the process dead) and so does its file, created 0666 within
// the umask; a lock file no process holds never blocks.
#include <catch2/catch.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>

#include "eagle/run/dir_lock.h"
#include "eagle/util/error.h"
#include "helpers.h"

using eagle::run::DirLock;
namespace fs = std::filesystem;

TEST_CASE("an output lock has one holder at a time and names it", "[run]") {
  eagle::test::TempDir tmp;
  const fs::path lock_file = tmp / ".lock";
  {
    DirLock first(lock_file, "output_dir");
    try {
      DirLock second(lock_file, "output_dir");
      FAIL("a second lock on the same file was granted");
    } catch (const eagle::Error& e) {
      CHECK(e.kind() == eagle::ErrorKind::usage);
      CHECK(e.exit_code() == eagle::ExitCode::usage);
      CHECK_THAT(e.format(), Catch::Contains("in use by another eagle-train process") &&
                                 Catch::Contains("pid " + std::to_string(::getpid())) &&
                                 Catch::Contains(tmp.path().string()));
    }
  }
  CHECK_FALSE(fs::exists(lock_file));  // removed with its release: nothing left to block anyone
  {
    DirLock again(lock_file, "output_dir");  // released with its holder
    CHECK(fs::exists(lock_file));
  }
  {
    DirLock beside(tmp / "out.lock", "the prepare output", /*beside_output=*/true);
    CHECK(fs::exists(tmp / "out.lock"));
  }
  CHECK_FALSE(fs::exists(tmp / "out.lock"));
}

TEST_CASE("a lock file is created 0666 within the umask, and one no process holds never blocks", "[run]") {
  eagle::test::TempDir tmp;
  for (const mode_t mask : {mode_t{0}, mode_t{002}, mode_t{022}}) {
    const mode_t old = ::umask(mask);
    struct stat st {};
    {
      DirLock lock(tmp / ".lock", "output_dir");
      REQUIRE(::stat((tmp / ".lock").c_str(), &st) == 0);
    }
    ::umask(old);
    CHECK((st.st_mode & 0777) == (0666 & ~mask));  // another user of the group can take it next
  }
  // Left by a killed holder (the kernel dropped its flock): taken at once, whatever its mode.
  eagle::test::write_file(tmp / ".lock", "999999999\n");
  fs::permissions(tmp / ".lock", fs::perms::owner_read | fs::perms::group_read | fs::perms::others_read);
  {
    DirLock taken(tmp / ".lock", "output_dir");
    CHECK(fs::exists(tmp / ".lock"));
  }
  CHECK_FALSE(fs::exists(tmp / ".lock"));
}

TEST_CASE("a run leaves no lock file behind in its output_dir", "[run]") {
  eagle::test::TempDir tmp;
  auto r =
      eagle::test::run_cli("train " + eagle::test::smoke_args() +
                           " --max_steps 1 --eval_steps 0 --eval_num_prompts 0 --output_dir " + (tmp / "run").string());
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK(fs::exists(tmp / "run" / "summary.json"));
  CHECK_FALSE(fs::exists(tmp / "run" / eagle::run::kLockFile));
  // An error exit releases it too (a missed gate: exit 6 after the run).
  auto gate =
      eagle::test::run_cli("train " + eagle::test::smoke_args() + " --max_steps 1 --eval_steps 0 " +
                           "--eval_num_prompts 0 --max_final_loss 0.01 --output_dir " + (tmp / "run2").string());
  CHECK(gate.exit_code == 6);
  CHECK(fs::exists(tmp / "run2" / "summary.json"));
  CHECK_FALSE(fs::exists(tmp / "run2" / eagle::run::kLockFile));
}
